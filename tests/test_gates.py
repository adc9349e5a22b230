"""CI gates: a mean or a pass rate that falls short fails, in the metric's direction; rows that
failed to score count against a gate unless told otherwise; a gate on nothing is an error; the
table names the worst rows with their reasons; `ragframe gate` exits 0 / 1 / 2 and sends
nothing."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, router

import ragframe
from ragframe import cli
from ragframe.cli import gate as gate_cli
from ragframe.cli import summarize as summarize_cli
from ragframe.decide.gates import EXIT_GATE_FAILED, assert_scores, check_gates, row_reasons
from ragframe.decide.summarize import summarize
from ragframe.errors import ConfigError
from ragframe.inputs.io import write_parquet

CLAIM = pl.Struct({"claim": pl.String, "supported": pl.Boolean, "reason": pl.String})


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`ragframe.cli.main` with `gate` and `summarize` registered (whether or not the package
    registers them yet)."""
    extra = tuple(m for m in (gate_cli, summarize_cli) if m not in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", (*cli.SUBCOMMANDS, *extra))
    yield cli.main


def gate_row(result: Any, metric: str, gate: str) -> dict[str, Any]:
    rows = result.table.filter((pl.col("metric") == metric) & (pl.col("gate") == gate))
    assert rows.height == 1
    return rows.row(0, named=True)


# ------------------------------------------------------------------------------ the rules


def test_mean_gate_passes_at_the_value_and_fails_below() -> None:
    frame = pl.DataFrame({"faithfulness": [1.0, 1.0, 1.0, 1.0, 0.0]})  # mean 0.8
    passed = check_gates(frame, fail_under={"faithfulness": 0.8})
    assert passed.passed and passed.failed == 0
    row = gate_row(passed, "faithfulness", "mean")
    assert row["value"] == pytest.approx(0.8) and row["n"] == 5 and row["failed"] == 0
    assert row["ci_low"] <= 0.8 <= row["ci_high"]
    failed = check_gates(frame, fail_under={"faithfulness": 0.81})
    assert not failed.passed and failed.failed == 1
    assert "❌ faithfulness mean 0.800 < 0.810" in str(failed)
    assert str(failed).splitlines()[-1] == "1 gate failed (of 1)"
    assert str(passed).splitlines()[-1] == "gates passed (1 of 1)"


def test_float_rounding_does_not_fail_a_mean_that_meets_the_value() -> None:
    """(0.4 + 1 + 1) / 3 is 0.7999999999999999 in floats: it still meets 0.8."""
    frame = pl.DataFrame({"faithfulness": [0.4, 1.0, 1.0]})
    assert frame["faithfulness"].to_numpy().mean() < 0.8  # the float mean really is off
    assert check_gates(frame, fail_under={"faithfulness": 0.8}).passed


def test_lower_is_better_metric_passes_at_or_below_its_values() -> None:
    """hallucination: the mean gate fails *above* the value, a row passes at or below the
    threshold."""
    frame = pl.DataFrame({"hallucination": [0.2, 0.3, 0.2]})  # mean 0.2333
    ok = check_gates(
        frame,
        fail_under={"hallucination": 0.25},
        min_pass_rate={"hallucination": 1.0},
        thresholds={"hallucination": 0.3},
    )
    assert ok.passed, str(ok)
    assert "✅ hallucination mean 0.233 ≤ 0.250 (lower is better" in str(ok)
    assert gate_row(ok, "hallucination", "pass rate")["rule"] == "score <= 0.3"
    bad = check_gates(
        frame,
        fail_under={"hallucination": 0.2},
        min_pass_rate={"hallucination": 0.7},
        thresholds={"hallucination": 0.25},
    )
    assert bad.failed == 2
    assert "❌ hallucination mean 0.233 > 0.200" in str(bad)
    rate = gate_row(bad, "hallucination", "pass rate")
    assert (rate["passed"], rate["value"]) == (2, pytest.approx(2 / 3))
    # the worst rows of a lower-is-better metric: failed first, then the highest scores
    spread = pl.DataFrame({"hallucination": [0.4, 0.9, None, 0.6, 0.1]})
    worst = check_gates(spread, fail_under={"hallucination": 0.3}).worst
    assert worst["row"].to_list() == [2, 1, 3, 0]


def test_strict_mode_passes_only_perfect_scores_in_each_direction() -> None:
    frame = pl.DataFrame({"faithfulness": [1.0, 0.99, 1.0], "hallucination": [0.0, 0.01, 0.0]})
    result = check_gates(
        frame,
        min_pass_rate={"faithfulness": 0.6, "hallucination": 0.7},
        thresholds={"faithfulness": 0.5},
        strict=["faithfulness", "hallucination"],
    )
    faith = gate_row(result, "faithfulness", "pass rate")
    hall = gate_row(result, "hallucination", "pass rate")
    assert (faith["passed"], faith["strict"], faith["ok"]) == (2, True, True)
    assert (hall["passed"], hall["strict"], hall["ok"]) == (2, True, False)
    assert hall["rule"] == "score = 0 (strict)"
    # Without strict, 0.99 passes the 0.5 threshold.
    lenient = check_gates(frame, min_pass_rate={"faithfulness": 1.0})
    assert lenient.passed


def test_rows_that_failed_to_score_count_against_the_gates_unless_ignored() -> None:
    frame = pl.DataFrame(
        {"faithfulness": [0.9, 0.9, None, None], "hallucination": [0.1, None, 0.1, 0.1]}
    )
    gates = {
        "fail_under": {"faithfulness": 0.8, "hallucination": 0.2},
        "min_pass_rate": {"faithfulness": 0.6},
    }
    counted = check_gates(frame, **gates)
    mean = gate_row(counted, "faithfulness", "mean")
    assert mean["value"] == pytest.approx(0.45)  # the two failed rows count as 0
    assert (mean["scored"], mean["failed"], mean["ok"]) == (2, 2, False)
    hall = gate_row(counted, "hallucination", "mean")
    assert hall["value"] == pytest.approx(0.325) and not hall["ok"]  # the failed row as 1
    rate = gate_row(counted, "faithfulness", "pass rate")
    assert rate["value"] == pytest.approx(0.5) and not rate["ok"]  # 2 of 4 rows pass
    text = str(counted)
    assert "2 rows failed to score, counted as 0" in text
    assert "1 row failed to score, counted as 1" in text
    assert "2 rows failed to score, counted as failing" in text
    ignored = check_gates(frame, ignore_failed=True, **gates)
    assert ignored.passed, str(ignored)
    assert gate_row(ignored, "faithfulness", "mean")["value"] == pytest.approx(0.9)
    assert gate_row(ignored, "faithfulness", "pass rate")["value"] == 1.0
    assert "left out" in str(ignored)


def test_a_gate_on_a_metric_with_no_scored_row_fails_even_when_failures_are_ignored() -> None:
    frame = pl.DataFrame({"faithfulness": pl.Series([None, None], dtype=pl.Float64)})
    for ignore in (False, True):
        result = check_gates(
            frame,
            fail_under={"faithfulness": 0.0},
            min_pass_rate={"faithfulness": 0.0},
            ignore_failed=ignore,
        )
        assert not result.passed
        assert result.table["note"].to_list() == ["no row scored", "no row scored"]
        assert "❌ faithfulness mean: no row scored (n=2; 2 rows failed to score)" in str(result)


def test_gates_that_cannot_mean_anything_are_refused() -> None:
    frame = pl.DataFrame(
        {
            "question": ["q"],
            "faithfulness": [0.9],
            "faithfulness_detail": [{"error": None}],
            "context_recall": [0.5],
        }
    )
    with pytest.raises(ConfigError, match="no gate given"):
        check_gates(frame)
    with pytest.raises(
        ConfigError,
        match=r"names 'answer_relevancy', which the frame does not have; its metrics are "
        r"\['faithfulness', 'context_recall'\]",
    ):
        check_gates(frame, fail_under={"answer_relevancy": 0.5})
    with pytest.raises(ConfigError, match="names 'faithfullness'"):
        check_gates(frame, min_pass_rate={"faithfulness": 0.5}, thresholds={"faithfullness": 0.7})
    with pytest.raises(ConfigError, match="'question' in the frame is String, not scores"):
        check_gates(frame, fail_under={"question": 0.5})
    with pytest.raises(ConfigError, match="fail_under 'faithfulness' must be a number between 0"):
        check_gates(frame, fail_under={"faithfulness": 80})
    with pytest.raises(ConfigError, match="worst"):
        check_gates(frame, fail_under={"faithfulness": 0.5}, worst=-1)
    with pytest.raises(ConfigError, match="level must be between 0 and 1"):
        check_gates(frame, fail_under={"faithfulness": 0.5}, level=95)


def test_threshold_comes_from_the_argument_then_metadata_then_pass_column_then_default(
    tmp_path: Path,
) -> None:
    """The `_pass` column here disagrees with every threshold on purpose, so each source's
    pass rate is distinct: argument 0.9 -> 1 of 4, metadata 0.6 -> 2 of 4, the column -> 3 of
    4 (0.55 passes there though 0.6 would fail it), the default 0.5 -> 3 of 4."""
    frame = pl.DataFrame(
        {
            "faithfulness": [0.95, 0.7, 0.55, 0.1],
            "faithfulness_pass": [True, True, True, False],
        }
    )
    path = tmp_path / "scored.parquet"
    meta = {"metrics": {"faithfulness": {"direction": "higher", "config": {"threshold": 0.6}}}}
    write_parquet(frame, path, meta)
    gate = {"min_pass_rate": {"faithfulness": 0.0}}

    def rate(data: Any, **options: Any) -> tuple[int, float | None, str]:
        row = gate_row(check_gates(data, **gate, **options), "faithfulness", "pass rate")
        return row["passed"], row["threshold"], row["rule"]

    assert rate(path, thresholds={"faithfulness": 0.9}) == (1, 0.9, "score >= 0.9")
    assert rate(path) == (2, 0.6, "score >= 0.6")
    assert rate(frame) == (3, None, "column faithfulness_pass")
    assert rate(frame.drop("faithfulness_pass")) == (3, 0.5, "score >= 0.5")
    # strict named alone keeps the recorded threshold's value, in strict mode
    assert rate(path, strict=["faithfulness"]) == (0, 0.6, "score = 1 (strict)")


# ------------------------------------------------------------------------------ worst rows


def test_row_reasons_are_the_error_or_the_negative_verdicts_reasons() -> None:
    detail = {
        "claims": [
            {"claim": "Paris is in France.", "supported": True, "reason": "context 1"},
            {"claim": "The moon is cheese.", "supported": False, "reason": "no context says so"},
        ],
        "error": None,
    }
    assert row_reasons(detail) == '"The moon is cheese.": no context says so'
    contradicted = {
        "contexts": [
            {"context_index": 1, "contradicted": True, "reason": "says Lyon"},
            {"context_index": 2, "contradicted": False, "reason": "agrees"},
        ]
    }
    assert row_reasons(contradicted, "lower") == "says Lyon"
    verdicts = {"statements": [{"statement": "Hi.", "verdict": "no", "reason": "a greeting"}]}
    assert row_reasons(verdicts) == '"Hi.": a greeting'
    assert row_reasons({"reason": "vague", "raw_score": 2.0}) == "vague"
    assert row_reasons({"claims": None, "error": "timeout"}) == "failed to score: timeout"
    no_reason = {"claims": [{"claim": "X.", "supported": False, "reason": None}]}
    assert row_reasons(no_reason) == '"X." (no reason recorded)'
    assert row_reasons(None) == ""


def test_worst_rows_of_a_failing_gate_with_ids_and_reasons() -> None:
    def claims(supported: bool, reason: str) -> dict[str, Any]:
        return {"claims": [{"claim": "c", "supported": supported, "reason": reason}], "error": None}

    frame = pl.DataFrame(
        {
            "id": ["q0", "q1", "q2", "q3", "q4"],
            "faithfulness": [0.9, 0.2, None, 0.5, 0.0],
            "faithfulness_detail": [
                claims(True, "fine"),
                claims(False, "made up"),
                {"claims": None, "error": "timeout"},
                claims(False, "half"),
                claims(False, "all wrong"),
            ],
        },
        schema_overrides={
            "faithfulness_detail": pl.Struct({"claims": pl.List(CLAIM), "error": pl.String})
        },
    )
    result = check_gates(
        frame, fail_under={"faithfulness": 0.8}, min_pass_rate={"faithfulness": 0.9}
    )
    mean = result.worst.filter(pl.col("gate") == "mean")
    # the failed row first (it counts as 0, before a real 0), then by score; the 0.9 row
    # is above the line
    assert mean["row"].to_list() == [2, 4, 1, 3]
    assert mean["id"].to_list() == ["q2", "q4", "q1", "q3"]
    assert mean["why"].to_list() == [
        "failed to score: timeout",
        '"c": all wrong',
        '"c": made up',
        '"c": half',
    ]
    rate = result.worst.filter(pl.col("gate") == "pass rate")
    assert rate["row"].to_list() == [2, 4, 1]  # 0.5 passes the default 0.5 threshold
    text = str(result)
    assert "row 2 (id q2): no score - failed to score: timeout" in text
    assert 'row 1 (id q1): 0.200 - "c": made up' in text
    ignored = check_gates(frame, fail_under={"faithfulness": 0.8}, ignore_failed=True, worst=2)
    assert ignored.worst["row"].to_list() == [4, 1]
    html = result._repr_html_()
    assert "❌" in html and "failed to score: timeout" in html and "<details>" in html


# ------------------------------------------------------------------------------ a real run


def _claims(body: dict[str, Any]) -> str:
    answer = fenced(body, "answer")[0]
    return reply({"claims": [s.strip() + "." for s in answer.split(".") if s.strip()]})


def _verify(body: dict[str, Any]) -> str:
    return reply(
        {
            "verdicts": [
                {
                    "index": k,
                    "reason": "no context mentions the moon" if "moon" in c else "context 1",
                    "supported": "moon" not in c,
                }
                for k, c in enumerate(fenced(body, "claim"), start=1)
            ]
        }
    )


@pytest.fixture
def scored_file(server: Any, judge: Any, tmp_path: Path) -> tuple[Path, Any]:
    """A file scored by the scripted server: faithfulness 0.5, 1.0, 1.0 and a row that
    failed to score (empty answer)."""
    server.handler = router(answer_claims=_claims, faithfulness_verify=_verify)
    frame = pl.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "question": ["Where is Paris?"] * 4,
            "answer": [
                "Paris is in France. The moon is cheese.",
                "Paris is in France.",
                "Yes.",
                "",
            ],
            "contexts": [["Paris is in France."]] * 4,
        }
    )
    result = ragframe.run(frame, ["faithfulness"], judge=judge)
    path = tmp_path / "scored.parquet"
    result.write_parquet(path)
    assert result.frame["faithfulness"].to_list() == [0.5, 1.0, 1.0, None]
    return path, result


def test_gates_on_a_file_scored_by_the_server_send_nothing(server: Any, scored_file: Any) -> None:
    path, result = scored_file
    sent = server.count("")
    # Failed row as 0: mean (0.5 + 1 + 1 + 0) / 4 = 0.625; over scored rows 0.8333.
    failing = check_gates(path, fail_under={"faithfulness": 0.7})
    row = gate_row(failing, "faithfulness", "mean")
    assert row["value"] == pytest.approx(0.625) and row["failed"] == 1 and not row["ok"]
    assert failing.worst["why"].to_list() == [
        "failed to score: missing input: 'answer' is null or empty",
        '"The moon is cheese.": no context mentions the moon',
    ]
    assert check_gates(path, fail_under={"faithfulness": 0.7}, ignore_failed=True).passed
    # Pass rate at the default 0.5: 3 of 4 rows (the failed one fails).
    assert gate_row(
        check_gates(path, min_pass_rate={"faithfulness": 0.75}), "faithfulness", "pass rate"
    )["ok"]
    # The run's result itself, as a test suite would gate it.
    assert assert_scores(result, faithfulness=0.6).passed
    with pytest.raises(AssertionError) as raised:
        assert_scores(result, faithfulness=0.7)
    assert str(raised.value) == str(check_gates(result, fail_under={"faithfulness": 0.7}))
    assert "❌ faithfulness mean 0.625 < 0.700" in str(raised.value)
    # summarize takes the run's result too (its metrics and directions, no summary computed)
    summary = summarize(result, thresholds={"faithfulness": 0.7}).row(0, named=True)
    assert (summary["metric"], summary["scored"], summary["failed"]) == ("faithfulness", 3, 1)
    assert (summary["passed"], summary["status"]) == (2, "✅")  # 0.5 fails; the mean 0.83
    assert server.count("") == sent


def test_assert_scores_gates_the_pass_rate_too() -> None:
    frame = pl.DataFrame({"faithfulness": [0.9, 0.4], "answer_relevancy": [0.9, 0.9]})
    assert assert_scores(frame, answer_relevancy=0.8, min_pass_rate={"faithfulness": 0.5}).passed
    with pytest.raises(AssertionError, match=r"❌ faithfulness pass rate 50\.0% < 60\.0%"):
        assert_scores(frame, min_pass_rate={"faithfulness": 0.6}, thresholds={"faithfulness": 0.5})


# ------------------------------------------------------------------------------ the CLI


def test_gate_cli_exit_statuses_and_no_request(
    main: Any, server: Any, scored_file: Any, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    path, _ = scored_file
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    sent = server.count("")
    capsys.readouterr()
    assert main(["gate", str(path), "--fail-under", "faithfulness=0.6"]) == 0
    assert capsys.readouterr().out.strip().endswith("gates passed (1 of 1)")
    status = main(
        [
            "gate",
            str(path),
            "--fail-under",
            "faithfulness=0.7",
            "--min-pass-rate",
            "faithfulness=0.75",
        ]
    )
    assert status == EXIT_GATE_FAILED == 1
    out = capsys.readouterr().out
    assert "❌ faithfulness mean 0.625 < 0.700" in out and "1 gate failed (of 2)" in out
    assert "missing input" in out  # the worst row's reason
    assert main(["gate", str(path), "--fail-under", "faithfulness=0.7", "--ignore-failed"]) == 0
    # a threshold and strict mode for the pass rate
    strict = ["--min-pass-rate", "faithfulness=0.5", "--strict", "faithfulness"]
    assert main(["gate", str(path), *strict]) == 0  # 2 of 4 perfect
    assert (
        main(["gate", str(path), *strict, "--ignore-failed", "--threshold", "faithfulness=0.4"])
        == 0
    )
    assert (
        main(
            [
                "gate",
                str(path),
                "--min-pass-rate",
                "faithfulness=0.8",
                "--threshold",
                "faithfulness=0.4",
            ]
        )
        == 1
    )
    capsys.readouterr()
    assert main(["gate", str(path)]) == 2
    assert "no gate given" in capsys.readouterr().err
    assert main(["gate", str(path), "--fail-under", "relevancy=0.5"]) == 2
    assert "its metrics are ['faithfulness']" in capsys.readouterr().err
    assert main(["gate", str(path), "--fail-under", "faithfulness=80"]) == 2
    assert main(["gate", str(path), "--fail-under", "faithfulness"]) == 2
    absent = path.with_name("absent.parquet")
    assert main(["gate", str(absent), "--fail-under", "faithfulness=1"]) == 2
    assert not absent.exists()
    assert server.count("") == sent


def test_gate_options_on_another_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `ragframe score` uses: the options on any parser, checked against the run's
    metrics before anything is sent, applied to its output after."""
    parser = argparse.ArgumentParser()
    gate_cli.add_gate_options(parser)
    frame = pl.DataFrame({"faithfulness": [0.9, 0.7]})
    assert gate_cli.gate_exit(parser.parse_args([]), frame) is None
    args = parser.parse_args(["--fail-under", "faithfulness=0.85"])
    gate_cli.check_gate_options(args, ["faithfulness", "context_recall"])
    with pytest.raises(ConfigError, match=r"name \['faithfulness'\], which this run does not"):
        gate_cli.check_gate_options(args, ["context_recall"])
    assert gate_cli.gate_exit(args, frame) == 1
    assert "❌ faithfulness mean 0.800 < 0.850" in capsys.readouterr().out
    args = parser.parse_args(
        ["--min-pass-rate", "faithfulness=1", "--threshold", "faithfulness=0.7"]
    )
    assert gate_cli.gate_exit(args, frame) == 0
    # a parser with its own --threshold / --strict: the gate reads them
    own = argparse.ArgumentParser()
    own.add_argument("--threshold")
    own.add_argument("--strict")
    gate_cli.add_gate_options(own, thresholds=False)
    args = own.parse_args(["--min-pass-rate", "faithfulness=1", "--threshold", "faithfulness=0.8"])
    assert gate_cli.gate_exit(args, frame) == 1
