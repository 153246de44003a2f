"""Stage 01's generation: code plans, the generator role writes prose, code checks and repairs.

Reads the parameters and the seed personas, and asks the ``generator`` role four kinds of
prompt (``pbench/prompts/social_graph/``). Returns the community and its validation report
(``build``); ``pbench.community.files`` writes them.

The order of work, every run the same: code's plan (``pbench.community.plan``: seeded, in a
fixed order), then the model's drafts (profiles of the seeds, how the seeds know each other,
newcomers in concurrent rounds, groups), each held to code's facts as it arrives, then the
rule set (``pbench.community.rules``) over the proposal, ``repair``, and stories from the
final facts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel

from pbench import audit as audits  # the shared format of every stage's content audit
from pbench.community.drafts import KINDS, GroupsDraft, NewMemberDraft, ProfileDraft, SeedRelationships
from pbench.community.facts import months_in, story
from pbench.community.groups import group_words, keep_groups, sharing
from pbench.community.people import build_person, load_personas
from pbench.community.plan import Planner
from pbench.community.prose import fit_newcomer
from pbench.community.repair import repair
from pbench.community.rules import AUDIT_KINDS, CHECKS, check, find
from pbench.community.view import CommunityView
from pbench.config import RunConfig
from pbench.identities import Identity
from pbench.schema import PERMANENT_KINDS, Change, Community, Group, Person, Relationship


def _summary(pid: str, person: Person, t: dt.date) -> dict[str, str]:
    attrs = {a.name: a.value for a in person.attributes if a.active(t)}
    return {"id": pid, "name": person.name,
            **{k: attrs.get(k, "") for k in ("age", "gender", "occupation", "employer", "location", "interests")}}


def _pid(ref: str) -> str:
    m = re.fullmatch(r"\s*u0*(\d+)\s*", ref)
    return f"u{int(m.group(1)):02d}" if m else ref


def _facts_for_prompt(ident: Identity) -> dict[str, str]:
    status = {"working": "works", "retired": "retired", "student": "in education", "child": "a young child"}
    employer = {"none": "no employer", "self-employed": "self-employed"}.get(ident.employer, ident.employer)
    return {"age": str(ident.age), "gender": ident.gender, "location": ident.location, "employer": employer,
            "status": status[ident.status]}


class Generator:
    """Builds a community in three steps: code plans (``Planner``: seeded, in a fixed order), the
    generator role writes the prose about the plan (each reply held to code's facts as it
    arrives), then the rule set counts what the proposal breaks and ``repair`` mends it. One
    instance per stage run.

    Args:
        cfg: the run's parameters.
        model: the model bound to the ``generator`` role (``pbench.llm.ChatModel``).
        progress: a tqdm bar ticked once per model request, or None.
    """

    def __init__(self, cfg: RunConfig, model: Any, progress: Any = None) -> None:
        self.cfg = cfg
        self.model = model
        self.progress = progress
        self.start, self.end = cfg.period.start, cfg.period.end
        self.months = months_in(self.start, self.end)
        self.changes: list[Change] = []
        self.plan = Planner(cfg, self.changes)
        self.found_before: dict[str, int] = {}  # per check, in the proposal (before repair)

    async def _ask(self, template: str, schema: type[BaseModel], seed: int, **variables: Any) -> Any:
        return await self.model.ask("social_graph", template, schema, seed=seed, progress=self.progress, **variables)

    async def generate(self) -> Community:
        """Plan, propose, date, check and repair a community of the configured size."""
        size, n_groups = self.plan.shape()
        seeds, spare = self.plan.seeds(load_personas(self.cfg.community.personas_path))
        if self.progress is not None:
            n = self.cfg.community.initial_seed
            self.progress.total = n + 1 + (size - n) + 1
            self.progress.refresh()
        people = await self._seed_people(seeds, spare)
        rels = await self._seed_relationships(people)
        await self._grow(people, rels, size)
        groups = await self._groups(people, rels, n_groups)
        return self._finish(people, rels, groups)

    async def _seed_people(self, seeds: list[dict[str, str]], spare: list[dict[str, str]]) -> list[Person]:
        """Profiles of the seed personas (an unparsable one takes a spare persona)."""
        plans = self.plan.seed_identities(seeds, spare)
        made = await asyncio.gather(*(self._profile(pid, c, self.cfg.seed * 7919 + i) for i, (pid, c) in enumerate(plans)))
        people = [p for p in made if p]
        if len(people) < 2:
            raise RuntimeError("the generator produced fewer than 2 seed profiles it could parse; see community changes")
        return people

    async def _profile(self, pid: str, candidates: list[tuple[dict[str, str], Identity]], seed: int) -> Person | None:
        for attempt, (persona, ident) in enumerate(candidates):
            out = await self._ask("profile", ProfileDraft, seed + 1000 * attempt, persona=persona["persona"],
                                  facts=_facts_for_prompt(ident), period_start=self.start, period_end=self.end,
                                  months=self.months)
            if not out.unparsed:
                return build_person(pid, ident, out.parsed, persona["persona"], "seed", self.start, self.end,
                                    self.changes, self.plan.rng_for(pid, "life"))
            self.changes.append(Change(check="unparsed", record=pid,
                                       action=f"profile for persona {persona['id']} unparsed ({out.error}): persona replaced"))
        return None

    async def _seed_relationships(self, people: list[Person]) -> list[Relationship]:
        """How the seeds know each other: the generator proposes kinds, code fits and dates them."""
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
            rid = f"r{i}"
            d = d.model_copy(update={"a": _pid(d.a), "b": _pid(d.b)})  # "u1" for "u01"
            if d.a not in view.people or d.b not in view.people or d.a == d.b:  # repair drops it, counted
                rels.append(Relationship(id=rid, a=d.a, b=d.b, kind=d.kind, permanent=d.kind in PERMANENT_KINDS,
                                         start=self.start, end=None if d.kind in PERMANENT_KINDS else self.end))
                continue
            rel = self.plan.dated_bond(view, rid, d.a, d.b, d.kind, "generator", self.start)
            if rel is not None:
                rels.append(rel)
        return rels

    async def _grow(self, people: list[Person], rels: list[Relationship], size: int) -> None:
        """New people, each anchored to a member, in concurrent rounds, added to ``people`` and
        ``rels``; code plans each round's newcomers in order before its requests."""
        taken = {p.name for p in people}
        while len(people) < size:
            planned = self.plan.newcomers(people, size, taken)
            made = [m for m in await asyncio.gather(*(self._newcomer(*p) for p in planned)) if m is not None]
            if not made:
                break  # every proposal in this round was unparsable: stop short, recorded in changes
            for person, rel in made:
                people.append(person)
                rels.append(rel.model_copy(update={"id": f"r{len(rels) + 1}"}))
        if len(people) < size:
            self.changes.append(Change(check="size", record="community", action=f"{len(people)} people of {size} asked for"))

    async def _newcomer(self, anchor: Person, pid: str, kind: str, hint: str,
                        ident: Identity) -> tuple[Person, Relationship] | None:
        seed = self.cfg.seed * 104729 + int(pid[1:])
        out = await self._ask("expand", NewMemberDraft, seed, anchor=_summary(anchor.id, anchor, self.start), kind=kind,
                              kind_hint=hint, facts=_facts_for_prompt(ident), period_start=self.start,
                              period_end=self.end, months=self.months)
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record=pid, action=f"new member next to {anchor.id} unparsed ({out.error}): skipped"))
            return None
        persona, profile = fit_newcomer(pid, out.parsed, ident, anchor, self.changes)
        person = build_person(pid, ident, profile, persona, "expansion", self.start, self.end, self.changes,
                              self.plan.rng_for(pid, "life"))
        rel = self.plan.newcomer_bond(anchor, person, kind)
        return (person, rel) if rel is not None else None

    async def _groups(self, people: list[Person], rels: list[Relationship], n_groups: int) -> list[Group]:
        """Group chats the generator proposes, held to the facts, made up in number by code."""
        out = await self._ask("groups", GroupsDraft, self.cfg.seed * 131 + 7,
                              people=[_summary(p.id, p, self.start) for p in people], n_groups=n_groups)
        drafts = [] if out.unparsed else out.parsed.groups[:n_groups]
        if out.unparsed:
            self.changes.append(Change(check="unparsed", record="groups", action=f"unparsed ({out.error}): formed by code"))
        groups = [self.plan.dated_group(f"g{i + 1}", *group_words(f"g{i + 1}", d, people, self.changes),
                                        f"{d.basis}: {d.basis_value}", sharing(f"g{i + 1}", d, people, self.changes))
                  for i, d in enumerate(drafts)]
        view = CommunityView(Community(period_start=self.start, period_end=self.end, people=people,
                                       relationships=rels, groups=[]))
        return keep_groups(view, groups, n_groups, self.plan)

    def _finish(self, people: list[Person], rels: list[Relationship], groups: list[Group]) -> Community:
        """The proposal checked (``found_before``) and repaired, with stories from the final facts
        (repair may have bounded a bond or changed its kind)."""
        # Concurrent requests note their changes as their replies arrive: sorted, so that the file
        # does not depend on that order.
        self.changes.sort(key=lambda c: (c.record, c.check, c.action))
        proposed = Community(period_start=self.start, period_end=self.end, people=people, relationships=rels,
                             groups=groups, changes=self.changes)
        self.found_before = {k: len(v) for k, v in check(proposed).items()}
        community, _ = repair(proposed, self.plan.rng)
        view = CommunityView(community)
        rels = [r if r.source == "evolution" else r.model_copy(update={"why": story(view, r)})
                for r in community.relationships]
        return community.model_copy(update={"relationships": rels})


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
