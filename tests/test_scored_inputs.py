"""What `summarize`, `check_gates` and `assert_scores` read (`load_scored`, the reader every
decision shares): a pandas frame as `evaluate` gives one back (its named index, the row id,
kept as a column), and a scored file at a URL read with `storage_options`, against moto's S3
server on 127.0.0.1 with no AWS_* environment (issue 28)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from s3_stand_in import Bucket, free_port, s3_bucket

import ragframe
from ragframe.decide.gates import assert_scores, check_gates
from ragframe.decide.summarize import load_scored, summarize
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import write_parquet

BUCKET = "ragframe-scored-inputs"


# ------------------------------------------------------------------------------ pandas


@pytest.fixture
def pandas_scored(sample: pl.DataFrame, judge: Any) -> pd.DataFrame:
    """`evaluate` on a pandas log indexed by its row id, as a notebook does it: pandas back,
    with the index (`id`) as it was and two teams to group by."""
    log = sample.to_pandas().set_index("id")
    log["team"] = np.resize(["a", "b"], len(log))
    scored = ragframe.evaluate(log, ["faithfulness"], judge=judge)
    assert isinstance(scored, pd.DataFrame) and scored.index.name == "id"
    return scored


def as_polars(scored: pd.DataFrame) -> pl.DataFrame:
    """What the reader must see: the index as the column it was."""
    return pl.from_pandas(scored.reset_index())


def test_summarize_reads_evaluates_pandas_frame_as_its_polars_frame(
    pandas_scored: pd.DataFrame,
) -> None:
    for by in (None, "team", "id"):  # the index, too, is a column to group by
        table = summarize(pandas_scored, by=by)
        assert table.equals(summarize(as_polars(pandas_scored), by=by)), by
    assert summarize(pandas_scored, by="id").height == len(pandas_scored)


def test_gates_read_a_pandas_frame_and_name_the_worst_rows_by_its_index(
    pandas_scored: pd.DataFrame,
) -> None:
    result = check_gates(pandas_scored, fail_under={"faithfulness": 1.0}, worst=3)
    expected = check_gates(as_polars(pandas_scored), fail_under={"faithfulness": 1.0})
    assert not result.passed and result.id_column == "id"
    assert result.table.drop("note").equals(expected.table.drop("note"))
    ids = result.worst.get_column("id").to_list()
    assert len(ids) == 3 and set(ids) <= set(pandas_scored.index)
    assert assert_scores(pandas_scored, faithfulness=0.0).passed
    with pytest.raises(AssertionError, match="faithfulness"):
        assert_scores(pandas_scored, faithfulness=1.0)


def test_a_pandas_runs_result_keeps_its_index_as_its_file_does(
    sample: pl.DataFrame, judge: Any, tmp_path: Path
) -> None:
    """`ragframe.run` on a pandas log indexed by id: the gates name the worst rows by that id,
    and summarize groups by it, as they do reading the run's written file."""
    log = sample.head(8).to_pandas().set_index("id")
    result = ragframe.run(log, ["faithfulness"], judge=judge)
    result.write_parquet(tmp_path / "run.parquet")
    for scored in (result, tmp_path / "run.parquet"):
        gates = check_gates(scored, fail_under={"faithfulness": 1.0}, worst=8)
        assert gates.id_column == "id" and gates.worst.height, scored
        assert set(gates.worst.get_column("id")) <= set(log.index)
        assert summarize(scored, by="id").height == 8
    drawn = ragframe.run(log, ["faithfulness"], judge=judge, sample=4, seed=1)
    ids = summarize(drawn, by="id").get_column("id").to_list()
    assert len(set(ids)) == 4 and set(ids) <= set(log.index)  # the sampled rows' own ids
    assert sorted(ids) == sorted(drawn.to_pandas().index)


def test_a_pandas_frame_that_cannot_be_read_is_one_line() -> None:
    mixed = pd.DataFrame({"faithfulness": [0.5, 0.7], "note": [1, "two"]})
    with pytest.raises(InputError) as caught:
        summarize(mixed, metrics=["faithfulness"])
    message = str(caught.value)
    assert message.startswith("cannot read scores from the pandas frame (") and "'two'" in message
    assert "\n" not in message, message
    with pytest.raises(InputError, match="cannot read scores from a Series"):
        summarize(mixed["faithfulness"])


# ------------------------------------------------------------------------------ a URL


@pytest.fixture(scope="module")
def store() -> Iterator[Bucket]:
    """moto's S3 server with an empty bucket."""
    with s3_bucket(BUCKET) as bucket:
        yield bucket


@pytest.fixture
def remote_scored(
    store: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Path, dict[str, str]]:
    """A scored file (metadata: a threshold and a direction) both local and in the bucket,
    with no AWS_* variable in the environment: only storage_options can reach the store."""
    import os

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    rng = np.random.default_rng(5)
    frame = pl.DataFrame(
        {
            "id": [f"q{i:02}" for i in range(30)],
            "team": np.resize(["a", "b"], 30),
            "faithfulness": rng.random(30),
        }
    ).with_columns(pl.struct(error=pl.lit(None, pl.String)).alias("faithfulness_detail"))
    meta = {"metrics": {"faithfulness": {"direction": "higher", "config": {"threshold": 0.6}}}}
    local = tmp_path / "scored.parquet"
    write_parquet(frame, local, meta)
    key = f"{tmp_path.name}/scored.parquet"
    store.client.put_object(Bucket=BUCKET, Key=key, Body=local.read_bytes())
    return f"s3://{BUCKET}/{key}", local, store.options


def test_summarize_and_gates_read_a_url_with_storage_options(
    remote_scored: tuple[str, Path, dict[str, str]],
) -> None:
    url, local, opts = remote_scored
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing from Polars reaches the user
        table = summarize(url, by="team", storage_options=opts)
        gates = check_gates(url, fail_under={"faithfulness": 0.9}, storage_options=opts)
    assert table.equals(summarize(local, by="team")) and "threshold" in table.columns
    expected = check_gates(local, fail_under={"faithfulness": 0.9})
    assert gates.table.equals(expected.table) and gates.worst.equals(expected.worst)
    assert repr(url) in gates.source
    assert assert_scores(url, faithfulness=0.1, storage_options=opts).passed
    lazy, meta, where = load_scored(url, storage_options=opts)
    assert meta["metrics"]["faithfulness"]["config"]["threshold"] == 0.6
    assert lazy.collect().equals(pl.read_parquet(local)) and where == repr(url)


def test_compare_reads_a_url_with_storage_options_and_a_pandas_index(
    remote_scored: tuple[str, Path, dict[str, str]], pandas_scored: pd.DataFrame
) -> None:
    """compare reads its sides as the other decisions do: a URL with its storage options, a
    pandas frame with its named index (the row id it pairs on) kept as a column."""
    url, local, opts = remote_scored
    remote = ragframe.compare(url, local, on="id", storage_options=opts)
    assert remote.table.equals(ragframe.compare(local, local, on="id").table)
    check = ragframe.check_regression(url, local, ["faithfulness"], on="id", storage_options=opts)
    assert check.passed
    paired = ragframe.compare(pandas_scored, pandas_scored, on="id")
    assert paired.table["n"].to_list() == [len(pandas_scored)]


def test_storage_options_are_for_a_path_and_a_bad_one_is_one_line(
    remote_scored: tuple[str, Path, dict[str, str]],
) -> None:
    url, local, opts = remote_scored
    frame = pl.read_parquet(local)
    for call in (
        lambda: summarize(frame, storage_options=opts),
        lambda: check_gates(frame.lazy(), fail_under={"faithfulness": 0.5}, storage_options=opts),
        lambda: assert_scores(frame.to_pandas(), faithfulness=0.5, storage_options=opts),
    ):
        with pytest.raises(ConfigError, match=r"storage_options applies to a path .* drop"):
            call()
    # a local path reads as it does without them (they are for a URL)
    assert summarize(local, storage_options=opts).equals(summarize(local))
    closed = {**opts, "aws_endpoint_url": f"http://127.0.0.1:{free_port()}", "max_retries": 0}
    missing = url.replace("scored.parquet", "missing.parquet")
    for call, says in (
        (lambda: summarize(url, storage_options=closed), "cannot reach the store"),
        (lambda: check_gates(missing, fail_under={"faithfulness": 0.5}, storage_options=opts),
         "does not exist"),
    ):  # fmt: skip
        with pytest.raises(InputError) as caught:
            call()
        message = str(caught.value)
        assert says in message and "\n" not in message, message
