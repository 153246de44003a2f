"""What the generator role is asked to write: the reply schemas of stage 01's four prompts
(``pbench/prompts/social_graph/``).

The generator drafts prose fields only: names, ages, places, employers and dates are code's
(``pbench.identities``), so the drafts do not ask for them (extra keys in a reply are ignored).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from pbench.schema import RelationshipKind

KINDS: tuple[str, ...] = RelationshipKind.__args__  # type: ignore[attr-defined]


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
