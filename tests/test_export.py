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
    export_scores(scored(), "otel", tmp_path / "o.json", metrics=["faithfulness"])
    request = json.loads((tmp_path / "o.json").read_text().splitlines()[0])
    records = request["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    first = {a["key"]: a["value"] for a in records[0]["attributes"]}
    assert records[0]["spanId"] == "s1" and records[0]["traceId"] == "t1"
    assert first == {
        "gen_ai.evaluation.name": {"stringValue": "faithfulness"},
        "gen_ai.evaluation.score.value": {"doubleValue": 1.0},
        "gen_ai.evaluation.score.label": {"stringValue": "pass"},
        "gen_ai.evaluation.explanation": {"stringValue": "stated in doc 1"},
    }


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
