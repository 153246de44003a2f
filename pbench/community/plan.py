"""Code's plan for a community, made before and between the model's requests: its size, the
seed personas and the town they set, each newcomer's bond and identity, dated bonds and groups.

Reads the parameters (``seed``, ``period``, ``community``) and what the community holds so far;
writes nothing (changes to what was asked are recorded in the caller's list). Every draw is
seeded: the community's shape from the run's generator, in a fixed order; a person's or a
bond's from a generator of its own (``Planner.rng_for``), so that a plan does not depend on
when the model's replies arrive.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Iterable

from pbench import identities
from pbench.community.facts import NO_VALUE, WORK_AGE_MAX, date_bond, fit_kind, norm, story
from pbench.community.view import CommunityView
from pbench.config import RunConfig
from pbench.identities import Identity, add_years
from pbench.schema import PERMANENT_KINDS, WORK_KINDS, Change, Community, Group, Membership, Person, Relationship

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

Newcomer = tuple[Person, str, str, str, Identity]  # anchor, id, bond kind, the prompt's words for it, identity


def location_at(person: Person, t: dt.date) -> str:
    return next((a.value for a in person.attributes if a.name == "location" and a.active(t)), "")


def split_location(location: str) -> tuple[str, str]:
    town, _, country = location.rpartition(", ")
    return town, country


class Planner:
    """Code's plan for one community (one instance per stage run).

    Args:
        cfg: the run's parameters.
        changes: the run's list of changes, where a plan that departs from what was asked is recorded.
    """

    def __init__(self, cfg: RunConfig, changes: list[Change]) -> None:
        self.cfg = cfg
        self.changes = changes
        self.rng = random.Random(cfg.seed)  # the community's shape, drawn in a fixed order
        self.start, self.end = cfg.period.start, cfg.period.end
        self.region: tuple[str, str] = ("", "")  # the community's country and town

    def rng_for(self, *what: str) -> random.Random:
        """A generator of its own for one job, seeded by the run's seed and the job's id."""
        return random.Random(":".join((str(self.cfg.seed), *what)))

    def shape(self) -> tuple[int, int]:
        """The community's size and number of groups."""
        cc = self.cfg.community
        return self.rng.randint(*cc.size), self.rng.randint(*cc.groups)

    def seeds(self, pool: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        """The seed personas and the spare ones (for a seed whose profile is unparsable); sets ``region``.

        The first seed sets where the community lives: drawn among the personas of a country
        that has enough of them for every seed, so that the community is of one region and the
        people from elsewhere are a minority (a persona's own place always wins). The other
        seeds come from the same town, then the same country, then anywhere.
        """
        n = self.cfg.community.initial_seed
        if len(pool) < n:
            raise ValueError(f"community.personas_path: {len(pool)} personas, fewer than initial_seed={n}")
        order = self.rng.sample(pool, len(pool))
        country_of = {p["id"]: identities.persona_facts(p["persona"]).country for p in order}
        counts = Counter(country_of.values())
        enough = max(min(n, max(counts.values())), 1)
        order.sort(key=lambda p: not (country_of[p["id"]] and counts[country_of[p["id"]]] >= enough))
        said = identities.persona_facts(order[0]["persona"])
        country = said.country or sorted(identities.REGIONS)[self.rng.randrange(len(identities.REGIONS))]
        self.region = (country, said.city or self.rng.choice(identities.REGIONS[country].cities))

        def tier(p: dict[str, str]) -> int:
            f = identities.persona_facts(p["persona"])
            return 0 if (f.country, f.city) == self.region else 1 if f.country == country else 2

        rest = sorted(order[1:], key=tier)
        return [order[0], *rest[: n - 1]], rest[n - 1:]

    def seed_identities(self, seeds: list[dict[str, str]],
                        spare: list[dict[str, str]]) -> list[tuple[str, list[tuple[dict[str, str], Identity]]]]:
        """Each seed's id and its candidates (its persona, then two spares), each with an identity
        drawn by code, in a fixed order so that names stay unique."""
        n = self.cfg.community.initial_seed
        country, town = self.region
        taken: set[str] = set()
        out = []
        for i, persona in enumerate(seeds):
            pid = f"u{i + 1:02d}"
            cands = [persona] + spare[i::n][:2]
            idents = []
            for k, cand in enumerate(cands):
                ident = identities.draw_identity(self.cfg.seed, f"{pid}.{k}", self.start, country=country, city=town,
                                                 facts=identities.persona_facts(cand["persona"]), taken=taken)
                taken.add(ident.name)
                idents.append(ident)
            out.append((pid, list(zip(cands, idents, strict=False))))
        return out

    def newcomers(self, people: list[Person], size: int, taken: set[str]) -> list[Newcomer]:
        """One round of newcomers, each anchored to a different member, their names added to ``taken``."""
        anchors = self._anchors(people, min(len(people), size - len(people)))
        out = []
        for i, anchor in enumerate(anchors):
            pid = f"u{len(people) + i + 1:02d}"
            kind, hint, ident = plan_newcomer(self, anchor, pid, taken)
            taken.add(ident.name)
            out.append((anchor, pid, kind, hint, ident))
        return out

    def _anchors(self, people: list[Person], n: int) -> list[Person]:
        """``n`` distinct members to anchor newcomers to, three times likelier when they live in the
        community's town (so that most of the community lives there)."""
        home = ", ".join(reversed(self.region))
        pool = list(people)
        out = []
        for _ in range(n):
            weights = [3 if norm(location_at(p, self.start)) == norm(home) else 1 for p in pool]
            out.append(pool.pop(self.rng.choices(range(len(pool)), weights=weights)[0]))
        return out

    def newcomer_bond(self, anchor: Person, person: Person, kind: str) -> Relationship | None:
        """The bond between an anchor and the newcomer, dated by their facts; a quarter of
        friends met during the period. A manager manages the anchor."""
        a, b = (person.id, anchor.id) if kind == "manager" else (anchor.id, person.id)
        view = CommunityView(Community(period_start=self.start, period_end=self.end, people=[anchor, person],
                                       relationships=[], groups=[]))
        rng = self.rng_for(person.id, "met")
        in_period = kind in ("friend", "hobby_friend") and rng.random() < 0.25
        latest = self.start + dt.timedelta(days=int((self.end - self.start).days * 0.9)) if in_period else self.start
        return self.dated_bond(view, "r?", a, b, kind, "expansion", latest, self.start if in_period else None)

    def dated_bond(self, view: CommunityView, rid: str, a: str, b: str, kind: str, source: str, latest: dt.date,
                   earliest: dt.date | None = None) -> Relationship | None:
        """A bond of ``kind`` dated by the facts, or the nearest kind they support (recorded)."""
        rng = self.rng_for(rid, a, b, kind)
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

    def dated_group(self, gid: str, name: str, purpose: str, basis: str, members: Iterable[str]) -> Group:
        """A group formed in the first quarter of the period; some members join later, a few leave."""
        formed = self.start + dt.timedelta(days=self.rng.randrange(max((self.end - self.start).days // 4, 1)))
        dated: list[Membership] = []
        for pid in dict.fromkeys(members):
            start = formed
            if dated and self.rng.random() < 0.25:  # some join later
                start = formed + dt.timedelta(days=self.rng.randrange(max((self.end - formed).days // 2, 1)))
            stop = self.end
            if len(dated) >= 2 and self.rng.random() < 0.15:  # and a few leave
                stop = start + dt.timedelta(days=self.rng.randrange(max((self.end - start).days, 1)))
            dated.append(Membership(person=pid, start=start, end=stop))
        return Group(id=gid, name=name.strip(), purpose=purpose.strip(), basis=basis, members=dated)


# --------------------------------------------------------------------------- a newcomer


def plan_newcomer(plan: Planner, anchor: Person, pid: str, taken: set[str]) -> tuple[str, str, Identity]:
    """Code's plan for one newcomer: the bond's kind, how the prompt words it, and an identity
    that fits the bond (an age, a town, the anchor's employer for colleagues)."""
    rng = plan.rng_for(pid, "plan")
    kinds = list(EXPANSION_KINDS)
    kind = rng.choices(kinds, weights=[EXPANSION_KINDS[k][0] for k in kinds])[0]
    now = {a.name: a.value for a in anchor.attributes if a.active(plan.start)}
    age_a = int(now["age"]) if now.get("age", "").isdigit() else 40
    works = norm(now.get("employer", "")) not in NO_VALUE and 18 <= age_a <= WORK_AGE_MAX
    if not {"colleague": works, "manager": works, "partner": age_a >= 18}.get(kind, True):
        plan.changes.append(Change(check="facts", record=pid, action=f"{kind} of {anchor.id} ({age_a}, employer "
                                                                     f"{now.get('employer')!r}) does not fit: friend"))
        kind = "friend"
    age, hint, tie = _age(rng, kind, age_a)
    gender = None
    if kind == "partner":
        gender = ({"female": "male", "male": "female"}.get(now.get("gender", ""), None)
                  if rng.random() < 0.9 else now.get("gender"))
    home = _home(plan, rng, kind, min(age, age_a), now["location"])
    origin = split_location(anchor.hometown)[1] if anchor.hometown else split_location(now["location"])[1]
    last = anchor.name.split()[-1] if kind == "family" and tie != "a cousin" and rng.random() < 0.7 else None
    ident = identities.draw_identity(
        plan.cfg.seed, pid, plan.start, age=age, gender=gender,
        employer=now["employer"] if kind in WORK_KINDS else None,
        name_country=origin if kind in ("family", "partner") else split_location(now["location"])[1],
        last_name=last, working=True if kind in WORK_KINDS else None, taken=taken, **home)
    return kind, hint, ident


def _age(rng: random.Random, kind: str, age_a: int) -> tuple[int, str, str]:
    """A newcomer's age for a bond of ``kind`` with an anchor aged ``age_a``, the prompt's words
    for the bond, and the family tie ('' for other kinds)."""
    hint, tie = EXPANSION_KINDS[kind][1], ""
    if kind == "family":
        # Everyone in the community has a digital footprint of their own: 16 or older.
        ties = [t for t, (lo, hi) in FAMILY_TIES.items() if NEWCOMER_MIN_AGE <= age_a + hi and age_a + hi <= 95]
        tie = rng.choice(ties)
        lo, hi = FAMILY_TIES[tie]
        return max(NEWCOMER_MIN_AGE, age_a + rng.randint(lo, hi)), tie, tie
    lo, hi = {"partner": (max(18, age_a - 6), age_a + 6), "colleague": (max(18, age_a - 20), min(67, age_a + 20)),
              "manager": (max(25, age_a - 5), max(25, min(67, age_a + 15))),
              "neighbour": (max(18, age_a - 25), min(90, age_a + 25)),
              "friend": (max(NEWCOMER_MIN_AGE, age_a - 6), max(NEWCOMER_MIN_AGE, age_a + 6)),
              "hobby_friend": (max(NEWCOMER_MIN_AGE, age_a - 15), age_a + 15)}[kind]
    return rng.randint(lo, max(lo, hi)), hint, tie


def _home(plan: Planner, rng: random.Random, kind: str, youngest: int, anchor_location: str) -> dict:
    """Where a newcomer lives: the anchor's town; for a quarter of family and friends, elsewhere
    in the country or abroad, having grown up in the anchor's town (``draw_identity``'s
    ``country``, ``city``, ``hometown`` and ``moved_after``)."""
    town, country = split_location(anchor_location)
    if country not in identities.REGIONS:
        country, town = plan.region
    city, hometown, moved_after = town, None, None
    if kind in ("family", "friend", "hobby_friend") and youngest >= 14 and rng.random() < ELSEWHERE:
        others = [c for c in identities.REGIONS[country].cities if c != town]
        if others and rng.random() < 0.5:
            city = rng.choice(others)
        else:
            country = rng.choice(sorted(set(identities.REGIONS) - {country}))
            city = rng.choice(identities.REGIONS[country].cities)
        hometown = (split_location(anchor_location)[1], town)
        moved_after = add_years(plan.start, -(youngest - 13))
    return {"country": country, "city": city, "hometown": hometown, "moved_after": moved_after}
