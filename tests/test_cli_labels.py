"""`ragframe summarize` and `ragframe compare` with `--labels` (issue 20): the human estimate
beside the judge's, always with n labelled, N scored and the method, and the same figures as
`ragframe.human_estimate` / `ragframe.human_estimate_difference` to the printed decimals."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.inputs.io import write_parquet

N_ROWS, N_LABELLED = 300, 60
META = {
    "metrics": {
        "faithfulness": {"direction": "higher", "config": {"threshold": 0.6}},
        "answer_relevancy": {"direction": "higher", "config": {}},
    }
}


def _scored(path: Path, seed: int, shift: float = 0.0) -> tuple[Path, np.ndarray]:
    """A scored file of N_ROWS rows keyed by id; the judge's faithfulness tracks a hidden
    truth (returned), so the labels drawn from it correlate with the score."""
    rng = np.random.default_rng(seed)
    truth = (rng.random(N_ROWS) < 0.6 + shift).astype(float)
    frame = pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(N_ROWS)],
            "experiment": rng.choice(["x", "y"], N_ROWS),
            "faithfulness": np.clip(0.25 + 0.5 * truth + rng.normal(0, 0.2, N_ROWS), 0, 1),
            "answer_relevancy": rng.random(N_ROWS),
        }
    )
    write_parquet(frame, path, META)
    return path, truth


def _labels(path: Path, truth: np.ndarray, rows: range) -> Path:
    """A filled label sheet (CSV) for `rows`: id and faithful as yes / no."""
    pl.DataFrame(
        {
            "id": [f"q{i}" for i in rows],
            "faithful": ["yes" if truth[i] else "no" for i in rows],
        }
    ).write_csv(path)
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    a, truth_a = _scored(tmp_path / "a.parquet", 0)
    b, truth_b = _scored(tmp_path / "b.parquet", 1, shift=0.2)
    return {
        "a": a,
        "b": b,
        "labels_a": _labels(tmp_path / "labels_a.csv", truth_a, range(N_LABELLED)),
        "labels_b": _labels(tmp_path / "labels_b.csv", truth_b, range(N_LABELLED)),
    }


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def _row(table: pl.DataFrame, method: str) -> dict[str, Any]:
    return table.filter(pl.col("method") == method).row(0, named=True)


def test_summarize_prints_the_human_estimate_beside_the_judges(files, capsys):
    status, out, _ = _run(["summarize", files["a"], "--labels", files["labels_a"]], capsys)
    assert status == 0
    expected = ragframe.human_estimate(files["a"], files["labels_a"], "faithfulness", "faithful")
    for method in ("ppi++", "judge_only", "labels_only"):
        row = _row(expected, method)
        line = next(x for x in out.splitlines() if x.startswith(method + " "))
        cells = line.split()
        assert cells[1] == f"{row['estimate']:.3f}", (method, line)
        assert f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]" in line
        assert cells[-2:] == [str(N_LABELLED), str(N_ROWS)]  # n labelled, N scored
    assert "n labelled" in out and "N scored" in out
    assert "metric faithfulness, label faithful" in out
    assert re.search(r"labels for a 95% interval of width 0\.1 \(\+-0\.05\): about \d+", out)
    # The summary's own table comes first, unchanged.
    assert out.index("faithfulness") < out.index("ppi++")


def test_summarize_by_group_and_another_score_column(files, capsys):
    argv = ["summarize", files["a"], "--labels", files["labels_a"], "--by", "experiment"]
    status, out, _ = _run([*argv, "--label-score", "answer_relevancy", "--level", "0.9"], capsys)
    assert status == 0
    expected = ragframe.human_estimate(
        files["a"], files["labels_a"], "answer_relevancy", by="experiment", level=0.9
    )
    for row in expected.filter(pl.col("method") == "ppi++").iter_rows(named=True):
        line = next(x for x in out.splitlines() if x.split()[:2] == [row["experiment"], "ppi++"])
        assert f"{row['estimate']:.3f}" in line and f"{row['ci_low']:.3f}" in line
        assert line.split()[-2:] == [str(row["n_labelled"]), str(row["n_scored"])]
    assert "90% interval" in out and "metric answer_relevancy" in out


def test_summarize_json_keeps_the_summary_and_adds_the_estimate(files, capsys):
    status, out, _ = _run(
        ["summarize", files["a"], "--labels", files["labels_a"], "--json"], capsys
    )
    assert status == 0
    got = json.loads(out)
    assert set(got) == {"summary", "human_estimate", "labels_needed"}
    assert [r["metric"] for r in got["summary"]] == ["faithfulness", "answer_relevancy"]
    expected = ragframe.human_estimate(files["a"], files["labels_a"])
    ppi = next(r for r in got["human_estimate"] if r["method"] == "ppi++")
    assert ppi["estimate"] == pytest.approx(_row(expected, "ppi++")["estimate"])
    assert (ppi["n_labelled"], ppi["n_scored"]) == (N_LABELLED, N_ROWS)
    assert got["labels_needed"]["n_batch"] == N_LABELLED
    # Without --labels the JSON is the rows, as before.
    _run(["summarize", files["a"], "--json"], capsys)


def test_summarize_csv_puts_the_estimate_on_the_labelled_metrics_row(files, capsys):
    status, out, _ = _run(["summarize", files["a"], "--labels", files["labels_a"], "--csv"], capsys)
    assert status == 0
    table = pl.read_csv(io.StringIO(out))
    expected = _row(ragframe.human_estimate(files["a"], files["labels_a"]), "ppi++")
    faith = table.filter(pl.col("metric") == "faithfulness").row(0, named=True)
    assert faith["human_estimate"] == pytest.approx(expected["estimate"])
    assert faith["human_ci_low"] == pytest.approx(expected["ci_low"])
    assert (faith["human_n_labelled"], faith["human_n_scored"]) == (N_LABELLED, N_ROWS)
    assert faith["human_method"] == "ppi++"
    other = table.filter(pl.col("metric") == "answer_relevancy").row(0, named=True)
    assert other["human_estimate"] is None


@pytest.mark.parametrize(
    ("columns", "missing"),
    [({"id": ["q1"], "label": [1]}, "faithful"), ({"key": ["q1"], "faithful": [1]}, "id")],
)
def test_a_labels_file_without_the_column_exits_2_naming_it(
    files, tmp_path, capsys, columns, missing
):
    bad = tmp_path / "bad.csv"
    pl.DataFrame(columns).write_csv(bad)
    for argv in (
        ["summarize", files["a"], "--labels", bad],
        ["compare", files["a"], files["b"], "--on", "id", "--labels", bad],
    ):
        status, _, err = _run(argv, capsys)
        assert status == 2, argv
        assert f"no column {missing!r} in the labels" in err
        assert str(list(columns)) in err  # the columns it has
        assert str(bad) in err  # which file


def test_a_label_score_the_file_lacks_exits_2(files, capsys):
    argv = ["summarize", files["a"], "--labels", files["labels_a"], "--label-score", "recall"]
    status, _, err = _run(argv, capsys)
    assert status == 2 and "--label-score 'recall'" in err and "faithfulness" in err


def _difference(files: dict[str, Path], labels_b: Path) -> dict[str, Any]:
    table = ragframe.human_estimate_difference(
        files["a"], files["b"], files["labels_a"], labels_b, "faithfulness", "faithful", "id"
    )
    return _row(table, "ppi++")


def test_compare_prints_the_paired_human_difference(files, capsys):
    argv = ["compare", files["a"], files["b"], "--on", "id", "--labels", files["labels_a"]]
    status, out, _ = _run([*argv, "--labels-b", files["labels_b"]], capsys)
    assert status == 0
    row = _difference(files, files["labels_b"])
    line = next(x for x in out.splitlines() if x.startswith("human estimate of faithful"))
    assert f"{row['estimate']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]" in line
    assert f"n labelled {N_LABELLED}" in line and f"N scored {N_ROWS}" in line
    assert "ppi++" in line and "people would prefer" in line
    assert ("prefer b" in line) == (row["ci_low"] > 0)


def test_compare_uses_one_labels_file_for_both_runs_by_default(files, capsys):
    status, out, _ = _run(
        ["compare", files["a"], files["b"], "--labels", files["labels_a"], "--json"], capsys
    )
    assert status == 0  # no --on: the labels join on id
    got = json.loads(out)
    ppi = next(r for r in got["human_estimate"] if r["method"] == "ppi++")
    assert ppi["estimate"] == pytest.approx(_difference(files, files["labels_a"])["estimate"])
    assert got["paired"] is False  # the comparison itself stays as asked


def test_compare_refuses_labels_on_a_composite_key(files, capsys):
    argv = ["compare", files["a"], files["b"], "--on", "id,experiment"]
    status, _, err = _run([*argv, "--labels", files["labels_a"]], capsys)
    assert status == 2 and "one key column" in err
