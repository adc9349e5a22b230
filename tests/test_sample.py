"""A sample is uniform, reproducible for a seed whatever the log's format or chunking, keeps
each row's position in the log, and reads no more of a Parquet file than its rows need."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from ragframe.errors import ConfigError, InputError
from ragframe.inputs.sample import INDEX_COLUMN, choose_positions, draw_sample
from ragframe.stats import mean_interval

ROWS = 1000


def _log(rows: int = ROWS, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "question": [f"question {i}" for i in range(rows)],
            "contexts": [[f"context {i}", "shared"] for i in range(rows)],
            "score": rng.beta(2, 5, rows),
        }
    )


def _write_all(frame: pl.DataFrame, folder: Path) -> dict[str, Path]:
    """The same log as Parquet (several row groups), JSON Lines and CSV (lists as JSON)."""
    paths = {f: folder / f"log.{f}" for f in ("parquet", "jsonl", "csv")}
    frame.write_parquet(paths["parquet"], row_group_size=128)
    frame.write_ndjson(paths["jsonl"])
    frame.with_columns(
        pl.col("contexts").map_elements(lambda c: json.dumps(list(c)), return_dtype=pl.String)
    ).write_csv(paths["csv"])
    return paths


def test_same_seed_same_rows_in_every_format_and_chunk_size(tmp_path: Path) -> None:
    """The rows depend on (seed, row count, n) alone: a frame, a LazyFrame, and the log as
    Parquet, JSON Lines or CSV, read in chunks of 7 or 10,000 rows, give the same rows."""
    log = _log()
    expected = draw_sample(log, 25, seed=9)
    assert expected.frame.columns == [INDEX_COLUMN, *log.columns]
    assert expected.frame.schema[INDEX_COLUMN] == pl.UInt64
    positions = expected.frame[INDEX_COLUMN].to_list()
    assert positions == sorted(positions) and len(set(positions)) == 25
    # The index is the row's position: joining back to the log gives the sampled rows.
    joined = log.with_row_index(INDEX_COLUMN).join(
        expected.frame.select(INDEX_COLUMN), on=INDEX_COLUMN
    )
    assert joined.sort(INDEX_COLUMN).drop(INDEX_COLUMN).equals(expected.frame.drop(INDEX_COLUMN))
    assert draw_sample(log.lazy(), 25, seed=9).frame.equals(expected.frame)
    pandas = log.drop("contexts").to_pandas()
    assert draw_sample(pandas, 25, seed=9).frame.equals(expected.frame.drop("contexts"))
    for fmt, path in _write_all(log, tmp_path).items():
        for chunk_rows in (7, 10_000):
            got = draw_sample(path, 25, seed=9, chunk_rows=chunk_rows)
            assert got.rows_total == ROWS, fmt
            assert got.frame[INDEX_COLUMN].to_list() == positions, (fmt, chunk_rows)
            assert got.frame["question"].equals(expected.frame["question"])
            assert got.frame.schema["contexts"] == pl.List(pl.String)
            assert got.frame["contexts"].to_list() == expected.frame["contexts"].to_list()
            assert draw_sample(path, 25, seed=9, chunk_rows=chunk_rows).frame.equals(got.frame)
    assert draw_sample(pl.scan_parquet(tmp_path / "log.parquet"), 25, seed=9).frame.equals(
        expected.frame
    )


def test_different_seeds_give_different_rows() -> None:
    log = _log()
    samples = [tuple(draw_sample(log, 25, seed=s).frame[INDEX_COLUMN]) for s in range(20)]
    assert len(set(samples)) == 20
    # Nearby seeds are unrelated: two samples of 25 of 1,000 share about 0.6 rows.
    overlaps = [len(set(a) & set(b)) for a, b in itertools.pairwise(samples)]
    assert np.mean(overlaps) < 3


def test_every_row_is_equally_likely() -> None:
    """Over 4,000 seeds, each of 40 rows is in a sample of 10 with frequency 10/40 (standard
    error 0.007): within 0.04 for every row. A biased sampler (the first n, or a stride) puts
    some rows at 0 or 1. Pairs are uniform too: each pair's frequency is near n(n-1)/(N(N-1))."""
    total, n, seeds = 40, 10, 4000
    hits = np.zeros(total)
    pairs = np.zeros((total, total))
    for seed in range(seeds):
        chosen = choose_positions(total, n, seed)
        hits[chosen] += 1
        pairs[np.ix_(chosen, chosen)] += 1
    freq = hits / seeds
    assert np.abs(freq - n / total).max() < 0.04, freq
    off_diagonal = pairs[~np.eye(total, dtype=bool)] / seeds
    expected_pair = n * (n - 1) / (total * (total - 1))
    assert abs(off_diagonal.mean() - expected_pair) < 0.002
    assert np.abs(off_diagonal - expected_pair).max() < 0.035


def test_parquet_reads_only_the_row_groups_holding_sampled_rows(tmp_path: Path) -> None:
    """A row group whose bytes are destroyed cannot be decoded (reading the whole file fails),
    yet a sample whose rows lie elsewhere is drawn from that file: the group was never read."""
    log = _log()
    path = tmp_path / "log.parquet"
    log.write_parquet(path, row_group_size=100)
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups == 10
    seed = next(s for s in range(1000) if not ((choose_positions(ROWS, 5, s) // 100) == 4).any())
    group = metadata.row_group(4)
    data = bytearray(path.read_bytes())
    for c in range(group.num_columns):
        column = group.column(c)
        start = column.dictionary_page_offset or column.data_page_offset
        data[start : start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(bytes(data))
    with pytest.raises(InputError, match="cannot read"):
        draw_sample(broken, ROWS - 1, seed=seed)  # needs every group
    got = draw_sample(broken, 5, seed=seed)
    assert got.frame.equals(draw_sample(log, 5, seed=seed).frame)
    assert not ((got.frame[INDEX_COLUMN].to_numpy() // 100) == 4).any()


def test_sample_mean_lies_in_its_interval_of_the_log_mean_in_90_of_100_trials(
    tmp_path: Path,
) -> None:
    """The issue's test: a 500-row sample of a 20,000-row log (Parquet), 100 seeds; the 95 %
    interval from the sample covers the whole log's mean in at least 90 of them."""
    log = _log(20_000, seed=1)
    path = tmp_path / "big.parquet"
    log.write_parquet(path, row_group_size=2000)
    truth = log["score"].mean()
    covered = 0
    for seed in range(100):
        sample = draw_sample(path, 500, seed=seed, select=["score"])
        interval = mean_interval(sample.frame["score"], seed=seed)
        covered += interval.low <= truth <= interval.high
    assert covered >= 90, covered


def test_describe_and_a_log_smaller_than_n(tmp_path: Path) -> None:
    log = _log(30)
    small = draw_sample(log, 1000, seed=2)
    assert small.frame[INDEX_COLUMN].to_list() == list(range(30))
    assert small.frame.drop(INDEX_COLUMN).equals(log)
    assert small.describe() == {
        "rows": 30,
        "of": 30,
        "seed": 2,
        "index_column": "row_index",
        "requested": 1000,
        "all_rows": True,
    }
    part = draw_sample(log, 10, seed=2).describe()
    assert (part["rows"], part["of"], part["all_rows"]) == (10, 30, False)
    one_row = tmp_path / "one.jsonl"
    one_row.write_text('{"question": "q", "score": 0.5}\n')
    one = draw_sample(one_row, 3)
    assert one.rows_total == 1 and one.frame[INDEX_COLUMN].to_list() == [0]
    no_rows = tmp_path / "none.parquet"
    log.head(0).write_parquet(no_rows)
    none = draw_sample(no_rows, 3)
    assert none.frame.columns == [INDEX_COLUMN, *log.columns] and none.frame.height == 0
    assert none.describe()["of"] == 0


def test_select_keeps_only_the_named_columns(tmp_path: Path) -> None:
    path = _write_all(_log(), tmp_path)["parquet"]
    got = draw_sample(path, 5, seed=1, select=["score"])
    assert got.frame.columns == [INDEX_COLUMN, "score"]
    with pytest.raises(InputError, match=r"select= names \['nope'\]"):
        draw_sample(path, 5, select=["nope"])


@pytest.mark.parametrize("n", [0, -3, 2.5, True, "10"])
def test_a_sample_size_below_one_is_refused(n: object) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        draw_sample(_log(), n)  # type: ignore[arg-type]


def test_a_bad_seed_is_refused() -> None:
    with pytest.raises(ConfigError, match="seed"):
        draw_sample(_log(), 5, seed=-1)


def test_a_log_that_already_has_row_index_is_refused_with_the_fix(tmp_path: Path) -> None:
    log = _log().with_row_index(INDEX_COLUMN)
    with pytest.raises(
        InputError, match=r"already has a column 'row_index'.*rename.*index_column="
    ):
        draw_sample(log, 5)
    path = tmp_path / "sampled.parquet"
    log.write_parquet(path)
    with pytest.raises(InputError, match="already has a column 'row_index'"):
        draw_sample(path, 5)
    other = draw_sample(path, 5, seed=3, index_column="position")
    assert other.frame.columns[:2] == ["position", INDEX_COLUMN]
    assert (
        other.frame["position"].cast(pl.UInt32).equals(other.frame[INDEX_COLUMN], check_names=False)
    )
    assert other.describe()["index_column"] == "position"
