"""Rerun cost: a finished run run again, as is (every stage skipped) and forced (every
notebook executed again from the response cache): model calls (target 0) and wall time as a
share of the stage times the manifest holds (each stage's latest run: run this on a run
whose stages each ran once, or the share is against an earlier rerun).

    python bench/rerun_cost.py [--params params/tiny.yaml]

Works on a copy of the finished run folder in a temporary folder; the run itself is not touched.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from pbench import config, run, store


def calls(results: list[run.StageResult]) -> tuple[int, int]:
    made = sum(u["calls"] for r in results if r.status == "ran" for m in r.usage.values() for u in m.values())
    hits = sum(u["cache_hits"] for r in results if r.status == "ran" for m in r.usage.values() for u in m.values())
    return made, hits


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
        shutil.copytree(source, Path(tmp) / cfg.run_name)
        data = yaml.safe_load(args.params.read_text())
        data["outputs_dir"] = tmp
        data.setdefault("llm", {})["cache_path"] = None  # the copy's own cache
        params = args.params.resolve().parent / f".rerun-{os.getpid()}.yaml"  # input paths stay relative
        params.write_text(yaml.safe_dump(data))
        try:
            t0 = time.perf_counter()
            again = run.run(params, progress=False)
            as_is = time.perf_counter() - t0
            t0 = time.perf_counter()
            forced = run.run(params, force=True, progress=False)
            forced_s = time.perf_counter() - t0
        finally:
            params.unlink()
    first_s = sum(first[s.name]["seconds"] for s in run.STAGES)
    print(f"\n{'stage':<18}{'first run s':>12}{'forced s':>10}{'share':>8}{'calls':>7}{'cache hits':>11}")
    for r in forced:
        f = first[r.name]["seconds"]
        made, hits = calls([r])
        print(f"{r.name:<18}{f:>12.1f}{r.seconds:>10.1f}{r.seconds / f:>8.0%}{made:>7}{hits:>11}")
    made, hits = calls(forced)
    print(f"\nfirst run: {first_s:.0f} s of stages")
    print(f"rerun as is: {sum(r.status == 'skipped' for r in again)} of {len(again)} stages skipped, "
          f"{calls(again)[0]} model calls, {as_is:.1f} s ({as_is / first_s:.1%} of the first run)")
    print(f"forced rerun: {made} model calls, {hits} cache hits, {forced_s:.0f} s ({forced_s / first_s:.0%} "
          f"of the first run)")


if __name__ == "__main__":
    main()
