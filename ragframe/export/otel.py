"""OpenTelemetry: evaluation results as the GenAI conventions' `gen_ai.evaluation.result`
event, written as OTLP JSON logs in the Collector file exporter's shape (one
`{"resourceLogs": [...]}` request per line, `BATCH` records each).

Each log record carries `eventName` `gen_ai.evaluation.result`, the evaluated span's
`traceId` and `spanId` (how a log-based event is parented to the span it judges), and the
attributes `gen_ai.evaluation.name`, `gen_ai.evaluation.score.value`,
`gen_ai.evaluation.score.label` and `gen_ai.evaluation.explanation` (the last two only when
known). Ids are lower-case hex, as the OTLP JSON encoding writes them (OpenTelemetry's own
JSON decoder and the Collector read them so); every line also parses with protobuf's strict
JSON parser into `opentelemetry.proto`'s `ExportLogsServiceRequest`. An id that is no
OpenTelemetry id (16 hex digits for a span, 32 for a trace: LangSmith's UUIDs, say) is refused
before anything is written, since no OpenTelemetry backend could parent the event to a span.
A score that is not finite is written as protobuf's JSON mapping writes it ("NaN", ...).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import InputError

EVENT = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"
SCORE = "gen_ai.evaluation.score.value"
LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
BATCH = 1000
#: OpenTelemetry's ids: 8 bytes (span) and 16 bytes (trace), as hex.
ID_DIGITS = {"span_id": 16, "trace_id": 32}

__all__ = ["EVENT", "write"]


def record(row: dict[str, Any], now_ns: int) -> dict[str, Any]:
    """One OTLP JSON log record for one evaluation."""
    attributes = [
        {"key": NAME, "value": {"stringValue": row["name"]}},
        {"key": SCORE, "value": {"doubleValue": _double(row["score"])}},
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


def _double(value: float) -> float | str:
    """A double as protobuf's JSON mapping writes it: non-finite values as strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def otel_ids(evaluations: pl.DataFrame) -> pl.DataFrame:
    """The evaluations with their ids in lower-case hex; an InputError naming the first id
    that is no OpenTelemetry id, and how many there are."""
    frame = evaluations.with_columns(pl.col(c).str.to_lowercase() for c in ID_DIGITS)
    for column, digits in ID_DIGITS.items():
        valid = pl.col(column).str.contains(f"^[0-9a-f]{{{digits}}}$")
        bad = frame.filter(~valid if column == "span_id" else ~valid.fill_null(True))
        if bad.height:
            raise InputError(
                f"{bad.height} evaluation(s) have a {column} that is no OpenTelemetry id "
                f"({digits} hex digits), the first {bad[column][0]!r}; export to otel rows read "
                "from OpenTelemetry or OpenInference spans (use --to langsmith for LangSmith runs)"
            )
    return frame


def write(evaluations: pl.DataFrame, path: Path) -> None:
    evaluations = otel_ids(evaluations)
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
