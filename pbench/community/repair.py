"""Repair: mend what the period's rules find (``pbench.community.rules.check``), recording each
change under the rule's name; reject what cannot be mended.

Reads a proposed ``Community``; returns the repaired one and its ``Change`` records (appended
to the community's own). Each function mends one kind of record, in a fixed order (people,
names, relationships, groups, reachability), so the list of changes is the same on every run.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter, defaultdict

import networkx as nx

from pbench.community.facts import DAY, bound_attr, date_bond, norm, shared_spans, story
from pbench.community.rules import linked, permanence_broken
from pbench.community.view import CommunityView
from pbench.schema import PERMANENT_KINDS, AttributeValue, Change, Community, Group, Membership, Person, Relationship


def repair(community: Community, rng: random.Random) -> tuple[Community, list[Change]]:
    """Fix what the checks find, recording each change; reject what cannot be fixed.

    Args:
        community: a community as proposed.
        rng: the run's random generator (for the relationships that change over time).
    Returns:
        The repaired community and the list of changes made.
    """
    changes: list[Change] = []
    start, end = community.period_start, community.period_end
    people = [_repair_person(p, start, end, changes) for p in community.people]
    people = _unique_names(people, changes)
    view = CommunityView(community.model_copy(update={"people": people}))
    rels = _repair_bonds(view, community.relationships, rng, changes)
    groups = [g for g in (repair_group(view, g, changes) for g in community.groups) if g is not None]
    fixed = community.model_copy(update={"people": people, "relationships": rels, "groups": groups})
    fixed = _connect(fixed, rng, changes)
    return fixed.model_copy(update={"changes": list(community.changes) + changes}), changes


def _repair_bonds(view: CommunityView, proposed: list[Relationship], rng: random.Random,
                  changes: list[Change]) -> list[Relationship]:
    """Relationships between members, one of each kind a pair, dated within the period, as
    permanent as their kind, and bounded to the employer or town their kind needs."""
    start, end = view.period
    rels: list[Relationship] = []
    seen: set[tuple] = set()
    for r in proposed:
        if not linked(view, r):
            changes.append(Change(check="endpoints", record=r.id, action=f"dropped: links {r.a} and {r.b}"))
            continue
        key = (frozenset((r.a, r.b)), r.kind)
        if key in seen:
            changes.append(Change(check="endpoints", record=r.id, action="dropped: duplicate of an earlier bond"))
            continue
        seen.add(key)
        if r.start > end:
            changes.append(Change(check="dates", record=r.id, action=f"start {r.start} after the period: moved to {start}"))
            r = r.model_copy(update={"start": start})
        if permanence_broken(r):
            permanent = r.kind in PERMANENT_KINDS
            new_end = None if permanent else (r.end or end)
            changes.append(Change(check="permanence", record=r.id, action=f"{r.kind}: permanent={permanent}, end={new_end}"))
            r = r.model_copy(update={"permanent": permanent, "end": new_end})
        if r.end is not None and r.end < r.start:
            changes.append(Change(check="dates", record=r.id, action="end before start: dates swapped"))
            r = r.model_copy(update={"start": r.end, "end": r.start})
        rels.extend(_bind_to_shared(view, r, rng, changes))
    return rels


def _repair_person(p: Person, start: dt.date, end: dt.date, changes: list[Change]) -> Person:
    by_name: dict[str, list[AttributeValue]] = defaultdict(list)
    for a in p.attributes:
        if a.valid_to < a.valid_from:
            changes.append(Change(check="dates", record=f"{p.id}.{a.name}", action="end before start: swapped"))
            a = a.model_copy(update={"valid_from": a.valid_to, "valid_to": a.valid_from})
        if a.valid_from < start or a.valid_to > end:
            a = a.model_copy(update={"valid_from": max(a.valid_from, start), "valid_to": min(a.valid_to, end)})
            if a.valid_to < a.valid_from:
                changes.append(Change(check="dates", record=f"{p.id}.{a.name}", action=f"{a.value!r} outside the period: dropped"))
                continue
            changes.append(Change(check="dates", record=f"{p.id}.{a.name}", action="clipped to the period"))
        by_name[a.name].append(a)
    attrs: list[AttributeValue] = []
    for name, values in by_name.items():
        values.sort(key=lambda a: a.valid_from)
        line: list[AttributeValue] = []
        for a in values:
            if line and a.valid_from <= line[-1].valid_to:
                cut = a.valid_from - DAY
                changes.append(Change(check="attribute_timeline", record=f"{p.id}.{name}",
                                      action=f"overlap: {line[-1].value!r} ends {cut}"))
                if cut < line[-1].valid_from:
                    line.pop()
                else:
                    line[-1] = line[-1].model_copy(update={"valid_to": cut})
            elif line and a.valid_from > line[-1].valid_to + DAY:
                changes.append(Change(check="attribute_timeline", record=f"{p.id}.{name}",
                                      action=f"gap: {line[-1].value!r} extended to {a.valid_from - DAY}"))
                line[-1] = line[-1].model_copy(update={"valid_to": a.valid_from - DAY})
            line.append(a)
        if line[0].valid_from != start:
            line[0] = line[0].model_copy(update={"valid_from": start})
            changes.append(Change(check="attribute_timeline", record=f"{p.id}.{name}", action="first value starts with the period"))
        if line[-1].valid_to != end:
            line[-1] = line[-1].model_copy(update={"valid_to": end})
            changes.append(Change(check="attribute_timeline", record=f"{p.id}.{name}", action="last value lasts to the period's end"))
        attrs.extend(line)
    return p.model_copy(update={"attributes": attrs})


def _unique_names(people: list[Person], changes: list[Change]) -> list[Person]:
    seen: Counter[str] = Counter()
    out = []
    for p in people:
        seen[p.name] += 1
        if seen[p.name] > 1:
            new = f"{p.name} ({seen[p.name]})"
            changes.append(Change(check="names", record=p.id, action=f"name {p.name!r} taken: renamed {new!r}"))
            p = p.model_copy(update={"name": new})
        out.append(p)
    return out


def _bind_to_shared(view: CommunityView, r: Relationship, rng: random.Random, changes: list[Change]) -> list[Relationship]:
    """Work and neighbour bonds last only while the two share an employer or a place."""
    attr = bound_attr(r.kind)
    if attr is None or r.end is None:
        return [r]
    start, end = view.period
    lo, hi = max(r.start, start), min(r.end, end)
    # The period's days only: repair moves a bond within the period (a bond that ended before
    # it shares nothing there, and becomes an acquaintance).
    in_period = [(max(f, start), t) for f, t in shared_spans(view, r.a, r.b, attr) if start <= t]
    spans = [(f, t) for f, t in in_period if f <= hi and lo <= t]
    if not spans:
        changes.append(Change(check=attr, record=r.id, action=f"{r.kind} without a shared {attr}: now acquaintance"))
        return [r.model_copy(update={"kind": "acquaintance"})]
    f, t = spans[0]
    new_start = r.start if f <= lo else f
    new_end = min(r.end, t)
    out = [r.model_copy(update={"start": new_start, "end": new_end})]
    if (new_start, new_end) != (r.start, r.end):
        changes.append(Change(check=attr, record=r.id, action=f"{r.kind} bounded to the shared {attr}: {new_start} to {new_end}"))
    if new_end < end and rng.random() < 0.5:
        # People who stop working together often stay in touch: the bond changes kind.
        out.append(Relationship(id=f"{r.id}b", a=r.a, b=r.b, kind="friend", permanent=False, start=new_end + DAY,
                                end=end, source="evolution",
                                why=f"stayed in touch after no longer sharing {'an employer' if attr == 'employer' else 'a town'}"))
        changes.append(Change(check=attr, record=r.id, action=f"after {new_end}: continues as friend ({r.id}b)"))
    return out


def repair_group(view: CommunityView, g: Group, changes: list[Change]) -> Group | None:
    start, end = view.period
    members: list[Membership] = []
    seen: set[str] = set()
    basis_attr, _, basis_value = g.basis.partition(": ")
    for m in g.members:
        if m.person not in view.people:
            changes.append(Change(check="groups", record=g.id, action=f"member {m.person} is not in the community: dropped"))
            continue
        if m.person in seen:
            changes.append(Change(check="groups", record=g.id, action=f"member {m.person} listed twice: once kept"))
            continue
        s, e = max(m.start, start), min(m.end, end)
        if basis_attr in ("employer", "location"):
            spans = [(a.valid_from, a.valid_to) for a in view.attribute_history(m.person, basis_attr)
                     if norm(a.value) == norm(basis_value)]
            if not spans:
                changes.append(Change(check="groups", record=g.id,
                                      action=f"{m.person} never had {basis_attr} {basis_value!r}: dropped"))
                continue
            f, t = spans[0]
            if (max(s, f), min(e, t)) != (s, e):
                changes.append(Change(check="groups", record=g.id, action=f"{m.person}'s membership bounded to their {basis_attr}"))
            s, e = max(s, f), min(e, t)
        if e < s:
            changes.append(Change(check="groups", record=g.id, action=f"membership of {m.person} has no days: dropped"))
            continue
        seen.add(m.person)
        members.append(Membership(person=m.person, start=s, end=e))
    if len(members) < 2:
        changes.append(Change(check="groups", record=g.id, action=f"{g.name!r} has fewer than 2 members: rejected"))
        return None
    return g.model_copy(update={"members": members})


def _connect(community: Community, rng: random.Random, changes: list[Change]) -> Community:
    view = CommunityView(community)
    graph = view.graph_at(None)
    parts = sorted(nx.connected_components(graph), key=lambda c: (-len(c), sorted(c)))
    rels = list(community.relationships)
    main = sorted(parts[0]) if parts else []
    for comp in parts[1:]:
        # Prefer a pair that shared a town (an acquaintance the facts support), else one met online.
        pairs = [(x, y) for x in sorted(comp) for y in main if shared_spans(view, x, y, "location")]
        a, b = rng.choice(pairs) if pairs else (sorted(comp)[0], rng.choice(main))
        rid = f"r{len(rels) + 1}x"
        got = date_bond(view, "acquaintance", a, b, rng, community.period_start)
        rel = Relationship(id=rid, a=a, b=b, kind="acquaintance", permanent=False,
                           start=got[0] if got else community.period_start, end=community.period_end, source="repair")
        rels.append(rel.model_copy(update={"why": story(view, rel)}))
        changes.append(Change(check="reachable", record=rid, action=f"{a} was unreachable: linked to {b} as acquaintances"))
        main += sorted(comp)
    return community.model_copy(update={"relationships": rels})
