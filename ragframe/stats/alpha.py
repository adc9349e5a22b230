"""Krippendorff's alpha: how much several judges (coders) agree beyond chance, with missing values.

Data: a units x coders matrix (rows are the things judged, columns the judges), NaN where a
coder gave no value. alpha = 1 - D_o / D_e: the disagreement observed within units over the
disagreement expected from all values pooled; 1 is perfect agreement, 0 agreement at chance,
below 0 systematic disagreement. Scales (the distance between two values c and k):

- "interval" (the default; judge scores in [0, 1]): (c - k)^2;
- "ordinal" (ratings on a few levels): (r_c - r_k)^2 with r the mid-rank of a value among
  all pairable values (Krippendorff's ordinal metric, written as midranks);
- "nominal" (labels as numeric codes): 0 when equal, 1 otherwise.

Only units with at least two values are pairable; the others are dropped (and counted).
Computed from per-unit sums, without the coincidence matrix: for coordinates x (the values,
or their midranks) and n_uc the count of value c in unit u (m_u values in all),
sum_ck o_ck (x_c - x_k)^2 = 2 sum_c n_c x_c^2 - 2 sum_u ((n_u . x)^2 - n_u . x^2) / (m_u - 1),
so the interval case is linear in per-unit statistics and the bootstrap is matrix products.
Checked against the `krippendorff` package to 1e-9 on random data with missing values.

Interval (`alpha_interval`): a bootstrap over units: units are resampled with replacement
(each resample a row of multinomial counts, drawn in blocks, no Python loop per resample),
the coders of a unit kept together, and alpha recomputed; the interval is the resamples'
percentiles. It answers "how much would alpha move with another draw of units from the same
population, judged by these coders"; it does not cover another choice of coders. A resample
whose values do not vary has no alpha and is left out (`undefined` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ragframe.errors import ConfigError, InputError

__all__ = ["SCALES", "Alpha", "alpha_interval", "krippendorff_alpha"]

Scale = Literal["interval", "ordinal", "nominal"]
SCALES = ("interval", "ordinal", "nominal")
RESAMPLES = 2000
#: Resample weights drawn at once (32 MiB of float64): bounds the bootstrap's memory.
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Alpha:
    """Krippendorff's alpha with its bootstrap interval. `units`: pairable units (two values
    or more), `values`: the values in them, `dropped`: units with fewer than two values;
    `alpha` is NaN when the values do not vary (alpha is undefined), `low` / `high` None when
    there is no interval; `undefined`: resamples without an alpha."""

    alpha: float
    low: float | None
    high: float | None
    level: float
    scale: str
    units: int
    values: int
    dropped: int
    resamples: int
    undefined: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _matrix(data: Any) -> np.ndarray:
    """The units x coders matrix as float64 (None and NaN: missing)."""
    if hasattr(data, "to_numpy") and not isinstance(data, np.ndarray):
        data = data.to_numpy()
    try:
        matrix = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            "Krippendorff's alpha needs numbers (units x coders, NaN or None for missing); "
            f"give nominal labels as numeric codes ({exc})"
        ) from None
    if matrix.ndim != 2:
        raise InputError(f"need a units x coders matrix, got an array of shape {matrix.shape}")
    if np.isinf(matrix).any():
        raise InputError("the matrix holds infinite values; use NaN for missing")
    return matrix


#: Distinct values up to which ordinal and nominal data are counted per unit (U x V counts).
MAX_LEVELS = 1000


def _unit_sums(matrix: np.ndarray) -> tuple[np.ndarray, int]:
    """Interval data: per pairable unit, (m_u, sum of values, sum of squares), the values
    centred on their mean (alpha does not move with a shift; the sums then do not cancel);
    and the number of units dropped for having fewer than two values."""
    present = ~np.isnan(matrix)
    pairable = present.sum(axis=1) >= 2
    kept = matrix[pairable]
    kept = kept - np.nanmean(kept) if kept.size else kept
    filled = np.where(np.isnan(kept), 0.0, kept)
    sums = np.stack([(~np.isnan(kept)).sum(axis=1), filled.sum(axis=1), (filled**2).sum(axis=1)])
    return sums.T.astype(np.float64), int((~pairable).sum())


def _interval_alphas(weights: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Interval alpha for each row of unit weights, from the per-unit sums (linear in them)."""
    m, s1, s2 = sums.T
    n, t1, t2 = (weights @ sums).T
    xox = weights @ ((s1**2 - s2) / (m - 1))
    observed = 2.0 * t2 - 2.0 * xox
    expected = 2.0 * n * t2 - 2.0 * t1**2
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where(expected > 1e-12 * 2.0 * n * t2, alpha, np.nan)


def _counts(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(per-unit value counts of the pairable units, U x V; the distinct values, V; units
    dropped for having fewer than two values)."""
    present = ~np.isnan(matrix)
    pairable = present.sum(axis=1) >= 2
    kept = matrix[pairable]
    values, codes = np.unique(kept[~np.isnan(kept)], return_inverse=True)
    if values.size > MAX_LEVELS:
        raise InputError(
            f"{values.size} distinct values: too many for an ordinal or nominal scale (at most "
            f"{MAX_LEVELS}); scores on a continuous scale want scale='interval'"
        )
    counts = np.zeros((kept.shape[0], values.size))
    rows = np.nonzero(~np.isnan(kept))[0]
    np.add.at(counts, (rows, codes), 1.0)
    return counts, values, int((~pairable).sum())


def _level_alphas(weights: np.ndarray, counts: np.ndarray, scale: str) -> np.ndarray:
    """Ordinal or nominal alpha for each row of unit weights (B x U) from the per-unit value
    counts (U x V). NaN where the values do not vary."""
    m = counts.sum(axis=1)  # values per unit
    nc = weights @ counts  # B x V: how often each value occurs, over all pairable units
    n = nc.sum(axis=1)
    if scale == "nominal":
        within = ((counts**2 - counts).sum(axis=1)) / (m - 1)  # sum_c o_cc of each unit
        observed = n - weights @ within
        expected = n**2 - (nc**2).sum(axis=1)
        reference = n**2
    else:  # ordinal: each value's midrank among the pairable values
        x = np.cumsum(nc, axis=1) - nc / 2.0
        # Centred (alpha does not move with a shift), so the sums below do not cancel.
        x = x - ((nc * x).sum(axis=1) / n)[:, None]
        sum_x2 = (nc * x**2).sum(axis=1)
        p = x @ counts.T  # B x U: sum of the unit's coordinates
        q = (x**2) @ counts.T  # B x U: sum of their squares
        xox = (weights * (p**2 - q) / (m - 1)).sum(axis=1)
        observed = 2.0 * sum_x2 - 2.0 * xox
        expected = 2.0 * n * sum_x2 - 2.0 * (nc * x).sum(axis=1) ** 2
        reference = 2.0 * n * sum_x2
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where(expected > 1e-12 * reference, alpha, np.nan)


def _check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")


def krippendorff_alpha(data: Any, scale: Scale = "interval") -> float:
    """Krippendorff's alpha of a units x coders matrix (NaN: missing); NaN when the values
    do not vary (alpha is undefined). `scale`: "interval", "ordinal" or "nominal".

    >>> krippendorff_alpha([[1, 1], [2, 2], [3, float("nan")], [4, 4]])
    1.0
    """
    _check_scale(scale)
    stats, _ = _prepare(_matrix(data), scale)
    if stats.shape[0] == 0:
        return float("nan")
    return float(_alphas(np.ones((1, stats.shape[0])), stats, scale)[0])


def _prepare(matrix: np.ndarray, scale: str) -> tuple[np.ndarray, int]:
    """Per pairable unit: the sums (interval) or the value counts (ordinal, nominal); and
    the units dropped."""
    if scale == "interval":
        return _unit_sums(matrix)
    counts, _, dropped = _counts(matrix)
    return counts, dropped


def _alphas(weights: np.ndarray, stats: np.ndarray, scale: str) -> np.ndarray:
    """alpha for each row of unit weights (B x U): the data's with weights of ones, a
    bootstrap resample's with multinomial counts."""
    if scale == "interval":
        return _interval_alphas(weights, stats)
    return _level_alphas(weights, stats, scale)


def alpha_interval(
    data: Any,
    scale: Scale = "interval",
    *,
    level: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Alpha:
    """Krippendorff's alpha with a bootstrap interval over units (module docstring): the
    `level` percentile interval of `resamples` resamples of the pairable units, seeded."""
    _check_scale(scale)
    if not 0.0 < level < 1.0:
        raise ConfigError(f"level must lie strictly between 0 and 1, got {level}")
    if resamples < 1:
        raise ConfigError(f"resamples must be at least 1, got {resamples}")
    stats, dropped = _prepare(_matrix(data), scale)
    units = stats.shape[0]
    if units == 0:
        nan = float("nan")
        return Alpha(nan, None, None, level, scale, 0, 0, dropped, 0, 0)
    alpha = float(_alphas(np.ones((1, units)), stats, scale)[0])
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_ELEMENTS // max(units, stats.shape[1]))
    draws = []
    for start in range(0, resamples, block):
        size = min(block, resamples - start)
        weights = rng.multinomial(units, np.full(units, 1.0 / units), size=size).astype(float)
        draws.append(_alphas(weights, stats, scale))
    boot = np.concatenate(draws)
    defined = boot[~np.isnan(boot)]
    low = high = None
    if units >= 2 and defined.size:
        tail = (1.0 - level) / 2.0
        low, high = (float(v) for v in np.quantile(defined, [tail, 1.0 - tail]))
    return Alpha(
        alpha,
        low,
        high,
        level,
        scale,
        units,
        int(stats[:, 0].sum() if scale == "interval" else stats.sum()),
        dropped,
        resamples,
        int(boot.size - defined.size),
    )
