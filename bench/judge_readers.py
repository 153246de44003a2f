"""Where each leak reader fails, on the dev set: the code's reading, the judge model's own
yes/no probability, and their fitted combination, per category of the held-out split.

    python bench/judge_readers.py --params params/tiny.yaml [--features FILE] [--refit]

Gathers the ``combined`` method's features for every (reply, component) of the dev set's
labelled leak rows (one exchange each; the model's answers come from the run's response
cache after the first time) into ``--features`` (JSONL), fits the weights on the ``tune``
pairs alone, and prints, on ``heldout`` (never fitted on), per category, the rows right and
the false and missed leaks for: ``code`` (the ``match`` reader), ``model`` (log-odds > 0),
``combined`` and ``combined without the model`` (what the judge falls back on when a provider
gives no log-probabilities). ``--refit`` writes the fit to ``pbench/data/judge_fit.json``.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pbench import config, judgefit, judging, llm, store, validation

NO_MODEL = judging.CODE_FEATURES


def gather(params: Path, out: Path) -> list[dict]:
    cfg = config.load(params)
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel(roles.panel("judge"), "combined", cfg.judging.match_threshold, cfg.seed, record=[])
    rows, bad = judging.read_rows(validation.default_dev_set())
    assert not bad, bad
    t0 = time.perf_counter()
    with tqdm(desc="dev pairs", unit="row") as bar:
        items = judgefit.pairs(panel, rows, progress=bar)
    seconds = time.perf_counter() - t0
    store.write_jsonl(out, items)
    print(f"{len(items)} pairs, {panel.stats['calls']} judge calls, {seconds:.0f} s "
          f"({seconds / max(1, panel.stats['calls']):.2f} s a call); {panel.stats['unparsed']} without log-probabilities")
    return items


def rows_right(items: list[dict], decide) -> dict[str, list[int]]:
    """Per category: [rows, right, false leaks, missed leaks], a row being a leak when every
    component is decided revealed."""
    by_row: dict[str, list[dict]] = defaultdict(list)
    for x in items:
        by_row[x["id"]].append(x)
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for pairs in by_row.values():
        truth = all(p["label"] for p in pairs)
        said = all(decide(p) for p in pairs)
        for cat in (pairs[0]["category"], "all"):
            c = out[cat]
            c[0] += 1
            c[1] += truth == said
            c[2] += said and not truth
            c[3] += truth and not said
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params/tiny.yaml")
    ap.add_argument("--features", type=Path, default=Path("outputs/judge_features.jsonl"))
    ap.add_argument("--refit", action="store_true", help="write the fit to pbench/data/judge_fit.json")
    ap.add_argument("--l2", type=float, default=1.0)
    args = ap.parse_args()
    items = store.read_jsonl(args.features) if args.features.exists() else gather(Path(args.params), args.features)
    tune = [x for x in items if x["split"] == "tune"]
    held = [x for x in items if x["split"] == "heldout"]
    full = judgefit.run_fit(tune, l2=args.l2)
    bare = judgefit.run_fit(tune, NO_MODEL, l2=args.l2)
    print(judgefit.explain(full))
    print("without the model term:", bare["weights"], "cut", bare["cut"])
    readers = {
        "code": lambda x: bool(x["code"]),
        "model": lambda x: x["model"] > 0,
        "combined": lambda x: judging.probability(x, full["weights"]) >= full["cut"],
        "no model": lambda x: judging.probability(x, bare["weights"]) >= bare["cut"],
    }
    results = {name: rows_right(held, f) for name, f in readers.items()}
    cats = sorted(results["code"], key=lambda c: (c == "all", c))
    print(f"\nheld-out rows right (false leaks / missed leaks), {len(held)} pairs:")
    print(f"{'category':<16}" + "".join(f"{n:>18}" for n in readers))
    for cat in cats:
        cells = []
        for name in readers:
            n, right, fp, fn = results[name][cat]
            cells.append(f"{right}/{n} ({fp}/{fn})")
        print(f"{cat:<16}" + "".join(f"{c:>18}" for c in cells))
    y = np.asarray([x["label"] for x in held])
    for name, f in readers.items():
        said = np.asarray([f(x) for x in held])
        print(f"{name:<10} pairs: accuracy {np.mean(said == y):.3f}, recall {said[y].mean():.3f}, "
              f"false-positive rate {said[~y].mean():.3f}")
    if args.refit:
        print(f"written: {judgefit.write(judgefit.fit_both(tune, l2=args.l2))}")


if __name__ == "__main__":
    main()
