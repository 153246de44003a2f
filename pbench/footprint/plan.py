"""Planning a user's footprint with code, before any model writes: each document's moment,
participants (from the graph's state then), noise or substance and the attribute it reveals;
each secret's confidants and moments of telling. Seeded, in a fixed order: the same plan
whatever order the model's replies arrive in."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pbench import components, themes
from pbench.config import RunConfig
from pbench.schema import DOCUMENT_KINDS, Secret, SharingEvent
from pbench.social_graph import CommunityView

KIND_VOLUME = {"chat": "private_conversations", "group_chat": "group_conversations", "ai_chat": "ai_conversations",
               "blog": "blog_posts", "purchase": "purchases"}
REVEALABLE = ("occupation", "employer", "location", "education", "interests", "beliefs")


def substantive_share(noise_ratio: float) -> float:
    """Appendix A.3 defines the noise ratio as substantive to mundane documents (0.3 means
    3 substantive for every 10 mundane), so the substantive share is r / (1 + r)."""
    return noise_ratio / (1.0 + noise_ratio)


@dataclass
class Slot:
    """A planned document: everything but its text."""

    id: str
    owner: str
    kind: str
    participants: list[str]
    timestamp: dt.datetime
    noise: bool
    group: str | None = None
    relation: str | None = None
    reveal: str | None = None  # attribute name
    reveal_value: str | None = None
    topic: str = ""


MUNDANE_TOPICS = (
    "weekend plans", "the weather", "a TV series", "groceries and what to cook", "the commute", "something funny "
    "that happened today", "making plans to meet up", "a sports match", "a recipe", "a birthday present", "pets",
    "a broken appliance", "holiday photos", "traffic", "music they have been listening to", "a local event",
)
AI_TOPICS = (
    "planning a trip", "a recipe", "a spreadsheet formula", "wording an email", "a workout plan", "learning a "
    "language", "a monthly budget", "a gift idea", "fixing a slow laptop", "a book recommendation",
)


def _topic(view: CommunityView, slot: Slot, rng: random.Random) -> str:
    if slot.kind == "purchase":
        return "something they bought"
    if slot.kind == "ai_chat" and slot.noise:
        return rng.choice(AI_TOPICS)
    if slot.noise and slot.kind != "blog":
        return rng.choice(MUNDANE_TOPICS)
    attrs = view.attributes_at(slot.owner, slot.timestamp.date())
    interests = [i.strip() for i in attrs.get("interests", "").split(",") if i.strip()] or ["daily life"]
    return rng.choice([f"their interest in {rng.choice(interests)}", f"their work as {attrs.get('occupation', 'what they do')}",
                       "their plans for the coming months", f"what they believe: {attrs.get('beliefs', '')}".rstrip(": ")])


def _random_moment(rng: random.Random, start: dt.date, end: dt.date) -> dt.datetime:
    day = start + dt.timedelta(days=rng.randrange((end - start).days + 1))
    return dt.datetime.combine(day, dt.time(rng.randrange(7, 23), rng.randrange(60)))


def plan_user(view: CommunityView, cfg: RunConfig, uid: str, rng: random.Random) -> tuple[list[Slot], Counter]:
    """Plan a user's mundane documents from the graph's state at each document's moment.

    Returns:
        The slots, and counts of documents that could not be placed (no contact or group then).
    """
    f = cfg.footprint
    start, end = view.period
    slots: list[Slot] = []
    skipped: Counter = Counter()
    for kind in DOCUMENT_KINDS:
        n = rng.randint(*getattr(f, KIND_VOLUME[kind]))
        ratio = f.blog_noise_ratio if kind == "blog" else f.conversation_noise_ratio
        for i in range(n):
            slot = None
            for _ in range(20):  # find a moment when the user has someone to talk to
                t = _random_moment(rng, start, end)
                slot = _slot_at(view, uid, kind, t, rng, f"{uid}-{kind}-{i + 1:03d}")
                if slot is not None:
                    break
            if slot is None:
                skipped[kind] += 1
                continue
            if kind == "purchase":
                slot.noise = True
                if rng.random() < f.attribute_reveal_prob:
                    slot.reveal = "shopping_preferences"
            else:
                slot.noise = rng.random() >= substantive_share(ratio)
                if not slot.noise and rng.random() < f.attribute_reveal_prob:
                    slot.reveal = rng.choice(REVEALABLE)
            if slot.reveal:
                slot.reveal_value = view.attributes_at(uid, t.date()).get(slot.reveal)
                if not slot.reveal_value:
                    slot.reveal = None
            slot.topic = _topic(view, slot, rng)
            slots.append(slot)
    return slots, skipped


def _slot_at(view: CommunityView, uid: str, kind: str, t: dt.datetime, rng: random.Random, sid: str) -> Slot | None:
    day = t.date()
    if kind == "chat":
        rels = view.relationships_at(uid, day)
        if not rels:
            return None
        r = rng.choice(sorted(rels, key=lambda r: r.id))
        return Slot(sid, uid, kind, [uid, r.other(uid)], t, True, relation=r.kind)
    if kind == "group_chat":
        groups = [g for g in view.groups_at(uid, day) if len(view.members_at(g.id, day)) >= 2]
        if not groups:
            return None
        g = rng.choice(sorted(groups, key=lambda g: g.id))
        return Slot(sid, uid, kind, view.members_at(g.id, day), t, True, group=g.id)
    return Slot(sid, uid, kind, [uid], t, True)


CONFIDANT_KINDS = ("partner", "friend", "family", "hobby_friend", "classmate")  # whom secrets are told first


def plan_sharing(view: CommunityView, uid: str, drawn: themes.Drawn, rng: random.Random) -> tuple[list[tuple[str, str, dt.datetime]], list[str]]:
    """Decide who hears a secret and when, from the graph: one or two confidants in a
    relationship with the owner at the moment of telling (close bonds first), sometimes a
    group the owner is in, sometimes the AI assistant too; never the people it is kept from,
    nor the person it is about. About one secret in ten is told only to the AI assistant.

    Returns:
        ``(channel, shared_with, at)`` events, and notes on what could not be planned.
    """
    start, end = view.period
    events: list[tuple[str, str, dt.datetime]] = []
    notes: list[str] = []
    if rng.random() < 0.1:
        return [("ai", "ai", _random_moment(rng, start, end))], notes
    kept_from = set(drawn.at_risk) | {drawn.about, uid}
    bonds: dict[str, str] = {}
    for d in _sample_days(view, 30):
        for r in view.relationships_at(uid, d):
            bonds.setdefault(r.other(uid), r.kind)
    close = sorted((p for p in bonds if p not in kept_from),
                   key=lambda p: (bonds[p] not in CONFIDANT_KINDS, rng.random()))
    for cid in close[: rng.choice((1, 1, 2))]:
        days = _active_days(view, uid, lambda d, c=cid: c in view.contacts_at(uid, d))  # type: ignore[misc]  # mypy infers no lambda with a default
        events.append(("person", cid, _moment_on(rng, days)))
    if rng.random() < 0.3:
        groups = sorted({g.id for d in _sample_days(view) for g in view.groups_at(uid, d)})
        safe = [g for g in groups if not kept_from - {uid} & {m.person for m in view.groups[g].members}]
        if safe:
            gid = rng.choice(safe)
            days = _active_days(view, uid, lambda d: uid in view.members_at(gid, d) and len(view.members_at(gid, d)) >= 2)
            if days:
                events.append(("group", gid, _moment_on(rng, days)))
    if rng.random() < 0.2:
        events.append(("ai", "ai", _random_moment(rng, start, end)))
    if not events:
        notes.append("nobody the owner could tell: told only to the AI assistant")
        events.append(("ai", "ai", _random_moment(rng, start, end)))
    return sorted(events, key=lambda e: e[2]), notes


def _sample_days(view: CommunityView, step: int = 7) -> list[dt.date]:
    start, end = view.period
    return [start + dt.timedelta(days=i) for i in range(0, (end - start).days + 1, step)]


def _active_days(view: CommunityView, uid: str, ok: Callable[[dt.date], bool]) -> list[dt.date]:
    return [d for d in _sample_days(view) if ok(d)]


def _moment_on(rng: random.Random, days: list[dt.date]) -> dt.datetime:
    day = rng.choice(days)
    return dt.datetime.combine(day, dt.time(rng.randrange(7, 23), rng.randrange(60)))


def plan_secret(view: CommunityView, uid: str, k: int, drawn: themes.Drawn, rng: random.Random) -> tuple[Secret, list[str]]:
    """Secret ``k`` of ``uid`` from the facts code drew (``pbench.themes``): its components
    checked against the judge's rules (``pbench.components``: they hold by construction, checked
    all the same) and its tellings planned (``plan_sharing``), each with the id of the document
    that will carry it.

    Returns:
        The secret, and notes on components dropped and tellings that could not be planned.
    """
    sid = f"{uid}-s{k}"
    comps, problems = components.check(drawn.components, drawn.content, view.name(uid))
    notes = [f"{sid}: component dropped: {p}" for p in problems]
    events, unplanned = plan_sharing(view, uid, drawn, rng)
    notes += [f"{sid}: {n}" for n in unplanned]
    # plan_sharing never tells the people it is kept from: they are the ones not told.
    withheld = f"not told: {', '.join(view.name(p) for p in drawn.at_risk)}" if drawn.at_risk else ""
    secret = Secret(id=sid, owner=uid, content=drawn.content, core_components=comps, withheld_from=withheld,
                    category=drawn.category, theme=drawn.theme, about=drawn.about, topic=drawn.topic,
                    facts=drawn.facts, at_risk=drawn.at_risk,
                    sharing=[SharingEvent(channel=c, shared_with=w, at=at, document_id=f"{sid}-{j}")
                             for j, (c, w, at) in enumerate(events, 1)])
    return secret, notes
