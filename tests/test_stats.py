"""Intervals that mean what they say: coverage near nominal at small and large n, seeded,
honest at the edges (no values, one value, every score at a bound); and `summarize`, whose
counts and means must equal what Polars computes directly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ragframe.decide.summarize import summarize
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import write_parquet
from ragframe.stats import BOOTSTRAP_MAX_N, interval_from_stats, mean_interval, t_quantile


def _coverage(draw, true_mean: float, n: int, trials: int = 100) -> tuple[int, float]:
    """Trials (seeded) whose 95 % interval covers the true mean, and the mean width."""
    covered, widths = 0, []
    for trial in range(trials):
        values = draw(np.random.default_rng(1000 + trial), n)
        interval = mean_interval(values, 0.95, seed=trial)
        covered += interval.low <= true_mean <= interval.high
        widths.append(interval.high - interval.low)
    return covered, float(np.mean(widths))


CASES = {
    # distribution: (draw, true mean, standard deviation)
    "bernoulli(0.3)": (
        lambda rng, n: rng.binomial(1, 0.3, n).astype(float),
        0.3,
        0.3**0.5 * 0.7**0.5,
    ),
    "beta(2,5)": (lambda rng, n: rng.beta(2, 5, n), 2 / 7, math.sqrt(10 / (49 * 8))),
    "beta(2,5) in hundredths": (
        lambda rng, n: np.round(rng.beta(2, 5, n), 2),
        2 / 7,
        math.sqrt(10 / (49 * 8)),
    ),
}


@pytest.mark.parametrize(
    ("case", "n", "method"),
    [
        ("bernoulli(0.3)", 30, "score"),
        ("beta(2,5)", 30, "score"),
        ("bernoulli(0.3)", 5000, "score"),
        ("beta(2,5) in hundredths", 5000, "score"),
        ("beta(2,5)", 1000, "score"),
        ("beta(2,5)", 20000, "t"),
    ],
)
def test_coverage_is_near_nominal_and_width_is_not_padded(case: str, n: int, method: str) -> None:
    """A 95 % interval covers the true mean in at least 90 of 100 seeded trials, and is no
    wider than it must be: its mean width is within 20 % of 2 * 1.96 * sigma / sqrt(n)."""
    draw, true_mean, sigma = CASES[case]
    assert mean_interval(draw(np.random.default_rng(0), n)).method == method
    covered, width = _coverage(draw, true_mean, n)
    assert covered >= 90, covered
    ideal = 2 * t_quantile(0.975, n - 1) * sigma / math.sqrt(n)
    assert ideal * 0.8 <= width <= ideal * 1.2, (width, ideal)


def test_small_samples_are_widened_beyond_the_plain_percentile_interval() -> None:
    """At n = 10 the expanded percentile interval is wider than the plain one (the bootstrap
    means' 2.5 and 97.5 percentiles), which under-covers at small n."""
    from ragframe.stats import RESAMPLES, bootstrap_means

    values = np.random.default_rng(3).beta(2, 5, 10)
    interval = mean_interval(np.sort(values), seed=7, method="bootstrap")
    plain = np.quantile(
        bootstrap_means(np.sort(values), np.random.default_rng(7), RESAMPLES), [0.025, 0.975]
    )
    assert interval.low < plain[0] and interval.high > plain[1]


def test_same_seed_same_interval_and_seeds_differ() -> None:
    """The bootstrap is seeded; the default interval draws nothing, so no seed changes it."""
    values = np.random.default_rng(0).random(200)
    first = mean_interval(values, seed=11, method="bootstrap")
    assert mean_interval(values, seed=11, method="bootstrap") == first
    assert mean_interval(values, seed=12, method="bootstrap") != first
    assert first.mean == pytest.approx(values.mean())
    assert mean_interval(values, seed=11) == mean_interval(values, seed=12)


def test_no_values_one_value_and_nulls() -> None:
    """Nulls and NaN are dropped and not counted; with none left there is no mean, with one
    there is a mean but no interval (one value says nothing about spread)."""
    empty = mean_interval([None, float("nan")])
    assert (empty.n, empty.mean, empty.low, empty.high, empty.method) == (
        0,
        None,
        None,
        None,
        "none",
    )
    one = mean_interval(pl.Series([None, 0.4, float("nan")]))
    assert (one.n, one.mean, one.low, one.high) == (1, 0.4, None, None)
    two = mean_interval([0.2, None, 0.6])
    assert two.n == 2 and two.mean == pytest.approx(0.4)
    assert two.low <= 0.4 <= two.high


def test_every_score_at_a_bound_gets_the_exact_binomial_bound() -> None:
    """30 perfect scores do not prove a mean of 1.0: the interval reaches down to the exact
    one-sided bound (alpha/2) ** (1/n), and mirrors it for zeros."""
    ones = mean_interval([1.0] * 30)
    assert ones.method == "exact-bound"
    assert ones.high == 1.0 and ones.low == pytest.approx(0.025 ** (1 / 30))
    zeros = mean_interval(np.zeros(30))
    assert zeros.low == 0.0 and zeros.high == pytest.approx(1 - 0.025 ** (1 / 30))
    assert interval_from_stats(30, 1.0, 0.0, minimum=1.0, maximum=1.0) == ones


def test_interval_stays_inside_the_bounds_and_refuses_values_outside() -> None:
    values = np.array([0.0] * 27 + [1.0] * 3)
    interval = mean_interval(values)
    assert 0.0 <= interval.low <= interval.mean <= interval.high <= 1.0
    with pytest.raises(InputError, match=r"1 of 3 values lie outside \[0.0, 1.0\].*bounds=None"):
        mean_interval([0.5, 1.5, 0.2])
    assert mean_interval([0.5, 1.5, 0.2], bounds=None).high > 1.0 - 1e-9
    # Rounding error at a bound is not an error: the score counts as the bound.
    assert mean_interval([1.0 + 4e-16, 1.0, 1.0]).method == "exact-bound"


def test_t_interval_from_stats_equals_mean_interval_past_the_bootstrap() -> None:
    values = np.random.default_rng(5).random(BOOTSTRAP_MAX_N + 1)
    direct = mean_interval(values)
    folded = interval_from_stats(values.size, values.mean(), values.std(ddof=1))
    assert direct.method == folded.method == "t"
    assert (folded.low, folded.high) == pytest.approx((direct.low, direct.high))


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.7062047),
        (0.975, 2, 4.3026527),
        (0.975, 29, 2.0452296),
        (0.995, 4, 4.6040949),
        (0.975, 100, 1.9839715),
        (0.975, 1000, 1.9623391),
    ],
)
def test_t_quantiles_match_the_tables(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-6)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="level"):
        mean_interval([0.5, 0.6], level=95)
    with pytest.raises(ConfigError, match="seed"):
        mean_interval([0.5, 0.6], seed=-1)
    with pytest.raises(ConfigError, match="method"):
        mean_interval([0.5, 0.6], method="bca")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ summarize


def _scored(rows: int = 600, seed: int = 0) -> pl.DataFrame:
    """A scored frame as ragframe writes it: scores, their `_detail` structs, a group column,
    some null scores (failed rows) and one NaN."""
    rng = np.random.default_rng(seed)
    faith = rng.random(rows)
    recall = np.round(rng.random(rows) * 4) / 4
    frame = pl.DataFrame(
        {
            "experiment": rng.choice(["a", "b", "c"], rows),
            "faithfulness": faith,
            "context_recall": recall,
            "other": rng.random(rows),
        }
    ).with_columns(
        pl.when(pl.int_range(pl.len()) % 7 == 0)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness"),
        pl.when(pl.int_range(pl.len()) == 3)
        .then(float("nan"))
        .otherwise(pl.col("context_recall"))
        .alias("context_recall"),
        pl.struct(error=pl.lit(None, pl.String)).alias("faithfulness_detail"),
        pl.struct(error=pl.lit(None, pl.String)).alias("context_recall_detail"),
    )
    return frame


def test_summarize_by_group_counts_and_means_equal_polars() -> None:
    frame = _scored()
    table = summarize(frame, by="experiment")
    assert table.columns[:2] == ["experiment", "metric"]
    assert table.height == 6  # 3 groups x 2 detected metrics ("other" has no detail)
    assert set(table["metric"]) == {"faithfulness", "context_recall"}
    for metric in ("faithfulness", "context_recall"):
        expected = (
            frame.with_columns(pl.col(metric).fill_nan(None))
            .group_by("experiment")
            .agg(
                pl.len().alias("n"),
                pl.col(metric).is_null().sum().alias("failed"),
                pl.col(metric).mean().alias("mean"),
            )
            .sort("experiment")
        )
        got = table.filter(pl.col("metric") == metric).sort("experiment")
        assert got["n"].to_list() == expected["n"].to_list()
        assert got["failed"].to_list() == expected["failed"].to_list()
        assert (got["scored"] + got["failed"]).to_list() == got["n"].to_list()
        assert got["mean"].to_list() == pytest.approx(expected["mean"].to_list())
        assert (got["ci_low"] <= got["mean"]).all() and (got["mean"] <= got["ci_high"]).all()
    nan_group = frame.row(3, named=True)["experiment"]
    row = table.filter((pl.col("experiment") == nan_group) & (pl.col("metric") == "context_recall"))
    assert row["failed"].item() == 1  # the NaN counts as failed
    assert table["direction"].to_list() == ["higher"] * 6
    assert table["method"].unique().to_list() == ["score"]


def test_summarize_without_groups_matches_mean_interval_shape_and_is_seeded() -> None:
    frame = _scored()
    table = summarize(frame, metrics=["other"], seed=4)
    assert table.columns == [
        "metric",
        "direction",
        "n",
        "scored",
        "failed",
        "mean",
        "ci_low",
        "ci_high",
        "level",
        "method",
    ]
    assert table.row(0, named=True)["direction"] is None  # not a known metric
    assert summarize(frame, metrics=["other"], seed=4).equals(table)
    # The seed seeds the bootstrap only; the default interval is the same for every seed.
    assert summarize(frame, metrics=["other"], seed=5).equals(table)
    boot = summarize(frame, metrics=["other"], seed=4, method="bootstrap")
    assert boot["method"].item() == "bootstrap"
    assert summarize(frame, metrics=["other"], seed=4, method="bootstrap").equals(boot)
    assert not summarize(frame, metrics=["other"], seed=5, method="bootstrap").equals(boot)
    assert table["mean"].item() == pytest.approx(frame["other"].mean())


def test_a_groups_interval_does_not_depend_on_the_other_groups() -> None:
    frame = _scored()
    whole = summarize(frame, by="experiment").filter(pl.col("experiment") == "b")
    alone = summarize(frame.filter(pl.col("experiment") == "b"), by="experiment")
    assert alone.equals(whole)


def test_large_groups_use_t_and_tiny_groups_say_what_they_can() -> None:
    big = BOOTSTRAP_MAX_N + 10
    frame = pl.DataFrame(
        {
            "g": ["big"] * big + ["one"] + ["none"] * 2 + ["perfect"] * 5,
            "faithfulness": [*np.random.default_rng(1).random(big), 0.5, None, None, *[1.0] * 5],
        }
    )
    table = summarize(frame, metrics=["faithfulness"], by=["g"]).sort("g")
    rows = {r["g"]: r for r in table.iter_rows(named=True)}
    assert rows["big"]["method"] == "t"
    assert rows["one"]["mean"] == 0.5 and rows["one"]["ci_low"] is None
    assert rows["none"]["scored"] == 0 and rows["none"]["failed"] == 2
    assert rows["none"]["mean"] is None and rows["none"]["method"] == "none"
    assert rows["perfect"]["method"] == "exact-bound"
    assert rows["perfect"]["ci_low"] == pytest.approx(0.025 ** (1 / 5))


def test_summarize_a_file_reads_directions_and_the_sample_from_its_metadata(
    tmp_path: Path,
) -> None:
    """A scored Parquet file says which columns are metrics, their direction, and that its
    rows are a sample of a larger log: the table carries both."""
    frame = _scored().rename({"context_recall": "hallucination"}).drop("context_recall_detail")
    path = tmp_path / "scored.parquet"
    metadata = {
        "metrics": {
            "hallucination": {"direction": "lower"},
            "faithfulness": {"direction": "higher"},
        },
        "sample": {"rows": frame.height, "of": 1_000_000, "seed": 3, "index_column": "row_index"},
    }
    write_parquet(frame, path, metadata)
    table = summarize(path, by="experiment")
    assert table["metric"].to_list()[:2] == ["hallucination", "faithfulness"]
    directions = dict(zip(table["metric"], table["direction"], strict=False))
    assert directions == {"hallucination": "lower", "faithfulness": "higher"}
    assert table["sample_rows"].unique().to_list() == [frame.height]
    assert table["population_rows"].unique().to_list() == [1_000_000]
    lazy = summarize(frame.lazy(), metrics=["hallucination", "faithfulness"], by="experiment")
    assert lazy.drop("direction").equals(table.drop("direction", "sample_rows", "population_rows"))


def test_summarize_refuses_what_it_cannot_summarize() -> None:
    frame = _scored()
    with pytest.raises(InputError, match=r"by= names \['team'\]"):
        summarize(frame, by="team")
    with pytest.raises(InputError, match="no column 'relevance'"):
        summarize(frame, metrics=["relevance"])
    with pytest.raises(InputError, match="'experiment' is String, not scores"):
        summarize(frame, metrics=["experiment"])
    with pytest.raises(InputError, match=r"found no score columns.*metrics="):
        summarize(pl.DataFrame({"x": [0.1]}))


# ------------------------------------------------------------------------------ pass rates


def test_summarize_adds_pass_rates_where_a_threshold_is_known() -> None:
    """Per group: passed and pass_rate (over scored rows) equal what Polars counts directly,
    and status is the mean against the threshold, in each metric's direction."""
    frame = _scored().rename({"context_recall": "hallucination"})
    table = summarize(
        frame,
        metrics=["faithfulness", "hallucination", "other"],
        by="experiment",
        thresholds={"faithfulness": 0.5, "hallucination": 0.4},
    )
    assert table.columns[-5:] == ["threshold", "strict", "passed", "pass_rate", "status"]
    for metric, passes in (
        ("faithfulness", pl.col("faithfulness") >= 0.5),
        ("hallucination", pl.col("hallucination").fill_nan(None) <= 0.4),
    ):
        expected = (
            frame.group_by("experiment")
            .agg(
                passes.sum().alias("passed"),
                (passes.sum() / passes.count()).alias("pass_rate"),
            )
            .sort("experiment")
        )
        got = table.filter(pl.col("metric") == metric).sort("experiment")
        assert got["passed"].to_list() == expected["passed"].to_list()
        assert got["pass_rate"].to_list() == pytest.approx(expected["pass_rate"].to_list())
        assert got["strict"].to_list() == [False] * 3
    hall = table.filter(pl.col("metric") == "hallucination")
    assert hall["direction"].to_list() == ["lower"] * 3  # from the catalogue
    assert hall["status"].to_list() == ["✅" if m <= 0.4 else "❌" for m in hall["mean"]]
    faith = table.filter(pl.col("metric") == "faithfulness")
    assert faith["status"].to_list() == ["✅" if m >= 0.5 else "❌" for m in faith["mean"]]
    other = table.filter(pl.col("metric") == "other")
    assert other.select("threshold", "passed", "pass_rate", "status").null_count().row(0) == (
        3,
        3,
        3,
        3,
    )


def test_summarize_pass_rules_from_metadata_a_pass_column_and_strict(tmp_path: Path) -> None:
    frame = pl.DataFrame(
        {
            "faithfulness": [1.0, 0.9, 0.6, None],
            "hallucination": [0.0, 0.3, 0.0, 0.2],
            "hallucination_pass": [True, False, False, True],  # disagrees with any threshold
        }
    )
    path = tmp_path / "scored.parquet"
    meta = {
        "metrics": {
            "faithfulness": {"direction": "higher", "config": {"threshold": 0.8}},
            "hallucination": {"direction": "lower", "config": {}},
        }
    }
    write_parquet(frame, path, meta)
    rows = {r["metric"]: r for r in summarize(path).iter_rows(named=True)}
    faith, hall = rows["faithfulness"], rows["hallucination"]
    assert (faith["threshold"], faith["passed"], faith["scored"]) == (0.8, 2, 3)
    assert faith["pass_rate"] == pytest.approx(2 / 3) and faith["status"] == "✅"  # mean 0.83
    # the pass column, used as written; no threshold, so no status
    assert (hall["threshold"], hall["passed"], hall["pass_rate"]) == (None, 2, 0.5)
    assert hall["status"] is None
    strict = {
        r["metric"]: r
        for r in summarize(path, strict=["faithfulness", "hallucination"]).iter_rows(named=True)
    }
    assert (strict["faithfulness"]["passed"], strict["faithfulness"]["status"]) == (1, "❌")
    assert strict["hallucination"]["threshold"] == 0.5  # the default value, in strict mode
    assert (strict["hallucination"]["passed"], strict["hallucination"]["strict"]) == (2, True)
    with pytest.raises(ConfigError, match=r"names \['relevancy'\], not among the metrics"):
        summarize(path, thresholds={"relevancy": 0.5})
    with pytest.raises(ConfigError, match="between 0 and 1"):
        summarize(path, thresholds={"faithfulness": 2})


def test_the_incomplete_beta_matches_scipy_in_both_forms() -> None:
    """`beta_cdf` (arrays: Clopper-Pearson's quantiles) and `_betainc` (one value: Student's
    t) are one continued fraction written twice for speed: both must equal scipy's."""
    from scipy.special import betainc

    from ragframe.stats import _betainc, beta_cdf, beta_quantile

    a, b, x = np.meshgrid([0.5, 1.0, 3.0, 10.0, 50.0], [0.5, 2.0, 7.0, 40.0], np.linspace(0, 1, 41))
    want = betainc(a, b, x)
    assert np.allclose(beta_cdf(x, a, b), want, rtol=0, atol=1e-12)
    one = np.vectorize(_betainc)(a, b, x)
    assert np.allclose(one, want, rtol=0, atol=1e-12)
    q = beta_quantile(0.025, a[..., 0], b[..., 0])
    assert np.allclose(betainc(a[..., 0], b[..., 0], q), 0.025, rtol=0, atol=1e-12)


def test_interval_from_stats_equals_mean_interval_only_with_the_range() -> None:
    """With the minimum and maximum, the figures give `mean_interval`'s interval; without them
    the correction takes the scores to span [0, 1], so the interval is wider, never narrower."""
    rng = np.random.default_rng(11)
    for values in (rng.beta(0.5, 5, 30), rng.uniform(0.2, 0.8, 12), rng.beta(5, 0.5, 200)):
        exact = mean_interval(values, bounds=(0.0, 1.0))
        figures = (values.size, float(values.mean()), float(values.std(ddof=1)))
        ranged = interval_from_stats(*figures, minimum=values.min(), maximum=values.max())
        assert ranged.low == pytest.approx(exact.low) and ranged.high == pytest.approx(exact.high)
        unranged = interval_from_stats(*figures)
        assert unranged.low <= exact.low and unranged.high >= exact.high
        assert unranged.high - unranged.low > exact.high - exact.low
