"""The unpaired design: each side's scores per group, compared as two independent samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from ragframe.decide.compare._cells import cells_table, unpaired_cell
from ragframe.decide.compare._sides import Side
from ragframe.decide.summarize import checked_scores, not_a_score, score_values
from ragframe.errors import InputError


def compare_unpaired(
    a: Side,
    b: Side,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
    worst_failed: Mapping[str, float] | None = None,
) -> pl.DataFrame:
    """The two-sample table: each side's scores per group, compared. `worst_failed`: per
    metric, the score a row that failed to score counts as, on both sides (else it is left
    out): with no pairs, counting b's alone would weigh rows neither run could score (a missing
    input) against b only."""
    worst = worst_failed or {}
    per_side = []
    for side, tag in ((a, "a"), (b, "b")):
        cell_groups = groups or ["\0all"]
        exprs = [*groups, pl.lit(True).alias("\0all"), *(score_values(m) for m in names)]
        aggs = [
            expr
            for m in names
            for expr in (
                (pl.col(m).fill_null(worst[m]) if m in worst else pl.col(m).drop_nulls()).alias(
                    f"{m}\0x{tag}"
                ),
                pl.col(m).null_count().alias(f"{m}\0failed_{tag}"),
            )
        ]
        flags = [f"{m}\0bad" for m in names]
        query = (
            side.lazy.select(*exprs, *(not_a_score(m) for m in names))
            .group_by(cell_groups)
            .agg(*aggs, *(pl.col(f).any() for f in flags))
        )
        try:  # grouped as it is read: the rows never sit in memory at once
            cells = query.collect()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"cannot read {side.where}: {exc}") from exc
        if any(cells.get_column(f).any() for f in flags):
            # A score outside [0, 1]: read again only now, to name its row and value.
            checked_scores(side.lazy, [], names, side.where)
        per_side.append(cells.drop(flags))
    cell_groups = groups or ["\0all"]
    cells = (
        per_side[0]
        .join(per_side[1], on=cell_groups, how="full", coalesce=True, nulls_equal=True)
        .sort(cell_groups, nulls_last=True)
    )
    return cells_table(cells, groups, names, directions, level, seed, unpaired_cell, _counts)


def _counts(cell: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """An unpaired cell's rows that failed to score on each side (0 where a side lacks it)."""
    return {
        "failed_a": cell[f"{metric}\0failed_a"] or 0,
        "failed_b": cell[f"{metric}\0failed_b"] or 0,
    }
