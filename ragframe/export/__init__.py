"""Scores back where the team looks: a scored file's metrics as Phoenix span evaluations,
LangSmith feedback or OpenTelemetry GenAI evaluation events, on the ids the rows came from.

The mapping (one record per scored row and metric). Nothing is left out unseen: a row whose
score is null is counted in `ExportResult.unscored`, and so is one whose score is NaN or
infinite for Phoenix and LangSmith (JSON has no NaN: Polars writes null, a score-less feedback;
OTel writes it as protobuf's JSON mapping does, "NaN", and counts it written). A scored row
with no span_id cannot be placed on any span: counted in `ExportResult.no_id`, the first such
row's number (0-based, in the scored file) in `ExportResult.first_no_id`.

=============  =========================  ===========================  ==========================
ragframe       phoenix (Parquet)          langsmith (JSON Lines)       otel (OTLP JSON)
=============  =========================  ===========================  ==========================
span_id        span_id                    run_id                       span's spanId (parent)
trace_id       trace_id                   trace_id                     traceId
metric name    annotation_name            key                          gen_ai.evaluation.name
{metric}       score                      score                        gen_ai.evaluation.score.value
{metric}_pass  label ("pass" / "fail")    value ("pass" / "fail")      gen_ai.evaluation.score.label
reasons        explanation                comment                      gen_ai.evaluation.explanation
project_id     (not used)                 session_id (the run's        (not used)
                                          project)
=============  =========================  ===========================  ==========================

`explanation` joins the verdict reasons of `{metric}_detail` (with the detail's error, if any)
and is cut at `MAX_EXPLANATION` characters. Ids are written exactly as the rows carry them
(those `ragframe.inputs.traces` read), so read → score → export → the ids match the input's
(the OTel writer refuses an id that is no OpenTelemetry id).

Layer: beside `report`, above `decide`; imports the layers below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from ragframe.errors import InputError
from ragframe.export import langsmith, otel, phoenix

TARGETS = ("phoenix", "langsmith", "otel")
Target = Literal["phoenix", "langsmith", "otel"]
MAX_EXPLANATION = 2000
DETAIL = "_detail"
PASS = "_pass"

__all__ = ["MAX_EXPLANATION", "TARGETS", "ExportResult", "evaluations", "export_scores"]


@dataclass
class ExportResult:
    """What was written (`records`) and what was left out, as rows × metrics: `unscored` for a
    score that is null (or, for Phoenix and LangSmith, not finite), `no_id` for a score on a
    row with no span_id to put it on; `first_no_id` the first such row (0-based)."""

    path: Path
    records: int
    unscored: int
    metrics: list[str]
    no_id: int = 0
    first_no_id: int | None = None


def score_columns(schema: pl.Schema) -> list[str]:
    """The metrics of a scored frame: Float64 columns that have a `{name}_detail` beside them."""
    return [
        name
        for name, dtype in schema.items()
        if dtype.is_numeric() and f"{name}{DETAIL}" in schema and not name.endswith(PASS)
    ]


def reasons_text(schema: pl.Schema, metric: str) -> pl.Expr:
    """The detail's reasons joined by "; " (the error first), cut at MAX_EXPLANATION."""
    detail = f"{metric}{DETAIL}"
    dtype = schema.get(detail)
    parts: list[pl.Expr] = []
    if isinstance(dtype, pl.Struct):
        fields = dtype.to_schema()
        if "error" in fields:
            parts.append(pl.col(detail).struct.field("error"))
        for name, inner in fields.items():
            if name == "reason":
                parts.append(pl.col(detail).struct.field("reason"))
            listed = isinstance(inner, pl.List) and isinstance(inner.inner, pl.Struct)
            if listed and "reason" in inner.inner.to_schema():  # type: ignore[union-attr]
                parts.append(
                    pl.col(detail)
                    .struct.field(name)
                    .list.eval(pl.element().struct.field("reason"))
                    .list.drop_nulls()
                    .list.join("; ")
                )
    if not parts:
        return pl.lit(None, pl.String)
    text = pl.concat_str(parts, separator="; ", ignore_nulls=True)
    text = pl.when(text.str.len_chars() > 0).then(text)
    return (
        pl.when(text.str.len_chars() > MAX_EXPLANATION)
        .then(text.str.slice(0, MAX_EXPLANATION - 1) + pl.lit("…"))
        .otherwise(text)
    )


def evaluations(
    scored: pl.LazyFrame, metrics: list[str] | None = None, *, id_column: str = "span_id"
) -> tuple[pl.LazyFrame, list[str]]:
    """One row per scored row and metric: span_id, trace_id, name, score, label, explanation
    (label "pass"/"fail" from `{metric}_pass`, null without one)."""
    schema = scored.collect_schema()
    if id_column not in schema:
        raise InputError(
            f"the scored file has no {id_column!r} column to put evaluations on; score rows "
            "read with ragframe.read_traces (or `ragframe score --from ...`), which keep it"
        )
    chosen = metrics or score_columns(schema)
    missing = [m for m in chosen if m not in schema]
    if missing:
        raise InputError(
            f"no score column {missing} in the scored file (it has {score_columns(schema)})"
        )
    if not chosen:
        raise InputError("the file has no score columns (METRIC with METRIC_detail beside it)")
    trace = pl.col("trace_id").cast(pl.String) if "trace_id" in schema else pl.lit(None, pl.String)
    # LangSmith's feedback API wants the run's project (rows read from its export carry it)
    project = (
        pl.col("project_id").cast(pl.String) if "project_id" in schema else pl.lit(None, pl.String)
    )
    parts = []
    for metric in chosen:
        passed = f"{metric}{PASS}"
        label = (
            pl.when(pl.col(passed)).then(pl.lit("pass")).when(~pl.col(passed)).then(pl.lit("fail"))
            if passed in schema
            else pl.lit(None, pl.String)
        )
        parts.append(
            scored.select(
                pl.col(id_column).cast(pl.String).alias("span_id"),
                trace.alias("trace_id"),
                pl.lit(metric).alias("name"),
                pl.col(metric).cast(pl.Float64).alias("score"),
                label.cast(pl.String).alias("label"),
                reasons_text(schema, metric).alias("explanation"),
                project.alias("project_id"),
            )
        )
    return pl.concat(parts), chosen


def export_scores(
    scored: str | Path | pl.DataFrame | pl.LazyFrame,
    to: Target,
    output: str | Path,
    *,
    metrics: list[str] | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write a scored frame's evaluations for `to` ("phoenix", "langsmith" or "otel")."""
    if to not in TARGETS:
        raise InputError(f"unknown export target {to!r}; use one of {', '.join(TARGETS)}")
    out = Path(output)
    if out.exists() and not overwrite:
        raise InputError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
    frame = scored.lazy() if isinstance(scored, pl.DataFrame) else scored
    if isinstance(frame, (str, Path)):
        path = Path(frame)
        frame = pl.scan_parquet(path) if path.suffix == ".parquet" else pl.scan_ndjson(path)
    records, chosen = evaluations(frame, metrics)
    table = records.collect()
    scored_ = has_score(pl.col("score"), to)
    counts = table.select(
        unscored=(~scored_).sum(), no_id=(scored_ & pl.col("span_id").is_null()).sum()
    ).row(0, named=True)
    first_no_id: int | None = None
    if counts["no_id"]:  # a second look at the file, only to say where the first one is
        unplaced = pl.col("span_id").is_null() & pl.any_horizontal(
            has_score(pl.col(m).cast(pl.Float64), to) for m in chosen
        )
        row = "__ragframe_row"
        first = frame.with_row_index(row).filter(unplaced).select(row).head(1).collect()
        first_no_id = first.item()
    table = table.filter(scored_ & pl.col("span_id").is_not_null())
    writer = {"phoenix": phoenix.write, "langsmith": langsmith.write, "otel": otel.write}[to]
    writer(table, out)
    return ExportResult(out, table.height, counts["unscored"], chosen, counts["no_id"], first_no_id)


def has_score(score: pl.Expr, to: Target) -> pl.Expr:
    """Whether a score is one `to` can carry: any non-null for OTel (protobuf's JSON mapping
    writes "NaN" and "Infinity"), a finite one for Phoenix and LangSmith (JSON has no NaN:
    Polars writes null, which LangSmith would store as feedback without a score)."""
    return score.is_not_null() if to == "otel" else score.is_finite().fill_null(False)
