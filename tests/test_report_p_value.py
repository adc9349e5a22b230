"""The report's comparison table prints p as `ragframe compare` does: three decimals, "<0.001"
below (the sign-flip test's floor, 1 / 10,001, is a resolution, not a measured 1e-04)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from test_report import cells, section

from ragframe.decide.compare import compare, format_p
from ragframe.report import report


def test_the_report_prints_p_as_the_compare_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(0.3, 0.7, 40)
    ids = [f"q{i}" for i in range(40)]
    base = pl.DataFrame({"id": ids, "faithfulness": a, "context_recall": a})
    cand = pl.DataFrame(
        {
            "id": ids,
            "faithfulness": np.clip(a - 0.2 + rng.normal(0, 0.02, 40), 0, 1),  # p at the floor
            "context_recall": np.clip(a + rng.normal(0, 0.2, 40), 0, 1),  # p well above it
        }
    )
    base.write_parquet(tmp_path / "a.parquet")
    cand.write_parquet(tmp_path / "b.parquet")
    page = report(tmp_path / "b.parquet", against=tmp_path / "a.parquet", on="id")
    table = cells(section(page, "comparison"))
    header = next(r for r in table if r and r[0] == "metric")
    shown = {r[0]: dict(zip(header, r, strict=True)) for r in table[table.index(header) + 1 :]}
    expected = compare(tmp_path / "a.parquet", tmp_path / "b.parquet", on="id").table
    ps = dict(zip(expected["metric"], expected["p_value"], strict=True))
    assert ps["faithfulness"] < 0.001 < ps["context_recall"]
    assert shown["faithfulness"]["p_value"] == "<0.001"
    assert shown["context_recall"]["p_value"] == f"{ps['context_recall']:.3f}"
    assert [format_p(p) for p in (None, 0.0625, 0.0004999, 0.0005, 1.0)] == [
        "-",
        "0.062",
        "<0.001",
        "0.001",
        "1.000",
    ]
