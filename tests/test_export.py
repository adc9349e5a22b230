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


def placed_and_unplaced() -> pl.DataFrame:
    """Rows with OTel ids: one scored row without a span_id (row 1), a NaN and an infinite
    faithfulness, a null one; bleu scored everywhere."""
    return pl.DataFrame(
        {
            "trace_id": ["f" * 32] * 5,
            "span_id": ["a" * 16, None, "c" * 16, "d" * 16, "e" * 16],
            "faithfulness": [0.5, 0.9, float("nan"), float("inf"), None],
            "faithfulness_detail": [{"reason": "r"}] * 5,
            "bleu": [0.1, 0.2, 0.3, 0.4, 0.5],
            "bleu_detail": [{"error": None}] * 5,
        }
    )


@pytest.mark.parametrize("to", ["phoenix", "langsmith", "otel"])
def test_a_scored_row_without_a_span_id_is_counted_not_dropped_silently(
    to: str, tmp_path: Path
) -> None:
    """Row 1 is scored (faithfulness 0.9, bleu 0.2) but has no span_id to put them on: two
    evaluations that cannot be placed, counted apart from the unscored ones."""
    frame = placed_and_unplaced()
    result = export_scores(frame, to, tmp_path / "out")  # type: ignore[arg-type]
    assert result.no_id == 2 and result.first_no_id == 1
    finite = {"phoenix": 2, "langsmith": 2, "otel": 0}[to]  # NaN and inf left out or written
    assert result.unscored == 1 + finite
    assert result.records + result.unscored + result.no_id == 2 * frame.height
    placed = export_scores(
        frame.filter(pl.col("span_id").is_not_null()), to, tmp_path / "p", overwrite=True
    )  # type: ignore[arg-type]
    assert placed.no_id == 0 and placed.first_no_id is None and placed.records == result.records


def test_cli_says_what_it_left_out_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placed_and_unplaced().write_parquet(tmp_path / "scored.parquet")
    parser = argparse.ArgumentParser(prog="ragframe")
    cli_export.add_parser(parser.add_subparsers())
    for to, out in (("langsmith", "f.jsonl"), ("otel", "o.json")):
        args = parser.parse_args(
            ["export", str(tmp_path / "scored.parquet"), "--to", to, "-o", str(tmp_path / out)]
        )
        assert args.handler(args) == 0
        line = capsys.readouterr().err
        assert "2 scored left out for having no span_id (the first at row index 1" in line
        if to == "langsmith":
            assert "wrote 5 evaluations" in line
            assert "3 left out for a null or non-finite score (NaN, inf)" in line
        else:
            assert "wrote 7 evaluations" in line and "1 left out for a null score" in line


def test_nan_and_infinite_scores_are_unscored_for_phoenix_and_langsmith(tmp_path: Path) -> None:
    """JSON has no NaN (Polars writes null, which LangSmith stores as a score-less feedback) and
    Phoenix has no use for one: both leave a non-finite score out as unscored. OTel writes it
    as protobuf's JSON mapping does ("NaN"), and counts it as written."""
    frame = placed_and_unplaced().filter(pl.col("span_id").is_not_null())
    result = export_scores(frame, "langsmith", tmp_path / "f.jsonl", metrics=["faithfulness"])
    assert (result.records, result.unscored) == (1, 3)

    def strict(constant: str) -> None:
        raise ValueError(constant)

    feedback = [
        json.loads(line, parse_constant=strict)
        for line in (tmp_path / "f.jsonl").read_text().splitlines()
    ]
    assert [(f["run_id"], f["score"]) for f in feedback] == [("a" * 16, 0.5)]

    result = export_scores(frame, "phoenix", tmp_path / "e.parquet", metrics=["faithfulness"])
    assert (result.records, result.unscored) == (1, 3)
    assert pl.read_parquet(tmp_path / "e.parquet")["score"].to_list() == [0.5]

    result = export_scores(frame, "otel", tmp_path / "o.json", metrics=["faithfulness"])
    assert (result.records, result.unscored) == (3, 1)
    assert '"doubleValue": "NaN"' in (tmp_path / "o.json").read_text()
