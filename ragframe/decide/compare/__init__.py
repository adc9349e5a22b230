"""Compare two scored runs: is b better than a, by how much, and how sure can one be?

`compare(a, b, on="id")` pairs the rows of two scored logs by key (the same questions under two
setups) and gives, per metric (and group, with `by=`), the mean difference b - a with its
interval and a p-value, wins / ties / losses, and every row it could not pair, counted and
listed. With `on=None` the two logs are compared as independent samples.

Methods (n: the pairs, or each side's scores; nulls and NaN left out):

- Paired interval: the mean of the differences d = b - a with `ragframe.stats.mean_interval`
  (bounds [-1, 1], mapped onto [0, 1]): the quasi-binomial score interval with its continuity
  correction (no resampling: a closed form of n, the sums, the minimum and maximum of d) up to
  BOOTSTRAP_MAX_N pairs, Student's t past it, the exact bound when every d is equal, to
  within rounding (0.8 - 0.55 and 1.0 - 0.75 are one difference; the `method` column says
  which: "score", "t", "exact-bound"). The exact bound is the tightest an interval for the
  mean of values in [-1, 1] can be: six d of -0.75 give [-0.865, +0.054], since a d of -0.75
  with probability 4/7 and +1 otherwise has mean 0 and gives six -0.75 3.5 % of the time.
- Paired p-value: the sign-flip permutation test (under "no effect" each d is as likely to be
  -d). Exact, over all 2**n sign vectors, up to EXACT_MAX_N pairs; past it PERMUTATIONS random
  sign vectors, p = (1 + #{|mean*| >= |mean|}) / (1 + PERMUTATIONS), so p is never 0 (the
  smallest p it can give is about 1e-4, printed "<0.001" as any p below 0.001). When the |d|
  take few distinct values (verdict fractions), the flips are drawn as binomial counts per
  value, at any n; otherwise past BOOTSTRAP_MAX_N pairs, the paired t-test. It tests another
  null than the interval's (symmetry, not a mean of 0): six drops of six give p = 2/64 while
  the interval of the mean holds 0, and then the verdict (which needs both) is "no clear
  difference".
- Unpaired interval: each side resampled on its own (RESAMPLES bootstrap means each), the
  percentile interval of the differences expanded as `stats` does, with Welch's standard error
  and degrees of freedom; Welch's t interval once either side passes BOOTSTRAP_MAX_N scores.
  When a side's scores are all equal ("sides-bound"): each side's own interval at level
  1 - (1 - level) / 2, the exact bound for the equal side, combined (Bonferroni), since
  resampling would take that side's mean as known exactly.
- Unpaired p-value: the permutation test of the labels a / b (PERMUTATIONS shuffles; drawn as
  multivariate hypergeometric counts when the pooled scores take few distinct values); Welch's
  t-test once the pooled scores pass PERMUTATION_MAX_N (= BOOTSTRAP_MAX_N).
- `better` is "b" or "a" only when both agree that the difference is real: the interval
  excludes 0 and p < 1 - level; null otherwise. Wins, losses and `better` respect the metric's
  direction (hallucination: lower is better, so a lower b is a win). A metric whose direction
  is unknown (no metadata, not a known metric) is read as higher-is-better, and a warning says
  so.

`check_regression(a, b, ["faithfulness"], on="id", margin=0.05)` (or
`Comparison.check_regression`) says whether b is worse than a on the metrics named, the check
`ragframe compare --fail-if-worse` fails a build on (the rule: `_regression`'s docstring). It
reads its own figures of those metrics: over all rows (and, with `by=`, per group too), with
b's failed rows counted as the worst score unless `ignore_failed=True`.

Every cell is seeded by (seed, metric, group), so adding a group or a metric does not move the
others' figures. The intervals assume the rows are independent draws from the logs one means
to compare.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ragframe.decide.compare._cells import TABLE_COLUMNS, failed_warnings, left_out_warnings
from ragframe.decide.compare._paired import compare_paired, most_changed
from ragframe.decide.compare._regression import (
    RegressionCheck,
    RegressionUnknownWarning,
    check_margin,
    check_metrics,
    format_p,
    warn_unknown,
)
from ragframe.decide.compare._result import Comparison
from ragframe.decide.compare._sides import (
    Side,
    check_options,
    load_side,
    metric_directions,
    metric_names,
    name_list,
    provenance_warnings,
    require,
)
from ragframe.decide.compare._stats import EXACT_MAX_N, PERMUTATIONS
from ragframe.decide.compare._unpaired import compare_unpaired
from ragframe.decide.summarize import score_columns
from ragframe.errors import ConfigError, InputError

__all__ = [
    "EXACT_MAX_N",
    "PERMUTATIONS",
    "TABLE_COLUMNS",
    "UNPAIRED_WARNING",
    "Comparison",
    "RegressionCheck",
    "RegressionUnknownWarning",
    "check_regression",
    "compare",
    "format_p",
]

UNPAIRED_WARNING = (
    "unpaired (two-sample) comparison: a paired design (on= a key column, the same questions "
    "scored under both setups) is stronger, since it removes the question-to-question "
    "variation from the difference"
)


def compare(
    a: Any,
    b: Any,
    *,
    on: str | Sequence[str] | None = None,
    by: str | Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    level: float = 0.95,
    seed: int = 0,
    changed: int = 10,
    storage_options: Mapping[str, Any] | None = None,
) -> Comparison:
    """Compare run b against run a, metric by metric (methods: module docstring).

    a, b : scored frames (Polars or pandas) or the paths of scored Parquet files (their
        metadata gives the metrics' directions, judges and prompt hashes). Every score is in
        [0, 1] (null or NaN: a row that failed); a 7.5 is an InputError naming its side,
        column and row.
    on : key column(s) pairing a row of a with a row of b (unique on each side): a paired
        comparison, the stronger design. None: two independent samples.
    by : group column(s): one comparison per group (paired: read from a, or b for keys only b
        has).
    metrics : the score columns; by default those both sides have (from the metadata, else
        every Float64 column with a `{name}_detail` sibling).
    level : the intervals' confidence level; seed : makes bootstraps and permutations
        reproducible; changed : how many most-changed pairs to keep per metric.
    storage_options : for a side given as a URL (`s3://...`), Polars' storage options (else
        the store's environment variables).
    """
    started = time.perf_counter()
    check_options(level, seed, changed)
    side_a, side_b = load_side(a, "a", storage_options), load_side(b, "b", storage_options)
    return _compare(side_a, side_b, on, by, metrics, level, seed, changed, started)


def check_regression(
    a: Any,
    b: Any,
    metrics: Sequence[str] | str,
    *,
    margin: float = 0.0,
    on: str | Sequence[str] | None = None,
    by: str | Sequence[str] | None = None,
    compared: Sequence[str] | None = None,
    level: float = 0.95,
    seed: int = 0,
    changed: int = 10,
    ignore_failed: bool = False,
    fail_if_unknown: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> RegressionCheck:
    """Is b worse than a on `metrics`? `compare(a, b, ...)`, then
    `Comparison.check_regression(metrics, margin)`: a metric is worse when the interval of
    b - a lies wholly below -margin (above +margin when lower is better) and p < 1 - level,
    over all rows or (with `by=`) in any group. A row of b that failed to score counts as the
    worst score (0; 1 when lower is better), as a gate counts it, unless `ignore_failed`. A
    metric too thin to tell (no interval, or so few rows that p cannot reach 1 - level) is
    "cannot tell": a warning (`RegressionUnknownWarning`), not a failure, unless
    `fail_if_unknown`. `.passed` is True when nothing failed; `.comparison` is the whole
    comparison (of `compared` too: other metrics to show, by default every metric both have).
    A metric either side lacks is a ConfigError naming the side.
    """
    started = time.perf_counter()
    check_options(level, seed, changed)
    names, margin = check_metrics(metrics), check_margin(margin)
    side_a, side_b = load_side(a, "a", storage_options), load_side(b, "b", storage_options)
    for name in names:
        for side in (side_a, side_b):
            if name not in side.schema:
                raise ConfigError(
                    f"the regression check names {name!r}, which {side.where} lacks; its "
                    f"metrics are {score_columns(side.schema, side.meta)} (check a metric both "
                    "files score, or fix the name)"
                )
    found = _compare(side_a, side_b, on, by, compared, level, seed, changed, started, names)
    check = found._regression_check(
        names, margin, ignore_failed=ignore_failed, fail_if_unknown=fail_if_unknown
    )
    warn_unknown(check)
    return check


def _compare(
    side_a: Side,
    side_b: Side,
    on: str | Sequence[str] | None,
    by: str | Sequence[str] | None,
    metrics: Sequence[str] | None,
    level: float,
    seed: int,
    changed: int,
    started: float,
    also: Sequence[str] = (),
) -> Comparison:
    """`compare` on loaded sides; `also`: metrics compared besides `metrics` (or the default)."""
    keys, groups = name_list(on), name_list(by)
    warnings: list[str] = []
    try:
        names = metric_names(side_a, side_b, metrics, [*keys, *groups], warnings)
    except InputError:  # no score column both have by default: the ones named must do
        if metrics is not None or not also:
            raise
        names = []
    extra = [m for m in also if m not in names]
    names += metric_names(side_a, side_b, extra, [*keys, *groups], warnings) if extra else []
    directions = metric_directions(names, side_a, side_b, warnings)
    warnings += provenance_warnings(side_a, side_b, names)
    try:
        if keys:
            found = compare_paired(side_a, side_b, keys, groups, names, directions, level, seed)
            table, unmatched, joined = found
            warnings += left_out_warnings(table, unmatched, keys)
            most = most_changed(joined, side_a, side_b, keys, groups, names, changed)
        else:
            require(groups, (side_a, side_b), "by=")
            warnings.insert(0, UNPAIRED_WARNING)
            table = compare_unpaired(side_a, side_b, groups, names, directions, level, seed)
            unmatched, most = pl.DataFrame({"side": []}, schema={"side": pl.String}), {}
            warnings += failed_warnings(table, paired=False)
    except (pl.exceptions.PolarsError, OSError) as exc:  # e.g. a group column typed differently
        raise InputError(f"cannot compare {side_a.where} with {side_b.where}: {exc}") from exc
    seconds = time.perf_counter() - started

    def regression_table(checked: list[str], count_failed: bool) -> pl.DataFrame:
        return _regression_table(
            side_a, side_b, keys, groups, checked, directions, level, seed, count_failed
        )

    return Comparison(
        table,
        unmatched,
        most,
        warnings,
        bool(keys),
        keys,
        groups,
        float(level),
        seconds,
        regression_table,
    )


def _regression_table(
    side_a: Side,
    side_b: Side,
    keys: list[str],
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
    count_failed: bool,
) -> pl.DataFrame:
    """The regression check's figures of `names`: over all rows (`overall` True), then per
    group with `by=` (a drop spread over the groups can hide in each, as one group's can in
    the whole); when `count_failed`, b's failed rows at the metric's worst score (paired: where
    a scored; unpaired: both sides' failed rows, there being no pair to leave out with one)."""
    worst = {m: 1.0 if directions[m] == "lower" else 0.0 for m in names} if count_failed else {}
    tables = []
    for cells in [[], groups] if groups else [[]]:
        try:
            if keys:
                table = compare_paired(
                    side_a, side_b, keys, cells, names, directions, level, seed, worst
                )[0]
            else:
                table = compare_unpaired(
                    side_a, side_b, cells, names, directions, level, seed, worst
                )
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"cannot compare {side_a.where} with {side_b.where}: {exc}") from exc
        tables.append(table.with_columns(pl.lit(not cells).alias("overall")))
    if len(tables) == 1:
        return tables[0]
    overall, grouped = tables
    return pl.concat([overall, grouped], how="diagonal_relaxed").select(grouped.columns)
