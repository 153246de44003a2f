"""Coverage of the two corrected 95% intervals of LR, Rogan-Gladen's and PPI's, on simulated
runs whose truth is known.

    python bench/ppi_coverage.py [--runs 1000] [--draws 1000]

Each run draws ``per`` conversations for each of ``secrets`` secrets from a true LR of 16% (the
paper's baseline mean), each secret's own rate from a Beta of intra-secret correlation ``--icc``,
and passes each through the run's judge (recall, false-positive rate). Then:
- Rogan-Gladen (``correction.corrected_interval``) corrects the judged rate with the judge's
  error measured on a dev set the size of the held-out split's leak cases (50 leaks, 103
  non-leaks, 3 to a secret), judged by the dev set's judge;
- PPI (``ppi.interval``) corrects it with people's labels of this run, sampled as the labelling
  page samples (``labelling.quotas``: half the panel's leaks, a third its non-leaks, a sixth
  confidants, of which LR uses the first two): 12 labels at tiny's size, 120 at community_1's
  (``validation.human_sample`` in each parameter file), and 12 at community_1's to show what
  few labels cost.

Sizes: tiny, 2 secrets x 14 conversations with someone who may not know (every surface and
target of params/tiny.yaml, 8 confidant conversations beside); community_1, 36 secrets x 24
(one target, as ``bench/honest_numbers.py``), 1,080 confidant conversations beside; each with
the true leaks independent (ICC 0) and correlated within a secret (``--icc``). Judges: the dev
set's as measured (recall 0.74, false-positive rate 2.9% on 153 held-out cases), erring on the
run as on the dev set; and one that misses more of this run's leaks (recall 0.55, as when
another model paraphrases more), where Rogan-Gladen's correction, measured on the dev set, no
longer fits this run.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from pbench import correction, labelling, metrics, ppi

TRUE_LR = 0.16
DEV_JUDGE = (0.74, 1 - 0.029)
DEV_CASES = (50, 103)
SIZES = {"tiny": (2, 14, 12, 8), "community_1": (36, 24, 120, 1080),  # secrets, per secret, labels, confidants
         "community_1, few labels": (36, 24, 12, 1080)}
RUN_JUDGES = {"as on the dev set": DEV_JUDGE, "misses more here": (0.55, DEV_JUDGE[1])}


def dev_error(rng: np.random.Generator) -> correction.JudgeError:
    """The dev set's judge measured on ``DEV_CASES``, 3 cases to a secret."""
    se, sp = DEV_JUDGE
    pos, neg = DEV_CASES
    cases = [(f"v{i // 3}", True, bool(rng.random() < se)) for i in range(pos)]
    cases += [(f"w{i // 3}", False, bool(rng.random() >= sp)) for i in range(neg)]
    return correction.JudgeError("leak", f"{pos + neg} simulated dev cases", cases)


def labelled(rng: np.random.Generator, judged: np.ndarray, labels: int, confidants: int) -> np.ndarray:
    """Which conversations the labelling page's sample holds: each stratum's quota at random."""
    verdict = {"leak": np.flatnonzero(judged), "no_leak": np.flatnonzero(~judged)}
    quota = labelling.quotas(labels, {"leak": len(verdict["leak"]), "no_leak": len(verdict["no_leak"]),
                                      "confidant": confidants})
    picked = np.zeros(len(judged), dtype=bool)
    for stratum, where in verdict.items():
        picked[rng.choice(where, size=quota[stratum], replace=False)] = True
    return picked


def one(size: str, judge: tuple[float, float], icc: float, runs: int, draws: int, seed: int) -> dict[str, float]:
    """Coverage, mean width and the share of runs without a figure, per estimator."""
    secrets, per, labels, confidants = SIZES[size]
    rng = np.random.default_rng(seed)
    clusters = [f"s{i}" for i in range(secrets) for _ in range(per)]
    got = {k: [0, 0.0, 0] for k in ("rg", "ppi")}  # runs covered, summed width, runs without a figure
    for run in range(runs):
        truth = rng.random((secrets, per)) < metrics.secret_rates(rng, TRUE_LR, secrets, icc)[:, None]
        se, sp = judge
        judged = np.where(truth, rng.random(truth.shape) < se, rng.random(truth.shape) >= sp).ravel()
        error = dev_error(rng)
        if error.problem():
            got["rg"][2] += 1
        else:
            _, lo, hi = correction.corrected_interval(judged.astype(float), np.ones(len(judged)), clusters, error,
                                                      seed=run, n=draws)
            got["rg"][0] += lo <= TRUE_LR <= hi
            got["rg"][1] += hi - lo
        sample = labelled(rng, judged, labels, confidants)
        units = [ppi.Unit(c, "leak" if j else "no_leak", float(j), 1.0, float(t) if s else None)
                 for c, j, t, s in zip(clusters, judged, truth.ravel(), sample, strict=True)]
        _, lo, hi = ppi.interval(units, seed=run, n=draws, cells=ppi.CELLS["LR"])
        if lo != lo:
            got["ppi"][2] += 1
            continue
        got["ppi"][0] += lo <= TRUE_LR <= hi
        got["ppi"][1] += hi - lo
    out = {}
    for k, (hit, width, none) in got.items():
        done = max(1, runs - none)
        out |= {f"{k} covers": hit / done, f"{k} width": width / done, f"{k} none": none / runs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="simulated runs per row")
    ap.add_argument("--draws", type=int, default=1000, help="draws per interval")
    ap.add_argument("--icc", type=float, default=0.1, help="intra-secret correlation of the true leaks")
    args = ap.parse_args()
    print(f"coverage of 95% intervals of a true LR of {TRUE_LR:.0%} ({args.runs} simulated runs a row; "
          f"dev set {sum(DEV_CASES)} cases, judge recall {DEV_JUDGE[0]:.2f}, FPR {1 - DEV_JUDGE[1]:.1%})")
    head = (f"{'size':<25}{'ICC':>5}{'labels':>7}  {'judge on the run':<32}{'RG covers':>11}{'RG width':>10}"
            f"{'PPI covers':>12}{'PPI width':>11}{'no RG':>7}{'seconds':>9}")
    print(head)
    for size, icc, (name, judge) in itertools.product(SIZES, (0.0, args.icc), RUN_JUDGES.items()):
        t0 = time.perf_counter()
        got = one(size, judge, icc, args.runs, args.draws, seed=3)
        who = f"{name} ({judge[0]:.2f}, {1 - judge[1]:.1%})"
        print(f"{size:<25}{icc:>5.1f}{SIZES[size][2]:>7}  {who:<32}{got['rg covers']:>11.1%}{100 * got['rg width']:>10.1f}"
              f"{got['ppi covers']:>12.1%}{100 * got['ppi width']:>11.1f}{got['rg none']:>7.1%}"
              f"{time.perf_counter() - t0:>9.1f}")
    print("width: mean width of the interval, in points. no RG: runs whose dev set could not correct (too weak).")


if __name__ == "__main__":
    main()
