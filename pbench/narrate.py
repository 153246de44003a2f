""""What this shows": each notebook's closing Markdown, computed from its own tables.

One function per stage, each taking what that notebook already holds (its report, its
tables) and returning a few sentences of Markdown built from the numbers. No sentence is
written for a particular run; every number is read from the arguments.
"""

from __future__ import annotations

from typing import Any


def _plural(n: float, word: str) -> str:
    many = {"person": "people"}.get(word, word + "s")
    return f"{n:.0f} {word if n == 1 else many}"


def _audit(quality: dict[str, int], allowed: tuple[str, ...] = ()) -> str:
    """The content audit in a sentence: clean, or which rules were broken how often."""
    bad = {k: v for k, v in quality.items() if v and k not in allowed}
    if not bad:
        return f"The content audit found no violation of the validity rules ({len(quality)} checks)."
    listed = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(bad.items(), key=lambda kv: -kv[1]))
    return f"The content audit found {sum(bad.values())} violations of the validity rules ({listed}): read the examples above before trusting this stage."


def community(report: dict[str, Any], kinds: dict[str, int]) -> str:
    """Stage 01: the community's size, what code had to repair, the audit.

    Args:
        report: ``social_graph.build``'s report.
        kinds: relationship kind to count (``relationship_table(view)["kind"].value_counts()``).
    """
    found = sum(report["found_in_proposal"].values())
    changed = sum(report["changes_by_check"].values())
    top = sorted(((k, v) for k, v in report["changes_by_check"].items() if v), key=lambda kv: -kv[1])[:3]
    kinds_text = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    lines = [f"- {_plural(report['people'], 'person')} with {_plural(report['relationships'], 'dated relationship')} "
             f"({kinds_text or 'none'}) and {_plural(report['groups'], 'group')}."]
    if found or changed:
        most = "; most for " + ", ".join(f"{k.replace('_', ' ')} ({v})" for k, v in top) if top else ""
        lines.append(f"- The generator's proposal broke the checks {found} times; code made {changed} changes{most}. "
                     f"Nothing remains after repair ({sum(report['remaining_after_repair'].values())} problems).")
    else:
        lines.append("- The generator's proposal passed every check; code changed nothing.")
    lines.append(f"- {_audit(report.get('quality', {}))}")
    return "\n".join(lines)


def footprint(report: dict[str, Any]) -> str:
    """Stage 02: documents and noise, secrets and their tellings, whether the tellings carry
    their secret, the audit (``footprint.build``'s report)."""
    docs, noise = report["documents"], report["noise_documents"]
    v = report["validation"]
    tellings = v["verbatim"] + v["semantic"] + v["missing"]
    channels = ", ".join(f"{k} {n}" for k, n in sorted(report["shared_with"].items()))
    lines = [f"- {_plural(docs, 'document')} for {_plural(report['users'], 'user')}, "
             f"{noise} of them mundane noise ({100 * noise / docs:.0f}%)." if docs else "- No documents.",
             f"- {_plural(report['secrets'], 'secret')}, told {_plural(report['sharing_events'], 'time')} ({channels or 'never'})."]
    if tellings:
        lines.append(f"- Of {tellings} tellings checked, {v['verbatim']} carry their secret's components word for word, "
                     f"{v['semantic']} in other words (similarity at least {v['threshold']}) and {v['missing']} "
                     f"{'do' if v['missing'] != 1 else 'does'} not"
                     + (": a probe of a secret missing from its telling measures nothing, so stage 04 probes only secrets"
                        " that some telling carries." if v["missing"] else "."))
    lines.append(f"- {_audit(report.get('quality', {}))}")
    return "\n".join(lines)


def retrieval(exposure: Any, k: int) -> str:
    """Stage 03: how often each defence's top ``k`` handed a secret to someone who may not
    know it (``rag.exposure``'s table)."""
    rows = [(d, r) for d, r in exposure.iterrows() if r["retrieved"]]
    if not rows:
        return "- No question retrieved anything."
    parts = [f"{d.replace('_', ' ')} {r['carrying a secret they may not know']:.0f}/{r['retrieved']:.0f} "
             f"({100 * r['share']:.0f}%)" for d, r in rows]
    lines = [f"- Asked one question per secret in its own words ({rows[0][1]['questions']:.0f} questions, top {k}), "
             f"the retrieved documents that carry a secret the asker may not know: {'; '.join(parts)}."]
    base = dict(rows).get("none")
    if base is not None and base["carrying a secret they may not know"]:
        for d, r in rows:
            if d != "none":
                cut = 1 - r["carrying a secret they may not know"] / base["carrying a secret they may not know"]
                lines.append(f"- {d.replace('_', ' ')} removes {100 * cut:.0f}% of what plain retrieval exposes "
                             "to this asker.")
    lines.append("- One question per secret is a screen, not a measurement: stage 04's conversations give the "
                 "inappropriate retrieval rate with its interval.")
    return "\n".join(lines)


def probing(report: dict[str, Any]) -> str:
    """Stage 04: conversations and how they ended, prober redrafts, the audit
    (``probing.run``'s report)."""
    ended = {k: v for k, v in report["ended"].items() if v}
    how = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in ended.items())
    lines = [f"- {_plural(report['conversations'], 'conversation')}, {_plural(report['turns'], 'turn')}; "
             f"ended by {how or 'nothing'}."]
    if left := report.get("secrets_not_carried"):
        it, its = ("it", "its") if len(left) == 1 else ("them", "their")
        lines.append(f"- {_plural(report['secrets_probed'], 'secret')} probed; {len(left)} never were "
                     f"({', '.join(left)}): no telling of {it} carries all {its} components, so the assistant "
                     f"could not reveal {it} and a probe would measure nothing.")
    failed = report["ended"].get("prober_unparsed", 0) + report["ended"].get("reply_failed", 0)
    if failed:
        lines.append(f"- {failed} ended on a failed prober or reply: they are counted, never scored.")
    if gone := report.get("target_failed"):
        lines.append(f"- {len(gone)} ended on a target that failed after its retries (`target_failed`; counted, "
                     f"never scored; rerunning the stage tries them again): " + "; ".join(gone[:5])
                     + ("; ..." if len(gone) > 5 else ""))
    if report.get("errors"):
        lines.append(f"- {len(report['errors'])} did not finish (see `errors`); rerunning the stage resumes them.")
    for label, mem in (report.get("targets") or {}).items():
        if mem.get("kind") != "memory" or "documents" not in mem:
            continue
        lines.append(f"- The memory target `{label}` read {mem['documents']} documents and shelved {mem['memories']} memories; "
                     f"{mem['unparsed']} extractions did not parse (no memory, counted) and {mem['ungrounded']} "
                     "memories were set aside as ungrounded (their words are not in their document).")
    lines.append(f"- The prober was redrafted {_plural(report['prober_redrafts'], 'time')} for stating what it "
                 "should be probing for, repeating the reply, or speaking of the owner in the third person.")
    from pbench.audit import TARGET_KINDS

    quality = report.get("quality", {})
    target = {k: quality.get(k, 0) for k in TARGET_KINDS}
    lines.append(f"- {_audit(quality, TARGET_KINDS)} The target model's own echoes, replies that speak "
                 "of their owner as someone else or call someone by the owner's own name, and empty replies: "
                 + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in target.items()) + ".")
    lines.append("- The leak counts here are the judges' turn-by-turn decisions; stage 05 gives the rates with intervals.")
    return "\n".join(lines)


def scoring(rows: list[dict[str, Any]], seed: int = 0, cluster: str = "secret", errors: Any = None,
            labels: dict[str, str] | None = None) -> str:
    """Stage 05: the four metrics with intervals and n, as judged, corrected for the judges'
    measured ``errors`` and, with people's ``labels`` of the run, by PPI; and what they cannot
    support (``findings``' overall and limits, without the comparisons stage 06 adds)."""
    from pbench import findings

    found = findings.findings(rows, seed, cluster, errors, labels)  # type: ignore[arg-type]
    judged = {f.text for f in findings.judges(errors, labels) if not f.text.startswith("Comparisons")}  # 06 compares
    keep = [f for f in found if f.section == "Overall" or (f.section == "What cannot be concluded" and (
        f.text.startswith("The run is small") or "could not be scored" in f.text or f.text in judged))]
    return findings.markdown(keep, level=4) + "\nStage 06 compares prompts, defences, strategies and targets.\n"


def validation(agree: Any, by_category: Any, human: dict[str, Any] | None = None) -> str:
    """Stage 07: how far the judges agree with the labelled dev set, where they fail, and
    with the human labels so far.

    Args:
        agree: ``judging.agreement`` over the dev cases (one row per task and judge).
        by_category: ``judging.agreement(..., by="category")`` for the panel.
        human: ``agreement.section``'s result (None: no labels yet).
    """
    lines = []
    for _, r in agree[agree["judge"] == "panel"].iterrows():
        what = "leak verdicts" if r["task"] == "leak" else "confidant verdicts (shared or withheld)"
        lines.append(f"- {what}: agreement {r['agreement']:.2f} [{r['agreement_lo']:.2f}, {r['agreement_hi']:.2f}] "
                     f"on {r['scored']:.0f} scored cases; {r['false_positives']:.0f} false positives, "
                     f"{r['missed']:.0f} missed.")
    worst = by_category[by_category["cases"] > 0].sort_values("agreement").head(3)
    worst = worst[worst["agreement"] < 1]
    if len(worst):
        lines.append("- Weakest categories: " + "; ".join(
            f"{r['category']} {r['agree']:.0f}/{r['cases']:.0f}" for _, r in worst.iterrows())
            + ". Rates that rest on these kinds of replies inherit their errors.")
    elif len(by_category):
        lines.append("- Every category agreed on every case.")
    if not lines:
        lines.append("- No labelled case was judged.")
    panel = [r for r in (human or {}).get("agreement", []) if r["rater"] == "panel" and r["level"] == "conversation"]
    for r in panel:
        kappa = "undefined" if r["kappa"] is None else f"{r['kappa']:.2f}"
        lines.append(f"- Human labels ({r['labeller']}): the panel agrees on {r['agree']} of {r['n']} conversations, "
                     f"{r['agreement']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]; Cohen's kappa {kappa}.")
    if not panel:
        lines.append("- No conversation of this run has a human label yet: how far the judges agree with people "
                     "on this run's own conversations is unknown (`label.html`, then `pbench agreement`).")
    return "\n".join(lines)
