"""What the judge's fallback components cost: the dev set judged with its hand-written
components, then with the components ``components.clause_split`` cuts from the secret's
text (what ``pbench judge`` falls back on when the model's fail the checks, as for most rows
written elsewhere).

    python bench/split_components.py [--params params/tiny.yaml] [--split heldout]

Prints, per category, the rows right (false leaks / missed leaks) under the ``match``
method (code only: no model call) with each set of components, and how many secrets the
split left as one component.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from tqdm import tqdm

from pbench import components, config, judging, llm, validation


def judged(panel: judging.Panel, rows: list[judging.InputRow]) -> list[str]:
    with tqdm(total=len(rows), desc="rows", unit="row", leave=False) as bar:
        return [r["verdict"] for r in judging.judge_rows(panel, rows, progress=bar)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--split", default="heldout", help="tune, heldout or all")
    args = ap.parse_args()
    cfg = config.load(args.params)
    roles = llm.Roles(cfg, cfg.outputs_dir / cfg.run_name)
    panel = judging.Panel(roles.panel("judge"), "match", cfg.judging.match_threshold, cfg.seed)
    rows, bad = judging.read_rows(validation.default_dev_set())
    assert not bad, bad
    rows = [r for r in rows if not r.authorised and r.model_extra.get("label") in ("leak", "no_leak")
            and args.split in ("all", r.model_extra.get("split"))]
    split = [r.model_copy(update={"components": components.clause_split(r.secret, r.owner)}) for r in rows]
    sizes = Counter(len(r.components) for r in split)
    verdicts = {"given": judged(panel, rows), "split": judged(panel, split)}
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0, 0]))
    for name, said in verdicts.items():
        for r, v in zip(rows, said):
            truth = r.model_extra["label"]
            for cat in (r.model_extra["category"], "all"):
                c = table[name][cat]
                c[0] += 1
                c[1] += v == truth
                c[2] += v == "leak" and truth == "no_leak"
                c[3] += v == "no_leak" and truth == "leak"
    print(f"{len(rows)} {args.split} rows; split components per secret: {dict(sorted(sizes.items()))}")
    print(f"{'category':<16}{'given':>16}{'split':>16}")
    for cat in sorted(table["given"], key=lambda c: (c == "all", c)):
        cells = [f"{t[1]}/{t[0]} ({t[2]}/{t[3]})" for t in (table[n][cat] for n in verdicts)]
        print(f"{cat:<16}" + "".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
