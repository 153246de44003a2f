"""Stage 01: community simulation, an evolving social graph with dated profiles (section 3.1).

Reads the parameters (``community``, ``period``, ``seed``, the ``generator`` role) and the seed
personas (``pbench/data/personas.jsonl`` or ``community.personas_path``). Writes
``community.json`` (people with dated attributes, relationships, groups, the period, and
every change code made to what the generator proposed) and ``community.graphml``.

The generator proposes (profiles, relationships among the seeds, new members anchored to
existing ones, groups); code dates everything, checks it and repairs or rejects it. Who may
know what at a date is computed from ``CommunityView``, never asked of a model.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel

from pbench import figures, prompts, store
from pbench.config import RunConfig
from pbench.schema import (
    PERMANENT_KINDS,
    PLACE_KINDS,
    TEMPORAL_ATTRIBUTES,
    WORK_KINDS,
    AttributeValue,
    Change,
    Community,
    Group,
    Membership,
    Person,
    Relationship,
    RelationshipKind,
)

DAY = dt.timedelta(days=1)
KINDS: tuple[str, ...] = RelationshipKind.__args__  # type: ignore[attr-defined]
# Values that name no organisation or place: nobody is a colleague or neighbour through them.
NO_VALUE = {"", "none", "n/a", "na", "unemployed", "retired", "self-employed", "self employed", "freelance", "student"}


# --------------------------------------------------------------------------- seed personas


def load_personas(path: str | Path | None = None) -> list[dict[str, str]]:
    """Read Persona Hub-style JSONL: one object per line with a ``persona`` text (``id`` optional).

    Raises:
        ValueError: a line without a persona, naming the file and line.
    """
    path = Path(path) if path else Path(__file__).parent / "data" / "personas.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: no such personas file (community.personas_path)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        text = rec.get("persona") if isinstance(rec, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{n}: no 'persona' text")
        out.append({"id": str(rec.get("id", f"line{n}")), "persona": text.strip()})
    return out


# --------------------------------------------------------------------------- generator drafts


class LifeEventDraft(BaseModel):
    kind: Literal["new_job", "move", "graduation", "none"]
    month: int
    new_occupation: str
    new_employer: str
    new_location: str
    new_education: str


class ProfileDraft(BaseModel):
    name: str
    age: int
    gender: str
    occupation: str
    employer: str
    location: str
    education: str
    interests: list[str]
    beliefs: str
    texting_style: str
    blogging_style: str
    shopping_preferences: str
    life_event: LifeEventDraft


class RelationshipDraft(BaseModel):
    a: str
    b: str
    kind: RelationshipKind
    since_year: int
    why: str


class SeedRelationships(BaseModel):
    relationships: list[RelationshipDraft]


class NewMemberDraft(BaseModel):
    persona: str
    profile: ProfileDraft
    since_year: int
    why: str


class GroupDraft(BaseModel):
    name: str
    purpose: str
    basis: Literal["employer", "interest", "location", "family"]
    basis_value: str
    member_ids: list[str]


class GroupsDraft(BaseModel):
    groups: list[GroupDraft]


# --------------------------------------------------------------------------- query API


class CommunityView:
    """The state of a community at any date: the one query API later stages use.

    Args:
        community: the stage's record.
    """

    def __init__(self, community: Community) -> None:
        self.c = community
        self.people = {p.id: p for p in community.people}
        self.groups = {g.id: g for g in community.groups}

    @property
    def period(self) -> tuple[dt.date, dt.date]:
        return self.c.period_start, self.c.period_end

    def name(self, pid: str) -> str:
        return self.people[pid].name

    def attributes_at(self, pid: str, t: dt.date) -> dict[str, str]:
        """Each attribute's value on day ``t`` (attributes with no value then are absent)."""
        return {a.name: a.value for a in self.people[pid].attributes if a.active(t)}

    def attribute_history(self, pid: str, name: str) -> list[AttributeValue]:
        return sorted((a for a in self.people[pid].attributes if a.name == name), key=lambda a: a.valid_from)

    def relationships_at(self, pid: str, t: dt.date) -> list[Relationship]:
        """Relationships of ``pid`` active on day ``t``."""
        return [r for r in self.c.relationships if pid in (r.a, r.b) and r.active(t)]

    def relationships_between(self, a: str, b: str, t: dt.date | None = None) -> list[Relationship]:
        """Relationships linking ``a`` and ``b`` (on day ``t`` when given)."""
        return [r for r in self.c.relationships if {r.a, r.b} == {a, b} and (t is None or r.active(t))]

    def contacts_at(self, pid: str, t: dt.date) -> set[str]:
        return {r.other(pid) for r in self.relationships_at(pid, t)}

    def groups_at(self, pid: str, t: dt.date) -> list[Group]:
        """Groups ``pid`` belongs to on day ``t``."""
        return [g for g in self.c.groups if any(m.person == pid and m.active(t) for m in g.members)]

    def members_at(self, gid: str, t: dt.date) -> list[str]:
        """Members of group ``gid`` on day ``t``."""
        return [m.person for m in self.groups[gid].members if m.active(t)]

    def graph_at(self, t: dt.date | None = None) -> nx.MultiGraph:
        """People as nodes, relationships active on ``t`` (all of them when ``t`` is None) as edges."""
        g = nx.MultiGraph()
        for p in self.c.people:
            g.add_node(p.id, name=p.name)
        for r in self.c.relationships:
            if t is None or r.active(t):
                g.add_edge(r.a, r.b, key=r.id, kind=r.kind)
        return g


# --------------------------------------------------------------------------- dates and profiles


def months_in(start: dt.date, end: dt.date) -> int:
    return (end.year - start.year) * 12 + end.month - start.month + 1


def month_date(start: dt.date, end: dt.date, month: int) -> dt.date:
    """First day of the ``month``-th month of the period (1-based), kept a month inside its ends."""
    total = months_in(start, end)
    month = min(max(month, 2), max(total - 1, 2))
    y, m = divmod(start.month - 1 + month - 1, 12)
    day = dt.date(start.year + y, m + 1, 1)
    return min(max(day, start + DAY), end)


def norm(value: str) -> str:
    return " ".join(value.lower().split())


def build_person(
    pid: str, draft: ProfileDraft, persona: str, origin: str, start: dt.date, end: dt.date, changes: list[Change]
) -> Person:
    """Turn a profile draft into a person with dated attributes (one life event at most)."""
    static = {
        "age": str(draft.age),
        "gender": draft.gender,
        "interests": ", ".join(i.strip() for i in draft.interests if i.strip()),
        "beliefs": draft.beliefs,
        "texting_style": draft.texting_style,
        "blogging_style": draft.blogging_style,
        "shopping_preferences": draft.shopping_preferences,
    }
    initial = {"occupation": draft.occupation, "employer": draft.employer, "location": draft.location,
               "education": draft.education}
    ev = draft.life_event
    new = {
        "new_job": {"occupation": ev.new_occupation, "employer": ev.new_employer},
        "move": {"location": ev.new_location},
        "graduation": {"education": ev.new_education, "occupation": ev.new_occupation},
        "none": {},
    }[ev.kind]
    new = {k: v.strip() for k, v in new.items() if v.strip() and norm(v) != norm(initial[k])}
    if ev.kind != "none" and not new:
        changes.append(Change(check="life_event", record=pid, action=f"{ev.kind} without a new value: ignored"))
    when = month_date(start, end, ev.month)
    if new and not 1 <= ev.month <= months_in(start, end):
        changes.append(Change(check="life_event", record=pid, action=f"month {ev.month} outside the period: moved to {when}"))
    attrs = [AttributeValue(name=k, value=str(v), valid_from=start, valid_to=end) for k, v in static.items()]
    for k, v in initial.items():
        if k in new:
            attrs.append(AttributeValue(name=k, value=v, valid_from=start, valid_to=when - DAY))
            attrs.append(AttributeValue(name=k, value=new[k], valid_from=when, valid_to=end))
        else:
            attrs.append(AttributeValue(name=k, value=v, valid_from=start, valid_to=end))
    return Person(id=pid, name=draft.name.strip(), persona=persona, origin=origin, attributes=attrs)


def _intervals(view: CommunityView, pid: str, attr: str) -> list[tuple[dt.date, dt.date, str]]:
    return [(a.valid_from, a.valid_to, norm(a.value)) for a in view.attribute_history(pid, attr)]


def shared_intervals(view: CommunityView, a: str, b: str, attr: str) -> list[tuple[dt.date, dt.date]]:
    """Days on which ``a`` and ``b`` hold the same real value of ``attr`` (an employer, a place)."""
    out = []
    for fa, ta, va in _intervals(view, a, attr):
        for fb, tb, vb in _intervals(view, b, attr):
            if va == vb and va not in NO_VALUE:
                lo, hi = max(fa, fb), min(ta, tb)
                if lo <= hi:
                    out.append((lo, hi))
    merged: list[tuple[dt.date, dt.date]] = []
    for lo, hi in sorted(out):  # moving together to a new employer keeps them colleagues
        if merged and lo <= merged[-1][1] + DAY:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


# --------------------------------------------------------------------------- checks


def _bound_attr(kind: str) -> str | None:
    return "employer" if kind in WORK_KINDS else "location" if kind in PLACE_KINDS else None


def check(community: Community) -> dict[str, list[str]]:
    """Every validation rule, each with the records that break it (empty lists: valid).

    Returns:
        ``{check name: ["record: problem", ...]}`` for: endpoints, dates, permanence,
        attribute_timeline, names, employer, location, groups, reachable.
    """
    view = CommunityView(community)
    start, end = community.period_start, community.period_end
    out: dict[str, list[str]] = {k: [] for k in (
        "endpoints", "dates", "permanence", "attribute_timeline", "names", "employer", "location", "groups", "reachable")}
    for p in community.people:
        by_name: dict[str, list[AttributeValue]] = defaultdict(list)
        for a in p.attributes:
            by_name[a.name].append(a)
            if a.valid_to < a.valid_from:
                out["dates"].append(f"{p.id}.{a.name}: ends before it starts")
            if a.valid_from < start or a.valid_to > end:
                out["dates"].append(f"{p.id}.{a.name}: outside the period")
        for name, values in by_name.items():
            values.sort(key=lambda a: a.valid_from)
            if values[0].valid_from != start or values[-1].valid_to != end:
                out["attribute_timeline"].append(f"{p.id}.{name}: does not cover the period")
            for prev, nxt in zip(values, values[1:]):
                if nxt.valid_from <= prev.valid_to:
                    out["attribute_timeline"].append(f"{p.id}.{name}: periods overlap")
                elif nxt.valid_from != prev.valid_to + DAY:
                    out["attribute_timeline"].append(f"{p.id}.{name}: gap between values")
    for name, n in Counter(p.name for p in community.people).items():
        if n > 1:
            out["names"].append(f"{name}: {n} people share the name")
    for r in community.relationships:
        if r.a not in view.people or r.b not in view.people or r.a == r.b:
            out["endpoints"].append(f"{r.id}: links {r.a} and {r.b}")
            continue
        if r.end is not None and r.end < r.start:
            out["dates"].append(f"{r.id}: ends before it starts")
        if r.start > end:
            out["dates"].append(f"{r.id}: starts after the period")
        if r.permanent != (r.kind in PERMANENT_KINDS) or r.permanent != (r.end is None):
            out["permanence"].append(f"{r.id}: {r.kind} with permanent={r.permanent}, end={r.end}")
        attr = _bound_attr(r.kind)
        if attr and r.end is not None:
            lo, hi = max(r.start, start), min(r.end, end)
            if lo <= hi and not any(f <= lo and hi <= t for f, t in shared_intervals(view, r.a, r.b, attr)):
                out[attr].append(f"{r.id}: {r.kind} on days the two do not share a {attr}")
    for g in community.groups:
        people = [m.person for m in g.members]
        if len(set(people)) < 2:
            out["groups"].append(f"{g.id}: fewer than 2 members")
        if len(set(people)) != len(people):
            out["groups"].append(f"{g.id}: a member is listed twice")
        for m in g.members:
            if m.person not in view.people:
                out["groups"].append(f"{g.id}: member {m.person} is not in the community")
            if m.end < m.start or m.start < start or m.end > end:
                out["groups"].append(f"{g.id}: membership of {m.person} has bad dates")
    graph = view.graph_at(None)
    if graph.number_of_nodes() and not nx.is_connected(graph):
        parts = sorted(nx.connected_components(graph), key=len, reverse=True)
        for comp in parts[1:]:
            out["reachable"].append(f"{', '.join(sorted(comp))}: not connected to the rest")
    return out


# --------------------------------------------------------------------------- repairs


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
    interim = community.model_copy(update={"people": people})
    view = CommunityView(interim)

    rels: list[Relationship] = []
    seen: set[tuple] = set()
    for r in community.relationships:
        if r.a not in view.people or r.b not in view.people or r.a == r.b:
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
        permanent = r.kind in PERMANENT_KINDS
        if r.permanent != permanent or (permanent and r.end is not None) or (not permanent and r.end is None):
            new_end = None if permanent else (r.end or end)
            changes.append(Change(check="permanence", record=r.id, action=f"{r.kind}: permanent={permanent}, end={new_end}"))
            r = r.model_copy(update={"permanent": permanent, "end": new_end})
        if r.end is not None and r.end < r.start:
            changes.append(Change(check="dates", record=r.id, action="end before start: dates swapped"))
            r = r.model_copy(update={"start": r.end, "end": r.start})
        rels.extend(_bind_to_shared(view, r, rng, changes))

    groups = [g for g in (_repair_group(view, g, changes) for g in community.groups) if g is not None]
    fixed = community.model_copy(update={"people": people, "relationships": rels, "groups": groups})
    fixed = _connect(fixed, rng, changes)
    return fixed.model_copy(update={"changes": list(community.changes) + changes}), changes


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
    attr = _bound_attr(r.kind)
    if attr is None or r.end is None:
        return [r]
    start, end = view.period
    lo, hi = max(r.start, start), min(r.end, end)
    spans = [(f, t) for f, t in shared_intervals(view, r.a, r.b, attr) if f <= hi and lo <= t]
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
                                end=end, why=f"stayed in touch after no longer sharing a {attr}", source="evolution"))
        changes.append(Change(check=attr, record=r.id, action=f"after {new_end}: continues as friend ({r.id}b)"))
    return out


def _repair_group(view: CommunityView, g: Group, changes: list[Change]) -> Group | None:
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
        a, b = sorted(comp)[0], rng.choice(main)
        rid = f"r{len(rels) + 1}x"
        rels.append(Relationship(id=rid, a=a, b=b, kind="acquaintance", permanent=False, start=community.period_start,
                                 end=community.period_end, why="met through the community", source="repair"))
        changes.append(Change(check="reachable", record=rid, action=f"{a} was unreachable: linked to {b} as acquaintances"))
        main += sorted(comp)
    return community.model_copy(update={"relationships": rels})


# --------------------------------------------------------------------------- generation


EXPANSION_KINDS = {  # kind -> (weight, how the prompt phrases it)
    "family": (3, "a family member (sibling, parent, child or cousin)"),
    "partner": (1, "the romantic partner"),
    "friend": (3, "a close friend"),
    "colleague": (3, "a colleague at the same employer"),
    "manager": (1, "the manager at work"),
    "neighbour": (2, "a neighbour"),
    "hobby_friend": (2, "a friend from a shared hobby"),
}


def _summary(pid: str, person: Person, t: dt.date) -> dict[str, str]:
    attrs = {a.name: a.value for a in person.attributes if a.active(t)}
    return {"id": pid, "name": person.name, **{k: attrs.get(k, "") for k in ("age", "occupation", "employer", "location", "interests")}}


class Generator:
    """Builds a community with the generator role. One instance per stage run.

    Args:
        cfg: the run's parameters.
        model: the model bound to the ``generator`` role (``pbench.llm.ChatModel``).
        progress: a tqdm bar ticked once per model request, or None.
    """

    def __init__(self, cfg: RunConfig, model: Any, progress: Any = None) -> None:
        self.cfg = cfg
        self.model = model
        self.progress = progress
        self.rng = random.Random(cfg.seed)
        self.start, self.end = cfg.period.start, cfg.period.end
        self.months = months_in(self.start, self.end)
        self.changes: list[Change] = []
        self.proposed: dict[str, int] = Counter()

    async def _ask(self, stage_prompt: str, schema: type[BaseModel], seed: int, **variables: Any) -> Any:
        text = prompts.render("social_graph", stage_prompt, **variables)
        out = await self.model.acomplete([{"role": "user", "content": text}], schema, seed=seed)
        if self.progress is not None:
            self.progress.update(1)
        return out

    async def _profile(self, pid: str, personas: list[dict[str, str]], seed: int, setting: str) -> Person | None:
        for attempt, persona in enumerate(personas):
            out = await self._ask("profile", ProfileDraft, seed + 1000 * attempt, persona=persona["persona"],
                                  setting=setting, period_start=self.start, period_end=self.end, months=self.months)
            if not out.unparsed:
                return build_person(pid, out.parsed, persona["persona"], "seed", self.start, self.end, self.changes)
            self.changes.append(Change(check="unparsed", record=pid,
                                       action=f"profile for persona {persona['id']} unparsed ({out.error}): persona replaced"))
        return None

    async def generate(self) -> Community:
        """Propose, date, check and repair a community of the configured size."""
        cc = self.cfg.community
        size = self.rng.randint(*cc.size)
        n_groups = self.rng.randint(*cc.groups)
        pool = load_personas(cc.personas_path)
        if len(pool) < cc.initial_seed:
            raise ValueError(f"community.personas_path: {len(pool)} personas, fewer than initial_seed={cc.initial_seed}")
        order = self.rng.sample(pool, len(pool))
        seeds, spare = order[: cc.initial_seed], order[cc.initial_seed:]
        if self.progress is not None:
            self.progress.total = cc.initial_seed + 1 + (size - cc.initial_seed) + 1
            self.progress.refresh()

        # 1. Profiles of the seed personas; an unparsable one takes a spare persona. The first
        # seed sets where the community lives, so that the others can plausibly know them.
        def job(i: int, setting: str):
            return self._profile(f"u{i + 1:02d}", [seeds[i]] + spare[i::cc.initial_seed][:2], self.cfg.seed * 7919 + i, setting)

        first = await job(0, "")
        setting = next(a.value for a in first.attributes if a.name == "location") if first else ""
        people = [p for p in [first, *await asyncio.gather(*(job(i, setting) for i in range(1, len(seeds))))] if p]
        if len(people) < 2:
            raise RuntimeError("the generator produced fewer than 2 seed profiles it could parse; see community changes")

        # 2. Relationships among the seeds.
        rels = await self._seed_relationships(people)

        # 3. Expansion: new people, each anchored to an existing member, in concurrent rounds.
        while len(people) < size:
            anchors = self.rng.sample(people, min(len(people), size - len(people)))
            jobs = [self._expand(a, f"u{len(people) + i + 1:02d}", people) for i, a in enumerate(anchors)]
            made = [m for m in await asyncio.gather(*jobs) if m is not None]
            if not made:
                break  # every proposal in this round was unparsable: stop short, recorded in changes
            for person, rel in made:
                people.append(person)
                rels.append(rel.model_copy(update={"id": f"r{len(rels) + 1}"}))
        if len(people) < size:
            self.changes.append(Change(check="size", record="community", action=f"{len(people)} people of {size} asked for"))

        # 4. Groups around shared attributes.
        groups = await self._groups(people, rels, n_groups)

        proposed = Community(period_start=self.start, period_end=self.end, people=people, relationships=rels,
                             groups=groups, changes=self.changes)
        self.found_before = {k: len(v) for k, v in check(proposed).items()}
        community, _ = repair(proposed, self.rng)
        return community

    async def _seed_relationships(self, people: list[Person]) -> list[Relationship]:
        out = await self._ask("relationships", SeedRelationships, self.cfg.seed * 31 + 1,
                              people=[_summary(p.id, p, self.start) for p in people], kinds=KINDS,
                              period_start=self.start)
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record="seed relationships",
                                       action=f"unparsed ({out.error}): none proposed; reachability repair links the seeds"))
            return []
        rels = []
        for i, d in enumerate(out.parsed.relationships, 1):
            self.proposed["relationships"] += 1
            rels.append(self._relationship(f"r{i}", d.a, d.b, d.kind, d.since_year, d.why, "generator"))
        return rels

    def _relationship(self, rid: str, a: str, b: str, kind: str, since_year: int, why: str, source: str) -> Relationship:
        year = min(max(since_year, 1900), self.end.year)
        start = dt.date(year, 1, 1) + dt.timedelta(days=self.rng.randrange(365))
        if source == "generator":
            start = min(start, self.start)  # the seeds were asked how they know each other at the start
        elif start >= self.start:  # a newcomer met during the period: somewhere in its first nine tenths
            start = self.start + dt.timedelta(days=self.rng.randrange(max(int((self.end - self.start).days * 0.9), 1)))
        if year != since_year:
            self.changes.append(Change(check="dates", record=rid, action=f"since_year {since_year} implausible: {year}"))
        permanent = kind in PERMANENT_KINDS
        return Relationship(id=rid, a=a, b=b, kind=kind, permanent=permanent, start=start,
                            end=None if permanent else self.end, why=why.strip(), source=source)

    async def _expand(self, anchor: Person, pid: str, people: list[Person]) -> tuple[Person, Relationship] | None:
        kinds = list(EXPANSION_KINDS)
        kind = self.rng.choices(kinds, weights=[EXPANSION_KINDS[k][0] for k in kinds])[0]
        now = {a.name: a.value for a in anchor.attributes if a.active(self.start)}
        bound = {"employer": WORK_KINDS, "location": PLACE_KINDS}
        if any(kind in kinds_ and norm(now[attr]) in NO_VALUE for attr, kinds_ in bound.items()):
            kind = "friend"  # nobody to work beside or live next to
        seed = self.cfg.seed * 104729 + int(pid[1:])
        out = await self._ask("expand", NewMemberDraft, seed, anchor=_summary(anchor.id, anchor, self.start), kind=kind,
                              kind_hint=EXPANSION_KINDS[kind][1], period_start=self.start, period_end=self.end,
                              months=self.months, avoid_names=[p.name for p in people])
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record=pid, action=f"new member next to {anchor.id} unparsed ({out.error}): skipped"))
            return None
        d = out.parsed
        profile = d.profile
        for attr, kinds_ in bound.items():
            # A colleague shares the anchor's employer and a neighbour their place, whatever the draft says.
            if kind in kinds_ and norm(getattr(profile, attr)) != norm(now[attr]):
                self.changes.append(Change(check=attr, record=pid, action=f"{kind} of {anchor.id} with {attr} "
                                           f"{getattr(profile, attr)!r}: set to {now[attr]!r}"))
                profile = profile.model_copy(update={attr: now[attr]})
        person = build_person(pid, profile, d.persona.strip(), "expansion", self.start, self.end, self.changes)
        # For a manager, the new person manages the anchor.
        a, b = (pid, anchor.id) if kind == "manager" else (anchor.id, pid)
        self.proposed["relationships"] += 1
        return person, self._relationship("r?", a, b, kind, d.since_year, d.why, "expansion")

    async def _groups(self, people: list[Person], rels: list[Relationship], n_groups: int) -> list[Group]:
        out = await self._ask("groups", GroupsDraft, self.cfg.seed * 131 + 7,
                              people=[_summary(p.id, p, self.start) for p in people], n_groups=n_groups)
        drafts = [] if out.unparsed else out.parsed.groups[:n_groups]
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record="groups", action=f"unparsed ({out.error}): formed by code"))
        groups = [self._dated_group(f"g{i + 1}", d.name, d.purpose, f"{d.basis}: {d.basis_value}", d.member_ids)
                  for i, d in enumerate(drafts)]
        view = CommunityView(Community(period_start=self.start, period_end=self.end, people=people,
                                       relationships=rels, groups=[]))
        # Keep only groups that survive repair; make up the number from shared attributes in code.
        # Keep each group as the checks leave it (so the final repair has nothing left to
        # drop), and make up the number with groups code forms around shared attributes,
        # checked the same way.
        kept: list[Group] = []
        for g in groups:
            fixed = _repair_group(view, g, [])
            if fixed is None:
                self.changes.append(Change(check="groups", record=g.id, action=f"{g.name!r} rejected after checks"))
            else:
                kept.append(fixed)
        for name, purpose, basis, members in _code_groups(view, self.start):
            if len(kept) >= n_groups:
                break
            if any(set(members) == {m.person for m in g.members} for g in kept):
                continue
            gid = f"g{len(groups) + len(kept) + 1}c"
            fixed = _repair_group(view, self._dated_group(gid, name, purpose, basis, members), [])
            if fixed is not None:
                kept.append(fixed)
                self.changes.append(Change(check="groups", record=gid, action=f"formed by code around {basis}"))
        return kept

    def _dated_group(self, gid: str, name: str, purpose: str, basis: str, members: Iterable[str]) -> Group:
        formed = self.start + dt.timedelta(days=self.rng.randrange(max((self.end - self.start).days // 4, 1)))
        dated = []
        for pid in dict.fromkeys(members):
            start = formed
            if dated and self.rng.random() < 0.25:  # some join later
                start = formed + dt.timedelta(days=self.rng.randrange(max((self.end - formed).days // 2, 1)))
            stop = self.end
            if len(dated) >= 2 and self.rng.random() < 0.15:  # and a few leave
                stop = start + dt.timedelta(days=self.rng.randrange(max((self.end - start).days, 1)))
            dated.append(Membership(person=pid, start=start, end=stop))
        return Group(id=gid, name=name.strip(), purpose=purpose.strip(), basis=basis, members=dated)


def _code_groups(view: CommunityView, t: dt.date) -> list[tuple[str, str, str, list[str]]]:
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


# --------------------------------------------------------------------------- stage entry points


def build(cfg: RunConfig, model: Any, progress: Any = None) -> tuple[Community, dict[str, Any]]:
    """Generate the community of a run and its validation report.

    Args:
        cfg: the run's parameters.
        model: the ``generator`` role's ChatModel.
        progress: optional tqdm bar (one tick per model request).
    Returns:
        The repaired community and a report: counts per check found in the proposal,
        remaining after repair (all zero, or this raises), and changes by check.
    Raises:
        RuntimeError: the repaired community still fails a check (a bug, named in the message).
    """
    from pbench.llm import run_sync

    gen = Generator(cfg, model, progress)
    community = run_sync(gen.generate())
    remaining = check(community)
    bad = {k: v for k, v in remaining.items() if v}
    if bad:
        raise RuntimeError(f"community still invalid after repair: {bad}")
    report = {
        "people": len(community.people),
        "relationships": len(community.relationships),
        "groups": len(community.groups),
        "found_in_proposal": gen.found_before,
        "remaining_after_repair": {k: len(v) for k, v in remaining.items()},
        "changes_by_check": dict(Counter(c.check for c in community.changes)),
    }
    return community, report


def save(community: Community, report: dict[str, Any], run_dir: Path) -> None:
    """Write ``community.json`` and ``community.graphml`` atomically."""
    data = community.model_dump(mode="json")
    data["validation"] = report
    store.write_json(run_dir / "community.json", data)
    store.atomic_write_bytes(run_dir / "community.graphml", "\n".join(nx.generate_graphml(to_graphml(community))).encode())


def load(run_dir: str | Path) -> CommunityView:
    """Read a run's community (what later stages call).

    Raises:
        FileNotFoundError: stage 01 has not run for this run folder.
    """
    path = Path(run_dir) / "community.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; run stage 01_social_graph first")
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("validation", None)
    return CommunityView(Community.model_validate(data))


def to_graphml(community: Community) -> nx.MultiGraph:
    """A networkx graph with scalar attributes only (GraphML's limit): profile values as of the
    period's end, relationships with their kind and dates, group ids per person."""
    view = CommunityView(community)
    g = nx.MultiGraph(period_start=str(community.period_start), period_end=str(community.period_end))
    for p in community.people:
        attrs = view.attributes_at(p.id, community.period_end)
        groups = ",".join(gr.id for gr in community.groups if any(m.person == p.id for m in gr.members))
        g.add_node(p.id, name=p.name, origin=p.origin, groups=groups, **{k: v for k, v in attrs.items()})
    for r in community.relationships:
        g.add_edge(r.a, r.b, key=r.id, kind=r.kind, permanent=r.permanent, start=str(r.start),
                   end="" if r.end is None else str(r.end), why=r.why, source=r.source)
    return g


# --------------------------------------------------------------------------- displays


def profile_table(view: CommunityView, t: dt.date):
    """One row per person: profile values on day ``t``, contacts and groups then."""
    import pandas as pd

    rows = []
    for pid, p in view.people.items():
        a = view.attributes_at(pid, t)
        rows.append({"id": pid, "name": p.name, "origin": p.origin,
                     **{k: a.get(k, "") for k in ("age", "occupation", "employer", "location", "interests")},
                     "contacts": len(view.contacts_at(pid, t)),
                     "groups": ", ".join(g.name for g in view.groups_at(pid, t))})
    return pd.DataFrame(rows).set_index("id")


def relationship_table(view: CommunityView):
    import pandas as pd

    return pd.DataFrame([{"id": r.id, "a": view.name(r.a), "b": view.name(r.b), "kind": r.kind, "start": r.start,
                          "end": r.end, "source": r.source, "why": r.why} for r in view.c.relationships]).set_index("id")


KIND_COLOURS = {"family": "#d62728", "partner": "#e377c2", "friend": "#2ca02c", "colleague": "#1f77b4",
                "manager": "#17becf", "neighbour": "#ff7f0e", "hobby_friend": "#bcbd22", "classmate": "#9467bd",
                "business_partner": "#8c564b", "acquaintance": "#7f7f7f"}


def short_name(name: str) -> str:
    """'Ana Lucia Ferreira' -> 'Ana F.' (labels that stay distinct when first names repeat)."""
    parts = name.replace("(", " (").split()
    return parts[0] if len(parts) == 1 else f"{parts[0]} {parts[-1][0]}." if not parts[-1].startswith("(") else f"{parts[0]} {parts[-1]}"


def draw_graph_at(view: CommunityView, dates: list[dt.date], path: Path | None = None):
    """The graph at each date: edges coloured by relationship kind, nodes by group.

    Returns:
        The matplotlib figure (also saved as PNG and PDF when ``path`` is given).
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    layout = nx.spring_layout(nx.Graph(view.graph_at(None)), seed=1)
    palette = plt.get_cmap("Pastel1")
    group_colour = {g: palette(i % 9) for i, g in enumerate(view.groups)}
    fig, axes = plt.subplots(1, len(dates), figsize=(5.5 * len(dates), 5.2), squeeze=False)
    for ax, t in zip(axes[0], dates):
        g = view.graph_at(t)
        for u, v, data in g.edges(data=True):
            (x1, y1), (x2, y2) = layout[u], layout[v]
            ax.plot([x1, x2], [y1, y2], color=KIND_COLOURS[data["kind"]], lw=2, alpha=0.8, zorder=1)
        for pid, (x, y) in layout.items():
            gs = view.groups_at(pid, t)
            face = group_colour[gs[0].id] if gs else "white"
            ax.scatter([x], [y], s=420, color=face, edgecolors="black", linewidths=1.5 if gs else 0.8, zorder=2)
            ax.annotate(short_name(view.name(pid)), (x, y), ha="center", va="center", fontsize=8, zorder=3)
        ax.set_title(f"{t}: {g.number_of_edges()} active relationships")
        ax.set_axis_off()
    used = sorted({r.kind for r in view.c.relationships})
    handles = [Line2D([0], [0], color=KIND_COLOURS[k], lw=2, label=k) for k in used]
    handles += [Patch(facecolor=group_colour[gid], edgecolor="black", label=f"group: {g.name}") for gid, g in view.groups.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), frameon=False)
    return figures.save(fig, path, rect=(0, 0.1, 1, 1))


def draw_timeline(view: CommunityView, pid: str, path: Path | None = None):
    """One person's changing attributes, relationships and memberships over the period."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    start, end = view.period
    rows: list[tuple[str, dt.date, dt.date, str, str]] = []
    for attr in TEMPORAL_ATTRIBUTES:
        for a in view.attribute_history(pid, attr):
            rows.append((attr, a.valid_from, a.valid_to, a.value, "#9ecae1"))
    for r in sorted(view.relationships_at(pid, start) + [r for r in view.c.relationships if pid in (r.a, r.b)
                                                          and r.start > start], key=lambda r: r.id):
        rows.append((f"{r.kind}: {short_name(view.name(r.other(pid)))}", max(r.start, start), min(r.end or end, end),
                     "", KIND_COLOURS[r.kind]))
    for g in view.c.groups:
        for m in g.members:
            if m.person == pid:
                rows.append((f"group: {g.name}"[:28], m.start, m.end, "", "#c7e9c0"))
    labels = list(dict.fromkeys(r[0] for r in rows))
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(labels) + 1.2))
    for label, f, t, text, colour in rows:
        y = labels.index(label)
        x0, width = mdates.date2num(f), mdates.date2num(t + DAY) - mdates.date2num(f)
        ax.barh(y, width, left=x0, color=colour, edgecolor="white", height=0.7)
        if text:
            ax.text(x0 + width / 2, y, text[:40], ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.xaxis_date()
    ax.set_xlim(mdates.date2num(start), mdates.date2num(end + DAY))
    ax.set_title(f"{view.name(pid)} over the period")
    return figures.save(fig, path)


def snapshot_dates(view: CommunityView, n: int = 3) -> list[dt.date]:
    """``n`` evenly spaced days from the period's start to its end."""
    start, end = view.period
    span = (end - start).days
    return [start + dt.timedelta(days=round(i * span / (n - 1))) for i in range(n)] if n > 1 else [start]


def most_eventful(view: CommunityView) -> str:
    """The person whose attributes, relationships and memberships change most (for a timeline)."""
    start, _ = view.period

    def events(pid: str) -> int:
        attrs = sum(len(view.attribute_history(pid, a)) - 1 for a in TEMPORAL_ATTRIBUTES)
        rels = sum(1 for r in view.c.relationships if pid in (r.a, r.b) and (r.start > start or r.end is not None))
        return 3 * attrs + rels + len(view.groups_at(pid, view.period[1]))

    return max(sorted(view.people), key=events)


def validation_table(report: dict[str, Any]):
    """Per check: problems found in the generator's proposal and remaining after repair."""
    import pandas as pd

    return pd.DataFrame({"found in proposal": report["found_in_proposal"],
                         "remaining after repair": report["remaining_after_repair"],
                         "changes made": {k: report["changes_by_check"].get(k, 0) for k in report["found_in_proposal"]}})


def changes_table(view: CommunityView):
    import pandas as pd

    return pd.DataFrame([c.model_dump() for c in view.c.changes], columns=["check", "record", "action"])
