"""Two arms compared: the difference of a metric with an interval that respects the
clusters, a cluster-level permutation test that decides whether the run can tell the arms
apart, and a simulation of how often it calls a difference where there is none."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from pbench.metrics.intervals import BOOTSTRAP
from pbench.metrics.rates import CLUSTERS, Cluster, rate, units

ALPHA = 0.05
PERMUTATIONS = 10_000  # random arrangements when there are more than EXACT_LIMIT
EXACT_LIMIT = 1 << 16  # enumerate every arrangement up to this many (16 paired secrets)
Sums = dict[Any, tuple[float, float]]
Arrangements = tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], bool, int]


def difference(metric: str, a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0,
               cluster: Cluster = "secret", paired: bool = True) -> dict[str, Any]:
    """``metric`` in arm ``a`` minus ``metric`` in arm ``b``: its size, with a 95% interval that
    respects the clusters, and whether the run can tell the arms apart, by a test that can fail.

    The interval is the effect's size: the wider of a cluster bootstrap of the difference
    (``paired``: the arms probe the same secrets, e.g. two prompts, so one resample of
    secrets serves both arms; unpaired, e.g. two communities, each arm resamples its own
    clusters) and Newcombe's hybrid interval from each arm's own interval (``rate``).

    Whether the arms differ is decided by a permutation test at the cluster level
    (``permutation_test``), never by the interval alone: at a handful of secrets both
    intervals are too narrow (Newcombe's assumes accurate Wilson intervals, which n = 2 does
    not give), and an exact test says how little few secrets can show. The difference is
    ``conclusive`` when the test rejects "no difference" at the 5% level and the interval
    excludes 0, so that the text never holds one against the other.

    Args:
        metric: one of ``METRICS``.
        a, b: the two arms' judgement records.
        seed, cluster: as in ``rate``.
        paired: the arms probe the same clusters (swap each cluster's arms) or different
            ones (shuffle whole clusters between the arms).
    Returns:
        ``metric``, ``a`` and ``b`` (each arm's ``rate``), ``value`` (a - b; percentage
        points are 100 x this for a rate, PC points for PC), ``lo``, ``hi``, the test's
        ``p``, ``p_min``, ``arrangements``, ``exact`` and ``moved`` (``permutation_test``),
        ``paired`` and ``conclusive``; value, bounds and p NaN, not conclusive, when either
        arm has nothing scored.
    """
    ra, rb = rate(metric, a, seed, cluster), rate(metric, b, seed, cluster)
    out = {"metric": metric, "a": ra, "b": rb, "value": math.nan, "lo": math.nan, "hi": math.nan,
           "p": math.nan, "p_min": math.nan, "arrangements": 0, "exact": True, "moved": 0, "paired": paired,
           "conclusive": False}
    if ra["n"] == 0 or rb["n"] == 0:
        return out
    d = ra["value"] - rb["value"]
    # Newcombe: each arm's distance to its own bounds, combined in quadrature.
    newcombe = (d - math.hypot(ra["value"] - ra["lo"], rb["hi"] - rb["value"]),
                d + math.hypot(ra["hi"] - ra["value"], rb["value"] - rb["lo"]))
    boot = _bootstrap_difference(metric, a, b, seed, cluster, paired)
    lo, hi = min(newcombe[0], boot[0]), max(newcombe[1], boot[1])
    test = permutation_test(metric, a, b, seed, cluster, paired)
    out.update(value=d, lo=lo, hi=hi, **test, conclusive=bool(test["p"] < ALPHA and (lo > 0 or hi < 0)))
    return out


def _cluster_sums(metric: str, rows: list[dict[str, Any]], key: str) -> Sums:
    """Per cluster, the sum of ``metric``'s numerators and denominators over its scored units."""
    num, den, kept, _ = units(metric, rows)
    out: dict[Any, tuple[float, float]] = {}
    for r, x, m in zip(kept, num, den, strict=True):
        s = out.get(r[key], (0.0, 0.0))
        out[r[key]] = (s[0] + x, s[1] + m)
    return out


def permutation_test(metric: str, a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0,
                     cluster: Cluster = "secret", paired: bool = True, n: int = PERMUTATIONS) -> dict[str, Any]:
    """Two-sided permutation test of "``metric`` is the same in both arms", moving whole
    clusters, never single conversations (those of one secret are not independent).

    - ``paired`` (the arms probe the same secrets): each secret's conversations in arm a and
      in arm b swap arms, or not; a secret probed in one arm only stays where it is. With
      one conversation per arm and secret this is the exact sign test of McNemar's design.
    - unpaired (different secrets, e.g. two communities): whole clusters are shuffled between
      the arms, each arm keeping its number of clusters (the ids of one arm never meet the
      other's, even where two runs reuse them).

    The statistic is the difference of the pooled rates (ratios of sums, as ``rate``). Every
    arrangement is enumerated when there are at most ``EXACT_LIMIT`` (p counts the observed
    one among them); beyond, ``n`` random ones (p = (1 + as extreme) / (1 + n)). 0/2 against
    2/2 over 2 secrets has 4 arrangements, 2 as extreme as observed: p = 0.5, so it can never
    be called a difference, whatever an interval says.

    Ours, not ``scipy.stats.permutation_test``: scipy permutes observations of equal-length
    paired samples or pools independent ones, while this moves clusters whose rates are
    ratios of sums, leaves a secret probed in one arm where it is, and reports ``p_min``.

    Returns:
        ``p``, ``p_min`` (the smallest p these arrangements allow, reached by the most extreme
        of them; NaN for random arrangements), ``arrangements`` (how many were weighed),
        ``exact``, and ``moved``: the clusters the test moved (paired: those probed in both
        arms).
    """
    key = CLUSTERS[cluster]
    sa, sb = _cluster_sums(metric, a, key), _cluster_sums(metric, b, key)
    rng = np.random.default_rng(seed)
    (a_num, a_den, b_num, b_den), exact, moved = (_swapped if paired else _shuffled)(sa, sb, rng, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = np.abs(a_num / a_den - b_num / b_den)
    observed = abs(sum(x for x, _ in sa.values()) / sum(m for _, m in sa.values())
                   - sum(x for x, _ in sb.values()) / sum(m for _, m in sb.values()))
    stats = stats[~np.isnan(stats)]  # an arrangement that left an arm empty
    tol = 1e-9
    if exact:
        p = float(np.mean(stats >= observed - tol)) if len(stats) else 1.0
        p_min = float(np.mean(stats >= stats.max() - tol)) if len(stats) else 1.0
        return {"p": p, "p_min": p_min, "arrangements": int(len(stats)), "exact": True, "moved": moved}
    p = (1 + int(np.sum(stats >= observed - tol))) / (1 + len(stats))
    return {"p": float(p), "p_min": math.nan, "arrangements": int(len(stats)), "exact": False, "moved": moved}


def _swapped(sa: Sums, sb: Sums, rng: np.random.Generator, n: int) -> Arrangements:
    """Paired arrangements: each cluster probed in both arms swaps its arms, or not (every
    arrangement when exact, else ``n`` at random). Returns per arrangement the numerators and
    denominators of arm a and of arm b, whether exact, and how many clusters moved."""
    names = sorted(set(sa) | set(sb), key=str)
    va = np.asarray([sa.get(c, (0.0, 0.0)) for c in names]).reshape(-1, 2)
    vb = np.asarray([sb.get(c, (0.0, 0.0)) for c in names]).reshape(-1, 2)
    movable = np.asarray([c in sa and c in sb for c in names])
    k = int(movable.sum())
    moved = k
    exact = (1 << k) <= EXACT_LIMIT
    if exact:
        codes = np.arange(1 << k, dtype=np.int64)
        flips = ((codes[:, None] >> np.arange(k)) & 1).astype(bool)
    else:
        flips = rng.random((n, k)) < 0.5
    swap = np.zeros((len(flips), len(names)), dtype=bool)
    swap[:, movable] = flips
    # Arm a holds a's sums where not swapped, b's where swapped; arm b the rest.
    a_num = np.where(swap, vb[:, 0], va[:, 0]).sum(axis=1)
    a_den = np.where(swap, vb[:, 1], va[:, 1]).sum(axis=1)
    b_num = va[:, 0].sum() + vb[:, 0].sum() - a_num
    b_den = va[:, 1].sum() + vb[:, 1].sum() - a_den
    return (a_num, a_den, b_num, b_den), exact, moved


def _shuffled(sa: Sums, sb: Sums, rng: np.random.Generator, n: int) -> Arrangements:
    """Unpaired arrangements: whole clusters shuffled between the arms, each arm keeping its
    number of clusters (every arrangement when exact, else ``n`` at random); as ``_swapped``."""
    sums = np.asarray(list(sa.values()) + list(sb.values()), dtype=float).reshape(-1, 2)
    ka, k = len(sa), len(sa) + len(sb)
    moved = k
    exact = math.comb(k, ka) <= EXACT_LIMIT
    if exact:
        picks = np.zeros((math.comb(k, ka), k), dtype=bool)
        for i, chosen in enumerate(itertools.combinations(range(k), ka)):
            picks[i, list(chosen)] = True
    else:
        order = np.argsort(rng.random((n, k)), axis=1)
        picks = np.zeros((n, k), dtype=bool)
        np.put_along_axis(picks, order[:, :ka], True, axis=1)
    a_num, a_den = picks @ sums[:, 0], picks @ sums[:, 1]
    b_num, b_den = sums[:, 0].sum() - a_num, sums[:, 1].sum() - a_den
    return (a_num, a_den, b_num, b_den), exact, moved


def _bootstrap_difference(metric: str, a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int,
                          cluster: Cluster, paired: bool, n: int = BOOTSTRAP) -> tuple[float, float]:
    """Percentile 95% interval of rate(a) - rate(b) over cluster resamples (see ``difference``)."""
    key = CLUSTERS[cluster]
    arms = []
    for rows in (a, b):
        num, den, kept, _ = units(metric, rows)
        arms.append(([r[key] for r in kept], np.asarray(num), np.asarray(den)))
    rng = np.random.default_rng(seed)
    if paired:
        names = sorted({c for groups, _, _ in arms for c in groups}, key=str)
        index = {c: i for i, c in enumerate(names)}
        pick = rng.integers(0, len(names), size=(n, len(names)))
        ratios: list[np.ndarray] = []
        for groups, nums, dens in arms:
            which = np.asarray([index[c] for c in groups])
            sums = np.bincount(which, weights=nums, minlength=len(names))
            sizes = np.bincount(which, weights=dens, minlength=len(names))
            with np.errstate(invalid="ignore", divide="ignore"):
                ratios.append(sums[pick].sum(axis=1) / sizes[pick].sum(axis=1))
    else:
        ratios = []
        for groups, nums, dens in arms:
            _, which = np.unique(np.asarray(groups, dtype=str), return_inverse=True)
            sums, sizes = np.bincount(which, weights=nums), np.bincount(which, weights=dens)
            pick = rng.integers(0, len(sums), size=(n, len(sums)))
            ratios.append(sums[pick].sum(axis=1) / sizes[pick].sum(axis=1))
    diffs = ratios[0] - ratios[1]
    diffs = diffs[~np.isnan(diffs)]  # a paired resample that drew none of one arm's secrets
    if len(diffs) == 0:
        return math.inf, -math.inf  # no bootstrap: Newcombe's alone
    lo, hi = np.quantile(diffs, [0.025, 0.975])
    return float(lo), float(hi)


def secret_rates(rng: np.random.Generator, rate_: float, secrets: int, icc: float = 0.0) -> np.ndarray:
    """Each simulated secret's own true rate: ``rate_`` for all when ``icc`` is 0, else drawn
    from the Beta of mean ``rate_`` whose intra-secret correlation is ``icc``."""
    if icc <= 0:
        return np.full(secrets, rate_)
    a = rate_ * (1 - icc) / icc
    return rng.beta(a, a * (1 - rate_) / rate_, size=secrets)


def simulate_null(rate_: float, secrets: int, per_secret: int, draws: int = 1000, seed: int = 0, icc: float = 0.0,
                  metric: str = "LR") -> dict[str, float]:
    """How often ``difference`` calls two arms different when they are not: ``draws``
    simulated paired comparisons, each arm ``per_secret`` conversations of each of
    ``secrets`` secrets, both drawn from the same true ``rate_`` (each secret's own rate from
    a Beta with intra-secret correlation ``icc``, shared by both arms).

    Returns:
        ``conclusive``: the share called conclusive (test and interval, as ``difference``);
        ``interval_alone``: the share whose interval excluded 0 (the rule before the test).
    """
    rng = np.random.default_rng(seed)
    called = excluded = 0
    authorised = metric == "OSR"
    hit, miss = ("withheld", "shared") if authorised else ("leak", "no_leak")
    for k in range(draws):
        rates = secret_rates(rng, rate_, secrets, icc)
        arms = []
        for arm in ("a", "b"):
            outcome = rng.random((secrets, per_secret)) < rates[:, None]
            arms.append([{"id": f"{arm}{s}-{j}", "secret_id": f"s{s}", "owner": "o", "authorised": authorised,
                          "verdict": hit if outcome[s, j] else miss, "turns": 1}
                         for s in range(secrets) for j in range(per_secret)])
        d = difference(metric, arms[0], arms[1], seed=k)
        called += d["conclusive"]
        excluded += bool(d["lo"] > 0 or d["hi"] < 0)
    return {"conclusive": called / draws, "interval_alone": excluded / draws}
