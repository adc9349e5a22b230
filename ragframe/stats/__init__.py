"""Means with honest intervals: one metric's scores (`mean_interval`), from the scores or from
their moments. Layer: pure numbers just above the ground; it imports nothing of ragframe but
the errors, so every layer may use it (`ragframe.decide.summarize` applies it to a scored log
per group and metric).

One figure, one value: every interval is a function of the multiset of scores and the level
alone (never of row order, chunking, the group's name or the path that computed it). The
closed forms below read five numbers: n, the sum and the sum of squares (each the correctly
rounded exact sum, `ExactSum`, so a shuffled, chunked or streamed log gives the same bits), the
minimum and the maximum. The run summary (in memory or streamed), `summarize`, the
`summarize` command, the report and the gates therefore print the same interval for the same
scores, with DECIMALS decimals (`format_mean`, `format_interval`).

The interval, by how many scores it rests on (n, nulls and NaN left out), for scores with
bounds (scores live in [0, 1] by default; other bounds are mapped onto [0, 1] and back):

- n == 0: no mean, no interval. n == 1: the mean, no interval (one value says nothing about
  spread; any width would be invented).
- Every score equal, n >= 2 ("exact-bound"): a score c repeated n times. If the mean were below
  c * r, with r = (alpha / 2) ** (1 / n), then P(X = c) <= mean / c < r (scores are >= 0) and n
  equal draws would have probability below alpha / 2; mirrored above. So the interval is
  [c * r, c + (1 - c) * (1 - r)]: at c = 1 the exact binomial bound [(alpha / 2) ** (1 / n), 1]
  (30 perfect scores do not prove a mean of 1.0), at c = 0 its mirror. A bootstrap or a t
  interval would give [c, c], a certainty that n rows do not give. "Equal" means equal to
  within EQUAL_SLACK of the bounds' width: a score computed two ways (0.07 summed ten times is
  0.7000000000000002) or a difference of scores (0.8 - 0.55 and 1.0 - 0.75) differs from its
  twin in the last bits only, and such rounding must not turn the exact bound into the score
  interval, whose spread estimate is then 0 and its width too ([0.7, 0.7]).
- 2 <= n <= BOOTSTRAP_MAX_N ("score"): the quasi-binomial score interval with a continuity
  correction. Bounded scores have variance at most mu * (1 - mu) at mean mu; the interval
  takes the variance at mu to be phi * mu * (1 - mu), phi = s**2 / (m * (1 - m)) estimated
  from the scores (s**2 with ddof = 1, m the mean), and keeps every mu with
  (|m - mu| - delta)**2 <= c**2 * phi * mu * (1 - mu) / n, c = sqrt(n / (n - 1)) * t(n - 1):
  close to Student's t for scores far from the bounds, and skewed like the scores near 0 or 1.
  The factor sqrt(n / (n - 1)) is Hesterberg's small-sample widening (the one the expanded
  percentile bootstrap uses). The correction delta = w * (1 - e) / (2 n), w = max - min the
  scores' reach and e = 4 * v / w**2 their evenness (v the variance with ddof = 0; e is 1 when
  the scores sit half at each end of their reach, 1/3 for a uniform spread, near 0 when they
  crowd at one end with a few far values). For 0/1 scores delta = (1 - 2 m)**2 / (2 n): Wilson's
  continuity correction in full for rare outcomes, none at m = 0.5. Why: a sample of rare
  outcomes, or of skewed scores, often misses its few far values, and the interval without it
  covered 92.0 % of Bernoulli(0.02) means at n = 24 (Wilson's dip at two successes), 87.7 % of
  Bernoulli(0.01) at n = 13, 92.8 % of Beta(0.5, 5) at n = 6 and 92.4 % of {0, 0.5, 1} with
  weights (0.02, 0.9, 0.08) at n = 20. Weighted by (1 - e), it costs 0.6 % of width at
  Bernoulli(0.5) and 5-8 % elsewhere on average over n = 2..40, and overcovers evenly spread
  scores (uniform ones: 98.0 % at n = 10 to 96.3 % at n = 100, 10,000 trials each). The plain
  correction (max - min) / (2 n) cost 8-13 % (97.7 % on uniform scores at n = 25); steeper
  weights, (1 - 2 e) or (1 - e)**2, let Bernoulli(0.01) fall to 91.6-92.4 %.
  Why not the bootstrap: every bootstrap mean lies between the smallest and largest score, so
  at n = 2..5 a "95 %" bootstrap interval covered 52-92 % of Uniform(0.2, 0.8) means, and on
  rare 0/1 outcomes it is Wald's interval (below 93 % at n = 40 for p = 0.1). Measured coverage
  of this interval (tests/test_coverage_small_n.py: 10,000 seeded trials per n, n = 2..40) is
  at least 93 % for Uniform(0.2, 0.8), Beta(0.5, 2), Beta(0.5, 5), Beta(5, 0.5), Bernoulli(0.5
  / 0.1 / 0.05 / 0.02 / 0.01) and three-valued {0, 0.5, 1} scores with uneven weights, (0.02,
  0.9, 0.08) included (lowest: 93.7 % on Beta(5, 0.5) at n = 5, 94.1 % on Bernoulli(0.1),
  94.5 % on those three values); from n = 41 to 120, at least 94.3 % on the rare and skewed
  ones. Known shortfall: Beta(0.3, 3) (mean 0.09, most scores within 0.01 of 0): 90.5-91.8 % at
  n = 3..7, 92.6-92.9 % at n = 8..10, 93.7 % or more from n = 12.
- n > BOOTSTRAP_MAX_N: Student's t ("t"), mean +- t(n - 1) * s / sqrt(n). Past a few
  thousand bounded scores the sample mean is normal, and the score interval is t to within
  rounding.

Unbounded scores (`bounds=None`) and `method="bootstrap"`: the expanded percentile bootstrap
("bootstrap"; Hesterberg 2015, "What teachers should know about the bootstrap"): RESAMPLES
resamples of the *sorted* scores (so the row order cannot change them) seeded by `seed` alone,
percentiles at a level widened by sqrt(n / (n - 1)) * t(n - 1) / z (`expanded_tail`); t past
BOOTSTRAP_MAX_N. `method="t"`: Student's t at any n.

Intervals are clipped to the scores' bounds ([0, 1] by default). They assume the rows are
independent draws (a random sample of a log, see `ragframe.inputs.sample`); a sample that is a large
share of its log makes them conservative (no finite-population correction is applied).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.errors import ConfigError, InputError

#: Up to this many scores, the score interval (a bootstrap for unbounded scores); past it,
#: Student's t (see the module docstring).
BOOTSTRAP_MAX_N = 5000
#: Rounding past a score's bounds that is clipped, not refused (a harmonic mean of ones lands
#: at 1 + 2e-16): every reader and every path uses this one rule, times the bounds' width.
SCORE_SLACK = 1e-9
#: Scores closer than this (times the bounds' width) count as equal: float rounding of a
#: score or of a difference of scores is below 1e-15, real differences are far above 1e-12.
EQUAL_SLACK = 1e-12
#: Bootstrap resamples per interval: Monte Carlo error of a 2.5 % percentile about 0.35 %.
RESAMPLES = 2000
#: Index-matrix elements drawn at once (32 MiB of int64): bounds the bootstrap's memory.
_BLOCK_ELEMENTS = 1 << 22
#: Decimals of every mean and interval bound ragframe prints as text.
DECIMALS = 3

Method = Literal["auto", "score", "bootstrap", "t"]
METHODS = ("auto", "score", "bootstrap", "t")


@dataclass(frozen=True)
class Interval:
    """A mean and its confidence interval. `n` counts the scores used (nulls and NaN left
    out); `mean` is None when n == 0, `low` / `high` are None when n < 2. `method` is
    "score", "bootstrap", "t", "exact-bound", or "none" when there is no interval."""

    n: int
    mean: float | None
    low: float | None
    high: float | None
    method: str
    level: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as summaries name them (`low`, `high` as `ci_low`, `ci_high`)."""
        names = {"low": "ci_low", "high": "ci_high"}
        return {names.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}


def format_mean(value: float | None) -> str:
    """A mean as every printed table shows it: DECIMALS decimals, "-" when there is none."""
    return "-" if value is None else f"{value:.{DECIMALS}f}"


def format_interval(low: float | None, high: float | None) -> str:
    """`[0.789, 1.000]`, DECIMALS decimals, "-" when there is no interval (n < 2)."""
    if low is None or high is None:
        return "-"
    return f"[{low:.{DECIMALS}f}, {high:.{DECIMALS}f}]"


class ExactSum:
    """A sum of floats folded chunk by chunk whose value is the correctly rounded *exact* sum:
    the same bits whatever the order and the chunking (a float sum in another order differs in
    its last bits, enough to move a printed rounding). Kept as a few non-overlapping partials
    (Shewchuk), each chunk reduced with `math.fsum`."""

    __slots__ = ("partials",)

    def __init__(self, values: Any = ()) -> None:
        self.partials: list[float] = []
        self.add(values)

    def add(self, values: Any) -> None:
        """Add an array (or iterable) of floats, or another ExactSum."""
        more = values.partials if isinstance(values, ExactSum) else values
        self.partials = _exact_partials(self.partials, more)

    def __iadd__(self, other: Any) -> ExactSum:
        self.add(other if isinstance(other, ExactSum) else [float(other)])
        return self

    def __float__(self) -> float:
        return math.fsum(self.partials)

    def __repr__(self) -> str:
        return f"ExactSum({float(self)!r})"


def _exact_partials(partials: list[float], values: Any) -> list[float]:
    """Non-overlapping floats whose exact sum is that of `partials` and `values`: each step
    keeps the correctly rounded sum of what is left (fsum), until nothing is (two or three
    steps: each removes 53 bits)."""
    array = values if isinstance(values, np.ndarray) else np.asarray(list(values), np.float64)
    if not array.size:
        return partials
    pool = [*partials, *array.tolist()]
    found: list[float] = []
    while True:
        rest = math.fsum([*pool, *(-p for p in found)])
        if rest == 0:
            return found
        if not math.isfinite(rest):
            return [rest]
        found.append(rest)


@dataclass(frozen=True)
class Moments:
    """What every interval reads: n, the exact sum and sum of squares, minimum, maximum."""

    n: int
    total: float
    squares: float
    minimum: float
    maximum: float

    @classmethod
    def of(cls, x: np.ndarray) -> Moments:
        if not x.size:
            return cls(0, 0.0, 0.0, math.inf, -math.inf)
        x = x + 0.0  # -0.0 becomes 0.0: equal scores, equal bits
        return cls(
            int(x.size),
            float(ExactSum(x)),
            float(ExactSum(np.square(x))),
            float(x.min()),
            float(x.max()),
        )

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def variance(self) -> float:
        """ddof = 1; 0 for n < 2 or equal scores."""
        if self.n < 2 or self.minimum == self.maximum:
            return 0.0
        return max(self.squares - self.total * self.total / self.n, 0.0) / (self.n - 1)


def mean_interval(
    values: Any,
    level: float = 0.95,
    *,
    seed: int = 0,
    method: Method = "auto",
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> Interval:
    """The mean of `values` with a `level` confidence interval (method: module docstring).

    `values`: a Polars Series, a numpy array, or a sequence of numbers (None allowed); nulls
    and NaN are dropped. `method`: "auto" (the module docstring's rule), "score" (the
    quasi-binomial score interval at any n; needs bounds), "bootstrap" or "t". `seed`: the
    bootstrap's (the only method that draws). `bounds`: the range scores live in (the interval
    is clipped to it; a value outside is an error); None for unbounded. The result depends on
    the multiset of values only, never their order.
    """
    check_options(level, seed, method)
    if method == "score" and bounds is None:
        raise ConfigError("method='score' needs the scores' bounds, e.g. bounds=(0.0, 1.0)")
    x = _as_array(values)
    if bounds is not None:
        # Rounding error (a harmonic mean of ones at 1 + 2e-16) is clipped, not refused.
        slack = SCORE_SLACK * max(1.0, bounds[1] - bounds[0])
        outside = int(np.count_nonzero((x < bounds[0] - slack) | (x > bounds[1] + slack)))
        if outside:
            raise InputError(
                f"{outside} of {x.size} values lie outside {list(bounds)}; mean_interval "
                "clips its interval to the scores' bounds. Pass bounds=None for unbounded data"
            )
        x = np.clip(x, bounds[0], bounds[1])
    moments = Moments.of(x)
    draws = method == "bootstrap" or (
        method == "auto" and bounds is None and moments.n <= BOOTSTRAP_MAX_N
    )
    if draws and moments.n >= 2 and not _all_same(moments, bounds):
        return _bootstrap_interval(np.sort(x), moments, level, seed, bounds)
    return interval_from_moments(moments, level=level, method=method, bounds=bounds)


def interval_from_moments(
    moments: Moments,
    *,
    level: float = 0.95,
    method: Method = "auto",
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> Interval:
    """The interval from `Moments` alone (no values kept: a streamed run folds them chunk
    by chunk), the same `mean_interval` gives for those values. A "bootstrap" request gets
    the closed form the rule gives without one."""
    check_options(level, 0, method)
    n = moments.n
    if n == 0:
        return Interval(0, None, None, None, "none", level)
    mean = moments.mean
    if n == 1:
        return Interval(1, mean, None, None, "none", level)
    if _all_same(moments, bounds) and method in ("auto", "score") and bounds is not None:
        return _all_equal(n, mean, level, bounds)
    sd = math.sqrt(moments.variance)
    if bounds is not None and (method == "score" or (method == "auto" and n <= BOOTSTRAP_MAX_N)):
        # The range within the bounds: an unknown end (interval_from_stats) is the bound.
        top, bottom = min(moments.maximum, bounds[1]), max(moments.minimum, bounds[0])
        return _score_interval(n, mean, sd, max(top - bottom, 0.0), level, bounds)
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return Interval(n, mean, *_clip(mean - half, mean + half, bounds), "t", level)


def interval_from_stats(
    n: int,
    mean: float | None,
    sd: float | None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    level: float = 0.95,
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> Interval:
    """The interval from summary statistics (n, mean, standard deviation with ddof=1 and,
    when known, the minimum and maximum): `interval_from_moments` for figures a caller has
    already reduced. Equal to `mean_interval` up to the rounding of the given figures only when
    the minimum and maximum are given: without them the correction for scores crowding at one
    end takes the scores to span their bounds, so the interval is wider (never narrower)."""
    if n == 0 or mean is None:
        return Interval(0, None, None, None, "none", level)
    sd = float(sd or 0.0)
    squares = (sd * sd * (n - 1) + n * mean * mean) if n > 1 else mean * mean
    low = minimum if minimum is not None else (mean if sd == 0 else -math.inf)
    high = maximum if maximum is not None else (mean if sd == 0 else math.inf)
    moments = Moments(int(n), float(mean) * n, squares, low, high)
    found = interval_from_moments(moments, level=level, bounds=bounds)
    return Interval(found.n, float(mean), found.low, found.high, found.method, level)


def _all_same(moments: Moments, bounds: tuple[float, float] | None) -> bool:
    """Every score equal to within rounding (EQUAL_SLACK of the bounds' width; of 1 without
    bounds): the "exact-bound" case (module docstring)."""
    width = 1.0 if bounds is None else max(bounds[1] - bounds[0], 0.0)
    return moments.n >= 1 and moments.maximum - moments.minimum <= EQUAL_SLACK * width


def check_options(level: float, seed: int, method: str) -> None:
    """A ConfigError for a level outside (0, 1), a negative seed or an unknown method."""
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, not {seed!r}")
    if method not in METHODS:
        raise ConfigError(f"method must be one of {list(METHODS)}, not {method!r}")


def _as_array(values: Any) -> np.ndarray:
    """Float64 numpy array of the values, nulls and NaN removed."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        x = values.astype(np.float64, copy=False).ravel()
    else:
        series = values if isinstance(values, pl.Series) else pl.Series(list(values))
        try:
            series = series.cast(pl.Float64)
        except pl.exceptions.PolarsError as exc:
            raise InputError(f"mean_interval needs numbers, got {series.dtype}: {exc}") from exc
        x = series.drop_nulls().to_numpy()
    return x[~np.isnan(x)]


def score_bounds(
    n: int, mean: Any, variance: Any, equal: Any, value_range: Any, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The interval of scores in [0, 1] for many samples of one size n at once (arrays of
    their means, variances with ddof = 1, whether all their scores are equal, and their
    ranges, maximum - minimum): the "exact-bound" rule where `equal`, the quasi-binomial score
    interval with its continuity correction elsewhere (module docstring). `mean_interval`
    computes every bounded interval below BOOTSTRAP_MAX_N with it, and the coverage test
    simulates with it."""
    m = np.clip(np.asarray(mean, np.float64), 0.0, 1.0)
    equal = np.asarray(equal, bool) | (m <= 0) | (m >= 1)
    r = ((1 - level) / 2) ** (1 / n)
    spread = np.where(equal, 1.0, m * (1 - m))
    c = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1)
    variance = np.asarray(variance, np.float64)
    k = c * c * variance / spread
    # The continuity correction (module docstring): full where the scores crowd at one end
    # with a few far values (evenness near 0), none where they spread evenly (evenness 1).
    reach = np.clip(np.asarray(value_range, np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        evenness = np.clip(4 * variance * (n - 1) / n / (reach * reach), 0.0, 1.0)
    shift = np.where(reach > 0, reach * (1 - evenness) / (2 * n), 0.0)
    below, above = np.clip(m - shift, 0.0, 1.0), np.clip(m + shift, 0.0, 1.0)
    low = np.where(below <= 0, 0.0, _wilson(n, below, k, -1.0))
    high = np.where(above >= 1, 1.0, _wilson(n, above, k, 1.0))
    low = np.where(equal, m * r, np.clip(low, 0.0, 1.0))
    high = np.where(equal, m + (1 - m) * (1 - r), np.clip(high, 0.0, 1.0))
    return np.minimum(low, m), np.maximum(high, m)


def _wilson(n: int, m: np.ndarray, k: np.ndarray, side: float) -> np.ndarray:
    """One end (side -1: low, +1: high) of the score interval around m with k = c**2 * phi."""
    center = (m + k / (2 * n)) / (1 + k / n)
    half = np.sqrt(k) / (1 + k / n) * np.sqrt(m * (1 - m) / n + k / (4 * n * n))
    return center + side * half


def _all_equal(n: int, value: float, level: float, bounds: tuple[float, float]) -> Interval:
    """n equal scores (module docstring, "exact-bound"), in the bounds' units."""
    return _scaled(n, value, 0.0, 0.0, True, level, bounds, "exact-bound")


def _score_interval(
    n: int, mean: float, sd: float, value_range: float, level: float, bounds: tuple[float, float]
) -> Interval:
    """The quasi-binomial score interval (module docstring), in the bounds' units."""
    return _scaled(n, mean, sd * sd, value_range, False, level, bounds, "score")


def _scaled(
    n: int,
    mean: float,
    variance: float,
    value_range: float,
    equal: bool,
    level: float,
    bounds: tuple[float, float],
    method: str,
) -> Interval:
    """`score_bounds` for scores in `bounds`, mapped onto [0, 1] and back."""
    lo_b, hi_b = bounds
    width = hi_b - lo_b
    if width <= 0:
        return Interval(n, mean, mean, mean, method, level)
    m = (mean - lo_b) / width
    scaled = [value_range / width]
    low, high = score_bounds(n, [m], [variance / (width * width)], [equal], scaled, level)
    if equal or m <= 0 or m >= 1:
        method = "exact-bound"
    low_v, high_v = lo_b + width * float(low[0]), lo_b + width * float(high[0])
    return Interval(n, mean, min(low_v, mean), max(high_v, mean), method, level)


def _clip(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    if bounds is None:
        return low, high
    return min(max(low, bounds[0]), bounds[1]), min(max(high, bounds[0]), bounds[1])


def expanded_tail(n: int, level: float) -> float:
    """The one-sided tail of the expanded percentile interval (Hesterberg 2015): percentiles
    at a level widened by sqrt(n / (n - 1)) * t(n - 1) / z, which removes the plain percentile
    interval's narrowness at small n. Every ragframe bootstrap interval takes these."""
    widen = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1)
    return NormalDist().cdf(-widen)


def bootstrap_means(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """`resamples` bootstrap means of `x`, vectorised.

    Few distinct values (at most a quarter of n: verdict fractions, pass/fail): multinomial
    counts of the distinct values, d numbers per resample instead of n. Otherwise an index
    matrix, drawn in blocks of at most _BLOCK_ELEMENTS elements.
    """
    n = x.size
    distinct, counts = np.unique(x, return_counts=True)
    if distinct.size * 4 <= n:
        draws = rng.multinomial(n, counts / n, size=resamples)
        return (draws @ distinct) / n
    means = np.empty(resamples)
    per_block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, resamples, per_block):
        stop = min(resamples, start + per_block)
        # int32 indices: half the bytes to draw and gather (n is at most BOOTSTRAP_MAX_N here,
        # or whatever a caller passes: int64 past 2**31 values).
        kind = np.int32 if n < 2**31 else np.int64
        means[start:stop] = x[rng.integers(0, n, size=(stop - start, n), dtype=kind)].mean(axis=1)
    return means


def _bootstrap_interval(
    x: np.ndarray,
    moments: Moments,
    level: float,
    seed: int,
    bounds: tuple[float, float] | None,
) -> Interval:
    """The expanded percentile interval of the bootstrap means of the sorted scores `x`."""
    n = moments.n
    means = bootstrap_means(x, np.random.default_rng(seed), RESAMPLES)
    tail = expanded_tail(n, level)
    low, high = np.quantile(means, [tail, 1 - tail])
    mean = moments.mean
    # The percentile interval contains the mean by construction except in degenerate draws.
    low, high = min(float(low), mean), max(float(high), mean)
    return Interval(n, mean, *_clip(low, high, bounds), "bootstrap", level)


# ------------------------------------------------------------------------------ Student's t


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (0.5 <= p < 1).

    No scipy in the dependencies: for df >= 100 the Cornish-Fisher expansion (Abramowitz &
    Stegun 26.7.5, error below 1e-8 there); below, bisection on the exact distribution
    function (the regularised incomplete beta function).
    """
    z = NormalDist().inv_cdf(p)
    if df >= 100:
        return _cornish_fisher(z, df)
    low, high = z, max(z * 2.0, 1.0)
    while _t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2
        if _t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2


def _cornish_fisher(z: float, df: float) -> float:
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0."""
    return 1 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) of one x: `beta_cdf`'s continued
    fraction in plain floats, 20 times faster for one value (Student's t CDF asks for one)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1) / (a + b + 2):
        return 1 - front * _betacf(b, a, 1 - x) / b
    return front * _betacf(a, b, x) / a


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def beta_quantile(q: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The q-quantile of Beta(a, b), elementwise: bisection on `_beta_cdf` (50 halvings of
    [0, 1]: below 1e-15), over the distinct (a, b) pairs only."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    pairs, back = np.unique(np.stack([a.ravel(), b.ravel()], axis=1), axis=0, return_inverse=True)
    lo, hi = np.zeros(len(pairs)), np.ones(len(pairs))
    for _ in range(50):
        mid = (lo + hi) / 2
        below = beta_cdf(mid, pairs[:, 0], pairs[:, 1]) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return ((lo + hi) / 2)[np.ravel(back)].reshape(a.shape)


def beta_cdf(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The regularised incomplete beta function I_x(a, b), elementwise (numpy arrays): the
    continued fraction (modified Lentz), vectorised, on the side of x where it converges fast.
    Student's t CDF and the Clopper-Pearson interval rest on it (no scipy in the package)."""
    x = np.clip(x, 0.0, 1.0)
    flip = x > (a + 1) / (a + b + 2)
    aa, bb, xx = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1 - x, x)
    inside = (xx > 0) & (xx < 1)
    xs = np.where(inside, xx, 0.5)
    log_front = _lgamma(aa + bb) - _lgamma(aa) - _lgamma(bb) + aa * np.log(xs) + bb * np.log1p(-xs)
    tiny = 1e-300
    c = np.ones_like(xs)
    d = 1 - (aa + bb) * xs / (aa + 1)
    d = 1 / np.where(np.abs(d) > tiny, d, tiny)
    h = d.copy()
    for m in range(1, 500):
        for num in (
            m * (bb - m) * xs / ((aa + 2 * m - 1) * (aa + 2 * m)),
            -(aa + m) * (aa + bb + m) * xs / ((aa + 2 * m) * (aa + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / np.where(np.abs(d) > tiny, d, tiny)
            c = 1 + num / c
            c = np.where(np.abs(c) > tiny, c, tiny)
            h = h * d * c
        if float(np.abs(d * c - 1).max(initial=0.0)) < 1e-15:
            break
    part = np.where(inside, np.exp(log_front) * h / aa, np.where(xx >= 1, 1.0, 0.0))
    return np.where(flip, 1 - part, part)


_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])


def outside_unit(value: pl.Expr) -> pl.Expr:
    """True where a score lies outside [0, 1] by more than SCORE_SLACK (infinities included);
    False for null and NaN, rows that failed to score. The one range rule of the run (which
    nulls such a score) and of every reader of a scored file (which refuses it)."""
    outside = (value < -SCORE_SLACK) | (value > 1 + SCORE_SLACK)
    return (value.is_not_nan() & outside).fill_null(False)
