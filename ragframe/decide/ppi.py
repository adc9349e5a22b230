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
takes the normal quantile and is ppi_py's interval exactly (unweighted; weights below).

Weights `w` (a stratified draw's 1 / inclusion probability) are normalised to mean 1 (ppi_py's
`w`; a Hajek-normalised Horvitz-Thompson weight) and enter the labelled term and lam as in
ppi_py. The variance of the weighted rectifier's mean is not ppi_py's (which treats the weighted
rows as independent draws, uncentred: 0.89 / 0.93 coverage at n = 20 / 40 with strata of 190
to 4,100 rows): it is the larger of the stratified variance (rows of equal weight form a
stratum: sum of W_h^2 s_h^2 / n_h, Satterthwaite's degrees of freedom) and the linearised one
(sum((w * (r - mean))^2) / (n (n - 1)), n - 1 degrees of freedom), the t quantile at the smaller
degrees of freedom. No finite-population correction: conservative for the log itself.

Rare labels and small n (`human_intervals`, what `human_estimate` reports): the normal
interval above rests on the labelled rows measuring the rectifier's spread, which they cannot
when it is a sum of a few rare events: at a 5 % label rate it covered 0.41 / 0.65 / 0.90 at
n = 10 / 20 / 50 (ten labels all 0: zero width). So the labels-only interval is
Clopper-Pearson's (never below its level for a uniform draw; Korn and Graubard's effective n
for weighted labels), and the PPI++ interval is widened to hold it wherever the labels hold
fewer than MIN_EACH = 10 of their rarer kind, or the rectifiers fewer than 10 values off their
most common one (a yes / no judge that rarely errs), or, weighted, some stratum's labels all
agree or the rarer kind's weighted count (Kish's effective n) is below 10. Below 20 labels
that is always. Measured (tests/test_human_estimate.py, seeded): at label rates 2 % to 95 %,
n = 10 / 20 / 50 / 200, four judges, both intervals covered at least 0.93 (mostly 0.95 to 1.0:
Clopper-Pearson is conservative); stratified draws from strata of 190 to 4,100 rows at
n = 20 / 40, at least 0.95, and at n = 100 / 200 (3,000 draws, a smooth rate over the strata)
0.938 / 0.951 for PPI++, 0.967 / 0.968 labels-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from ragframe.errors import ConfigError, InputError
from ragframe.stats import beta_quantile, mean_interval, t_quantile

Quantile = Literal["t", "normal"]

__all__ = [
    "MIN_EACH",
    "HumanIntervals",
    "PPIResult",
    "Quantile",
    "clopper_pearson",
    "human_intervals",
    "labels_only_interval",
    "normal_quantile",
    "off_mode",
    "ppi_mean",
    "quantile",
    "too_few_events",
]


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
    `interval`: "t" (t(n - 1) quantile) or "normal" (ppi_py's `ppi_mean_ci`, unweighted).
    This is the plain normal interval; `human_intervals` adds the small-n rule to it."""
    y = np.asarray(y, dtype=np.float64)
    fl = np.asarray(f_labelled, dtype=np.float64)
    fa = np.asarray(f_all, dtype=np.float64)
    n, big_n = y.shape[-1], fa.shape[-1]
    if n < 2 or big_n < 1:
        raise InputError(
            f"PPI needs at least 2 labelled rows and 1 scored row, not {n} and {big_n}"
        )
    wn = np.ones_like(y) if w is None else _normalised(np.asarray(w, dtype=np.float64))
    if lam is None:
        lam_a = _tuned_lam(y, fl, fa, wn)
    else:
        lam_a = np.broadcast_to(np.float64(lam), y.shape[:-1])
    lam_k = np.asarray(lam_a)[..., None]
    rect = y - lam_k * fl
    estimate = (lam_k * fa).mean(-1) + (wn * rect).mean(-1)
    if w is None:
        # ppi_py's variance exactly: both terms with divisor n (numpy's default).
        se = np.sqrt((lam_k * fa).var(-1) / big_n + rect.var(-1) / n)
        z: np.ndarray | float = quantile(level, n, interval)
    else:
        var, df = _weighted_variance(rect, wn)
        se = np.sqrt((lam_k * fa).var(-1) / big_n + var)
        z = _quantiles(level, df, interval)
    return PPIResult(estimate, se, np.asarray(lam_a), estimate - z * se, estimate + z * se)


def _normalised(w: np.ndarray) -> np.ndarray:
    """Weights normalised to mean 1 along the last axis (Hajek; ppi_py's `w`)."""
    return w / w.sum(axis=-1, keepdims=True) * w.shape[-1]


def _quantiles(level: float, df: np.ndarray, interval: Quantile) -> np.ndarray:
    """`quantile` per problem, at each problem's (integer part of its) degrees of freedom."""
    if interval == "normal":
        return np.full(df.shape, normal_quantile(level))
    flat = [quantile(level, max(int(d), 1) + 1, interval) for d in np.ravel(df)]
    return np.asarray(flat, dtype=np.float64).reshape(df.shape)


def _weighted_variance(r: np.ndarray, wn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The variance of the weighted mean sum(wn * r) / n, and its degrees of freedom, per
    problem: the larger of two estimates (module docstring, "Weights"), so that neither a
    stratum whose few rows happen to agree nor the pooling of strata can make it small."""
    shape = r.shape[:-1]
    r2 = r.reshape(-1, r.shape[-1])
    w2 = np.broadcast_to(wn, r.shape).reshape(-1, r.shape[-1])
    var = np.empty(r2.shape[0])
    df = np.empty(r2.shape[0])
    for i, (ri, wi) in enumerate(zip(r2, w2, strict=True)):
        var[i], df[i] = _one_weighted_variance(ri, wi)
    return var.reshape(shape), df.reshape(shape)


def _one_weighted_variance(r: np.ndarray, wn: np.ndarray) -> tuple[float, float]:
    """max(stratified, linearised) variance of one problem's weighted mean, and the smaller of
    their degrees of freedom (Satterthwaite's; n - 1)."""
    n = r.size
    mean = float((wn * r).mean())
    linear = float(((wn * (r - mean)) ** 2).sum() / (n * (n - 1)))
    stratum, sizes = _strata(wn)
    if sizes.min() < 2:
        return linear, float(n - 1)
    share = np.bincount(stratum, weights=wn) / n
    total = np.bincount(stratum, weights=r)
    squares = np.bincount(stratum, weights=r * r)
    s2 = np.maximum(squares - total * total / sizes, 0.0) / (sizes - 1)
    parts = share * share * s2 / sizes
    var = float(parts.sum())
    tails = float((parts * parts / (sizes - 1)).sum())
    df = var * var / tails if tails > 0 else float(n - 1)
    return max(var, linear), min(max(df, 1.0), float(n - 1))


def _strata(wn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's stratum (rows of equal weight; to 1e-9) and the strata's sizes."""
    _, stratum, sizes = np.unique(np.round(wn, 9), return_inverse=True, return_counts=True)
    return stratum, sizes


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


# ------------------------------------------------------------------ small n, rare labels

#: PPI++'s normal interval is quoted as it is only when the labelled rows hold at least this
#: many labels of the rarer kind and this many rectifiers off their most common value (module
#: docstring, "Rare labels"); below, its interval is widened to hold the labels-only one.
MIN_EACH = 10


@dataclass(frozen=True)
class HumanIntervals:
    """What `human_intervals` returns: PPI++ with the small-n rule applied (`widened`: where
    its interval was widened to hold the labels-only one), and the labels-only estimate."""

    ppi: PPIResult
    labels_only: PPIResult
    widened: np.ndarray
    raw: PPIResult


def human_intervals(
    y: np.ndarray,
    f_labelled: np.ndarray,
    f_all: np.ndarray,
    *,
    lam: float | None = None,
    w: np.ndarray | None = None,
    level: float = 0.95,
    interval: Quantile = "t",
) -> HumanIntervals:
    """The intervals `human_estimate` reports, for 0 / 1 labels, over the last axis (leading
    axes: independent problems): labels-only by Clopper-Pearson (`labels_only_interval`), and
    PPI++ (`ppi_mean`) widened to hold it where too few labelled rows carry the information
    its normal interval rests on (`too_few_events`)."""
    y = np.asarray(y, dtype=np.float64)
    raw = ppi_mean(y, f_labelled, f_all, lam=lam, w=w, level=level, interval=interval)
    only = labels_only_interval(y, w=w, level=level)
    fl = np.asarray(f_labelled, dtype=np.float64)
    rect = y - np.asarray(raw.lam)[..., None] * fl
    widened = too_few_events(y, rect, w)
    low = np.where(widened, np.minimum(raw.low, only.low), raw.low)
    high = np.where(widened, np.maximum(raw.high, only.high), raw.high)
    ppi = PPIResult(raw.estimate, raw.se, raw.lam, low, high)
    return HumanIntervals(ppi, only, widened, raw)


def too_few_events(y: np.ndarray, rect: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Where (per problem) the labels hold fewer than MIN_EACH values off their most common
    one (for 0 / 1 labels: of the rarer kind), or the rectifiers y - lam * f do: the
    rectifier's mean is then a sum of a few rare events, whose spread the labelled rows cannot
    measure (at a 5 % rate, ten labels are all 0 six times in ten, and the normal interval has
    zero width). With weights, also where some stratum's labels (rows of one weight) all agree:
    its variance then reads 0 whatever the stratum's rate."""
    few = (off_mode(y) < MIN_EACH) | (off_mode(rect) < MIN_EACH)
    if w is None:
        return few
    wn = _normalised(np.broadcast_to(np.asarray(w, np.float64), y.shape))
    y2, w2 = y.reshape(-1, y.shape[-1]), wn.reshape(-1, y.shape[-1])
    agree = np.empty(y2.shape[0], bool)
    for i, (yi, wi) in enumerate(zip(y2, w2, strict=True)):
        stratum, sizes = _strata(wi)
        spread = np.bincount(stratum, weights=yi)
        agree[i] = bool(((spread == 0) | (spread == sizes)).any())
    # Weighted, a label counts by its weight: Kish's effective number of the rarer kind.
    rarer = np.where((wn * y).mean(-1, keepdims=True) <= 0.5, 1 - y, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        kish = (wn * rarer).sum(-1) ** 2 / (wn * wn * rarer).sum(-1)
    return few | agree.reshape(y.shape[:-1]) | ~(np.nan_to_num(kish) >= MIN_EACH)


def off_mode(x: np.ndarray) -> np.ndarray:
    """How many values along the last axis differ from the most common one (to 1e-12)."""
    n = x.shape[-1]
    ordered = np.sort(np.round(x, 12), axis=-1)
    starts = np.concatenate(
        [np.ones((*ordered.shape[:-1], 1), bool), np.diff(ordered, axis=-1) != 0], axis=-1
    )
    idx = np.arange(n)
    last_start = np.maximum.accumulate(np.where(starts, idx, 0), axis=-1)
    return n - (idx - last_start + 1).max(-1)


def labels_only_interval(
    y: np.ndarray, *, w: np.ndarray | None = None, level: float = 0.95
) -> PPIResult:
    """The mean of 0 / 1 labels with a Clopper-Pearson interval, over the last axis: exact for a
    uniform draw (never below its level, whatever the rate: ten labels all 0 give [0, 0.308]).
    Weighted labels (a stratified draw): the Hajek mean, with Korn and Graubard's effective n =
    p (1 - p) / var(p) (capped at n; Kish's n_eff when p is 0 or 1) in Clopper-Pearson.
    Labels in [-1, 1] that are not all 0 / 1 (a paired difference of labels, unweighted):
    `ragframe.stats.mean_interval` with those bounds, per problem."""
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[-1]
    if not np.isin(y, (0.0, 1.0)).all():
        return _differences_only(y, w, level)
    if w is None:
        estimate = y.mean(-1)
        se = np.sqrt(y.var(-1) / n)  # as ppi_mean's with lam = 0 (effective_n compares them)
        k, size = y.sum(-1), np.full(estimate.shape, float(n))
    else:
        wn = _normalised(np.asarray(w, dtype=np.float64))
        estimate = (wn * y).mean(-1)
        se = np.sqrt(_weighted_variance(y, wn)[0])
        kish = wn.sum(-1) ** 2 / (wn * wn).sum(-1)
        spread = estimate * (1 - estimate)
        with np.errstate(divide="ignore", invalid="ignore"):
            size = np.where((spread > 0) & (se > 0), spread / se**2, kish)
        size = np.minimum(size, n)
        k = estimate * size
    low, high = clopper_pearson(k, size, level)
    return PPIResult(estimate, se, np.zeros_like(estimate), low, high)


def _differences_only(y: np.ndarray, w: np.ndarray | None, level: float) -> PPIResult:
    """Labels-only for labels in [-1, 1] (differences): the score interval of `mean_interval`
    (bounded: Wilson-like near the bounds); weighted, the Wald interval of `ppi_mean`."""
    if w is not None:
        zero = np.zeros((*y.shape[:-1], 1))
        return ppi_mean(y, y, zero, lam=0.0, w=w, level=level)
    flat = y.reshape(-1, y.shape[-1])
    found = [mean_interval(row, level, bounds=(-1.0, 1.0)) for row in flat]
    shape = y.shape[:-1]
    low = np.array([f.low for f in found], dtype=np.float64).reshape(shape)
    high = np.array([f.high for f in found], dtype=np.float64).reshape(shape)
    return PPIResult(y.mean(-1), np.sqrt(y.var(-1) / y.shape[-1]), np.zeros(shape), low, high)


def clopper_pearson(k: np.ndarray, n: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The Clopper-Pearson interval of k successes in n (arrays; real k and n allowed for an
    effective sample size): beta quantiles, computed by bisection on the incomplete beta, once
    per distinct (k, n) and level (kept: simulations ask for the same few again and again)."""
    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    pairs, back = np.unique(np.stack([k.ravel(), n.ravel()], axis=1), axis=0, return_inverse=True)
    keys = [(float(a), float(b), float(level)) for a, b in pairs]
    todo = [key for key in dict.fromkeys(keys) if key not in _CP_CACHE]
    if todo:
        if len(_CP_CACHE) + len(todo) > _CP_CACHE_SIZE:
            _CP_CACHE.clear()
        kk = np.array([t[0] for t in todo])
        nn = np.array([t[1] for t in todo])
        tail = (1 - level) / 2
        low = np.where(kk <= 0, 0.0, beta_quantile(tail, np.maximum(kk, 1e-9), nn - kk + 1))
        high = np.where(kk >= nn, 1.0, beta_quantile(1 - tail, kk + 1, np.maximum(nn - kk, 1e-9)))
        _CP_CACHE.update(zip(todo, zip(low.tolist(), high.tolist(), strict=True), strict=True))
    found = np.array([_CP_CACHE[key] for key in keys]).reshape(-1, 2)[np.ravel(back)]
    return found[:, 0].reshape(k.shape), found[:, 1].reshape(k.shape)


_CP_CACHE: dict[tuple[float, float, float], tuple[float, float]] = {}
_CP_CACHE_SIZE = 100_000
