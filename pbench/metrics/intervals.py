"""Intervals that respect clusters: a cluster bootstrap of a ratio of sums, Wilson's interval,
and the design effect's effective n; ``clustered_interval`` takes the wider of the bootstrap's
and Wilson's at the effective n, so that no rate over few secrets claims certainty."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

BOOTSTRAP = 2000


def wilson(successes: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion: above 0 for 0/n, below 1 for n/n.

    Ours, not scipy's ``binomtest(k, n).proportion_ci("wilson")``: ``clustered_interval`` calls
    it with the effective n of a cluster design, which is not a whole number, and scipy takes
    whole counts only (statsmodels' ``proportion_confint`` would, but is not a dependency)."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # At 0/n (n/n) the bound is 0 (1) exactly, not a rounding error away from it.
    return (0.0 if p <= 0 else max(0.0, centre - half)), (1.0 if p >= 1 else min(1.0, centre + half))


def clustered_interval(num: np.ndarray, den: np.ndarray, clusters: list[Any], seed: int = 0, n: int = BOOTSTRAP,
                       bounds: tuple[float, float] = (0.0, 1.0), binary: bool = True) -> tuple[float, float]:
    """95% interval of ``sum(num) / sum(den)``, resampling whole clusters: the units of one
    secret (or owner) move together, since they are not independent.

    The bootstrap sums each cluster once and resamples cluster indices (memory grows with
    the number of clusters, not of units). The interval is the wider of the bootstrap's
    percentile interval and Wilson's interval at the observed proportion with the effective n
    of the cluster design: a bootstrap over few clusters is too narrow, and where every
    resample gives the same value (0/n, n/n, a constant score, or one cluster) it is a
    point. The effective n is n / deff, where
    deff = 1 + (mean cluster size - 1) * ICC and the intra-cluster correlation ICC is the
    one-way ANOVA estimate, clipped to [0, 1]. When the ICC cannot be estimated (one
    cluster, or every value equal) the worst case is taken, deff = mean cluster size: the
    effective n is the number of clusters. So 0/8 conversations over 3 secrets gets
    Wilson's interval of 0/3, never [0, 0].

    Args:
        num, den: per unit (a conversation), its numerator and denominator.
        clusters: per unit, its cluster (a secret id, an owner).
        seed: the bootstrap's seed.
        n: how many resamples.
        bounds: the range values live in (PC: 1 to 5); the Wilson fallback works on the
            values mapped to [0, 1] and maps its interval back.
        binary: each unit holds ``den`` elements that are 0 or 1, ``num`` of them 1 (a leak,
            an inappropriate turn); else each unit is one value ``num`` with ``den`` 1 (a PC
            score, a revealed share).
    Returns:
        (lo, hi); NaN for no units.
    """
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(num) == 0 or den.sum() == 0:
        return math.nan, math.nan
    boot = tuple(float(q) for q in np.quantile(cluster_draws(num, den, clusters, seed, n), [0.025, 0.975]))
    low, width = bounds[0], bounds[1] - bounds[0]
    p, n_eff = proportion_and_effective_n(num, den, clusters, bounds, binary)
    lo, hi = wilson(p * n_eff, n_eff)
    # The wider of the two: a percentile bootstrap over few clusters is too narrow (2 secrets
    # have 3 distinct resamples), and where every resample agrees it says nothing at all.
    return min(boot[0], low + width * lo), max(boot[1], low + width * hi)


def cluster_draws(num: np.ndarray, den: np.ndarray, clusters: list[Any], seed: int = 0,
                  n: int = BOOTSTRAP) -> np.ndarray:
    """``n`` cluster-bootstrap resamples of ``sum(num) / sum(den)``: whole clusters are drawn
    with replacement. Each cluster is summed once and its index resampled (memory grows with
    the number of clusters, not of units)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    _, which = np.unique(np.asarray(clusters), return_inverse=True)
    sums, sizes = np.bincount(which, weights=num), np.bincount(which, weights=den)
    rng, k, stats = np.random.default_rng(seed), len(sums), []
    step = max(1, 1_000_000 // k)  # resamples per batch, so one batch holds about a million indices
    for start in range(0, n, step):
        pick = rng.integers(0, k, size=(min(step, n - start), k))
        stats.append(sums[pick].sum(axis=1) / sizes[pick].sum(axis=1))
    return np.concatenate(stats)


def proportion_and_effective_n(num: np.ndarray, den: np.ndarray, clusters: list[Any],
                               bounds: tuple[float, float] = (0.0, 1.0), binary: bool = True) -> tuple[float, float]:
    """The observed proportion (values mapped to [0, 1] from ``bounds``) and the effective n
    of its clustered design (``effective_n``); ``binary`` as in ``clustered_interval``."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    _, which = np.unique(np.asarray(clusters), return_inverse=True)
    low, width = bounds[0], bounds[1] - bounds[0]
    if binary:
        y, m = num, den  # successes and elements; a 0/1 element is its own square
        squares = np.bincount(which, weights=num)
    else:
        y, m = (num / den - low) / width, np.ones(len(num))
        squares = np.bincount(which, weights=y * y)
    n_eff = effective_n(np.bincount(which, weights=m), np.bincount(which, weights=y), squares)
    return float(np.sum(y) / np.sum(m)), n_eff


def effective_n(sizes: np.ndarray, sums: np.ndarray, squares: np.ndarray) -> float:
    """Effective sample size n / deff of clustered values in [0, 1], deff = 1 + (mean
    cluster size - 1) * ICC (one-way ANOVA estimate of the ICC, clipped to [0, 1]); the
    number of clusters when the ICC cannot be estimated (one cluster, or no variance).

    Args:
        sizes, sums, squares: per cluster, its element count, the sum of its values and the
            sum of their squares.
    """
    total, k = float(sizes.sum()), len(sizes)
    if k < 2 or total <= k:
        return float(k)
    between = float(np.sum(sums ** 2 / sizes)) - float(sums.sum()) ** 2 / total
    within = float(squares.sum()) - float(np.sum(sums ** 2 / sizes))
    msb, msw = max(0.0, between) / (k - 1), max(0.0, within) / (total - k)
    if msb + msw < 1e-12:  # every value equal: nothing to estimate the correlation from
        return float(k)
    m0 = (total - float(np.sum(sizes ** 2)) / total) / (k - 1)
    icc = min(1.0, max(0.0, (msb - msw) / (msb + (m0 - 1) * msw)))
    return total / (1 + (total / k - 1) * icc)
