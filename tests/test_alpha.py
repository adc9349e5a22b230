"""Krippendorff's alpha against the `krippendorff` package (the reference), and its bootstrap
interval over units."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from ragframe.errors import ConfigError, InputError
from ragframe.stats.alpha import (
    SCALES,
    _alphas,
    _matrix,
    _prepare,
    alpha_interval,
    krippendorff_alpha,
)


def noisy(rng: np.random.Generator, scale: str, missing: float = 0.3) -> np.ndarray:
    """Units x coders: a true level per unit, each coder off by a little, some values missing."""
    units, coders = int(rng.integers(8, 80)), int(rng.integers(2, 7))
    truth = rng.integers(0, 5, units)
    data = (truth[:, None] + rng.integers(-1, 2, (units, coders))).astype(float)
    if scale == "interval":
        data = data / 4.0 + rng.normal(0.0, 0.1, (units, coders))
    data[rng.random((units, coders)) < missing] = np.nan
    return data


def reference(data: np.ndarray, scale: str) -> float:
    return float(krippendorff.alpha(reliability_data=data.T, level_of_measurement=scale))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(6))
def test_alpha_matches_the_krippendorff_package(scale, seed):
    data = noisy(np.random.default_rng(seed), scale)
    assert krippendorff_alpha(data, scale) == pytest.approx(reference(data, scale), abs=1e-9)


@pytest.mark.parametrize("scale", SCALES)
def test_each_bootstrap_resample_is_alpha_of_the_resampled_units(scale):
    """The vectorised resamples equal the reference on the units repeated by their counts."""
    rng = np.random.default_rng(7)
    data = noisy(rng, scale, missing=0.2)
    stats, _ = _prepare(_matrix(data), scale)
    pairable = data[(~np.isnan(data)).sum(axis=1) >= 2]
    weights = rng.multinomial(len(pairable), np.full(len(pairable), 1 / len(pairable)), size=5)
    got = _alphas(weights.astype(float), stats, scale)
    for row, value in zip(weights, got, strict=True):
        resampled = np.repeat(pairable, row, axis=0)
        assert value == pytest.approx(reference(resampled, scale), abs=1e-9)


def test_perfect_agreement_is_one_and_a_shift_changes_nothing():
    data = np.array([[0.1, 0.1, np.nan], [0.5, 0.5, 0.5], [0.9, np.nan, 0.9]])
    assert krippendorff_alpha(data) == pytest.approx(1.0)
    noisy_data = noisy(np.random.default_rng(3), "interval")
    assert krippendorff_alpha(noisy_data + 1e4) == pytest.approx(
        krippendorff_alpha(noisy_data), abs=1e-9
    )


def test_systematic_disagreement_is_below_zero():
    data = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert krippendorff_alpha(data, "nominal") < 0
    assert krippendorff_alpha(data, "nominal") == pytest.approx(reference(data, "nominal"))


def test_units_with_one_value_are_dropped_and_counted():
    data = np.array([[1.0, 1.0], [2.0, np.nan], [3.0, 2.0], [np.nan, np.nan], [4.0, 4.0]])
    result = alpha_interval(data, resamples=50)
    assert (result.units, result.values, result.dropped) == (3, 6, 2)
    assert result.alpha == pytest.approx(krippendorff_alpha(data[[0, 2, 4]]))


def test_no_variation_gives_no_alpha():
    same = np.full((5, 3), 0.7)
    assert np.isnan(krippendorff_alpha(same))
    assert np.isnan(krippendorff_alpha(same, "nominal"))
    result = alpha_interval(same, resamples=20)
    assert np.isnan(result.alpha) and result.low is None and result.undefined == 20


def test_interval_holds_alpha_is_seeded_and_narrows_with_more_units():
    rng = np.random.default_rng(11)
    truth = rng.random(400)
    data = truth[:, None] + rng.normal(0, 0.2, (400, 3))
    full = alpha_interval(data, seed=1)
    assert full.low < full.alpha < full.high and full.units == 400 and full.undefined == 0
    assert alpha_interval(data, seed=1) == full
    assert alpha_interval(data, seed=2) != full
    small = alpha_interval(data[:40], seed=1)
    assert (small.high - small.low) > 2 * (full.high - full.low)


def test_the_interval_covers_the_population_alpha_about_as_often_as_it_says():
    """Coders = truth + independent noise of sd 0.5 on truth of sd 1: population alpha 0.8.
    200 draws of 150 units; a 90 % interval should cover about 180 of them."""
    rng = np.random.default_rng(0)
    covered = 0
    for draw in range(200):
        truth = rng.normal(0, 1, 150)
        data = truth[:, None] + rng.normal(0, 0.5, (150, 3))
        result = alpha_interval(data, level=0.9, resamples=400, seed=draw)
        covered += result.low <= 0.8 <= result.high
    assert 165 <= covered <= 195


def test_bad_input_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="scale"):
        krippendorff_alpha([[1, 2]], "ratio")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="numeric codes"):
        krippendorff_alpha([["yes", "no"], ["no", "no"]], "nominal")
    with pytest.raises(InputError, match="units x coders"):
        krippendorff_alpha([1.0, 2.0])
    with pytest.raises(InputError, match="scale='interval'"):
        krippendorff_alpha(np.random.default_rng(0).random((600, 2)), "ordinal")
