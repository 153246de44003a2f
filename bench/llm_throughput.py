"""Embedded model throughput: tokens/s for one request, aggregate for 4 concurrent requests
(n_parallel 4), and the model calls a cached rerun makes (target 0).

    python bench/llm_throughput.py [--models qwen2.5-0.5b qwen2.5-coder-1.5b] [--tokens 128]

Prints one table; no file is written except a throwaway cache in a temp folder.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from pathlib import Path

from pbench import config, embedded, llm

PROMPTS = [
    "Write a short diary entry about a rainy Tuesday at the bakery.",
    "Describe a neighbourhood football match in a few sentences.",
    "Write a text message inviting a friend to a board-game night.",
    "Summarise a podcast episode about urban gardening.",
]


def _model(name: str, parallel: int, tokens: int, cache: llm.ResponseCache | None, ledger: llm.Ledger) -> llm.ChatModel:
    spec = config.ModelSpec(
        provider="local", model=name, n_parallel=parallel, n_ctx=1024 * parallel, max_tokens=tokens, temperature=0.7
    )
    return llm.ChatModel(spec, "bench", llm.make_backend(spec), cache, seed=1, ledger=ledger)


async def _batch(model: llm.ChatModel, prompts: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = await asyncio.gather(*(model.acomplete([{"role": "user", "content": p}]) for p in prompts))
    return time.perf_counter() - t0, sum(c.completion_tokens for c in out)


def bench(name: str, tokens: int) -> dict[str, float]:
    ledger = llm.Ledger()
    single = _model(name, 1, tokens, None, ledger)
    llm.run_sync(single.acomplete([{"role": "user", "content": "Say hi."}], max_tokens=4))  # warm up
    secs, toks = llm.run_sync(_batch(single, PROMPTS[:1]))
    one = toks / secs
    llm.SERVERS.stop_all()

    with tempfile.TemporaryDirectory() as tmp:
        cache = llm.ResponseCache(Path(tmp) / "c.sqlite")
        par = _model(name, 4, tokens, cache, ledger)
        llm.run_sync(par.acomplete([{"role": "user", "content": "Say hi."}], max_tokens=4))
        secs4, toks4 = llm.run_sync(_batch(par, PROMPTS))
        before = ledger.totals().calls
        t0 = time.perf_counter()
        llm.run_sync(_batch(par, PROMPTS))  # the same work again: all from the cache
        rerun_s = time.perf_counter() - t0
        rerun_calls = ledger.totals().calls - before
        cache.close()
    llm.SERVERS.stop_all()
    return {
        "single_tok_s": one,
        "aggregate4_tok_s": toks4 / secs4,
        "ratio": (toks4 / secs4) / one,
        "rerun_calls": rerun_calls,
        "rerun_s": rerun_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=[m for m in ("qwen2.5-0.5b", "qwen2.5-coder-1.5b") if m in embedded.installed()])
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{args.tokens} generated tokens per request")
    print(f"{'model':<14} {'1 request tok/s':>16} {'4 parallel tok/s':>17} {'ratio':>6} {'cached rerun calls':>19} {'rerun s':>8}")
    for name in args.models:
        r = bench(name, args.tokens)
        print(f"{name:<14} {r['single_tok_s']:>16.1f} {r['aggregate4_tok_s']:>17.1f} {r['ratio']:>6.2f} "
              f"{r['rerun_calls']:>19d} {r['rerun_s']:>8.3f}")


if __name__ == "__main__":
    main()
