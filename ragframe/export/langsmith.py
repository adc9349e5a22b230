"""LangSmith feedback: JSON Lines of exactly the keyword arguments the current client's
`Client.create_feedback` takes (langsmith 0.15), one line per run and metric with a finite
score (JSON has no NaN: one written would load as a feedback without a score):

    for line in open("feedback.jsonl"):
        client.create_feedback(**json.loads(line))

`run_id` (the answer's run), `trace_id`, `key` (the metric), `score`, `value` ("pass" / "fail"),
`comment` (the verdicts' reasons) and `session_id`: the run's tracing project, which the rows
carry as `project_id` when read from a LangSmith export. langsmith 0.15 warns that feedback on a
run without `session_id` "will stop working", and deployments that cannot locate a run without
it refuse it. A row with no project (read from another format) gives `session_id` null: set it
to the project's id (`client.read_project(project_name=...).id`) before loading. No other key
is written: the client warns about any argument it no longer uses.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

__all__ = ["frame", "write"]


def frame(evaluations: pl.DataFrame) -> pl.DataFrame:
    """The evaluations as `create_feedback`'s keyword arguments (`session_id` from a
    `project_id` column when the evaluations have one)."""
    project = (
        pl.col("project_id").cast(pl.String)
        if "project_id" in evaluations.columns
        else pl.lit(None, pl.String)
    )
    return evaluations.select(
        pl.col("span_id").alias("run_id"),
        "trace_id",
        pl.col("name").alias("key"),
        "score",
        pl.col("label").alias("value"),
        pl.col("explanation").alias("comment"),
        project.alias("session_id"),
    )


def write(evaluations: pl.DataFrame, path: Path) -> None:
    """The feedback lines, written whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    frame(evaluations).write_ndjson(tmp)
    tmp.replace(path)
