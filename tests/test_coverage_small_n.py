"""A "95 %" interval covers the true mean in at least 93 % of trials at every n from 2 to 40,
on the score shapes a RAG log holds: continuous, skewed, 0/1 (rare ones too) and three-valued.

The floor: the documented promise, 2 points under nominal. The Monte Carlo error of one
coverage near 0.95 over TRIALS = 10,000 trials is 0.22 points, so the lowest of 39 values of n
(about 3 of those errors under its truth) sits far above 93 % for an interval that covers
95 %, and an interval that covers 92 % (the score interval without its continuity
correction: 92.0 % on Bernoulli(0.02), 87.7 % on Bernoulli(0.01), 92.8 % on Beta(0.5, 5))
fails.

Each (shape, n) draws TRIALS samples at once and computes their intervals with
`ragframe.stats.score_bounds`, the vectorised form of what `mean_interval` returns below
BOOTSTRAP_MAX_N; a sample of the trials is checked against `mean_interval` itself, so the test
measures the intervals ragframe prints. The old expanded percentile bootstrap covered 52 % of
Uniform(0.2, 0.8) means at n = 2 (every resample mean lies between the two scores)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ragframe.stats import mean_interval, score_bounds

TRIALS = 10_000
# Trials per (shape, n) recomputed by mean_interval, which must agree to rounding (its variance
# comes from exact sums, numpy's from deviations: 4e-12 apart on Beta(5, 0.5) near 1).
CHECKED = 40
NOMINAL = 0.95
FLOOR = 0.93  # nominal coverage within 2 points

Draw = Callable[[np.random.Generator, int, int], np.ndarray]


def _bernoulli(p: float) -> Draw:
    return lambda rng, trials, n: (rng.random((trials, n)) < p).astype(np.float64)


def _three_valued(weights: tuple[float, float, float]) -> Draw:
    return lambda rng, trials, n: rng.choice([0.0, 0.5, 1.0], size=(trials, n), p=weights)


SHAPES: dict[str, tuple[Draw, float]] = {
    "continuous Uniform(0.2, 0.8)": (lambda rng, t, n: rng.uniform(0.2, 0.8, (t, n)), 0.5),
    "skewed Beta(0.5, 2)": (lambda rng, t, n: rng.beta(0.5, 2.0, (t, n)), 0.2),
    "0/1 p=0.5": (_bernoulli(0.5), 0.5),
    "0/1 p=0.1": (_bernoulli(0.1), 0.1),
    "0/1 p=0.05": (_bernoulli(0.05), 0.05),
    "0/1 p=0.02": (_bernoulli(0.02), 0.02),
    "0/1 p=0.01": (_bernoulli(0.01), 0.01),
    "skewed Beta(0.5, 5)": (lambda rng, t, n: rng.beta(0.5, 5.0, (t, n)), 0.5 / 5.5),
    "skewed Beta(5, 0.5)": (lambda rng, t, n: rng.beta(5.0, 0.5, (t, n)), 5.0 / 5.5),
    "{0, 0.5, 1} weights (0.1, 0.2, 0.7)": (_three_valued((0.1, 0.2, 0.7)), 0.8),
    "{0, 0.5, 1} weights (0.6, 0.3, 0.1)": (_three_valued((0.6, 0.3, 0.1)), 0.25),
    "{0, 0.5, 1} weights (0.02, 0.9, 0.08)": (_three_valued((0.02, 0.9, 0.08)), 0.53),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_coverage_reaches_nominal_within_two_points_at_every_small_n(shape: str) -> None:
    draw, true_mean = SHAPES[shape]
    rng = np.random.default_rng(20240518)
    low_cover: list[tuple[int, float]] = []
    for n in range(2, 41):
        x = draw(rng, TRIALS, n)
        mean, variance = x.mean(axis=1), x.var(axis=1, ddof=1)
        lowest, highest = x.min(axis=1), x.max(axis=1)
        low, high = score_bounds(n, mean, variance, lowest == highest, highest - lowest, NOMINAL)
        coverage = float(np.mean((low <= true_mean) & (true_mean <= high)))
        if coverage < FLOOR:
            low_cover.append((n, coverage))
        for i in range(CHECKED):
            printed = mean_interval(x[i], NOMINAL)
            assert printed.low is not None and printed.high is not None
            assert (printed.low, printed.high) == pytest.approx((low[i], high[i]), abs=1e-9)
    assert not low_cover, f"{shape}: coverage below {FLOOR} at (n, coverage) {low_cover}"


def test_the_headline_case_is_covered_by_mean_interval_itself() -> None:
    """The issue's measurement, through `mean_interval` call by call: Uniform(0.2, 0.8) at
    n = 2..5 (coverage 0.52, 0.74, 0.87, 0.92 with the percentile bootstrap)."""
    rng = np.random.default_rng(7)
    for n in range(2, 6):
        hits = 0
        trials = 2000
        for x in rng.uniform(0.2, 0.8, (trials, n)):
            interval = mean_interval(x)
            assert interval.low is not None and interval.high is not None
            hits += interval.low <= 0.5 <= interval.high
        assert hits / trials >= FLOOR, (n, hits / trials)


def test_the_known_shortfall_is_what_the_docstring_says() -> None:
    """Beta(0.3, 3) (mean 0.09, most scores within 0.01 of 0): the module docstring's
    figures, 90.6 % at n = 3 and 5, 91.8 % at 7, 92.9 % at 10, 94.1 % at 12 and 15; 10,000
    trials per n, each floor 3 Monte Carlo errors (0.9 points) under its figure."""
    rng = np.random.default_rng(20240518)
    true_mean = 0.3 / 3.3
    for n, floor in [(3, 0.897), (5, 0.897), (7, 0.909), (10, 0.921), (12, 0.933), (15, 0.933)]:
        x = rng.beta(0.3, 3.0, (TRIALS, n))
        lowest, highest = x.min(axis=1), x.max(axis=1)
        low, high = score_bounds(
            n, x.mean(axis=1), x.var(axis=1, ddof=1), lowest == highest, highest - lowest
        )
        coverage = float(np.mean((low <= true_mean) & (true_mean <= high)))
        assert coverage >= floor, (n, coverage)


def test_one_score_gets_no_interval() -> None:
    """Below two scores there is no interval to print (and the tables print '-')."""
    one = mean_interval([0.4])
    assert (one.low, one.high, one.method) == (None, None, "none")
