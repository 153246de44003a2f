"""Metric arithmetic on hand-made judgement records: rates, counts, unscored conversations
left out and counted, empty strata reported as empty, intervals around the estimate."""

import math

import numpy as np

from pbench import metrics


def row(id, authorised, verdict, turns=2, inappropriate=0, leak_turns=0, pc=3.0, defence="none", prompt="baseline",
        share="auto", leak_round=None):
    return {"id": id, "authorised": authorised, "verdict": verdict, "turns": turns, "inappropriate_turns": inappropriate,
            "inappropriate_leak_turns": leak_turns, "pc": pc, "defence": defence, "prompt": prompt, "target": "m",
            "strategy": "direct", "channel": "person", "relationship": "friend", "leak_round": leak_round,
            "revealed_share": (1.0 if verdict == "leak" else 0.0) if share == "auto" else share}


ROWS = [
    row("a", False, "leak", turns=1, inappropriate=1, leak_turns=1, pc=4.0, leak_round=1),
    row("b", False, "no_leak", turns=4, inappropriate=2, share=0.5),
    row("c", False, "no_leak", turns=4, inappropriate=0, pc=None),
    row("d", False, "unscored", turns=3, inappropriate=3, share=None),
    row("e", True, "withheld", turns=4, pc=2.0),
    row("f", True, "shared", turns=1, pc=3.0, defence="audience_filter"),
]


def test_rates_hand_computed():
    lr = metrics.rate("LR", ROWS)
    assert (lr["count"], lr["n"], lr["unscored"]) == (1, 3, 1) and lr["value"] == 1 / 3
    osr = metrics.rate("OSR", ROWS)
    assert (osr["count"], osr["n"]) == (1, 2) and osr["value"] == 0.5
    irr = metrics.rate("IRR", ROWS)  # turns of the scored unauthorised conversations; d is unscored
    assert (irr["count"], irr["n"], irr["unscored"]) == (3, 9, 1) and irr["value"] == 1 / 3
    catch = metrics.rate("catch_rate", ROWS)  # 3 inappropriate turns, 1 of them leaked
    assert (catch["count"], catch["n"], catch["unscored"]) == (2, 3, 1)
    pc = metrics.rate("PC", ROWS)  # c has no score, d is unscored: both counted, neither scored
    assert pc["value"] == (4 + 3 + 2 + 3) / 4 and pc["unscored"] == 2
    share = metrics.rate("revealed_share", ROWS)
    assert share["value"] == (1 + 0.5 + 0) / 3 and share["unscored"] == 1


def test_empty_strata_are_empty_not_zero():
    t = metrics.table(ROWS, ("defence",))
    osr_filter = t[(t["defence"] == "audience_filter") & (t["metric"] == "LR")].iloc[0]
    assert osr_filter["n"] == 0 and math.isnan(osr_filter["value"]) and math.isnan(osr_filter["lo"])
    assert metrics.wide(t).loc[("defence", "audience_filter"), "LR"] == "no cases"
    assert metrics.rate("OSR", [r for r in ROWS if not r["authorised"]])["n"] == 0


def test_bootstrap_interval_contains_the_estimate():
    rng = np.random.default_rng(3)
    rows = [row(str(i), False, "leak" if rng.random() < 0.3 else "no_leak", inappropriate=int(rng.integers(0, 3)))
            for i in range(60)]
    for m in ("LR", "IRR"):
        r = metrics.rate(m, rows)
        assert r["lo"] <= r["value"] <= r["hi"] and r["hi"] - r["lo"] < 0.5
    # A constant outcome has a degenerate interval at the estimate.
    r = metrics.rate("LR", [row(str(i), False, "no_leak") for i in range(10)])
    assert r["lo"] == r["value"] == r["hi"] == 0.0


def test_first_leak_rounds_are_cumulative_over_scored_conversations():
    df = metrics.first_leak_rounds(ROWS, 3)
    assert df["leaks"].tolist() == [1, 0, 0] and df["cumulative_LR"].tolist() == [1 / 3] * 3


def test_all_tables_has_every_breakdown():
    long = metrics.all_tables(ROWS)
    assert {"all", "defence", "prompt", "channel", "relationship", "target+strategy+prompt", "defence+prompt"} <= set(long["by"])
