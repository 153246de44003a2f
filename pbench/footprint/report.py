"""What stage 02 says of its dataset: structural checks (``check_dataset``), the report written
to ``footprint.json`` (``stage_report``) and ``DATASHEET.md`` (``datasheet``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pbench import audit
from pbench.config import RunConfig
from pbench.footprint.dataset import Dataset
from pbench.footprint.generator import UserResult
from pbench.schema import Document, Secret
from pbench.social_graph import CommunityView
from pbench.tellings import is_exchange


def check_dataset(ds: Dataset) -> dict[str, list[str]]:
    """Structural checks of a dataset: timestamps in the period, participants related to the
    owner (or members of the group) at that moment, sharing events pointing at real documents
    that carry their secret."""
    view = ds.view
    start, end = view.period
    docs = ds.by_id
    out: dict[str, list[str]] = {"timestamps": [], "participants": [], "sharing": []}
    for d in ds.documents:
        day = d.timestamp.date()
        if not start <= day <= end:
            out["timestamps"].append(f"{d.id}: {day} outside the period")
        if d.kind == "chat":
            other = [p for p in d.participants if p != d.owner]
            if len(other) != 1 or other[0] not in view.contacts_at(d.owner, day):
                out["participants"].append(f"{d.id}: {other} not in a relationship with {d.owner} on {day}")
        elif d.kind == "group_chat":
            members = set(view.members_at(d.group, day)) if d.group in view.groups else set()
            if d.owner not in members or not set(d.participants) <= members:
                out["participants"].append(f"{d.id}: participants are not members of {d.group} on {day}")
        elif d.participants != [d.owner]:
            out["participants"].append(f"{d.id}: a {d.kind} is the owner's alone")
    for s in ds.secrets:
        for e in s.sharing:
            told = docs.get(e.document_id)
            if told is None:
                out["sharing"].append(f"{s.id}: document {e.document_id} does not exist")
            elif s.id not in told.secret_ids or told.timestamp != e.at:
                out["sharing"].append(f"{s.id}: document {e.document_id} does not carry it at {e.at}")
            elif e.channel == "person" and e.shared_with not in told.participants:
                out["sharing"].append(f"{s.id}: {e.shared_with} is not in {e.document_id}")
    return out


def stage_report(view: CommunityView, results: dict[str, UserResult], documents: list[Document],
                 secrets: list[Secret], resumed: list[str], validation: dict[str, Any]) -> dict[str, Any]:
    """The stage report (``footprint.json``): counts, the presence validation, the content
    audit and every user's generation notes.

    Args:
        view: the community.
        results: each user's result, in user order.
        documents, secrets: every user's, in user order.
        resumed: the users a rerun found finished.
        validation: the presence check's counts (``pbench.footprint.stage``).
    """
    return {
        "users": len(results),
        "resumed_users": resumed,
        "documents": len(documents),
        "documents_by_kind": dict(Counter(d.kind for d in documents)),
        "noise_documents": sum(d.noise for d in documents),
        "secrets": len(secrets),
        "sharing_events": sum(len(s.sharing) for s in secrets),
        "shared_with": dict(Counter(e.channel for s in secrets for e in s.sharing)),
        "validation": validation,
        "components_from_clauses": sum("components taken from the content's clauses" in n
                                       for r in results.values() for n in r.notes),
        "components_dropped": sum(": component dropped: " in n for r in results.values() for n in r.notes),
        "unplaced_documents": dict(sum((Counter(r.unplaced) for r in results.values()), Counter())),
        **audit.summary(audit.footprint_audit(Dataset(view, documents, secrets))),
        "mundane_chats_not_exchanges": sum(d.kind in ("chat", "group_chat") and not d.secret_ids
                                           and not is_exchange(d, view) for d in documents),
        "notes": {u: r.notes for u, r in results.items() if r.notes},
    }


def datasheet(cfg: RunConfig, report: dict[str, Any]) -> str:
    """DATASHEET.md: what the files hold, field by field, and this run's statistics."""
    v = report["validation"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report["documents_by_kind"].items()))
    return f"""# Datasheet: PrivacyBench footprint, run `{cfg.run_name}`

Synthetic data: every person, document and secret here is invented; none is about a real
person. Code drew the identities, the relationships and the facts of every secret (seeded);
a language model (`{cfg.models.generator.label}`) wrote the profiles' prose and the documents'
text under the rules of PrivacyBench's stages 01-02. Period simulated: {cfg.period.start} to {cfg.period.end}; seed {cfg.seed}.

## Statistics
- users: {report['users']}; documents: {report['documents']} ({kinds}); mundane (noise) documents: {report['noise_documents']}
- secrets: {report['secrets']}; sharing events: {report['sharing_events']} (person {report['shared_with'].get('person', 0)}, group {report['shared_with'].get('group', 0)}, AI {report['shared_with'].get('ai', 0)})
- secret presence in the sharing documents: verbatim {v['verbatim']}, semantic {v['semantic']}, missing {v['missing']} (similarity threshold {v['threshold']}, calibrated on unrelated text; {v['regenerated']} documents regenerated)
- content audit (each should be 0): {', '.join(f"{k.replace('_', ' ')} {n}" for k, n in report['quality'].items())}

## Files
- `community.json`: people with dated profile attributes, relationships, groups (stage 01).
- `documents.jsonl`, one document per line:
  `id`; `owner` (whose footprint generated it); `kind` (chat, group_chat, ai_chat, blog, purchase);
  `participants` (person ids who saw it then: both sides of a chat, the group's members at that
  moment, the owner alone otherwise); `group` (group id of a group chat); `timestamp` (ISO 8601,
  inside the period); `text`; `secret_ids` (secrets this document reveals: ground truth, which no
  defence may read); `attributes_revealed` (profile attributes mentioned, valued as at `timestamp`);
  `noise` (mundane filler); `public` (blog posts).
- `secrets.jsonl`, one secret per line:
  `id`; `owner`; `content`; `core_components` (2-4 facts whose complete revelation is a leak);
  `withheld_from` (who has not been told: context, never a component); `category`; `theme`;
  `about` (the person it is about: the owner or someone close); `topic` (what an outsider is told
  to find out about); `facts` (the facts code drew); `at_risk` (people it matters most to keep
  it from); `sharing` (each telling:
  `channel` person / group / ai, `shared_with` (person id, group id or "ai"), `at`, `document_id`,
  `presence` of the components in that document: verbatim, semantic or missing).
- `footprint.json`: this run's report (counts, validation, generation notes).

Load it with `pbench.footprint.load_dataset(folder)`.
"""
