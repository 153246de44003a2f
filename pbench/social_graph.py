"""Stage 01: community simulation, an evolving social graph with dated profiles (section 3.1).

Reads the parameters (``community``, ``period``, ``seed``, the ``generator`` role) and the seed
personas (``pbench/data/personas.jsonl`` or ``community.personas_path``). Writes
``community.json`` (people with dated attributes, relationships, groups, the period, and
every change code made to what the generator proposed) and ``community.graphml``.

Code owns the facts, the generator writes prose about them. ``pbench.identities`` draws each
person's name, birth date, town and employer (seeded by the run's seed and the person's id; a
seed persona's own words win for age, gender, town, retired, student). The generator writes
occupations, interests, styles and life events, proposes how the seeds know each other, and
writes newcomers' personas from given facts. Code fits every bond to the facts (a kind they do
not support becomes one they do), dates it (``bond_windows``), writes its story from the facts
(``story``), checks and repairs (``check``, ``repair``) and audits the content (``audit``). Who
may know what at a date is computed from ``CommunityView``, never asked of a model.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel

from pbench import audit as audits  # the shared format of every stage's content audit
from pbench import figures, identities, matching, store
from pbench.config import RunConfig
from pbench.identities import Identity, add_years, age_on
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


# The generator drafts prose fields only: names, ages, places, employers and dates are code's
# (pbench.identities), so the drafts do not ask for them (extra keys in a reply are ignored).
class LifeEventDraft(BaseModel):
    kind: Literal["new_job", "move", "graduation", "none"]
    month: int
    new_occupation: str
    new_education: str


class ProfileDraft(BaseModel):
    occupation: str
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


class SeedRelationships(BaseModel):
    relationships: list[RelationshipDraft]


class NewMemberDraft(BaseModel):
    persona: str
    profile: ProfileDraft


class GroupDraft(BaseModel):
    name: str
    purpose: str
    basis: Literal["employer", "interest", "location", "family"]
    basis_value: str
    member_ids: list[str]


class GroupsDraft(BaseModel):
    groups: list[GroupDraft]


# --------------------------------------------------------------------------- query API


@dataclass(frozen=True)
class Relation:
    """A tie between two people on one day (``CommunityView.relation``)."""

    kinds: tuple[str, ...]  # relationship kinds, sorted
    groups: tuple[str, ...]  # names of the groups both belong to

    @property
    def words(self) -> str:
        """For a prompt: "colleague and friend", "fellow member of Book club", or ""."""
        if self.kinds:
            return " and ".join(k.replace("_", " ") for k in self.kinds)
        return f"fellow member of {self.groups[0]}" if self.groups else ""

    @property
    def label(self) -> str:
        """For a table: "colleague+friend", "group" (a shared group only) or "none"."""
        return "+".join(self.kinds) or ("group" if self.groups else "none")


class CommunityView:
    """The state of a community at any date: the one query API later stages use.

    Args:
        community: the stage's record.
    """

    def __init__(self, community: Community) -> None:
        self.c = community
        self.people = {p.id: p for p in community.people}
        self.groups = {g.id: g for g in community.groups}
        self._indexed: tuple[int, ...] = ()

    def _index(self) -> None:
        """Relationships by person and by pair, groups by member: queries run once per turn
        and per document, so they look up instead of scanning every record. Rebuilt when the
        community's lists are replaced or grow (stage 01 builds views of drafts)."""
        rels, groups = self.c.relationships, self.c.groups
        key = (id(rels), len(rels), id(groups), len(groups))
        if key == self._indexed:
            return
        self._rels_of: dict[str, list[Relationship]] = defaultdict(list)
        self._pair: dict[frozenset[str], list[Relationship]] = defaultdict(list)
        for r in rels:
            self._rels_of[r.a].append(r)
            if r.b != r.a:
                self._rels_of[r.b].append(r)
            self._pair[frozenset((r.a, r.b))].append(r)
        self._groups_of: dict[str, list[Group]] = defaultdict(list)
        for g in groups:
            for pid in dict.fromkeys(m.person for m in g.members):
                self._groups_of[pid].append(g)
        self._indexed = key

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
        self._index()
        return [r for r in self._rels_of.get(pid, ()) if r.active(t)]

    def relationships_between(self, a: str, b: str, t: dt.date | None = None) -> list[Relationship]:
        """Relationships linking ``a`` and ``b`` (on day ``t`` when given)."""
        self._index()
        return [r for r in self._pair.get(frozenset((a, b)), ()) if t is None or r.active(t)]

    def contacts_at(self, pid: str, t: dt.date) -> set[str]:
        return {r.other(pid) for r in self.relationships_at(pid, t)}

    def groups_at(self, pid: str, t: dt.date) -> list[Group]:
        """Groups ``pid`` belongs to on day ``t``."""
        self._index()
        return [g for g in self._groups_of.get(pid, ()) if any(m.person == pid and m.active(t) for m in g.members)]

    def members_at(self, gid: str, t: dt.date) -> list[str]:
        """Members of group ``gid`` on day ``t``."""
        return [m.person for m in self.groups[gid].members if m.active(t)]

    def relation(self, a: str, b: str, t: dt.date) -> Relation:
        """How ``b`` is tied to ``a`` on day ``t``: their relationship kinds, else the groups
        they share. The one reading of a tie: in prompts (``words``) and in tables (``label``)."""
        kinds = tuple(sorted({r.kind for r in self.relationships_between(a, b, t)}))
        groups = tuple(g.name for g in self.groups_at(a, t) if b in self.members_at(g.id, t))
        return Relation(kinds, groups)

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


def build_person(pid: str, identity: Identity, draft: ProfileDraft, persona: str, origin: str, start: dt.date,
                 end: dt.date, changes: list[Change], rng: random.Random) -> Person:
    """A person with dated attributes: the identity's facts, the draft's prose, one life event at most.

    Args:
        identity: the facts code drew (name, age, gender, place, employer).
        draft: what the generator wrote (occupation, interests, styles, a life event).
        rng: this person's own generator (draws a new employer or town for a life event).
    """
    static = {
        "age": str(identity.age),
        "gender": identity.gender,
        "interests": ", ".join(i.strip() for i in draft.interests if i.strip()),
        "beliefs": draft.beliefs,
        "texting_style": draft.texting_style,
        "blogging_style": draft.blogging_style,
        "shopping_preferences": draft.shopping_preferences,
    }
    occupation = draft.occupation.strip() or identity.status
    if identity.status == "child":
        occupation = "none (a young child)"
    initial = {"occupation": occupation, "employer": identity.employer, "location": identity.location,
               "education": identity.education or draft.education}
    ev = draft.life_event
    new: dict[str, str] = {}
    region = identities.REGIONS[identity.country]
    if ev.new_occupation and ((norm(identity.employer) not in NO_VALUE and norm(identity.employer) in norm(ev.new_occupation))
                              or scrub_names(ev.new_occupation, "", [])[1]):
        changes.append(Change(check="life_event", record=pid, action=f"new occupation {ev.new_occupation!r} names "
                                                                      "an employer or a person: occupation kept"))
        ev = ev.model_copy(update={"new_occupation": ""})
    if ev.kind == "new_job":
        if identity.status in ("retired", "child") or identity.age < 16:
            changes.append(Change(check="life_event", record=pid, action=f"new_job for a {identity.age}-year-old "
                                                                          f"{identity.status}: ignored"))
        else:  # the new employer is drawn by code, like the first
            new = {"occupation": ev.new_occupation, "employer": identities.draw_employer(region, rng)}
    elif ev.kind == "move":
        towns = [c for c in region.cities if c != identity.city]
        new = {"location": f"{rng.choice(towns)}, {identity.country}"} if towns else {}
    elif ev.kind == "graduation":
        new = {"education": ev.new_education, "occupation": ev.new_occupation}
    new = {k: v.strip() for k, v in new.items() if v.strip() and norm(v) != norm(initial[k])}
    if ev.kind != "none" and not new and not any(c.record == pid and c.check == "life_event" for c in changes):
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
    hometown = "" if identity.hometown == identity.location else identity.hometown
    return Person(id=pid, name=identity.name, persona=persona, origin=origin, attributes=attrs,
                  birth_date=identity.birth_date, hometown=hometown, home_since=identity.home_since,
                  employer_since=identity.employer_since)


# --------------------------------------------------------------------------- facts over a lifetime
# One home for the rules that tie a bond to the people's facts: the generator dates bonds with
# them, repairs kinds with them, and ``audit`` checks a finished community against them.

FAR_PAST = dt.date(1900, 1, 1)
MIN_AGE = {"family": 0, "neighbour": 0, "classmate": 5, "friend": 12, "hobby_friend": 12, "acquaintance": 12,
           "partner": 18, "colleague": 18, "manager": 18, "business_partner": 18}
WORK_AGE_MAX = 70
CLASSMATE_GAP_DAYS = 3 * 366
REMOTE_WORDS = ("online",)  # a story that says how two people who never shared a town met


def birth_of(view: CommunityView, pid: str) -> dt.date | None:
    """The person's birth date (from the ``age`` attribute when none was drawn: the latest it can be)."""
    p = view.people[pid]
    if p.birth_date is not None:
        return p.birth_date
    age = view.attributes_at(pid, view.period[0]).get("age", "").strip()
    return add_years(view.period[0], -int(age)) if age.isdigit() else None


def life_timeline(view: CommunityView, pid: str, attr: str) -> list[tuple[dt.date, dt.date, str]]:
    """``location`` or ``employer`` over a life: before the period from the person's drawn facts
    (home town, ``home_since``, ``employer_since``), then the dated attribute."""
    p = view.people[pid]
    start = view.period[0]
    born = birth_of(view, pid) or FAR_PAST
    hist = view.attribute_history(pid, attr)
    out: list[tuple[dt.date, dt.date, str]] = []
    if hist:
        first = hist[0].value
        since = born
        if attr == "location" and p.hometown and p.home_since and born < p.home_since <= start \
                and norm(p.hometown) != norm(first):
            out.append((born, p.home_since - DAY, p.hometown))
            since = p.home_since
        elif attr == "employer":
            since = p.employer_since or (add_years(born, 18) if norm(first) not in NO_VALUE else start)
        if since < start:
            out.append((since, start - DAY, first))
    return out + [(a.valid_from, a.valid_to, a.value) for a in hist]


def value_at(view: CommunityView, pid: str, attr: str, t: dt.date) -> str:
    """The person's ``location`` or ``employer`` on day ``t`` ('' when unknown)."""
    return next((v for f, to, v in life_timeline(view, pid, attr) if f <= t <= to), "")


def _merge(spans: list[tuple[dt.date, dt.date]]) -> list[tuple[dt.date, dt.date]]:
    merged: list[tuple[dt.date, dt.date]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + DAY:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def shared_spans(view: CommunityView, a: str, b: str, attr: str) -> list[tuple[dt.date, dt.date]]:
    """Days in their lives on which ``a`` and ``b`` held the same real ``location`` or ``employer``.

    The one reading of a shared employer or town, over a life and over the period alike: within
    the period it reads the dated attributes only (``life_timeline`` adds the drawn facts on
    days before the period alone), so the period's rules and repair, which ask about days in
    the period, read the same spans as the lifetime's.

    Returns:
        Disjoint spans, sorted, two that touch merged (moving together to a new employer
        keeps them colleagues).
    """
    out = []
    for fa, ta, va in life_timeline(view, a, attr):
        for fb, tb, vb in life_timeline(view, b, attr):
            if norm(va) == norm(vb) and norm(va) not in NO_VALUE and max(fa, fb) <= min(ta, tb):
                out.append((max(fa, fb), min(ta, tb)))
    return _merge(out)


def within(spans: list[tuple[dt.date, dt.date]], lo: dt.date, hi: dt.date) -> bool:
    """Whether one of ``spans`` holds every day from ``lo`` to ``hi``."""
    return any(f <= lo and hi <= t for f, t in spans)


def bound_attr(kind: str) -> str | None:
    """What a bond of ``kind`` lasts only while the two share: ``employer``, ``location`` or None."""
    return "employer" if kind in WORK_KINDS else "location" if kind in PLACE_KINDS else None


def bound_holds(view: CommunityView, r: Relationship, lo: dt.date, hi: dt.date) -> bool:
    """Whether the two share what ``r``'s kind is bound to (their employer for work bonds, their
    town for neighbours) on every day from ``lo`` to ``hi``; True for kinds bound to neither."""
    attr = bound_attr(r.kind)
    return attr is None or within(shared_spans(view, r.a, r.b, attr), lo, hi)


def bond_windows(view: CommunityView, kind: str, a: str, b: str) -> list[tuple[dt.date, dt.date]]:
    """The days on which a bond of ``kind`` between ``a`` and ``b`` may start, by their facts.

    Family: the younger one's birth. Partner, business partner: both 18 or older. Colleague,
    manager: a shared employer, both 18 to 70. Classmates: at most 3 years apart, from school
    age to 18. Every kind but family: a town they both lived in at that time.

    Returns:
        Disjoint (first, last) spans; empty when the facts do not support the kind.
    """
    ba, bb = birth_of(view, a), birth_of(view, b)
    ps, pe = view.period
    if ba is None or bb is None:
        return [(FAR_PAST, pe)]  # nothing known to check against
    if kind == "family":
        return [(max(ba, bb), max(ba, bb))]
    lo = max(add_years(ba, MIN_AGE[kind]), add_years(bb, MIN_AGE[kind]))
    hi = pe
    if kind in WORK_KINDS:
        if max(age_on(ba, ps), age_on(bb, ps)) > WORK_AGE_MAX:
            return []
        spans = shared_spans(view, a, b, "employer")
    else:
        if kind == "classmate":
            if abs((ba - bb).days) > CLASSMATE_GAP_DAYS:
                return []
            hi = min(add_years(ba, 19), add_years(bb, 19)) - DAY
        spans = shared_spans(view, a, b, "location")
    return [(max(f, lo), min(t, hi)) for f, t in spans if max(f, lo) <= min(t, hi)]


def date_bond(view: CommunityView, kind: str, a: str, b: str, rng: random.Random, latest: dt.date,
              earliest: dt.date = FAR_PAST) -> tuple[dt.date, bool] | None:
    """A start date the facts support, from ``earliest`` to ``latest``, and whether they met at a
    distance (acquaintances who never shared a town meet online). None: the facts do not support ``kind``."""
    wins = [(max(f, earliest), min(t, latest)) for f, t in bond_windows(view, kind, a, b)
            if max(f, earliest) <= min(t, latest)]
    remote = False
    if not wins and kind == "acquaintance":
        ba, bb = birth_of(view, a) or FAR_PAST, birth_of(view, b) or FAR_PAST
        lo = max(add_years(ba, MIN_AGE[kind]), add_years(bb, MIN_AGE[kind]), add_years(latest, -15))
        wins, remote = ([(lo, latest)] if lo <= latest else []), True
    if not wins:
        return None
    k = rng.randrange(sum((t - f).days + 1 for f, t in wins))
    for f, t in wins:
        if k <= (t - f).days:
            return f + dt.timedelta(days=k), remote
        k -= (t - f).days + 1
    raise AssertionError("unreachable")


FALLBACK_KINDS = ("friend", "acquaintance")


def fit_kind(view: CommunityView, kind: str, a: str, b: str, rng: random.Random,
             latest: dt.date) -> tuple[str, dt.date, bool] | None:
    """``kind`` if the facts support it, else the first of friend, acquaintance that they do:
    (kind, start, met at a distance), or None when none fits."""
    for k in dict.fromkeys((kind, *FALLBACK_KINDS)):
        got = date_bond(view, k, a, b, rng, latest)
        if got is not None:
            return k, *got
    return None


def _town(location: str) -> str:
    return location.split(",")[0].strip() or "their town"


def _first(view: CommunityView, pid: str) -> str:
    return view.name(pid).split()[0]


def _shared_interest(view: CommunityView, a: str, b: str, t: dt.date) -> str:
    def interests(pid: str) -> list[str]:
        return [i.strip() for i in view.attributes_at(pid, t).get("interests", "").split(",") if i.strip()]
    common = [i for i in interests(a) if norm(i) in {norm(j) for j in interests(b)}] or interests(a)
    safe = [i for i in common if not re.search(r"\d|[A-Z]", i)]  # no dates, places or names in a hobby
    return safe[0] if safe else "a shared hobby"


def story(view: CommunityView, r: Relationship) -> str:
    """How two people know each other, written from the facts only: the kind, their towns and
    employer when the bond started, and its start year (a template per kind, see ``audit``)."""
    a, b, t, year = _first(view, r.a), _first(view, r.b), r.start, r.start.year
    ca, cb = _town(value_at(view, r.a, "location", t)), _town(value_at(view, r.b, "location", t))
    emp = value_at(view, r.a, "employer", t)
    if r.kind == "family":
        ba, bb = birth_of(view, r.a) or t, birth_of(view, r.b) or t
        young, old = (a, b) if ba >= bb else (b, a)
        return f"{a} and {b} are family: {young} has known {old} since being born in {year}."
    if norm(value_at(view, r.a, "location", t)) != norm(value_at(view, r.b, "location", t)):
        return f"{a} and {b} got to know each other online in {year}; {a} lived in {ca} then, {b} in {cb}."
    return {
        "partner": f"{a} and {b} met in {ca} and have been partners since {year}.",
        "colleague": f"{a} and {b} have worked together at {emp} in {ca} since {year}.",
        "manager": f"{a} has been {b}'s manager at {emp} in {ca} since {year}.",
        "neighbour": f"{a} and {b} have been neighbours in {ca} since {year}.",
        "classmate": f"{a} and {b} were in the same class at school in {ca} from {year}.",
        "friend": f"{a} and {b} became friends in {ca} in {year}.",
        "hobby_friend": f"{a} and {b} met through {_shared_interest(view, r.a, r.b, max(t, view.period[0]))} "
                        f"in {ca} in {year} and have been friends since.",
        "business_partner": f"{a} and {b} have run a business together in {ca} since {year}.",
        "acquaintance": f"{a} and {b} have known each other around {ca} since {year}.",
    }[r.kind]


# --------------------------------------------------------------------------- checks and the audit
# Stage 01's one rule set: each validity rule, named, with the records that break it.
#
# Reads a ``Community``; writes nothing. ``find`` runs every rule in one place; ``check`` and
# ``audit`` are its two halves, by scope:
#
# - ``period`` rules (``check``): the records' shape over the period: endpoints, dates,
#   permanence, attribute timelines, names, a work or neighbour bond on days the two share
#   their employer or town, groups, reachability. The generator counts them in its proposal
#   (``found_in_proposal``), ``repair`` mends them and records each change
#   under the rule's name (``changes_by_check``), and ``build`` requires none after repair
#   (``remaining_after_repair``).
# - ``lifetime`` rules (``audit``): the facts over lives: placeholder and duplicate names,
#   bonds that start before a birth, at an age the kind does not allow, without a shared
#   town or employer, and stories that name what the facts do not hold. Code's plan keeps them
#   by construction (``bond_windows``, ``story``); the audit counts
#   what remains (``quality``, with ``quality_examples``).
#
# What both scopes ask is written once and called from both: whether a relationship links two
# members (``linked``, also repair's test for dropping one), who shares a name
# (``shared_names``), and whether a work or neighbour bond has its employer or town on the days
# asked (``bound_holds``, over ``shared_spans``).
#
# Two pairs of rules ask the same question and stay two rules, because they answer it at
# different times or over different days, and ``community.json`` reports both:
#
# - ``names`` and ``duplicate_names``: the same test. ``names`` is counted in the proposal,
#   which repair then renames, and after repair (``found_in_proposal``,
#   ``remaining_after_repair``); ``duplicate_names`` in the audit's ``quality``. One key would
#   drop a field from one of those reports.
# - ``employer``/``location`` and the first test of ``relationship_places``: the same test over
#   different days. The period's rules ask about a dated bond's days within the period, which
#   repair can mend (it moves dates only within the period); ``relationship_places`` asks from
#   the bond's start, before the period too, which only the plan keeps. They differ, for
#   example, for neighbours who met in a town they both left and live in one town again
#   during the period: the period's rule finds nothing to mend, the audit counts one. The
#   lifetime's reading in ``check`` would make ``build`` reject such a community; the period's
#   reading in ``audit`` would stop counting it.

Scope = Literal["period", "lifetime"]
YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")
PLACEHOLDER = re.compile(r"\b(john|jane)\s+(doe|smith)\b", re.I)


@dataclass(frozen=True)
class Rule:
    """One rule: its name (a report's key, and the ``Change.check`` of what repair mends), its
    scope, and how it finds the records that break it (``"record: problem"`` each)."""

    name: str
    scope: Scope
    find: Callable[[CommunityView], list[str]]


# --------------------------------------------------------------------------- shared by both scopes


def linked(view: CommunityView, r: Relationship) -> bool:
    """Whether ``r`` links two different members (the rules read no other relationship)."""
    return r.a in view.people and r.b in view.people and r.a != r.b


def _bonds(view: CommunityView) -> list[Relationship]:
    return [r for r in view.c.relationships if linked(view, r)]


def shared_names(view: CommunityView) -> list[tuple[str, int]]:
    """Names held by more than one person, and by how many."""
    return [(name, n) for name, n in Counter(p.name for p in view.c.people).items() if n > 1]


def permanence_broken(r: Relationship) -> bool:
    """Permanent kinds (family, partner) have no end; every other kind has one."""
    return r.permanent != (r.kind in PERMANENT_KINDS) or r.permanent != (r.end is None)


# --------------------------------------------------------------------------- over the period


def _endpoints(view: CommunityView) -> list[str]:
    return [f"{r.id}: links {r.a} and {r.b}" for r in view.c.relationships if not linked(view, r)]


def _dates(view: CommunityView) -> list[str]:
    start, end = view.period
    out = []
    for p in view.c.people:
        for a in p.attributes:
            if a.valid_to < a.valid_from:
                out.append(f"{p.id}.{a.name}: ends before it starts")
            if a.valid_from < start or a.valid_to > end:
                out.append(f"{p.id}.{a.name}: outside the period")
    for r in _bonds(view):
        if r.end is not None and r.end < r.start:
            out.append(f"{r.id}: ends before it starts")
        if r.start > end:
            out.append(f"{r.id}: starts after the period")
    return out


def _permanence(view: CommunityView) -> list[str]:
    return [f"{r.id}: {r.kind} with permanent={r.permanent}, end={r.end}" for r in _bonds(view) if permanence_broken(r)]


def _attribute_timeline(view: CommunityView) -> list[str]:
    start, end = view.period
    out = []
    for p in view.c.people:
        by_name: dict[str, list[AttributeValue]] = defaultdict(list)
        for a in p.attributes:
            by_name[a.name].append(a)
        for name, values in by_name.items():
            values.sort(key=lambda a: a.valid_from)
            if values[0].valid_from != start or values[-1].valid_to != end:
                out.append(f"{p.id}.{name}: does not cover the period")
            for prev, nxt in zip(values, values[1:]):
                if nxt.valid_from <= prev.valid_to:
                    out.append(f"{p.id}.{name}: periods overlap")
                elif nxt.valid_from != prev.valid_to + DAY:
                    out.append(f"{p.id}.{name}: gap between values")
    return out


def _names(view: CommunityView) -> list[str]:
    return [f"{name}: {n} people share the name" for name, n in shared_names(view)]


def _unshared(attr: str) -> Callable[[CommunityView], list[str]]:
    """The rule for work (``employer``) or neighbour (``location``) bonds over the period."""

    def find(view: CommunityView) -> list[str]:
        start, end = view.period
        out = []
        for r in _bonds(view):
            if bound_attr(r.kind) == attr and r.end is not None:
                lo, hi = max(r.start, start), min(r.end, end)
                if lo <= hi and not bound_holds(view, r, lo, hi):
                    out.append(f"{r.id}: {r.kind} on days the two do not share a {attr}")
        return out

    return find


def _groups(view: CommunityView) -> list[str]:
    start, end = view.period
    out = []
    for g in view.c.groups:
        people = [m.person for m in g.members]
        if len(set(people)) < 2:
            out.append(f"{g.id}: fewer than 2 members")
        if len(set(people)) != len(people):
            out.append(f"{g.id}: a member is listed twice")
        for m in g.members:
            if m.person not in view.people:
                out.append(f"{g.id}: member {m.person} is not in the community")
            if m.end < m.start or m.start < start or m.end > end:
                out.append(f"{g.id}: membership of {m.person} has bad dates")
    return out


def _reachable(view: CommunityView) -> list[str]:
    graph = view.graph_at(None)
    if not graph.number_of_nodes() or nx.is_connected(graph):
        return []
    parts = sorted(nx.connected_components(graph), key=len, reverse=True)
    return [f"{', '.join(sorted(comp))}: not connected to the rest" for comp in parts[1:]]


# --------------------------------------------------------------------------- over lives


def _placeholder_names(view: CommunityView) -> list[str]:
    out = []
    for p in view.c.people:
        if identities.is_placeholder(p.name):
            out.append(f"{p.id}: {p.name!r} is a placeholder")
        if PLACEHOLDER.search(p.persona):
            out.append(f"{p.id}: the persona names a placeholder")
    return out


def _duplicate_names(view: CommunityView) -> list[str]:
    return [f"{name}: {n} people" for name, n in shared_names(view)]


def _born_bonds(view: CommunityView) -> list[tuple[Relationship, dt.date, dt.date]]:
    """Bonds between members whose birth dates are both known, with the two births."""
    out = []
    for r in _bonds(view):
        ba, bb = birth_of(view, r.a), birth_of(view, r.b)
        if ba and bb:
            out.append((r, ba, bb))
    return out


def _relationship_dates(view: CommunityView) -> list[str]:
    out = []
    for r, ba, bb in _born_bonds(view):
        if r.start < max(ba, bb):
            out.append(f"{r.id}: {r.kind} starts {r.start}, before {r.a if ba > bb else r.b} was born ({max(ba, bb)})")
        elif r.kind == "family" and r.start != max(ba, bb):
            out.append(f"{r.id}: family from {r.start}, not from the younger one's birth")
    return out


def _relationship_ages(view: CommunityView) -> list[str]:
    ps = view.period[0]
    out = []
    for r, ba, bb in _born_bonds(view):
        if r.kind in ("partner", *WORK_KINDS) and min(age_on(ba, r.start), age_on(bb, r.start)) < 18:
            out.append(f"{r.id}: {r.kind} with someone under 18 at the start")
        since = max(r.start, ps)
        if r.kind in WORK_KINDS and max(age_on(ba, since), age_on(bb, since)) > WORK_AGE_MAX:
            out.append(f"{r.id}: {r.kind} with someone over {WORK_AGE_MAX}")
        if r.kind == "classmate" and abs((ba - bb).days) > CLASSMATE_GAP_DAYS:
            out.append(f"{r.id}: classmates more than 3 years apart")
    return out


def _relationship_places(view: CommunityView) -> list[str]:
    pe = view.period[1]
    out = []
    for r in _bonds(view):
        last = min(r.end or pe, pe)
        attr = bound_attr(r.kind)
        if attr and not bound_holds(view, r, r.start, last):
            out.append(f"{r.id}: neighbours who do not share a town from {r.start} to {last}" if attr == "location"
                       else f"{r.id}: {r.kind} without a shared employer from {r.start} to {last}")
        if (r.kind != "family" and not shared_spans(view, r.a, r.b, "location")
                and not any(w in r.why.lower() for w in REMOTE_WORDS)):
            out.append(f"{r.id}: {r.kind} of people who never lived in the same town")
    return out


def _relationship_stories(view: CommunityView) -> list[str]:
    """The story may name the two people, the start year and the towns they lived in."""
    places = identities.all_places()
    out = []
    for r in _bonds(view):
        years = {int(y) for y in YEAR.findall(r.why)} - {r.start.year}
        if years:
            out.append(f"{r.id}: names {sorted(years)}, the bond starts in {r.start.year}")
        lived = {norm(_town(v)) for pid in (r.a, r.b) for _, _, v in life_timeline(view, pid, "location")}
        for town in places:
            if re.search(rf"(?<![\w-]){re.escape(town)}(?![\w-])", r.why) and norm(town) not in lived:
                out.append(f"{r.id}: names {town}, where neither lived")
        own = {tok for pid in (r.a, r.b) for tok in view.name(pid).split()}
        for q in view.c.people:
            if q.id in (r.a, r.b):
                continue
            first = q.name.split()[0]
            if q.name in r.why or (first not in own and re.search(rf"\b{re.escape(first)}\b", r.why)):
                out.append(f"{r.id}: names {q.name}, who is not part of it")
        if PLACEHOLDER.search(r.why):
            out.append(f"{r.id}: names a placeholder")
    return out


# --------------------------------------------------------------------------- the rule set

# In the order the reports list them.
RULES: tuple[Rule, ...] = (
    Rule("endpoints", "period", _endpoints),
    Rule("dates", "period", _dates),
    Rule("permanence", "period", _permanence),
    Rule("attribute_timeline", "period", _attribute_timeline),
    Rule("names", "period", _names),
    Rule("employer", "period", _unshared("employer")),
    Rule("location", "period", _unshared("location")),
    Rule("groups", "period", _groups),
    Rule("reachable", "period", _reachable),
    Rule("placeholder_names", "lifetime", _placeholder_names),
    Rule("duplicate_names", "lifetime", _duplicate_names),
    Rule("relationship_dates", "lifetime", _relationship_dates),
    Rule("relationship_ages", "lifetime", _relationship_ages),
    Rule("relationship_places", "lifetime", _relationship_places),
    Rule("relationship_stories", "lifetime", _relationship_stories),
)
CHECKS = tuple(r.name for r in RULES if r.scope == "period")
AUDIT_KINDS = tuple(r.name for r in RULES if r.scope == "lifetime")


def find(community: Community, scope: Scope | None = None) -> dict[str, list[str]]:
    """Run the rules of ``scope`` (all of them when None) over one view of ``community``.

    Returns:
        ``{rule name: ["record: problem", ...]}`` in ``RULES`` order (empty lists: kept).
    """
    view = CommunityView(community)
    return {r.name: r.find(view) for r in RULES if scope in (None, r.scope)}


def check(community: Community) -> dict[str, list[str]]:
    """The period's rules, each with the records that break it (empty lists: valid).

    Returns:
        ``{check name: ["record: problem", ...]}`` for: endpoints, dates, permanence,
        attribute_timeline, names, employer, location, groups, reachable.
    """
    return find(community, "period")


def audit(community: Community) -> dict[str, list[str]]:
    """The lifetime's rules: are the people and bonds believable, and do stories fit facts?

    Returns:
        ``{kind: ["record: problem", ...]}`` for placeholder_names, duplicate_names,
        relationship_dates, relationship_ages, relationship_places, relationship_stories.
    """
    return find(community, "lifetime")


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


# --------------------------------------------------------------------------- generation


EXPANSION_KINDS = {  # kind -> (weight, how the prompt phrases it)
    "family": (3, "a family member"),
    "partner": (1, "the romantic partner"),
    "friend": (3, "a close friend"),
    "colleague": (3, "a colleague at the same employer"),
    "manager": (1, "the manager at work"),
    "neighbour": (2, "a neighbour"),
    "hobby_friend": (2, "a friend from a shared hobby"),
}
FAMILY_TIES = {"an older sibling": (1, 8), "a younger sibling": (-8, -1), "a parent": (22, 38), "a child": (-38, -22),
               "a cousin": (-10, 10)}
NEWCOMER_MIN_AGE = 16  # newcomers are old enough to have a digital footprint of their own
ELSEWHERE = 0.25  # share of newcomers (family and friends) who live outside the community's town


def _summary(pid: str, person: Person, t: dt.date) -> dict[str, str]:
    attrs = {a.name: a.value for a in person.attributes if a.active(t)}
    return {"id": pid, "name": person.name,
            **{k: attrs.get(k, "") for k in ("age", "gender", "occupation", "employer", "location", "interests")}}


def _pid(ref: str) -> str:
    m = re.fullmatch(r"\s*u0*(\d+)\s*", ref)
    return f"u{int(m.group(1)):02d}" if m else ref


def _location_at(person: Person, t: dt.date) -> str:
    return next((a.value for a in person.attributes if a.name == "location" and a.active(t)), "")


def _split_location(location: str) -> tuple[str, str]:
    town, _, country = location.rpartition(", ")
    return town, country


def _facts_for_prompt(ident: Identity) -> dict[str, str]:
    status = {"working": "works", "retired": "retired", "student": "in education", "child": "a young child"}
    employer = {"none": "no employer", "self-employed": "self-employed"}.get(ident.employer, ident.employer)
    return {"age": str(ident.age), "gender": ident.gender, "location": ident.location, "employer": employer,
            "status": status[ident.status]}


KIN_WORDS = {"husband", "wife", "partner", "son", "daughter", "brother", "sister", "mother", "father", "friend",
             "colleague", "cousin", "neighbour", "neighbor", "manager", "boss", "named", "called", "niece", "nephew",
             "aunt", "uncle", "grandson", "granddaughter", "boyfriend", "girlfriend"}
NOT_NAMES = {"She", "He", "They", "The", "A", "An", "In", "At", "On", "Her", "His", "Will", "May", "June", "April",
             "August", "Grace", "Hope", "Faith", "Joy", "Rose", "Summer", "Dawn", "Christian", "Mark", "Art", "Bill",
             "Sunny", "Lake", "River", "Sky", "Royal", "King", "Major", "Long", "Young", "Black", "White", "Brown",
             "Green", "Gold", "Frank", "Georgia", "Jordan", "Chelsea", "Sunday", "Friday", "Monday", "Saturday",
             "English", "Spanish", "French", "German", "Premier", "League", "Church", "Catholic", "Muslim"}
WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def _capitalised(word: str) -> bool:
    return word[0].isupper() and word[1:] == word[1:].lower() and len(word) > 1


def scrub_names(text: str, subject: str, keep: Iterable[str]) -> tuple[str, list[str]]:
    """Remove names the generator wrote into prose that are not code's: "her husband Tom" loses
    "Tom", "a boy named Alex" becomes "a boy", a name opening a sentence (or a placeholder such as
    John Doe) becomes ``subject``, any other becomes "someone". A single capitalised first name counts only where it acts as one
    ("Maria loves", "Maria's", "Maria,"), so that words like "Grace" in prose stay.

    Returns:
        The text and the names it replaced.
    """
    keep_tokens = {t for n in (subject, *keep) for t in WORD.findall(n)}
    place_tokens = {t for p in (*identities.all_places(), *identities.REGIONS) for t in p.split()}
    firsts = identities.first_names()
    found: list[str] = []

    def placeholder(m: re.Match) -> str:
        found.append(m.group(0))
        return subject

    text = re.sub(r"\b(John|Jane)\s+(Doe|Smith)\b", placeholder, text)
    words = list(WORD.finditer(text))
    out, pos, i = [], 0, 0
    while i < len(words):
        m = words[i]
        first = m.group(0)
        if (not _capitalised(first) or first in keep_tokens or first in NOT_NAMES or first in place_tokens
                or first not in firsts):
            i += 1
            continue
        last = words[i + 1] if i + 1 < len(words) and text[m.end():words[i + 1].start()].isspace() else None
        if last is not None and (not _capitalised(last.group(0)) or last.group(0) in place_tokens
                                 or last.group(0) in NOT_NAMES or last.group(0) in keep_tokens):
            last = None
        kin = words[i - 1].group(0).lower() if i and text[words[i - 1].end():m.start()].isspace() else ""
        kin = kin if kin in KIN_WORDS else ""
        end = last.end() if last else m.end()
        if not last and not kin and not re.match(r"('s|,|\s+(is|was|works|lives|has|runs|loves|enjoys)\b)", text[end:]):
            i += 1
            continue
        found.append(text[m.start():end])
        if kin in ("named", "called"):  # "a boy named Alex" -> "a boy"
            out.append(text[pos:words[i - 1].start()])
        elif kin:  # "her husband Tom" -> "her husband"
            out.append(text[pos:m.start()])
        else:  # the subject of a sentence is the person described; anyone else is "someone"
            at_start = not text[:m.start()].strip() or text[:m.start()].rstrip()[-1] in ".!?;"
            out.append(text[pos:m.start()] + (subject if at_start or not subject else "someone"))
        pos = end
        i += 2 if last else 1
    out.append(text[pos:])
    return " ".join("".join(out).split()).replace(" ,", ",").replace(" .", "."), found


def fit_persona(text: str, ident: Identity, occupation: str) -> tuple[str, list[str]]:
    """Make a persona the generator wrote agree with code's facts: its age, its town and country.

    Returns:
        The persona and what was changed.
    """
    said, fixed = identities.persona_facts(text), []
    text = re.sub(r"\b([Aa]) ((8\d|11|18)-year-old)", lambda m: f"{m.group(1)}n {m.group(2)}", text)
    if said.age is not None and said.age != ident.age:
        article = "An" if str(ident.age).startswith("8") or ident.age in (11, 18) else "A"
        text = re.sub(r"\b[Aa]n? \d{1,3}-year-old", f"{article} {ident.age}-year-old", text, count=1)
        fixed.append(f"age {said.age} -> {ident.age}")
    if (said.country and said.country != ident.country) or (said.city and said.city != ident.city):
        # Sentences that name another place go; code states where they live.
        places = [*identities.all_places(), *identities.REGIONS]
        keep = [s for s in matching.sentences(text)
                if not any(re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", s) for p in places)]
        age = re.search(r"\b[Aa]n? \d{1,3}-year-old", keep[0]) if keep else None
        head = "" if age else f"A {ident.age}-year-old {occupation} living in {ident.location}."
        text = " ".join([head, *keep]).strip() if keep or head else text
        fixed.append(f"place {said.city or said.country} -> {ident.location}")
    if said.gender and said.gender != ident.gender:
        text = swap_pronouns(text, ident.gender)
        fixed.append(f"pronouns {said.gender} -> {ident.gender}")
    return text, fixed


def swap_pronouns(text: str, gender: str) -> str:
    """Turn third-person pronouns to ``gender`` ("her" becomes "his" before a word, else "him")."""
    def sub(m: re.Match) -> str:
        word, low = m.group(1), m.group(1).lower()
        if gender == "female":
            new = {"he": "she", "his": "her", "him": "her", "himself": "herself"}.get(low, low)
        else:
            nxt = text[m.end():].lstrip()
            possessive = bool(re.match(r"[a-z]", nxt)) and not re.match(r"(and|or|to|with|at|in|on|for)\b", nxt)
            new = {"she": "he", "herself": "himself", "hers": "his",
                   "her": "his" if possessive else "him"}.get(low, low)
        return new.capitalize() if word[0].isupper() else new
    return re.sub(r"\b(he|his|him|himself|she|her|hers|herself)\b", sub, text, flags=re.I)


class Generator:
    """Builds a community: code plans the people and their facts, the generator role writes the
    prose about them, code dates, checks and repairs. One instance per stage run.

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
        self.region: tuple[str, str] = ("", "")  # the community's country and town

    def _rng(self, *what: str) -> random.Random:
        """A generator of its own for one job, seeded by the run's seed and the job's id."""
        return random.Random(":".join((str(self.cfg.seed), *what)))

    async def _ask(self, template: str, schema: type[BaseModel], seed: int, **variables: Any) -> Any:
        return await self.model.ask("social_graph", template, schema, seed=seed, progress=self.progress, **variables)

    def _seed_identities(self, candidates: list[dict[str, str]], pid: str, taken: set[str]) -> list[Identity]:
        out = []
        country, town = self.region
        for k, persona in enumerate(candidates):
            ident = identities.draw_identity(self.cfg.seed, f"{pid}.{k}", self.start, country=country, city=town,
                                             facts=identities.persona_facts(persona["persona"]), taken=taken)
            taken.add(ident.name)
            out.append(ident)
        return out

    async def _profile(self, pid: str, candidates: list[tuple[dict[str, str], Identity]], seed: int) -> Person | None:
        for attempt, (persona, ident) in enumerate(candidates):
            out = await self._ask("profile", ProfileDraft, seed + 1000 * attempt, persona=persona["persona"],
                                  facts=_facts_for_prompt(ident), period_start=self.start, period_end=self.end,
                                  months=self.months)
            if not out.unparsed:
                return build_person(pid, ident, out.parsed, persona["persona"], "seed", self.start, self.end,
                                    self.changes, self._rng(pid, "life"))
            self.changes.append(Change(check="unparsed", record=pid,
                                       action=f"profile for persona {persona['id']} unparsed ({out.error}): persona replaced"))
        return None

    async def generate(self) -> Community:
        """Plan, propose, date, check and repair a community of the configured size."""
        cc = self.cfg.community
        size = self.rng.randint(*cc.size)
        n_groups = self.rng.randint(*cc.groups)
        pool = load_personas(cc.personas_path)
        if len(pool) < cc.initial_seed:
            raise ValueError(f"community.personas_path: {len(pool)} personas, fewer than initial_seed={cc.initial_seed}")
        order = self.rng.sample(pool, len(pool))
        # The first seed sets where the community lives: drawn among the personas of a country
        # that has enough of them for every seed, so that the community is of one region and the
        # people from elsewhere are a minority (a persona's own place always wins). The other
        # seeds come from the same town, then the same country, then anywhere.
        country_of = {p["id"]: identities.persona_facts(p["persona"]).country for p in order}
        counts = Counter(country_of.values())
        enough = max(min(cc.initial_seed, max(counts.values())), 1)
        order.sort(key=lambda p: not (country_of[p["id"]] and counts[country_of[p["id"]]] >= enough))
        said = identities.persona_facts(order[0]["persona"])
        country = said.country or sorted(identities.REGIONS)[self.rng.randrange(len(identities.REGIONS))]
        self.region = (country, said.city or self.rng.choice(identities.REGIONS[country].cities))

        def tier(p: dict[str, str]) -> int:
            f = identities.persona_facts(p["persona"])
            return 0 if (f.country, f.city) == self.region else 1 if f.country == country else 2

        rest = sorted(order[1:], key=tier)
        seeds, spare = [order[0], *rest[: cc.initial_seed - 1]], rest[cc.initial_seed - 1:]
        if self.progress is not None:
            self.progress.total = cc.initial_seed + 1 + (size - cc.initial_seed) + 1
            self.progress.refresh()

        # 1. Identities by code (in a fixed order, so names stay unique), then profiles of the seed
        # personas; an unparsable one takes a spare persona.
        taken: set[str] = set()
        plans = []
        for i, persona in enumerate(seeds):
            pid = f"u{i + 1:02d}"
            cands = [persona] + spare[i::cc.initial_seed][:2]
            plans.append((pid, list(zip(cands, self._seed_identities(cands, pid, taken)))))
        made = await asyncio.gather(*(self._profile(pid, c, self.cfg.seed * 7919 + i) for i, (pid, c) in enumerate(plans)))
        people = [p for p in made if p]
        if len(people) < 2:
            raise RuntimeError("the generator produced fewer than 2 seed profiles it could parse; see community changes")

        # 2. Relationships among the seeds: the generator proposes kinds, code checks and dates them.
        rels = await self._seed_relationships(people)

        # 3. Expansion: new people, each anchored to an existing member, in concurrent rounds.
        # Code plans each newcomer (kind, identity) in order before the round's requests.
        taken = {p.name for p in people}
        while len(people) < size:
            anchors = self._anchors(people, min(len(people), size - len(people)))
            planned = []
            for i, anchor in enumerate(anchors):
                pid = f"u{len(people) + i + 1:02d}"
                plan = self._plan_newcomer(anchor, pid, taken)
                taken.add(plan[2].name)
                planned.append((anchor, pid, *plan))
            made_new = [m for m in await asyncio.gather(*(self._expand(*p) for p in planned)) if m is not None]
            if not made_new:
                break  # every proposal in this round was unparsable: stop short, recorded in changes
            for person, rel in made_new:
                people.append(person)
                rels.append(rel.model_copy(update={"id": f"r{len(rels) + 1}"}))
        if len(people) < size:
            self.changes.append(Change(check="size", record="community", action=f"{len(people)} people of {size} asked for"))

        # 4. Groups around shared attributes.
        groups = await self._groups(people, rels, n_groups)

        # Concurrent requests note their changes as their replies arrive: sorted, so that the file
        # does not depend on that order.
        self.changes.sort(key=lambda c: (c.record, c.check, c.action))
        proposed = Community(period_start=self.start, period_end=self.end, people=people, relationships=rels,
                             groups=groups, changes=self.changes)
        self.found_before = {k: len(v) for k, v in check(proposed).items()}
        community, _ = repair(proposed, self.rng)
        # 5. Stories from the final facts (repair may have bounded a bond or changed its kind).
        view = CommunityView(community)
        rels = [r if r.source == "evolution" else r.model_copy(update={"why": story(view, r)})
                for r in community.relationships]
        return community.model_copy(update={"relationships": rels})

    async def _seed_relationships(self, people: list[Person]) -> list[Relationship]:
        out = await self._ask("relationships", SeedRelationships, self.cfg.seed * 31 + 1,
                              people=[_summary(p.id, p, self.start) for p in people], kinds=KINDS,
                              period_start=self.start)
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record="seed relationships",
                                       action=f"unparsed ({out.error}): none proposed; reachability repair links the seeds"))
            return []
        view = CommunityView(Community(period_start=self.start, period_end=self.end, people=people,
                                       relationships=[], groups=[]))
        rels = []
        for i, d in enumerate(out.parsed.relationships, 1):
            self.proposed["relationships"] += 1
            rid = f"r{i}"
            d = d.model_copy(update={"a": _pid(d.a), "b": _pid(d.b)})  # "u1" for "u01"
            if d.a not in view.people or d.b not in view.people or d.a == d.b:  # repair drops it, counted
                rels.append(Relationship(id=rid, a=d.a, b=d.b, kind=d.kind, permanent=d.kind in PERMANENT_KINDS,
                                         start=self.start, end=None if d.kind in PERMANENT_KINDS else self.end))
                continue
            rel = self._dated(view, rid, d.a, d.b, d.kind, "generator", self.start)
            if rel is not None:
                rels.append(rel)
        return rels

    def _dated(self, view: CommunityView, rid: str, a: str, b: str, kind: str, source: str, latest: dt.date,
               earliest: dt.date | None = None) -> Relationship | None:
        """A bond of ``kind`` dated by the facts, or the nearest kind they support (recorded)."""
        rng = self._rng(rid, a, b, kind)
        got = None
        if earliest is not None:  # met during the period, when the facts allow it
            d = date_bond(view, kind, a, b, rng, latest, earliest)
            got = (kind, *d) if d is not None and not d[1] else None
        got = got or fit_kind(view, kind, a, b, rng, min(latest, self.start))
        if got is None:
            self.changes.append(Change(check="facts", record=rid, action=f"{kind} of {a} and {b}: no kind fits "
                                                                          "their ages and places: dropped"))
            return None
        new_kind, start, _ = got
        if new_kind != kind:
            self.changes.append(Change(check="facts", record=rid, action=f"{kind} of {a} and {b} does not fit their "
                                                                          f"ages, employers or towns: now {new_kind}"))
        permanent = new_kind in PERMANENT_KINDS
        rel = Relationship(id=rid, a=a, b=b, kind=new_kind, permanent=permanent, start=start,
                           end=None if permanent else self.end, source=source)
        return rel.model_copy(update={"why": story(view, rel)})

    def _anchors(self, people: list[Person], n: int) -> list[Person]:
        """``n`` distinct members to anchor newcomers to, three times likelier when they live in the
        community's town (so that most of the community lives there)."""
        home = ", ".join(reversed(self.region))
        pool = list(people)
        out = []
        for _ in range(n):
            weights = [3 if norm(_location_at(p, self.start)) == norm(home) else 1 for p in pool]
            out.append(pool.pop(self.rng.choices(range(len(pool)), weights=weights)[0]))
        return out

    def _plan_newcomer(self, anchor: Person, pid: str, taken: set[str]) -> tuple[str, str, Identity]:
        """Code's plan for one newcomer: the bond's kind, how the prompt words it, and an identity
        that fits the bond (an age, a town, the anchor's employer for colleagues)."""
        rng = self._rng(pid, "plan")
        kinds = list(EXPANSION_KINDS)
        kind = rng.choices(kinds, weights=[EXPANSION_KINDS[k][0] for k in kinds])[0]
        now = {a.name: a.value for a in anchor.attributes if a.active(self.start)}
        age_a = int(now["age"]) if now.get("age", "").isdigit() else 40
        works = norm(now.get("employer", "")) not in NO_VALUE and 18 <= age_a <= WORK_AGE_MAX
        if not {"colleague": works, "manager": works, "partner": age_a >= 18}.get(kind, True):
            self.changes.append(Change(check="facts", record=pid, action=f"{kind} of {anchor.id} ({age_a}, employer "
                                                                         f"{now.get('employer')!r}) does not fit: friend"))
            kind = "friend"
        hint, tie = EXPANSION_KINDS[kind][1], ""
        if kind == "family":
            # Everyone in the community has a digital footprint of their own: 16 or older.
            ties = [t for t, (lo, hi) in FAMILY_TIES.items() if NEWCOMER_MIN_AGE <= age_a + hi and age_a + hi <= 95]
            tie = rng.choice(ties)
            lo, hi = FAMILY_TIES[tie]
            age, hint = max(NEWCOMER_MIN_AGE, age_a + rng.randint(lo, hi)), tie
        else:
            lo, hi = {"partner": (max(18, age_a - 6), age_a + 6), "colleague": (max(18, age_a - 20), min(67, age_a + 20)),
                      "manager": (max(25, age_a - 5), max(25, min(67, age_a + 15))),
                      "neighbour": (max(18, age_a - 25), min(90, age_a + 25)),
                      "friend": (max(NEWCOMER_MIN_AGE, age_a - 6), max(NEWCOMER_MIN_AGE, age_a + 6)),
                      "hobby_friend": (max(NEWCOMER_MIN_AGE, age_a - 15), age_a + 15)}[kind]
            age = rng.randint(lo, max(lo, hi))
        gender = None
        if kind == "partner":
            gender = ({"female": "male", "male": "female"}.get(now.get("gender", ""), None)
                      if rng.random() < 0.9 else now.get("gender"))
        town, country = _split_location(now["location"])
        origin = _split_location(anchor.hometown)[1] if anchor.hometown else country
        if country not in identities.REGIONS:
            country, town = self.region
        city, hometown, moved_after = town, None, None
        youngest = min(age, age_a)
        if kind in ("family", "friend", "hobby_friend") and youngest >= 14 and rng.random() < ELSEWHERE:
            # Grew up in the anchor's town and moved away: elsewhere in the country, or abroad.
            others = [c for c in identities.REGIONS[country].cities if c != town]
            if others and rng.random() < 0.5:
                city = rng.choice(others)
            else:
                country = rng.choice(sorted(set(identities.REGIONS) - {country}))
                city = rng.choice(identities.REGIONS[country].cities)
            hometown = (_split_location(now["location"])[1], town)
            moved_after = add_years(self.start, -(youngest - 13))
        last = anchor.name.split()[-1] if kind == "family" and tie != "a cousin" and rng.random() < 0.7 else None
        ident = identities.draw_identity(
            self.cfg.seed, pid, self.start, country=country, city=city, age=age, gender=gender,
            employer=now["employer"] if kind in WORK_KINDS else None, hometown=hometown,
            name_country=origin if kind in ("family", "partner") else _split_location(now["location"])[1],
            last_name=last, working=True if kind in WORK_KINDS else None, moved_after=moved_after, taken=taken)
        return kind, hint, ident

    async def _expand(self, anchor: Person, pid: str, kind: str, hint: str,
                      ident: Identity) -> tuple[Person, Relationship] | None:
        seed = self.cfg.seed * 104729 + int(pid[1:])
        out = await self._ask("expand", NewMemberDraft, seed, anchor=_summary(anchor.id, anchor, self.start), kind=kind,
                              kind_hint=hint, facts=_facts_for_prompt(ident), period_start=self.start,
                              period_end=self.end, months=self.months)
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record=pid, action=f"new member next to {anchor.id} unparsed ({out.error}): skipped"))
            return None
        d = out.parsed
        keep = [anchor.name, ident.name, ident.employer, *(a.value for a in anchor.attributes if a.name == "employer")]
        persona, names = scrub_names(d.persona.strip(), ident.name.split()[0], keep)
        if names:
            self.changes.append(Change(check="names", record=pid, action=f"persona named {names}: replaced by code's name"))
        # An occupation is a job, not a bond: "manager at work of <anchor>" becomes "manager".
        occupation = re.sub(rf"\s+(?:at work\s+)?(?:of|for|to|with)\s+{re.escape(anchor.name)}.*$", "",
                            d.profile.occupation.strip())
        if occupation != d.profile.occupation.strip():
            self.changes.append(Change(check="names", record=pid, action=f"occupation {d.profile.occupation!r}: "
                                                                         f"{occupation!r}"))
            d = d.model_copy(update={"profile": d.profile.model_copy(update={"occupation": occupation})})
        persona, fixed = fit_persona(persona, ident, d.profile.occupation.strip() or "person")
        if fixed:
            self.changes.append(Change(check="facts", record=pid, action=f"persona disagreed with code's facts: {fixed}"))
        person = build_person(pid, ident, d.profile, persona, "expansion", self.start, self.end, self.changes,
                              self._rng(pid, "life"))
        # For a manager, the new person manages the anchor.
        a, b = (pid, anchor.id) if kind == "manager" else (anchor.id, pid)
        view = CommunityView(Community(period_start=self.start, period_end=self.end, people=[anchor, person],
                                       relationships=[], groups=[]))
        self.proposed["relationships"] += 1
        rng = self._rng(pid, "met")
        in_period = kind in ("friend", "hobby_friend") and rng.random() < 0.25
        latest = self.start + dt.timedelta(days=int((self.end - self.start).days * 0.9)) if in_period else self.start
        rel = self._dated(view, "r?", a, b, kind, "expansion", latest, self.start if in_period else None)
        return (person, rel) if rel is not None else None

    async def _groups(self, people: list[Person], rels: list[Relationship], n_groups: int) -> list[Group]:
        out = await self._ask("groups", GroupsDraft, self.cfg.seed * 131 + 7,
                              people=[_summary(p.id, p, self.start) for p in people], n_groups=n_groups)
        drafts = [] if out.unparsed else out.parsed.groups[:n_groups]
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record="groups", action=f"unparsed ({out.error}): formed by code"))
        groups = [self._dated_group(f"g{i + 1}", *self._group_words(f"g{i + 1}", d, people),
                                    f"{d.basis}: {d.basis_value}", self._sharing(f"g{i + 1}", d, people))
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

    def _sharing(self, gid: str, d: GroupDraft, people: list[Person]) -> list[str]:
        """The draft's members; for an interest group, those whose interests name it."""
        if d.basis != "interest":
            return d.member_ids
        words = {w for w in re.findall(r"[^\W\d_]{4,}", d.basis_value.lower())}
        by_id = {p.id: p for p in people}
        keep = [m for m in d.member_ids if m not in by_id or not words or words & set(re.findall(
            r"[^\W\d_]{4,}", " ".join(a.value for a in by_id[m].attributes if a.name == "interests").lower()))]
        if len(keep) != len(d.member_ids):
            self.changes.append(Change(check="groups", record=gid, action=f"members without the interest "
                                       f"{d.basis_value!r} left out: {sorted(set(d.member_ids) - set(keep))}"))
        return keep

    def _group_words(self, gid: str, d: GroupDraft, people: list[Person]) -> tuple[str, str]:
        """The draft's name and purpose, unless they name someone who is not in the community:
        then words made by code from the group's basis (a group never renames people)."""
        names = [p.name for p in people]
        found = [n for text in (d.name, d.purpose) for n in scrub_names(text, "", names)[1]]
        if not found:
            return d.name, d.purpose
        self.changes.append(Change(check="names", record=gid, action=f"group named {found}: renamed from its basis"))
        return f"{d.basis_value} {'chat' if d.basis != 'family' else 'family chat'}", f"people who share {d.basis} {d.basis_value}"

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
        remaining after repair (all zero, or this raises), changes by check, and the content
        audit (``quality``: findings per kind; ``quality_examples``: the first few of each kind
        that has any, ``pbench.audit.summary``).
    Raises:
        RuntimeError: the repaired community still fails a check (a bug, named in the message).
    """
    from pbench.llm import run_sync

    gen = Generator(cfg, model, progress)
    community = run_sync(gen.generate())
    found = find(community)  # the whole rule set, once: the period's checks and the audit
    remaining = {k: found[k] for k in CHECKS}
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
    report.update(audits.summary({k: found[k] for k in AUDIT_KINDS}))
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
