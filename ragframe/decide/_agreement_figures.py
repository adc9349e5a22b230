"""One agreement figure (`Figure`), one group's data (`Data`), and the stratified bootstrap
that gives the figures their intervals (the method: `ragframe.decide.agreement`'s docstring)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import polars as pl

from ragframe.stats import t_quantile

#: Elements drawn per block of resamples (32 MiB of float64): bounds the bootstrap's memory.
BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Figure:
    """One figure of the table: its value, interval, n, method and a note on how it was got."""

    figure: str
    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    method: str = "none"
    note: str | None = None


@dataclass
class Data:
    """One group's complete rows (scores turned to higher-is-better) and its random stream."""

    frame: pl.DataFrame
    sign: float
    level: float
    rng: np.random.Generator
    resamples: int
    seed: int

    def column(self, name: str) -> np.ndarray:
        return self.frame.get_column(name).to_numpy().astype(np.float64)


def resampled(
    statistic: Callable[..., np.ndarray],
    strata: Sequence[np.ndarray],
    data: Data,
    width: int | None = None,
) -> np.ndarray:
    """`statistic` over `data.resamples` resamples: each stratum's counts (of its levels,
    cells or outcomes) redrawn as multinomial counts with the same total. Returns (figures,
    resamples). Drawn in blocks of at most BLOCK_ELEMENTS elements (`width` per resample)."""
    width = width or sum(int(c.size) for c in strata)
    per_block = max(1, BLOCK_ELEMENTS // max(1, width))
    blocks = []
    for start in range(0, data.resamples, per_block):
        k = min(data.resamples, start + per_block) - start
        drawn = [
            data.rng.multinomial(int(c.sum()), c / c.sum(), size=k).astype(np.float64)
            for c in strata
        ]
        with np.errstate(divide="ignore", invalid="ignore"):
            blocks.append(np.atleast_2d(statistic(*drawn)))
    return np.concatenate(blocks, axis=1)


def _interval(
    boot: np.ndarray,
    value: float,
    n: int,
    level: float,
    bounds: tuple[float, float],
    smallest: int,
) -> tuple[float | None, float | None, str]:
    """The expanded percentile interval of `boot` (module docstring), clipped to `bounds` and
    holding `value`, and its method. A bootstrap that cannot move a figure sitting at a bound
    (a perfect separation) gets the exact binomial bound for `smallest` rows (the smaller
    label class) all falling right, [hi - (hi - lo) (1 - (alpha / 2) ** (1 / smallest)), hi]:
    conservative, where [1, 1] would claim a certainty no finite sample gives."""
    finite = boot[np.isfinite(boot)]
    if n < 2 or finite.size == 0 or not math.isfinite(value):
        return None, None, "none"
    lo_b, hi_b = bounds
    if value in bounds and np.all(finite == value) and smallest >= 1:
        reach = (hi_b - lo_b) * (1 - ((1 - level) / 2) ** (1 / smallest))
        if value == hi_b:
            return hi_b - reach, hi_b, "exact-bound"
        return lo_b, lo_b + reach, "exact-bound"
    widen = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - level) / 2, n - 1)
    tail = NormalDist().cdf(-widen)
    low, high = (float(q) for q in np.quantile(finite, [tail, 1 - tail]))
    low, high = min(low, value), max(high, value)
    return max(low, lo_b), min(high, hi_b), "bootstrap"


def boot_figures(
    names: Sequence[str],
    values: Sequence[float],
    boot: np.ndarray,
    sizes: tuple[int, int],
    data: Data,
    bounds: Sequence[tuple[float, float]],
    note: str | None = None,
) -> list[Figure]:
    """Figures with their intervals; `sizes`: (rows, rows of the smaller label class)."""
    n, smallest = sizes
    out = []
    for name, value, row, bound in zip(names, values, boot, bounds, strict=True):
        low, high, method = _interval(row, float(value), n, data.level, bound, smallest)
        out.append(Figure(name, float(value), low, high, n, method, note))
    return out
