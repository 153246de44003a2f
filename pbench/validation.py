"""How far the judges deserve trust (paper Appendix C.1 and C.3): stages 05 and 07.

- The labelled dev set (``tests/data/judge_dev.jsonl``): the panel judges its ``heldout``
  split (the judge was never tuned on it) in stage 05, whose rates are corrected for the
  error measured there (``pbench.correction``); stage 07 shows the agreement of the panel and
  of each judge with the hand labels, per category, with 95% intervals resampled by secret.
- Appendix C.1: balanced snippets from the run, documents that carry a secret and documents
  that do not; each judge's confusion matrix, precision, recall and F1.
- Appendix C.3: a random sample of conversations exported to a CSV for human labelling; the
  labels read back give agreement, Cohen's kappa, the confusion matrix and the disagreements.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from pathlib import Path
from typing import Any

from pbench import config, judging, store
from pbench.judging import InputRow


class LabelsError(config.ConfigError):
    """A human-labels file that cannot be read back: one line naming the file, the row and
    what is wrong (the CLI exits 2, as for a bad parameter file)."""


HUMAN_LABELS = ("leak", "no_leak", "shared", "withheld")
HUMAN_COLUMNS = ("id", "owner", "audience", "who_may_know", "secret", "components", "transcript", "human_label", "notes")


def default_dev_set() -> Path:
    return store.repo_root() / "tests" / "data" / "judge_dev.jsonl"


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

    truth = [r.model_extra["label"] for r in rows]
    out = [{"judge": "panel", **confusion(truth, [o["verdict"] for o in results])}]
    for name in sorted({j for o in results for j in o["judges"]}):
        pred = [{True: "leak", False: "no_leak", None: "unscored"}[o["judges"].get(name, {}).get("leak")]
                for o in results]
        out.append({"judge": name, **confusion(truth, pred)})
    return pd.DataFrame(out)


def cohen_kappa(a: list[str], b: list[str]) -> float:
    """Cohen's kappa of two raters over the same items (NaN when agreement by chance is 1)."""
    n = len(a)
    if n == 0:
        return float("nan")
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in set(ca) | set(cb)) / (n * n)
    return float("nan") if expected == 1 else (observed - expected) / (1 - expected)


# --------------------------------------------------------------------------- human labels (C.3)


def export_for_humans(ds: Any, convs: list[Any], path: Path, n: int, seed: int) -> int:
    """Write a random sample of ``n`` conversations to ``path`` for labelling; a file that
    already exists is left as it is (it may hold someone's labels). Returns rows written."""
    from pbench.footprint import may_know

    if path.exists() or n == 0 or not convs:
        return 0
    rng = random.Random(seed)
    sample = sorted(rng.sample(convs, min(n, len(convs))), key=lambda c: c.id)
    people = ds.view.people
    lines = []
    for c in sample:
        s = ds.secret_by_id[c.secret_id]
        knows = [people[p].name for p in sorted(people) if p != s.owner and may_know(s, ds.view, p, c.at)]
        owner = people[c.owner].name
        talk = "\n".join(f"{people[c.audience].name}: {t.prober}\n{owner}: {t.reply}" for t in c.turns)
        lines.append({"id": c.id, "owner": owner, "audience": people[c.audience].name,
                      "who_may_know": ", ".join(knows) or "nobody", "secret": s.content,
                      "components": " | ".join(s.core_components), "transcript": talk, "human_label": "", "notes": ""})
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HUMAN_COLUMNS)
    w.writeheader()
    w.writerows(lines)
    store.atomic_write_text(path, buf.getvalue())
    return len(lines)


def read_human_labels(path: Path, known: set[str] | None = None) -> dict[str, str]:
    """Conversation id to human label, for the rows labelled so far (a missing file: none).

    Args:
        known: the run's conversation ids; a row naming another is an error.
    Raises:
        LabelsError: a missing column, a label outside ``HUMAN_LABELS``, an unknown or
            repeated conversation id; one line naming the file and the row.
    """
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("id", "human_label") if c not in (reader.fieldnames or [])]
        if missing:
            raise LabelsError(f"{path}: row 1 (the header) lacks the column{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(missing)}")
        for n, row in enumerate(reader, 2):
            label = (row.get("human_label") or "").strip().lower()
            cid = (row.get("id") or "").strip()
            if not label:
                continue
            if label not in HUMAN_LABELS:
                raise LabelsError(f"{path}: row {n}: human_label {label!r} is not one of {', '.join(HUMAN_LABELS)}")
            if known is not None and cid not in known:
                raise LabelsError(f"{path}: row {n}: conversation id {cid!r} is not one of this run's conversations")
            if cid in out:
                raise LabelsError(f"{path}: row {n}: conversation id {cid!r} is labelled twice")
            out[cid] = label
    return out


def check_human_labels(run_dir: Path) -> dict[str, str]:
    """Read back ``validation/human_labels.csv`` of a run against its conversations, before
    any stage runs, so that a bad file stops the run with nothing in the folder changed."""
    path = Path(run_dir) / "validation" / "human_labels.csv"
    conversations = Path(run_dir) / "conversations.jsonl"
    if not path.exists():
        return {}
    known = {r["id"] for r in store.read_jsonl(conversations)} if conversations.exists() else None
    return read_human_labels(path, known)


def human_agreement(labels: dict[str, str], judgements: list[dict[str, Any]]):
    """Agreement, Cohen's kappa, the confusion matrix and the disagreements between human
    labels and the panel's verdicts (conversations both scored)."""
    import pandas as pd

    verdict = {r["id"]: r["verdict"] for r in judgements}
    pairs = [(i, h, verdict[i]) for i, h in sorted(labels.items()) if verdict.get(i, "unscored") != "unscored"]
    if not pairs:
        return {"labelled": len(labels), "compared": 0}
    human, panel = [h for _, h, _ in pairs], [p for _, _, p in pairs]
    return {
        "labelled": len(labels), "compared": len(pairs),
        "agreement": sum(h == p for h, p in zip(human, panel, strict=True)) / len(pairs),
        "kappa": cohen_kappa(human, panel),
        "confusion": pd.crosstab(pd.Series(human, name="human"), pd.Series(panel, name="panel")),
        "disagreements": pd.DataFrame([{"id": i, "human": h, "panel": p} for i, h, p in pairs if h != p]),
    }
