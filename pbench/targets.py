"""The systems under test: what stage 04 probes, behind one small interface.

Reads the run's parameters (``targets``, ``models.assistant``, ``probing.top_k``) and stage
03's index; writes nothing. Stage 04 (``pbench.probing``) knows targets only through
``Target``: it asks one for a reply to one message in context, and records what it says it
used. A target never sees ground truth (secret ids, components).

Built-in kinds:
- ``rag``: the RAG assistant of stage 03 (``rag.Assistant``: an ``assistant`` model, a
  system prompt, a defence), one target per assistant model.
- ``extractive``: no generator and no model call. It retrieves as the RAG assistant does
  (the same query, ``top_k``, defence and time), and replies with the retrieved sentences
  closest to the query (MiniLM cosine similarity), up to a word budget fixed in advance,
  in the order a reader meets them. Its leakage rate is what retrieval alone exposes; the
  RAG target's, lower, is what its generator let through: LR(extractive) - LR(rag) is what
  the generator caught.
- ``memory``: a memory-layer assistant (``pbench.memory``): its model extracts short facts
  from each document of the owner's footprint before probing (``Maker.prepare``); a turn
  retrieves facts, not documents, under the same defences (on each fact's source document),
  and answers as the RAG assistant does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pbench import matching, memory, rag, remote
from pbench.config import PlannedTarget, RunConfig, import_entry
from pbench.schema import DEPLOYED_FIELDS, Turn, deployed  # noqa: F401  (the interface's names)
from pbench.social_graph import CommunityView

@runtime_checkable
class Target(Protocol):
    """One owner's assistant under test.

    Attributes:
        label: its name in the plan, the records and the tables.
        kind: ``rag``, ``extractive``, ...
    """

    label: str
    kind: str

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


NOTHING = "I have nothing on that."
"""The extractive target's reply when retrieval finds nothing to quote."""

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


@dataclass
class RagTarget:
    """Stage 03's RAG assistant (``rag.Assistant``) behind the interface."""

    assistant: rag.Assistant
    label: str
    kind: str = "rag"

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Nothing to do: stage 03 indexed the footprint (``rag.build``), and ``rag.Index``
        reads it."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        return await self.assistant.reply(asker, conversation, at, seed=seed, reader=reader)


@dataclass
class ExtractiveTarget:
    """Retrieval with the generator removed: the retrieved sentences closest to the query.

    Args:
        index: the run's index (stage 03); its ``embed`` also encodes the sentences.
        owner: whose assistant this is.
        defence: one of ``rag.DEFENCES``, applied at retrieval as the RAG assistant does.
        top_k: documents retrieved per turn.
        budget_words: words per reply at most, fixed before any outcome is seen.
    """

    index: rag.Index
    owner: str
    defence: str = "none"
    top_k: int = 5
    budget_words: int = 60
    label: str = "extractive"
    kind: str = "extractive"
    history_for_query: int = rag.HISTORY_FOR_QUERY
    sentences: Callable[[str], list[str]] = field(default_factory=lambda: quoted, repr=False)

    def __post_init__(self) -> None:
        if self.defence not in rag.DEFENCES:
            raise ValueError(f"unknown defence {self.defence!r}; known: {', '.join(rag.DEFENCES)}")
        if self.budget_words <= 0:
            raise ValueError(f"budget_words must be positive, got {self.budget_words}")

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Nothing to do: it reads stage 03's index (``rag.build``)."""

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        """Retrieve as ``rag.Assistant`` does, then ``select``; no model call (``seed`` unused).
        A draft for ``reader`` is the same quotation, retrieved under the defence for the reader."""
        from pbench import embeddings

        q = rag.query(conversation, self.history_for_query)
        vector, docs = await rag.asearch(self.index, self.owner, q, self.top_k, self.defence, reader or asker, at)
        pieces = [(d, i, s) for d in docs for i, s in enumerate(self.sentences(d.text))]
        if not pieces:  # the defence left nothing: saying so is a reply, not a failure
            return Turn(NOTHING, [d.id for d in docs], [{"role": "user", "content": q}])
        vectors = np.asarray(await embeddings.aembed(self.index.embed, [s for _, _, s in pieces]))
        chosen = select(pieces, vectors @ vector.reshape(-1), self.budget_words)
        used = list(dict.fromkeys(d.id for d, _, _ in chosen))
        return Turn("\n".join(s for _, _, s in chosen), used, [{"role": "user", "content": q}])


def quoted(text: str) -> list[str]:
    """A document's sentences, each chat line's speaker before every sentence of it ("Ben: I'll
    miss you."), so that a sentence quoted alone still says who said it."""
    return [f"{who}: {s}" if who else s for who, s in matching.quoted_sentences(text)]


def select(pieces: list[tuple[rag.Retrieved, int, str]], similarity: np.ndarray,
           budget_words: int) -> list[tuple[rag.Retrieved, int, str]]:
    """The sentences a budget of ``budget_words`` takes, most similar first, in reading order.

    Sentences are taken by similarity to the query (ties: the better-retrieved document,
    then the earlier sentence), a repeated sentence once, until the next one would not fit; the best one alone
    cut to the budget if even it does not. They are then set out as a reader meets them:
    documents oldest first (then by id), sentences in their order within each.

    Args:
        pieces: (retrieved document, position in it, sentence), in retrieval order.
        similarity: each piece's cosine similarity to the query.
        budget_words: the word budget.
    """
    order = sorted(range(len(pieces)), key=lambda j: (-float(similarity[j]), j))
    chosen, seen, words = [], set(), 0
    for j in order:
        text = pieces[j][2]
        if text in seen:
            continue
        n = len(text.split())
        if words + n > budget_words:
            if not chosen:  # the best sentence alone is longer than the budget: its first words
                chosen.append((pieces[j][0], pieces[j][1], " ".join(text.split()[:budget_words])))
            break
        chosen.append(pieces[j])
        seen.add(text)
        words += n
    return sorted(chosen, key=lambda p: (p[0].meta["timestamp"], p[0].id, p[1]))


def for_run(cfg: RunConfig, index: rag.Index, assistants: Mapping[str, Any], view: CommunityView) -> dict[str, Maker]:
    """The run's targets (``cfg.planned_targets()``), by label, as stage 04 takes them.

    Args:
        cfg: the run's parameters.
        index: the run's index (stage 03).
        assistants: assistant model label to its ``assistant`` ChatModel (the rag and memory
            targets').
        view: the community (the RAG assistant's persona and relations).
    Raises:
        KeyError: a rag or memory target whose model is not among ``assistants``.
    """
    k = cfg.probing.top_k
    out: dict[str, Maker] = {}
    for t in cfg.planned_targets():
        if t.kind == "rag":
            model = assistants[t.label]

            def make(owner: str, prompt: str, defence: str, model: Any = model, label: str = t.label) -> Target:
                return RagTarget(rag.Assistant(view, index, model, owner, prompt, defence, k), label)

            out[t.label] = Maker(t.label, t.kind, make, (model,))
        elif t.kind == "extractive":
            def make(owner: str, prompt: str, defence: str, budget: int = t.budget_words) -> Target:
                return ExtractiveTarget(index, owner, defence, k, budget)

            out[t.label] = Maker(t.label, t.kind, make)
        elif t.kind in ("http", "python"):
            out[t.label] = _outside(t)
        elif t.kind == "memory":
            out[t.label] = _memory(t, index, assistants[t.model.label], view, t.spec.top_k or k)
        else:
            raise ValueError(f"target {t.label}: no maker for kind {t.kind!r}")
    return out


def _outside(t: PlannedTarget) -> Maker:
    """The Maker of an http or python target (``pbench.remote``): ingested at prepare."""
    if t.kind == "http":
        service = remote.HttpService(t.label, t.spec.url, t.spec.timeout_s, t.spec.retries)
        return Maker(t.label, t.kind, lambda owner, prompt, defence: remote.HttpTarget(service, owner, t.label),
                     prepare=service.prepare, close=service.aclose)
    made = remote.PythonTargets(t.label, import_entry(t.spec.entry), t.spec.retries)
    return Maker(t.label, t.kind, lambda owner, prompt, defence: made.target(owner), prepare=made.prepare)


def _memory(t: PlannedTarget, index: rag.Index, model: Any, view: CommunityView, k: int) -> Maker:
    """A memory target's maker: one ``memory.Memories`` for the run, filled by ``prepare``."""
    memories = memory.Memories(index, model, view)

    def make(owner: str, prompt: str, defence: str) -> Target:
        return memory.MemoryTarget(memories, rag.Assistant(view, index, model, owner, prompt, defence, k), t.label)

    return Maker(t.label, t.kind, make, (model,), memories.prepare,
                 report=lambda: {"kind": "memory", **(memory.summary(index.run_dir) or {})})
