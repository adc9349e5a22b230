"""`summarize`: a scored log's mean and interval per group and metric, with pass rates where a
threshold is known; and the readers every decision shares (`load_scored`, `score_columns`,
`pass_rules`, `direction_of`). The intervals are `ragframe.stats.mean_interval`'s."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.engine.result import is_pandas, pandas_as_polars, with_index
from ragframe.engine.summary import html_notes, html_table, text_table
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import RemotePath, StorageOptions
from ragframe.metrics.thresholds import (
    DEFAULT_THRESHOLD,
    PASS_SUFFIX,
    Threshold,
    check_threshold,
)
from ragframe.stats import (
    Interval,
    Method,
    check_options,
    format_interval,
    format_mean,
    mean_interval,
    outside_unit,
)

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
    storage_options: StorageOptions | None = None,
) -> Summary:
    """One row per group and metric: n (rows), scored, failed (null or NaN score), mean, its
    `level` interval (`mean_interval`'s methods; `ci_low` / `ci_high` null below 2 scores),
    and the metric's direction ("higher" / "lower" is better; null when unknown).

    `data`: a scored frame (Polars, or pandas: a named index such as the row id is kept as
    columns), `ragframe.run`'s result, or the path of a scored file, local or a URL
    (`s3://...`, read with `storage_options`, Polars' options for the store, else its
    environment variables; Parquet: its metadata gives the metrics, their directions,
    thresholds, and the sample the run scored, if any). `metrics`: the score columns; by
    default those the file's metadata names, else every Float64 column with a `{name}_detail`
    sibling (or named like a known metric). `by`: group columns (None: the whole log); a
    group column named like a column of this table (`metric`, `n`, `level`, `method`, ...:
    `OWN_COLUMNS`) is a ConfigError before anything is read: rename it first. `sample`:
    {"rows": n, "of": total} when the frame is a sample (a file says so itself); the table
    then gets `sample_rows` and `population_rows`, so no figure hides that it comes from n of
    total rows. A cell's mean and
    interval are `mean_interval`'s for its scores: a function of those scores alone, so they do
    not change when other groups are added or removed, nor with the rows' order. `seed` seeds
    the bootstrap (`method="bootstrap"`) and nothing else. Every score must be a number in
    [0, 1] or null / NaN (a row that failed): 7.5 is an InputError naming its column and row,
    and so is a text column (naming its first value that is no number).

    Pass rates, where a metric's threshold is known (`thresholds=` / `strict=` here, else
    the file's metadata, else a Boolean `{metric}_pass` column, used as written): the table
    gets `threshold` and `strict` (null where only a pass column is known), `passed` (rows
    passing), `pass_rate` (passed / scored: the share of *scored* rows that pass; rows that
    failed to score are left out here and stay visible in `failed`; a gate counts them
    against the rate, see `ragframe.decide.gates`) and `status`, "✅" when the *mean* meets
    the threshold (`Threshold.mean_passes`), "❌" when not, null without a threshold or a mean:
    it judges the mean, not the pass rate, and the display shows it beside the mean.

    The result is a `Summary`: a Polars DataFrame with exactly these columns, displayed (in
    Jupyter and by `print`) as the table a person reads, with a line saying what ✅ / ❌ judge.
    """
    check_options(level, seed, method)
    groups = list(dict.fromkeys([by] if isinstance(by, str) else by or []))
    refuse_clashing_groups(groups)
    lazy, meta, where = load_scored(data, storage_options=storage_options)
    frame, names, rules = _read(lazy, meta, where, groups, metrics, thresholds, strict)
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
    drawn = sample if sample is not None else meta.get("sample")
    return Summary(_with_sample(table.select(columns), drawn))


def refuse_clashing_groups(groups: Sequence[str]) -> None:
    """A ConfigError, in one line, for a group column named like a column of `summarize`'s
    table (`method`, `level`, `n`, ...): the table could not hold both, and renaming one
    silently would hide which is which. Refused before any file is read."""
    clash = [g for g in groups if g in OWN_COLUMNS]
    if clash:
        name = clash[0]
        raise ConfigError(
            f"by= names {name!r}, which is also a column of summarize's table "
            f"({', '.join(OWN_COLUMNS)}); rename that column first (in Python: "
            f"frame.rename({{{name!r}: {name + '_group'!r}}}))"
        )


def _with_sample(table: pl.DataFrame, drawn: Mapping[str, Any] | None) -> pl.DataFrame:
    """`sample_rows` and `population_rows` when the log is a sample, so no figure hides it."""
    if not drawn:
        return table
    return table.with_columns(
        pl.lit(drawn.get("rows"), pl.Int64).alias("sample_rows"),
        pl.lit(drawn.get("of"), pl.Int64).alias("population_rows"),
    )


def _read(
    lazy: pl.LazyFrame,
    meta: Mapping[str, Any],
    where: str,
    groups: list[str],
    metrics: Sequence[str] | None,
    thresholds: Mapping[str, float] | None,
    strict: Iterable[str] | None,
) -> tuple[pl.DataFrame, list[str], dict[str, PassRule]]:
    """The columns a summary needs (groups, scores as floats, each pass rule's verdict), read
    at once, with the metric names and their pass rules; a read that fails is an InputError."""
    try:
        schema = lazy.collect_schema()
        missing = [g for g in groups if g not in schema]
        if missing:
            raise InputError(
                f"by= names {missing}, which {where} lacks; its columns are {schema.names()}"
            )
        names = _metric_names(lazy, schema, metrics, meta, groups)
        rules = pass_rules(names, schema, meta, thresholds=thresholds, strict=strict)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    exprs = [
        *groups,
        *(score_values(m) for m in names),
        *(rule.expr().alias(f"{m}\0pass") for m, rule in rules.items()),
    ]
    return checked_scores(lazy, exprs, names, where), names, rules


def score_values(name: str) -> pl.Expr:
    """A score column as Float64, NaN as null (a row that failed to score), clipped to [0, 1]:
    rounding past a bound (`SCORE_SLACK`, which `not_a_score` lets through) is no score's
    meaning, and a mean, bin or gate of 1 + 2e-16 must read 1."""
    return pl.col(name).cast(pl.Float64).fill_nan(None).clip(0.0, 1.0).alias(name)


def not_a_score(name: str) -> pl.Expr:
    """`{name}\0bad`: True where a score lies outside [0, 1] by more than `SCORE_SLACK`
    (infinities included): `ragframe.stats.outside_unit`, the engine's rule too. Rounding past
    a bound (a harmonic mean of ones at 1 + 2e-16) is clipped by `score_values`, not refused.
    Null and NaN are rows that failed to score, not errors."""
    return outside_unit(pl.col(name).cast(pl.Float64)).alias(f"{name}\0bad")


def refuse_bad_scores(
    lazy: pl.LazyFrame, frame: pl.DataFrame, names: Iterable[str], where: str
) -> None:
    """An InputError naming the column, row and value of the first score `not_a_score` flags
    in `frame` (read from `lazy`): a score of 7.5 is never averaged, clipped or gated in
    silence. Every ragframe score is in [0, 1]."""
    for name in names:
        flags = frame.get_column(f"{name}\0bad")
        if not flags.any():
            continue
        row = int(flags.arg_max() or 0)
        value = lazy.select(pl.col(name)).slice(row, 1).collect().item()
        raise InputError(
            f"{where}, column {name!r}, row {row} (counting from 0): {value!r} is outside "
            "[0, 1]; scores are numbers from 0 to 1 (null or NaN for a row that failed to "
            "score). Fix or rescale the column (a 0-10 score: divide it by 10), or leave it out"
        )


def checked_scores(
    lazy: pl.LazyFrame, exprs: Iterable[pl.Expr | str], names: Iterable[str], where: str
) -> pl.DataFrame:
    """`lazy.select(*exprs)` collected, with every score column in `names` checked in the same
    pass: a score outside [0, 1] is `refuse_bad_scores`'s InputError (column, row, value), so
    no reader of a scored file averages, bins, calibrates or compares a 7.5. `exprs` must keep
    `lazy`'s rows (no filter, join or aggregation): a flagged row is then the file's row.
    A read that fails (a text column cast to Float64, a truncated file) is an InputError
    naming `where`, the one wrapper every reader shares."""
    names = list(dict.fromkeys(names))
    flags = [f"{m}\0bad" for m in names]
    try:
        frame = lazy.select(*exprs, *(not_a_score(m) for m in names)).collect()
        refuse_bad_scores(lazy, frame, names, where)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    return frame.drop(flags)


def first_non_number(lazy: pl.LazyFrame, name: str) -> str:
    """For a refusal of a text column as scores: " (row N: 'high' is not a number)" naming its
    first value that is no number, or "" when every value is one or null, or the column is no
    text (read only then)."""
    try:
        if lazy.collect_schema()[name] != pl.String:
            return ""
        values = lazy.select(pl.col(name).cast(pl.String)).collect().get_column(name)
    except (pl.exceptions.PolarsError, OSError):
        return ""
    bad = values.is_not_null() & values.cast(pl.Float64, strict=False).is_null()
    if not bad.any():
        return ""
    row = int(bad.arg_max() or 0)
    return f" (row {row}, counting from 0: {values[row]!r} is not a number)"


def load_scored(
    data: Any, *, storage_options: StorageOptions | None = None
) -> tuple[pl.LazyFrame, dict[str, Any], str]:
    """The scores as a LazyFrame (a Parquet file is scanned, so only the columns a caller
    selects are read, never the details unless asked), the ragframe metadata ({} for a plain
    frame; a run's result gives its metrics' directions and configs), and what to call the
    source in a message.

    `data`: a Polars DataFrame or LazyFrame, a pandas DataFrame (`evaluate`'s result for a
    pandas log: a named index, the row id, is kept as columns, as `RunResult.write_parquet`
    keeps it), `ragframe.run`'s result, or the path of a scored file, local or a URL
    (`s3://`, `gs://`, `az://`, `hf://`, `http(s)://`) read with Polars' `storage_options`
    (else the store's environment variables). Every decision reads its log through here."""
    from ragframe.inputs.io import INPUT_FORMATS, input_path, open_input, read_metadata

    if storage_options is not None and not isinstance(data, str | Path):
        raise ConfigError(
            "storage_options applies to a path (s3://..., gs://...), but the scores are a "
            f"{type(data).__name__}: drop storage_options, or pass the path"
        )
    if isinstance(data, pl.DataFrame):
        return data.lazy(), {}, "the frame"
    if isinstance(data, pl.LazyFrame):
        return data, {}, "the frame"
    if is_pandas(data) and hasattr(data, "columns"):
        return (
            pandas_as_polars(data, "read scores from the pandas frame").lazy(),
            {},
            ("the pandas frame"),
        )
    if isinstance(getattr(data, "frame", None), pl.DataFrame) and hasattr(data, "metrics"):
        # a pandas run's named index (its row id, often) is data, as its written file keeps it
        extra = getattr(data, "extra", None) or {}
        frame = with_index(data.frame, getattr(data, "source", None), extra.get("sample"))
        return frame.lazy(), _run_metadata(data), "the run's frame"
    if isinstance(data, str | Path):
        options = None if storage_options is None else dict(storage_options)
        path = input_path(data, storage_options=options)
        if INPUT_FORMATS.get(path.suffix.lower()) != "Parquet":
            return open_input(path, storage_options=options).read().lazy(), {}, repr(str(path))
        remote = options if isinstance(path, RemotePath) else None
        try:
            lazy = pl.scan_parquet(path, storage_options=remote)
            return lazy, read_metadata(path, storage_options=remote), repr(str(path))
        except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
            raise InputError(f"cannot read {str(path)!r} as Parquet: {exc}") from exc
    raise InputError(
        f"cannot read scores from a {type(data).__name__}: pass a polars or pandas DataFrame, "
        "a polars LazyFrame, the result of ragframe.run, or the path of a scored Parquet file"
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
    lazy: pl.LazyFrame,
    schema: pl.Schema,
    metrics: Sequence[str] | None,
    meta: Mapping[str, Any],
    groups: list[str],
) -> list[str]:
    """The score columns: as given (checked), else from the metadata, else detected (a
    group column is a group, not a metric, then)."""
    if isinstance(metrics, str):
        metrics = [metrics]
    if metrics is None:
        metrics = [m for m in score_columns(schema, meta) if m not in groups]
        if not metrics:
            raise InputError(
                "found no score columns (Float64 columns with a `{name}_detail` sibling, as "
                f"ragframe writes them) among {list(schema)}; pass metrics=['your_column']"
            )
    for name in metrics:
        if name not in schema:
            raise InputError(f"no column {name!r} to summarize; the columns are {list(schema)}")
        if name in groups:
            raise ConfigError(
                f"{name!r} is named both in by= and in metrics=: a column is either a group "
                "or scores; drop it from one of them"
            )
        dtype = schema[name]
        if not (dtype.is_numeric() or dtype == pl.Boolean):
            text = first_non_number(lazy, name)
            raise InputError(
                f"column {name!r} is {dtype}, not scores{text}; summarize numbers (Float64 "
                "scores, or Booleans such as a pass column), or cast it first"
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
#: Every column `summarize` may write after the groups: no group column may take one's name.
OWN_COLUMNS = (*SUMMARY_COLUMNS, *PASS_COLUMNS, "sample_rows", "population_rows")

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
        return self.threshold.passes(score_values(self.metric))

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
    """Each cell's `mean_interval`, on that cell's scores only, bounded to [0, 1] (`_read`
    refused any score outside)."""
    values = _cell_values(frame, long, groups, list(range(long.height)))
    found: list[Interval] = []
    for i in range(long.height):
        *key, metric = long.row(i)[: len(groups) + 1]
        x = values.get((metric, *key), np.empty(0))
        found.append(mean_interval(x, level, seed=seed, method=method, bounds=(0.0, 1.0)))
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


# ------------------------------------------------------------------------------ display

#: The columns the readable display needs; a frame without them displays as Polars does.
DISPLAY_NEEDS = ("metric", "n", "mean", "ci_low", "ci_high")
#: Columns the display formats as numbers when present (besides those it needs).
_NUMBERS = ("scored", "failed", "level", "threshold", "passed", "pass_rate")
#: Rows the display shows; it says how many more the frame holds.
DISPLAY_ROWS = 40
#: Every column `summarize` may return, each shown in some cell, header or note.
_KNOWN = set(OWN_COLUMNS)
#: Display columns that hold numbers (right-aligned).
DISPLAY_NUMBERS = {"n", "scored", "failed", "mean", "pass rate"}


def display_table(
    table: pl.DataFrame, groups: Sequence[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """`summarize`'s table as a person reads it: the group columns (by default those before
    `metric`), metric, direction, n, scored, failed, the mean and its interval, then, where
    some metric has a pass rule, the mark of the mean against the threshold beside it
    (`mean_mark`) and the pass rate with its counts; then any column a user added."""
    from ragframe.engine.summary import better_cell, mean_mark, pass_rate_cell

    columns = table.columns
    if groups is None:
        groups = [c for c in columns[: columns.index("metric")] if c not in _KNOWN]
    groups = list(groups)
    extras = [c for c in columns if c not in _KNOWN and c not in groups]
    rates = "pass_rate" in columns
    level = _first(table, "level")
    level = 0.95 if level is None else level
    headers = [*groups, "metric", "better", "n", "scored", "failed", "mean"]
    headers += [f"{level:.0%} interval", *(["mean vs threshold", "pass rate"] if rates else [])]
    rows = []
    for row in table.head(DISPLAY_ROWS).iter_rows(named=True):
        # A row a join added (how="right" / "full") holds nulls where summarize wrote counts.
        n, failed = row["n"], row.get("failed")
        counted = None if n is None else n - (failed or 0)
        scored = row.get("scored", counted)
        cells = [
            *("(null)" if row[g] is None else str(row[g]) for g in groups),
            "(null)" if row["metric"] is None else str(row["metric"]),
            better_cell(row.get("direction")),
            _cell(n),
            _cell(scored),
            _cell(failed),
            format_mean(row["mean"]),
            format_interval(row["ci_low"], row["ci_high"]),
        ]
        if rates:
            threshold = row.get("threshold")
            mark = mean_mark(row.get("status"), threshold, row.get("strict"), row.get("direction"))
            rate = pass_rate_cell(row["pass_rate"], row.get("passed"), scored)
            if threshold is None and row["pass_rate"] is not None:  # a pass column decides
                rate = f"{pass_rate_cell(row['pass_rate'], None, None)} by {row['metric']}_pass"
            cells += [mark, rate]
        rows.append(cells + [_cell(row[c]) for c in extras])
    return headers + extras, rows


def _cell(value: Any) -> str:
    """A cell's text: "-" for a null (a count a join left empty, a column a user added)."""
    return "-" if value is None else str(value)


def _first(table: pl.DataFrame, name: str) -> Any:
    """The column's first non-null value, or None (no such column, no rows, all null): a
    table a join extended may start with a row summarize did not write."""
    if name not in table.columns:
        return None
    values = table.get_column(name).drop_nulls()
    return values[0] if len(values) else None


def display_notes(table: pl.DataFrame) -> list[str]:
    """The lines under the table: what the marks judge, the intervals' methods, the rows not
    shown, and the sample the figures come from."""
    from ragframe.engine.summary import MARK_LEGEND

    notes = []
    if "pass_rate" in table.columns:
        notes += [
            MARK_LEGEND,
            "rows that failed to score are counted in `failed`, not in the rate",
        ]
    if "method" in table.columns and table.height:
        methods = sorted({m for m in table["method"].to_list() if m and m != "none"})
        if methods:
            notes.append(f"intervals: {', '.join(methods)} (see ragframe.stats)")
    if table.height > DISPLAY_ROWS:
        notes.append(
            f"showing the first {DISPLAY_ROWS} of {table.height} rows (the frame holds them "
            "all: filter or sort it to choose)"
        )
    drawn = _first(table, "sample_rows")
    if drawn is not None:
        of = _first(table, "population_rows")
        notes.append(
            f"figures from a sample: {drawn} of {'an unknown number of' if of is None else of} rows"
        )
    if not table.height:
        notes.append("no rows (a filter or a join left none)")
    return notes


def _frame_note(table: pl.DataFrame) -> str:
    """What the display stands for: a Polars frame, its shape and columns."""
    return (
        f"a polars DataFrame, {table.height} rows × {table.width} columns "
        f"({', '.join(table.columns)}); pl.DataFrame(table) displays it as Polars does"
    )


class Summary(pl.DataFrame):
    """`summarize`'s result: a Polars DataFrame, every column and dtype as documented (filter,
    join or write it as any frame), that displays as the table a person reads, in Jupyter
    (`_repr_html_`) and in a terminal (`repr` / `str`): per group and metric, n, the mean with
    its interval in full, the mark of the mean against the threshold beside it, and the pass
    rate with its counts, with a line saying what the mark judges.

    Row and column operations (`sort`, `filter`, `head`, `with_columns`, `join`, ...) keep
    this display while the result still holds `DISPLAY_NEEDS`; otherwise, and for any frame
    built from it anew (`pl.DataFrame(table)`, `pl.concat`), Polars' own display shows."""

    def _readable(self) -> bool:
        """Whether the frame still holds `DISPLAY_NEEDS` with numbers where the display
        formats numbers (a user may cast `mean` to text: Polars' display then shows it)."""
        schema = self.schema
        if not all(c in schema for c in DISPLAY_NEEDS):
            return False
        numbers = ("n", "mean", "ci_low", "ci_high", *(c for c in _NUMBERS if c in schema))
        return all(schema[c].is_numeric() or schema[c] == pl.Null for c in numbers)

    def __str__(self) -> str:
        if not self._readable():
            return super().__str__()
        headers, rows = display_table(self)
        lines = text_table(headers, rows, DISPLAY_NUMBERS)
        return "\n".join([*lines, *display_notes(self), _frame_note(self)])

    def __repr__(self) -> str:  # Polars' own repr is its str; so is this one
        return self.__str__()

    def _repr_html_(self, **kwargs: Any) -> str:
        if not self._readable():
            return super()._repr_html_(**kwargs)
        headers, rows = display_table(self)
        notes = html_notes([*display_notes(self), _frame_note(self)], muted=1)
        table = html_table(headers, rows, DISPLAY_NUMBERS)
        return f"<div class='ragframe-summarize'>{table}{notes}</div>"


#: The frame methods that build a new frame through a lazy query (so Polars hands back a plain
#: DataFrame); `Summary` wraps their result back, so its display survives them.
_REWRAPPED = (
    "sort",
    "filter",
    "remove",
    "unique",
    "top_k",
    "bottom_k",
    "reverse",
    "drop_nulls",
    "fill_null",
    "with_columns",
    "select",
    "drop",
    "rename",
    "cast",
    "join",
)


def _rewrapped(name: str) -> Callable[..., Any]:
    method = getattr(pl.DataFrame, name)

    @functools.wraps(method)
    def wrapped(self: Summary, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        return Summary(out) if type(out) is pl.DataFrame else out

    return wrapped


for _name in _REWRAPPED:
    setattr(Summary, _name, _rewrapped(_name))
