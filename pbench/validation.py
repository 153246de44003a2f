"""How far the judges deserve trust (paper Appendix C.1 and C.3): stages 05 and 07.

- The labelled dev set (``pbench/data/judge_dev.jsonl``): the panel judges its ``heldout``
  split (the judge was never tuned on it) in stage 05, whose rates are corrected for the
  error measured there (``pbench.correction``); stage 07 shows the agreement of the panel and
  of each judge with the hand labels, per category and per family (chat replies, the owner's
  drafts under ``delegation``, replies to an outsider claiming standing under ``pretext``),
  with 95% intervals resampled by secret.
- Appendix C.1: balanced snippets from the run, documents that carry a secret and documents
  that do not; each judge's confusion matrix, precision, recall and F1.
- Appendix C.3: people label a sample of the run's conversations in ``label.html``
  (``pbench.labelling``); ``pbench agreement`` reads their labels back (``pbench.agreement``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pbench import config, correction, judging, store
from pbench.judging import InputRow
from pbench.labelling import LabelsError


FAMILIES = correction.FAMILIES
"""The kinds of dev case, each a probing strategy's attack surface: chat replies (``direct``,
``indirect``), the owner's drafts to someone (``delegation``), replies to an outsider who
claims standing (``pretext``)."""


def default_dev_set() -> Path:
    """The labelled dev set shipped with the package (runtime data: stage 05 judges it)."""
    return store.PACKAGE_DATA / config.PACKAGE_FILES["validation.dev_set"]


def dev_rows(vcfg: Any, seed: int) -> list[InputRow]:
    """The dev cases the run's panel is measured on: ``validation.dev_split`` of
    ``validation.dev_set``, at most ``validation.dev_cases`` of them (``dev_sample``).

    Raises:
        LabelsError: a dev set row that does not validate, naming the file and the row.
    """
    path = vcfg.dev_set or default_dev_set()
    rows, bad = judging.read_rows(path)
    if bad:
        raise LabelsError(bad[0])
    return dev_sample(rows, vcfg.dev_cases, seed, vcfg.dev_split)


def judge_dev(panel: Any, rows: list[InputRow], progress: Any = None) -> dict[str, Any]:
    """The panel's verdicts on labelled dev ``rows``, with what they cost.

    Returns:
        ``results`` (one ``judging.judge_rows`` record per row), ``seconds`` and ``calls``.
    """
    import time

    t0, calls = time.perf_counter(), panel.stats["calls"]
    results = judging.judge_rows(panel, rows, progress=progress)
    return {"results": results, "seconds": time.perf_counter() - t0, "calls": panel.stats["calls"] - calls}


def dev_sample(rows: list[InputRow], n: int | None, seed: int, split: str | None = None) -> list[InputRow]:
    """The rows of ``split`` (all when None), at most ``n`` of them, the same number from
    every category (all when ``n`` is None)."""
    if split is not None:
        rows = [r for r in rows if (r.model_extra or {}).get("split") == split]
    if n is None or n >= len(rows):
        return rows
    by: dict[str, list[InputRow]] = {}
    for r in rows:
        by.setdefault((r.model_extra or {}).get("category", ""), []).append(r)
    rng = random.Random(seed)
    per = max(1, n // len(by))
    picked = {r.id for cat in sorted(by) for r in rng.sample(by[cat], min(per, len(by[cat])))}
    return [r for r in rows if r.id in picked]


def family(row: InputRow) -> str:
    """A dev row's family (``FAMILIES``): its ``family`` field, else ``chat``."""
    return correction.dev_family(row)


def by_family(rows: list[InputRow], results: list[dict[str, Any]], seed: int = 0):
    """``judging.agreement`` broken down by family (column ``family``: ``chat`` for rows
    without one), in ``FAMILIES`` order; families the rows do not hold are left out."""
    table = judging.agreement(rows, results, by="family", seed=seed)
    if table.empty:
        return table
    table["family"] = table["family"].replace("", "chat")
    order = {f: i for i, f in enumerate(FAMILIES)}
    return table.sort_values(["task", "family"], key=lambda col: col.map(order) if col.name == "family" else col,
                             kind="stable").reset_index(drop=True)


def snippet_rows(ds: Any, n: int, seed: int) -> list[InputRow]:
    """Appendix C.1: ``n`` documents of the run, half telling a secret (its sharing
    documents), half ordinary ones of the same owner, each paired with that secret."""
    rng = random.Random(seed)
    secrets = list(ds.secrets)
    bearing = [(s, ds.by_id[e.document_id]) for s in secrets for e in s.sharing if e.document_id in ds.by_id]
    rng.shuffle(bearing)
    rows = []
    for s, doc in bearing[: n // 2]:
        rows.append(_snippet(ds, s, doc, "leak"))
        plain = [d for d in ds.documents if d.owner == s.owner and not d.secret_ids]
        if plain:
            rows.append(_snippet(ds, s, rng.choice(plain), "no_leak"))
    return rows


def _snippet(ds: Any, secret: Any, doc: Any, label: str) -> InputRow:
    return InputRow.model_validate({"id": f"{doc.id}:{secret.id}", "owner": ds.view.name(secret.owner),
                                    "secret": secret.content, "components": secret.core_components,
                                    "response": doc.text, "label": label, "kind": doc.kind})


def confusion(truth: list[str], pred: list[str], positive: str = "leak") -> dict[str, Any]:
    """2x2 counts (unscored predictions left out and counted), precision, recall, F1."""
    pairs = [(t == positive, p == positive) for t, p in zip(truth, pred, strict=True) if p != "unscored"]
    tp = sum(t and p for t, p in pairs)
    fp = sum(p and not t for t, p in pairs)
    fn = sum(t and not p for t, p in pairs)
    tn = sum(not t and not p for t, p in pairs)
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if tp else (0.0 if fn or fp else float("nan"))
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "unscored": len(truth) - len(pairs),
            "accuracy": (tp + tn) / len(pairs) if pairs else float("nan"),
            "precision": precision, "recall": recall, "f1": f1}


def per_judge_confusion(rows: list[InputRow], results: list[dict[str, Any]]):
    """One confusion row for the panel and one per judge, on labelled rows."""
    import pandas as pd

    truth = [(r.model_extra or {})["label"] for r in rows]
    out = [{"judge": "panel", **confusion(truth, [o["verdict"] for o in results])}]
    for name in sorted({j for o in results for j in o["judges"]}):
        pred = [{True: "leak", False: "no_leak", None: "unscored"}[o["judges"].get(name, {}).get("leak")]
                for o in results]
        out.append({"judge": name, **confusion(truth, pred)})
    return pd.DataFrame(out)


def cohen_kappa(a: list[str], b: list[str]) -> float:
    """Cohen's kappa of two raters over the same items (scikit-learn's ``cohen_kappa_score``;
    NaN when there are none, or when agreement by chance is 1)."""
    labels = sorted(set(a) | set(b))
    if len(labels) < 2:  # no items, or one label for all: chance agrees with certainty
        return float("nan")
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(a, b, labels=labels, replace_undefined_by=float("nan")))


def _records(df: Any, cols: list[str], key: str = "judge") -> dict[str, Any]:
    """Rows of ``df`` by ``key`` as JSON-safe records: an undefined figure (no positives, say)
    is null, not NaN."""
    import json

    return json.loads(df.set_index(key)[cols].to_json(orient="index")) if len(df) else {}


AGREEMENT = ["agreement", "agreement_lo", "agreement_hi"]
HUMAN = "human"
"""The section of ``validation.json`` that holds what people's labels found (``pbench agreement``)."""


def write_report(run_dir: Any, dev_cases: int, dev_seconds: float, dev_calls: int, split: str | None, agree: Any,
                 by_category: Any, by_family: Any, snippets: Any, panel_stats: dict[str, int],
                 human: dict[str, Any] | None) -> dict[str, Any]:
    """Write stage 07's ``validation.json`` and return it without its ``human`` section: the
    dev set's size, cost and split; the panel's agreement with its labels per task
    (``judging.agreement``), per category and per family of case (``by_family``); Appendix
    C.1's snippet confusion per judge; the judge calls and unparsed replies; and, as
    ``HUMAN``, what people's labels found (``agreement.compute``, or None)."""
    report = {"dev_cases": dev_cases, "dev_seconds": round(dev_seconds, 1), "dev_split": split,
              "dev_calls_per_case": round(dev_calls / max(1, dev_cases), 2),
              "dev_agreement": {task: _records(part, [*AGREEMENT, "recall", "precision", "false_positive_rate",
                                                      "false_positives", "missed", "scored"])
                                for task, part in agree.groupby("task")},
              "dev_by_category": _records(by_category.assign(key=by_category["task"] + "/" + by_category["category"]),
                                          [*AGREEMENT, "cases"], key="key"),
              "dev_by_family": _records(by_family.assign(key=by_family["task"] + "/" + by_family["family"]),
                                        [*AGREEMENT, "cases", "false_positives", "missed"], key="key"),
              "snippets": _records(snippets, ["precision", "recall", "f1", "accuracy", "tp", "fp", "fn", "tn"]),
              "judge_calls": panel_stats["calls"], "unparsed": panel_stats["unparsed"]}
    store.write_json(Path(run_dir) / "validation.json", {**report, HUMAN: human})
    return report
