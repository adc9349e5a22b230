"""The tests and intervals of a difference (methods: the package docstring): the paired
sign-flip test, the two-sample bootstrap interval and label permutation test, Welch, Student."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ragframe.stats import (
    BOOTSTRAP_MAX_N,
    RESAMPLES,
    bootstrap_means,
    mean_interval,
    t_quantile,
)

#: Random sign flips or label shuffles per permutation test: the Monte Carlo error of a p
#: near 0.05 is about 0.002, and the smallest p is 1 / 10001.
PERMUTATIONS = 10_000
#: Up to this many pairs the sign-flip test enumerates all 2**n sign vectors (8,192 at most).
EXACT_MAX_N = 13
#: Past this many pooled scores the unpaired p-value is Welch's t-test, not a permutation test.
PERMUTATION_MAX_N = BOOTSTRAP_MAX_N
#: Elements of a sign or shuffle matrix drawn at once (32 MiB of float64).
_BLOCK_ELEMENTS = 1 << 22


def sign_flip_p(d: np.ndarray, rng: np.random.Generator) -> tuple[float | None, str]:
    """Two-sided p of the paired sign-flip permutation test (module docstring)."""
    n = int(d.size)
    if n == 0:
        return None, "none"
    observed = abs(float(d.sum()))
    slack = 1e-9 * (1.0 + observed)  # rounding must not turn an equal sum into a smaller one
    if n <= EXACT_MAX_N:
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        sums = np.abs(signs @ d)
        return float(np.count_nonzero(sums >= observed - slack) / sums.size), "sign-flip exact"
    values, counts = np.unique(np.abs(d[d != 0]), return_counts=True)
    if values.size * 4 <= n:
        # Per distinct |d|: how many of its c copies keep their sign is Binomial(c, 1/2).
        kept = rng.binomial(counts, 0.5, size=(PERMUTATIONS, values.size))
        sums = np.abs((2 * kept - counts) @ values)
    elif n > BOOTSTRAP_MAX_N:
        t = float(d.mean()) / (float(d.std(ddof=1)) / math.sqrt(n))
        return t_p(t, n - 1), "paired t"
    else:
        sums = np.empty(PERMUTATIONS)
        per_block = max(1, _BLOCK_ELEMENTS // n)
        for start in range(0, PERMUTATIONS, per_block):
            stop = min(PERMUTATIONS, start + per_block)
            # One random bit per pair: a byte of randomness gives 8 flips.
            octets = rng.integers(0, 256, size=(stop - start, (n + 7) // 8), dtype=np.uint8)
            flips = np.unpackbits(octets, axis=1, count=n).astype(np.float64)
            sums[start:stop] = np.abs(d.sum() - 2 * (flips @ d))
    hits = int(np.count_nonzero(sums >= observed - slack))
    return (1 + hits) / (1 + PERMUTATIONS), "sign-flip"


def welch(xa: np.ndarray, xb: np.ndarray) -> tuple[float, float]:
    """Welch's standard error of the difference of means, and its degrees of freedom."""
    va, vb = float(xa.var(ddof=1)) / xa.size, float(xb.var(ddof=1)) / xb.size
    se = math.sqrt(va + vb)
    if se == 0:
        return 0.0, float(xa.size + xb.size - 2)
    return se, (va + vb) ** 2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1))


def two_sample_interval(
    xa: np.ndarray,
    xb: np.ndarray,
    level: float,
    rng: np.random.Generator,
    bounds: tuple[float, float] | None = None,
) -> tuple[float, float, str]:
    """The bootstrap interval of mean(b) - mean(a), each side resampled on its own, its
    percentiles widened as `stats` widens them (to Welch's t with Welch's standard error);
    Welch's t interval when a side passes BOOTSTRAP_MAX_N. Bounded scores with a side whose
    scores are all equal: `sides_interval` (resampling or Welch would take that side's mean
    as known exactly, and two such sides give a zero-width interval)."""
    if bounds is not None:
        equal = [mean_interval(x, bounds=bounds).method == "exact-bound" for x in (xa, xb)]
        if any(equal):
            return sides_interval(xa, xb, level, bounds)
    diff = float(xb.mean() - xa.mean())
    se, df = welch(xa, xb)
    quantile = t_quantile(1 - (1 - level) / 2, max(1, int(df)))
    if max(xa.size, xb.size) > BOOTSTRAP_MAX_N:
        return diff - quantile * se, diff + quantile * se, "welch-t"
    plugin = math.sqrt(float(xa.var()) / xa.size + float(xb.var()) / xb.size)
    if plugin == 0:
        return diff, diff, "bootstrap"
    diffs = bootstrap_means(xb, rng, RESAMPLES) - bootstrap_means(xa, rng, RESAMPLES)
    tail = NormalDist().cdf(-quantile * se / plugin)
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return min(float(low), diff), max(float(high), diff), "bootstrap"


def sides_interval(
    xa: np.ndarray, xb: np.ndarray, level: float, bounds: tuple[float, float]
) -> tuple[float, float, str]:
    """mean(b) - mean(a) from each side's own interval (`stats.mean_interval`, the exact bound
    for equal scores) at level 1 - (1 - level) / 2: both cover with probability at least
    `level` together (Bonferroni), so [low_b - high_a, high_b - low_a] does."""
    each = 1 - (1 - level) / 2
    (low_a, high_a), (low_b, high_b) = (
        (float(i.low or 0.0), float(i.high or 0.0))  # n >= 2 a side: never None
        for i in (mean_interval(x, each, bounds=bounds) for x in (xa, xb))
    )
    return low_b - high_a, high_b - low_a, "sides-bound"


def label_permutation_p(
    xa: np.ndarray, xb: np.ndarray, rng: np.random.Generator
) -> tuple[float, str]:
    """Two-sided p of the permutation test of the labels a / b (module docstring)."""
    na, nb = xa.size, xb.size
    pooled = np.concatenate([xa, xb])
    total = float(pooled.sum())
    observed = abs(float(xb.mean() - xa.mean()))
    values, counts = np.unique(pooled, return_counts=True)
    if values.size * 4 <= pooled.size:
        # Which scores land in b under a random relabelling: multivariate hypergeometric.
        sums_b = rng.multivariate_hypergeometric(counts, nb, size=PERMUTATIONS) @ values
    elif pooled.size > PERMUTATION_MAX_N:
        se, df = welch(xa, xb)
        return (t_p(observed / se if se else math.inf, df) if observed else 1.0), "Welch t"
    else:
        sums_b = np.empty(PERMUTATIONS)
        per_block = max(1, _BLOCK_ELEMENTS // pooled.size)
        for start in range(0, PERMUTATIONS, per_block):
            stop = min(PERMUTATIONS, start + per_block)
            # b's relabelled scores: the nb smallest of uniform random keys, a uniform subset
            # (a partial sort, cheaper than shuffling every row).
            keys = rng.random((stop - start, pooled.size))
            chosen = np.argpartition(keys, nb - 1, axis=1)[:, :nb]
            sums_b[start:stop] = pooled[chosen].sum(axis=1)
    stats = np.abs(sums_b / nb - (total - sums_b) / na)
    hits = int(np.count_nonzero(stats >= observed - 1e-9 * (1.0 + observed)))
    return (1 + hits) / (1 + PERMUTATIONS), "label permutation"


def t_p(t: float, df: float) -> float:
    """Two-sided p of Student's t with `df` degrees of freedom, from `stats.t_quantile`
    (bisection on the tail, in logs; p is floored at 2e-15, the quantiles' own precision)."""
    t, df = abs(t), max(1, int(df))
    if not math.isfinite(t) or t_quantile(1 - 1e-15, df) <= t:
        return 2e-15
    low, high = math.log(1e-15), math.log(0.5)
    for _ in range(60):
        mid = (low + high) / 2
        if t_quantile(1 - math.exp(mid), df) > t:
            low = mid
        else:
            high = mid
    return min(1.0, 2 * math.exp((low + high) / 2))
