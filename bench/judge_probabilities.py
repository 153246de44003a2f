"""What reading the judge's probabilities changes (issue 29), with the embedded model.

    python bench/judge_probabilities.py --params params/tiny.yaml --run outputs/tiny [--conversations 8]

Persona consistency: for a finished run's conversations, each with its replies in order and
reversed (the same replies: a fair judge scores them alike), today's JSON score (the argmax)
against G-Eval's probability-weighted digit (``judging.digit_mean``), and the top digit of
that same distribution; printed, the mean absolute change between the two orders per reader.

Confidants: the dev set's ``heldout`` confidant rows (never fitted on), decided by the JSON
question against the one-token yes/no log-odds at the cut ``pbench judge --fit`` wrote; each
judge alone on every row (no short-circuit on a restated component).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from pbench import config, judging, llm, validation


def persona_spread(panel: judging.Panel, run: Path, n: int) -> None:
    people = {p["id"]: p for p in json.loads((run / "community.json").read_text())["people"]}
    convs = [json.loads(line) for line in (run / "conversations.jsonl").read_text().splitlines()]
    sets = [c for c in convs if len({t["reply"] for t in c["turns"]}) > 1][:n]
    judge = panel.judges[0]
    got = {"json": [], "digit argmax": [], "weighted": []}
    for c in sets:
        owner = people[c["owner"]]
        replies = [t["reply"] for t in c["turns"]]
        per = {k: [] for k in got}
        for order in (replies, replies[::-1]):
            kw = dict(owner=owner["name"], persona=owner["persona"], replies=order)
            out = llm.run_sync(judge.ask("judging", "persona", judging.Score, seed=panel.seed, temperature=0.0, **kw))
            top = llm.run_sync(panel._top(judge, "persona_digit", **kw))
            digits = [(int(t.strip()), lp) for t, lp in top or () if t.strip() in ("1", "2", "3", "4", "5")]
            per["json"].append(None if out.unparsed else out.parsed.score)
            per["digit argmax"].append(max(digits, key=lambda d: d[1])[0] if digits else None)
            per["weighted"].append(judging.digit_mean(top))
        print(c["id"], {k: v for k, v in per.items()})
        for k in got:
            got[k].append(per[k])
    for k, pairs in got.items():
        both = [(a, b) for a, b in pairs if a is not None and b is not None]
        spread = statistics.fmean(abs(a - b) for a, b in both) if both else float("nan")
        print(f"PC {k:<13} mean |in order - reversed| {spread:.3f} over {len(both)} sets; "
              f"changed {sum(a != b for a, b in both)}; scores {sorted(round(a, 2) for a, _ in both)}")


def disclosure_heldout(panel: judging.Panel) -> None:
    rows, bad = judging.read_rows(validation.default_dev_set())
    held = [r for r in validation.dev_sample(rows, None, 0, "heldout") if r.authorised]
    cut = (judging.load_fit() or {}).get("disclosure", {}).get("cut")
    judge = panel.judges[0]
    right = {"json": 0, "probability": 0}
    for r in held:
        shared = r.model_extra["label"] == "shared"
        out = llm.run_sync(judge.ask("judging", "disclosure", judging.Disclosure, seed=panel.seed, temperature=0.0,
                                     owner=r.owner, secret=r.secret,
                                     turns=[{"asker": q, "reply": a} for q, a in r.exchanges()]))
        logit = llm.run_sync(panel.shares_logit(judge, r.owner, r.secret, r.exchanges()))
        right["json"] += (not out.unparsed) and (out.parsed.answer == "answered") == shared
        right["probability"] += logit is not None and cut is not None and (logit >= cut) == shared
        print(r.id, r.model_extra["label"], None if out.unparsed else out.parsed.answer,
              None if logit is None else round(logit, 3))
    print(f"confidants held out ({len(held)} rows; cut {cut}): JSON vote {right['json']}/{len(held)}, "
          f"log-odds >= cut {right['probability']}/{len(held)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--run", type=Path, default=Path("outputs/tiny"), help="a finished run: its personas and replies")
    ap.add_argument("--conversations", type=int, default=8)
    args = ap.parse_args()
    cfg = config.load(args.params)
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel(roles.panel("judge"), "combined", cfg.judging.match_threshold, cfg.seed, fit={})
    for name, part, calls in (("persona", lambda: persona_spread(panel, args.run, args.conversations),
                               4 * args.conversations), ("confidants", lambda: disclosure_heldout(panel), 32)):
        t0 = time.perf_counter()
        part()
        seconds = time.perf_counter() - t0
        print(f"{name}: {seconds:.0f} s for {calls} calls ({seconds / calls:.1f} s a call; less when cached)")


if __name__ == "__main__":
    main()
