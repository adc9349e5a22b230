"""One cell (a metric in a group): its figures from two score arrays, and the table of cells
with the warnings said once about it."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from ragframe.decide.compare._stats import label_permutation_p, sign_flip_p, two_sample_interval
from ragframe.stats import mean_interval

#: Two scores closer than this are a tie.
TIE = 1e-12

#: The types of `Comparison.table`'s columns, after the group columns.
SCHEMA: dict[str, Any] = {
    "metric": pl.String,
    "direction": pl.String,
    "n": pl.Int64,
    "n_a": pl.Int64,
    "n_b": pl.Int64,
    "mean_a": pl.Float64,
    "mean_b": pl.Float64,
    "diff": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "level": pl.Float64,
    "method": pl.String,
    "p_value": pl.Float64,
    "test": pl.String,
    "wins": pl.Int64,
    "ties": pl.Int64,
    "losses": pl.Int64,
    "better": pl.String,
    "matched": pl.Int64,
    "only_a": pl.Int64,
    "only_b": pl.Int64,
    "failed_a": pl.Int64,
    "failed_b": pl.Int64,
}
#: The columns of `Comparison.table`, after the group columns.
TABLE_COLUMNS = tuple(SCHEMA)


def paired_cell(
    xa: np.ndarray, xb: np.ndarray, direction: str | None, level: float, seed: int
) -> dict[str, Any]:
    """The figures of one metric in one group, from the paired scores."""
    n = int(xa.size)
    d = xb - xa
    bounded = n > 0 and min(xa.min(), xb.min()) >= 0 and max(xa.max(), xb.max()) <= 1
    interval = mean_interval(d, level, seed=seed, bounds=(-1.0, 1.0) if bounded else None)
    gain = d if direction != "lower" else -d
    p, test = sign_flip_p(d, np.random.default_rng([seed, 1]))
    return {
        "n": n,
        "n_a": n,
        "n_b": n,
        "mean_a": float(xa.mean()) if n else None,
        "mean_b": float(xb.mean()) if n else None,
        "diff": interval.mean,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "method": interval.method,
        "p_value": p,
        "test": test,
        "wins": int((gain > TIE).sum()),
        "ties": int((np.abs(gain) <= TIE).sum()),
        "losses": int((gain < -TIE).sum()),
        "better": better_side(interval.mean, interval.low, interval.high, p, level, direction),
    }


def unpaired_cell(
    xa: np.ndarray, xb: np.ndarray, direction: str | None, level: float, seed: int
) -> dict[str, Any]:
    """The figures of one metric in one group, from two independent samples."""
    na, nb = int(xa.size), int(xb.size)
    mean_a = float(xa.mean()) if na else None
    mean_b = float(xb.mean()) if nb else None
    diff = mean_b - mean_a if mean_a is not None and mean_b is not None else None
    low = high = p = None
    method = test = "none"
    if na >= 2 and nb >= 2 and diff is not None:
        rng = np.random.default_rng([seed, 2])
        bounded = min(xa.min(), xb.min()) >= 0 and max(xa.max(), xb.max()) <= 1
        low, high, method = two_sample_interval(
            xa, xb, level, rng, bounds=(0.0, 1.0) if bounded else None
        )
        if bounded:
            low, high = max(low, -1.0), min(high, 1.0)
        p, test = label_permutation_p(xa, xb, rng)
    return {
        "n": na + nb,
        "n_a": na,
        "n_b": nb,
        "mean_a": mean_a,
        "mean_b": mean_b,
        "diff": diff,
        "ci_low": low,
        "ci_high": high,
        "method": method,
        "p_value": p,
        "test": test,
        "better": better_side(diff, low, high, p, level, direction),
    }


def better_side(
    diff: float | None,
    low: float | None,
    high: float | None,
    p: float | None,
    level: float,
    direction: str | None,
) -> str | None:
    """ "b" or "a" when the interval excludes 0 and p < 1 - level; None otherwise. (1 - level
    rounded: 1 - 0.95 is 0.05000000000000004 in floats, which a p of 0.05 is below.)"""
    if diff is None or low is None or high is None or p is None or p >= round(1 - level, 12):
        return None
    if low <= 0 <= high:
        return None
    gain = diff if direction != "lower" else -diff
    return "b" if gain > 0 else "a"


def cells_table(
    cells: pl.DataFrame,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
    seed: int,
    figures_of: Callable[[np.ndarray, np.ndarray, str | None, float, int], dict[str, Any]],
    counts_of: Callable[[Mapping[str, Any], str], dict[str, Any]],
) -> pl.DataFrame:
    """`Comparison.table` from the cells (a row per group, each metric's two score lists in
    `{metric}\\0xa` / `\\0xb`): per metric, `figures_of` its scores and `counts_of` the row."""
    rows = []
    for i, cell in enumerate(_scalar_rows(cells)):
        key = [cell[g] for g in groups]
        for m in names:
            xa, xb = _cell_values(cells, f"{m}\0xa", i), _cell_values(cells, f"{m}\0xb", i)
            figures = figures_of(xa, xb, directions[m], level, _cell_seed(seed, m, key))
            group = dict(zip(groups, key, strict=True))
            rows.append({**group, "metric": m, **figures, **counts_of(cell, m)})
    return _comparison_table(rows, cells, groups, names, directions, level)


def _scalar_rows(cells: pl.DataFrame) -> Any:
    """The cells' rows as dicts, without their (long) lists of scores."""
    lists = [c for c, dtype in cells.schema.items() if isinstance(dtype, pl.List)]
    return cells.drop(lists).iter_rows(named=True)


def _cell_values(cells: pl.DataFrame, column: str, row: int) -> np.ndarray:
    """One cell's scores as a float64 array (empty where a side has no such group)."""
    found = cells.get_column(column)[row]
    if found is None:
        return np.empty(0)
    return np.asarray(found.to_numpy(), dtype=np.float64)


def _cell_seed(seed: int, metric: str, key: Sequence[Any]) -> int:
    """A seed for one cell, from the seed and the cell's identity (not its position)."""
    sequence = np.random.SeedSequence([seed, zlib.crc32(repr((metric, *key)).encode())])
    return int(sequence.generate_state(1)[0])


def _comparison_table(
    rows: list[dict[str, Any]],
    cells: pl.DataFrame,
    groups: list[str],
    names: list[str],
    directions: Mapping[str, str | None],
    level: float,
) -> pl.DataFrame:
    schema = {**{g: cells.schema[g] for g in groups}, **SCHEMA}
    filled = [
        {**{c: None for c in schema}, **row, "direction": directions[row["metric"]], "level": level}
        for row in rows
    ]
    return pl.DataFrame(filled, schema=schema).select(*groups, *TABLE_COLUMNS)


def left_out_warnings(table: pl.DataFrame, unmatched: pl.DataFrame, keys: list[str]) -> list[str]:
    """Rows the paired figures leave out, said once (the table counts them per cell)."""
    out = []
    if unmatched.height:
        sides = unmatched.get_column("side")
        out.append(
            f"{int((sides == 'a').sum())} keys only in a and {int((sides == 'b').sum())} only "
            f"in b ({', '.join(keys)}) are left out of the paired figures; "
            "Comparison.unmatched lists them"
        )
    return out + failed_warnings(table, paired=True)


def failed_warnings(table: pl.DataFrame, *, paired: bool) -> list[str]:
    totals = (
        table.group_by("metric", maintain_order=True)
        .agg(pl.col("failed_a").sum(), pl.col("failed_b").sum())
        .filter((pl.col("failed_a") > 0) | (pl.col("failed_b") > 0))
    )
    rows = "matched rows" if paired else "rows"
    return [
        f"{m}: {fa} {rows} have no score in a and {fb} in b (failed to score; see "
        f"{m}_detail.error); left out of the figures"
        for m, fa, fb in totals.iter_rows()
    ]
