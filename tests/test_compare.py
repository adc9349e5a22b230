"""ragframe.compare: paired and unpaired differences between two scored runs, with intervals,
p-values, wins / ties / losses, every unpaired row counted, and the CLI."""

from __future__ import annotations

import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import fenced, task_name

import ragframe
from ragframe import cli
from ragframe.cli import compare as compare_cli
from ragframe.decide.compare import EXACT_MAX_N, PERMUTATIONS, compare
from ragframe.decide.compare._cells import better_side
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import write_parquet
from ragframe.testing.server import auto_answer

MARK = "[src]"


def paired_frames(
    a: np.ndarray, b: np.ndarray, metric: str = "faithfulness", **extra: Any
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ids = list(range(a.size))
    return (
        pl.DataFrame({"id": ids, metric: a, **extra}),
        pl.DataFrame({"id": ids, metric: b, **extra}),
    )


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], int]:
    """`ragframe ...` with the compare subcommand (registered here if the package does not
    list it yet)."""
    if compare_cli not in cli.SUBCOMMANDS:
        monkeypatch.setattr(cli, "SUBCOMMANDS", (*cli.SUBCOMMANDS, compare_cli))
    return cli.main


# ------------------------------------------------------------------ with the scripted judge


def claim_judge() -> Callable[[dict[str, Any]], Any]:
    """A judge whose claims are the answer's sentences, supported when they carry MARK; a
    quarter of its verdicts flipped by a hash of (claim, times seen), so that scoring the same
    rows twice gives different, equally noisy verdicts (a judge at temperature > 0)."""
    seen: Counter[str] = Counter()

    def handle(body: dict[str, Any]) -> Any:
        task = task_name(body)
        if task == "answer_claims":
            answer = fenced(body, "answer")[0]
            return {"claims": [s.strip() + "." for s in answer.split(".") if s.strip()]}
        if task == "faithfulness_verify":
            verdicts = []
            for k, claim in enumerate(fenced(body, "claim"), start=1):
                seen[claim] += 1
                flip = zlib.crc32(f"{claim}|{seen[claim]}".encode()) % 4 == 0
                verdicts.append({"index": k, "reason": "r", "supported": (MARK in claim) != flip})
            return {"verdicts": verdicts}
        return auto_answer(body)

    return handle


def rag_log(n: int, degraded: int = 0) -> pl.DataFrame:
    """n rows of four-sentence answers, each sentence marked as grounded; the first
    `degraded` rows keep the mark on one sentence only."""
    answers = [
        " ".join(
            f"Fact {k} of row {i}{'' if i < degraded and k > 0 else ' ' + MARK}." for k in range(4)
        )
        for i in range(n)
    ]
    return pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(n)],
            "question": [f"question {i}" for i in range(n)],
            "answer": answers,
            "contexts": [[f"context of row {i}"] for i in range(n)],
        }
    )


def scored_file(log: pl.DataFrame, judge: Any, path: Path, **meta_changes: Any) -> Path:
    result = ragframe.run(log, ["faithfulness"], judge=judge)
    metadata = result.metadata()
    metadata["judge"].update(meta_changes)
    write_parquet(result.frame, path, metadata)
    return path


def test_same_rows_twice_no_difference_and_degraded_answers_a_significant_drop(
    server, judge, tmp_path
):
    """The issue's test: the same 40 rows scored twice by a noisy scripted judge show no
    significant difference; with 25 of b's answers degraded (3 of 4 claims unmarked), b is
    significantly less faithful."""
    server.handler = claim_judge()
    first = scored_file(rag_log(40), judge, tmp_path / "a.parquet")
    again = scored_file(rag_log(40), judge, tmp_path / "again.parquet")
    worse = scored_file(rag_log(40, degraded=25), judge, tmp_path / "worse.parquet")
    same = compare(first, again, on="id")
    row = same.table.row(0, named=True)
    assert pl.read_parquet(first)["faithfulness"].to_list() != (
        pl.read_parquet(again)["faithfulness"].to_list()
    )  # the judge's noise moved scores, in both directions
    assert row["wins"] > 0 and row["losses"] > 0
    assert (row["n"], row["matched"], row["only_a"], row["only_b"]) == (40, 40, 0, 0)
    assert row["p_value"] >= 0.05 and row["ci_low"] <= 0 <= row["ci_high"]
    assert row["better"] is None and "~ no clear difference" in str(same)
    assert same.warnings == []  # same judge, same prompts, nothing left out

    drop = compare(first, worse, on="id")
    row = drop.table.row(0, named=True)
    assert row["direction"] == "higher"
    # Expected: 25 of 40 rows fall from 0.75 to (0.75 + 3 * 0.25) / 4 = 0.375, diff -0.23.
    assert -0.35 < row["diff"] < -0.15 and row["ci_high"] < 0 and row["p_value"] < 0.001
    assert row["better"] == "a" and row["losses"] > row["wins"]
    assert "❌ b worse" in str(drop)
    changed = drop.changed["faithfulness"]
    assert changed.height == 10 and set(changed["id"]) <= {f"q{i}" for i in range(25)}
    assert (changed["diff"] < 0).all()
    claims_b = changed["faithfulness_detail_b"][0]["claims"]
    assert len(claims_b) == 4 and "faithfulness_detail_a" in changed.columns


def test_differing_judges_and_prompts_are_warned_from_the_metadata(server, judge, tmp_path):
    server.handler = claim_judge()
    first = scored_file(rag_log(12), judge, tmp_path / "a.parquet")
    other = scored_file(rag_log(12), judge, tmp_path / "b.parquet", model="other-judge")
    found = compare(first, other, on="id")
    assert any(
        "the judges differ" in w
        and "'fake-judge' in a, 'other-judge' in b" in w
        and "a judge change alone moves scores" in w
        for w in found.warnings
    )
    meta = ragframe.read_metadata(other)
    meta["metrics"]["faithfulness"]["prompt_hashes"]["faithfulness.verify"] = "0" * 16
    frame = pl.read_parquet(other)
    write_parquet(frame, tmp_path / "c.parquet", meta)
    found = compare(first, tmp_path / "c.parquet", on="id")
    assert any("faithfulness: the prompts differ" in w for w in found.warnings), found.warnings
    # An old file without metadata: said, not guessed.
    frame.write_parquet(tmp_path / "old.parquet")
    found = compare(first, tmp_path / "old.parquet", on="id")
    assert any("has no ragframe metadata" in w and "old.parquet" in w for w in found.warnings)


# ------------------------------------------------------------------ the statistics


def binomial_range(n: int, p: float, outside: float = 0.001) -> tuple[int, int]:
    """The central range [lo, hi] of Binomial(n, p) leaving at most `outside` / 2 in each tail:
    a count outside it happens less than 0.1 % of the time when the true rate is p."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    lo = next(k for k in range(n + 1) if sum(pmf[: k + 1]) > outside / 2)
    hi = next(k for k in range(n, -1, -1) if sum(pmf[k:]) > outside / 2)
    return lo, hi


def test_the_binomial_range() -> None:
    # P(X <= 1) = 0.00040 and P(X >= 22) = 0.00048 for X ~ Binomial(200, 0.05); P(X <= 2) and
    # P(X >= 21) are above 0.0005.
    assert binomial_range(200, 0.05) == (2, 21)
    assert binomial_range(200, 0.95) == (179, 198)
    assert binomial_range(10, 0.5, outside=0.25) == (3, 7)


#: Nominal rates checked over 200 seeded data sets: a count outside the binomial's central
#: 99.9 % range at the nominal rate fails (p < 0.05 under no effect: 2 to 21 of 200; a 95 %
#: interval covering the truth: 179 to 198 of 200). What this seed gives today is in the
#: assertion message and the README; the bound, not the seeded figure, is what is tested.
TRIALS = 200


def test_p_values_are_calibrated_under_no_effect() -> None:
    """200 paired data sets with no effect (b and a exchangeable): p < 0.05 in about 5 %."""
    rng = np.random.default_rng(7)
    small, declared = [], []
    for trial in range(TRIALS):
        base = rng.uniform(0, 1, 30)
        a = np.clip(base + rng.normal(0, 0.15, 30), 0, 1)
        b = np.clip(base + rng.normal(0, 0.15, 30), 0, 1)
        found = compare(*paired_frames(a, b), on="id", seed=trial).table
        small.append(found["p_value"][0] < 0.05)
        declared.append(found["better"][0] is not None)
        assert found["p_value"][0] > 0
    lo, hi = binomial_range(TRIALS, 0.05)
    assert lo <= sum(small) <= hi, (sum(small), (lo, hi))
    # The decision a user reads: "better" only where p < 0.05 too, so at most that often.
    assert all(p or not d for p, d in zip(small, declared, strict=True))
    assert sum(declared) <= hi, (sum(declared), hi)


def test_intervals_cover_a_known_shift() -> None:
    """Paired: b = a + 0.1 + symmetric noise (true mean difference 0.1). Unpaired: two
    independent samples, a ~ U(0, 0.8) (25) and b ~ Beta(2, 5) + 0.1 (40), true difference
    2/7 + 0.1 - 0.4. Each 95 % interval covers the truth in about 95 % of 200 data sets: too
    few is an interval too narrow, too many one too wide."""
    rng = np.random.default_rng(11)
    paired = unpaired = 0
    for trial in range(TRIALS):
        a = rng.uniform(0, 0.8, 25)
        fa, fb = paired_frames(a, a + 0.1 + rng.uniform(-0.1, 0.1, 25))
        row = compare(fa, fb, on="id", seed=trial).table.row(0, named=True)
        paired += row["ci_low"] <= 0.1 <= row["ci_high"]
        # A shift of 1.7 standard deviations of d over 25 pairs (t about 8.7): always found.
        assert row["better"] == "b" and row["p_value"] < 0.001
        fb = pl.DataFrame({"faithfulness": rng.beta(2, 5, 40) + 0.1})
        row = compare(fa, fb, seed=trial).table.row(0, named=True)
        unpaired += row["ci_low"] <= 2 / 7 + 0.1 - 0.4 <= row["ci_high"]
    lo, hi = binomial_range(TRIALS, 0.95)
    assert lo <= paired <= hi and lo <= unpaired <= hi, (paired, unpaired, (lo, hi))


@pytest.mark.parametrize(
    ("diff", "low", "high", "p", "direction", "better"),
    [
        (0.1, 0.02, 0.18, 0.01, "higher", "b"),  # both agree: b is better
        (-0.1, -0.18, -0.02, 0.01, "higher", "a"),
        (-0.1, -0.18, -0.02, 0.01, "lower", "b"),  # lower is better: a lower b wins
        (0.1, -0.01, 0.21, 0.01, "higher", None),  # p small, the interval holds 0
        (0.1, 0.0, 0.2, 0.01, "higher", None),  # 0 on the interval's edge: held
        (0.1, 0.02, 0.18, 0.05, "higher", None),  # the interval clear, p not below 1 - level
        (0.1, 0.02, 0.18, 0.2, "higher", None),
        (0.1, None, None, 0.01, "higher", None),  # no interval (one pair)
        (0.1, 0.02, 0.18, None, "higher", None),  # no p-value
    ],
)
def test_better_needs_the_interval_to_exclude_0_and_p_below_1_minus_level(
    diff, low, high, p, direction, better
) -> None:
    assert better_side(diff, low, high, p, 0.95, direction) == better


def test_the_paired_design_finds_what_the_unpaired_one_misses() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 0.9, 40)
    fa, fb = paired_frames(a, a + 0.05 + rng.normal(0, 0.02, 40))
    paired = compare(fa, fb, on="id").table.row(0, named=True)
    unpaired = compare(fa, fb).table.row(0, named=True)
    assert paired["better"] == "b" and paired["p_value"] < 0.001 and paired["wins"] >= 38
    assert unpaired["better"] is None and unpaired["p_value"] > 0.05
    assert paired["diff"] == pytest.approx(unpaired["diff"])


def test_small_samples_are_enumerated_exactly_and_seeds_reproduce() -> None:
    a = np.array([0.2, 0.4, 0.5, 0.1, 0.3])
    fa, fb = paired_frames(a, a + 0.2)
    row = compare(fa, fb, on="id").table.row(0, named=True)
    # All five differences positive: 2 of the 2**5 sign vectors are as extreme.
    assert row["test"] == "sign-flip exact" and row["p_value"] == pytest.approx(2 / 32)
    assert row["better"] is None  # p = 0.0625: not significant, whatever the interval says
    n = EXACT_MAX_N + 30
    rng = np.random.default_rng(5)
    fa, fb = paired_frames(rng.uniform(0, 1, n), rng.uniform(0, 1, n))
    one, two = (compare(fa, fb, on="id", seed=4).table for _ in range(2))
    assert one.equals(two) and one["test"][0] == "sign-flip"
    other = compare(fa, fb, on="id", seed=5).table
    assert other["p_value"][0] != one["p_value"][0]
    assert one["p_value"][0] >= 1 / (PERMUTATIONS + 1)
    # A clear effect: no random sign vector reaches it, and p is 1 / (PERMUTATIONS + 1), not 0.
    a = rng.uniform(0, 0.5, n)
    row = compare(*paired_frames(a, a + rng.uniform(0.2, 0.4, n)), on="id").table.row(0, named=True)
    assert row["test"] == "sign-flip" and row["p_value"] == 1 / (PERMUTATIONS + 1)


def test_verdict_fractions_and_large_logs_use_the_fast_paths() -> None:
    """Scores that take few values (verdict fractions) flip by binomial counts at any n; many
    distinct values past the bootstrap's size use t. Both agree with the direct tests."""
    rng = np.random.default_rng(9)
    n = 20_000
    a = rng.integers(0, 5, n) / 4
    b = np.clip(a + rng.choice([-0.25, 0, 0.25], n, p=[0.3, 0.38, 0.32]), 0, 1)
    row = compare(*paired_frames(a, b), on="id").table.row(0, named=True)
    assert row["test"] == "sign-flip" and row["method"] == "t"
    cont_a, cont_b = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    row = compare(*paired_frames(cont_a, cont_b), on="id").table.row(0, named=True)
    assert row["test"] == "paired t" and 0 < row["p_value"] <= 1
    row = compare(*paired_frames(cont_a, cont_b + 0.0)).table.row(0, named=True)
    assert row["test"] == "Welch t" and row["method"] == "welch-t"


def test_direction_is_respected_for_a_lower_is_better_metric() -> None:
    """hallucination: a lower b is a win and b is better."""
    rng = np.random.default_rng(2)
    a = rng.uniform(0.3, 0.9, 40)
    fa, fb = paired_frames(a, a - 0.2, metric="hallucination")
    row = compare(fa, fb, on="id").table.row(0, named=True)
    assert row["direction"] == "lower" and row["diff"] == pytest.approx(-0.2)
    assert (row["wins"], row["losses"]) == (40, 0) and row["better"] == "b"
    fa, fb = paired_frames(a, a - 0.2, metric="faithfulness")
    row = compare(fa, fb, on="id").table.row(0, named=True)
    assert (row["wins"], row["losses"]) == (0, 40) and row["better"] == "a"


def test_unknown_direction_is_said(tmp_path) -> None:
    fa, fb = paired_frames(np.array([0.1, 0.2, 0.3]), np.array([0.2, 0.2, 0.1]), metric="mine")
    found = compare(fa, fb, on="id", metrics=["mine"])
    assert found.table["direction"][0] is None
    assert any("direction unknown for ['mine']" in w for w in found.warnings)
    assert found.table.select("wins", "ties", "losses").row(0) == (1, 1, 1)


# ------------------------------------------------------------------ rows never dropped silently


def test_unmatched_and_failed_rows_are_counted_and_listed() -> None:
    a = pl.DataFrame(
        {"id": [1, 2, 3, 4, 5], "grp": ["x", "x", "y", "y", "x"], "faithfulness": [0.5] * 5}
    )
    b = pl.DataFrame(
        {
            "id": [7, 5, 4, 3, 2, 6],
            "grp": ["y", "x", "y", "y", "x", "x"],
            "faithfulness": [0.1, None, 0.9, 0.8, float("nan"), 0.2],
        },
        strict=False,
    )
    found = compare(a, b, on="id", by="grp")
    table = found.table.select("grp", "matched", "only_a", "only_b", "failed_b", "n")
    assert table.rows() == [("x", 2, 1, 1, 2, 0), ("y", 2, 0, 1, 0, 2)]
    assert found.unmatched.rows() == [(1, "x", "a"), (7, "y", "b"), (6, "x", "b")]
    assert any("1 keys only in a and 2 only in b" in w for w in found.warnings)
    assert any(
        "faithfulness: 0 matched rows have no score in a and 2 in b" in w for w in found.warnings
    )
    assert "4 keys matched, 1 only in a, 2 only in b" in str(found)


def test_duplicate_and_null_keys_are_refused_with_the_fix() -> None:
    a = pl.DataFrame({"id": [1, 2, 2, 3, 3, 3], "faithfulness": [0.5] * 6})
    b = pl.DataFrame({"id": [1, 2, 3], "faithfulness": [0.5] * 3})
    with pytest.raises(
        InputError,
        match=r"a \(the frame\) has 2 rows with key \{'id': 2\} "
        r"\(2 keys repeated in all\).*one row per key.*on=\['id', 'run'\]",
    ):
        compare(a, b, on="id")
    with pytest.raises(InputError, match=r"b \(the frame\) has 1 rows with a null"):
        compare(
            b,
            b.with_columns(pl.lit(None, pl.Int64).alias("id").head(1).append(b["id"][1:])),
            on="id",
        )
    with pytest.raises(InputError, match=r"'id' is Int64 in a .* but String in b"):
        compare(b, b.with_columns(pl.col("id").cast(pl.String)), on="id")


def test_bad_columns_are_config_errors_naming_the_column_and_the_file(tmp_path) -> None:
    a = pl.DataFrame({"id": [1, 2], "faithfulness": [0.5, 0.6]})
    path = tmp_path / "b.parquet"
    a.drop("id").write_parquet(path)
    with pytest.raises(ConfigError, match=r"on= names 'id', which b \('.*b\.parquet'\) lacks"):
        compare(a, path, on="id")
    with pytest.raises(ConfigError, match=r"metrics= names 'nope', which a \(the frame\)"):
        compare(a, a, on="id", metrics=["nope"])
    with pytest.raises(ConfigError, match="by= names 'grp'"):
        compare(a, a, by="grp")


def test_unpaired_comparison_warns_that_pairing_is_stronger() -> None:
    rng = np.random.default_rng(4)
    a = pl.DataFrame({"faithfulness": rng.uniform(0, 1, 30)})
    b = pl.DataFrame({"faithfulness": rng.uniform(0, 1, 45)})
    found = compare(a, b)
    assert not found.paired and "a paired design (on=" in found.warnings[0]
    row = found.table.row(0, named=True)
    assert (row["n_a"], row["n_b"], row["n"]) == (30, 45, 75)
    assert row["wins"] is None and row["matched"] is None and found.changed == {}
    assert "30/45" in str(found) and "unpaired" in str(found)


def test_displays_in_jupyter_as_a_table_with_warnings() -> None:
    a = np.linspace(0.1, 0.6, 30)
    found = compare(*paired_frames(a, a + 0.3), on="id")
    page = found._repr_html_()
    assert page.count("<tr>") == 2 and "✅ b better" in page and "<table>" in page
    unpaired = compare(*paired_frames(a, a + 0.3))._repr_html_()
    assert "<li>unpaired (two-sample) comparison" in unpaired


# ------------------------------------------------------------------ the command line


def write_runs(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    a = rng.uniform(0.4, 0.9, 30)
    detail = pl.Struct({"error": pl.String})
    fa = pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(30)],
            "faithfulness": a,
            "faithfulness_detail": [{"error": None}] * 30,
        },
        schema_overrides={"faithfulness_detail": detail},
    )
    fb = fa.with_columns(pl.col("faithfulness") - 0.3).filter(pl.col("id") != "q0")
    fa.write_parquet(tmp_path / "a.parquet")
    fb.write_parquet(tmp_path / "b.parquet")
    return tmp_path / "a.parquet", tmp_path / "b.parquet"


def test_cli_prints_the_table_warnings_and_changed_rows(main, tmp_path, capsys) -> None:
    a, b = write_runs(tmp_path)
    assert main(["compare", str(a), str(b), "--on", "id"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"faithfulness\s+29\s+\S+\s+\S+\s+-0\.300", out), out
    assert "❌ b worse" in out and "1 only in a" in out and "only in a: id='q0'" in out
    assert "rows that changed most" in out and "has no ragframe metadata" in out


def test_cli_json_and_csv(main, tmp_path, capsys) -> None:
    a, b = write_runs(tmp_path)
    assert main(["compare", str(a), str(b), "--on", "id", "--json", "--level", "0.9"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["paired"] and data["on"] == ["id"] and data["level"] == 0.9
    assert data["table"][0]["better"] == "a" and data["table"][0]["n"] == 29
    assert data["unmatched"] == [{"id": "q0", "side": "a"}]
    assert len(data["changed"]["faithfulness"]) == 10
    assert main(["compare", str(a), str(b), "--csv"]) == 0
    captured = capsys.readouterr()
    table = pl.read_csv(captured.out.encode())
    assert table["metric"].to_list() == ["faithfulness"] and table["n_b"][0] == 29
    assert "a paired design" in captured.err


def test_cli_bad_column_exits_2_naming_it(main, tmp_path, capsys) -> None:
    a, b = write_runs(tmp_path)
    assert main(["compare", str(a), str(b), "--on", "ident"]) == 2
    err = capsys.readouterr().err
    assert "on= names 'ident'" in err and "a.parquet" in err


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(2.228, 10, 0.05), (12.706, 1, 0.05), (2.750, 30, 0.01), (1.96, 10**5, 0.05)],
)
def test_t_p_values_past_the_permutation_size_match_the_tables(t: float, df: int, p: float) -> None:
    from ragframe.decide.compare._stats import t_p as _t_p

    assert _t_p(t, df) == pytest.approx(p, rel=5e-3)
