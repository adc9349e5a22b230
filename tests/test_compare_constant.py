"""compare's intervals when the differences are all equal (issue 28, H3 and H7): equal up to
float rounding counts as equal, a degenerate sample never gets a zero-width interval, and the
exact bound it gets instead is the tightest any interval for a mean of [-1, 1] values can be."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats as sp

from ragframe.decide.compare import check_regression, compare
from ragframe.stats import mean_interval


def _cp_low(n: int) -> float:
    """scipy's Clopper-Pearson lower end for n successes in n trials: (0.025) ** (1 / n)."""
    return float(sp.binomtest(n, n).proportion_ci(0.95, method="exact").low)


def _rounded_pairs(n: int, shift: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """a's scores on a 0.01 grid and b = a + shift: every b - a is `shift` up to rounding."""
    xa = np.round(np.random.default_rng(0).uniform(0, 1 - shift, n), 2)
    a = pl.DataFrame({"id": range(n), "faithfulness": xa})
    b = pl.DataFrame({"id": range(n), "faithfulness": xa + shift})
    return a, b


def test_differences_equal_up_to_rounding_get_the_exact_bound() -> None:
    """H3: thirty pairs each +0.25 (as 0.8 - 0.55 and 1.0 - 0.75 are) got [+0.250, +0.250]."""
    a, b = _rounded_pairs(30, 0.25)
    d = b["faithfulness"].to_numpy() - a["faithfulness"].to_numpy()
    assert np.unique(d).size > 1  # the case: not bit-equal
    row = compare(a, b, on="id").table.row(0, named=True)
    exact = compare(
        a.with_columns(pl.lit(0.75).alias("faithfulness")),
        b.with_columns(pl.lit(1.0).alias("faithfulness")),
        on="id",
    ).table.row(0, named=True)
    assert row["method"] == exact["method"] == "exact-bound"
    assert row["ci_low"] == pytest.approx(exact["ci_low"], abs=1e-12)
    assert row["ci_high"] == pytest.approx(exact["ci_high"], abs=1e-12)
    # The bound on [-1, 1] mapped onto [0, 1] (c = 0.625), from scipy's Clopper-Pearson end.
    r = _cp_low(30)
    assert row["ci_low"] == pytest.approx(-1 + 2 * 0.625 * r, abs=1e-9)
    assert row["ci_high"] == pytest.approx(-1 + 2 * (0.625 + 0.375 * (1 - r)), abs=1e-9)
    assert row["ci_high"] - row["ci_low"] > 0.2


def test_a_score_computed_two_ways_is_still_equal() -> None:
    """The same mechanism for one metric's scores (summarize): 0.07 summed ten times is
    0.7000000000000002, and 29 scores of 0.7 with it got [0.700, 0.700]."""
    twin = sum([0.07] * 10)
    assert twin != 0.7
    assert mean_interval([0.7] * 29 + [twin]) == mean_interval([0.7] * 30)
    assert mean_interval([0.7] * 30).low == pytest.approx(0.7 * _cp_low(30), abs=1e-9)
    # A real difference is not swallowed: 1e-9 apart is two values, the score interval.
    assert mean_interval([0.7] * 29 + [0.7 + 1e-9]).method == "score"


def test_six_unanimous_drops_get_the_tightest_bound_for_a_mean() -> None:
    """H7: six pairs each -0.75 give [-0.865, +0.054] and no verdict, though the sign-flip p is
    2/64. The interval is the mean's, on scores only known to lie in [0, 1]: its high end is
    where a difference of -0.75 with probability q and +1 otherwise has mean h and q**6 is
    0.025 (q is scipy's Clopper-Pearson end), so any interval for the mean that leaves out a
    value below h misses it more than 2.5 % of the time. The p-value tests another null (each
    d as likely as -d), which six drops of six reject."""
    a = pl.DataFrame({"id": range(6), "faithfulness": [1.0] * 6})
    b = pl.DataFrame({"id": range(6), "faithfulness": [0.25] * 6})
    comparison = compare(a, b, on="id")
    row = comparison.table.row(0, named=True)
    q = _cp_low(6)
    assert q**6 == pytest.approx(0.025)
    assert row["ci_high"] == pytest.approx(-0.75 * q + 1.0 * (1 - q), abs=1e-9)
    assert row["ci_low"] == pytest.approx(-0.75 * q - 1.0 * (1 - q), abs=1e-9)
    # The worst case that keeps 0: mean 0 needs q0 = 1 / 1.75, and six draws of -0.75 then
    # come 3.5 % of the time, above 2.5 %: 0 cannot be left out.
    assert (1 / 1.75) ** 6 > 0.025 and row["ci_low"] < 0 < row["ci_high"]
    assert row["p_value"] == pytest.approx(2 / 64) and row["test"] == "sign-flip exact"
    assert row["better"] is None and (row["wins"], row["losses"]) == (0, 6)
    check = comparison.check_regression(["faithfulness"])
    assert check.passed and check.table["status"].item() == "not worse"
    # One pair more settles it: (4/7) ** 7 is below 0.025, and the bound lies below 0.
    seven = compare(
        pl.DataFrame({"id": range(7), "faithfulness": [1.0] * 7}),
        pl.DataFrame({"id": range(7), "faithfulness": [0.25] * 7}),
        on="id",
    )
    assert (1 / 1.75) ** 7 < 0.025 and seven.table["ci_high"].item() < 0
    assert seven.table["better"].item() == "a"
    assert not seven.check_regression(["faithfulness"]).passed


def test_six_zero_differences_are_symmetric_and_not_zero_width() -> None:
    """Six ties: [-0.459, +0.459], the same bound around 0 (mass up to 1 - q at either end)."""
    a = pl.DataFrame({"id": range(6), "faithfulness": [0.5] * 6})
    row = compare(a, a, on="id").table.row(0, named=True)
    q = _cp_low(6)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-(1 - q), 1 - q), abs=1e-9)
    assert row["p_value"] == 1.0 and row["better"] is None


def test_the_gate_reads_the_same_interval() -> None:
    """--fail-if-worse on H3's case turned around (every pair -0.25 up to rounding), margin
    0.2: the zero-width [-0.250, -0.250] failed it; the exact bound reaches above -0.2."""
    a, b = _rounded_pairs(30, 0.25)
    comparison = compare(b, a, on="id")
    check = check_regression(b, a, ["faithfulness"], on="id", margin=0.2)
    figures = ["diff", "ci_low", "ci_high", "p_value"]
    assert check.table.select(figures).equals(comparison.table.select(figures))
    assert check.passed, str(check)
    assert check.table["ci_high"].item() > -0.2 > check.table["ci_low"].item()
    # Without a margin the drop is still worse: the bound lies wholly below 0.
    assert not check_regression(b, a, ["faithfulness"], on="id").passed


def test_unpaired_equal_sides_are_not_zero_width() -> None:
    """Unpaired, 30 scores of 0.75 against 30 of 1.0 got [+0.250, +0.250]: each side's own
    exact bound at 97.5 % (Bonferroni) now makes the interval."""
    a = pl.DataFrame({"faithfulness": [0.75] * 30})
    b = pl.DataFrame({"faithfulness": [1.0] * 30})
    row = compare(a, b).table.row(0, named=True)
    ia, ib = mean_interval([0.75] * 30, 0.975), mean_interval([1.0] * 30, 0.975)
    assert row["method"] == "sides-bound"
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        (ib.low - ia.high, ib.high - ia.low), abs=1e-12
    )
    assert row["ci_low"] > 0 and row["better"] == "b"


def test_unpaired_one_equal_side_counts_its_uncertainty() -> None:
    """One side all 1.0: resampling took its mean as known; the interval now holds the
    exact bound of that side (30 perfect scores allow a mean down to 0.88)."""
    a = pl.DataFrame({"faithfulness": [1.0] * 30})
    b = pl.DataFrame({"faithfulness": np.linspace(0.8, 1.0, 30)})
    row = compare(a, b).table.row(0, named=True)
    ib = mean_interval(b["faithfulness"], 0.975)
    assert row["method"] == "sides-bound"
    assert row["ci_high"] == pytest.approx(ib.high - mean_interval([1.0] * 30, 0.975).low)
    # b's best case beats a's worst allowed mean; resampling a's ones could not (high <= 0)
    assert row["ci_high"] > 0.0 and row["better"] is None


def test_small_p_values_print_as_below_0001() -> None:
    """The p column mixed 1.0e-04 with 1.000; the sign-flip floor 1/10,001 is a resolution."""
    a, b = _rounded_pairs(30, 0.25)
    comparison = compare(a, b, on="id")
    assert comparison.table["p_value"].item() < 0.001
    text = str(comparison)
    assert "<0.001" in text and "e-0" not in text
    line = str(comparison.check_regression(["faithfulness"]))
    assert "p<0.001" in line and "e-0" not in line
