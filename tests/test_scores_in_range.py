"""Every reader of a scored file refuses a score outside [0, 1] (7.5, -0.2) with one line naming
the column, the row and the value (InputError, exit status 2), as `summarize` and `gate` do:
compare (paired and unpaired, either side), agreement, calibrate, apply_calibration,
human_estimate, the label sheet and the report's data. None of them averages, bins,
calibrates or compares such a score in silence."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.decide.judge_bench import _people
from ragframe.decide.jury_of_runs import combine_runs
from ragframe.errors import InputError
from ragframe.report._data import light_frame
from ragframe.report._source import load

ROWS = 30
BAD_ROW = 17


def _scored(bad: float | None = None) -> pl.DataFrame:
    """30 scored rows keyed by id, labelled 0 / 1; `bad` put at BAD_ROW (a null and a NaN
    elsewhere: rows that failed to score, never refused)."""
    scores: list[float | None] = [(i % 10) / 10 + 0.05 for i in range(ROWS)]
    scores[3], scores[5] = None, float("nan")
    if bad is not None:
        scores[BAD_ROW] = bad
    return pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(ROWS)],
            "faithfulness": scores,
            "faithfulness_detail": [{"error": None}] * ROWS,
            "other": [0.5] * ROWS,
            "faithful": [int(i % 10 >= 4) for i in range(ROWS)],
        }
    )


@pytest.fixture(params=[7.5, -0.2], ids=["7.5", "-0.2"])
def bad(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, float]:
    """(a scored Parquet file with the bad score, a good one, the bad value)."""
    bad_path, good_path = tmp_path / "bad.parquet", tmp_path / "good.parquet"
    _scored(request.param).write_parquet(bad_path)
    _scored().write_parquet(good_path)
    return str(bad_path), str(good_path), request.param


def _labels() -> pl.DataFrame:
    frame = _scored()
    return frame.select("id", "faithful").filter(pl.col("id") != "q3")


READERS: dict[str, Callable[[str, str], Any]] = {
    "compare paired, a": lambda b, g: ragframe.compare(b, g, on="id"),
    "compare paired, b": lambda b, g: ragframe.compare(g, b, on="id"),
    "compare unpaired, a": lambda b, g: ragframe.compare(b, g),
    "compare unpaired, b": lambda b, g: ragframe.compare(g, b, by="faithful"),
    "agreement binary": lambda b, g: ragframe.agreement(b, "faithfulness", "faithful", "binary"),
    "agreement pairwise": lambda b, g: ragframe.agreement(
        b, "other", "faithful", "pairwise", score_b="faithfulness"
    ),
    "calibrate": lambda b, g: ragframe.calibrate(b, "faithfulness", "faithful", folds=2),
    "calibrate labels=": lambda b, g: ragframe.calibrate(
        b, "faithfulness", "faithful", labels=_labels(), on="id", folds=2
    ),
    "apply_calibration": lambda b, g: ragframe.apply_calibration(
        b, ragframe.calibrate(g, "faithfulness", "faithful", folds=2)
    ),
    "human_estimate": lambda b, g: ragframe.human_estimate(b, _labels(), on="id"),
    "label_sheet score=": lambda b, g: ragframe.label_sheet(
        b, 5, score="faithfulness", label="human"
    ),
    "label_sheet shown": lambda b, g: ragframe.label_sheet(b, 5, label="human"),
    "report data": lambda b, g: light_frame(load(b), ["faithfulness"], [], {}),
    "report against": lambda b, g: ragframe.report(g, against=b, on="id"),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_a_score_outside_0_1(reader: str, bad: tuple[str, str, float]):
    bad_path, good_path, value = bad
    with pytest.raises(InputError) as caught:
        READERS[reader](bad_path, good_path)
    message = str(caught.value)
    assert "\n" not in message, message
    assert "'faithfulness'" in message and f"row {BAD_ROW} " in message, message
    assert f"{value!r} is outside [0, 1]" in message and "bad.parquet" in message, message


@pytest.mark.parametrize("reader", list(READERS))
def test_the_same_readers_take_scores_in_0_1_with_failed_rows(reader: str, tmp_path: Path) -> None:
    """0 and 1 are scores; null and NaN are rows that failed: none is refused."""
    path = tmp_path / "edges.parquet"
    _scored(1.0).with_columns(pl.col("faithfulness").fill_null(0.0)).write_parquet(path)
    READERS[reader](str(path), str(path))


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "{bad}", "{good}", "--on", "id"],
        ["compare", "{good}", "{bad}"],
        ["human-estimate", "{bad}", "--labels", "{labels}", "--on", "id"],
        ["calibrate", "{bad}", "--folds", "2", "--output", "{cal}"],
        ["label-sheet", "{bad}", "-n", "5", "--output", "{sheet}", "--label-column", "human"],
    ],
    ids=lambda argv: argv[0],
)
def test_the_cli_exits_2_with_one_line_naming_column_row_and_value(
    argv: list[str], bad: tuple[str, str, float], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad_path, good_path, value = bad
    labels = tmp_path / "labels.csv"
    _labels().write_csv(labels)
    paths = {"bad": bad_path, "good": good_path, "labels": str(labels)}
    paths["sheet"], paths["cal"] = str(tmp_path / "sheet.csv"), str(tmp_path / "cal.json")
    assert main([a.format(**paths) for a in argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"'faithfulness', row {BAD_ROW} " in err and f"{value!r} is outside [0, 1]" in err
    assert not any(Path(paths[k]).exists() for k in ("sheet", "cal"))  # nothing written


def test_judge_bench_people_row_still_reads_preferences_from_minus_2_to_2() -> None:
    """The annotator-vs-annotator row feeds preferences (-2..2) to `agreement` as scores: it
    maps them into [0, 1] keeping their sign, so its figures are unchanged and nothing is
    refused."""
    pairs = pl.DataFrame(
        {
            "correctness_pref_1": [-2.0, -1.0, 0.0, 1.0, 2.0, 2.0, -1.0, 1.0],
            "correctness_pref_2": [-1.0, -2.0, 1.0, 2.0, 1.0, -1.0, 0.0, 2.0],
        }
    )
    spec = type("Spec", (), {"name": "ragchecker", "unit": "pair"})()
    table = _people(pairs, spec, {"resamples": 50})  # type: ignore[arg-type]
    figures = dict(zip(table["figure"], table["value"], strict=True))
    # 7 pairs annotator 2 did not tie; annotator 1 tied one of them; 5 of the other 6 agree.
    assert figures["label_ties"] == pytest.approx(1 / 8)
    assert figures["judge_ties"] == pytest.approx(1 / 7)
    assert figures["accuracy"] == pytest.approx(5 / 6)


def test_a_jury_of_runs_refuses_a_run_with_a_score_outside_0_1(
    bad: tuple[str, str, float],
) -> None:
    """Each run is checked as it is read, before any vote (the readers' table holds no
    faithfulness claims to vote on, so this reader has its own test)."""
    bad_path, good_path, value = bad
    with pytest.raises(InputError, match=rf"row {BAD_ROW} .*{value!r} is outside \[0, 1\]"):
        combine_runs([good_path, bad_path], names=["good", "bad"])


@pytest.mark.parametrize("edge", [math.nextafter(1, 2), -5e-17], ids=["1+ulp", "-5e-17"])
@pytest.mark.parametrize("reader", list(READERS))
def test_rounding_past_a_bound_is_clipped_not_refused(
    reader: str, edge: float, tmp_path: Path
) -> None:
    """1 + 2e-16 (a harmonic mean of ones) and -5e-17 are rounding, inside SCORE_SLACK: every
    reader takes them, as `mean_interval` and the engine do."""
    path = tmp_path / "edges.parquet"
    _scored(edge).write_parquet(path)
    READERS[reader](str(path), str(path))


@pytest.mark.parametrize("edge", [math.nextafter(1, 2), -5e-17], ids=["1+ulp", "-5e-17"])
def test_summarize_and_gate_read_rounding_past_a_bound_as_the_bound(
    edge: float, tmp_path: Path
) -> None:
    """Clipped, not refused: every score at the edge reads, and averages to, exactly the bound."""
    path = tmp_path / "edges.parquet"
    pl.DataFrame({"faithfulness": [edge] * 12}).write_parquet(path)
    table = ragframe.summarize(str(path))
    assert table["mean"][0] == round(edge), table
    assert 0.0 <= table["ci_low"][0] <= table["ci_high"][0] <= 1.0, table
    gate = ragframe.check_gates(str(path), fail_under={"faithfulness": round(edge)})
    assert gate.passed, gate
    values = light_frame(load(str(path)), ["faithfulness"], [], {}).frame["faithfulness"]
    assert values.to_list() == [float(round(edge))] * 12  # the values a reader passes on


@pytest.mark.parametrize("value", [1 + 1e-6, -1e-6])
@pytest.mark.parametrize("read", ["summarize", "gate", "human_estimate"])
def test_past_the_slack_a_score_is_still_refused(value: float, read: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    _scored(value).write_parquet(path)
    with pytest.raises(InputError, match=rf"row {BAD_ROW} .*is outside \[0, 1\]"):
        if read == "summarize":
            ragframe.summarize(str(path))
        elif read == "gate":
            ragframe.check_gates(str(path), fail_under={"faithfulness": 0.5})
        else:
            ragframe.human_estimate(str(path), _labels(), on="id")
