"""Orchestration overhead per probing turn: the time a turn spends outside model calls
(retrieval with its query embedding, prompt assembly, the leak check's reading and matching of
the reply, the response cache, writing the record, bookkeeping), in ms and as a share of the
turn's wall time; and the same for each conversation's stage 05 judging (its persona call
and, with a confidant, its disclosure call, as ``judging.judge_run`` makes them).

    python bench/overhead.py [--run outputs/tiny] [--params params/tiny.yaml] [--conversations 3]
                             [--server-conversations 12] [--latency 0.5] [--torch-threads N]

Two endpoints: (a) the parameter file's own models (the embedded model for tiny), (b) every
role bound to ``bench/latency_server.py`` (a fixed latency per call). Conversations run one at
a time, so turns never overlap; each role's backend is wrapped to add up the time spent in
``generate`` during each turn, and overhead = turn wall time - model time. With the judging
method ``match`` a turn's leak check calls no model (its MiniLM time is "judge embedding");
with ``verdict`` it asks each judge per component. Each endpoint gets an empty response cache,
so every call happens. Targets: under 5% of the turn's time on the embedded model; under
10 ms per turn (p50). Writes only temporary files.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from latency_server import config_for, serve
from pbench import config, embeddings, footprint, judging, llm, probing, prompts, rag, store, targets

# Overhead parts timed separately; "query embedding" is inside "retrieval".
PARTS = ("retrieval", "query embedding", "judge embedding", "prompt rendering", "response cache", "record write")


class Stopwatch:
    """Seconds per named part, collected per turn (turns run one at a time)."""

    def __init__(self) -> None:
        self.turns: list[dict[str, float]] = []
        self._spent: dict[str, float] = defaultdict(float)
        self._mark = time.perf_counter()

    def timed(self, fn, part: str):
        """``fn`` (sync) with its time added to ``part``."""

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(part, time.perf_counter() - t0)

        return wrapper

    def add(self, part: str, seconds: float) -> None:
        self._spent[part] += seconds

    def start(self) -> None:
        """A conversation begins: its first turn starts now."""
        self._mark = time.perf_counter()
        self._spent = defaultdict(float)

    def lap(self) -> None:
        """A turn ends (its leak check returned)."""
        now = time.perf_counter()
        self.turns.append({"wall": now - self._mark, **self._spent})
        self._mark, self._spent = now, defaultdict(float)

    def take(self) -> dict[str, float]:
        """The time since ``start`` and its parts, kept apart from the turns (stage 05's)."""
        out = {"wall": time.perf_counter() - self._mark, **self._spent}
        self._mark, self._spent = time.perf_counter(), defaultdict(float)
        return out

    def close(self) -> None:
        """The conversation is written: what came after its last check belongs to its last turn."""
        last = self.turns[-1]
        last["wall"] += time.perf_counter() - self._mark
        for part, s in self._spent.items():
            last[part] = last.get(part, 0.0) + s


class TimedBackend:
    """A backend whose ``generate`` time is added to the stopwatch's ``model`` part."""

    def __init__(self, inner: llm.Backend, watch: Stopwatch) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.watch = watch

    async def generate(self, messages, *, schema, settings):
        t0 = time.perf_counter()
        try:
            return await self.inner.generate(messages, schema=schema, settings=settings)
        finally:
            self.watch.add("model", time.perf_counter() - t0)


def measure(cfg: config.RunConfig, ds: footprint.Dataset, run: Path, n: int,
            out_dir: Path) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Run the first ``n`` planned conversations one at a time, each judged (stage 05) once it
    is written; the parts of every turn, and of every conversation's judging."""
    watch = Stopwatch()
    roles = llm.Roles(cfg, out_dir)
    roles.cache.get = watch.timed(roles.cache.get, "response cache")
    roles.cache.put = watch.timed(roles.cache.put, "response cache")
    index = rag.Index(run, embed=watch.timed(embeddings.embed, "query embedding"))
    index.search = watch.timed(index.search, "retrieval")
    panel = judging.Panel.from_config(cfg, roles)
    panel.embed = watch.timed(embeddings.embed, "judge embedding")
    prober = roles.role("prober")
    assistants = {m.label: m for m in roles.panel("assistant")}
    for model in (prober, *assistants.values(), *panel.judges):
        model.backend = TimedBackend(model.backend, watch)

    async def check(*args):
        verdict = await panel(*args)
        watch.lap()
        return verdict

    runner = probing.Runner(ds, prober, targets.for_run(cfg, index, assistants, ds.view), check, cfg.probing.max_rounds)
    probes = probing.plan(ds, cfg)[:n]
    # Warm up outside the measurement: load MiniLM, open the collections, start the model.
    for owner in sorted({p.owner for p in probes}):
        index.search(owner, "warm up", cfg.probing.top_k, "none", owner, probes[0].at)
    llm.run_sync(prober.backend.inner.generate([{"role": "user", "content": "Say hi."}], schema=None,
                                                settings={"temperature": 0.0, "max_tokens": 1}))
    watch.turns.clear()
    original_render = prompts.render
    prompts.render = watch.timed(original_render, "prompt rendering")
    judged: list[dict[str, float]] = []
    try:
        for probe in probes:
            watch.start()
            conv = llm.run_sync(runner.run(probe))
            watch.timed(store.append_jsonl, "record write")(out_dir / "conversations.jsonl", [conv.model_dump(mode="json")])
            watch.close()
            # Stage 05 for this conversation, timed apart: persona score, and (confidant) disclosure.
            watch.start()
            judging.judge_run(ds, [conv], panel, out_dir)
            judged.append(watch.take())
    finally:
        prompts.render = original_render
        roles.cache.close()
    return watch.turns, judged


def report(name: str, turns: list[dict[str, float]]) -> dict[str, float]:
    """Print one endpoint's figures; return its p50 overhead (ms) and overall share."""
    wall = np.array([t["wall"] for t in turns])
    model = np.array([t.get("model", 0.0) for t in turns])
    over = wall - model
    share = over / wall
    ms = 1000 * over
    print(f"\n({name}) {len(turns)} turns; turn wall p50 {np.median(wall):.2f} s, model time p50 "
          f"{np.median(model):.2f} s")
    print(f"  overhead per turn: p50 {np.percentile(ms, 50):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms, "
          f"max {ms.max():.1f} ms")
    print(f"  overhead share of turn time: p50 {np.percentile(share, 50):.2%}, p95 {np.percentile(share, 95):.2%}, "
          f"all turns {over.sum() / wall.sum():.2%}")
    print(f"  {'part':<34} {'mean ms/turn':>12} {'p50':>7} {'p95':>7}")
    named = np.zeros(len(turns))
    for part in PARTS:
        v = 1000 * np.array([t.get(part, 0.0) for t in turns])
        if part != "query embedding":
            named += v
        label = f"  of which {part}" if part == "query embedding" else part
        print(f"  {label:<34} {v.mean():>12.1f} {np.percentile(v, 50):>7.1f} {np.percentile(v, 95):>7.1f}")
    rest = ms - named
    print(f"  {'other (loop hops, bookkeeping)':<34} {rest.mean():>12.1f} {np.percentile(rest, 50):>7.1f} "
          f"{np.percentile(rest, 95):>7.1f}")
    return {"p50_ms": float(np.percentile(ms, 50)), "share": float(over.sum() / wall.sum())}


def report_judging(name: str, convs: list[dict[str, float]]) -> None:
    """Print one endpoint's stage 05 figures, per conversation."""
    wall = np.array([c["wall"] for c in convs])
    model = np.array([c.get("model", 0.0) for c in convs])
    ms = 1000 * (wall - model)
    print(f"\n({name}) stage 05, {len(convs)} conversations: wall p50 {np.median(wall):.2f} s, model time p50 "
          f"{np.median(model):.2f} s; overhead p50 {np.percentile(ms, 50):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms, "
          f"share {(wall - model).sum() / wall.sum():.2%} (prompt rendering "
          f"{1000 * np.mean([c.get('prompt rendering', 0.0) for c in convs]):.1f} ms, response cache "
          f"{1000 * np.mean([c.get('response cache', 0.0) for c in convs]):.1f} ms a conversation)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("outputs/tiny"), help="a finished run (stages 01-03)")
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--conversations", type=int, default=3, help="on the parameter file's own models")
    ap.add_argument("--server-conversations", type=int, default=12, help="on the latency-bound server")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per request at the server")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch's intra-op threads for MiniLM (default: torch's own, one per core)")
    args = ap.parse_args()
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}")
    print(f"command: {Path(sys.executable).name} {' '.join(sys.argv)}")
    ds = footprint.load_dataset(args.run)
    base = config.load(args.params)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "a").mkdir()
        fresh = base.llm.model_copy(update={"cache": True, "cache_path": tmp / "a" / "cache.sqlite"})
        own = base.model_copy(update={"llm": fresh})
        label = ", ".join(sorted({s.label for s in (own.models.prober, *own.models.assistant, *own.models.judge)}))
        print(f"judging method {base.judging.method}")
        turns, judged = measure(own, ds, args.run, args.conversations, tmp / "a")
        a = report(f"a: own models, {label}", turns)
        report_judging(f"a: own models, {label}", judged)
        with serve(args.latency) as server:
            (tmp / "b").mkdir()
            cfg = config_for(args.params, server.url, tmp / "b" / "cache.sqlite")
            turns, judged = measure(cfg, ds, args.run, args.server_conversations, tmp / "b")
            b = report(f"b: latency-bound server, {args.latency} s per call", turns)
            report_judging(f"b: latency-bound server, {args.latency} s per call", judged)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    print(f"target: overhead < 5% of turn time on the embedded model: {a['share']:.2%} "
          f"{'met' if a['share'] < 0.05 else 'MISSED'}")
    for name, r in (("a", a), ("b", b)):
        print(f"target: overhead p50 < 10 ms per turn ({name}): {r['p50_ms']:.1f} ms "
              f"{'met' if r['p50_ms'] < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
