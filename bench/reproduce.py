"""Reproduction and rerun cost: a finished run's parameter file run again into another run
folder from a copy of its response cache (target: 0 model calls, the same data files), then
forced (`--force`: every stage recomputed from the cache; the same targets), with each
stage's time against the first run's.

    python bench/reproduce.py [--params params/tiny.yaml]

Works in a temporary folder; the finished run and its cache are not touched.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import yaml

from pbench import config, reproduce, run, store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params/tiny.yaml"))
    args = ap.parse_args()
    cfg = config.load(args.params)
    source = cfg.run_dir().resolve()
    first = store.read_json(source / "manifest.json", {}).get("stages", {})
    missing = [s.name for s in run.STAGES if first.get(s.name, {}).get("status") != "ran"]
    if missing:
        raise SystemExit(f"error: {source} is not a finished run (no record of {', '.join(missing)}); "
                         f"run `pbench run {args.params}` first")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; run {source}")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "llm_cache.sqlite"
        replies = reproduce.copy_cache(cfg.llm.cache_path or source / "llm_cache.sqlite", cache)
        data = yaml.safe_load(args.params.read_text())
        data["outputs_dir"] = tmp
        data.setdefault("llm", {})["cache_path"] = str(cache)
        params = args.params.resolve().parent / f".reproduce-{os.getpid()}.yaml"  # input paths stay relative
        params.write_text(yaml.safe_dump(data))
        copy = Path(tmp) / cfg.run_name
        try:
            t0 = time.perf_counter()
            again = run.run(params, progress=False)
            again_s = time.perf_counter() - t0
            diff_again = reproduce.differences(source, copy)
            t0 = time.perf_counter()
            forced = run.run(params, force=True, progress=False)
            forced_s = time.perf_counter() - t0
            diff_forced = reproduce.differences(source, copy)
            compared = len(reproduce.data_files(source))
        finally:
            params.unlink()
    calls_again, calls_forced = reproduce.model_calls(again), reproduce.model_calls(forced)
    print(f"response cache: {replies} replies copied\n")
    print(f"{'stage':<18}{'first run s':>12}{'again s':>9}{'calls':>7}{'forced s':>10}{'calls':>7}{'share':>8}")
    for a, f in zip(again, forced, strict=True):
        s0 = first[a.name]["seconds"]
        print(f"{a.name:<18}{s0:>12.1f}{a.seconds:>9.1f}{calls_again.get(a.name, 0):>7}{f.seconds:>10.1f}"
              f"{calls_forced.get(f.name, 0):>7}{f.seconds / s0:>8.0%}")
    first_s = sum(first[s.name]["seconds"] for s in run.STAGES)
    for name, calls, seconds, diff in (("into another folder", calls_again, again_s, diff_again),
                                       ("forced (--force)", calls_forced, forced_s, diff_forced)):
        print(f"\n{name}: {sum(calls.values())} model calls, {seconds:.0f} s ({seconds / first_s:.0%} of the "
              f"first run's {first_s:.0f} s); {compared - len(diff)} of {compared} data files identical")
        for f, what in diff.items():
            print(f"  differs: {f}: {what}")


if __name__ == "__main__":
    main()
