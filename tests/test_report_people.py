"""The report's sections on what people would say and on juries: the reliability diagram of a
calibration draws (headless Chromium) with its held-out figures, the human estimate of the
whole log equals `ragframe.human_estimate` to the printed decimals, and a jury's run shows its
judges' agreement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from test_jury import jury, rows, scripted
from test_report import cells, check_drawn, chromium, section  # noqa: F401  (fixture)

import ragframe
from ragframe.stats import format_interval, format_mean
from ragframe.testing.server import FakeServer


def labelled_log(n: int = 200, seed: int = 0) -> pl.DataFrame:
    """Scores with human labels that follow them (a person says yes more often when the
    judge scores higher)."""
    rng = np.random.default_rng(seed)
    scores = rng.random(n)
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "faithfulness": scores,
            "faithfulness_detail": [{"error": None}] * n,
            "faithful": rng.random(n) < 0.2 + 0.6 * scores,
        }
    )


def test_reliability_diagram_draws_with_its_held_out_figures(
    chromium: str,  # noqa: F811  (the fixture, imported from test_report)
    tmp_path: Path,
) -> None:
    log = labelled_log()
    cal = ragframe.calibrate(log, score="faithfulness", label="faithful")
    page = tmp_path / "report.html"
    html = ragframe.report(log.drop("faithful"), calibration=cal, output=page)
    part = section(html, "calibration")
    table = cells(part)
    assert table[0][:2] == ["held-out figure", "value"]
    brier = next(r for r in table if r[0] == "brier")
    assert brier[1] == format_mean(cal.brier) and brier[3] == str(cal.n)
    assert "Reliability of faithfulness" in html
    check_drawn(chromium, page, tmp_path)


def test_the_human_estimate_beside_the_judge(tmp_path: Path) -> None:
    log = labelled_log(400)
    labels = log.select("id", "faithful").sample(80, seed=1)
    scored = log.drop("faithful")
    html = ragframe.report(scored, labels=labels, label_score="faithfulness")
    table = cells(section(html, "people"))
    expected = ragframe.human_estimate(scored, labels, score="faithfulness", on="id")
    for row in expected.iter_rows(named=True):
        shown = next(r for r in table if r[1] == row["method"])
        assert shown[2] == format_mean(row["estimate"])
        assert shown[3] == format_interval(row["ci_low"], row["ci_high"])
        assert shown[4:6] == [str(row["n_labelled"]), str(row["n_scored"])]
    assert {r[1] for r in table[1:]} == {"ppi++", "judge_only", "labels_only"}


def test_a_jury_run_shows_its_judges_agreement(tmp_path: Path) -> None:
    with FakeServer(handler=scripted) as server:
        result = ragframe.run(rows(6), ["faithfulness"], judges=jury(server, tmp_path))
    html = ragframe.report(result)
    part = section(html, "jury")
    assert "honest-a, honest-b, liar-c" in html
    table = cells(part)
    claims = next(r for r in table if r[:2] == ["faithfulness", "claims"])
    figure = result.extra["jury"]["metrics"]["faithfulness"]["items"]
    assert claims[2] == format_mean(figure["alpha"]) and claims[4] == str(figure["n"])


def test_a_calibration_from_its_file(tmp_path: Path) -> None:
    log = labelled_log()
    path = tmp_path / "faithfulness.calib.json"
    ragframe.calibrate(log, score="faithfulness", label="faithful").save(path)
    html = ragframe.report(log.drop("faithful"), calibration=str(path))
    assert "<section id='calibration'>" in html


def test_the_command_line_report_with_labels_and_a_calibration(tmp_path: Path) -> None:
    from ragframe.cli import main

    log = labelled_log(300)
    log.drop("faithful").write_parquet(tmp_path / "scored.parquet")
    log.select("id", "faithful").head(90).write_csv(tmp_path / "labels.csv")
    ragframe.calibrate(log, score="faithfulness", label="faithful").save(tmp_path / "c.json")
    argv = ["report", str(tmp_path / "scored.parquet"), "-o", str(tmp_path / "r.html")]
    argv += ["--calibration", str(tmp_path / "c.json"), "--labels", str(tmp_path / "labels.csv")]
    assert main([*argv, "--label-score", "faithfulness"]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "<section id='calibration'>" in html and "<section id='people'>" in html
    assert "ppi++" in section(html, "people")
