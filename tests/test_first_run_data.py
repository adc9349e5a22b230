"""data/first_run.parquet, the README's first command: small enough for the embedded judge's
first run (its time is its prompt tokens, so its rows), real enough to show every metric."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import polars as pl
import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
SOURCE = DATA.parent.parent / "shared" / "data" / "expertqa_rag.parquet"


def _make_sample() -> object:
    spec = importlib.util.spec_from_file_location("make_sample", DATA / "make_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_sample", module)
    spec.loader.exec_module(module)
    return module


def test_first_run_rows_are_few_short_and_balanced() -> None:
    first = pl.read_parquet(DATA / "first_run.parquet")
    sample = pl.read_parquet(DATA / "sample.parquet")
    assert first.schema == sample.schema
    assert first.height == 10
    assert first["faithful"].value_counts().sort("faithful")["count"].to_list() == [5, 5]
    # Two passages or more, so that context precision has an order to judge.
    assert first["contexts"].list.len().min() >= 2
    chars = (
        first["contexts"].list.eval(pl.element().str.len_chars()).list.sum()
        + first["answer"].str.len_chars()
    )
    assert chars.max() <= 3000
    assert first["id"].is_unique().all()
    # Real ExpertQA rows with their labels, not a second copy of the sample's first rows.
    assert first["ground_truth"].null_count() == 0


@pytest.mark.skipif(not SOURCE.is_file(), reason="needs ../shared/data/expertqa_rag.parquet")
def test_make_sample_rebuilds_both_files_byte_for_byte(tmp_path: Path) -> None:
    module = _make_sample()
    module.main(["make_sample.py", str(SOURCE), str(tmp_path / "sample.parquet")])  # type: ignore[attr-defined]
    for name in ("sample.parquet", "first_run.parquet"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
