"""Phoenix span evaluations: a Parquet frame Phoenix's client logs as span annotations
(`Client().spans.log_span_annotations_dataframe(dataframe=...)`, or the legacy
`px.Client().log_evaluations(SpanEvaluations(eval_name=..., dataframe=...))` per
`annotation_name`): `span_id`, `annotation_name`, `annotator_kind`, `score`, `label`,
`explanation`, and `trace_id` for joins."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ragframe.inputs.io import AtomicParquetWriter

__all__ = ["frame", "write"]


def frame(evaluations: pl.DataFrame) -> pl.DataFrame:
    """The evaluations in Phoenix's column names."""
    return evaluations.select(
        "span_id",
        pl.col("name").alias("annotation_name"),
        pl.lit("LLM").alias("annotator_kind"),
        "score",
        "label",
        "explanation",
        "trace_id",
    )


def write(evaluations: pl.DataFrame, path: Path) -> None:
    table = frame(evaluations).to_arrow()
    writer = AtomicParquetWriter(path, table.schema, {"export": "phoenix"}, overwrite=True)
    writer.write(frame(evaluations))
    writer.close()
