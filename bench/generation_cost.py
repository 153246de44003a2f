"""Generation cost: model calls, tokens and seconds per mundane document when the generator
writes several documents per request (``footprint.docs_per_call``), against one request per
document, on the same users' document plans with the real generator model.

    python bench/generation_cost.py [--run outputs/tiny] [--params params/tiny.yaml] [--users 2]

Each setting gets its own empty response cache, so every request reaches the model. Also
prints the whole of stage 02 (secrets and their tellings included) from the run's manifest.
Writes only temporary files.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from pathlib import Path

from pbench import config, footprint, llm, social_graph, store


def measure(cfg: config.RunConfig, view, users: list[str], per_call: int) -> dict[str, float]:
    """Write the mundane documents of ``users`` with ``per_call`` documents per request."""
    cfg = cfg.model_copy(update={"footprint": cfg.footprint.model_copy(update={"docs_per_call": per_call})})
    ledger = llm.Ledger()
    with tempfile.TemporaryDirectory() as tmp:
        cache = llm.ResponseCache(Path(tmp) / "cache.sqlite")
        spec = cfg.models.generator
        model = llm.ChatModel(spec, "generator", llm.make_backend(spec), cache, seed=cfg.seed, ledger=ledger)
        gen = footprint.FootprintGenerator(cfg, view, model)

        async def write() -> int:
            n = 0
            for uid in users:  # the same slots as stage 02 plans for this user
                slots, _ = footprint.plan_user(view, cfg, uid, random.Random(gen._seed(uid, "plan")))
                n += len(await gen._mundane(uid, slots, footprint.UserResult()))
            return n

        t0 = time.perf_counter()
        docs = llm.run_sync(write())
        seconds = time.perf_counter() - t0
        cache.close()
    u = ledger.totals()
    n = max(docs, 1)
    return {"documents": docs, "calls": u.calls, "calls/doc": u.calls / n, "prompt tok/doc": u.prompt_tokens / n,
            "completion tok/doc": u.completion_tokens / n, "tokens/doc": (u.prompt_tokens + u.completion_tokens) / n,
            "s/doc": seconds / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("outputs/tiny"), help="a run folder with stage 01 done")
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--users", type=int, default=2)
    args = ap.parse_args()
    cfg = config.load(args.params)
    view = social_graph.load(args.run)
    users = sorted(view.people)[: args.users]
    batched = cfg.footprint.docs_per_call
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; generator {cfg.models.generator.label}; "
          f"mundane documents of {len(users)} users")
    rows = {f"{batched} per request": measure(cfg, view, users, batched), "1 per request": measure(cfg, view, users, 1)}
    cols = ["documents", "calls", "calls/doc", "prompt tok/doc", "completion tok/doc", "tokens/doc", "s/doc"]
    print(f"{'setting':<15}" + "".join(f"{c:>19}" for c in cols))
    for name, r in rows.items():
        print(f"{name:<15}" + "".join(f"{r[c]:>19.2f}" if isinstance(r[c], float) else f"{r[c]:>19}" for c in cols))
    one, many = rows["1 per request"], rows[f"{batched} per request"]
    print(f"batched / one per request: calls x{many['calls/doc'] / one['calls/doc']:.2f}, "
          f"tokens x{many['tokens/doc'] / one['tokens/doc']:.2f}, seconds x{many['s/doc'] / one['s/doc']:.2f}")
    stage = store.read_json(args.run / "manifest.json", {}).get("stages", {}).get("02_footprint")
    if stage:
        print(f"whole stage 02 of {args.run} (secrets and tellings included): {stage['metrics'].get('documents')} "
              f"documents, per document {stage['metrics'].get('per_document')}")


if __name__ == "__main__":
    main()
