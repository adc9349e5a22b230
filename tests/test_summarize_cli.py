"""`ragframe summarize`: the table in the terminal, and --json / --csv that parse back into the
frame `ragframe.decide.summarize.summarize` returns."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from ragframe import cli
from ragframe.cli import gate as gate_cli
from ragframe.cli import summarize as summarize_cli
from ragframe.decide.summarize import summarize
from ragframe.errors import ConfigError
from ragframe.inputs.io import write_parquet


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`ragframe.cli.main` with `gate` and `summarize` registered (whether or not the package
    registers them yet)."""
    extra = tuple(m for m in (gate_cli, summarize_cli) if m not in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", (*cli.SUBCOMMANDS, *extra))
    yield cli.main


@pytest.fixture
def scored(tmp_path: Path) -> Path:
    """A scored sample of 300 rows from a log of 10,000, two experiments, a threshold on
    faithfulness in the metadata, some rows that failed to score."""
    rng = np.random.default_rng(0)
    frame = pl.DataFrame(
        {
            "experiment": rng.choice(["a", "b"], 300),
            "faithfulness": rng.random(300),
            "hallucination": rng.random(300) * 0.5,
        }
    ).with_columns(
        pl.when(pl.int_range(pl.len()) % 10 == 0)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness"),
        pl.struct(error=pl.lit(None, pl.String)).alias("faithfulness_detail"),
        pl.struct(error=pl.lit(None, pl.String)).alias("hallucination_detail"),
    )
    path = tmp_path / "scored.parquet"
    meta = {
        "metrics": {
            "faithfulness": {"direction": "higher", "config": {"threshold": 0.6}},
            "hallucination": {"direction": "lower", "config": {}},
        },
        "sample": {"rows": 300, "of": 10_000},
    }
    write_parquet(frame, path, meta)
    return path


def test_json_and_csv_parse_back_into_the_summary(
    main: Any, scored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = summarize(scored, by="experiment", thresholds={"hallucination": 0.3})
    options = ["--by", "experiment", "--threshold", "hallucination=0.3"]
    assert main(["summarize", str(scored), *options, "--json"]) == 0
    parsed = pl.read_json(io.StringIO(capsys.readouterr().out))
    assert parsed.equals(expected)
    assert main(["summarize", str(scored), *options, "--csv"]) == 0
    parsed = pl.read_csv(io.StringIO(capsys.readouterr().out), schema=expected.schema)
    assert parsed.drop("ci_low", "ci_high", "mean", "pass_rate").equals(
        expected.drop("ci_low", "ci_high", "mean", "pass_rate")
    )
    for column in ("ci_low", "ci_high", "mean", "pass_rate"):
        assert parsed[column].to_list() == pytest.approx(expected[column].to_list())
    assert set(parsed["status"]) <= {"✅", "❌"}
    assert parsed["population_rows"].unique().to_list() == [10_000]


def test_terminal_table_says_what_the_figures_rest_on(
    main: Any, scored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summarize", str(scored), "--metrics", "faithfulness,hallucination"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines[0].split()
    assert header[:6] == ["metric", "better", "n", "scored", "failed", "mean"]
    assert re.split(r"  +", lines[0].strip())[-2:] == ["mean vs threshold", "pass rate"]
    table = summarize(scored)
    faith = table.filter(pl.col("metric") == "faithfulness").row(0, named=True)
    row = next(line for line in lines if line.startswith("faithfulness"))
    assert f"{faith['n']}" in row and f"{faith['failed']}" in row
    assert f"[{faith['ci_low']:.3f}, {faith['ci_high']:.3f}]" in row
    # the mark beside the mean, with the comparison it made; the pass rate with its counts
    mark = f"{faith['status']} {'≥' if faith['status'] == '✅' else '<'} 0.6"
    assert f"{mark} " in row and f"{faith['pass_rate']:.1%} ({faith['passed']} of " in row
    hall = next(line for line in lines if line.startswith("hallucination"))
    assert "↓ lower" in hall and hall.rstrip().endswith("-")  # no threshold: no status
    assert "figures from a sample: 300 of 10000 rows" in out
    assert "rows that failed to score are counted in `failed`, not in the rate" in out


def test_summarize_cli_groups_and_errors(
    main: Any, scored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["summarize", str(scored), "--by", "experiment", "--level", "0.9"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["experiment", "metric"]
    assert "90% interval" in out
    assert sum(line.startswith(("a ", "b ")) for line in out.splitlines()) == 4
    assert main(["summarize", str(scored), "--by", "team"]) == 2
    assert "by= names ['team']" in capsys.readouterr().err
    assert main(["summarize", str(scored), "--threshold", "relevancy=0.5"]) == 2
    assert main(["summarize", str(scored), "--level", "95"]) == 2
    assert "argument --level: must be a confidence level strictly between 0 and 1" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("name", ["method", "level", "metric", "n", "status"])
def test_a_group_named_like_a_summary_column_is_refused_in_one_line(
    main: Any, scored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """summarize's table cannot hold a group column `method` beside its own `method`: the
    clash is a ConfigError (exit 2) naming it and how to rename, before the file is read."""
    frame = pl.read_parquet(scored).with_columns(pl.col("experiment").alias(name))
    path = tmp_path / "grouped.parquet"
    write_parquet(frame, path, {})
    assert main(["summarize", str(path), "--by", f"experiment,{name}"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"by= names {name!r}, which is also a column of summarize's table" in err, err
    assert f"frame.rename({{{name!r}: '{name}_group'}})" in err and "\n" not in err, err
    with pytest.raises(ConfigError, match=f"by= names {name!r}"):
        summarize(frame, by=name)
    with pytest.raises(ConfigError, match=f"by= names {name!r}"):  # before reading anything
        summarize(tmp_path / "no such file.parquet", by=[name])
    renamed = summarize(frame.rename({name: f"{name}_group"}), by=f"{name}_group")
    assert renamed.columns[:2] == [f"{name}_group", "metric"] and renamed.height == 4


def test_a_group_named_twice_or_as_a_metric(
    main: Any, scored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """by= naming a column twice groups by it once; a detected score column named in by= is
    a group, not a metric; named in both by= and metrics=, it is one line (exit 2)."""
    frame = pl.read_parquet(scored)
    twice = summarize(frame, by=["experiment", "experiment"])
    assert twice.equals(summarize(frame, by="experiment"))
    grouped = summarize(frame.with_columns(pl.col("hallucination").round(1)), by="hallucination")
    assert grouped.columns[:2] == ["hallucination", "metric"]
    assert set(grouped["metric"]) == {"faithfulness"}
    argv = ["summarize", str(scored), "--by", "faithfulness", "--metrics", "faithfulness"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "'faithfulness' is named both in by= and in metrics=" in err and "\n" not in err, err
