"""Calibration: isotonic / monotone logistic fits, cross-fitted quality, the JSON file."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from ragframe.decide.calibration import (
    Calibration,
    CalibrationWarning,
    apply_calibration,
    calibrate,
    fit_isotonic,
    fit_logistic,
)
from ragframe.decide.human import human_estimate
from ragframe.errors import InputError
from ragframe.inputs.io import write_parquet


def _labelled(n: int, seed: int = 0, shape: float = 2.0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = np.round(rng.uniform(size=n), 2)  # ties, as coarse judge scores have
    y = rng.uniform(size=n) < x**shape
    return pl.DataFrame({"id": np.arange(n), "faithfulness": x, "faithful": y})


def test_isotonic_matches_scikit_learn() -> None:
    # scikit-learn is a declared test dependency: missing, this test fails rather than skips.
    from sklearn.isotonic import IsotonicRegression

    frame = _labelled(400, seed=1)
    x, y = frame["faithfulness"].to_numpy(), frame["faithful"].to_numpy().astype(float)
    xs, ps = fit_isotonic(x, y)
    assert np.all(np.diff(ps) >= 0) and np.all(np.diff(xs) > 0)
    grid = np.linspace(-0.2, 1.2, 801)
    reference = IsotonicRegression(out_of_bounds="clip").fit(x, y).predict(grid)
    np.testing.assert_allclose(np.interp(grid, xs, ps), reference, atol=1e-12)


def test_logistic_is_monotone_and_matches_unpenalised_fit() -> None:
    from sklearn.linear_model import LogisticRegression

    frame = _labelled(80, seed=2)
    x, y = frame["faithfulness"].to_numpy(), frame["faithful"].to_numpy().astype(float)
    a, b = fit_logistic(x, y)
    ref = LogisticRegression(C=1e12, max_iter=1000).fit(x[:, None], y)
    assert a == pytest.approx(float(ref.intercept_[0]), abs=1e-2)
    assert b == pytest.approx(float(ref.coef_[0, 0]), abs=1e-2)
    a, b = fit_logistic(x, 1 - y)  # decreasing data: the slope is held at 0
    assert b == 0.0
    assert 1 / (1 + np.exp(-a)) == pytest.approx(float((1 - y).mean()))


def test_rule_and_held_out_quality() -> None:
    few = calibrate(_labelled(60), folds=5)
    many = calibrate(_labelled(600), folds=5)
    assert few.method == "logistic" and many.method == "isotonic"
    assert many.n == 600 and many.n_positive == int(_labelled(600)["faithful"].sum())
    assert many.brier < many.brier_base  # the map beats the base rate, held out
    assert many.brier_ci[0] <= many.brier <= many.brier_ci[1]
    assert many.ece_ci[0] <= many.ece <= many.ece_ci[1]
    assert many.ece < 0.08
    # A badly calibrated raw score: the map fixes what the raw score gets wrong.
    frame = _labelled(600)
    raw = frame["faithfulness"].to_numpy()
    raw_ece = float(np.abs(raw - frame["faithful"].to_numpy()).mean())
    assert many.ece < raw_ece
    table = many.reliability_table()
    assert table["n"].sum() == 600
    assert (table["ci_low"] <= table["observed"]).all()
    assert (table["observed"] <= table["ci_high"]).all()
    quality = many.quality()
    assert quality["n"].to_list() == [600, 600]


def test_save_load_apply(tmp_path: Path) -> None:
    cal = calibrate(_labelled(300))
    path = cal.save(tmp_path / "faithfulness.calib.json")
    back = Calibration.load(path)
    grid = np.linspace(0, 1, 11)
    np.testing.assert_allclose(back.predict(grid), cal.predict(grid))
    assert back.brier_ci == cal.brier_ci
    scored = pl.DataFrame({"faithfulness": [0.1, None, 0.95]})
    out = apply_calibration(scored, path)
    assert out.columns == ["faithfulness", "faithfulness_p_human"]
    assert out["faithfulness_p_human"].null_count() == 1
    assert out["faithfulness_p_human"][2] >= out["faithfulness_p_human"][0]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match="ragframe calibrate"):
        Calibration.load(tmp_path / "bad.json")


#: What a scored file of judge-a records about its judge and prompts.
JUDGE_A = {
    "judge": {"model": "judge-a"},
    "metrics": {"faithfulness": {"direction": "higher", "prompt_hashes": {"v": "abc"}}},
}


def _calibrated_on_judge_a(tmp_path: Path) -> tuple[Path, dict[str, Any], Calibration]:
    """200 labelled rows scored by judge-a (the file), judge-a's metadata, and the calibration
    fitted on them."""
    path = tmp_path / "labelled.parquet"
    write_parquet(_labelled(200), path, JUDGE_A)
    return path, JUDGE_A, calibrate(path)


def test_provenance_from_the_file_and_warning(tmp_path: Path) -> None:
    path, meta, cal = _calibrated_on_judge_a(tmp_path)
    assert cal.judge == {"model": "judge-a"} and cal.prompt_hashes == {"v": "abc"}
    other = tmp_path / "other.parquet"
    write_parquet(
        _labelled(50, seed=4),
        other,
        {**meta, "judge": {"model": "judge-b"}, "metrics": {"faithfulness": {"prompt_hashes": 1}}},
    )
    with pytest.warns(CalibrationWarning) as caught:
        apply_calibration(other, cal)
    text = " ".join(str(w.message) for w in caught)
    assert "judge-b" in text and "prompt hashes differ" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_calibration(path, cal)  # the same judge and prompts: silent


def test_lower_is_better_and_labels_joined() -> None:
    frame = _labelled(300)
    labels = frame.select("id", "faithful")
    flipped = frame.select("id", (1 - pl.col("faithfulness")).alias("hallucination"))
    cal = calibrate(flipped, "hallucination", labels=labels)
    same = calibrate(frame)
    np.testing.assert_allclose(
        cal.predict(1 - np.linspace(0, 1, 21)), same.predict(np.linspace(0, 1, 21))
    )
    assert cal.column == "hallucination_p_human"
    rel = cal.reliability_table()
    assert rel["score_mean"][0] > rel["score_mean"][-1]  # bins in the metric's own units


def test_calibrated_scores_feed_human_estimate() -> None:
    frame = _labelled(1000, seed=6)
    cal = calibrate(frame.head(300))
    table = human_estimate(
        frame.select("id", "faithfulness"),
        frame.head(300).select("id", "faithful"),
        calibration=cal,
    )
    judge = table.filter(pl.col("method") == "judge_only").row(0, named=True)
    raw = human_estimate(
        frame.select("id", "faithfulness"), frame.head(300).select("id", "faithful")
    )
    raw_judge = raw.filter(pl.col("method") == "judge_only").row(0, named=True)
    assert abs(judge["bias"]) < abs(raw_judge["bias"])  # a calibrated judge is less biased


def test_errors() -> None:
    with pytest.raises(InputError, match="label more rows"):
        calibrate(_labelled(8))
    with pytest.raises(InputError, match="no column 'ok'"):
        calibrate(_labelled(50), label="ok")


def test_held_out_figures_are_not_judged_on_the_fitted_rows() -> None:
    """A score unrelated to the labels cannot beat the base rate on rows it was not fitted on;
    fitted and judged on the same rows, a logistic curve would (in-sample Brier below the
    base rate every time). Small data: the logistic fit, 40 labels."""
    gaps = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        frame = pl.DataFrame(
            {"faithfulness": rng.uniform(size=40), "faithful": rng.uniform(size=40) < 0.4}
        )
        cal = calibrate(frame, folds=5, seed=seed)
        assert cal.method == "logistic"
        gaps.append(cal.brier - cal.brier_base)
    assert np.mean(gaps) > 0.005
    assert sum(g > 0 for g in gaps) >= 15


def test_human_estimate_checks_the_calibrations_provenance(tmp_path: Path) -> None:
    path, meta, cal = _calibrated_on_judge_a(tmp_path)
    other = tmp_path / "other.parquet"
    write_parquet(_labelled(300, seed=4), other, {**meta, "judge": {"model": "judge-b"}})
    labels = _labelled(300, seed=4).head(60).select("id", "faithful")
    with pytest.warns(CalibrationWarning, match="judge-b"):
        human_estimate(other, labels, calibration=cal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        human_estimate(path, _labelled(200).head(60).select("id", "faithful"), calibration=cal)
