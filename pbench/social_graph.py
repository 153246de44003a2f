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

This module is the stage's face: the names notebooks, tests and later stages use, each from
the module of ``pbench.community`` that holds it (its ``__init__`` lists them, one job each).
"""

from pbench.community.display import (
    changes_table,
    draw_graph_at,
    draw_timeline,
    most_eventful,
    profile_table,
    relationship_table,
    snapshot_dates,
    validation_table,
)
from pbench.community.drafts import KINDS, GroupDraft, LifeEventDraft, NewMemberDraft, ProfileDraft
from pbench.community.facts import (
    DAY,
    NO_VALUE,
    birth_of,
    bond_windows,
    date_bond,
    fit_kind,
    life_timeline,
    norm,
    shared_spans,
    story,
    value_at,
)
from pbench.community.files import load, save, to_graphml
from pbench.community.generator import Generator, build
from pbench.community.people import build_person, load_personas
from pbench.community.prose import fit_persona, scrub_names, swap_pronouns
from pbench.community.repair import repair
from pbench.community.rules import AUDIT_KINDS, CHECKS, RULES, audit, check
from pbench.community.view import CommunityView, Relation

__all__ = [
    "AUDIT_KINDS", "CHECKS", "DAY", "KINDS", "NO_VALUE", "RULES", "CommunityView", "Generator", "GroupDraft",
    "LifeEventDraft", "NewMemberDraft", "ProfileDraft", "Relation", "audit", "birth_of", "bond_windows", "build",
    "build_person", "changes_table", "check", "date_bond", "draw_graph_at", "draw_timeline", "fit_kind",
    "fit_persona", "life_timeline", "load", "load_personas", "most_eventful", "norm", "profile_table", "relationship_table",
    "repair", "save", "scrub_names", "shared_spans", "snapshot_dates", "story", "swap_pronouns", "to_graphml",
    "validation_table", "value_at",
]
