"""PPI++ human estimates: agreement with ppi_py, coverage by simulation, the frame API."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ragframe.decide.human import (
    human_estimate,
    human_estimate_difference,
    labels_needed,
)
from ragframe.decide.label_sheet import draw_labels
from ragframe.decide.labels import read_labels
from ragframe.decide.ppi import clopper_pearson, human_intervals, ppi_mean
from ragframe.errors import InputError
from ragframe.stats import t_quantile

S, N = 500, 10_000
LEVEL = 0.95


def _data(rng: np.random.Generator, n_total: int, n: int) -> tuple[np.ndarray, ...]:
    f = rng.uniform(size=n_total)
    y = (rng.uniform(size=n_total) < 0.1 + 0.8 * f).astype(float)
    idx = rng.choice(n_total, n, replace=False)
    return y[idx], f[idx], f


@pytest.mark.parametrize("lam", [None, 1.0, 0.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_ppi_py(lam: float | None, weighted: bool) -> None:
    """Unweighted: ppi_py's interval exactly. Weighted: ppi_py's estimate and lam; the interval
    is ours (a stratified variance, not ppi_py's uncentred one: see ragframe.decide.ppi)."""
    import ppi_py  # a declared test dependency: missing, this test fails rather than skips

    rng = np.random.default_rng(7)
    y, fl, fa = _data(rng, 3000, 120)
    w = rng.uniform(0.5, 4.0, size=y.size) if weighted else None
    ours = ppi_mean(y, fl, fa, lam=lam, w=w, level=0.9, interval="normal")
    low, high = ppi_py.ppi_mean_ci(y, fl, fa, alpha=0.1, lam=lam, w=w)
    point = ppi_py.ppi_mean_pointestimate(y, fl, fa, lam=lam, w=w)
    assert float(ours.estimate) == pytest.approx(float(np.ravel(point)[0]), abs=1e-6)
    if not weighted:
        assert float(ours.low) == pytest.approx(float(low[0]), abs=1e-6)
        assert float(ours.high) == pytest.approx(float(high[0]), abs=1e-6)


def test_equal_weights_are_no_weights() -> None:
    rng = np.random.default_rng(8)
    y, fl, fa = _data(rng, 3000, 120)
    plain = ppi_mean(y, fl, fa)
    weighted = ppi_mean(y, fl, fa, w=np.full(y.size, 3.0))
    assert float(weighted.estimate) == pytest.approx(float(plain.estimate))
    # One stratum: its variance with ddof 1 (the plain one has ppi_py's ddof 0).
    ratio = (float(weighted.se) ** 2 - fa.var() * float(plain.lam) ** 2 / fa.size) / (
        float(plain.se) ** 2 - fa.var() * float(plain.lam) ** 2 / fa.size
    )
    assert ratio == pytest.approx(y.size / (y.size - 1))


@pytest.mark.parametrize("n", [10, 40])
def test_the_default_quantile_is_students_t(n: int) -> None:
    """The interval is estimate +- t(n - 1) * se unless interval="normal" is asked for (at
    n = 10 the normal quantile covers about 92 % for a 95 % interval)."""
    rng = np.random.default_rng(n)
    y, fl, fa = _data(rng, 2000, n)
    found = ppi_mean(y, fl, fa)
    half = float(found.high - found.estimate) / float(found.se)
    assert half == pytest.approx(t_quantile(0.975, n - 1), rel=1e-9)
    normal = ppi_mean(y, fl, fa, interval="normal")
    assert float(normal.high - normal.estimate) / float(normal.se) == pytest.approx(1.959964)
    scored = pl.DataFrame({"id": np.arange(fa.size), "faithfulness": fa})
    labels = pl.DataFrame({"id": np.arange(n), "faithful": y})  # _data's labels: rows 0..n-1
    scored = scored.with_columns(pl.Series("faithfulness", np.concatenate([fl, fa[n:]])))
    row = human_estimate(scored, labels).row(0, named=True)
    assert row["method"] == "ppi++"
    widened = row["note"] is not None and "widened" in row["note"]
    if not widened:
        assert (row["ci_high"] - row["estimate"]) / row["se"] == pytest.approx(
            t_quantile(0.975, n - 1), rel=1e-9
        )


def test_frame_api_matches_ppi_py() -> None:
    import ppi_py  # a declared test dependency: missing, this test fails rather than skips

    rng = np.random.default_rng(3)
    f = rng.uniform(size=2000)
    y = (rng.uniform(size=2000) < f).astype(float)
    idx = rng.choice(2000, 150, replace=False)
    scored = pl.DataFrame({"id": np.arange(2000), "faithfulness": f})
    labels = pl.DataFrame({"id": idx, "faithful": y[idx].astype(bool)})
    table = human_estimate(scored, labels, interval="normal")
    row = table.filter(pl.col("method") == "ppi++").row(0, named=True)
    low, high = ppi_py.ppi_mean_ci(y[idx], f[idx], f, alpha=0.05)
    assert row["ci_low"] == pytest.approx(float(low[0]), abs=1e-6)
    assert row["ci_high"] == pytest.approx(float(high[0]), abs=1e-6)
    assert (row["n_labelled"], row["n_scored"], row["level"]) == (150, 2000, 0.95)
    only = table.filter(pl.col("method") == "labels_only").row(0, named=True)
    assert only["estimate"] == pytest.approx(y[idx].mean())
    assert row["effective_n"] == pytest.approx(150 * only["se"] ** 2 / row["se"] ** 2)
    assert row["effective_n"] > 150  # an informative judge is worth labels
    assert table["method"].to_list() == ["ppi++", "judge_only", "labels_only"]


def _simulate(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """S logs of N rows; three judges: unbiased, lenient by +0.15 on the rate, uninformative."""
    x = rng.random((S, N))
    q = np.where(x < 0.3, 0.1, np.where(x < 0.7, 0.5, 0.8))  # P(label true), rate 0.47
    y = (rng.random((S, N)) < q).astype(float)
    judges = {
        "unbiased": q,
        "lenient": q + 0.15,
        "uninformative": 0.4 + 0.2 * rng.random((S, N)),
    }
    return y, y.mean(axis=1), judges


def _covers(low: np.ndarray, high: np.ndarray, truth: np.ndarray) -> float:
    return float(((low <= truth) & (truth <= high)).mean())


def test_coverage_by_simulation() -> None:
    rng = np.random.default_rng(20)
    y, truth, judges = _simulate(rng)
    order = np.argsort(rng.random((S, N)), axis=1)  # a uniform draw per log; n nested
    z = 1.959963984540054
    for name, f in judges.items():
        assert abs(float((f - y).mean()) - {"unbiased": 0, "lenient": 0.15}.get(name, 0.03)) < 0.01
        judge_low = f.mean(1) - z * f.std(1, ddof=1) / np.sqrt(N)
        judge_high = f.mean(1) + z * f.std(1, ddof=1) / np.sqrt(N)
        judge_cover = _covers(judge_low, judge_high, truth)
        for n in (50, 150, 500):
            idx = order[:, :n]
            yl, fl = np.take_along_axis(y, idx, 1), np.take_along_axis(f, idx, 1)
            ppi = ppi_mean(yl, fl, f, level=LEVEL)
            only = ppi_mean(yl, fl, f, lam=0.0, level=LEVEL)
            cover = _covers(ppi.low, ppi.high, truth)
            assert cover >= 0.93, (name, n, cover)
            ratio = float((ppi.high - ppi.low).mean() / (only.high - only.low).mean())
            if name == "uninformative":
                assert ratio <= 1.01, (name, n, ratio)
            else:
                assert ratio < 0.85, (name, n, ratio)
        if name == "lenient":
            assert judge_cover < 0.05  # the judge-only interval misses the people's rate
    # An estimate from the lenient judge alone is off by its bias; PPI++ is not.
    idx = order[:, :150]
    f = judges["lenient"]
    ppi = ppi_mean(np.take_along_axis(y, idx, 1), np.take_along_axis(f, idx, 1), f)
    assert abs(float((ppi.estimate - truth).mean())) < 0.005


def test_stratified_draw_stays_unbiased() -> None:
    """Oversample the low-score stratum; the weights (1 / inclusion probability) keep the
    estimate unbiased and the interval covering."""
    rng = np.random.default_rng(5)
    s, big_n = 500, 4000
    x = rng.random((s, big_n))
    stratum = (x >= 0.3).astype(int) + (x >= 0.7).astype(int)
    q = np.array([0.1, 0.5, 0.8])[stratum]
    y = (rng.random((s, big_n)) < q).astype(float)
    f = np.array([0.1, 0.5, 1.0])[stratum]  # lenient on the high stratum only
    truth = y.mean(1)
    take = np.array([120, 60, 20])  # per stratum; stratum 2 is 30 % of rows, 10 % of labels
    order = np.argsort(stratum + rng.random((s, big_n)), axis=1)  # strata contiguous
    counts = np.stack([(stratum == h).sum(1) for h in range(3)], axis=1)
    starts = np.concatenate([np.zeros((s, 1), int), np.cumsum(counts, 1)[:, :-1]], axis=1)
    pos = np.concatenate([starts[:, [h]] + np.arange(take[h]) for h in range(3)], axis=1)
    idx = np.take_along_axis(order, pos, 1)
    w = np.concatenate([np.repeat(counts[:, [h]] / take[h], take[h], 1) for h in range(3)], 1)
    yl, fl = np.take_along_axis(y, idx, 1), np.take_along_axis(f, idx, 1)
    weighted = ppi_mean(yl, fl, f, w=w)
    plain = ppi_mean(yl, fl, f)
    assert abs(float((weighted.estimate - truth).mean())) < 0.005
    assert _covers(weighted.low, weighted.high, truth) >= 0.93
    assert abs(float((plain.estimate - truth).mean())) > 0.015  # unweighted: biased


def _frames(n_rows: int = 400, n_labels: int = 120, seed: int = 1) -> tuple[pl.DataFrame, ...]:
    rng = np.random.default_rng(seed)
    f = rng.uniform(size=n_rows)
    y = rng.uniform(size=n_rows) < f
    scored = pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(n_rows)],
            "faithfulness": f,
            "team": ["a", "b"] * (n_rows // 2),
        }
    )
    idx = rng.choice(n_rows, n_labels, replace=False)
    labels = pl.DataFrame({"id": [f"q{i}" for i in idx], "faithful": y[idx]})
    return scored, labels


def test_groups_nulls_and_notes() -> None:
    scored, labels = _frames()
    scored = scored.with_columns(
        pl.when(pl.int_range(pl.len()) < 10)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness")
    )
    table = human_estimate(scored, labels, by="team")
    assert table.height == 6
    assert set(table["team"]) == {"a", "b"}
    first = table.filter((pl.col("team") == "a") & (pl.col("method") == "ppi++")).row(0, named=True)
    assert first["n_scored"] == 195 and first["n_null_scores"] == 5
    assert "5 rows with a null score" in first["note"]
    assert table["n_labelled"].sum() // 3 <= 120
    assert (table["ci_low"] <= table["estimate"]).all()


def test_labels_from_a_filled_csv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    scored, labels = _frames()
    sheet = labels.with_columns(
        pl.when(pl.col("faithful")).then(pl.lit("Yes")).otherwise(pl.lit("no")).alias("faithful")
    )
    sheet = pl.concat([sheet, pl.DataFrame({"id": ["q399"], "faithful": [""]})])
    path = tmp_path / "sheet.csv"
    sheet.write_csv(path)
    read = read_labels(path, "id", "faithful")
    assert read["faithful"].null_count() == 1 - int("q399" in labels["id"].to_list())
    from_csv = human_estimate(scored, path)
    from_frame = human_estimate(scored, labels)
    assert from_csv["estimate"].to_list() == pytest.approx(from_frame["estimate"].to_list())
    bad = tmp_path / "bad.csv"
    sheet.with_columns(pl.lit("maybe").alias("faithful")).write_csv(bad)
    with pytest.raises(InputError, match="maybe"):
        human_estimate(scored, bad)


def test_errors_name_the_fix() -> None:
    scored, labels = _frames()
    with pytest.raises(InputError, match="not in the frame's 'id'"):
        human_estimate(
            scored, pl.concat([labels, pl.DataFrame({"id": ["zz"], "faithful": [True]})])
        )
    with pytest.raises(InputError, match="row_index"):
        human_estimate(scored.drop("id"), labels)
    with pytest.raises(InputError, match="no column 'ok' in the labels"):
        human_estimate(scored, labels, label="ok")
    with pytest.raises(InputError, match="more than once"):
        human_estimate(scored, pl.concat([labels, labels.head(1)]))


def test_lower_is_better_is_turned_around() -> None:
    scored, labels = _frames()
    flipped = scored.select("id", (1 - pl.col("faithfulness")).alias("hallucination"))
    table = human_estimate(flipped, labels, score="hallucination")
    same = human_estimate(scored, labels)
    assert table["estimate"].to_list() == pytest.approx(same["estimate"].to_list())


def test_paired_difference() -> None:
    rng = np.random.default_rng(9)
    n_rows, n = 3000, 300
    q = rng.uniform(0.2, 0.7, size=n_rows)
    ya = rng.uniform(size=n_rows) < q
    yb = rng.uniform(size=n_rows) < q + 0.2
    keys = [str(i) for i in range(n_rows)]
    a = pl.DataFrame({"id": keys, "faithfulness": q})
    b = pl.DataFrame({"id": keys, "faithfulness": np.clip(q + 0.3, 0, 1)})  # b's judge: lenient
    idx = rng.choice(n_rows, n, replace=False)
    la = pl.DataFrame({"id": [keys[i] for i in idx], "faithful": ya[idx]})
    lb = pl.DataFrame({"id": [keys[i] for i in idx[:-5]], "faithful": yb[idx[:-5]]})
    table = human_estimate_difference(a, b, la, lb)
    row = table.filter(pl.col("method") == "ppi++").row(0, named=True)
    truth = float(yb.mean() - ya.mean())
    assert row["ci_low"] <= truth <= row["ci_high"]
    assert row["ci_low"] > 0  # people would find b more faithful, with an honest interval
    assert row["n_labelled"] == n - 5 and row["n_scored"] == n_rows
    assert "5 labels on one side only" in row["note"]
    direct = ppi_mean(
        (yb[idx[:-5]].astype(float) - ya[idx[:-5]]), np.full(n - 5, 0.3), np.full(n_rows, 0.3)
    )
    assert row["estimate"] == pytest.approx(float(direct.estimate))


def test_labels_needed_reaches_the_width() -> None:
    rng = np.random.default_rng(11)
    big_n = 200_000
    f = rng.uniform(size=big_n)
    y = (rng.uniform(size=big_n) < f).astype(float)
    plan = labels_needed(0.08, y[:60], f[:60], n_scored=big_n)
    assert plan["n_batch"] == 60 and 0 < plan["correlation"] < 1
    assert plan["n_needed"] < plan["n_labels_only"]
    n = plan["n_needed"]
    widths = []
    for _ in range(20):
        idx = rng.choice(big_n, n, replace=False)
        got = ppi_mean(y[idx], f[idx], f)
        widths.append(float(got.high - got.low))
    assert np.mean(widths) == pytest.approx(0.08, rel=0.2)
    assert labels_needed(0.08, y[:60], f[:60], n_scored=50)["n_needed"] is None


RARE_S, RARE_N = 2000, 1000


def _rare_logs(rng: np.random.Generator, rate: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """RARE_S logs of RARE_N rows whose label rate is `rate`, and four judges: unbiased,
    lenient by +0.15, uninformative, and a yes / no judge that disagrees with 3 % of labels
    (its errors are the rare events then)."""
    q = rng.beta(4 * rate, 4 * (1 - rate), size=(RARE_S, RARE_N))
    y = (rng.random((RARE_S, RARE_N)) < q).astype(float)
    flip = rng.random((RARE_S, RARE_N)) < 0.03
    return y, {
        "unbiased": q,
        "lenient": np.minimum(q + 0.15, 1.0),
        "uninformative": 0.4 + 0.2 * rng.random((RARE_S, RARE_N)),
        "yes/no": np.where(flip, 1 - y, y),
    }


def test_coverage_at_rare_labels_and_small_n() -> None:
    """Every human estimate holds its level (95 %, within 2 points) at n >= 10 labels for
    label rates down to 2 % (and up to 95 %), whatever the judge. Rows are exchangeable, so a
    log's first n rows are a uniform draw of it. The raw normal PPI++ interval is checked too,
    to show the cases bite: at a 5 % rate and n = 10 it covers about 40 %."""
    rng = np.random.default_rng(31)
    raw_small = []
    for rate in (0.02, 0.05, 0.5, 0.95):
        y, judges = _rare_logs(rng, rate)
        truth = y.mean(1)
        for n in (10, 20, 50, 200):
            yl = y[:, :n]
            for name, f in judges.items():
                found = human_intervals(yl, f[:, :n], f)
                for method, r in (("ppi++", found.ppi), ("labels_only", found.labels_only)):
                    cover = _covers(r.low, r.high, truth)
                    assert cover >= 0.93, (method, name, rate, n, cover)
                assert (found.ppi.low <= found.ppi.estimate).all()
                assert (found.ppi.estimate <= found.ppi.high).all()
                if rate == 0.05 and n == 10:
                    raw_small.append(_covers(found.raw.low, found.raw.high, truth))
            if n == 200 and rate == 0.5:
                # Where labels are plenty, PPI++ keeps its gain: an informative judge narrows.
                found = human_intervals(yl, judges["unbiased"][:, :n], judges["unbiased"])
                assert not found.widened.any()
                ratio = (found.ppi.high - found.ppi.low).mean() / (
                    found.labels_only.high - found.labels_only.low
                ).mean()
                assert ratio < 0.9
    assert max(raw_small) < 0.6  # the normal interval alone: far below 95 %


def test_ten_labels_all_zero_are_not_certain() -> None:
    scored = pl.DataFrame({"id": np.arange(400), "faithfulness": np.linspace(0, 0.3, 400)})
    labels = pl.DataFrame({"id": np.arange(0, 400, 40), "faithful": np.zeros(10)})
    table = human_estimate(scored, labels)
    for method in ("ppi++", "labels_only"):
        row = table.filter(pl.col("method") == method).row(0, named=True)
        assert row["ci_low"] == 0.0
        assert row["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 10))  # [0, 0.308]
    ppi = table.filter(pl.col("method") == "ppi++").row(0, named=True)
    assert "widened" in ppi["note"] and ppi["effective_n"] is None


@pytest.mark.parametrize("rates", [(0.1, 0.15, 0.4, 0.7, 0.95), (0.05, 0.9, 0.9, 0.9, 0.9)])
def test_stratified_draws_cover(rates: tuple[float, ...]) -> None:
    """A label sheet drawn by `draw_labels(stratify=True)` from strata of 190 to 4,100 rows:
    over 400 draws from one log, both human estimates hold the log's rate at n = 20 and 40
    (the old interval, which treated weighted rows as independent draws, covered 0.89 / 0.93).
    Second case: a rare label in the small stratum, a common one elsewhere."""
    rng = np.random.default_rng(4)
    sizes = (190, 600, 1500, 4100)
    f = np.concatenate([rng.uniform(0.25 * h, 0.25 * (h + 1), s) for h, s in enumerate(sizes)])
    f[0], f[-1] = 0.0, 1.0  # the equal-width bins span exactly [0, 1]
    q = np.interp(f, np.linspace(0, 1, len(rates)), rates)
    y = (rng.random(f.size) < q).astype(float)
    truth = y.mean()
    frame = pl.DataFrame({"id": np.arange(f.size), "faithfulness": f})
    for n in (20, 40):
        draws = [
            draw_labels(frame, n, score="faithfulness", stratify=True, seed=s)[0]
            for s in range(400)
        ]
        assert [
            s["rows"]
            for s in draw_labels(frame, n, score="faithfulness", stratify=True)[1]["strata"]
        ] == list(sizes)
        idx = np.stack([d["id"].to_numpy() for d in draws])
        w = np.stack([d["sample_weight"].to_numpy() for d in draws])
        found = human_intervals(y[idx], f[idx], np.broadcast_to(f, (400, f.size)), w=w)
        for method, r in (("ppi++", found.ppi), ("labels_only", found.labels_only)):
            cover = _covers(r.low, r.high, truth)
            assert cover >= 0.93, (method, n, cover)
        assert abs(float(found.ppi.estimate.mean()) - truth) < 0.01


def test_labels_needed_is_bounded() -> None:
    """Never more than labels alone need, never more rows than there are (then out of reach:
    None), and never 0 for a judge that matched every label of a small batch."""
    rng = np.random.default_rng(5)
    f = rng.uniform(size=60)
    y = (rng.uniform(size=60) < 0.2 + 0.6 * f).astype(float)
    small = labels_needed(0.05, y, f, n_scored=770)  # labels-only needs 1,530 > 770 rows
    assert small["n_labels_only"] > 770 and small["n_needed"] is None  # was 1,694
    big = labels_needed(0.05, y, f, n_scored=100_000)
    assert big["n_floor"] <= big["n_needed"] <= big["n_labels_only"]
    same = (rng.uniform(size=30) < 0.5).astype(float)
    identical = labels_needed(0.1, same, same, n_scored=10_000)
    assert identical["n_needed"] == identical["n_labels_only"] > 0
    zeros = labels_needed(0.1, np.zeros(10), rng.uniform(size=10), n_scored=10_000)
    assert zeros["n_needed"] >= zeros["n_floor"] >= 110  # 10 of the rarer kind at rate <= 1/11


def test_labels_needed_never_goes_below_its_floor() -> None:
    """Rate 0.5, width 0.5: labels alone need 16 by Wald's count, but below the floor (20:
    MIN_EACH of the rarer kind) PPI++ is widened to Clopper-Pearson, 0.506 wide at 8 of 16.
    The floor wins over the labels-only count; past N rows the plan is still out of reach."""
    y = np.array([0.0, 1.0] * 10)
    for f in (y, np.linspace(0.1, 0.9, 20)):  # a judge that matched every label, and another
        plan = labels_needed(0.5, y, f, n_scored=10_000)
        assert plan["n_labels_only"] == 16 and plan["n_floor"] == 20, plan
        assert plan["n_needed"] == 20, plan  # was 16
        low, high = clopper_pearson(np.array([8.0]), np.array([16.0]), 0.95)
        assert high[0] - low[0] > 0.5  # 16 labels would not reach the width
        low, high = clopper_pearson(np.array([10.0]), np.array([20.0]), 0.95)
        assert high[0] - low[0] <= 0.5
        assert labels_needed(0.5, y, f, n_scored=18)["n_needed"] is None


def test_paired_difference_covers_when_changes_are_rare() -> None:
    """human_estimate_difference's estimates (PPI++ on per-row label differences) at n >= 10
    when system b changes the label of 2 % or 5 % of rows: both hold the log's difference."""
    s, big_n = 1000, 2000
    rng = np.random.default_rng(3)
    for base, change in ((0.3, 0.02), (0.5, 0.05)):
        q = rng.beta(4 * base, 4 * (1 - base), size=(s, big_n))
        ya = (rng.random((s, big_n)) < q).astype(float)
        flip = rng.random((s, big_n)) < change
        yb = np.where(flip, (rng.random((s, big_n)) < 0.8).astype(float), ya)
        dy, truth = yb - ya, (yb - ya).mean(1)
        df = np.where(flip, 0.5, 0.0) + 0.05 * rng.standard_normal((s, big_n))
        for n in (10, 50, 200):
            found = human_intervals(dy[:, :n], df[:, :n], df)
            for method, r in (("ppi++", found.ppi), ("labels_only", found.labels_only)):
                cover = _covers(r.low, r.high, truth)
                assert cover >= 0.93, (method, base, change, n, cover)


def test_clopper_pearson_matches_scipy() -> None:
    from scipy import stats  # a declared test dependency (the package has no scipy)

    for n in (10, 57, 300):
        k = np.arange(n + 1)
        low, high = clopper_pearson(k, np.full(k.shape, n), 0.95)
        ref_low = np.where(k == 0, 0.0, stats.beta.ppf(0.025, np.maximum(k, 1), n - k + 1))
        ref_high = np.where(k == n, 1.0, stats.beta.ppf(0.975, k + 1, np.maximum(n - k, 1)))
        np.testing.assert_allclose(low, ref_low, atol=1e-12)
        np.testing.assert_allclose(high, ref_high, atol=1e-12)
    rng = np.random.default_rng(0)
    k = rng.uniform(0.5, 30, 200)
    n = k + rng.uniform(1, 100, 200)  # an effective n: real numbers
    low, high = clopper_pearson(k, n, 0.9)
    np.testing.assert_allclose(low, stats.beta.ppf(0.05, k, n - k + 1), atol=1e-12)
    np.testing.assert_allclose(high, stats.beta.ppf(0.95, k + 1, n - k), atol=1e-12)


def test_the_widened_note_names_the_weighted_reason() -> None:
    """80 stratified labels, 20 or more of each kind: widened only because one stratum's labels
    all agree, which the note must say (it named only the unweighted reasons)."""
    rng = np.random.default_rng(8)
    scored = pl.DataFrame({"id": np.arange(2000), "faithfulness": rng.uniform(size=2000)})
    y = np.r_[(np.arange(40) % 2).astype(float), np.ones(40)]  # stratum 2's labels all 1
    labels = pl.DataFrame(
        {
            "id": np.arange(0, 2000, 25),
            "faithful": y,
            "sample_weight": np.r_[np.full(40, 10.0), np.full(40, 40.0)],
        }
    )
    ppi = human_estimate(scored, labels).filter(pl.col("method") == "ppi++").row(0, named=True)
    assert "widened" in ppi["note"] and "stratum whose labels all agree" in ppi["note"], ppi
