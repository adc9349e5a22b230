"""OpenTelemetry: evaluation results as the GenAI conventions' `gen_ai.evaluation.result`
event, written as OTLP JSON logs in the Collector file exporter's shape (one
`{"resourceLogs": [...]}` request per line, `BATCH` records each).

Each log record carries `eventName` `gen_ai.evaluation.result`, the evaluated span's
`traceId` and `spanId` (how a log-based event is parented to the span it judges), and the
attributes `gen_ai.evaluation.name`, `gen_ai.evaluation.score.value`,
`gen_ai.evaluation.score.label` and `gen_ai.evaluation.explanation` (the last two only when
known). Ids are hex, as OTLP JSON writes them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import polars as pl

EVENT = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"
SCORE = "gen_ai.evaluation.score.value"
LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
BATCH = 1000

__all__ = ["EVENT", "write"]


def record(row: dict[str, Any], now_ns: int) -> dict[str, Any]:
    """One OTLP JSON log record for one evaluation."""
    attributes = [
        {"key": NAME, "value": {"stringValue": row["name"]}},
        {"key": SCORE, "value": {"doubleValue": row["score"]}},
    ]
    if row["label"] is not None:
        attributes.append({"key": LABEL, "value": {"stringValue": row["label"]}})
    if row["explanation"] is not None:
        attributes.append({"key": EXPLANATION, "value": {"stringValue": row["explanation"]}})
    out: dict[str, Any] = {
        "timeUnixNano": str(now_ns),
        "observedTimeUnixNano": str(now_ns),
        "eventName": EVENT,
        "spanId": row["span_id"],
        "attributes": attributes,
    }
    if row["trace_id"] is not None:
        out["traceId"] = row["trace_id"]
    return out


def write(evaluations: pl.DataFrame, path: Path) -> None:
    now = time.time_ns()
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "ragframe"}}]}
    scope = {"name": "ragframe"}
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for batch in evaluations.iter_slices(BATCH):
            records = [record(row, now) for row in batch.iter_rows(named=True)]
            request = {
                "resourceLogs": [
                    {"resource": resource, "scopeLogs": [{"scope": scope, "logRecords": records}]}
                ]
            }
            out.write(json.dumps(request, ensure_ascii=False) + "\n")
    tmp.replace(path)
