"""Writing a planned footprint with the ``generator`` role: mundane documents several per
request, and one conversation per telling of a secret. Code planned every document
(``pbench.footprint.plan``); the model only writes text, in a schema that names who may speak."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from pbench import themes
from pbench.config import RunConfig
from pbench.footprint.plan import Slot, plan_secret, plan_user
from pbench.schema import ATTRIBUTES, DOCUMENT_KINDS, Document, Secret, SharingEvent
from pbench.social_graph import CommunityView
from pbench.tellings import is_exchange

BATCH_RETRIES = 2  # re-asks for documents a batch reply left out
MAX_LINE = 300  # characters in one message or paragraph


def batch_schema(speakers: list[str], n_docs: int = 8) -> type[BaseModel]:
    """A batch reply: per document, its lines, each with a speaker from ``speakers`` (for a
    blog post or a purchase, the owner: the lines are its paragraphs)."""
    names = tuple(dict.fromkeys(speakers))
    # Bounded lists and strings: a small model that never closes its list otherwise writes to
    # max_tokens (measured: a third of the tiny run's replies), and the reply fails to parse.
    doc = create_model("DocLines", index=(int, ...), lines=(list[_line(names)], Field(min_length=1, max_length=6)))  # type: ignore[arg-type, misc]  # a model made at run time
    return create_model("DocBatch", documents=(list[doc], Field(max_length=n_docs)))


def exchange_schema(speakers: list[str]) -> type[BaseModel]:
    """A reply schema whose messages can only come from ``speakers`` (the owner first)."""
    return create_model("Exchange", messages=(list[_line(tuple(dict.fromkeys(speakers)))], Field(min_length=2, max_length=8)))  # type: ignore[arg-type, misc]  # as above


def _line(names: tuple[str, ...]) -> type[BaseModel]:
    """One message or paragraph: its speaker, one of ``names``, and its text."""
    return create_model("Line", speaker=(Literal[names], ...), text=(str, Field(max_length=MAX_LINE)))  # type: ignore[arg-type]  # as above


def render(kind: str, lines: list[Any]) -> str:
    """A document's text from its lines: a conversation one line per message, each starting
    with its speaker; a blog post its paragraphs; a purchase one line."""
    said = [(m.speaker, " ".join(m.text.split())) for m in lines if m.text.strip()]
    if kind in ("chat", "group_chat", "ai_chat"):
        return "\n".join(f"{who}: {text}" for who, text in said)
    return ("\n" if kind == "blog" else " ").join(text for _, text in said)


def _person(view: CommunityView, pid: str, t: dt.date) -> dict[str, str]:
    """A person's name and every profile attribute on day ``t`` ("" where it has no value)."""
    return {"id": pid, "name": view.name(pid), **dict.fromkeys(ATTRIBUTES, ""), **view.attributes_at(pid, t)}


def _slot_prompt(view: CommunityView, index: int, s: Slot) -> dict[str, Any]:
    """What the documents prompt says of one planned document."""
    day = s.timestamp.date()
    others = [{**_person(view, p, day), "first": view.name(p).split()[0]} for p in s.participants if p != s.owner]
    return {"index": index, "kind": s.kind, "date": day.isoformat(), "with": others, "relation": s.relation, "topic": s.topic,
            "reveal": {"name": s.reveal, "value": s.reveal_value} if s.reveal else None}


def document_of(s: Slot, text: str, secret_ids: list[str] | None = None) -> Document:
    """The document record of a planned slot and the text written for it."""
    return Document(id=s.id, owner=s.owner, kind=s.kind, participants=s.participants, group=s.group,
                    timestamp=s.timestamp, text=text, secret_ids=secret_ids or [],
                    attributes_revealed=[s.reveal] if s.reveal else [], noise=s.noise, public=s.kind == "blog")


@dataclass
class UserResult:
    documents: list[Document] = field(default_factory=list)
    secrets: list[Secret] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unplaced: dict[str, int] = field(default_factory=dict)


class FootprintGenerator:
    """Writes one user's footprint with the generator role.

    Args:
        cfg: the run's parameters.
        view: the community (stage 01).
        model: the ``generator`` ChatModel.
        progress: a tqdm bar ticked per model request, or None.
    """

    def __init__(self, cfg: RunConfig, view: CommunityView, model: Any, progress: Any = None) -> None:
        self.cfg, self.view, self.model, self.progress = cfg, view, model, progress
        # Every user's secrets drawn up front, in user order, each preferring themes the users
        # before them did not get: pure code, so the same whatever order users finish in.
        # Each user's plan is made once; user() picks up its random stream where the plan left it.
        self.drawn: dict[str, list[themes.Drawn]] = {}
        self.plans: dict[str, tuple[list[Slot], Counter, tuple]] = {}
        used: Counter = Counter()
        for uid in sorted(view.people):
            rng = random.Random(self._seed(uid, "plan"))
            slots, unplaced = plan_user(view, cfg, uid, rng)
            n = rng.randint(*cfg.footprint.secrets_per_user)
            self.plans[uid] = (slots, unplaced, rng.getstate())
            self.drawn[uid] = themes.draw(view, uid, n, random.Random(self._seed(uid, "secrets")), used)
            used.update(d.theme for d in self.drawn[uid])

    def _seed(self, uid: str, *parts: Any) -> int:
        key = json.dumps([self.cfg.seed, uid, *parts], default=str)
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")

    def estimate_requests(self, uid: str) -> int:
        """Requests a user will take (for a progress bar's total): the batches and about two
        tellings per secret (code draws the secrets); regenerations come on top."""
        batches = -(-len(self.plans[uid][0]) // self.cfg.footprint.docs_per_call)
        return batches + 2 * len(self.drawn[uid])

    async def user(self, uid: str) -> UserResult:
        slots, unplaced, state = self.plans[uid]
        rng = random.Random()
        rng.setstate(state)
        res = UserResult(unplaced=dict(unplaced))
        docs, secrets = await asyncio.gather(self._mundane(uid, slots, res), self._secrets(uid, rng, res))
        res.documents = sorted(docs + res.documents, key=lambda d: d.timestamp)
        res.secrets = secrets
        res.notes.sort()  # concurrent batches note in the order they finish; the file does not
        return res

    # -- mundane documents, several per request

    async def _mundane(self, uid: str, slots: list[Slot], res: UserResult) -> list[Document]:
        # Batches mix kinds (kind by kind, so most batches hold one or two): small volumes per
        # kind would otherwise cost a request each.
        n = self.cfg.footprint.docs_per_call
        ordered = sorted(slots, key=lambda s: (DOCUMENT_KINDS.index(s.kind), s.id))
        jobs = [self._batch(uid, ordered[i:i + n], res) for i in range(0, len(ordered), n)]
        return [d for batch in await asyncio.gather(*jobs) for d in batch]

    async def _batch(self, uid: str, slots: list[Slot], res: UserResult) -> list[Document]:
        owner = _person(self.view, uid, slots[0].timestamp.date())
        done: dict[str, Document] = {}
        best: dict[str, Document] = {}  # a conversation that is not yet an exchange, kept in case no better comes
        todo = list(slots)
        for attempt in range(BATCH_RETRIES + 1):
            if not todo:
                break
            listed = [_slot_prompt(self.view, i + 1, s) for i, s in enumerate(todo)]
            speakers = [owner["name"].split()[0], *(w["first"] for x in listed for w in x["with"]), "Assistant"]
            out = await self.model.ask("footprint", "documents", batch_schema(speakers, len(todo)),
                                       seed=self._seed(uid, todo[0].id, attempt), progress=self.progress,
                                       owner=owner, slots=listed)
            if out.unparsed:
                res.notes.append(f"batch from {todo[0].id}: unparsed reply ({out.error})")
                continue
            written = {d.index: d.lines for d in out.parsed.documents}
            for i, s in enumerate(todo):
                text = render(s.kind, written.get(i + 1, []))
                if not text:
                    continue
                doc = document_of(s, text)
                if s.kind in ("chat", "group_chat") and not is_exchange(doc, self.view):
                    best.setdefault(s.id, doc)  # asked again: a conversation is an exchange between its people
                else:
                    done[s.id] = doc
            todo = [s for s in todo if s.id not in done]
        for s in todo:
            if s.id in best:
                done[s.id] = best[s.id]
                res.notes.append(f"{s.id}: not an exchange after {BATCH_RETRIES + 1} requests: kept, counted")
            else:
                res.notes.append(f"{s.id}: no text after {BATCH_RETRIES + 1} requests: dropped")
        return list(done.values())

    # -- secrets and the conversations that share them

    async def _secrets(self, uid: str, rng: random.Random, res: UserResult) -> list[Secret]:
        """The user's secrets, drawn by code (``pbench.themes``), and the conversations that tell them."""
        secrets = []
        for k, drawn in enumerate(self.drawn[uid], 1):
            secret, notes = plan_secret(self.view, uid, k, drawn, rng)
            secrets.append(secret)
            res.notes += notes
        docs = await asyncio.gather(*(self.share_document(s, e) for s in secrets for e in s.sharing))
        res.documents.extend(docs)
        return secrets

    async def share_document(self, secret: Secret, event: SharingEvent, attempt: int = 0) -> Document:
        """Write the conversation in which ``event`` happens (``attempt`` varies the seed): an
        exchange between its participants, one line per message starting with its speaker."""
        view, uid, day = self.view, secret.owner, event.at.date()
        kind = {"person": "chat", "group": "group_chat", "ai": "ai_chat"}[event.channel]
        if event.channel == "person":
            participants = [uid, event.shared_with]
            relation = view.relation(uid, event.shared_with, day).words or "acquaintance"
        elif event.channel == "group":
            participants, relation = view.members_at(event.shared_with, day), None
        else:
            participants, relation = [uid], None
        others = [_person(view, p, day) for p in participants if p != uid]
        speakers = [view.name(uid).split()[0]] + ([o["name"].split()[0] for o in others] or ["Assistant"])
        out = await self.model.ask("footprint", "share", exchange_schema(speakers),
                                   seed=self._seed(event.document_id, attempt), progress=self.progress, kind=kind,
                                   owner=_person(view, uid, day), date=day.isoformat(), relation=relation,
                                   group_name=view.groups[event.shared_with].name if event.channel == "group" else None,
                                   secret=secret.content, components=secret.core_components, **{"with": others})
        text = "" if out.unparsed else render(kind, out.parsed.messages)
        slot = Slot(event.document_id, uid, kind, participants, event.at, False,
                    group=event.shared_with if event.channel == "group" else None, relation=relation)
        return document_of(slot, text, [secret.id])
