"""Means with honest intervals: one metric's scores (`mean_interval`), or a scored log per
group and metric (`summarize`).

The interval, by how many scores it rests on (n, nulls and NaN left out):

- n == 0: no mean, no interval. n == 1: the mean, no interval (one value says nothing about
  spread; any width would be invented).
- 2 <= n <= BOOTSTRAP_MAX_N: a bootstrap ("bootstrap"): RESAMPLES resamples of the scores,
  drawn at once as an index matrix (in blocks, to bound memory) or, when the scores take few
  distinct values (verdict fractions), as multinomial counts of those values; no Python loop
  per resample. The interval is the *expanded* percentile interval (Hesterberg 2015, "What
  teachers should know about the bootstrap"): the percentiles are taken at a level widened by
  sqrt(n / (n - 1)) * t(n - 1) / z, which removes the plain percentile interval's known
  narrowness at small n (its coverage at n = 10 is near 90 % for a 95 % interval). It follows
  the skew of bounded scores near 0 or 1, where a symmetric interval would leave [0, 1].
- n > BOOTSTRAP_MAX_N: Student's t ("t"), mean +- t(n - 1) * s / sqrt(n). Past a few
  thousand bounded scores the sample mean is normal to well within the bootstrap's own
  Monte Carlo error, and this costs nothing.
- Every score at one bound (all 1.0, all 0.0), n >= 2: the interval from the exact binomial
  bound ("exact-bound"): a score in [0, 1] with mean m is 1 with probability at most m, so n
  ones in a row happen with probability at most m**n, and the interval is
  [(alpha / 2) ** (1 / n), 1] (mirrored for zeros). A bootstrap or a t interval would give
  [1, 1] there, claiming a certainty that 30 rows do not give.

Intervals are clipped to the scores' bounds ([0, 1] by default). They assume the rows are
independent draws (a random sample of a log, see `ragframe.sample`); a sample that is a large
share of its log makes them conservative (no finite-population correction is applied).
"""

from __future__ import annotations

import math
import zlib
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

#: Up to this many scores, the bootstrap; past it, Student's t (see the module docstring).
BOOTSTRAP_MAX_N = 5000
#: Bootstrap resamples per interval: Monte Carlo error of a 2.5 % percentile about 0.35 %.
RESAMPLES = 2000
#: Index-matrix elements drawn at once (32 MiB of int64): bounds the bootstrap's memory.
_BLOCK_ELEMENTS = 1 << 22

Method = Literal["auto", "bootstrap", "t"]
METHODS = ("auto", "bootstrap", "t")


@dataclass(frozen=True)
class Interval:
    """A mean and its confidence interval. `n` counts the scores used (nulls and NaN left
    out); `mean` is None when n == 0, `low` / `high` are None when n < 2. `method` is
    "bootstrap", "t", "exact-bound", or "none" when there is no interval."""

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
    and NaN are dropped. `method`: "auto" (bootstrap up to BOOTSTRAP_MAX_N scores, t beyond),
    "bootstrap" or "t". `seed` makes the bootstrap reproducible. `bounds`: the range scores
    live in (the interval is clipped to it; a value outside is an error); None for unbounded.
    """
    _check_options(level, seed, method)
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
    n = int(x.size)
    if n == 0:
        return Interval(0, None, None, None, "none", level)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    found = _closed_form(n, mean, sd, float(x.min()), float(x.max()), level, method, bounds)
    if found is not None:
        return found
    return _bootstrap_interval(x, level, np.random.default_rng(seed), bounds)


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
    """The interval from summary statistics alone (n, mean, standard deviation with ddof=1,
    and, when known, the minimum and maximum), for scores folded chunk by chunk with no
    values kept: Student's t, or the exact bound when every score sits at one bound (given
    minimum == maximum). The same figures `mean_interval` gives past BOOTSTRAP_MAX_N."""
    _check_options(level, 0, "t")
    if n == 0 or mean is None:
        return Interval(0, None, None, None, "none", level)
    low = minimum if minimum is not None else -math.inf
    high = maximum if maximum is not None else math.inf
    args = (int(n), float(mean), float(sd or 0.0), low, high, level)
    found = _closed_form(*args, "auto", bounds) or _closed_form(*args, "t", bounds)
    assert found is not None  # "t" always gives one
    return found


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


def _closed_form(
    n: int,
    mean: float,
    sd: float,
    low: float,
    high: float,
    level: float,
    method: str,
    bounds: tuple[float, float] | None,
) -> Interval | None:
    """The interval when no resampling is needed (n < 2, all scores at a bound, t), else None.
    From summary statistics only, so `summarize` applies it to whole groups at once."""
    if n < 2:
        return Interval(n, mean, None, None, "none", level)
    if method == "auto" and bounds is not None and low == high and low in bounds:
        edge = (1 - level) / 2
        lo_b, hi_b = bounds
        reach = (hi_b - lo_b) * (1 - edge ** (1 / n))
        if low == hi_b:
            return Interval(n, mean, hi_b - reach, hi_b, "exact-bound", level)
        return Interval(n, mean, lo_b, lo_b + reach, "exact-bound", level)
    if method == "t" or (method == "auto" and n > BOOTSTRAP_MAX_N):
        half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
        return Interval(n, mean, *_clip(mean - half, mean + half, bounds), "t", level)
    return None


def _clip(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    if bounds is None:
        return low, high
    return min(max(low, bounds[0]), bounds[1]), min(max(high, bounds[0]), bounds[1])


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
    x: np.ndarray, level: float, rng: np.random.Generator, bounds: tuple[float, float] | None
) -> Interval:
    """The expanded percentile interval (module docstring) of the bootstrap means of `x`."""
    n = int(x.size)
    means = bootstrap_means(x, rng, RESAMPLES)
    widen = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1)
    tail = NormalDist().cdf(-widen)  # the one-sided tail the widened level leaves
    low, high = np.quantile(means, [tail, 1 - tail])
    mean = float(x.mean())
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
    `population_rows`, so no figure hides that it comes from n of total rows. Each group's
    bootstrap is seeded by (seed, metric, group), so a group's interval does not change when
    other groups are added or removed.

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
    method: str,
) -> list[Interval]:
    """Each cell's interval: closed forms from the aggregates, and a bootstrap (on that
    group's scores only) where the cell needs one."""
    bounds = (0.0, 1.0)
    cells = long.select("scored", "mean", "sd", "min", "max").rows()
    found: list[Interval | None] = []
    for scored, mean, sd, low, high in cells:
        if scored == 0:
            found.append(Interval(0, None, None, None, "none", level))
            continue
        out_of_bounds = bool(low < bounds[0] or high > bounds[1])
        found.append(
            _closed_form(
                scored, mean, sd or 0.0, low, high, level, method, None if out_of_bounds else bounds
            )
        )
    pending = [i for i, cell in enumerate(found) if cell is None]
    if pending:
        values = _cell_values(frame, long, groups, pending)
        for i in pending:
            *key, metric = long.row(i)[: len(groups) + 1]
            x = values[(metric, *key)]
            scoped = bounds if x.min() >= 0 and x.max() <= 1 else None
            found[i] = _bootstrap_interval(x, level, _cell_rng(seed, metric, key), scoped)
    return [cell for cell in found if cell is not None]


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


def _cell_rng(seed: int, metric: str, key: Sequence[Any]) -> np.random.Generator:
    """A generator for one cell, from the seed and the cell's identity (not its position)."""
    return np.random.default_rng([seed, zlib.crc32(repr((metric, *key)).encode())])
