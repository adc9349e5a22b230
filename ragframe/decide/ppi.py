"""The PPI++ mean and its interval (prediction-powered inference, power-tuned; Angelopoulos,
Duchi, Zrnic 2023), on arrays: the estimator under `ragframe.decide.human`.

With f the judge's score (an estimate of P(label true)) and Y the label:

    theta = mean over N scored rows of lam * f  +  mean over n labelled rows of (Y - lam * f)

The second term measures the judge's bias on the labelled rows and takes it off, so the estimate
is unbiased whatever the judge gets wrong; lam weighs how far the judge is trusted. lam = 0 is
the labels-only mean, lam = 1 classical PPI; `lam=None` tunes it to minimise the variance, as
`ppi_py.ppi_mean_ci` does (and to 1e-6 of it, checked in the tests):

    lam = cov_n(Y, f) / ((1 + n / N) * var(f on the n labelled rows and the N scored rows)),

cov_n with divisor n, var with divisor (n + N - 1), then clipped to [0, 1]. The interval is
theta +- q * sqrt(var(lam * f over N) / N + var(Y - lam * f over n) / n), both variances with
divisor n (numpy's default, as ppi_py). q is Student's t(n - 1) quantile by default
(`interval="t"`): the rectifier's variance rests on n rows, and at n = 50 the normal quantile
covers 93 % for a 95 % interval in the tests' simulations, t about 94 %; `interval="normal"`
takes the normal quantile and is ppi_py's interval exactly.

Weights `w` (a stratified draw's 1 / inclusion probability) are normalised to mean 1 (ppi_py's
`w`; a Hajek-normalised Horvitz-Thompson weight) and enter the labelled term, lam and the
variance.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from ragframe.errors import ConfigError, InputError
from ragframe.stats import t_quantile

Quantile = Literal["t", "normal"]

__all__ = ["PPIResult", "Quantile", "normal_quantile", "ppi_mean", "quantile"]


@dataclass(frozen=True)
class PPIResult:
    """Arrays of shape (...,) for a batch of problems (scalars as 0-d arrays): the estimate,
    its standard error, the lam used and the interval at `level` (unclipped)."""

    estimate: np.ndarray
    se: np.ndarray
    lam: np.ndarray
    low: np.ndarray
    high: np.ndarray


def normal_quantile(level: float) -> float:
    """The two-sided normal quantile of a `level` interval (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def quantile(level: float, n: int, interval: Quantile) -> float:
    """The two-sided quantile of a `level` interval on n rows: t(n - 1) or normal."""
    if interval == "t":
        return t_quantile(0.5 + level / 2, n - 1)
    if interval == "normal":
        return normal_quantile(level)
    raise ConfigError(f"interval must be 't' or 'normal', not {interval!r}")


def ppi_mean(
    y: np.ndarray,
    f_labelled: np.ndarray,
    f_all: np.ndarray,
    *,
    lam: float | None = None,
    w: np.ndarray | None = None,
    level: float = 0.95,
    interval: Quantile = "t",
) -> PPIResult:
    """The PPI++ mean (module docstring) over the last axis; leading axes are independent
    problems (a batch of simulations). `y`, `f_labelled` (and `w`): shape (..., n); `f_all`:
    (..., N). `lam=None` power-tunes; `lam=1` is classical PPI, `lam=0` the labels-only mean.
    `interval`: "t" (t(n - 1) quantile) or "normal" (ppi_py's `ppi_mean_ci`)."""
    y = np.asarray(y, dtype=np.float64)
    fl = np.asarray(f_labelled, dtype=np.float64)
    fa = np.asarray(f_all, dtype=np.float64)
    n, big_n = y.shape[-1], fa.shape[-1]
    if n < 2 or big_n < 1:
        raise InputError(
            f"PPI needs at least 2 labelled rows and 1 scored row, not {n} and {big_n}"
        )
    if w is None:
        wn = np.ones_like(y)
    else:
        w = np.asarray(w, dtype=np.float64)
        wn = w / w.sum(axis=-1, keepdims=True) * n
    if lam is None:
        lam_a = _tuned_lam(y, fl, fa, wn)
    else:
        lam_a = np.broadcast_to(np.float64(lam), y.shape[:-1])
    lam_k = np.asarray(lam_a)[..., None]
    rect = wn * (y - lam_k * fl)
    estimate = (lam_k * fa).mean(-1) + rect.mean(-1)
    se = np.sqrt((lam_k * fa).var(-1) / big_n + rect.var(-1) / n)
    z = quantile(level, n, interval)
    return PPIResult(estimate, se, np.asarray(lam_a), estimate - z * se, estimate + z * se)


def _tuned_lam(y: np.ndarray, fl: np.ndarray, fa: np.ndarray, wn: np.ndarray) -> np.ndarray:
    """The variance-minimising lam (module docstring), clipped to [0, 1], per problem."""
    n, big_n = y.shape[-1], fa.shape[-1]
    first = fa.mean(-1, keepdims=True) + (wn * (y - fl)).mean(-1, keepdims=True)
    g = wn * (y - first)
    gh = wn * (fl - first)
    ghu = fa - first
    cov = ((g - g.mean(-1, keepdims=True)) * (gh - gh.mean(-1, keepdims=True))).mean(-1)
    var = np.concatenate([gh, ghu], axis=-1).var(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.where(var > 0, cov / ((1 + n / big_n) * var), 0.0)
    return np.clip(raw, 0.0, 1.0)
