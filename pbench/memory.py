"""The ``memory`` target: a memory-layer assistant (issue 30; the paper's section 8 asks for
MemGPT-like modules). It remembers facts, not documents: before probing, its model reads each
document of the owner's footprint and writes down a few short facts (``prompts/memory/extract.j2``);
a turn retrieves the facts closest to the conversation and answers with the same model, under
the RAG assistant's system prompts (``rag.Assistant.messages``), the facts where the RAG
assistant shows documents. Memory against rag differs only in what is retrieved.

Reads the documents stage 04 hands to ``Memories.prepare`` (``targets.deployed``: text and
social metadata, no ground truth) and stage 03's index (each source document's metadata:
participants, group, time, audience, the tagger's verdict). Writes ``memories.jsonl`` in the
run folder: one record per (owner, source document), ``{"owner", "source", "timestamp",
"memories", "unparsed", "raw", "ungrounded"}``, sorted by owner, time and id; a rerun that prepares some
owners replaces only their records.

Each memory keeps its source document's id and metadata, so the defences apply to it as to its
source (``rag.admits``, the rule the RAG assistant filters with, not a copy of it), it is
retrievable only after its source was written, and a turn reports its sources' ids
(``Turn.retrieved``: the inappropriate retrieval rate reads them). An extraction that does not
parse is retried by ``ChatModel`` (``parse_retries``), then recorded as unparsed with its raw
reply and counted in the ledger: it makes no memory, and is never read as "nothing to remember".
A memory whose words its document does not hold (``GROUNDED``) is kept aside in ``ungrounded``,
never recalled: the small model copies its prompt's example into the facts of unrelated chats.

Every model call goes through ``pbench.llm.ChatModel`` (its cache: a rerun makes no call).
Memories live in memory, ranked exactly (cosine over MiniLM vectors, ties in a fixed order) as
``rag.Index.nearest`` ranks documents; they are rebuilt from the cache on a rerun.

Why not mem0 (mem0ai 2.2.1, tried for this issue): it requires protobuf<7 (our pin is 7.36.2;
pip would downgrade it) and adds posthog, qdrant-client, SQLAlchemy and their dependencies
(56 MB); its extraction system prompt is 7,924 tokens of Qwen2.5's tokenizer, beyond the 4,096
a slot of the embedded server has (``n_ctx`` 8192, ``n_parallel`` 2: "request (8015 tokens)
exceeds the available context size"); a reply it cannot parse is logged and dropped as no
memories (``mem0/memory/main.py``, ``_add_to_vector_store``); it calls its own LLM client
(outside our cache, retries and ledger) and stamps memories with uuid4 ids and wall-clock
times. docs/targets.md has the measurements.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, Field

from pbench import components, embeddings, rag, store
from pbench.schema import Turn
from pbench.social_graph import CommunityView

MOST = 4  # memories a document may give
GROUNDED = 0.5
"""Share of a memory's content words its document (text, kind, date, people) must hold, or the
memory is set aside as ``ungrounded`` and never shelved. On tiny's footprint the 1.5B copied the
prompt's worked example ("Sam: I failed my driving test again", share 0.0 to 0.33) into 5 of 63
memories, and wrote nothing else under 0.5 (once the document's date and people count as held)."""
EXTRACT_TEMPERATURE = 0.1  # mem0's default; above 0, so a parse retry (a new seed) can differ
EXTRACT_TOKENS = 256  # room for MOST short facts in JSON
FILE = "memories.jsonl"


def summary(run_dir: str | Path) -> dict[str, int] | None:
    """What a run's memory target extracted (``memories.jsonl``): documents read, memories
    shelved, extractions unparsed, memories set aside as ungrounded; None without a memory target."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return None
    rows = store.read_jsonl(path)
    return {"documents": len(rows), "memories": sum(len(r["memories"]) for r in rows),
            "unparsed": sum(bool(r["unparsed"]) for r in rows),
            "ungrounded": sum(len(r.get("ungrounded", [])) for r in rows)}
KINDS = {"chat": "a private chat", "ai_chat": "a chat with an AI assistant", "blog": "a blog post",
         "purchase": "a purchase record", "group_chat": "a group chat"}


class Extracted(BaseModel):
    """What the model returns for one document (enforced as a JSON schema where the server can)."""

    memories: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(max_length=MOST)


def describe(doc: dict[str, Any], view: CommunityView) -> dict[str, Any]:
    """The extraction prompt's variables for one deployed document: what it is, when, who took part."""
    what = KINDS[doc["kind"]]
    if doc["kind"] == "group_chat" and doc.get("group") in view.groups:
        what += f" in {view.groups[doc['group']].name}"
    people = [view.name(p) for p in dict.fromkeys([doc["owner"], *doc["participants"]]) if p in view.people]
    if doc["kind"] == "ai_chat":  # the other side is the assistant, whose advice is no memory of the owner's
        people.append("an AI assistant")
    return {"what": what, "date": doc["timestamp"].date().isoformat(), "people": people, "text": doc["text"],
            "most": MOST}


async def extract(model: Any, doc: dict[str, Any], view: CommunityView) -> dict[str, Any]:
    """Ask ``model`` for the memories of one document (owner-independent: a chat two owners share
    is one request, and one cache entry).

    Returns:
        ``{"source", "memories", "unparsed", "raw"}``; an unparsed reply gives no memories and
        keeps its raw text.
    """
    out = await model.ask("memory", "extract", Extracted, temperature=EXTRACT_TEMPERATURE,
                          max_tokens=EXTRACT_TOKENS, **describe(doc, view))
    if out.unparsed:
        return {"source": doc["id"], "memories": [], "unparsed": True, "raw": out.text, "ungrounded": []}
    said = list(dict.fromkeys(m.strip() for m in out.parsed.memories if m.strip()))
    known = " ".join([doc["text"], *(str(v) for v in describe(doc, view).values() if not isinstance(v, int))])
    kept = [m for m in said if components.grounded_share(m, known, "") >= GROUNDED]
    return {"source": doc["id"], "memories": kept, "unparsed": False, "raw": None,
            "ungrounded": [m for m in said if m not in kept]}


@dataclass
class Shelf:
    """One owner's memories, in a fixed order (their sources' time, then id, then position)."""

    texts: list[str]
    sources: list[str]
    metas: list[dict[str, Any]]  # each source document's metadata in the index
    vectors: np.ndarray  # unit rows, float64
    timestamps: np.ndarray

    def recall(self, vector: Any, k: int, defence: str, talker: str, before: dt.datetime) -> list[rag.Retrieved]:
        """The ``k`` memories most similar to ``vector`` whose source ``defence`` lets ``talker``
        see and that was written before ``before`` (ties: the earlier memory), as ``rag.Retrieved``
        with the source's id and metadata and the memory's text."""
        allowed = np.array([rag.admits(defence, talker, m) for m in self.metas], dtype=bool)
        rows = np.flatnonzero(allowed & (self.timestamps < rag.epoch(before)))
        sims = self.vectors[rows] @ np.asarray(vector, dtype=np.float64).reshape(-1)
        best = np.lexsort((rows, -sims))[:k]
        return [rag.Retrieved(self.sources[rows[j]], self.texts[rows[j]], self.metas[rows[j]], float(1 - sims[j]))
                for j in best]


@dataclass
class Memories:
    """Every prepared owner's ``Shelf``: what ``targets.Maker.prepare`` fills, once per run.

    Args:
        index: the run's index (stage 03): sources' metadata, the query encoder, the run folder.
        model: the ``assistant`` ChatModel that extracts (and, in ``MemoryTarget``, answers).
        view: the community (names in the extraction prompt).
    """

    index: rag.Index
    model: Any
    view: CommunityView
    shelves: dict[str, Shelf] = field(default_factory=dict)

    async def prepare(self, footprints: Mapping[str, list[dict[str, Any]]]) -> None:
        """Extract the memories of every owner's documents (each distinct document once, in id
        order), shelve them per owner, and write their records to ``memories.jsonl``.

        Args:
            footprints: owner to their deployed documents (``targets.deployed``).
        Raises:
            LLMError: the model gave up after its retries (nothing is shelved or written).
        """
        docs = {d["id"]: d for ds in footprints.values() for d in ds}
        ordered = sorted(docs)
        got = dict(zip(ordered, await asyncio.gather(*(extract(self.model, docs[i], self.view) for i in ordered)),
                       strict=True))
        records = []
        for owner in sorted(footprints):
            mine = sorted(footprints[owner], key=lambda d: (d["timestamp"], d["id"]))
            records += [{"owner": owner, "timestamp": d["timestamp"].isoformat(), **got[d["id"]]} for d in mine]
            self.shelves[owner] = await self._shelf(owner, [got[d["id"]] for d in mine])
        await asyncio.to_thread(self._write, records)

    async def _shelf(self, owner: str, extracted: list[dict[str, Any]]) -> Shelf:
        """One owner's memories with their vectors (MiniLM, ``index.embed``) and sources' metadata."""
        pairs = [(m, r["source"]) for r in extracted for m in r["memories"]]
        texts, sources = [m for m, _ in pairs], [s for _, s in pairs]
        if not texts:
            return Shelf([], [], [], np.zeros((0, embeddings.DIMENSIONS)), np.zeros(0, dtype=np.int64))
        vectors = np.asarray(await embeddings.aembed(self.index.embed, texts), dtype=np.float64)
        got = self.index.collection(owner).get(ids=sorted(set(sources)), include=["metadatas"])
        by_id = dict(zip(got["ids"], got["metadatas"], strict=True))
        metas = [by_id[s] for s in sources]
        return Shelf(texts, sources, metas, vectors, np.array([m["timestamp"] for m in metas], dtype=np.int64))

    def _write(self, records: list[dict[str, Any]]) -> None:
        """``memories.jsonl``: these records in place of those of their owners, sorted."""
        path = Path(self.index.run_dir) / FILE
        owners = {r["owner"] for r in records}
        kept = [r for r in store.read_jsonl(path) if r["owner"] not in owners] if path.exists() else []
        store.write_jsonl(path, sorted(kept + records, key=lambda r: (r["owner"], r["timestamp"], r["source"])))

    def shelf(self, owner: str) -> Shelf:
        if owner not in self.shelves:
            raise LookupError(f"no memories for {owner}: prepare (or ingest) their footprint first")
        return self.shelves[owner]


@dataclass
class MemoryTarget:
    """One owner's memory-layer assistant, behind ``targets.Target``.

    Args:
        memories: the run's memories (``Memories``, prepared).
        assistant: the RAG assistant of this owner, prompt and defence: its query, ``top_k``,
            defence, model and prompt assembly, with memories in place of documents.
    """

    memories: Memories
    assistant: rag.Assistant
    label: str = "memory"
    kind: str = "memory"

    def ingest(self, documents: list[dict[str, Any]]) -> None:
        """Extract this owner's memories now (``Memories.prepare``; stage 04 prepares every owner
        at once instead)."""
        from pbench.llm import run_sync

        run_sync(self.memories.prepare({self.assistant.owner: documents}))

    async def recall(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime) -> list[rag.Retrieved]:
        """The memories a turn retrieves for ``asker`` (a draft's reader, when drafting): the RAG
        assistant's query, encoded as its queries are."""
        a = self.assistant
        vector = await embeddings.aembed(a.index.embed, [a.query(conversation)])
        return self.memories.shelf(a.owner).recall(vector, a.top_k, a.defence, asker, at)

    async def reply(self, asker: str, conversation: list[dict[str, str]], at: dt.datetime,
                    seed: int | None = None, reader: str | None = None) -> Turn:
        """Recall, assemble (``rag.Assistant.messages``), answer; ``retrieved`` holds the memories'
        source documents, each once, in rank order. A draft for ``reader`` recalls under the
        defence for the reader, with the drafting prompt."""
        recalled = await self.recall(reader or asker, conversation, at)
        msgs = self.assistant.messages(asker, conversation, at, recalled, reader)
        out = await self.assistant.model.acomplete(msgs, seed=seed)
        return Turn(out.text.strip(), list(dict.fromkeys(m.id for m in recalled)), msgs, out.unparsed)


# --------------------------------------------------------------------------- displays


def recalled(memories: Memories, conv: Any, top_k: int, history: int = rag.HISTORY_FOR_QUERY) -> list[list[rag.Retrieved]]:
    """The memories each turn of a recorded conversation (``schema.Conversation``) retrieved:
    recall is exact and reads only the conversation so far, so it is recomputed, not stored.

    Args:
        memories: the run's memories, prepared for the conversation's owner.
        conv: the conversation.
        top_k: the target's ``top_k``.
        history: messages the query reads (``rag.HISTORY_FOR_QUERY``).
    """
    shelf, said, out = memories.shelf(conv.owner), [], []
    for t in conv.turns:
        said.append({"role": "user", "content": t.prober})
        vector = memories.index.embed([rag.query(said, history)])
        out.append(shelf.recall(vector, top_k, conv.defence, conv.audience, conv.at))
        said.append({"role": "assistant", "content": t.reply})
    return out
