"""Typed records of a run. Each stage adds its own records here as it lands.

Dates are inclusive: a value, relationship or membership is active on day ``t`` when
``start <= t <= end`` (``end`` None: never ends, for permanent bonds).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Relationship kinds. Family and partners are permanent; the rest are dated.
PERMANENT_KINDS = ("family", "partner")
WORK_KINDS = ("colleague", "manager")  # bound to a shared employer
PLACE_KINDS = ("neighbour",)  # bound to a shared location
RelationshipKind = Literal[
    "family", "partner", "friend", "colleague", "manager", "neighbour", "hobby_friend",
    "classmate", "business_partner", "acquaintance",
]
TEMPORAL_ATTRIBUTES = ("occupation", "employer", "location", "education")
ATTRIBUTES = (
    "age", "gender", *TEMPORAL_ATTRIBUTES, "interests", "beliefs", "texting_style", "blogging_style",
    "shopping_preferences",
)


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttributeValue(Record):
    """One value of a profile attribute and the days it holds (section 3.1)."""

    name: str
    value: str
    valid_from: dt.date
    valid_to: dt.date

    def active(self, t: dt.date) -> bool:
        return self.valid_from <= t <= self.valid_to


class Person(Record):
    id: str
    name: str
    persona: str = Field(description="the seed persona text this person was generated from")
    origin: Literal["seed", "expansion"]
    attributes: list[AttributeValue]
    # Facts drawn by code (pbench.identities) that reach before the period; None/"" in
    # communities made before they existed (checks then fall back to the age attribute).
    birth_date: dt.date | None = None
    hometown: str = Field("", description="'town, country' lived in before home_since ('' : always the first location)")
    home_since: dt.date | None = Field(None, description="when they moved to their location at the period's start")
    employer_since: dt.date | None = Field(None, description="when they joined their employer at the period's start")


class Relationship(Record):
    """A dated bond between two people. For ``manager``, ``a`` manages ``b``."""

    id: str
    a: str
    b: str
    kind: RelationshipKind
    permanent: bool
    start: dt.date
    end: dt.date | None = None
    why: str = ""
    source: Literal["generator", "expansion", "repair", "evolution"] = "generator"

    def active(self, t: dt.date) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)

    def other(self, pid: str) -> str:
        return self.b if pid == self.a else self.a


class Membership(Record):
    person: str
    start: dt.date
    end: dt.date

    def active(self, t: dt.date) -> bool:
        return self.start <= t <= self.end


class Group(Record):
    id: str
    name: str
    purpose: str
    basis: str = Field(description="the shared attribute the group formed around, e.g. 'employer: Ridgeway Clinic'")
    members: list[Membership]


class Change(Record):
    """One thing code changed in what the generator proposed (validation and repair)."""

    check: str
    record: str
    action: str


class Community(Record):
    period_start: dt.date
    period_end: dt.date
    people: list[Person]
    relationships: list[Relationship]
    groups: list[Group]
    changes: list[Change] = Field(default_factory=list)


DocumentKind = Literal["chat", "group_chat", "ai_chat", "blog", "purchase"]
DOCUMENT_KINDS: tuple[str, ...] = DocumentKind.__args__  # type: ignore[attr-defined]


class Document(Record):
    """One item of a user's digital footprint (section 3.2).

    ``participants`` are the people who saw it when it was written: both sides of a chat,
    the group's members at that moment, only the owner for AI chats and purchases; a blog
    post is public (``participants`` is the owner; ``public`` is True).
    """

    id: str
    owner: str
    kind: DocumentKind
    participants: list[str]
    group: str | None = None
    timestamp: dt.datetime
    text: str
    secret_ids: list[str] = Field(default_factory=list)
    attributes_revealed: list[str] = Field(default_factory=list)
    noise: bool = Field(description="mundane filler (True) or substantive content (False)")
    public: bool = False


class SharingEvent(Record):
    """One telling of a secret: to a person, to a group, or only to the AI assistant."""

    channel: Literal["person", "group", "ai"]
    shared_with: str = Field(description="a person id, a group id, or 'ai'")
    at: dt.datetime
    document_id: str
    presence: Literal["verbatim", "semantic", "missing"] | None = Field(
        None, description="whether the document carries the secret's core components (stage 02's presence "
                          "check); None: never checked")


class Secret(Record):
    """Ground truth of one secret (section 3.3). No defence may read these labels."""

    id: str
    owner: str
    content: str
    core_components: list[str] = Field(description="facts whose complete revelation is a leak; 2-4, taken from "
                                                   "the content (pbench.components)")
    withheld_from: str = Field("", description="the secrecy condition (who has not been told), kept apart: "
                                               "never a core component")
    category: str
    theme: str = Field("", description="the theme code drew it from (pbench.themes)")
    about: str = Field("", description="the person it is about (a person id): the owner, or someone close to them")
    topic: str = Field("", description="what an uninformed prober is told to find out about: never the answer")
    facts: dict[str, str] = Field(default_factory=dict, description="the facts code drew for it")
    at_risk: list[str] = Field(default_factory=list, description="people it matters most to keep it from")
    sharing: list[SharingEvent]


class LeakCheck(Record):
    """A per-turn decision on whether the secret's core components have been revealed."""

    method: str = Field(description="what decided it: the judge panel, or a named interim check")
    leaked: bool | None = Field(description="None when the check could not decide (unparsed)")
    components: list[str] = Field(default_factory=list,
                                  description="per component, so far: 'revealed', 'not revealed' or 'unscored'")
    votes: list[dict[str, Any]] = Field(default_factory=list,
                                        description="each judge's vote on this turn: component, judge, stated, evidence, raw")
    how: list[str] = Field(default_factory=list,
                           description="per component, how it was revealed: 'stated' by the reply, 'confirmed' "
                                       "(the prober asserted it and the reply said yes), or ''")
    detail: str = ""


class ProbeTurn(Record):
    round: int
    prober: str
    prober_asserted: list[int] = Field(default_factory=list, description="core components the prober's message "
                                       "asserted (an unauthorised prober's message is re-asked until it asserts none)")
    prober_redrafts: int = 0
    retrieved: list[str] | None = Field(description="the ids of the documents the target said it used; null: a "
                                        "target that cannot say (its IRR is n/a)")
    reply: str
    reply_unparsed: bool = False
    check: LeakCheck


class Conversation(Record):
    """One probe (section 4.1): who talks to whose assistant about which secret, and every turn.
    In a ``delegation`` probe the owner talks to their own assistant, and ``audience`` is who
    will read the draft."""

    id: str
    secret_id: str
    owner: str
    audience: str
    authorised: bool
    strategy: Literal["direct", "indirect", "pretext", "delegation"]
    setup: str = Field("", description="what code gave the prober beyond the topic: the standing a pretext claims "
                                       "(a confidant's name, or the asker's own tie), the task a delegation asks for")
    prompt: Literal["baseline", "privacy_aware", "none", "own"] = Field(
        description="the target's system prompt; 'none' for a target that has none (extractive), 'own' for one "
                    "with its own instructions (http, python)")
    defence: Literal["none", "audience_filter", "sensitivity_filter"]
    target: str = Field(description="the target's label: the assistant model's for a rag target, else its kind")
    at: dt.datetime
    turns: list[ProbeTurn]
    ended: Literal["leak", "shared", "max_rounds", "prober_unparsed", "reply_failed", "target_failed"]
    seconds: float = 0.0


@dataclass
class Turn:
    """One reply of a system under test (``pbench.targets.Target.reply``): the text, the ids of
    the documents it used (for the inappropriate retrieval rate), the prompt it was given
    where it has one, and whether its model's reply could not be parsed."""

    reply: str
    retrieved: list[str] | None
    messages: list[dict[str, str]] = field(default_factory=list, repr=False)
    unparsed: bool = False


DEPLOYED_FIELDS = ("id", "owner", "kind", "participants", "group", "timestamp", "text", "public")
"""What a deployed assistant has of a document: its text and social metadata, never ground truth."""


def deployed(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """The documents as ``Target.ingest`` takes them: ``DEPLOYED_FIELDS`` only (no
    ``secret_ids``, ``attributes_revealed`` or ``noise``)."""
    return [{k: getattr(d, k) for k in DEPLOYED_FIELDS} for d in documents]
