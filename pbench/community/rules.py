"""Stage 01's one rule set: each validity rule, named, with the records that break it.

Reads a ``Community``; writes nothing. ``find`` runs every rule in one place; ``check`` and
``audit`` are its two halves, by scope:

- ``period`` rules (``check``): the records' shape over the period: endpoints, dates,
  permanence, attribute timelines, names, a work or neighbour bond on days the two share
  their employer or town, groups, reachability. The generator counts them in its proposal
  (``found_in_proposal``), ``pbench.community.repair`` mends them and records each change
  under the rule's name (``changes_by_check``), and ``build`` requires none after repair
  (``remaining_after_repair``).
- ``lifetime`` rules (``audit``): the facts over lives: placeholder and duplicate names,
  bonds that start before a birth, at an age the kind does not allow, without a shared
  town or employer, and stories that name what the facts do not hold. Code's plan keeps them
  by construction (``pbench.community.facts``: ``bond_windows``, ``story``); the audit counts
  what remains (``quality``, with ``quality_examples``).

What both scopes ask is written once and called from both: whether a relationship links two
members (``linked``, also repair's test for dropping one), who shares a name
(``shared_names``), and whether a work or neighbour bond has its employer or town on the days
asked (``facts.bound_holds``, over ``facts.shared_spans``).

Two pairs of rules ask the same question and stay two rules, because they answer it at
different times or over different days, and ``community.json`` reports both:

- ``names`` and ``duplicate_names``: the same test. ``names`` is counted in the proposal,
  which repair then renames, and after repair (``found_in_proposal``,
  ``remaining_after_repair``); ``duplicate_names`` in the audit's ``quality``. One key would
  drop a field from one of those reports.
- ``employer``/``location`` and the first test of ``relationship_places``: the same test over
  different days. The period's rules ask about a dated bond's days within the period, which
  repair can mend (it moves dates only within the period); ``relationship_places`` asks from
  the bond's start, before the period too, which only the plan keeps. They differ, for
  example, for neighbours who met in a town they both left and live in one town again
  during the period: the period's rule finds nothing to mend, the audit counts one. The
  lifetime's reading in ``check`` would make ``build`` reject such a community; the period's
  reading in ``audit`` would stop counting it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import networkx as nx

from pbench import identities
from pbench.community.facts import (
    CLASSMATE_GAP_DAYS,
    DAY,
    REMOTE_WORDS,
    WORK_AGE_MAX,
    birth_of,
    bound_attr,
    bound_holds,
    life_timeline,
    norm,
    shared_spans,
    town_of,
)
from pbench.community.view import CommunityView
from pbench.identities import age_on
from pbench.schema import PERMANENT_KINDS, WORK_KINDS, AttributeValue, Community, Relationship

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
            for prev, nxt in itertools.pairwise(values):
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
        lived = {norm(town_of(v)) for pid in (r.a, r.b) for _, _, v in life_timeline(view, pid, "location")}
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
