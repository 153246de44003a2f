"""What the numbers claim against what they hold, on simulated runs whose truth is known.

    python bench/honest_numbers.py [--draws 1000] [--runs 1000]

1. Null comparisons: two arms with the same true rate, compared as ``metrics.difference``
   does, at tiny's size (2 secrets; 1 confidant or 4 outsider conversations per arm and
   secret) and community_1's (36 secrets, 12 outsider conversations per arm and secret). The
   share called conclusive by the interval alone (the rule before the permutation test)
   beside the share called conclusive now (the test and the interval). At most 5% is honest.
2. Coverage of the 95% intervals of LR, raw and corrected for the judge
   (``correction.simulate``), for three judge qualities, at tiny's size (8 conversations over
   2 secrets) and community_1's (36 secrets x 24 conversations, one target), against a true
   LR of 16% (the paper's baseline mean) and a validation set the size of the dev set's
   held-out leak cases (32 leaks, 67 non-leaks).
"""

from __future__ import annotations

import argparse
import time

from pbench import correction, metrics

SIZES = {"tiny": (2, 4), "community_1": (36, 24)}
NULL = [("tiny OSR", 2, 1, "OSR"), ("tiny LR", 2, 4, "LR"), ("community_1 LR", 36, 12, "LR")]
JUDGES = [(0.78, 0.985), (0.95, 0.99), (0.6, 0.97)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000, help="simulated comparisons per row of the null table")
    ap.add_argument("--runs", type=int, default=1000, help="simulated runs per row of the coverage table")
    ap.add_argument("--icc", type=float, default=0.1, help="intra-secret correlation of the simulated outcomes")
    args = ap.parse_args()

    print(f"1. null comparisons (same true rate in both arms, ICC {args.icc}, {args.draws} draws): share called conclusive")
    print(f"{'size':<16}{'true rate':>10}{'interval alone':>16}{'test + interval':>17}{'seconds':>9}")
    for name, secrets, per, metric in NULL:
        for rate in (0.16, 0.5):
            t0 = time.perf_counter()
            got = metrics.simulate_null(rate, secrets, per, draws=args.draws, seed=1, icc=args.icc, metric=metric)
            print(f"{name:<16}{rate:>10.2f}{got['interval_alone']:>16.1%}{got['conclusive']:>17.1%}"
                  f"{time.perf_counter() - t0:>9.1f}")

    print(f"\n2. coverage of 95% intervals of a true LR of 16% ({args.runs} simulated runs each)")
    print(f"{'size':<20}{'recall':>7}{'FPR':>6}{'judged LR':>11}{'corrected LR':>14}{'raw covers':>12}"
          f"{'corrected covers':>18}{'too weak':>10}")
    for name, (secrets, per) in SIZES.items():
        for se, sp in JUDGES:
            for icc in (0.0, args.icc):
                got = correction.simulate(0.16, se, sp, secrets, per, runs=args.runs, seed=2, icc=icc)
                label = f"{name}" + (f" icc {icc}" if icc else "")
                print(f"{label:<20}{se:>7.2f}{1 - sp:>6.1%}{got['mean_raw']:>11.1%}{got['mean_corrected']:>14.1%}"
                      f"{got['raw']:>12.1%}{got['corrected']:>18.1%}{got['too_weak']:>10.1%}")
    print("\ncorrected covers: over the runs whose measured judge could correct (recall - FPR >= "
          f"{correction.MIN_YOUDEN}); 'too weak' is the share that printed no corrected figure.")


if __name__ == "__main__":
    main()
