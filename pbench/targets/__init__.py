"""The systems under test: what stage 04 probes, behind one small interface.

Reads the run's parameters (``targets``, ``models.assistant``, ``probing.top_k``) and stage
03's index; writes nothing. Stage 04 (``pbench.probing``) knows targets only through
``Target``: it asks one for a reply to one message in context, and records what it says it
used. A target never sees ground truth (secret ids, components).

Each kind of target is one module that registers itself with ``pbench.config.target_kind``:
its spec, its factory (``(PlannedTarget, Context) -> Maker``), what its replies cost and
its name in tables. Ours, each in this package:

- ``rag``: the RAG assistant of stage 03 (``rag.Assistant``: an ``assistant`` model, a
  system prompt, a defence), one target per assistant model.
- ``extractive``: no generator and no model call: the retrieved sentences closest to the
  query, up to a word budget fixed in advance. Its leakage rate is what retrieval alone
  exposes; LR(extractive) - LR(rag) is what the generator caught.
- ``memory``: a memory-layer assistant (``pbench.memory``): facts extracted from each
  document before probing, retrieved in place of documents.
- ``http``, ``python``: a system outside pbench, as a service or a class (``pbench.remote``).

Another package adds a kind through an entry point (group ``pbench.targets``) naming its
module; ``examples/toy_kind/`` is one, in one file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pbench.config import RunConfig, kind
from pbench.schema import DEPLOYED_FIELDS, Turn, deployed  # noqa: F401  (the interface's names)

if TYPE_CHECKING:
    from pbench import rag
    from pbench.social_graph import CommunityView


@runtime_checkable
class Target(Protocol):
    """One owner's assistant under test.

    Attributes:
        label: its name in the plan, the records and the tables.
        kind: ``rag``, ``extractive``, ...
    """

    @property
    def label(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Take in the owner's footprint as a deployed assistant would have it
        (``deployed``: text, participants, group, kind, time; no ground truth)."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        """Reply to the last message of ``conversation`` (``user``: the asker, ``assistant``:
        this target) from ``asker`` at ``at``.

        ``reader`` (the ``delegation`` strategy; only for a target that drafts): the asker is
        the owner, who asks for a draft to send to ``reader``; the reply is the draft, written
        for the owner, and what it may say is what ``reader`` may read. A target that cannot
        draft is never asked (``pbench.config.can_draft``).

        Returns:
            The reply, the ids of the documents it used (empty where it cannot say), and
            whether its model's reply was unparsed.
        """


Factory = Callable[[str, str, str], Target]
"""(owner, prompt, defence) to that owner's target under that prompt and defence."""

Prepare = Callable[[Mapping[str, list[dict[str, Any]]]], Awaitable[None]]
"""Given each owner's footprint (``deployed``), make the target ready to reply for them: a
memory layer extracts its memories, a service ingests. Stage 04 awaits it once per run,
before any conversation, for the owners still to be probed."""


@dataclass(frozen=True)
class Maker:
    """A planned target's factory (``Factory``), with the models it calls: their response
    caches are committed before a record made from their replies is written."""

    label: str
    kind: str
    make: Factory
    models: tuple[Any, ...] = ()
    prepare: Prepare | None = None
    close: Callable[[], Awaitable[None]] | None = None  # awaited once stage 04's conversations are done
    report: Callable[[], dict[str, Any] | None] | None = None  # what it prepared, for probing.json

    def __call__(self, owner: str, prompt: str, defence: str) -> Target:
        return self.make(owner, prompt, defence)


@dataclass(frozen=True)
class Context:
    """What a kind's factory may use to make its targets for a run (``for_run``).

    Attributes:
        cfg: the run's parameters.
        index: the run's index (stage 03).
        assistants: assistant model label to its ``assistant`` ChatModel.
        view: the community (personas and relations).
    """

    cfg: RunConfig
    index: rag.Index
    assistants: Mapping[str, Any]
    view: CommunityView


def for_run(cfg: RunConfig, index: rag.Index, assistants: Mapping[str, Any], view: CommunityView) -> dict[str, Maker]:
    """The run's targets (``cfg.planned_targets()``), by label, as stage 04 takes them: each
    made by its kind's factory (``pbench.config.TargetKind.make``).

    Args:
        cfg: the run's parameters.
        index: the run's index (stage 03).
        assistants: assistant model label to its ``assistant`` ChatModel (the rag and memory
            targets').
        view: the community (the RAG assistant's persona and relations).
    Raises:
        KeyError: a target whose model is not among ``assistants``.
    """
    context = Context(cfg, index, assistants, view)
    return {t.label: kind(t.kind).make(t, context) for t in cfg.planned_targets()}
