"""Label sheets: the draw, the sheet, and the command-line round trip through
`label-sheet`, `human-estimate` and `calibrate`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ragframe.cli import calibrate as cli_calibrate
from ragframe.cli import human as cli_human
from ragframe.cli import label_sheet as cli_sheet
from ragframe.decide.calibration import CalibrationWarning
from ragframe.decide.human import human_estimate
from ragframe.decide.label_sheet import draw_labels, format_contexts, label_sheet
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import write_parquet


def _scored(n: int = 1000, seed: int = 0, with_id: bool = True) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    f = rng.beta(4, 1.5, size=n)  # mostly high scores: low ones are rare
    truth = rng.uniform(size=n) < f
    frame = pl.DataFrame(
        {
            "question": [f"question {i}" for i in range(n)],
            "answer": [f"answer {i}" for i in range(n)],
            "contexts": [[f"passage {i}a", f"passage {i}b"] for i in range(n)],
            "faithfulness": f,
            "faithfulness_detail": [
                {"verdicts": [{"claim": f"c{i}", "verdict": "yes", "reason": "said in [1]"}]}
                for i in range(n)
            ],
            "truth": truth,
        }
    )
    if with_id:
        frame = frame.with_columns(pl.format("q{}", pl.int_range(pl.len())).alias("id"))
    return frame


def _run(module, argv: list[str]) -> int:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser(prog="ragframe")
    module.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_uniform_draw() -> None:
    frame = _scored().with_columns(
        pl.when(pl.int_range(pl.len()) < 30)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness")
    )
    drawn, info = draw_labels(frame, 100, score="faithfulness", seed=3)
    assert drawn.height == 100 and drawn["id"].n_unique() == 100
    assert drawn["faithfulness"].null_count() == 0
    assert info["of"] == 970 and info["null_scores"] == 30 and info["draw"] == "uniform"
    again, _ = draw_labels(frame, 100, score="faithfulness", seed=3)
    assert again["id"].to_list() == drawn["id"].to_list()
    other, _ = draw_labels(frame, 100, score="faithfulness", seed=4)
    assert other["id"].to_list() != drawn["id"].to_list()
    with pytest.raises(ConfigError, match="970 rows to draw from"):
        draw_labels(frame, 2000, score="faithfulness")


def test_stratified_draw_weights() -> None:
    drawn, info = draw_labels(_scored(), 200, score="faithfulness", stratify=True, seed=1)
    drawn_per = [s["drawn"] for s in info["strata"]]
    sizes = [s["rows"] for s in info["strata"]]
    assert sum(drawn_per) == 200 and sum(sizes) == 1000
    assert sizes[0] < 50 and drawn_per[0] == sizes[0]  # a rare low bin: every row labelled
    assert len(set(drawn_per[1:])) <= 2  # the rest split evenly (to one row)
    assert drawn_per[0] / sizes[0] > 3 * 200 / 1000  # low scores oversampled
    for s in info["strata"]:
        rows = drawn.filter(pl.col("stratum") == s["stratum"])
        assert rows.height == s["drawn"]
        assert rows["inclusion_probability"].unique().to_list() == [s["drawn"] / s["rows"]]
        assert rows["sample_weight"][0] == pytest.approx(s["rows"] / s["drawn"])
    assert drawn["sample_weight"].sum() == pytest.approx(1000)  # the weights add up to N
    with pytest.raises(ConfigError, match="stratify by"):
        draw_labels(_scored(), 10, stratify=True)


def test_sheet_layout_and_row_index() -> None:
    sheet, info = label_sheet(_scored(with_id=False).drop("truth"), 5, score="faithfulness")
    assert info["key"] == "row_index"
    assert sheet.columns == [
        "row_index",
        "question",
        "answer",
        "contexts",
        "faithfulness",
        "faithfulness_detail",
        "faithful",
    ]
    row = sheet.row(0, named=True)
    i = int(row["row_index"])
    assert row["question"] == f"question {i}"
    assert row["contexts"] == f"[1] passage {i}a\n[2] passage {i}b"
    assert (
        row["faithfulness_detail"]
        == f"verdicts:\n  1. claim: c{i}; verdict: yes; reason: said in [1]"
    )
    assert sheet["faithful"].null_count() == 5
    assert format_contexts([]) == ""


def test_cli_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scored = tmp_path / "scored.parquet"
    frame = _scored()
    write_parquet(frame.drop("truth"), scored, {"judge": {"model": "j"}})
    sheet_path = tmp_path / "to_label.csv"
    argv = ["label-sheet", str(scored), "-n", "200", "-o", str(sheet_path), "--stratify"]
    assert _run(cli_sheet, argv) == 0
    said = capsys.readouterr().out
    assert "a stratified draw" in said and "ragframe human-estimate" in said
    with pytest.raises(ConfigError, match="--overwrite"):
        _run(cli_sheet, argv)
    # A person fills the sheet in (here: from the hidden truth), as yes / no.
    sheet = pl.read_csv(sheet_path, infer_schema_length=0)
    truth = dict(zip(frame["id"], frame["truth"], strict=True))
    filled = sheet.with_columns(
        pl.Series("faithful", ["yes" if truth[k] else "no" for k in sheet["id"]])
    )
    filled.write_csv(sheet_path)
    assert _run(cli_human, ["human-estimate", str(scored), "--labels", str(sheet_path)]) == 0
    out = capsys.readouterr().out
    assert "ppi++" in out and "labels_only" in out and "judge_only" in out
    assert "sample_weight" in out  # the stratified weights were used, and it says so
    assert "labels for a 95% interval of width 0.1" in out
    assert (
        _run(cli_human, ["human-estimate", str(scored), "--labels", str(sheet_path), "--json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)
    ppi = next(r for r in rows if r["method"] == "ppi++")
    assert ppi["n_labelled"] == 200 and ppi["n_scored"] == 1000
    true_rate = float(frame["truth"].mean())
    assert ppi["ci_low"] <= true_rate <= ppi["ci_high"]
    unweighted = human_estimate(scored, sheet_path, weight=None)
    assert unweighted["estimate"][0] != pytest.approx(ppi["estimate"])
    # Calibrate on the filled sheet's rows, then use the map in the estimate.
    calib = tmp_path / "faithfulness.calib.json"
    argv = ["calibrate", str(scored), "--labels", str(sheet_path), "-o", str(calib)]
    assert _run(cli_calibrate, argv) == 0
    out = capsys.readouterr().out
    assert "fitted on 200 labelled rows" in out and "Brier" in out and "ECE" in out
    assert json.loads(calib.read_text())["judge"] == {"model": "j"}
    argv = ["human-estimate", str(scored), "--labels", str(sheet_path), "--calibration", str(calib)]
    assert _run(cli_human, argv) == 0
    # Scores from another judge: the map was not fitted for them, and the command says so.
    other = tmp_path / "other.parquet"
    write_parquet(frame.drop("truth"), other, {"judge": {"model": "k"}})
    argv[1] = str(other)
    with pytest.warns(CalibrationWarning, match="judge {'model': 'k'}"):
        assert _run(cli_human, argv) == 0


def test_cli_errors_say_what_to_do(tmp_path: Path) -> None:
    scored = tmp_path / "scored.parquet"
    write_parquet(_scored(with_id=False).drop("truth"), scored, {})
    labels = tmp_path / "labels.csv"
    pl.DataFrame({"row_index": [1, 2, 3], "faithful": [1, 0, 1]}).write_csv(labels)
    with pytest.raises(InputError, match="--on row_index"):
        _run(cli_human, ["human-estimate", str(scored), "--labels", str(labels)])
    argv = ["human-estimate", str(scored), "--labels", str(labels), "--on", "row_index"]
    assert _run(cli_human, argv) == 0
