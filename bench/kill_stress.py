"""Kill at any moment (issue 9): SIGKILL stage 02 and stage 04 at random points, rerun to the
end, and compare with an uninterrupted run.

    python -m bench.kill_stress [--points 10] [--seed 0]     # from the repository's root

Per stage, trials until ``--points`` first kills have landed: each starts the child of
``tests.killable`` (scripted models, 30 ms a call, a response cache in the run folder), kills
it after a delay drawn uniformly over the uninterrupted run's work time, kills the rerun too
in half the trials (drawn), then reruns it to the end. Stage 02 files must be byte-equal to
the uninterrupted run's; stage 04 records equal in plan order, ignoring each conversation's
wall-clock ``seconds``; the replies cached before the last rerun plus its model calls must
make the uninterrupted run's calls (no cached reply lost). Writes only temporary files;
prints one row per trial and a summary; exits 1 when a trial differs.

Columns: the kill delays (s, from the end of the child's set-up); finished records after
each kill; SQLite's integrity check of the cache after the kills; replies cached before the
last rerun; that rerun's model calls / the uninterrupted run's; ``.*.tmp`` files left.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests import killable


def row(n: int, t: killable.Trial, ref: killable.Reference, run_dir: Path) -> str:
    kills = ", ".join(f"{r.kill_at:.2f}" + ("" if r.killed else " (done first)") for r in t.runs[:-1])
    present = "; ".join(s.records + " +torn" * s.torn + " +tmp" * bool(s.temp_files) for s in t.snapshots) or "-"
    cache = "ok" if all(s.cache_ok for s in t.snapshots) else "CORRUPT"
    temp = len(list(run_dir.rglob(".*.tmp")))
    result = "ok" if not t.differences else "; ".join(t.differences)
    calls = f"{t.runs[-1].calls}/{ref.calls}"
    return f"{n:>5} {t.stage:<9} {kills:<24} {present:<31} {cache:>5} {t.cached:>6} {calls:>11} {temp:>3}  {result}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10, help="trials whose first kill lands, per stage")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    failed, kills, late, n = [], Counter(), 0, 0
    with tempfile.TemporaryDirectory(prefix="kill-stress-") as tmp:
        refs = killable.references(Path(tmp))
        for ref in refs.values():
            print(f"reference {ref.stage}: {ref.total} records, {ref.calls} model calls, {ref.seconds:.2f} s of work")
        print(f"\n{'trial':>5} {'stage':<9} {'kill at (s)':<24} {'records at kill':<31} {'cache':>5} {'cached':>6} "
              f"{'rerun calls':>11} {'tmp':>3}  result")
        for ref in refs.values():
            landed, first = 0, n
            while landed < args.points and n - first < 6 * args.points:  # a kill drawn late may come after the end
                n += 1
                kill_at = [rng.uniform(0, ref.seconds) for _ in range(1 + (rng.random() < 0.5))]
                run_dir = Path(tmp) / f"trial-{n:03d}"
                t = killable.trial(ref, run_dir, kill_at)
                print(row(n, t, ref, run_dir), flush=True)
                landed += t.runs[0].killed
                kills[ref.stage] += sum(r.killed for r in t.runs)
                late += sum(not r.killed for r in t.runs[:-1])
                if t.differences:
                    failed.append(n)
    drawn = f"{late} drawn kill{'s' * (late != 1)} came after the run had finished"
    print(f"\n{n - len(failed)}/{n} trials ok; kills: footprint {kills['footprint']}, probing {kills['probing']} "
          f"({drawn}); seed {args.seed}, {time.perf_counter() - t0:.0f} s; "
          + (f"FAILED: trials {failed}" if failed else "no record lost, duplicated, torn or changed"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
