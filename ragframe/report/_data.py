"""The aggregates a report embeds, computed in Polars: pre-binned histograms, per-group means
and pass rates with intervals, the worst rows, the failures by reason. Never every row: a
report's size depends on the number of metrics, groups and `worst`, not on the log's rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ragframe.inputs.columns import ALIASES, CANONICAL
from ragframe.report._source import MAX_GROUPS, PassRule, Source

#: The row's position in the log (0-based), added by the report.
IDX = "__ragframe_report_row"
#: The group label column ("a · b" for several `by` columns).
LABEL = "__ragframe_report_group"
#: Histogram bins over [0, 1].
BINS = 20
#: Distinct error messages listed per metric.
MAX_CAUSES = 10
#: Columns that identify a row, shown beside the worst rows when present.
ID_NAMES = ("id", "row_id", "row_index", "question_id", "query_id", "sample_id", "uuid")


@dataclass(frozen=True)
class Light:
    """The score, group and pass columns of every row of the log (no text, no details), with
    the row position and the group label. `kept`: the labels of the groups the group views
    show, when there are more than MAX_GROUPS (the largest); None when all are shown."""

    frame: pl.DataFrame
    groups: list[str]
    groups_total: int
    kept: pl.Series | None

    @property
    def groups_shown(self) -> int:
        return self.groups_total if self.kept is None else self.kept.len()

    def grouped(self) -> pl.DataFrame:
        """The rows of the groups shown (every row when no group was left out)."""
        if self.kept is None:
            return self.frame
        return self.frame.filter(pl.col(LABEL).is_in(self.kept.implode()))

    def whole(self) -> pl.DataFrame:
        """Every row, as one group labelled "all rows"."""
        return self.frame.with_columns(pl.lit("all rows").alias(LABEL))


def light_frame(
    source: Source, metrics: Sequence[str], groups: Sequence[str], rules: Mapping[str, PassRule]
) -> Light:
    """One scan of the columns the figures need (scores, groups, pass values); a score
    outside [0, 1] is refused in that scan (no histogram clips a 7.5 into its last bin)."""
    from ragframe.decide.summarize import checked_scores, score_values

    label = (
        pl.concat_str(
            [pl.col(g).cast(pl.String).fill_null("(null)") for g in groups], separator=" · "
        )
        if groups
        else pl.lit("all rows")
    )
    exprs = [
        IDX,
        *groups,
        label.alias(LABEL),
        *(score_values(m) for m in metrics),
        *(rule.expr().alias(f"{m}_pass") for m, rule in rules.items()),
    ]
    frame = checked_scores(source.lazy.with_row_index(IDX), exprs, metrics, source.label)
    total = frame[LABEL].n_unique()
    kept = None
    if total > MAX_GROUPS:
        kept = (
            frame.group_by(LABEL)
            .len()
            .sort(["len", LABEL], descending=[True, False])
            .head(MAX_GROUPS)[LABEL]
        )
    return Light(frame, list(groups), total, kept)


def group_order(light: Light) -> list[str]:
    """Group labels sorted by the group values (as `summarize` sorts them)."""
    if not light.groups:
        return ["all rows"]
    keys = light.grouped().select(*light.groups, LABEL).unique()
    return keys.sort(light.groups, nulls_last=True)[LABEL].to_list()


def histograms(light: Light, metrics: Sequence[str], max_lines: int) -> pl.DataFrame:
    """Per metric (and group, for 2..max_lines groups; else the whole log), BINS bins over
    [0, 1]: start, end, rows, and the share of the group's scored rows (every bin present,
    empty ones at 0). 1.0 falls in the last bin."""
    per_group = 1 < light.groups_total <= max_lines
    frame = light.frame if per_group else light.whole()
    grid = frame.select(pl.col(LABEL).unique()).join(
        pl.DataFrame({"bin": list(range(BINS))}, schema={"bin": pl.Int32}), how="cross"
    )
    parts = []
    for m in metrics:
        counts = (
            frame.filter(pl.col(m).is_not_null())
            .group_by(
                LABEL, (pl.col(m) * BINS).floor().clip(0, BINS - 1).cast(pl.Int32).alias("bin")
            )
            .agg(pl.len().cast(pl.Int64).alias("rows"))
        )
        full = grid.join(counts, on=[LABEL, "bin"], how="left").with_columns(
            pl.col("rows").fill_null(0)
        )
        parts.append(
            full.with_columns(
                pl.lit(m).alias("metric"),
                (pl.col("bin") / BINS).alias("start"),
                ((pl.col("bin") + 1) / BINS).alias("end"),
                (pl.col("rows") / pl.col("rows").sum().over(LABEL)).fill_nan(None).alias("share"),
            )
        )
    return pl.concat(parts).sort("metric", LABEL, "bin").rename({LABEL: "group"})


def pass_table(frame: pl.DataFrame, rules: Mapping[str, PassRule], level: float) -> pl.DataFrame:
    """Per group label and metric with a pass rule: rows, scored, passed, the pass rate over
    all rows (a row that failed to score does not pass) with its interval, and the rate among
    scored."""
    from ragframe.decide.summarize import summarize

    if not rules:
        return pl.DataFrame()
    cols = [f"{m}_pass" for m in rules]
    frame = frame.select(
        LABEL,
        *(pl.col(c).fill_null(False).alias(c) for c in cols),
        *(pl.col(c).is_not_null().alias(f"{c}\0scored") for c in cols),
    )
    table = summarize(frame, metrics=cols, by=LABEL, level=level)
    counts = pl.concat(
        frame.group_by(LABEL).agg(
            pl.lit(c).alias("metric"),
            pl.col(c).sum().cast(pl.Int64).alias("passed"),
            pl.col(f"{c}\0scored").sum().cast(pl.Int64).alias("scored_rows"),
        )
        for c in cols
    )
    return (
        table.join(counts, on=[LABEL, "metric"], how="left")
        .with_columns(
            pl.col("metric").str.strip_suffix("_pass"),
            (pl.col("passed") / pl.col("scored_rows")).alias("rate_of_scored"),
        )
        .select(
            pl.col(LABEL).alias("group"),
            "metric",
            "n",
            pl.col("scored_rows").alias("scored"),
            "passed",
            pl.col("mean").alias("rate"),
            "ci_low",
            "ci_high",
            "rate_of_scored",
        )
    )


def worst_rows(
    light: Light, metrics: Sequence[str], directions: Mapping[str, str], worst: int
) -> dict[str, list[int]]:
    """Per metric, the positions of its `worst` lowest-scored rows (highest for a
    lower-is-better metric), ties by position; rows that failed to score are left out."""
    found: dict[str, list[int]] = {}
    for m in metrics:
        found[m] = (
            light.frame.filter(pl.col(m).is_not_null())
            .sort([m, IDX], descending=[directions[m] == "lower", False])
            .head(worst)[IDX]
            .to_list()
        )
    return found


def display_columns(schema: pl.Schema, groups: Sequence[str]) -> list[str]:
    """Columns that say which row it is and what was judged: ids, groups, the canonical text
    columns and their ragas / deepeval aliases."""
    texts = [*CANONICAL, *ALIASES]
    wanted = [*(c for c in ID_NAMES if c in schema), *groups, *(c for c in texts if c in schema)]
    return list(dict.fromkeys(wanted))


def gather(source: Source, positions: Sequence[int], columns: Sequence[str]) -> dict[int, dict]:
    """The rows at these positions, as dicts keyed by position. From a file, only the row
    groups holding them are read, batch by batch, so the texts and verdicts of the whole log
    are never held at once."""
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    if wanted.size == 0:
        return {}
    if source.path is not None:
        rows = _gather_file(source.path, wanted, columns)
    else:
        rows = (
            source.lazy.with_row_index(IDX)
            .filter(pl.col(IDX).is_in(pl.Series(wanted).cast(pl.UInt32).implode()))
            .select(IDX, *columns)
            .collect()
        )
    return {int(row[IDX]): row for row in rows.iter_rows(named=True)}


def _gather_file(path: Path, wanted: np.ndarray, columns: Sequence[str]) -> pl.DataFrame:
    """`wanted` rows (sorted positions) of a Parquet file: a buffered reader (no column chunk
    read whole) over the row groups that hold them, stopping past the last one needed."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False)
    sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    parts = []
    for group in np.unique(np.searchsorted(starts, wanted, side="right") - 1):
        offset, last = int(starts[group]), int(wanted[wanted < starts[group + 1]].max())
        batches = parquet.iter_batches(batch_size=2048, row_groups=[int(group)], columns=columns)
        for batch in batches:
            picked = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)]
            if picked.size:
                part = pl.from_arrow(batch.take(picked - offset))
                assert isinstance(part, pl.DataFrame)
                parts.append(part.with_columns(pl.Series(IDX, picked, pl.UInt32)))
            offset += batch.num_rows
            if offset > last:
                break
    return pl.concat(parts, how="vertical_relaxed")


def _leaf(source: Source, column: str, field: str) -> pl.Series:
    """One field of a struct column for every row; from a file only that field's leaf column
    is read (not the verdict lists beside it)."""
    if source.path is not None and "." not in column:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(source.path).read(columns=[f"{column}.{field}"])
        struct = pl.from_arrow(table.column(column).combine_chunks())
        assert isinstance(struct, pl.Series)
        return struct.struct.field(field)
    return source.lazy.select(pl.col(column).struct.field(field)).collect().to_series()


def failure_causes(source: Source, metrics: Sequence[str]) -> dict[str, pl.DataFrame]:
    """Per metric with rows that failed to score (over the whole log): each distinct
    `_detail.error` (MAX_CAUSES most frequent), its row count and the first rows it hit."""
    schema = source.lazy.collect_schema()
    scores = source.lazy.select(
        pl.col(m).cast(pl.Float64).fill_nan(None).is_null().alias(m) for m in metrics
    ).collect()
    out: dict[str, pl.DataFrame] = {}
    for m in metrics:
        failed_at = scores[m].arg_true()
        if failed_at.len() == 0:
            continue
        detail = schema.get(f"{m}_detail")
        has_error = isinstance(detail, pl.Struct) and "error" in {f.name for f in detail.fields}
        errors = (
            _leaf(source, f"{m}_detail", "error").cast(pl.String).gather(failed_at)
            if has_error
            else pl.Series([None] * failed_at.len(), dtype=pl.String)
        )
        failed = pl.DataFrame({IDX: failed_at, "error": errors.fill_null("(no reason recorded)")})
        out[m] = (
            failed.group_by("error")
            .agg(pl.len().alias("rows"), pl.col(IDX).sort().head(5).alias("examples"))
            .sort(["rows", "error"], descending=[True, False])
            .head(MAX_CAUSES)
            .with_columns(pl.lit(failed.height).alias("failed"))
        )
    return out


def group_means(
    light: Light, metrics: Sequence[str], directions: Mapping[str, str], level: float
) -> pl.DataFrame:
    """`summarize` per group label (the groups kept) and metric, directions from the log."""
    from ragframe.decide.summarize import summarize

    table = summarize(light.grouped(), metrics=list(metrics), by=LABEL, level=level)
    return table.rename({LABEL: "group"}).with_columns(
        pl.col("metric").replace_strict(dict(directions), return_dtype=pl.String).alias("direction")
    )


def as_records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """A small frame as JSON-ready records (the charts' inline data)."""
    return frame.to_dicts()
