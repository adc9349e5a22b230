"""Issue 28: `ragframe score --dry-run` needs no `-o` and never refuses an existing one (it
writes nothing); `g_eval` named (`--metrics`, `metrics=[...]`) says how to build a G-Eval
with your criteria instead of "unknown metric"."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.engine.spec import RunSpec


def log(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "in.parquet"
    pl.DataFrame(
        {
            "question": [f"question {i}" for i in range(n)],
            "answer": [f"answer {i}" for i in range(n)],
            "contexts": [[f"context {i}"] for i in range(n)],
            "ground_truth": [f"truth {i}" for i in range(n)],
        }
    ).write_parquet(path)
    return path


def judge_args(server) -> list[str]:
    return ["--base-url", server.base_url, "--model", "m", "--no-cache", "--no-progress"]


def test_dry_run_needs_no_output(server, tmp_path, capsys):
    args = ["score", str(log(tmp_path)), "--metrics", "context_recall", *judge_args(server)]
    assert main([*args, "--dry-run"]) == 0
    assert "estimate: 3 requests" in capsys.readouterr().out
    assert server.requests == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_dry_run_ignores_an_existing_output_and_leaves_it_alone(server, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"not touched")
    args = ["score", str(log(tmp_path)), "-o", str(out), "--metrics", "context_recall"]
    assert main([*args, *judge_args(server), "--dry-run"]) == 0
    assert "estimate: 3 requests" in capsys.readouterr().out
    assert out.read_bytes() == b"not touched" and server.requests == []
    # Without --dry-run the existing output is still refused, before anything is sent.
    assert main([*args, *judge_args(server)]) == 2
    assert "exists; add --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"not touched" and server.requests == []


def test_without_dry_run_the_output_is_required(server, tmp_path, capsys):
    args = ["score", str(log(tmp_path)), "--metrics", "context_recall", *judge_args(server)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "-o/--output is required" in err and "--dry-run" in err
    assert len(err.splitlines()) == 1
    assert server.requests == []


def test_dry_run_without_output_still_checks_input_and_metrics(server, tmp_path, capsys):
    missing = tmp_path / "nowhere.parquet"
    assert main(["score", str(missing), *judge_args(server), "--dry-run"]) == 2
    assert "nowhere.parquet" in capsys.readouterr().err
    path = log(tmp_path)
    assert (
        main(["score", str(path), "--metrics", "faithfullness", *judge_args(server), "--dry-run"])
        == 2
    )
    assert "unknown metric 'faithfullness'" in capsys.readouterr().err
    pl.read_parquet(path).drop("ground_truth").write_parquet(path)
    assert (
        main(["score", str(path), "--metrics", "context_recall", *judge_args(server), "--dry-run"])
        == 2
    )
    assert "ground_truth" in capsys.readouterr().err
    assert server.requests == []


@pytest.mark.parametrize("metrics", ["g_eval", "faithfulness, g_eval"])
def test_cli_g_eval_says_how_to_build_it_before_reading(server, tmp_path, capsys, metrics):
    missing = tmp_path / "nowhere.parquet"  # never read: the metrics are refused first
    args = ["score", str(missing), "-o", str(tmp_path / "out.parquet"), "--metrics", metrics]
    assert main([*args, *judge_args(server)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown metric" not in err and "nowhere" not in err
    assert "criteria" in err and 'GEval(name=..., criteria="...")' in err
    assert server.requests == [] and not (tmp_path / "out.parquet").exists()


def test_python_g_eval_by_name_says_how_to_build_it(server, judge):
    frame = pl.DataFrame({"question": ["q"], "answer": ["a"]})
    for metrics in (["g_eval"], ["answer_relevancy", "g_eval"], "g_eval"):
        with pytest.raises(ragframe.ConfigError, match=r"criteria.*GEval\(name=") as caught:
            ragframe.evaluate(frame, metrics, judge=judge)
        assert "unknown metric" not in str(caught.value)
    assert server.requests == []


def test_the_advice_builds_a_metric_and_a_built_g_eval_is_recorded_by_name():
    # What the message tells the user to write is accepted, under its default name too:
    # a spec records a run's metrics by the names its instances bear.
    metric = ragframe.GEval(name="helpfulness", criteria="Is the answer helpful?")
    assert metric.name == "helpfulness"
    assert RunSpec.of(("g_eval",)).metrics == ("g_eval",)
    assert RunSpec.of([ragframe.GEval(criteria="Be correct.")]).metrics[0].name == "g_eval"
