"""`ragframe compare A B --on id --fail-if-worse METRIC` fails a build when b is worse than a
beyond the interval (by at least a margin), in the metric's direction; the same check in Python
(`check_regression`, `Comparison.check_regression`); its JUnit and Markdown files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from test_gate_outputs import check_junit_rules, rendered_tables

from ragframe import cli
from ragframe.decide.compare import RegressionUnknownWarning, check_regression, compare
from ragframe.errors import ConfigError

N = 60


def runs(shift: float, *, metric: str = "faithfulness", noise: float = 0.03, seed: int = 0):
    """Two runs of the same N questions: b = a + shift + small noise, inside [0, 1]."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.3, 0.7, N)
    b = np.clip(a + shift + rng.normal(0, noise, N), 0, 1)
    ids = [f"q{i}" for i in range(N)]
    topic = ["geo", "art"] * (N // 2)
    return (
        pl.DataFrame({"id": ids, "topic": topic, metric: a}),
        pl.DataFrame({"id": ids, "topic": topic, metric: b}),
    )


def status(check: Any) -> list[str]:
    return check.table["status"].to_list()


# ------------------------------------------------------------------------------ the rule


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
def test_worse_not_distinguishable_and_better(paired: bool) -> None:
    on = "id" if paired else None
    worse = check_regression(*runs(-0.15), "faithfulness", on=on)
    assert not worse.passed and status(worse) == ["worse"] and worse.worse == ["faithfulness"]
    assert worse.table["ci_high"][0] < 0
    same = check_regression(*runs(0.0, seed=3), "faithfulness", on=on)
    assert same.passed and status(same) == ["not worse"], str(same)
    low, high = same.table["ci_low"][0], same.table["ci_high"][0]
    assert low < 0 < high  # truly undecided, not passed by accident
    better = check_regression(*runs(0.15), "faithfulness", on=on)
    assert better.passed and better.table["ci_low"][0] > 0
    assert better.comparison.paired is paired


def test_lower_is_better_is_worse_when_it_rises() -> None:
    """hallucination: b higher is worse. Ignoring the direction (or swapping the sign of the
    difference) turns both verdicts round."""
    up = check_regression(*runs(0.15, metric="hallucination"), "hallucination", on="id")
    down = check_regression(*runs(-0.15, metric="hallucination"), "hallucination", on="id")
    assert up.table["direction"][0] == "lower"
    assert status(up) == ["worse"] and not up.passed
    assert status(down) == ["not worse"] and down.passed
    assert "wholly above 0" in str(up) and "lower is better" in str(up)


def test_margin_asks_for_a_drop_of_at_least_that_much() -> None:
    a, b = runs(-0.10, noise=0.01)  # a drop of about 0.10, a narrow interval
    found = compare(a, b, on="id")
    high = found.table["ci_high"][0]
    assert -0.12 < high < -0.08
    assert status(found.check_regression("faithfulness", margin=0.05)) == ["worse"]
    assert status(found.check_regression("faithfulness", margin=0.2)) == ["not worse"]
    # the margin is on the losing side of each metric's direction
    ha, hb = runs(0.10, metric="hallucination", noise=0.01)
    rise = compare(ha, hb, on="id")
    assert status(rise.check_regression("hallucination", margin=0.05)) == ["worse"]
    assert status(rise.check_regression("hallucination", margin=0.2)) == ["not worse"]
    text = str(found.check_regression("faithfulness", margin=0.2))
    assert "the interval is not wholly below -0.2" in text and "margin 0.2" in text


def test_margin_zero_matches_the_comparison_verdict() -> None:
    """With no margin, 'worse' is exactly the table's ❌ b worse (interval and p agree)."""
    for seed in range(40):
        shift = (seed % 5 - 2) * 0.02
        found = compare(*runs(shift, seed=seed, noise=0.05), on="id", seed=seed)
        check = found.check_regression(["faithfulness"])
        assert (status(check) == ["worse"]) == (found.table["better"][0] == "a"), seed


def test_five_pairs_cannot_tell_and_say_so() -> None:
    """Five drops of 0.4 to 0.6: the interval lies below 0, but 5 sign flips cannot make p
    small (2 / 32 whatever the scores): the check says it cannot tell, as a warning; it passes
    unless told to fail on it. (Equal drops: their exact bound reaches above 0,
    test_compare_constant.)"""
    a = pl.DataFrame({"id": [1, 2, 3, 4, 5], "faithfulness": [0.9, 0.8, 0.7, 0.9, 0.8]})
    b = pl.DataFrame({"id": [1, 2, 3, 4, 5], "faithfulness": [0.4, 0.35, 0.15, 0.3, 0.4]})
    with pytest.warns(RegressionUnknownWarning):
        check = check_regression(a, b, "faithfulness", on="id")
    row = check.table.row(0, named=True)
    assert check.comparison.table["method"][0] == "score"
    assert row["ci_high"] < 0 and row["p_value"] == pytest.approx(2 / 32)
    assert row["min_p"] == pytest.approx(2 / 32) and row["status"] == "cannot tell"
    assert check.passed and check.comparison.table["better"][0] is None
    assert check.unknown == ["faithfulness"] and check.worse == []
    text = str(check)
    assert "n=5 pairs cannot show a difference at 95%" in text, text
    assert "needs at least 6 pairs" in text and "passed with a warning" in text
    strict = check_regression(a, b, "faithfulness", on="id", fail_if_unknown=True)
    assert not strict.passed and "regression check failed: 1 of 1 cannot tell" in str(strict)
    # six pairs can: 2 / 64 < 0.05, and then interval and p decide
    six = check_regression(
        a.vstack(pl.DataFrame({"id": [6], "faithfulness": [0.9]})),
        b.vstack(pl.DataFrame({"id": [6], "faithfulness": [0.3]})),
        "faithfulness",
        on="id",
    )
    assert status(six) == ["worse"] and not six.passed


def test_the_p_value_must_agree_with_the_interval() -> None:
    """Six pairs could show a difference (2 / 64 < 0.05), but these do not: five drops and one
    small rise give p = 4 / 64 while the interval lies below 0. Not worse, and said why."""
    a = pl.DataFrame({"id": range(6), "faithfulness": [0.9] * 5 + [0.5]})
    b = pl.DataFrame({"id": range(6), "faithfulness": [0.4, 0.45, 0.35, 0.4, 0.42, 0.55]})
    check = check_regression(a, b, "faithfulness", on="id")
    row = check.table.row(0, named=True)
    assert row["ci_high"] < 0 and row["p_value"] == pytest.approx(4 / 64)
    assert row["min_p"] == pytest.approx(2 / 64) and status(check) == ["not worse"]
    assert "the interval is below 0 but p is not below 0.05" in str(check) and check.passed


def test_unpaired_three_a_side_cannot_tell() -> None:
    """Unpaired, 3 scores a side: a relabelling's smallest p is 2 / C(6, 3) = 0.1."""
    a = pl.DataFrame({"faithfulness": [0.9, 0.95, 1.0]})
    b = pl.DataFrame({"faithfulness": [0.0, 0.05, 0.1]})
    with pytest.warns(RegressionUnknownWarning):
        check = check_regression(a, b, "faithfulness")
    assert check.table["min_p"][0] == pytest.approx(0.1) and status(check) == ["cannot tell"]
    assert "n=3/3 scores cannot show a difference at 95%" in str(check)
    four = check_regression(a.vstack(a.head(1)), b.vstack(b.head(1)), "faithfulness")
    assert four.table["min_p"][0] == pytest.approx(2 / 70) and status(four) != ["cannot tell"]


def test_groups_any_group_worse_fails() -> None:
    a, b = runs(0.0, noise=0.01)
    b = b.with_columns(
        pl.when(pl.col("topic") == "geo")
        .then(pl.col("faithfulness") - 0.2)
        .otherwise(pl.col("faithfulness") + 0.1)
        .clip(0, 1)
    )
    check = check_regression(a, b, "faithfulness", on="id", by="topic")
    groups = check.table.filter(~pl.col("overall"))
    assert dict(zip(groups["topic"], groups["status"], strict=True)) == {
        "art": "not worse",
        "geo": "worse",
    }
    assert not check.passed and "faithfulness [topic=geo]: worse" in str(check)
    # the first row is over all rows (-0.05 on average: not shown worse there)
    assert check.table["overall"].to_list() == [True, False, False]
    assert check.table["topic"][0] is None and "faithfulness [all rows]: " in str(check)


def drops_in_small_groups() -> tuple[pl.DataFrame, pl.DataFrame]:
    """12 questions in groups of 5, 5 and 2, every answer of b about 0.25 worse."""
    rng = np.random.default_rng(7)
    a = rng.uniform(0.6, 0.9, 12)
    b = a - rng.uniform(0.2, 0.3, 12)
    ids, topic = list(range(12)), ["geo"] * 5 + ["art"] * 5 + ["law"] * 2
    return (
        pl.DataFrame({"id": ids, "topic": topic, "faithfulness": a}),
        pl.DataFrame({"id": ids, "topic": topic, "faithfulness": b}),
    )


def test_by_is_never_laxer_than_without() -> None:
    """Every row worse, in groups too small to tell (5, 5, 2 pairs): without by= the check
    fails; with by= it must fail too (it checks all rows as well), not pass every group."""
    a, b = drops_in_small_groups()
    plain = check_regression(a, b, "faithfulness", on="id")
    grouped = check_regression(a, b, "faithfulness", on="id", by="topic")
    assert status(plain) == ["worse"] and not plain.passed
    assert not grouped.passed and status(grouped) == ["worse", *["cannot tell"] * 3]
    assert grouped.table["overall"].to_list() == [True, False, False, False]
    assert "faithfulness [all rows]: worse" in str(grouped)
    unpaired = check_regression(a, b, "faithfulness", by="topic")
    assert not unpaired.passed and status(unpaired)[0] == "worse"


def test_no_interval_is_a_warning_unless_asked_to_fail() -> None:
    a = pl.DataFrame({"id": [1], "faithfulness": [0.9]})
    b = pl.DataFrame({"id": [1], "faithfulness": [0.1]})
    with pytest.warns(RegressionUnknownWarning):
        check = check_regression(a, b, "faithfulness", on="id")
    assert status(check) == ["cannot tell"] and check.passed
    assert "cannot tell: no interval (needs at least 2 pairs)" in str(check)
    assert not check_regression(a, b, "faithfulness", on="id", fail_if_unknown=True).passed


def test_b_failed_rows_count_as_the_worst_score() -> None:
    """b failed to score 10 of 12 rows: left out, the 2 left say nothing and b passed. As a
    gate counts them, they count as 0 (1 when lower is better) and b is worse."""
    a, b = drops_in_small_groups()
    b = b.with_columns(pl.lit(0.9).alias("faithfulness"))
    b = b.with_columns(
        pl.when(pl.col("id") < 10)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness")
    )
    check = check_regression(a, b, "faithfulness", on="id")
    row = check.table.row(0, named=True)
    assert row["failed_b"] == 10 and row["n"] == 12 and status(check) == ["worse"]
    assert "10 rows of b failed to score, counted as 0" in str(check)
    assert not check.passed
    with pytest.warns(RegressionUnknownWarning):
        lax = check_regression(a, b, "faithfulness", on="id", ignore_failed=True)
    assert lax.table["n"][0] == 2 and lax.passed and status(lax) == ["cannot tell"]
    assert "10 rows of b failed to score, left out" in str(lax)
    unpaired = check_regression(a, b, "faithfulness")
    assert unpaired.table["n_b"][0] == 12 and status(unpaired) == ["worse"]
    # lower is better: a failed row counts as 1
    ha = a.select("id", pl.lit(0.1).alias("hallucination"))
    failed = pl.col("id") < 10
    hb = a.select("id", pl.when(failed).then(None).otherwise(0.1).alias("hallucination"))
    high = check_regression(ha, hb, "hallucination", on="id")
    assert high.table["mean_b"][0] == pytest.approx((10 * 1.0 + 2 * 0.1) / 12)
    assert status(high) == ["worse"] and "counted as 1" in str(high)
    # the comparison itself still leaves them out (and says so)
    assert check.comparison.table["n"][0] == 2


def test_unpaired_rows_neither_run_scored_weigh_on_both_sides() -> None:
    """Unpaired, both runs lack a score on the same 15 of 60 rows (no input for the metric):
    counting b's alone as 0 would call an unchanged b worse. Both sides count them."""
    a, _ = runs(0.0)
    missing = pl.when(pl.int_range(pl.len()) % 4 == 0).then(None).otherwise(pl.col("faithfulness"))
    a = a.with_columns(missing.alias("faithfulness"))
    check = check_regression(a, a, "faithfulness")
    row = check.table.row(0, named=True)
    assert (row["failed_a"], row["failed_b"], row["n_a"], row["n_b"]) == (15, 15, 60, 60)
    assert status(check) == ["not worse"] and row["diff"] == pytest.approx(0.0)
    assert "15 rows of a and 15 of b failed to score, counted as 0" in str(check)
    # b failing more than a is still worse
    b = a.with_columns(
        pl.when(pl.col("id").is_in(["q1", "q2", "q3"] + [f"q{i}" for i in range(5, 40, 2)]))
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness")
    )
    assert status(check_regression(a, b, "faithfulness")) == ["worse"]


def test_a_metric_to_check_must_be_on_both_sides() -> None:
    a, b = runs(0.0)
    with pytest.raises(ConfigError, match=r"names 'hallucination', which a \(the frame\) lacks"):
        check_regression(a, b, "hallucination", on="id")
    with pytest.raises(ConfigError, match="which were not compared"):
        compare(a, b, on="id").check_regression("hallucination")
    with pytest.raises(ConfigError, match="name the metrics"):
        check_regression(a, b, [], on="id")
    with pytest.raises(ConfigError, match="margin must be"):
        check_regression(a, b, "faithfulness", margin=-0.1)
    # a metric named is compared even when the default finds no score column
    plain = check_regression(a, b, ["faithfulness"], on="id", compared=None)
    assert plain.comparison.table["metric"].to_list() == ["faithfulness"]


# ------------------------------------------------------------------------------ the CLI


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, shift in (("main", 0.0), ("worse", -0.15), ("better", 0.15)):
        a, b = runs(shift)
        if name == "main":
            a.write_parquet(tmp_path / "main.parquet")
        else:
            b.write_parquet(tmp_path / f"{name}.parquet")
        out[name] = tmp_path / f"{name}.parquet"
    return out


@pytest.mark.parametrize("candidate, code", [("worse", 1), ("better", 0)])
def test_cli_exits_1_when_worse_and_writes_the_files_either_way(
    files: dict[str, Path], tmp_path: Path, candidate: str, code: int, capsys: Any
) -> None:
    junit, md = tmp_path / "ci" / "compare.xml", tmp_path / "ci" / "compare.md"
    argv = ["compare", str(files["main"]), str(files[candidate]), "--on", "id"]
    argv += ["--fail-if-worse", "faithfulness", "--junit", str(junit), "--markdown", str(md)]
    assert cli.main(argv) == code
    out = capsys.readouterr().out
    word = "worse" if code else "not worse"
    lines = [line for line in out.splitlines() if line.startswith(("✅ faith", "❌ faith"))]
    assert len(lines) == 1 and lines[0].split(": ")[1] == word, out
    assert "b - a = " in lines[0] and "95% interval [" in lines[0]
    root = check_junit_rules(junit.read_text())
    assert root.get("failures") == str(code)
    case = root.find(".//testcase")
    assert case is not None and case.get("name") == "faithfulness not worse than a"
    assert case.get("classname") == "ragframe.compare.faithfulness"
    table = rendered_tables(md.read_text())[0]
    assert table[1][0] == ("❌" if code else "✅") and table[1][-1] == word


def test_cli_without_the_check_still_exits_0(files: dict[str, Path], capsys: Any) -> None:
    assert cli.main(["compare", str(files["main"]), str(files["worse"]), "--on", "id"]) == 0
    assert "❌ b worse" in capsys.readouterr().out


def test_cli_margin_and_json(files: dict[str, Path], capsys: Any) -> None:
    argv = ["compare", str(files["main"]), str(files["worse"]), "--on", "id"]
    argv += ["--fail-if-worse", "faithfulness"]
    assert cli.main([*argv, "--margin", "0.5"]) == 0
    capsys.readouterr()
    assert cli.main([*argv, "--json"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["regression"]["passed"] is False and data["table"][0]["better"] == "a"
    assert data["regression"]["results"][0]["status"] == "worse"
    assert "❌ faithfulness: worse" in captured.err


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--fail-if-worse", "hallucination"], "names 'hallucination', which a"),
        (["--margin", "0.1"], "--margin applies to --fail-if-worse"),
        (["--junit", "x.xml"], "add --fail-if-worse"),
        (["--fail-if-worse", "faithfulness", "--margin", "1.5"], "argument --margin: must be"),
        (["--fail-if-worse", "faithfulness", "--markdown", "-", "--json"], "choose one"),
    ],
    ids=["missing-metric", "margin-alone", "junit-alone", "margin-too-big", "two-stdouts"],
)
def test_cli_configuration_errors_exit_2_on_one_line(
    files: dict[str, Path], extra: list[str], said: str, capsys: Any
) -> None:
    argv = ["compare", str(files["main"]), str(files["worse"]), "--on", "id", *extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()  # argparse's own refusals print the usage first
    assert said in lines[-1] and (len(lines) == 1 or lines[0].startswith("usage:")), err


# ------------------------------------------------------------------------------ the display


def test_the_jupyter_table_shows_direction_verdict_colour_and_the_interval_against_0() -> None:
    a, b = runs(-0.15)
    b = b.with_columns(hallucination=pl.col("faithfulness") * 0.2)
    a = a.with_columns(hallucination=pl.col("faithfulness") * 0.5)
    found = compare(a, b, on="id", by="topic")
    page = found._repr_html_()
    # one row per group and metric, each with its bar: the interval as a line, b - a a dot
    assert page.count("<tr>") == 1 + found.table.height
    assert page.count("<svg") == found.table.height and page.count("<circle") == 4
    assert page.count('faithfulness <span title="higher is better"') == 2
    assert page.count('hallucination <span title="lower is better"') == 2
    assert page.count(">↑</span>") == 2 and page.count(">↓</span>") == 2
    # worse in red, better in green, whatever the direction (hallucination fell: better)
    verdicts = found.table.select("metric", "better").unique()
    assert set(verdicts.iter_rows()) == {("faithfulness", "a"), ("hallucination", "b")}
    assert page.count("background:#fce8e6") == 2 and page.count("background:#e6f4ea") == 2
    assert page.count("❌ b worse") == 2 and page.count("✅ b better") == 2
    # the bars share one axis: 0 at the centre, a negative difference left of it
    first = page.split("<svg", 2)[1]
    centre = 70.0
    dot = float(first.split('<circle cx="')[1].split('"')[0])
    assert dot < centre and f'x1="{centre}" x2="{centre}"' in first
    odd = compare(*runs(0.0, metric="<b>x</b>"), on="id", metrics=["<b>x</b>"])._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in odd and "<b>x</b>" not in odd


def test_the_check_as_ci_files_with_groups(tmp_path: Path) -> None:
    a, b = runs(0.0, noise=0.01)
    b = b.with_columns(
        pl.when(pl.col("topic") == "geo")
        .then(pl.col("faithfulness") - 0.2)
        .otherwise(pl.col("faithfulness"))
    )
    check = check_regression(a, b, "faithfulness", on="id", by="topic", margin=0.05)
    written = check.write(junit=tmp_path / "c.xml", json=tmp_path / "c.json")
    assert written == [str(tmp_path / "c.xml"), str(tmp_path / "c.json")]
    root = check_junit_rules((tmp_path / "c.xml").read_text())
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == [
        "faithfulness not worse than a by 0.05 [all rows]",
        "faithfulness not worse than a by 0.05 [topic=art]",
        "faithfulness not worse than a by 0.05 [topic=geo]",
    ]
    failures = [f.get("message", "") for f in root.iter("failure")]
    assert len(failures) == 2 and "[topic=geo]: worse" in failures[1], failures
    assert "[all rows]: worse" in failures[0]
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["passed"] is False and data["checks"] == 3 and data["failed"] == 2
    assert data["by"] == ["topic"] and data["margin"] == 0.05
    assert [r["overall"] for r in data["results"]] == [True, False, False]
    assert [r["status"] for r in data["results"]] == ["worse", "not worse", "worse"]
    assert {"topic", "metric", "diff", "ci_low", "ci_high", "p_value", "ok"} <= set(
        data["results"][0]
    )


# ------------------------------------------------------------------------------ review (28)


def cli_files(tmp_path: Path, a: pl.DataFrame, b: pl.DataFrame) -> list[str]:
    a.write_parquet(tmp_path / "a.parquet")
    b.write_parquet(tmp_path / "b.parquet")
    return ["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "--on", "id"]


def test_cli_five_pairs_warn_exit_0_unless_fail_if_unknown(tmp_path: Path, capsys: Any) -> None:
    """n=5, every score 1.0 -> 0.0: p cannot go below 2/32, so the check cannot tell. It
    says so (a line, a skipped JUnit case, ⚠️ in the Markdown) and exits 0; with
    --fail-if-unknown it exits 1 and the headline still does not claim b is worse."""
    a = pl.DataFrame({"id": range(5), "faithfulness": [1.0] * 5})
    b = pl.DataFrame({"id": range(5), "faithfulness": [0.0] * 5})
    junit, md = tmp_path / "c.xml", tmp_path / "c.md"
    argv = [*cli_files(tmp_path, a, b), "--fail-if-worse", "faithfulness"]
    argv += ["--junit", str(junit), "--markdown", str(md)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "⚠️ faithfulness: cannot tell: n=5 pairs cannot show a difference at 95%" in out
    root = check_junit_rules(junit.read_text())
    assert (root.get("failures"), root.get("skipped")) == ("0", "1")
    skipped = root.find(".//testcase/skipped")
    assert skipped is not None and "n=5 pairs cannot show" in skipped.get("message", "")
    text = md.read_text()
    assert text.startswith("### ragframe compare: ⚠️ cannot tell whether b is worse")
    assert rendered_tables(text)[0][1][0] == "⚠️"
    assert cli.main([*argv, "--fail-if-unknown"]) == 1
    root = check_junit_rules(junit.read_text())
    assert (root.get("failures"), root.get("skipped")) == ("1", "0")
    text = md.read_text()
    head = text.splitlines()[0]
    assert "❌ b is worse" not in head and "❌ cannot tell whether b is worse" in head


def test_cli_identical_files_with_a_one_row_group_pass(tmp_path: Path, capsys: Any) -> None:
    """Nothing changed, one group has a single row (no interval): exit 0, and the headline
    never says b is worse; the one-row group is a warning."""
    a, _ = runs(0.0)
    solo = pl.when(pl.col("id") == "q0").then(pl.lit("solo")).otherwise(pl.col("topic"))
    a = a.with_columns(solo.alias("topic"))
    md = tmp_path / "c.md"
    argv = [*cli_files(tmp_path, a, a), "--by", "topic", "--fail-if-worse", "faithfulness"]
    assert cli.main([*argv, "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "faithfulness [topic=solo]: cannot tell: no interval" in out
    head = md.read_text().splitlines()[0]
    assert "❌ b is worse" not in head and "⚠️ cannot tell whether b is worse" in head


def test_cli_by_also_checks_all_rows(tmp_path: Path, capsys: Any) -> None:
    a, b = drops_in_small_groups()
    argv = [*cli_files(tmp_path, a, b), "--fail-if-worse", "faithfulness"]
    assert cli.main(argv) == 1
    assert cli.main([*argv, "--by", "topic"]) == 1
    assert "❌ faithfulness [all rows]: worse" in capsys.readouterr().out


def test_cli_failed_rows_of_b_count_unless_ignore_failed(tmp_path: Path, capsys: Any) -> None:
    a, _ = drops_in_small_groups()
    b = a.with_columns(
        pl.when(pl.col("id") < 10)
        .then(None)
        .otherwise(pl.col("faithfulness"))
        .alias("faithfulness")
    )
    argv = [*cli_files(tmp_path, a, b), "--fail-if-worse", "faithfulness", "--json"]
    assert cli.main(argv) == 1
    data = json.loads(capsys.readouterr().out)["regression"]
    assert data["ignore_failed"] is False and data["results"][0]["failed_b"] == 10
    assert cli.main([*argv, "--ignore-failed"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["regression"]["ignore_failed"] is True
    assert "10 rows of b failed to score, left out" in captured.err
    refused = cli.main([*argv[:5], "--ignore-failed"])
    assert refused == 2 and "--ignore-failed applies to --fail-if-worse" in capsys.readouterr().err


# ------------------------------------------------------------------------------ review C (28)


def five_pairs() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Five drops of about 0.5: p cannot go below 2 / 32, so the check cannot tell."""
    a = pl.DataFrame({"id": [1, 2, 3, 4, 5], "faithfulness": [0.9, 0.8, 0.7, 0.9, 0.8]})
    b = pl.DataFrame({"id": [1, 2, 3, 4, 5], "faithfulness": [0.4, 0.35, 0.15, 0.3, 0.4]})
    return a, b


def test_cannot_tell_warns_in_python_unless_it_fails() -> None:
    """'cannot tell' passes, so in a notebook or a script it must not be silent: a
    RegressionUnknownWarning (a RuntimeWarning, so simplefilter('error') makes it fail), one
    line naming the metric and why, pointing at the caller. Not when it fails anyway
    (fail_if_unknown), nor when every metric could tell."""
    assert issubclass(RegressionUnknownWarning, RuntimeWarning)
    a, b = five_pairs()
    with pytest.warns(RegressionUnknownWarning) as caught:
        check = check_regression(a, b, "faithfulness", on="id")
    assert check.passed and len(caught) == 1
    message = str(caught[0].message)
    assert "\n" not in message and "faithfulness" in message, message
    assert "n=5 pairs cannot show a difference at 95%" in message, message
    assert "fail_if_unknown=True" in message and caught[0].filename == __file__
    with pytest.warns(RegressionUnknownWarning) as caught:
        compare(a, b, on="id").check_regression("faithfulness")
    assert len(caught) == 1 and caught[0].filename == __file__
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_regression(a, b, "faithfulness", on="id", fail_if_unknown=True).passed
        assert check_regression(*runs(0.0), "faithfulness", on="id").passed


def test_cli_says_cannot_tell_once(tmp_path: Path, capsys: Any) -> None:
    """The command line prints its ⚠️ line; the Python warning would say it twice."""
    argv = [*cli_files(tmp_path, *five_pairs()), "--fail-if-worse", "faithfulness"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "⚠️ faithfulness: cannot tell" in captured.out
    assert "RegressionUnknownWarning" not in captured.err


def test_cannot_tell_verdict_does_not_read_as_a_contradiction() -> None:
    a, b = five_pairs()
    with pytest.warns(RuntimeWarning):
        text = str(check_regression(a, b, "faithfulness", on="id"))
    verdict = text.splitlines()[-1]
    assert verdict.startswith("regression check passed with a warning: no metric shown worse;")
    assert "1 of 1 cannot tell" in verdict and "not shown worse on 0" not in verdict


def test_markdown_shows_the_failed_rows_that_decide_the_verdict() -> None:
    """b failed 6 of 12 rows, counted as 0: the Markdown row says so, as the line and the
    JUnit case do (else '-0.125 ... worse' beside the comparison's +0.000 is a mystery)."""
    a, _ = drops_in_small_groups()
    b = a.with_columns(
        pl.when(pl.col("id") < 6).then(None).otherwise(pl.col("faithfulness")).alias("faithfulness")
    )
    check = check_regression(a, b, "faithfulness", on="id")
    assert check.table["failed_b"][0] == 6
    table = rendered_tables(check.to_markdown())[0]
    n = table[0].index("n")
    assert "6 rows of b failed to score, counted as 0" in table[1][n], table
    assert "6 rows of b failed to score, counted as 0" in check.cases()[0].message
    lax = check_regression(a, b, "faithfulness", on="id", ignore_failed=True)
    assert "left out" in rendered_tables(lax.to_markdown())[0][1][n]
    clean = check_regression(*runs(0.0), "faithfulness", on="id")
    assert "failed" not in rendered_tables(clean.to_markdown())[0][1][n]
    one = pl.when(pl.col("id") == 0).then(None).otherwise(pl.col("faithfulness") - 0.2)
    single = check_regression(a, a.with_columns(one.alias("faithfulness")), "faithfulness", on="id")
    assert "; 1 row of b failed to score, counted as 0)" in str(single), str(single)


def test_a_null_group_reads_the_same_everywhere() -> None:
    """A row with no topic is its own group: the line, the JUnit name, the Markdown cell and
    the comparison's table all show it as (null), never empty nor None, and never like the
    all-rows row."""
    a, b = runs(0.0)
    a = a.with_columns(
        pl.when(pl.col("id") == "q0").then(None).otherwise(pl.col("topic")).alias("topic")
    )
    b = b.with_columns(
        pl.when(pl.col("id") == "q0").then(None).otherwise(pl.col("topic")).alias("topic")
    )
    with pytest.warns(RuntimeWarning):  # the one-row group cannot tell
        check = check_regression(a, b, "faithfulness", on="id", by="topic")
    null_row = [r["topic"] is None and not r["overall"] for r in check.table.iter_rows(named=True)]
    assert null_row.count(True) == 1
    assert "faithfulness [topic=(null)]: cannot tell" in str(check), str(check)
    assert "None" not in str(check)
    names = [c.name for c in check.cases()]
    assert "faithfulness not worse than a [topic=(null)]" in names, names
    table = rendered_tables(check.to_markdown())[0]
    assert [r[1] for r in table[1:]].count("(null)") == 1, table
    assert "(all rows)" in [r[1] for r in table[1:]]
    shown = str(check.comparison)
    assert "(null)" in shown and "None" not in shown, shown
