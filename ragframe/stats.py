"""Means with honest intervals: one metric's scores (`mean_interval`), or a scored log per
group and metric (`summarize`).

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
  interval would give [c, c], a certainty that n rows do not give.
- 2 <= n <= BOOTSTRAP_MAX_N ("score"): the quasi-binomial score interval. Bounded scores have
  variance at most mu * (1 - mu) at mean mu; the interval takes the variance at mu to be
  phi * mu * (1 - mu), phi = s**2 / (m * (1 - m)) estimated from the scores (s**2 with
  ddof = 1, m the mean), and keeps every mu with (m - mu)**2 <= c**2 * phi * mu * (1 - mu) / n,
  c = sqrt(n / (n - 1)) * t(n - 1): Wilson's interval for 0/1 scores (phi = n / (n - 1)),
  close to Student's t for scores far from the bounds, and skewed like the scores near 0 or 1.
  The factor sqrt(n / (n - 1)) is Hesterberg's small-sample widening (the one the expanded
  percentile bootstrap uses). Why not the bootstrap: every bootstrap mean lies between the
  smallest and largest score, so at n = 2..5 a "95 %" bootstrap interval covered 52-92 % of
  Uniform(0.2, 0.8) means, and on rare 0/1 outcomes it is Wald's interval (below 93 % at n = 40
  for p = 0.1). Measured coverage of this interval (tests/test_coverage_small_n.py: 10,000
  seeded trials per n, n = 2..40) is at least 93 % for Uniform(0.2, 0.8), Beta(0.5, 2),
  Bernoulli(0.5 / 0.1 / 0.05) and three-valued {0, 0.5, 1} scores with uneven weights. Known
  dips (10,000 trials each): Bernoulli(0.02) near n = 21..25 (91.7 %, Wilson's dip at two
  successes), Beta(0.5, 5) (92.7 % at n = 7), {0, 0.5, 1} with weights (0.02, 0.9, 0.08)
  (92.8 % near n = 21).
- n > BOOTSTRAP_MAX_N: Student's t ("t"), mean +- t(n - 1) * s / sqrt(n). Past a few
  thousand bounded scores the sample mean is normal, and the score interval is t to within
  rounding.

Unbounded scores (`bounds=None`) and `method="bootstrap"`: the expanded percentile bootstrap
("bootstrap"; Hesterberg 2015, "What teachers should know about the bootstrap"): RESAMPLES
resamples of the *sorted* scores (so the row order cannot change them) seeded by `seed` alone,
percentiles at a level widened by sqrt(n / (n - 1)) * t(n - 1) / z (`expanded_tail`); t past
BOOTSTRAP_MAX_N. `method="t"`: Student's t at any n.

Intervals are clipped to the scores' bounds ([0, 1] by default). They assume the rows are
independent draws (a random sample of a log, see `ragframe.sample`); a sample that is a large
share of its log makes them conservative (no finite-population correction is applied).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.errors import ConfigError, InputError
from ragframe.thresholds import (
    DEFAULT_THRESHOLD,
    PASS_SUFFIX,
    Threshold,
    check_threshold,
)

#: Up to this many scores, the score interval (a bootstrap for unbounded scores); past it,
#: Student's t (see the module docstring).
BOOTSTRAP_MAX_N = 5000
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
        return {
            "n": self.n,
            "mean": self.mean,
            "ci_low": self.low,
            "ci_high": self.high,
            "level": self.level,
            "method": self.method,
        }


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
    _check_options(level, seed, method)
    if method == "score" and bounds is None:
        raise ConfigError("method='score' needs the scores' bounds, e.g. bounds=(0.0, 1.0)")
    x = _as_array(values)
    if bounds is not None:
        # Rounding error (a harmonic mean of ones at 1 + 2e-16) is clipped, not refused.
        slack = 1e-9 * max(1.0, bounds[1] - bounds[0])
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
    if draws and moments.n >= 2 and moments.minimum != moments.maximum:
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
    _check_options(level, 0, method)
    n = moments.n
    if n == 0:
        return Interval(0, None, None, None, "none", level)
    mean = moments.mean
    if n == 1:
        return Interval(1, mean, None, None, "none", level)
    if moments.minimum == moments.maximum and method in ("auto", "score") and bounds is not None:
        return _all_equal(n, moments.minimum, level, bounds)
    sd = math.sqrt(moments.variance)
    if bounds is not None and (method == "score" or (method == "auto" and n <= BOOTSTRAP_MAX_N)):
        return _score_interval(n, mean, sd, level, bounds)
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
    already reduced. Equal to `mean_interval` up to the rounding of the given mean and sd."""
    if n == 0 or mean is None:
        return Interval(0, None, None, None, "none", level)
    sd = float(sd or 0.0)
    squares = (sd * sd * (n - 1) + n * mean * mean) if n > 1 else mean * mean
    low = minimum if minimum is not None else (mean if sd == 0 else -math.inf)
    high = maximum if maximum is not None else (mean if sd == 0 else math.inf)
    moments = Moments(int(n), float(mean) * n, squares, low, high)
    found = interval_from_moments(moments, level=level, bounds=bounds)
    return Interval(found.n, float(mean), found.low, found.high, found.method, level)


def _check_options(level: float, seed: int, method: str) -> None:
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
    n: int, mean: Any, variance: Any, equal: Any, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The interval of scores in [0, 1] for many samples of one size n at once (arrays of
    their means, variances with ddof = 1, and whether all their scores are equal): the
    "exact-bound" rule where `equal`, the quasi-binomial score interval elsewhere (module
    docstring). `mean_interval` computes every bounded interval below BOOTSTRAP_MAX_N with it,
    and the coverage test simulates with it."""
    m = np.clip(np.asarray(mean, np.float64), 0.0, 1.0)
    equal = np.asarray(equal, bool) | (m <= 0) | (m >= 1)
    r = ((1 - level) / 2) ** (1 / n)
    spread = np.where(equal, 1.0, m * (1 - m))
    c = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1)
    k = c * c * np.asarray(variance, np.float64) / spread
    center = (m + k / (2 * n)) / (1 + k / n)
    half = np.sqrt(k) / (1 + k / n) * np.sqrt(spread / n + k / (4 * n * n))
    low = np.where(equal, m * r, np.clip(center - half, 0.0, 1.0))
    high = np.where(equal, m + (1 - m) * (1 - r), np.clip(center + half, 0.0, 1.0))
    return np.minimum(low, m), np.maximum(high, m)


def _all_equal(n: int, value: float, level: float, bounds: tuple[float, float]) -> Interval:
    """n equal scores (module docstring, "exact-bound"), in the bounds' units."""
    return _scaled(n, value, 0.0, True, level, bounds, "exact-bound")


def _score_interval(
    n: int, mean: float, sd: float, level: float, bounds: tuple[float, float]
) -> Interval:
    """The quasi-binomial score interval (module docstring), in the bounds' units."""
    return _scaled(n, mean, sd * sd, False, level, bounds, "score")


def _scaled(
    n: int,
    mean: float,
    variance: float,
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
    low, high = score_bounds(n, [m], [variance / (width * width)], [equal], level)
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
    """The regularised incomplete beta function I_x(a, b) (continued fraction, Lentz)."""
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


# ------------------------------------------------------------------------------ summarize

#: The columns of `summarize`'s table, after the group columns.
SUMMARY_COLUMNS = (
    "metric",
    "direction",
    "n",
    "scored",
    "failed",
    "mean",
    "ci_low",
    "ci_high",
    "level",
    "method",
)


def summarize(
    data: Any,
    metrics: Sequence[str] | None = None,
    by: str | Sequence[str] | None = None,
    level: float = 0.95,
    *,
    seed: int = 0,
    method: Method = "auto",
    sample: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] | None = None,
) -> pl.DataFrame:
    """One row per group and metric: n (rows), scored, failed (null or NaN score), mean, its
    `level` interval (`mean_interval`'s methods; `ci_low` / `ci_high` null below 2 scores),
    and the metric's direction ("higher" / "lower" is better; null when unknown).

    `data`: a scored frame, `ragframe.run`'s result, or the path of a scored file (Parquet:
    its metadata gives the metrics, their directions, thresholds, and the sample the run
    scored, if any). `metrics`: the score columns; by default those the file's metadata
    names, else every Float64 column with a `{name}_detail` sibling (or named like a known
    metric). `by`: group columns (None: the whole log). `sample`: {"rows": n, "of": total}
    when the frame is a sample (a file says so itself); the table then gets `sample_rows` and
    `population_rows`, so no figure hides that it comes from n of total rows. A cell's mean and
    interval are `mean_interval`'s for its scores: a function of those scores alone, so they do
    not change when other groups are added or removed, nor with the rows' order. `seed` seeds
    the bootstrap (`method="bootstrap"`, or scores outside [0, 1]) and nothing else.

    Pass rates, where a metric's threshold is known (`thresholds=` / `strict=` here, else
    the file's metadata, else a Boolean `{metric}_pass` column, used as written): the table
    gets `threshold` and `strict` (null where only a pass column is known), `passed` (rows
    passing), `pass_rate` (passed / scored: the share of *scored* rows that pass; rows that
    failed to score are left out here and stay visible in `failed`; a gate counts them
    against the rate, see `ragframe.gates`) and `status`, "✅" when the mean meets the
    threshold (`Threshold.mean_passes`), "❌" when not, null without a threshold or a mean.
    """
    _check_options(level, seed, method)
    lazy, meta, where = load_scored(data)
    try:
        schema = lazy.collect_schema()
        groups = [by] if isinstance(by, str) else list(by or [])
        missing = [g for g in groups if g not in schema]
        if missing:
            raise InputError(
                f"by= names {missing}, which {where} lacks; its columns are {schema.names()}"
            )
        names = _metric_names(schema, metrics, meta, groups)
        rules = pass_rules(names, schema, meta, thresholds=thresholds, strict=strict)
        frame = lazy.select(
            *groups,
            *(pl.col(m).cast(pl.Float64).fill_nan(None).alias(m) for m in names),
            *(rule.expr().alias(f"{m}\0pass") for m, rule in rules.items()),
        ).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    long = _cell_stats(frame, names, groups)
    intervals = _cell_intervals(frame, long, groups, level, seed, method)
    table = long.with_columns(
        pl.Series("mean", [i.mean for i in intervals], pl.Float64),
        pl.Series("direction", [_direction(m, meta) for m in long["metric"]], pl.String),
        pl.Series("ci_low", [i.low for i in intervals], pl.Float64),
        pl.Series("ci_high", [i.high for i in intervals], pl.Float64),
        pl.lit(float(level)).alias("level"),
        pl.Series("method", [i.method for i in intervals], pl.String),
    )
    columns = [*groups, *SUMMARY_COLUMNS]
    if rules:
        table = _with_pass_rates(table, frame, groups, rules)
        columns += PASS_COLUMNS
    table = table.select(columns)
    drawn = sample if sample is not None else meta.get("sample")
    if drawn:
        table = table.with_columns(
            pl.lit(drawn.get("rows"), pl.Int64).alias("sample_rows"),
            pl.lit(drawn.get("of"), pl.Int64).alias("population_rows"),
        )
    return table


def load_scored(data: Any) -> tuple[pl.LazyFrame, dict[str, Any], str]:
    """The scores as a LazyFrame (a Parquet file is scanned, so only the columns a caller
    selects are read, never the details unless asked), the ragframe metadata ({} for a plain
    frame; a run's result gives its metrics' directions and configs), and what to call the
    source in a message."""
    from ragframe.io import INPUT_FORMATS, input_path, open_input, read_metadata

    if isinstance(data, pl.DataFrame):
        return data.lazy(), {}, "the frame"
    if isinstance(data, pl.LazyFrame):
        return data, {}, "the frame"
    if isinstance(getattr(data, "frame", None), pl.DataFrame) and hasattr(data, "metrics"):
        return data.frame.lazy(), _run_metadata(data), "the run's frame"
    if isinstance(data, str | Path):
        path = input_path(data)
        if INPUT_FORMATS.get(path.suffix.lower()) != "Parquet":
            return open_input(path).read().lazy(), {}, repr(str(path))
        try:
            return pl.scan_parquet(path), read_metadata(path), repr(str(path))
        except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
            raise InputError(f"cannot read {str(path)!r} as Parquet: {exc}") from exc
    raise InputError(
        f"cannot read scores from a {type(data).__name__}: pass a polars DataFrame or "
        "LazyFrame, the result of ragframe.run, or the path of a scored Parquet file"
    )


def _run_metadata(result: Any) -> dict[str, Any]:
    """What a file would record of a run's metrics (direction, config) and sample, without
    computing the run's summary (`RunResult.metadata` does)."""
    metrics: dict[str, Any] = {}
    for metric in result.metrics:
        config = getattr(metric, "config", None)
        metrics[metric.name] = {
            "direction": getattr(metric, "direction", None),
            "config": config() if callable(config) else {},
        }
    meta: dict[str, Any] = {"metrics": metrics}
    drawn = (getattr(result, "extra", None) or {}).get("sample")
    if drawn:
        meta["sample"] = drawn
    return meta


def score_columns(schema: pl.Schema, meta: Mapping[str, Any]) -> list[str]:
    """The log's metrics: those its metadata names, else every Float64 column with a
    `{name}_detail` sibling or named like a known metric."""
    recorded = [m for m in meta.get("metrics") or {} if m in schema]
    return recorded or [
        name
        for name, dtype in schema.items()
        if dtype == pl.Float64
        and (isinstance(schema.get(f"{name}_detail"), pl.Struct) or _known(name))
    ]


def _metric_names(
    schema: pl.Schema,
    metrics: Sequence[str] | None,
    meta: Mapping[str, Any],
    groups: list[str],
) -> list[str]:
    """The score columns: as given (checked), else from the metadata, else detected."""
    if isinstance(metrics, str):
        metrics = [metrics]
    if metrics is None:
        metrics = score_columns(schema, meta)
        if not metrics:
            raise InputError(
                "found no score columns (Float64 columns with a `{name}_detail` sibling, as "
                f"ragframe writes them) among {list(schema)}; pass metrics=['your_column']"
            )
    for name in metrics:
        if name not in schema:
            raise InputError(f"no column {name!r} to summarize; the columns are {list(schema)}")
        dtype = schema[name]
        if not (dtype.is_numeric() or dtype == pl.Boolean) or name in groups:
            raise InputError(
                f"column {name!r} is {dtype}, not scores; summarize numbers (Float64 scores, "
                "or Booleans such as a pass column), or cast it first"
            )
    return list(dict.fromkeys(metrics))


def _known(name: str) -> bool:
    from ragframe.metrics import REGISTRY

    return name in REGISTRY or name == "ragas_score"


def _direction(name: str, meta: Mapping[str, Any]) -> str | None:
    """From the file's metadata; for a frame, from the catalogue when the name is a metric's."""
    recorded = (meta.get("metrics") or {}).get(name) or {}
    if recorded.get("direction"):
        return str(recorded["direction"])
    from ragframe.metrics import REGISTRY

    if name == "ragas_score":
        return "higher"
    cls = REGISTRY.get(name)
    return str(cls.direction) if cls is not None else None


# ------------------------------------------------------------------------------ pass rules

#: The columns `summarize` adds when some metric's threshold is known.
PASS_COLUMNS = ("threshold", "strict", "passed", "pass_rate", "status")

RuleSource = Literal["argument", "metadata", "column", "default"]


@dataclass(frozen=True)
class PassRule:
    """How one metric's rows pass, and where that rule came from: a `Threshold` (from an
    argument, the file's metadata, or the default), or `threshold=None` when the log's own
    Boolean `{metric}_pass` column decides, used as written."""

    metric: str
    direction: str
    threshold: Threshold | None
    source: RuleSource

    def expr(self) -> pl.Expr:
        """Boolean per row: passed (null where the row has no score)."""
        if self.threshold is None:
            return pl.col(f"{self.metric}{PASS_SUFFIX}").cast(pl.Boolean)
        return self.threshold.passes(pl.col(self.metric).cast(pl.Float64).fill_nan(None))

    def describe(self) -> str:
        """'score >= 0.7', 'score <= 0.3', 'score = 1 (strict)', or 'column m_pass'."""
        rule = self.threshold
        if rule is None:
            return f"column {self.metric}{PASS_SUFFIX}"
        if rule.strict:
            return f"score = {0 if rule.direction == 'lower' else 1} (strict)"
        return f"score {'<=' if rule.direction == 'lower' else '>='} {rule.value:g}"


def pass_rules(
    metrics: Sequence[str],
    schema: pl.Schema,
    meta: Mapping[str, Any],
    *,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] | None = None,
    default: bool = False,
) -> dict[str, PassRule]:
    """Each metric's pass rule, first found: `thresholds` / `strict` given here (a metric
    named in `strict` alone keeps the recorded or default threshold, in strict mode), the
    threshold or strict mode the metadata's config records, a Boolean `{metric}_pass`
    column, and with `default=True` DEFAULT_THRESHOLD (without it, such a metric has no
    rule). Names in `thresholds` / `strict` that are not among `metrics` are refused."""
    given = {m: check_threshold(v, f"threshold for {m!r}") for m, v in (thresholds or {}).items()}
    strict_set = {strict} if isinstance(strict, str) else set(strict or ())
    unknown = sorted((set(given) | strict_set) - set(metrics))
    if unknown:
        raise ConfigError(
            f"a threshold or strict mode names {unknown}, not among the metrics {list(metrics)}"
        )
    rules: dict[str, PassRule] = {}
    for m in metrics:
        direction = _direction(m, meta) or "higher"
        config = ((meta.get("metrics") or {}).get(m) or {}).get("config") or {}
        recorded = _recorded_threshold(config)
        if m in given or m in strict_set:
            value = given.get(m, recorded if recorded is not None else DEFAULT_THRESHOLD)
            is_strict = m in strict_set or (m not in given and bool(config.get("strict")))
            rule = Threshold(float(value), is_strict, direction)  # type: ignore[arg-type]
            rules[m] = PassRule(m, direction, rule, "argument")
        elif recorded is not None or config.get("strict") is True:
            value = recorded if recorded is not None else DEFAULT_THRESHOLD
            rule = Threshold(float(value), bool(config.get("strict")), direction)  # type: ignore[arg-type]
            rules[m] = PassRule(m, direction, rule, "metadata")
        elif schema.get(f"{m}{PASS_SUFFIX}") == pl.Boolean:
            rules[m] = PassRule(m, direction, None, "column")
        elif default:
            rule = Threshold(DEFAULT_THRESHOLD, False, direction)  # type: ignore[arg-type]
            rules[m] = PassRule(m, direction, rule, "default")
    return rules


def _recorded_threshold(config: Mapping[str, Any]) -> float | None:
    """The threshold a metric's recorded config holds, when it is a number in [0, 1]."""
    value = config.get("threshold")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


def _with_pass_rates(
    table: pl.DataFrame, frame: pl.DataFrame, groups: list[str], rules: Mapping[str, PassRule]
) -> pl.DataFrame:
    """`table` with each cell's threshold, strict mode, rows passed, pass rate over scored
    rows, and the ✅ / ❌ of its mean against the threshold."""
    aggs = [
        expr
        for m in rules
        for expr in (
            pl.col(f"{m}\0pass").cast(pl.Int64).sum().alias(f"{m}\0passed"),
            pl.col(f"{m}\0pass").count().alias(f"{m}\0judged"),
        )
    ]
    wide = frame.group_by(groups).agg(aggs) if groups else frame.select(aggs)
    counts = pl.concat(
        [
            wide.select(
                *groups,
                pl.lit(m).alias("metric"),
                pl.col(f"{m}\0passed").cast(pl.Int64).alias("passed"),
                pl.col(f"{m}\0judged").cast(pl.Int64).alias("\0judged"),
            )
            for m in rules
        ],
        how="vertical",
    )
    table = table.join(counts, on=[*groups, "metric"], how="left", nulls_equal=True)
    status = [
        _status(rules.get(m), mean) for m, mean in zip(table["metric"], table["mean"], strict=True)
    ]
    value = {m: r.threshold.value for m, r in rules.items() if r.threshold is not None}
    strictness = {m: r.threshold.strict for m, r in rules.items() if r.threshold is not None}
    return table.with_columns(
        pl.col("metric")
        .replace_strict(value, default=None, return_dtype=pl.Float64)
        .alias("threshold"),
        pl.col("metric")
        .replace_strict(strictness, default=None, return_dtype=pl.Boolean)
        .alias("strict"),
        (pl.col("passed") / pl.col("\0judged")).fill_nan(None).alias("pass_rate"),
        pl.Series("status", status, pl.String),
    )


def _status(rule: PassRule | None, mean: float | None) -> str | None:
    if rule is None or rule.threshold is None:
        return None
    verdict = rule.threshold.mean_passes(mean)
    return None if verdict is None else ("✅" if verdict else "❌")


def direction_of(name: str, meta: Mapping[str, Any]) -> str:
    """A metric's direction (`summarize`'s rule), "higher" when neither the metadata nor
    the catalogue knows the name."""
    return _direction(name, meta) or "higher"


def _cell_stats(frame: pl.DataFrame, names: list[str], groups: list[str]) -> pl.DataFrame:
    """One row per group and metric: n, scored, failed, mean, and (for the intervals) the
    standard deviation, minimum and maximum, all in one Polars aggregation."""
    aggs = [
        expr
        for m in names
        for expr in (
            pl.len().alias(f"{m}\0n"),
            pl.col(m).count().alias(f"{m}\0scored"),
            pl.col(m).mean().alias(f"{m}\0mean"),
            pl.col(m).std().alias(f"{m}\0sd"),
            pl.col(m).min().alias(f"{m}\0min"),
            pl.col(m).max().alias(f"{m}\0max"),
        )
    ]
    wide = (
        frame.group_by(groups).agg(aggs).sort(groups, nulls_last=True)
        if groups
        else frame.select(aggs)
    )
    parts = [
        wide.select(
            *groups,
            pl.lit(m).alias("metric"),
            *(pl.col(f"{m}\0{s}").alias(s) for s in ("n", "scored", "mean", "sd", "min", "max")),
        )
        for m in names
    ]
    long = pl.concat(parts, how="vertical")
    if groups:  # group by group, the metrics in the order asked
        order = {m: i for i, m in enumerate(names)}
        long = (
            long.with_columns(
                pl.col("metric").replace_strict(order, return_dtype=pl.Int64).alias("\0order")
            )
            .sort([*groups, "\0order"], nulls_last=True, maintain_order=True)
            .drop("\0order")
        )
    return long.with_columns(
        pl.col("n").cast(pl.Int64),
        pl.col("scored").cast(pl.Int64),
        (pl.col("n") - pl.col("scored")).cast(pl.Int64).alias("failed"),
    )


def _cell_intervals(
    frame: pl.DataFrame,
    long: pl.DataFrame,
    groups: list[str],
    level: float,
    seed: int,
    method: Method,
) -> list[Interval]:
    """Each cell's `mean_interval`, on that cell's scores only (bounded to [0, 1] unless a
    score lies outside)."""
    values = _cell_values(frame, long, groups, list(range(long.height)))
    found: list[Interval] = []
    for i in range(long.height):
        *key, metric = long.row(i)[: len(groups) + 1]
        x = values.get((metric, *key), np.empty(0))
        inside = not x.size or (x.min() >= 0 and x.max() <= 1)
        chosen: Method = method if inside or method != "score" else "auto"
        bounds = (0.0, 1.0) if inside else None
        found.append(mean_interval(x, level, seed=seed, method=chosen, bounds=bounds))
    return found


def _cell_values(
    frame: pl.DataFrame, long: pl.DataFrame, groups: list[str], cells: list[int]
) -> dict[tuple[Any, ...], np.ndarray]:
    """The non-null scores of the cells to bootstrap, keyed by (metric, *group values); only
    the groups concerned are gathered."""
    wanted = long[cells].select(*groups, "metric")
    values: dict[tuple[Any, ...], np.ndarray] = {}
    for (metric,), keys in wanted.group_by("metric", maintain_order=True):
        metric = str(metric)
        rows = frame.join(keys.drop("metric"), on=groups, nulls_equal=True) if groups else frame
        if groups:
            lists = rows.group_by(groups).agg(pl.col(metric).drop_nulls())
            for key, scores in zip(lists.select(groups).rows(), lists[metric], strict=True):
                values[(metric, *key)] = scores.to_numpy()
        else:
            values[(metric,)] = rows.get_column(metric).drop_nulls().to_numpy()
    return values
