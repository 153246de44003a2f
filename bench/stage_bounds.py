"""The embedded model's rates on this machine, and each stage of a finished run against the
lower bound its token counts set (issue 40, part 1).

    python bench/stage_bounds.py --run outputs/tiny [--model qwen2.5-coder-1.5b] [--slots 1 2 4]

Measures, for each slot count (``n_parallel``), with that many requests at once, as
``pbench.machine`` does before a run (the rates the estimate prices local calls at):
- the prompt rate: prompts of about 300 tokens, each opened by a different nonce so that no
  slot's cache holds a prefix of it, answered with one token (prompt tokens / wall second);
- the generation rate: short prompts answered with 48 tokens (generated tokens / wall second);
- each the best of two waves.

Then reads the run's manifest (the tokens each stage's live calls to the model sent and got
back, and the stage's seconds) and prints, per stage that called a model, its lower bound
at the best measured rates, ``prompt tokens / prompt rate + generated tokens / generation rate``
(the same work done one call after another with no overlap and no reuse of a cached prefix),
and the ratio of the stage's seconds to it. A ratio near 1 means the stage is at the limit
this way of working allows; reusing a conversation's prefix (prompt caching) can go below it.
The server reports how many of each request's prompt tokens its prefix cache held
(``reused``); the last column is the stage against the bound of the tokens it read
(``(prompt - reused) / prompt rate + generated / generation rate``), the limit with the reuse
the run got.
Prints tables; writes nothing but a throwaway server state.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from pbench import config, estimate, machine, store


def rates(name: str, slots: int) -> machine.Rates:
    """Prompt and generated tokens a wall second with ``slots`` requests at once (``pbench.machine``)."""
    return machine.measure(config.ModelSpec(provider="local", model=name, n_parallel=slots, n_ctx=2048 * slots))


def stage_usage(run: Path, model: str) -> list[dict[str, float]]:
    """Per stage of ``run`` that called ``model`` live: its seconds, live calls and the tokens they
    sent and got back (cache hits excluded: they cost no model time), from the manifest."""
    manifest = store.read_json(run / "manifest.json") or {}
    out = []
    for stage, rec in manifest.get("stages", {}).items():
        prompt = completion = calls = reused = 0
        for models in (rec.get("llm") or {}).values():
            u = estimate.usage({model: models[model]} if model in models else {})
            prompt += u["live_prompt_tokens"]
            completion += u["live_completion_tokens"]
            reused += u["live_reused_prompt_tokens"]
            calls += u["live"]
        if calls:
            out.append({"stage": stage, "seconds": rec.get("seconds", 0.0), "calls": calls, "prompt": prompt,
                        "completion": completion, "reused": reused})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run folder, e.g. outputs/tiny")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    if not (args.run / "manifest.json").is_file():
        raise SystemExit(f"{args.run}: no manifest.json (run the pipeline first)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; model {args.model}")
    print(f"{'slots':>5} {'prompt tok/s':>13} {'generated tok/s':>16}")
    measured = {}
    for s in args.slots:
        measured[s] = r = rates(args.model, s)
        print(f"{s:>5} {r.prompt:>13.1f} {r.generation:>16.1f}")
    p_best = max(r.prompt for r in measured.values())
    g_best = max(r.generation for r in measured.values())
    one = measured.get(1, next(iter(measured.values())))
    print(f"\nbounds at the best rates measured ({p_best:.0f} prompt tok/s, {g_best:.1f} generated tok/s); "
          f"one stream: {one.prompt:.0f} and {one.generation:.1f}")
    print(f"{'stage':<18} {'seconds':>8} {'calls':>6} {'prompt':>8} {'generated':>10} {'bound s':>8} "
          f"{'1-stream s':>11} {'achieved/bound':>15} {'reused':>7} {'/read bound':>12}")
    for u in stage_usage(args.run, args.model):
        bound = u["prompt"] / p_best + u["completion"] / g_best
        single = one.seconds_for(u["prompt"], u["completion"])
        read = (u["prompt"] - u["reused"]) / p_best + u["completion"] / g_best
        print(f"{u['stage']:<18} {u['seconds']:>8.0f} {u['calls']:>6} {u['prompt']:>8} {u['completion']:>10} "
              f"{bound:>8.0f} {single:>11.0f} {u['seconds'] / bound:>15.2f} {u['reused']:>7} "
              f"{u['seconds'] / read:>12.2f}")


if __name__ == "__main__":
    main()
