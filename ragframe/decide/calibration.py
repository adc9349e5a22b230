"""A score that means a probability: `calibrate(labelled, score, label)` fits a monotone map
from a metric's score to the probability that a person labels the row true.

The fit, by how many labels there are (the rule, `fit_method`):

- at least ISOTONIC_MIN_LABELS labelled rows with at least ISOTONIC_MIN_CLASS of each label:
  isotonic regression (pool-adjacent-violators over the sorted distinct scores, in numpy),
  predicted by linear interpolation between the fitted blocks' ends and held flat past the
  ends (scikit-learn's rule); it assumes nothing but monotonicity, which is why it needs rows.
- fewer: a monotone logistic curve p = 1 / (1 + exp(-(a + b * score))) with b >= 0, fitted by
  Newton's method on the log-likelihood (b held at 0 when the unconstrained fit would
  decrease); two parameters are all a few dozen labels can carry.

A lower-is-better metric (hallucination) is turned around first (the map is increasing in
1 - score), so the probability is always that of the label being true.

Held-out quality: the rows are split into `folds` folds (seeded, stratified by label); each
fold's predictions come from a fit on the other folds (cross-fitting), so no figure is judged
on the rows it was fitted on. On those predictions: the Brier score (mean squared error of the
probability) and the expected calibration error (ECE: over ECE_BINS equal-width bins of the
predicted probability, the row-weighted mean |mean prediction - observed rate|), each with its n
and a seeded bootstrap percentile interval (RESAMPLES resamples of rows, drawn at once as an
index matrix). `brier_base` is the Brier score of always predicting the labels' base rate, the
figure a useful map beats. The fitted map saved is fitted on all rows.

Reliability diagram: `reliability` holds the labelled rows in RELIABILITY_BINS equal-count bins
of the score, each with its score range, the fitted probability at the bin's mean score, the
observed rate of true labels and its Wilson interval; `curve()` the fitted map on a grid.

Provenance: the file records the metric, the label, the judge and the metric's prompt hashes
read from the labelled scored file's metadata; `apply` warns (CalibrationWarning) when scores
come from another judge or prompt, since a map fitted to one judge's habits says nothing sure
about another's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.decide.labels import read_labels
from ragframe.decide.summarize import checked_scores, direction_of, load_scored, score_values
from ragframe.errors import ConfigError, InputError
from ragframe.metrics.calibration import ECE_BINS, Calibration, CalibrationWarning, predict_with

__all__ = [
    "Calibration",
    "CalibrationWarning",
    "apply_calibration",
    "calibrate",
    "fit_isotonic",
    "fit_logistic",
]

ISOTONIC_MIN_LABELS = 100
ISOTONIC_MIN_CLASS = 20
RELIABILITY_BINS = 10
RESAMPLES = 2000

FitMethod = Literal["auto", "isotonic", "logistic"]


# ------------------------------------------------------------------------------ fits


def fit_isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing least-squares fit of y on x (pool-adjacent-violators), as knots
    (xs, ps) for `np.interp`: each pooled block's first and last distinct score."""
    order = np.argsort(x, kind="stable")
    xs, start = np.unique(x[order], return_index=True)
    sums = np.add.reduceat(y[order].astype(np.float64), start)
    counts = np.diff(np.append(start, x.size)).astype(np.float64)
    # Blocks as stacks of (sum, count, first index); merge while the last two violate order.
    b_sum: list[float] = []
    b_cnt: list[float] = []
    b_first: list[int] = []
    for i in range(xs.size):
        s, c, first = float(sums[i]), float(counts[i]), i
        while b_sum and b_sum[-1] / b_cnt[-1] >= s / c:
            s += b_sum.pop()
            c += b_cnt.pop()
            first = b_first.pop()
        b_sum.append(s)
        b_cnt.append(c)
        b_first.append(first)
    firsts = np.array(b_first)
    lasts = np.append(firsts[1:] - 1, xs.size - 1)
    values = np.array(b_sum) / np.array(b_cnt)
    knots_x = np.column_stack([xs[firsts], xs[lasts]]).ravel()
    knots_p = np.repeat(values, 2)
    keep = np.append(True, np.diff(knots_x) > 0)  # a one-score block gives one knot
    return knots_x[keep], knots_p[keep]


def fit_logistic(x: np.ndarray, y: np.ndarray, iterations: int = 100) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a + b * x) by Newton's method, with b >= 0 (monotone): when the
    unconstrained slope is negative, b = 0 and a = logit(base rate). A small ridge (1e-6)
    keeps a separable sample finite."""
    y = y.astype(np.float64)
    design = np.column_stack([np.ones_like(x), x])
    beta = np.zeros(2)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ beta)))
        grad = design.T @ (y - p) - 1e-6 * beta
        hess = (design * (p * (1 - p))[:, None]).T @ design + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if float(np.abs(step).max()) < 1e-10:
            break
    if beta[1] < 0:
        rate = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
        return math.log(rate / (1 - rate)), 0.0
    return float(beta[0]), float(beta[1])


def fit_method(y: np.ndarray) -> str:
    """The rule: isotonic with enough labels of both kinds, else the monotone logistic."""
    positives = int(y.sum())
    enough = y.size >= ISOTONIC_MIN_LABELS and min(positives, y.size - positives) >= (
        ISOTONIC_MIN_CLASS
    )
    return "isotonic" if enough else "logistic"


def _fit(x: np.ndarray, y: np.ndarray, method: str) -> dict[str, Any]:
    if method == "isotonic":
        xs, ps = fit_isotonic(x, y)
        return {"method": "isotonic", "x": xs.tolist(), "p": ps.tolist()}
    a, b = fit_logistic(x, y)
    return {"method": "logistic", "intercept": a, "slope": b}


# ------------------------------------------------------------------------------ quality


def _folds(y: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """A fold per row, stratified by label (each fold holds both labels where it can)."""
    fold = np.empty(y.size, dtype=np.int64)
    for value in (0.0, 1.0):
        rows = np.flatnonzero(y == value)
        fold[rows] = rng.permutation(rows.size) % folds
    return fold


def _ece(p: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> np.ndarray:
    """ECE of each row of (resamples, n) arrays (or of 1-D arrays), vectorised by bincount."""
    p2, y2 = np.atleast_2d(p), np.atleast_2d(y)
    b = np.minimum((p2 * bins).astype(np.int64), bins - 1) + bins * np.arange(p2.shape[0])[:, None]
    size = bins * p2.shape[0]
    gap = np.abs(
        np.bincount(b.ravel(), weights=(p2 - y2).ravel(), minlength=size).reshape(-1, bins)
    )
    out = gap.sum(axis=1) / p2.shape[1]
    return out if np.ndim(p) > 1 else out[0]


def _bootstrap(
    p: np.ndarray, y: np.ndarray, level: float, rng: np.random.Generator, resamples: int
) -> dict[str, tuple[float, float]]:
    idx = rng.integers(0, p.size, size=(resamples, p.size))
    pb, yb = p[idx], y[idx]
    brier = ((pb - yb) ** 2).mean(axis=1)
    ece = _ece(pb, yb)
    tail = (1 - level) / 2 * 100
    out = {}
    for name, values in (("brier", brier), ("ece", ece)):
        low, high = np.percentile(values, [tail, 100 - tail])
        out[name] = (float(low), float(high))
    return out


def _wilson(k: np.ndarray, n: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    z = NormalDist().inv_cdf(0.5 + level / 2)
    rate = k / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _reliability(
    x: np.ndarray, y: np.ndarray, params: Mapping[str, Any], level: float
) -> list[dict[str, Any]]:
    order = np.argsort(x, kind="stable")
    rows = []
    for chunk in np.array_split(order, min(RELIABILITY_BINS, x.size)):
        if chunk.size == 0:
            continue
        k, n = float(y[chunk].sum()), float(chunk.size)
        low, high = _wilson(np.array([k]), np.array([n]), level)
        rows.append(
            {
                "score_low": float(x[chunk].min()),
                "score_high": float(x[chunk].max()),
                "score_mean": float(x[chunk].mean()),
                "n": int(n),
                "observed": k / n,
                "ci_low": float(low[0]),
                "ci_high": float(high[0]),
                "fitted": float(predict_with(params, np.array([x[chunk].mean()]))[0]),
            }
        )
    return rows


def _in_own_units(rows: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """Reliability bins in the metric's own units (a lower-is-better score was turned)."""
    if direction != "lower":
        return rows
    for row in rows:
        row["score_low"], row["score_high"] = 1 - row["score_high"], 1 - row["score_low"]
        row["score_mean"] = 1 - row["score_mean"]
    return rows


# ------------------------------------------------------------------------------ the map


def calibrate(
    labelled: Any,
    score: str = "faithfulness",
    label: str = "faithful",
    *,
    labels: Any = None,
    on: str = "id",
    folds: int = 5,
    seed: int = 0,
    level: float = 0.95,
    method: FitMethod = "auto",
    resamples: int = RESAMPLES,
) -> Calibration:
    """Fit the map from `score` to P(`label` true) on labelled rows (module docstring).

    `labelled`: a frame, `ragframe.run`'s result or a scored file holding `score` and `label`
    (0 / 1 or Boolean); or, with `labels=` (a frame or a filled label sheet), a scored log
    joined to those labels on `on`. `method`: "auto" (the rule), "isotonic" or "logistic".
    Rows with a null score or label are left out and counted (`n_dropped`); a score outside
    [0, 1] is an InputError naming its column and row (`apply_calibration` too)."""
    _check_options(method, folds, level)
    lazy, meta, where = load_scored(labelled)
    frame = _score_and_label(lazy, where, score, label, labels, on)
    complete = frame.drop_nulls()
    direction = direction_of(score, meta)
    x, y = _scores_and_labels(complete, score, label, direction)
    positives = int(y.sum())
    if y.size < 2 * folds or min(positives, y.size - positives) < 2:
        raise InputError(
            f"{y.size} labelled rows with a score ({positives} true): calibrating needs at least "
            f"{2 * folds} rows ({folds} folds) and 2 of each label; label more rows"
        )
    chosen = fit_method(y) if method == "auto" else method
    rng = np.random.default_rng([seed, 20])
    held = _held_out(x, y, chosen, folds, rng)
    intervals = _bootstrap(held, y, level, rng, resamples)
    params = _fit(x, y, chosen)
    return Calibration(
        metric=score,
        label=label,
        direction=direction,
        params=params,
        n=int(y.size),
        n_positive=positives,
        folds=folds,
        level=float(level),
        seed=seed,
        brier=float(((held - y) ** 2).mean()),
        brier_ci=intervals["brier"],
        brier_base=float(((y.mean() - y) ** 2).mean()),
        ece=float(_ece(held, y)),
        ece_ci=intervals["ece"],
        reliability=_in_own_units(_reliability(x, y, params, level), direction),
        judge=meta.get("judge"),
        prompt_hashes=((meta.get("metrics") or {}).get(score) or {}).get("prompt_hashes"),
        n_dropped=frame.height - complete.height,
    )


def _check_options(method: str, folds: int, level: float) -> None:
    if method not in ("auto", "isotonic", "logistic"):
        raise ConfigError(f"method must be 'auto', 'isotonic' or 'logistic', not {method!r}")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ConfigError(f"folds must be an integer of at least 2, not {folds!r}")
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")


def _score_and_label(
    lazy: pl.LazyFrame, where: str, score: str, label: str, labels: Any, on: str
) -> pl.DataFrame:
    """The score (Float64, NaN as null) and the label of every row: from the scored frame, or
    joined on `on` to separate `labels`."""
    schema = lazy.collect_schema()
    if labels is not None:
        if on not in schema:
            raise InputError(f"no column {on!r} in {where} to join the labels on; pass on=")
        if score not in schema:
            raise InputError(f"no column {score!r} in {where}; the columns are {list(schema)}")
        joined = read_labels(labels, on, label).with_columns(pl.col(on).cast(schema[on]))
    else:
        for name in (score, label):
            if name not in schema:
                raise InputError(
                    f"no column {name!r} in {where}; the columns are {list(schema)} (labels "
                    "in another file: pass labels= / --labels with on= / --on)"
                )
    if not schema[score].is_numeric():
        raise InputError(f"score column {score!r} is {schema[score]}, not a number")
    # The scores checked in [0, 1] as they are read (row numbers: the scored file's).
    if labels is not None:
        frame = checked_scores(lazy, [on, score_values(score)], [score], where)
        try:
            frame = frame.join(joined, on=on, how="inner").select(score, label)
        except pl.exceptions.PolarsError as exc:
            raise InputError(f"cannot join the labels to {where} on {on!r}: {exc}") from exc
    else:
        frame = checked_scores(lazy, [score_values(score), label], [score], where)
    return frame.with_columns(pl.col(label).cast(pl.Float64))


def _scores_and_labels(
    complete: pl.DataFrame, score: str, label: str, direction: str
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): the scores, turned around for a lower-is-better metric, and the 0 / 1 labels."""
    y = complete.get_column(label).to_numpy()
    if not np.isin(y, [0.0, 1.0]).all():
        raise InputError(f"label {label!r} must be Boolean or 0 / 1 to calibrate a probability")
    x = complete.get_column(score).to_numpy()
    return (1.0 - x if direction == "lower" else x), y


def _held_out(
    x: np.ndarray, y: np.ndarray, method: str, folds: int, rng: np.random.Generator
) -> np.ndarray:
    """Each row's prediction from a fit on the other folds (cross-fitting)."""
    fold = _folds(y, folds, rng)
    held = np.empty(y.size)
    for k in range(folds):
        test = fold == k
        held[test] = predict_with(_fit(x[~test], y[~test], method), x[test])
    return held


def apply_calibration(scored: Any, calibration: Calibration | str | Path) -> pl.DataFrame:
    """The scored frame with `{metric}_p_human` added (null where the score is null); warns
    when the scores' judge or prompts are not those the calibration was fitted for. For
    `evaluate(..., calibration=...)` and `ragframe score --calibration FILE`."""
    cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
    lazy, meta, where = load_scored(scored)
    columns = lazy.collect_schema().names()
    if cal.metric not in columns:
        raise InputError(
            f"the calibration is for {cal.metric!r}, and {where} has no such column; its "
            f"columns are {columns}"
        )
    # Every column, the calibrated one checked in [0, 1] in the same read.
    frame = checked_scores(lazy, [pl.all()], [cal.metric], where)
    cal.check_provenance(meta, where)
    values = cal.predict(frame.get_column(cal.metric).cast(pl.Float64).to_numpy())
    return frame.with_columns(pl.Series(cal.column, values).fill_nan(None))
