"""Retrieval benchmark: index build throughput against raw SentenceTransformer.encode on the
same texts (target >= 0.9), and top-k query latency p50/p95 on one user with 8,000 documents,
unfiltered and under each defence's filter (target < 25 ms p95 with filters, 2 cores).

    python bench/retrieval.py [--docs 8000] [--queries 200] [--k 5]

Synthetic documents (random everyday sentences, ten people, a year of timestamps); prints a
table; writes only a temporary index.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

from pbench import embeddings, rag
from pbench.schema import AttributeValue, Community, Document, Group, Membership, Person, Relationship
from pbench.social_graph import CommunityView

WORDS = ("coffee market train weekend dinner project meeting garden rain football recipe concert budget doctor "
         "holiday birthday laptop bakery river museum invoice school bike neighbour playlist movie deadline").split()


def synthetic(n: int, seed: int = 0) -> tuple[CommunityView, list[Document]]:
    rng = random.Random(seed)
    start, end = dt.date(2024, 1, 1), dt.date(2024, 12, 31)
    people = [Person(id=f"u{i}", name=f"Person {i}", persona="-", origin="seed",
                     attributes=[AttributeValue(name="employer", value="none", valid_from=start, valid_to=end)])
              for i in range(10)]
    rels = [Relationship(id=f"r{i}", a="u0", b=f"u{i}", kind="friend", permanent=False, start=start, end=end)
            for i in range(1, 10)]
    group = Group(id="g1", name="club", purpose="-", basis="interest: x",
                  members=[Membership(person=f"u{i}", start=start, end=end) for i in range(5)])
    view = CommunityView(Community(period_start=start, period_end=end, people=people, relationships=rels, groups=[group]))
    kinds = ["chat"] * 6 + ["group_chat"] * 2 + ["ai_chat", "blog", "purchase"]
    docs = []
    for i in range(n):
        kind = rng.choice(kinds)
        who = {"chat": ["u0", f"u{rng.randrange(1, 10)}"], "group_chat": [f"u{j}" for j in range(5)]}.get(kind, ["u0"])
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(12, 40)))
        when = dt.datetime(2024, 1, 1) + dt.timedelta(minutes=rng.randrange(525_000))
        docs.append(Document(id=f"d{i}", owner="u0", kind=kind, participants=who, group="g1" if kind == "group_chat" else None,
                             timestamp=when, text=text, noise=True, public=kind == "blog"))
    return view, docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=8000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    view, docs = synthetic(args.docs)
    texts = [d.text for d in docs]
    embeddings.embed(texts[:64])  # load the model and warm up

    t0 = time.perf_counter()
    embeddings.model().encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    raw = len(texts) / (time.perf_counter() - t0)

    tags = {d.id: i % 3 == 0 for i, d in enumerate(docs)}
    # The same texts, each in its owner's collection only: what the build costs beyond the
    # embedding when every text is written once.
    solo = [d.model_copy(update={"participants": ["u0"], "kind": "ai_chat", "group": None}) for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rag.build_index(solo, view, Path(tmp), tags)
        built_solo = len(texts) / (time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        stats = rag.build_index(docs, view, Path(tmp), tags)
        built = len(texts) / (time.perf_counter() - t0)
        rows = sum(s["documents"] for s in stats.values())
        rng = random.Random(1)
        queries = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(args.queries)]
        t0 = time.perf_counter()
        vectors = {q: embeddings.embed([q]) for q in queries}
        embed_ms = (time.perf_counter() - t0) * 1000 / len(queries)
        index = rag.Index(tmp, embed=lambda texts: vectors[texts[0]])  # query embedding timed apart
        at = dt.datetime(2024, 10, 1)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"{args.docs} documents, {rows} index rows ({index.count('u0')} for the user queried), top-{args.k}")
        print(f"raw encode: {raw:.0f} docs/s; index build, one row per text: {built_solo:.0f} docs/s, ratio "
              f"{built_solo / raw:.2f} (target >= 0.9); shared chats in every participant's collection "
              f"({rows / len(texts):.1f} rows per text): {built:.0f} docs/s, ratio {built / raw:.2f}")
        print(f"query embedding: {embed_ms:.1f} ms mean (not included below)")
        print(f"{'defence':<20} {'p50 ms':>8} {'p95 ms':>8} {'chroma-filter p95':>18}")
        for defence in rag.DEFENCES:
            times, direct = [], []
            for q in queries:
                t0 = time.perf_counter()
                index.search("u0", q, args.k, defence, "u3", at)
                times.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                index.collection("u0").query(query_embeddings=vectors[q], n_results=args.k,
                                             where=rag.where(defence, "u3", at))
                direct.append((time.perf_counter() - t0) * 1000)
            print(f"{defence:<20} {statistics.median(times):>8.1f} {p95(times):>8.1f} {p95(direct):>18.1f}")


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[18]


if __name__ == "__main__":
    main()
