"""Group chats: the generator's groups held to the facts, and groups code forms around shared
employers, towns and circles of contacts to make up the number asked for.

Reads the generator's group drafts and the people; writes nothing (changes are recorded in the
caller's list).
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict

from pbench.community.drafts import GroupDraft
from pbench.community.facts import NO_VALUE, norm
from pbench.community.plan import Planner
from pbench.community.prose import scrub_names
from pbench.community.repair import repair_group
from pbench.community.view import CommunityView
from pbench.schema import Change, Group, Person


def sharing(gid: str, d: GroupDraft, people: list[Person], changes: list[Change]) -> list[str]:
    """The draft's members; for an interest group, those whose interests name it."""
    if d.basis != "interest":
        return d.member_ids
    words = {w for w in re.findall(r"[^\W\d_]{4,}", d.basis_value.lower())}
    by_id = {p.id: p for p in people}
    keep = [m for m in d.member_ids if m not in by_id or not words or words & set(re.findall(
        r"[^\W\d_]{4,}", " ".join(a.value for a in by_id[m].attributes if a.name == "interests").lower()))]
    if len(keep) != len(d.member_ids):
        changes.append(Change(check="groups", record=gid, action=f"members without the interest "
                              f"{d.basis_value!r} left out: {sorted(set(d.member_ids) - set(keep))}"))
    return keep


def group_words(gid: str, d: GroupDraft, people: list[Person], changes: list[Change]) -> tuple[str, str]:
    """The draft's name and purpose, unless they name someone who is not in the community:
    then words made by code from the group's basis (a group never renames people)."""
    names = [p.name for p in people]
    found = [n for text in (d.name, d.purpose) for n in scrub_names(text, "", names)[1]]
    if not found:
        return d.name, d.purpose
    changes.append(Change(check="names", record=gid, action=f"group named {found}: renamed from its basis"))
    return f"{d.basis_value} {'chat' if d.basis != 'family' else 'family chat'}", f"people who share {d.basis} {d.basis_value}"


def keep_groups(view: CommunityView, groups: list[Group], n_groups: int, plan: Planner) -> list[Group]:
    """The groups as the checks leave them (so the final repair has nothing left to drop), made
    up to ``n_groups`` with groups code forms around shared attributes, checked the same way."""
    kept: list[Group] = []
    for g in groups:
        fixed = repair_group(view, g, [])
        if fixed is None:
            plan.changes.append(Change(check="groups", record=g.id, action=f"{g.name!r} rejected after checks"))
        else:
            kept.append(fixed)
    for name, purpose, basis, members in code_groups(view, plan.start):
        if len(kept) >= n_groups:
            break
        if any(set(members) == {m.person for m in g.members} for g in kept):
            continue
        gid = f"g{len(groups) + len(kept) + 1}c"
        fixed = repair_group(view, plan.dated_group(gid, name, purpose, basis, members), [])
        if fixed is not None:
            kept.append(fixed)
            plan.changes.append(Change(check="groups", record=gid, action=f"formed by code around {basis}"))
    return kept


def code_groups(view: CommunityView, t: dt.date) -> list[tuple[str, str, str, list[str]]]:
    """Candidate groups from attributes members share on day ``t``: employers, then places,
    then each person's circle of contacts."""
    out = []
    for attr, label in (("employer", "team"), ("location", "neighbours")):
        by_value: dict[str, list[str]] = defaultdict(list)
        for pid in view.people:
            v = view.attributes_at(pid, t).get(attr, "")
            if norm(v) not in NO_VALUE:
                by_value[v].append(pid)
        for v, members in sorted(by_value.items(), key=lambda kv: -len(kv[1])):
            if len(members) >= 2:
                out.append((f"{v} {label}", f"people who share {attr} {v}", f"{attr}: {v}", members))
    for pid in sorted(view.people, key=lambda p: -len(view.contacts_at(p, t))):
        contacts = sorted(view.contacts_at(pid, t))
        if contacts:
            out.append((f"{view.name(pid)}'s circle", f"friends and family around {view.name(pid)}",
                        f"circle: {view.name(pid)}", [pid, *contacts]))
    return out
