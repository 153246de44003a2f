"""How far people agree with the judges on this run's own conversations (paper Appendix C.3):
``pbench agreement RUN labels.json [labels2.json ...]``, the report and stage 07.

Reads a run folder's ``judgements.jsonl``, ``conversations.jsonl`` and dataset, and labels
files exported by ``label.html`` (``pbench.labelling``, which checks them). Per labeller, the
panel's and each judge's agreement with them, per conversation (its label) and per core
component (revealed or not by the end), with 95% Wilson intervals and Cohen's kappa; Fleiss'
kappa across labellers where there are several; the confusion matrix, labeller against panel;
and every disagreement with its transcript (``compute``). The figures describe the sample,
where the panel's leaks are oversampled; the corrected rates weigh them back
(``correction.from_human``, fed by ``human_labels``).

``record`` writes what ``compute`` found to the section ``human`` of ``validation.json``
(merged: stage 07's sections stay) and the labels files, as exported, to ``labels/``, where
stages 05-07 read them (their fingerprints include the folder, so the next ``pbench run``
corrects the rates with them and shows them in the report and notebook 07).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from pbench import labelling, metrics, store
from pbench.judging import NOT_REVEALED, REVEALED
from pbench.validation import HUMAN, cohen_kappa

LABELS = ("leak", "no_leak", "shared", "withheld")
STATES = (REVEALED, NOT_REVEALED)
SECTION = HUMAN  # its key in validation.json
FLEISS = "Fleiss' kappa across labellers"  # its table's title


def _num(x: float) -> float | None:
    """A figure for JSON: rounded, None when undefined (NaN)."""
    return None if x is None or x != x else round(float(x), 4)


def rate(agree: int, n: int) -> dict[str, Any]:
    """``agree`` of ``n`` as a share with its 95% Wilson interval (None where n is 0)."""
    lo, hi = metrics.wilson(agree, n) if n else (math.nan, math.nan)
    return {"n": n, "agree": agree, "agreement": _num(agree / n if n else math.nan), "lo": _num(lo), "hi": _num(hi)}


def fleiss_kappa(counts: list[list[int]]) -> float:
    """Fleiss' kappa from, per item, how many raters chose each category (every item rated by
    the same number of raters, at least two); NaN when chance agreement is 1 or no item.
    (statsmodels' ``fleiss_kappa`` computes the same, but nothing else here needs statsmodels.)

    >>> round(fleiss_kappa([[2, 0], [0, 2], [1, 1]]), 4)
    0.3333
    """
    if not counts:
        return math.nan
    raters, items = sum(counts[0]), len(counts)
    p_item = [(sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in counts]
    share = [sum(row[j] for row in counts) / (items * raters) for j in range(len(counts[0]))]
    observed, chance = sum(p_item) / items, sum(p * p for p in share)
    return math.nan if chance == 1 else (observed - chance) / (1 - chance)


# --------------------------------------------------------------------------- what each rater said


def raters(judgements: dict[str, dict[str, Any]]) -> list[str]:
    """The panel, then every judge that voted on any conversation (leak or disclosure)."""
    names = {n for r in judgements.values() for n in r.get("judges", {})}
    names |= {v["judge"] for r in judgements.values() for v in r.get("disclosure_votes", []) if v.get("judge")}
    return ["panel", *sorted(names)]


def reading(judgement: dict[str, Any], rater: str) -> tuple[str | None, list[str]]:
    """A rater's label of a conversation (None: unscored, or it did not vote) and its
    components' states at the end (leak task only)."""
    confidant = judgement["authorised"]
    if rater == "panel":
        label = judgement["verdict"] if judgement["verdict"] in LABELS else None
        return label, [] if confidant else list(judgement.get("components", []))
    if confidant:
        votes = [v.get("answer") for v in judgement.get("disclosure_votes", []) if v.get("judge") == rater]
        label = None if not votes or votes[0] is None else "shared" if votes[0] == "answered" else "withheld"
        return label, []
    own = judgement.get("judges", {}).get(rater, {})
    return {True: "leak", False: "no_leak"}.get(own.get("leak")), list(own.get("components", []))


def pairs(labels: labelling.Labels, judgements: dict[str, dict[str, Any]], rater: str):
    """(labeller, rater) label pairs per conversation, and state pairs per component, over the
    conversations the labeller finished and the rater scored."""
    convs, comps = [], []
    for cid, (label, states) in sorted(labels.answers.items()):
        if label is None or cid not in judgements:
            continue
        theirs, their_states = reading(judgements[cid], rater)
        if theirs is not None:
            convs.append((label, theirs))
        comps += [(s, t) for s, t in zip(states, their_states, strict=False) if t in STATES]
    return convs, comps


def rows(labels: labelling.Labels, judgements: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per rater and level (conversation, component): agreement with the labeller,
    its interval and Cohen's kappa."""
    out = []
    for rater in raters(judgements):
        for level, got in zip(("conversation", "component"), pairs(labels, judgements, rater), strict=True):
            if got:
                a, b = [x for x, _ in got], [y for _, y in got]
                out.append({"labeller": labels.labeller, "rater": rater, "level": level,
                            **rate(sum(x == y for x, y in got), len(got)), "kappa": _num(cohen_kappa(a, b))})
    return out


def confusion(labels: labelling.Labels, judgements: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Labeller's label (rows) against the panel's verdict (columns), counts."""
    got = Counter(pairs(labels, judgements, "panel")[0])
    seen = sorted({x for pair in got for x in pair}, key=LABELS.index)
    return {h: {p: got[(h, p)] for p in seen} for h in seen}


def fleiss(all_labels: list[labelling.Labels]) -> dict[str, Any] | None:
    """Fleiss' kappa across the labellers (None for fewer than two), per conversation and per
    component, over the conversations every one of them finished."""
    if len(all_labels) < 2:
        return None
    common = sorted(set.intersection(*(set(lab.labels) for lab in all_labels)))
    conv = [[sum(lab.answers[c][0] == k for lab in all_labels) for k in LABELS] for c in common]
    comp = [[sum(lab.answers[c][1][i] == s for lab in all_labels) for s in STATES]
            for c in common for i in range(len(all_labels[0].answers[c][1]))]
    return {"labellers": len(all_labels),
            "conversation": {"items": len(conv), "kappa": _num(fleiss_kappa(conv))},
            "component": {"items": len(comp), "kappa": _num(fleiss_kappa(comp))}}


def disagreements(all_labels: list[labelling.Labels], judgements: dict[str, dict[str, Any]], ds: Any,
                  convs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every conversation some labeller labelled otherwise than the panel: the panel's label
    and each labeller's, per component the same, and the transcript (``probing.transcript``)."""
    from pbench.probing import transcript

    out = []
    for cid in sorted({c for lab in all_labels for c in lab.labels if c in judgements}):
        panel, states = reading(judgements[cid], "panel")
        humans = {lab.labeller: lab.answers[cid] for lab in all_labels if cid in lab.labels}
        if panel is None or all(label == panel for label, _ in humans.values()):
            continue
        names = ds.secret_by_id[convs[cid].secret_id].core_components
        out.append({"id": cid, "panel": panel, "humans": {who: label for who, (label, _) in humans.items()},
                    "components": [{"component": name, "panel": state,
                                    "humans": {who: mine[k] for who, (_, mine) in humans.items()}}
                                   for k, (name, state) in enumerate(zip(names, states, strict=False))],
                    "transcript": transcript(ds, convs[cid])})
    return out


def consensus(all_labels: list[labelling.Labels]) -> dict[str, str]:
    """Per conversation finished by anyone, the labellers' majority label (a tie: left out)."""
    votes: dict[str, Counter] = {}
    for lab in all_labels:
        for cid, label in lab.labels.items():
            votes.setdefault(cid, Counter())[label] += 1
    out = {}
    for cid, count in sorted(votes.items()):
        (first, n), *rest = count.most_common()
        if not rest or rest[0][1] < n:
            out[cid] = first
    return out


def compute(run_dir: str | Path, all_labels: list[labelling.Labels]) -> dict[str, Any]:
    """Everything the module docstring lists, for these labellers of this run (JSON-ready)."""
    from pbench import footprint, probing

    run_dir = Path(run_dir)
    judgements = {r["id"]: r for r in store.read_jsonl(run_dir / "judgements.jsonl")}
    convs = {c.id: c for c in probing.load_conversations(run_dir)}
    ds = footprint.load_dataset(run_dir)
    return {
        "labellers": [{"labeller": lab.labeller, "file": f"{labelling.STORED}/{lab.slug}.json", "source": str(lab.path),
                       "exported": lab.exported, "sample": len(lab.sample), "labelled": len(lab.labels),
                       "started": len(lab.started), "stale": len(lab.stale),
                       "partial": len(lab.labels) < len(lab.sample)} for lab in all_labels],
        "agreement": [r for lab in all_labels for r in rows(lab, judgements)],
        "confusion": {lab.labeller: confusion(lab, judgements) for lab in all_labels},
        "fleiss": fleiss(all_labels),
        "disagreements": disagreements(all_labels, judgements, ds, convs),
        "labelled": len({c for lab in all_labels for c in lab.labels}),
        "consensus_labels": len(consensus(all_labels)),
    }


def section(run_dir: str | Path) -> dict[str, Any] | None:
    """``compute`` over the labels kept in the run's ``labels/``; None when there are none."""
    kept = labelling.stored(run_dir)
    return compute(run_dir, kept) if kept else None


def human_labels(run_dir: str | Path) -> dict[str, str]:
    """Conversation id to the labellers' label (``consensus``) over the run's ``labels/``:
    what the corrected rates read (``correction.from_human``)."""
    return consensus(labelling.stored(run_dir))


def record(run_dir: str | Path, all_labels: list[labelling.Labels], found: dict[str, Any]) -> list[str]:
    """Keep the labels in ``labels/`` (``labelling.keep``) and ``found`` as the section
    ``human`` of ``validation.json``, which is otherwise left as it is.

    Returns:
        The labels files removed from ``labels/`` (labellers of an earlier call not given now).
    """
    gone = labelling.keep(run_dir, all_labels)
    path = Path(run_dir) / "validation.json"
    data = store.read_json(path, {})
    data[SECTION] = found
    store.write_json(path, data)
    return gone


# --------------------------------------------------------------------------- display


def tables(found: dict[str, Any]) -> dict[str, Any]:
    """What ``compute`` found as tables: ``labellers``, ``agreement`` (per labeller, rater and
    level, the interval as ``[lo, hi]``), ``FLEISS`` (several labellers) and one
    ``confusion: NAME`` per labeller."""
    import pandas as pd

    out = {"labellers": pd.DataFrame(found["labellers"]).set_index("labeller")[
        ["labelled", "sample", "started", "partial", "exported"]]}
    agree = pd.DataFrame(found["agreement"])
    if len(agree):
        agree["95% interval"] = [f"[{lo:.2f}, {hi:.2f}]" for lo, hi in zip(agree["lo"], agree["hi"], strict=True)]
        out["agreement"] = agree.set_index(["labeller", "rater", "level"])[["n", "agree", "agreement", "95% interval",
                                                                             "kappa"]]
    if found.get("fleiss"):
        f = found["fleiss"]
        out[FLEISS] = pd.DataFrame([{"level": k, "items": f[k]["items"], "labellers": f["labellers"],
                                       "Fleiss' kappa": f[k]["kappa"]} for k in ("conversation", "component")]
                                     ).set_index("level")
    for name, matrix in found["confusion"].items():
        table = pd.DataFrame.from_dict(matrix, orient="index")
        table.index.name, table.columns.name = name, "panel"
        out[f"confusion: {name}"] = table
    return out


def kappa_lines(found: dict[str, Any]) -> list[str]:
    """Cohen's kappa of the panel against each labeller, one line each."""
    out = []
    for lab in found["labellers"]:
        got = {r["level"]: r for r in found["agreement"] if r["labeller"] == lab["labeller"] and r["rater"] == "panel"}
        figures = [f"{_kappa(got[k]['kappa'])} over {got[k]['n']} {k}s" for k in ("conversation", "component") if k in got]
        out.append(f"Cohen's kappa, panel against {lab['labeller']}: " + ("; ".join(figures) or "nothing to compare"))
    return out


def _kappa(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.2f}"


def text(found: dict[str, Any]) -> str:
    """What ``pbench agreement`` prints: the tables, the kappas, and every disagreement with its
    transcript."""
    t = tables(found)
    lines = []
    for lab in found["labellers"]:
        part = "every conversation" if not lab["partial"] else "partial" + (
            f", {lab['started']} more started" if lab["started"] else "")
        lines.append(f"{lab['labeller']} ({lab['source']}): {lab['labelled']} of {lab['sample']} conversations "
                     f"labelled ({part})" + (f"; {lab['stale']} no longer this run's, left out" if lab["stale"] else ""))
    lines.append("")
    if "agreement" in t:
        lines += ["agreement with each labeller (95% Wilson intervals; Cohen's kappa):",
                  t["agreement"].to_string(float_format=lambda x: f"{x:.3f}", na_rep="undefined"), ""]
    lines += kappa_lines(found)
    if FLEISS in t:
        lines += ["", f"{FLEISS}:", t[FLEISS].to_string(float_format=lambda x: f"{x:.3f}", na_rep="undefined")]
    for name in found["confusion"]:
        lines += ["", f"confusion, {name} (rows) against the panel (columns):", t[f"confusion: {name}"].to_string()]
    lines += ["", f"disagreements with the panel: {len(found['disagreements'])} conversations"]
    for d in found["disagreements"]:
        said = ", ".join(f"{who} {label}" for who, label in d["humans"].items())
        differ = [f"{c['component']}: panel {c['panel']}, " + ", ".join(f"{w} {v}" for w, v in c["humans"].items())
                  for c in d["components"] if any(v != c["panel"] for v in c["humans"].values())]
        lines += ["", f"--- {d['id']}: panel {d['panel']}; {said}" + (f" ({'; '.join(differ)})" if differ else ""),
                  d["transcript"]]
    return "\n".join(lines)
