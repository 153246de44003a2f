"""Findings built from the numbers: differences with intervals that respect the secrets,
sentences that say which comparisons the run can and cannot tell apart, and what it cannot
conclude."""

import math

import pytest

from pbench import findings, metrics
from tests.test_metrics import row


def arms(leaks_a, leaks_b, secrets, per_secret=2, **kw):
    """Two prompts probing the same ``secrets``: the first ``leaks_a`` (``leaks_b``)
    secrets leak in every conversation of arm a (b)."""
    rows = []
    for prompt, leaks in (("privacy_aware", leaks_a), ("baseline", leaks_b)):
        for s in range(secrets):
            for j in range(per_secret):
                rows.append(row(f"{prompt}-{s}-{j}", False, "leak" if s < leaks else "no_leak", secret=f"s{s}",
                                prompt=prompt, inappropriate=1, leak_turns=int(s < leaks), **kw))
    return rows


def split(rows):
    return ([r for r in rows if r["prompt"] == "privacy_aware"], [r for r in rows if r["prompt"] == "baseline"])


def test_a_large_difference_over_many_secrets_is_conclusive():
    a, b = split(arms(2, 30, secrets=40))
    d = metrics.difference("LR", a, b)
    assert d["value"] == pytest.approx(2 / 40 - 30 / 40)
    assert d["lo"] <= d["value"] <= d["hi"] < 0 and d["conclusive"]


def test_a_difference_over_few_secrets_is_not_conclusive():
    a, b = split(arms(0, 2, secrets=3, per_secret=4))  # 0/12 against 8/12, but 3 secrets
    d = metrics.difference("LR", a, b)
    assert d["value"] == pytest.approx(-8 / 12)
    assert d["lo"] < d["value"] < d["hi"] and d["hi"] > 0 and not d["conclusive"]
    # The interval is no narrower than Newcombe's from the arms' own intervals.
    ra, rb = d["a"], d["b"]
    assert d["lo"] <= d["value"] - math.hypot(ra["value"] - ra["lo"], rb["hi"] - rb["value"]) + 1e-12


def test_an_empty_arm_gives_no_difference():
    a, b = split(arms(1, 1, secrets=5))
    d = metrics.difference("OSR", a, b)  # nobody authorised: nothing to compare
    assert math.isnan(d["value"]) and not d["conclusive"]


def test_unpaired_runs_with_different_secrets():
    a = [row(f"a{i}", False, "leak" if i < 25 else "no_leak", secret=f"x{i}") for i in range(30)]
    b = [row(f"b{i}", False, "leak" if i < 2 else "no_leak", secret=f"y{i}") for i in range(30)]
    d = metrics.difference("LR", a, b, paired=False)
    assert d["value"] == pytest.approx(23 / 30) and d["lo"] > 0 and d["conclusive"]
    assert d["hi"] <= 1.0 + 1e-9


def test_findings_state_the_prompt_effect_from_the_numbers():
    rows = arms(2, 30, secrets=40)
    found = findings.findings(rows)
    prompt = [f for f in found if f.section == "System prompt" and f.data["metric"] == "LR"]
    assert len(prompt) == 1 and prompt[0].conclusive
    assert "privacy-aware minus baseline: -70.0 points" in prompt[0].text
    assert "the data tell the two apart" in prompt[0].text and "Paper's Table 2: -10.68 points" in prompt[0].text
    overall = next(f for f in found if f.section == "Overall" and f.data["metric"] == "LR")
    assert "64/160 conversations, 40 secrets" in overall.text and "Paper's Table 2" in overall.text
    md = findings.markdown(found)
    assert "### System prompt" in md and f"- **{prompt[0].text}**" in md


def test_findings_say_what_a_small_run_cannot_conclude():
    rows = arms(0, 1, secrets=3)
    rows.append(row("u", False, "unscored", secret="s0", reason="judges unparsed"))
    found = findings.findings(rows)
    limits = " ".join(f.text for f in found if f.section == "What cannot be concluded")
    assert "The run is small: 12 scored conversations over 3 secrets" in limits
    assert "1 of 13 conversations could not be scored (1 judges unparsed); it is in no rate" in limits
    assert "prompt privacy-aware against baseline on LR" in limits  # the prompt effect cannot be decided
    assert "Only one defence was run (none)" in limits and "Only one target was run (m)" in limits
    assert "over-secrecy rate (OSR) with prompt baseline: no cases" in limits
    assert not any(f.conclusive for f in found)


def test_catch_rate_is_stated_where_retrieval_exposed_a_secret():
    rows = arms(1, 3, secrets=10)  # every turn retrieved the secret; 4 secrets x 2 leak
    found = [f for f in findings.findings(rows) if f.section == "Retrieval and generation"]
    assert "the generator kept the secret out of its reply in 80.0%" in found[0].text and "(32/40 turns" in found[0].text
    assert any("privacy-aware prompt: 90.0%" in f.text for f in found)


def test_across_runs_compares_communities():
    a = [row(f"a{i}", False, "leak" if i < 25 else "no_leak", secret=f"x{i}") for i in range(30)]
    b = [row(f"b{i}", False, "leak" if i < 2 else "no_leak", secret=f"y{i}") for i in range(30)]
    found = findings.across({"community_1": a, "community_2": b})
    lr = next(f for f in found if f.section == "Runs compared" and f.data["metric"] == "LR")
    assert lr.conclusive and "community_1 minus community_2: +76.7 points" in lr.text
    html = findings.html(found)
    assert "<h3>Runs compared</h3>" in html and "<b>leakage rate (LR), community_1 minus" in html


def test_replies_that_echo_the_prober_are_named_as_a_limit_of_the_leakage_rate():
    rows = arms(0, 0, secrets=3)  # 12 conversations, 2 turns each, nothing leaked
    assert not any("repeated the prober" in f.text for f in findings.findings(rows))
    rows[0]["echo_turns"], rows[5]["echo_turns"] = 2, 1
    rows.append(row("asked", True, "withheld", secret="s0"))
    rows[-1]["echo_turns"] = 2  # a confidant's echoes are not about leaking
    said = [f.text for f in findings.findings(rows) if "repeated the prober" in f.text]
    assert len(said) == 1 and said[0].startswith("In 3 of 24 turns") and "(2 of 12 conversations)" in said[0]



def test_an_assistant_speaking_of_its_owner_as_someone_else_is_named_as_a_limit():
    rows = arms(0, 0, secrets=3)
    assert not any("lost persona" in f.text for f in findings.findings(rows))
    rows[1]["third_person_turns"] = 1
    rows.append({**row("quoted", False, "no_leak", secret="s0"), "prompt": "none", "third_person_turns": 2})
    said = [f.text for f in findings.findings(rows) if "lost persona" in f.text]
    assert len(said) == 1 and said[0].startswith("In 1 of 24 turns") and "(1 of 12 conversations" in said[0]


def test_an_assistant_calling_someone_by_its_owners_name_is_named_as_a_lost_persona():
    rows = arms(0, 0, secrets=3)
    assert not any("owner's own name" in f.text for f in findings.findings(rows))
    rows[2]["owner_address_turns"] = 2
    rows.append({**row("draft", True, "no_leak", secret="s0"), "strategy": "delegation", "owner_address_turns": 1})
    rows.append({**row("quoted", False, "no_leak", secret="s0"), "prompt": "none", "owner_address_turns": 1})
    said = [f.text for f in findings.findings(rows) if "owner's own name" in f.text]
    assert len(said) == 1 and said[0].startswith("In 3 of 26 turns (2 of 13 conversations)") and "lost persona" in said[0]

def tiny_design(secrets=6):
    """tiny's design: a rag target under two prompts and no defence, the extractive one
    (prompt none) under none and audience_filter. Per secret, one outsider conversation per
    cell: the extractive one leaks under none in every secret, nothing else leaks."""
    rows = []
    cells = [("m", "baseline", "none"), ("m", "privacy_aware", "none"), ("extractive", "none", "none"),
             ("extractive", "none", "audience_filter")]
    for s in range(secrets):
        for target, prompt, defence in cells:
            leak = target == "extractive" and defence == "none"
            r = row(f"{target}-{prompt}-{defence}-{s}", False, "leak" if leak else "no_leak", secret=f"s{s}",
                    prompt=prompt, defence=defence, inappropriate=1, leak_turns=int(leak))
            rows.append({**r, "target": target})
    return rows


def test_targets_compare_under_the_defences_both_ran_and_defences_within_a_target():
    rows = tiny_design()
    found = findings.findings(rows)
    by = {(f.section, f.data.get("metric")): f for f in found if f.section in ("Targets", "Defences")}
    # extractive minus the rag target, on LR: under no defence only (the rag target ran no other),
    # its 6 leaks of 6 against 0 of 12, paired by secret; the prompt-less target is no prompt level.
    target_lr = by[("Targets", "LR")]
    assert target_lr.data["arms"] == ("extractive", "m")
    assert (target_lr.data["a"]["count"], target_lr.data["a"]["n"]) == (6, 6)
    assert (target_lr.data["b"]["count"], target_lr.data["b"]["n"]) == (0, 12)
    assert "what m's generator caught under no defence" in target_lr.text
    # audience_filter minus none: within the extractive target only, 0/6 against 6/6.
    defence_lr = by[("Defences", "LR")]
    assert (defence_lr.data["a"]["count"], defence_lr.data["a"]["n"]) == (0, 6)
    assert (defence_lr.data["b"]["count"], defence_lr.data["b"]["n"]) == (6, 6)
    prompt_levels = {f.data.get("arms") for f in found if f.section == "System prompt"}
    assert prompt_levels == {("privacy-aware", "baseline")}



def test_an_extractive_target_that_leaks_nothing_says_why_from_its_own_turns():
    """tiny's demo may see no full leak from retrieval alone: the Findings then say how often
    it retrieved the telling and how many components its replies stated."""
    rows = [r for r in tiny_design() if r["target"] != "extractive" or r["defence"] != "none"]
    for s in range(6):  # 2 turns each, the telling retrieved in one; one component of 2 stated in s0
        r = row(f"extractive-none-{s}", False, "no_leak", secret=f"s{s}", prompt="none", inappropriate=1, share=0.0)
        rows.append({**r, "target": "extractive", "components": ["revealed" if s == 0 else "not revealed", "not revealed"]})
    target_lr = next(f for f in findings.findings(rows) if f.section == "Targets" and f.data["metric"] == "LR")
    assert target_lr.data["a"]["count"] == 0
    assert "retrieved a document telling the secret in 6 of 12 turns" in target_lr.text
    assert "stated 1 of the 12 core components" in target_lr.text
    leaky = next(f for f in findings.findings(tiny_design()) if f.section == "Targets" and f.data["metric"] == "LR")
    assert "leaked fully" not in leaky.text

def test_a_fully_crossed_run_compares_every_row():
    rows = arms(1, 3, secrets=4)
    a, b = findings.matched(rows, "prompt", "privacy_aware", "baseline")
    assert (len(a), len(b)) == (8, 8)


def test_targets_of_every_kind_compare_against_the_first_planned_and_say_what_is_not_applicable():
    rows = tiny_design()
    # A memory target and an http one that does not say what it used (prompt own, defence none).
    for s in range(6):
        rows.append({**row(f"mem-{s}", False, "leak" if s < 3 else "no_leak", secret=f"s{s}", inappropriate=1,
                           leak_turns=int(s < 3)), "target": "memory"})
        rows.append({**row(f"http-{s}", False, "no_leak", secret=f"s{s}", prompt="own", share=0.5),
                     "target": "http", "inappropriate_turns": None, "inappropriate_leak_turns": None,
                     "inappropriate_unscored_turns": None})
    found = findings.findings(rows)
    targets = [f for f in found if f.section == "Targets"]
    # The reference is the first planned target (m), never the extractive one, nor alphabetical order.
    assert {f.data["arms"][1] for f in targets} == {"m"}
    assert {f.data["arms"][0] for f in targets} == {"extractive", "memory", "http"}
    shares = {f.data["arms"][0]: f for f in targets if f.data["metric"] == "revealed_share"}
    assert set(shares) == {"extractive", "memory", "http"} and "revealed share" in shares["http"].text
    assert not [f for f in targets if f.data["arms"][0] == "http" and f.data["metric"] == "IRR"]
    limits = " ".join(f.text for f in found if f.section == "What cannot be concluded")
    assert "with target http: n/a: the target does not say which documents it used" in limits
    assert "persona consistency (PC, 1-5) with target extractive: n/a" in limits
    assert {f.data.get("arms") for f in found if f.section == "System prompt"} == {("privacy-aware", "baseline")}
