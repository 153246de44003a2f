"""The community on any date: ``CommunityView``, the one query API later stages use.

Reads a ``Community`` record (``pbench.schema``); writes nothing. Who may know what at a date
is computed here, never asked of a model.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from pbench.schema import AttributeValue, Community, Group, Relationship


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
        g: nx.MultiGraph = nx.MultiGraph()
        for p in self.c.people:
            g.add_node(p.id, name=p.name)
        for r in self.c.relationships:
            if t is None or r.active(t):
                g.add_edge(r.a, r.b, key=r.id, kind=r.kind)
        return g
