"""Thresholds (issue 11): every metric takes `threshold=` and `strict=`; a run with one gets a
Boolean `{metric}_pass` per row and a pass rate with ✅ / ❌ in its summary."""

from __future__ import annotations

import inspect
import re

import polars as pl
import pytest

import ragframe
from ragframe import ConfigError, Faithfulness, GEval, Hallucination
from ragframe.engine.stream import score_file
from ragframe.metrics import REGISTRY
from ragframe.metrics.thresholds import Threshold, parse_metric_values


def rows(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What is fact {i}?" for i in range(n)],
            "answer": [f"Fact {i} is true. It was found in {1900 + i}." for i in range(n)],
            "contexts": [[f"Fact {i} is true.", "Unrelated text."] for i in range(n)],
            "ground_truth": [f"Fact {i} is true." for i in range(n)],
        }
    )


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_metric_takes_threshold_and_strict(name):
    cls = REGISTRY[name]
    params = inspect.signature(cls).parameters
    assert params["threshold"].default is None and params["strict"].default is False
    metric = cls(threshold=0.7, strict=True)
    assert (metric.threshold, metric.strict) == (0.7, True)
    assert metric.pass_rule == Threshold(0.7, True, cls.direction)
    assert metric.config()["threshold"] == 0.7 and metric.config()["strict"] is True
    with pytest.raises(ConfigError, match=f"{cls.__name__}: threshold"):
        cls(threshold=1.5)
    assert cls().pass_rule is None  # no threshold given: no pass column


def test_geval_takes_them_too():
    metric = GEval(criteria="Is it correct?", threshold=0.6)
    assert metric.pass_rule == Threshold(0.6, False, "higher")


def test_pass_rule_respects_direction_and_strict():
    scores = pl.DataFrame({"s": [0.0, 0.3, 0.5, 0.8, 1.0, None]})

    def passes(rule: Threshold) -> list[bool | None]:
        return scores.select(rule.passes(pl.col("s"))).to_series().to_list()

    assert passes(Threshold(0.5)) == [False, False, True, True, True, None]
    assert passes(Threshold(0.5, direction="lower")) == [True, True, True, False, False, None]
    assert passes(Threshold(0.5, strict=True)) == [False, False, False, False, True, None]
    lower_strict = Threshold(0.5, strict=True, direction="lower")
    assert passes(lower_strict) == [True, False, False, False, False, None]


def test_a_run_with_thresholds_gets_pass_columns_and_a_pass_rate(server, judge):
    metrics = [Faithfulness(threshold=0.6), Hallucination(threshold=0.3), "context_recall"]
    result = ragframe.run(rows(12), metrics, judge=judge)
    out = result.frame
    assert "context_recall_pass" not in out.columns
    expected = out.select(
        (pl.col("faithfulness") >= 0.6).alias("faithfulness_pass"),
        (pl.col("hallucination") <= 0.3).alias("hallucination_pass"),
    )
    assert out.select("faithfulness_pass", "hallucination_pass").equals(expected)
    line = result.summary()["metrics"]["hallucination"]
    scored = out["hallucination"].drop_nulls()
    assert line["pass_rate"] == (scored <= 0.3).sum() / scored.len()
    assert line["status"] == ("✅" if scored.mean() <= 0.3 else "❌")
    text = str(result)
    row = next(x for x in text.splitlines() if "hallucination" in x.split())
    # The mark sits beside the mean it judges, with the comparison it made; the pass rate apart.
    mark = f"{line['status']} {'≤' if line['status'] == '✅' else '>'} 0.3"
    mean = rf"{line['mean']:.3f} +\[{line['ci_low']:.3f}, {line['ci_high']:.3f}\]"
    assert re.search(f"{mean} +{mark} +{line['pass_rate']:.1%}", row), row
    assert result.metadata()["metrics"]["faithfulness"]["config"]["threshold"] == 0.6


def test_thresholds_by_name_equal_the_metrics_own(server, judge):
    by_name = ragframe.evaluate(
        rows(5), ["faithfulness"], judge=judge, thresholds={"faithfulness": 0.6}
    )
    own = ragframe.evaluate(rows(5), [Faithfulness(threshold=0.6)], judge=judge)
    assert by_name.equals(own)
    with pytest.raises(ConfigError, match="does not score"):
        ragframe.evaluate(rows(5), ["faithfulness"], judge=judge, thresholds={"recall": 0.6})


def test_a_pass_column_never_shadows_an_input(server, judge):
    frame = rows(2).with_columns(pl.lit(True).alias("faithfulness_pass"))
    with pytest.raises(ConfigError, match="faithfulness_pass"):
        ragframe.evaluate(frame, [Faithfulness(threshold=0.5)], judge=judge)
    assert server.count() == 0


def test_a_streamed_run_counts_passes_as_a_run_in_memory_does(server, judge, tmp_path):
    source = tmp_path / "log.parquet"
    rows(9).write_parquet(source)
    metrics = [Faithfulness(threshold=0.6, strict=False)]
    streamed = score_file(source, tmp_path / "out.parquet", metrics, judge=judge, chunk_rows=4)
    in_memory = ragframe.run(rows(9), metrics, judge=judge)
    keys = ("pass_rate", "passed", "status", "threshold", "strict")
    got = streamed.summary()["metrics"]["faithfulness"]
    want = in_memory.summary()["metrics"]["faithfulness"]
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
    assert pl.read_parquet(tmp_path / "out.parquet")["faithfulness_pass"].equals(
        in_memory.frame["faithfulness_pass"]
    )


def test_metric_values_are_parsed_and_checked():
    assert parse_metric_values("faithfulness=0.8, context_recall=0.7", "--threshold") == {
        "faithfulness": 0.8,
        "context_recall": 0.7,
    }
    for bad in ("faithfulness", "faithfulness=high", "faithfulness=1.2", "a=0.1,a=0.2"):
        with pytest.raises(ConfigError, match="--threshold"):
            parse_metric_values(bad, "--threshold")


def test_score_with_thresholds_and_gates_from_the_command_line(server, tmp_path, capsys):
    """--threshold/--strict shape the run's pass columns; --fail-under gates it after
    scoring: exit 1 with the gate table when the mean falls short, 0 when it holds; a gate on
    a metric the run does not score is refused before any request."""
    from ragframe.cli import main

    source, target = tmp_path / "log.parquet", tmp_path / "out.parquet"
    rows(8).write_parquet(source)
    argv = ["score", str(source), "-o", str(target), "--metrics", "faithfulness,hallucination"]
    argv += ["--model", "fake-judge", "--base-url", server.base_url, "--no-progress"]
    argv += ["--no-cache", "--overwrite", "--threshold", "faithfulness=0.6", "--strict"]
    argv += ["hallucination"]
    assert main([*argv, "--fail-under", "faithfulness=0.0"]) == 0
    scored = pl.read_parquet(target)
    assert scored["faithfulness_pass"].equals(
        (scored["faithfulness"] >= 0.6).alias("faithfulness_pass")
    )
    assert scored["hallucination_pass"].equals(
        (scored["hallucination"] == 0.0).alias("hallucination_pass")
    )
    capsys.readouterr()
    assert scored["faithfulness"].mean() < 1.0  # so a gate at 1.0 must fail
    assert main([*argv, "--fail-under", "faithfulness=1.0"]) == 1
    assert "faithfulness" in capsys.readouterr().out
    sent = server.count()
    assert main([*argv, "--fail-under", "context_recall=0.5"]) == 2
    assert server.count() == sent
