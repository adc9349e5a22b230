"""The unpaired design: each side's scores per group, compared as two independent samples."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ragframe.decide.compare._cells import (
    cell_seed,
    cell_values,
    comparison_table,
    scalar_rows,
    unpaired_cell,
)
from ragframe.decide.compare._sides import Side
from ragframe.errors import InputError


def compare_unpaired(
    a: Side,
    b: Side,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
) -> pl.DataFrame:
    """The two-sample table: each side's scores per group, compared."""
    per_side = []
    for side, tag in ((a, "a"), (b, "b")):
        cell_groups = groups or ["\0all"]
        lazy = side.lazy.with_columns(pl.lit(True).alias("\0all")).select(
            *cell_groups, *(pl.col(m).cast(pl.Float64).fill_nan(None) for m in names)
        )
        aggs = [
            expr
            for m in names
            for expr in (
                pl.col(m).drop_nulls().alias(f"{m}\0x{tag}"),
                pl.col(m).null_count().alias(f"{m}\0failed_{tag}"),
            )
        ]
        try:
            per_side.append(lazy.group_by(cell_groups).agg(aggs).collect())
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"cannot read {side.where}: {exc}") from exc
    cell_groups = groups or ["\0all"]
    cells = (
        per_side[0]
        .join(per_side[1], on=cell_groups, how="full", coalesce=True, nulls_equal=True)
        .sort(cell_groups, nulls_last=True)
    )
    rows = []
    for i, cell in enumerate(scalar_rows(cells)):
        key = [cell[g] for g in groups]
        for m in names:
            xa, xb = cell_values(cells, f"{m}\0xa", i), cell_values(cells, f"{m}\0xb", i)
            figures = unpaired_cell(xa, xb, directions[m], level, cell_seed(seed, m, key))
            counts = {
                "failed_a": cell[f"{m}\0failed_a"] or 0,
                "failed_b": cell[f"{m}\0failed_b"] or 0,
            }
            rows.append({**dict(zip(groups, key, strict=True)), "metric": m, **figures, **counts})
    return comparison_table(rows, cells, groups, names, directions, level)
