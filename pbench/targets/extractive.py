"""The ``extractive`` target: retrieval with the generator removed (the paper's "generator
removed" ablation). No model call: it retrieves as the RAG assistant does (the same query,
``top_k``, defence and time) and replies with the retrieved sentences closest to the query
(MiniLM cosine similarity), up to a word budget fixed in advance, in the order a reader
meets them. It has no system prompt (``NO_PROMPT``): the findings read it as what retrieval
alone exposes, against a generating target."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from pbench import embeddings, matching, rag
from pbench.config import Defence, PlannedTarget, TargetSpecBase, target_kind
from pbench.targets import Context, Maker, Target, Turn

NOTHING = "I have nothing on that."
"""The extractive target's reply when retrieval finds nothing to quote."""


class ExtractiveTargetSpec(TargetSpecBase):
    """No generator: the retrieved sentences closest to the conversation, up to a word budget
    fixed in advance (the "generator removed" ablation). It has no system prompt."""

    kind: Literal["extractive"]
    budget_words: Annotated[int, Field(gt=0)] = Field(60, description="words per reply at most, about a short reply's")
    defences: Annotated[list[Defence], Field(min_length=1)] | None = Field(
        None, description="the defences it is probed under; default: probing.defences")


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
    chosen: list[tuple[rag.Retrieved, int, str]] = []
    seen: set[str] = set()
    words = 0
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


@target_kind("extractive", ExtractiveTargetSpec, "retrieval with no generator", replies="none",
             prompts="none", defences=True)
def make(t: PlannedTarget, c: Context) -> Maker:
    """The extractive target of each owner under each defence (its prompt is ``none``)."""
    def one(owner: str, prompt: str, defence: str) -> Target:
        return ExtractiveTarget(c.index, owner, defence, c.cfg.probing.top_k, t.spec.budget_words)

    return Maker(t.label, t.kind, one)
