"""Probing throughput against the embedded server: conversations per minute with 1 and with
4 conversations in flight, on a finished run's dataset and index (stages 01-03).

    python bench/probing_concurrency.py outputs/tiny [--conversations 4] [--params params/tiny.yaml]

Each setting gets its own empty response cache, so every call reaches the model (prober,
assistant and the judge panel's per-turn check). Prints a table; writes only temporary files.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from pbench import config, footprint, judging, llm, probing, rag, targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    ap.add_argument("--conversations", type=int, default=4)
    args = ap.parse_args()
    base = config.load(args.params)
    ds = footprint.load_dataset(args.run_dir)
    index = rag.Index(args.run_dir)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; prober {base.models.prober.label}, "
          f"assistant {base.models.assistant[0].label}; {args.conversations} conversations of up to "
          f"{base.probing.max_rounds} rounds")
    print(f"{'in flight':>9} {'seconds':>8} {'conv/min':>9} {'turns':>6}")
    for in_flight in (1, 4):
        with tempfile.TemporaryDirectory() as tmp:
            probing_cfg = base.probing.model_copy(update={"conversations_in_flight": in_flight})
            cfg = base.model_copy(update={"probing": probing_cfg, "llm": base.llm.model_copy(update={"cache_path": Path(tmp) / "c.sqlite"})})
            roles = llm.Roles(cfg, tmp)
            plan = probing.plan(ds, cfg)[: args.conversations]
            built = targets.for_run(cfg, index, {m.label: m for m in roles.panel("assistant")}, ds.view)
            runner = probing.Runner(ds, roles.role("prober"), built, judging.Panel.from_config(cfg, roles),
                                    cfg.probing.max_rounds)

            t0 = time.perf_counter()
            convs = llm.run_sync(llm.gather_bounded(runner.run, plan, in_flight))
            secs = time.perf_counter() - t0
            print(f"{in_flight:>9} {secs:>8.1f} {60 * len(convs) / secs:>9.2f} {sum(len(c.turns) for c in convs):>6}")


if __name__ == "__main__":
    main()
