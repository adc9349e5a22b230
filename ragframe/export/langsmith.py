"""LangSmith feedback: JSON Lines of `run_id`, `key`, `score`, `value` (pass / fail),
`comment` and `trace_id`, the fields `Client.create_feedback(run_id, key, score=..., value=...,
comment=...)` takes, one line per run and metric."""

from __future__ import annotations

from pathlib import Path

import polars as pl

__all__ = ["frame", "write"]


def frame(evaluations: pl.DataFrame) -> pl.DataFrame:
    return evaluations.select(
        pl.col("span_id").alias("run_id"),
        pl.col("name").alias("key"),
        "score",
        pl.col("label").alias("value"),
        pl.col("explanation").alias("comment"),
        "trace_id",
    )


def write(evaluations: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    frame(evaluations).write_ndjson(tmp)
    tmp.replace(path)
