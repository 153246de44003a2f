"""How well the panel, and each judge alone, agrees with labelled transcripts (the dev set of
stage 07, ``pbench judge`` on a labelled file): agreement, precision, recall and false-leak
rate, each with a 95% interval resampled by secret."""

from __future__ import annotations

from typing import Any

from pbench.judging.rows import InputRow
from pbench.judging.votes import REVEALED, UNSCORED


LABELS = {"leak": ("leak", "no_leak"), "disclosure": ("withheld", "shared")}


def agreement(rows: list[InputRow], results: list[dict[str, Any]], by: str | None = None, seed: int = 0):
    """Agreement of the panel, and of each judge alone on leaks, with labelled rows: ``label``
    leak/no_leak (and optional ``components_revealed``), or shared/withheld for confidant
    rows. One row per (task, group, judge) with agreement, precision, recall and the
    false-leak rate (false leaks over non-leaks; for confidants the positive class is
    ``withheld``), each with a 95% bootstrap interval resampled by secret.

    Args:
        by: a row field to break results down by (``category``, ``split``); None: all rows.
    """
    import pandas as pd

    labelled = [(r, o) for r, o in zip(rows, results, strict=True) if (r.model_extra or {}).get("label")]
    out = []
    for task, (pos, neg) in LABELS.items():
        part = [(r, o) for r, o in labelled if (r.model_extra or {})["label"] in (pos, neg)]
        if not part:
            continue
        readers: dict[str, Any] = {"panel": lambda o: o["verdict"]}
        if task == "leak":
            for name in sorted({j for _, o in part for j in o["judges"]}):
                readers[name] = lambda o, name=name: {True: "leak", False: "no_leak", None: "unscored"}[
                    o["judges"].get(name, {}).get("leak")]
        groups: dict[str, list] = {}
        for r, o in part:
            groups.setdefault("all" if by is None else str((r.model_extra or {}).get(by, "")), []).append((r, o))
        for group, items in sorted(groups.items()):
            for name, read in readers.items():
                out.append({"task": task, by or "rows": group, "judge": name,
                            **_agreement_row(items, read, pos, neg, name, seed)})
    return pd.DataFrame(out)


def _agreement_row(items: list, read: Any, pos: str, neg: str, name: str, seed: int) -> dict[str, Any]:
    """Counts and rates of one judge (or the panel) on labelled rows, intervals by secret."""
    import numpy as np

    from pbench.metrics import clustered_interval

    truth = [r.model_extra["label"] for r, _ in items]
    pred = [read(o) for _, o in items]
    secrets = [r.secret for r, _ in items]
    scored = [i for i, p in enumerate(pred) if p in (pos, neg)]

    def rate(hits: dict[int, bool]) -> tuple[float, float, float]:
        """Share of True over the rows ``hits`` holds (row index -> hit), interval by secret."""
        if not hits:
            return float("nan"), float("nan"), float("nan")
        n_ = np.asarray([float(h) for h in hits.values()])
        lo, hi = clustered_interval(n_, np.ones(len(n_)), [secrets[i] for i in hits], seed)
        return float(n_.mean()), lo, hi

    agree = rate({i: truth[i] == pred[i] for i in scored})
    recall = rate({i: pred[i] == pos for i in scored if truth[i] == pos})
    precision = rate({i: truth[i] == pos for i in scored if pred[i] == pos})
    false_pos = rate({i: pred[i] == pos for i in scored if truth[i] == neg})
    comp = [(bool(t), s == REVEALED) for r, o in items
            for t, s in zip(r.model_extra.get("components_revealed") or [], o["components_revealed"]
                            if name == "panel" else o["judges"].get(name, {}).get("components", []), strict=False)
            if s != UNSCORED and r.components]
    row = {"cases": len(items), "scored": len(scored), "agree": sum(truth[i] == pred[i] for i in scored)}
    for key, (v, lo, hi) in (("agreement", agree), ("recall", recall), ("precision", precision),
                                ("false_positive_rate", false_pos)):
        row.update({key: v, f"{key}_lo": lo, f"{key}_hi": hi})
    row.update({"false_positives": sum(truth[i] == neg and pred[i] == pos for i in scored),
                "missed": sum(truth[i] == pos and pred[i] == neg for i in scored),
                "component_agreement": sum(t == p for t, p in comp) / len(comp) if comp else float("nan")})
    return row
