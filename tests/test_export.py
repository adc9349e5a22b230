"""`ragframe export`: the mapping of scores, pass columns and reasons onto Phoenix, LangSmith
and OpenTelemetry records, and the errors a user can act on."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl
import pytest

from ragframe.cli import export as cli_export
from ragframe.errors import InputError
from ragframe.export import MAX_EXPLANATION, export_scores

DETAIL = pl.Struct(
    {
        "claims": pl.List(
            pl.Struct({"claim": pl.String, "supported": pl.Boolean, "reason": pl.String})
        ),
        "error": pl.String,
    }
)


def scored() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": ["q1", "q2", "q3"],
            "trace_id": ["t1", "t2", "t3"],
            "span_id": ["s1", "s2", "s3"],
            "faithfulness": [1.0, 0.25, None],
            "faithfulness_detail": [
                {
                    "claims": [{"claim": "c", "supported": True, "reason": "stated in doc 1"}],
                    "error": None,
                },
                {
                    "claims": [{"claim": "c", "supported": False, "reason": "x" * 3000}],
                    "error": None,
                },
                {"claims": [], "error": "judge answer never validated"},
            ],
            "faithfulness_pass": [True, False, None],
            "bleu": [0.5, 0.1, 0.2],
            "bleu_detail": [{"error": None}, {"error": None}, {"error": None}],
        },
        schema_overrides={"faithfulness_detail": DETAIL},
    )


def test_phoenix_frame_maps_score_label_explanation(tmp_path: Path) -> None:
    result = export_scores(scored(), "phoenix", tmp_path / "e.parquet")
    evals = pl.read_parquet(tmp_path / "e.parquet")
    assert result.metrics == ["faithfulness", "bleu"]
    assert result.records == 5 and result.unscored == 1  # the null faithfulness row left out
    faith = evals.filter(pl.col("annotation_name") == "faithfulness")
    assert faith["span_id"].to_list() == ["s1", "s2"]
    assert faith["label"].to_list() == ["pass", "fail"]
    assert faith["explanation"][0] == "stated in doc 1"
    assert len(faith["explanation"][1]) == MAX_EXPLANATION and faith["explanation"][1].endswith("…")
    bleu = evals.filter(pl.col("annotation_name") == "bleu")
    assert bleu["label"].to_list() == [None, None, None]  # no bleu_pass column: no label
    assert bleu["explanation"].to_list() == [None, None, None]


def test_langsmith_feedback_and_otel_events(tmp_path: Path) -> None:
    export_scores(scored(), "langsmith", tmp_path / "f.jsonl", metrics=["faithfulness"])
    feedback = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert [(f["run_id"], f["key"], f["score"], f["value"]) for f in feedback] == [
        ("s1", "faithfulness", 1.0, "pass"),
        ("s2", "faithfulness", 0.25, "fail"),
    ]
    export_scores(with_otel_ids(scored()), "otel", tmp_path / "o.json", metrics=["faithfulness"])
    request = json.loads((tmp_path / "o.json").read_text().splitlines()[0])
    records = request["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    first = {a["key"]: a["value"] for a in records[0]["attributes"]}
    assert records[0]["spanId"] == "00000000000000a1" and records[0]["traceId"] == "f" * 31 + "1"
    assert first == {
        "gen_ai.evaluation.name": {"stringValue": "faithfulness"},
        "gen_ai.evaluation.score.value": {"doubleValue": 1.0},
        "gen_ai.evaluation.score.label": {"stringValue": "pass"},
        "gen_ai.evaluation.explanation": {"stringValue": "stated in doc 1"},
    }


def with_otel_ids(frame: pl.DataFrame) -> pl.DataFrame:
    """`scored()` with OpenTelemetry ids (16 / 32 hex digits; upper case, which OTLP allows)."""
    return frame.with_columns(
        pl.col("span_id").str.replace("s", "00000000000000A"),
        pl.col("trace_id").str.replace("t", "F" * 31),
    )


def test_otel_events_parse_with_protobuf_strictly(tmp_path: Path) -> None:
    """Every line parses into opentelemetry.proto's ExportLogsServiceRequest with unknown
    fields refused; a score that is not finite is written as protobuf's mapping writes it."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    frame = with_otel_ids(scored()).with_columns(bleu=pl.Series([0.5, float("nan"), 0.2]))
    export_scores(frame, "otel", tmp_path / "o.json", metrics=["bleu"])
    (line,) = (tmp_path / "o.json").read_text().splitlines()
    request = json_format.Parse(line, ExportLogsServiceRequest(), ignore_unknown_fields=False)
    scores = [
        a.value.double_value
        for r in request.resource_logs[0].scope_logs[0].log_records
        for a in r.attributes
        if a.key == "gen_ai.evaluation.score.value"
    ]
    assert scores[0] == 0.5 and scores[1] != scores[1] and scores[2] == 0.2  # NaN kept


def test_otel_refuses_ids_that_are_no_opentelemetry_ids(tmp_path: Path) -> None:
    """LangSmith's UUIDs (or any id of the wrong length) cannot parent an OTel event: refused
    before a file is written, naming the first and the count."""
    out = tmp_path / "o.json"
    with pytest.raises(InputError, match=r"3 evaluation\(s\) have a span_id .* 's1'"):
        export_scores(scored(), "otel", out, metrics=["bleu"])
    uuid = "0f8f1a3e-3b1c-4d5e-9f00-1234567890ab"
    frame = with_otel_ids(scored()).with_columns(trace_id=pl.lit(uuid))
    with pytest.raises(InputError, match="trace_id that is no OpenTelemetry id"):
        export_scores(frame, "otel", out, metrics=["bleu"])
    assert not out.exists()
    export_scores(frame.with_columns(trace_id=pl.lit(None, pl.String)), "otel", out)
    assert "traceId" not in out.read_text()  # no trace id: the event names the span only


def test_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no 'span_id' column"):
        export_scores(scored().drop("span_id"), "phoenix", tmp_path / "x.parquet")
    with pytest.raises(InputError, match="no score column"):
        export_scores(scored(), "phoenix", tmp_path / "x.parquet", metrics=["nope"])
    (tmp_path / "x.parquet").write_text("")
    with pytest.raises(InputError, match="overwrite"):
        export_scores(scored(), "phoenix", tmp_path / "x.parquet")


def test_cli_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scored().write_parquet(tmp_path / "scored.parquet")
    parser = argparse.ArgumentParser(prog="ragframe")
    cli_export.add_parser(parser.add_subparsers())
    out = tmp_path / "evals.parquet"
    args = parser.parse_args(
        ["export", str(tmp_path / "scored.parquet"), "--to", "phoenix", "-o", str(out)]
    )
    assert args.handler(args) == 0
    assert pl.read_parquet(out).height == 5
    assert "wrote 5 evaluations (faithfulness, bleu)" in capsys.readouterr().err
