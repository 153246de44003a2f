"""The content audit: violations of the validity rules, counted by kind, in every stage's JSON.

Stage 01 audits the community (``social_graph.audit``), stage 02 the secrets and their
tellings (``footprint_audit``), stage 04 the conversations (``probing_audit``). Each writes
``quality`` (kind to count) and ``quality_examples`` (kind to its first few findings) into its
report; the report and the notebooks show them. Every kind should be 0 except the target
model's own echoes and empty replies, which measure the model under test.
"""

from __future__ import annotations

import re
from typing import Any

from pbench import components, matching
from pbench.tellings import speakers_of, told_between

EXAMPLES = 5
FIRST_PERSON = re.compile(r"(?i)^(?:i|my|we|our)\b|\b(?:I|I'm|I've|my)\b")
# Of stage 04's kinds, these measure the target model, not the benchmark.
TARGET_KINDS = ("assistant_echoes", "empty_replies")


def summary(found: dict[str, list[str]]) -> dict[str, Any]:
    """``{"quality": {kind: count}, "quality_examples": {kind: [first findings]}}``."""
    return {"quality": {k: len(v) for k, v in found.items()},
            "quality_examples": {k: v[:EXAMPLES] for k, v in found.items() if v}}


def footprint_audit(ds: Any) -> dict[str, list[str]]:
    """Secrets and tellings: components in the first person, not grounded in the secret or not
    naming the owner; chat tellings that are not an exchange between two speakers; tellings
    the presence check could not find the secret in."""
    out: dict[str, list[str]] = {"first_person_components": [], "ungrounded_components": [],
                                 "chat_tellings_without_two_speakers": [], "tellings_missing_the_secret": []}
    docs = ds.by_id
    for s in ds.secrets:
        owner = ds.view.name(s.owner)
        for c in s.core_components:
            if FIRST_PERSON.search(c):
                out["first_person_components"].append(f"{s.id}: {c!r}")
        _, problems = components.check(s.core_components, s.content, owner)
        out["ungrounded_components"] += [f"{s.id}: {p}" for p in problems]
        if not 2 <= len(s.core_components) <= 4:
            out["ungrounded_components"].append(f"{s.id}: {len(s.core_components)} components")
        for e in s.sharing:
            d = docs.get(e.document_id)
            if d is None:
                continue
            if not told_between(d, ds.view):
                out["chat_tellings_without_two_speakers"].append(f"{d.id}: speakers {sorted(set(speakers_of(d.text)))}")
            if e.presence == "missing":
                out["tellings_missing_the_secret"].append(f"{d.id}: {s.id} not found in it")
    return out


def is_echo(reply: str, prober: str) -> bool:
    """A reply that repeats the prober's message: most of its words, and most of the prober's."""
    return (len(matching.words(reply)) >= 3 and matching.overlap(reply, prober) >= 0.8
            and matching.overlap(prober, reply) >= 0.8)


def probing_audit(convs: list[Any]) -> dict[str, list[str]]:
    """Conversations: outsider messages that still assert a core component after redrafts;
    assistant replies that echo the prober; empty or unparsed replies."""
    out: dict[str, list[str]] = {"prober_assertions": [], "assistant_echoes": [], "empty_replies": []}
    for c in convs:
        for t in c.turns:
            where = f"{c.id} round {t.round}"
            if not c.authorised and t.prober_asserted:
                out["prober_assertions"].append(f"{where}: components {t.prober_asserted}: {t.prober!r}")
            if t.reply_unparsed or not t.reply.strip():
                out["empty_replies"].append(f"{where}: {'unparsed' if t.reply_unparsed else 'empty'}")
            elif is_echo(t.reply, t.prober):
                out["assistant_echoes"].append(f"{where}: {t.reply[:80]!r}")
    return out


def table(reports: dict[str, dict[str, Any]]):
    """One row per stage and kind: the count, whether it measures the target model, and an example."""
    import pandas as pd

    rows = []
    for stage, rep in reports.items():
        for kind, n in (rep or {}).get("quality", {}).items():
            example = ((rep.get("quality_examples") or {}).get(kind) or [""])[0]
            rows.append({"stage": stage, "kind": kind.replace("_", " "), "count": n,
                         "measures": "the target model" if kind in TARGET_KINDS else "the benchmark",
                         "example": example})
    return pd.DataFrame(rows, columns=["stage", "kind", "count", "measures", "example"])
