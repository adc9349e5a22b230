"""How well a score agrees with people: `agreement(scored, score, label, kind)`.

A judge's score is worth what its agreement with human labels is worth, and that depends on
the judge model as much as on the metric. `agreement` measures it on rows people labelled, one
table row per figure, each with its n and an interval (a seeded bootstrap; for the figures that
are means, the score interval of `ragframe.stats.mean_interval`: "Intervals" below):

- `kind="binary"` (a Boolean, or 0 / 1, label; true is the positive class):
  - `positive_rate`: the share of true labels (the baseline average precision is read against).
  - `auroc`: the probability that a random true-labelled row scores above a random false one,
    ties counting half (Mann-Whitney with mid-ranks), so a coarse score (a fraction of 3
    claims) is neither helped nor hurt by its ties.
  - `average_precision`: precision averaged over the true rows, ranked by score, with one step
    per distinct score (tied rows enter together; scikit-learn's definition).
  - `balanced_accuracy`, `f1` (of the true class) and `kappa` (Cohen's): at a threshold chosen
    by stratified k-fold cross-validation. For each fold, the threshold that maximises balanced
    accuracy is fitted on the *other* folds (the middle one of the maximisers, at a midpoint
    between distinct scores) and applied to the held-out fold, so every row is predicted by a
    threshold that never saw it: no figure is tuned on the rows it is reported on. `threshold`
    reports the median of the fold thresholds; its note lists them all.
- `kind="ordinal"` (a numeric label: a fraction, a Likert rating): `spearman` (Pearson of the
  mid-ranks) and `kendall_tau_b` (tie-corrected), both read from the contingency table of
  (score, label) values, so ties are exact and the bootstrap costs cells, not rows.
- `kind="pairwise"` (two score columns, `score` for side a and `score_b` for side b, and a
  preference label whose sign says which side people preferred: > 0 b, < 0 a, 0 a tie):
  `accuracy`: the share of pairs where the judge prefers the side people preferred, over pairs
  people did not tie and the judge did not tie (equal scores); `judge_ties`: the share of those
  pairs the judge tied, reported apart rather than hidden; `accuracy_ties_half`: judge ties
  counted half right (a judge cannot look good by tying); `label_ties`: the share of pairs
  people tied (left out of the others).

Direction: a lower-is-better metric (hallucination) is turned around before anything is
computed, so AUROC above 0.5 and positive correlations always mean agreement; the threshold is
reported in the score's own units, with the rule ("score <= t predicts true") in its note.
`direction=` overrides what the metadata or the catalogue says.

Intervals: RESAMPLES resamples drawn at once as multinomial counts (of score levels or table
cells: never a Python loop per resample), seeded by (seed, score, label, group), and the
expanded percentile rule of `ragframe.stats` (percentiles at a level widened by
sqrt(n / (n - 1)) * t(n - 1) / z; Hesterberg derived it for means, here it is a small-sample
correction). Binary figures resample rows within each label class (a stratified bootstrap:
every resample holds both classes, and the label counts are held at the data's). The
cross-validated figures bootstrap the held-out predictions with the fold thresholds fixed: the
interval covers which rows were labelled, not the variation of the threshold fit, so it is
somewhat narrow (say so when you quote it). A figure at its bound that no resample can move
(a perfect separation) gets the exact binomial bound of the smaller label class instead of
[1, 1] ("exact-bound": conservative). The pairwise figures and `positive_rate` are means over
pairs or rows, so `ragframe.stats.mean_interval` gives theirs. Past BOOTSTRAP_MAX_CELLS (score
levels x label levels) the correlations' intervals come from Fisher's z (Kendall: se =
sqrt(0.437 / (n - 4)), Fieller et al. 1957; Spearman: se = sqrt((1 + r^2 / 2) / (n - 3)),
Bonett & Wright 2000).
Every interval assumes the rows are independent draws: claims of one answer, or answers to
one question, are not, and their intervals are then too narrow.

Nulls: a row whose score, second score or label is null (or NaN) is dropped and counted in
`n_dropped`: a judge that fails on hard rows looks better than it is, so read n_dropped. A
score outside [0, 1] (7.5) is an InputError naming its column and row; the label may be any
number.

Repeats: a frame scored with `repeats=k` holds the mean of the k scores in `{metric}` (and the
k scores in `{metric}_repeats`); pass `score="{metric}"` as usual to measure the mean's
agreement. No scipy: every statistic here is a few lines of numpy on count tables, checked in
the tests against the textbook pair-by-pair definitions.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.decide._agreement_figures import (
    BLOCK_ELEMENTS,
    Data,
    Figure,
    boot_figures,
    resampled,
)
from ragframe.decide.summarize import checked_scores, direction_of, load_scored, score_values
from ragframe.errors import ConfigError, InputError
from ragframe.stats import RESAMPLES, mean_interval

__all__ = [
    "BOOTSTRAP_MAX_CELLS",
    "COLUMNS",
    "KINDS",
    "agreement",
    "cross_validated_predictions",
    "fit_threshold",
    "kendall_tau_b",
    "spearman",
    "stratified_folds",
]

Kind = Literal["binary", "ordinal", "pairwise"]
KINDS = ("binary", "ordinal", "pairwise")
#: The table's columns, after the group columns.
COLUMNS = (
    "metric",
    "label",
    "kind",
    "figure",
    "value",
    "ci_low",
    "ci_high",
    "level",
    "n",
    "n_dropped",
    "method",
    "note",
)
#: Score levels x label levels up to which the correlations are bootstrapped (Fisher's z past).
BOOTSTRAP_MAX_CELLS = 250_000
#: Score levels x label levels up to which the correlations are read from a count table.
_TABLE_MAX_CELLS = 4_000_000

_A, _B, _Y = "\0a", "\0b", "\0y"


def agreement(
    scored: Any,
    score: str = "faithfulness",
    label: str = "faithful",
    kind: Kind = "binary",
    *,
    by: str | Sequence[str] | None = None,
    level: float = 0.95,
    seed: int = 0,
    folds: int = 5,
    score_b: str | None = None,
    direction: Literal["higher", "lower"] | None = None,
    resamples: int = RESAMPLES,
) -> pl.DataFrame:
    """Agreement of `score` with the human `label`, one row per (group and) figure.

    `scored`: a frame, a LazyFrame, `ragframe.run`'s result or a scored Parquet file's path.
    `kind`: "binary", "ordinal" or "pairwise" (module docstring: what each reports and how).
    `score_b`: side b's score column (pairwise only; `score` is side a). `by`: group columns.
    `folds`: cross-validation folds for the binary threshold (fewer when a label class has
    fewer rows). `direction`: "higher" or "lower" is better (default: the metric's).
    Columns: the group columns, then COLUMNS; `n` is the rows a figure rests on, `n_dropped`
    the group's rows left out for a null score or label, `method` how its interval was got.
    A frame scored with `repeats=k` is passed as is: `{metric}` holds the mean of the repeats.

    >>> import polars as pl
    >>> from ragframe.decide.agreement import agreement
    >>> frame = pl.DataFrame({"faithfulness": [0.9, 0.2, 0.8, 0.4], "faithful": [1, 0, 1, 1]})
    >>> table = agreement(frame, kind="binary", folds=2)
    >>> table.filter(pl.col("figure") == "auroc")["value"].item()
    1.0
    """
    _check_options(kind, level, seed, folds, resamples, score_b)
    lazy, meta, where = load_scored(scored)
    groups = [by] if isinstance(by, str) else list(by or [])
    sides = [score, score_b] if kind == "pairwise" and score_b is not None else [score]
    _check_columns(lazy.collect_schema(), sides, label, groups, where)
    sign = _sign(direction or direction_of(score, meta))
    frame = _turned(lazy, sides, label, groups, sign, where)
    if kind == "binary":
        _check_binary(frame, label)
    rows: list[dict[str, Any]] = []
    for key, part in _partitions(frame, groups).items():
        complete = part.drop_nulls([c for c in (_A, _B, _Y) if c in part.columns])
        rng = np.random.default_rng([seed, zlib.crc32(repr((score, label, *key)).encode())])
        data = Data(complete, sign, level, rng, resamples, seed)
        figures = _figures(kind, data, folds)
        common = {
            **dict(zip(groups, key, strict=True)),
            "metric": score if kind != "pairwise" else f"{score} vs {score_b}",
            "label": label,
            "kind": kind,
            "level": float(level),
            "n_dropped": part.height - complete.height,
        }
        rows.extend({**common, **_as_row(f)} for f in figures)
    return _table(rows, frame.select(groups).schema)


def _sign(direction: str) -> float:
    """1 for a higher-is-better score, -1 for a lower-is-better one (turned around)."""
    if direction not in ("higher", "lower"):
        raise ConfigError(f"direction must be 'higher' or 'lower', not {direction!r}")
    return 1.0 if direction == "higher" else -1.0


def _partitions(frame: pl.DataFrame, groups: list[str]) -> dict[Any, pl.DataFrame]:
    """The frame per group, in the groups' sorted order (one part keyed () without groups)."""
    if not groups:
        return {(): frame}
    return frame.sort(groups, nulls_last=True).partition_by(
        groups, maintain_order=True, as_dict=True
    )


def _turned(
    lazy: pl.LazyFrame, sides: list[str], label: str, groups: list[str], sign: float, where: str
) -> pl.DataFrame:
    """The groups, the score(s) turned higher-is-better (as `_A`, `_B`) and the label (`_Y`),
    as floats with NaN read as null; a score outside [0, 1] is refused as it is read (the
    label may be any number: a Likert rating, a preference)."""
    exprs = [
        *groups,
        *((score_values(c) * sign).alias(alias) for c, alias in zip(sides, (_A, _B), strict=False)),
        pl.col(label).cast(pl.Float64).fill_nan(None).alias(_Y),
    ]
    return checked_scores(lazy, exprs, sides, where)


def _figures(kind: str, data: Data, folds: int) -> list[Figure]:
    if kind == "binary":
        return _binary(data.column(_A), data.column(_Y) == 1, data, folds)
    if kind == "ordinal":
        return _ordinal(data.column(_A), data.column(_Y), data)
    return _pairwise(data.column(_A), data.column(_B), data.column(_Y), data)


def _as_row(f: Figure) -> dict[str, Any]:
    def num(x: float | None) -> float | None:
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

    return {
        "figure": f.figure,
        "value": num(f.value),
        "ci_low": num(f.low),
        "ci_high": num(f.high),
        "n": int(f.n),
        "method": f.method,
        "note": f.note,
    }


def _table(rows: list[dict[str, Any]], group_schema: pl.Schema) -> pl.DataFrame:
    schema: dict[str, Any] = {
        **dict(group_schema),
        "metric": pl.String,
        "label": pl.String,
        "kind": pl.String,
        "figure": pl.String,
        "value": pl.Float64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "level": pl.Float64,
        "n": pl.Int64,
        "n_dropped": pl.Int64,
        "method": pl.String,
        "note": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").select(list(schema))


# ------------------------------------------------------------------------------ checks


def _check_options(
    kind: str, level: float, seed: int, folds: int, resamples: int, score_b: str | None
) -> None:
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {list(KINDS)}, not {kind!r}")
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    for name, value, least in (("seed", seed, 0), ("folds", folds, 2), ("resamples", resamples, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be an integer of at least {least}, not {value!r}")
    if (kind == "pairwise") != (score_b is not None):
        raise ConfigError(
            "kind='pairwise' needs score_b= (side b's score column; `score` is side a), and "
            "only pairwise takes score_b"
        )


def _check_columns(
    schema: pl.Schema, scores: list[str], label: str, groups: list[str], where: str
) -> None:
    for name in [*scores, label, *groups]:
        if name not in schema:
            raise InputError(f"no column {name!r} in {where}; the columns are {list(schema)}")
    for name in [*scores, label]:
        dtype = schema[name]
        if not (dtype.is_numeric() or dtype == pl.Boolean):
            raise InputError(
                f"column {name!r} is {dtype}; agreement needs numbers or Booleans there "
                f"(cast it first, e.g. pl.col({name!r}) == 'yes')"
            )


def _check_binary(frame: pl.DataFrame, label: str) -> None:
    other = frame.filter(pl.col(_Y).is_not_null() & ~pl.col(_Y).is_in([0.0, 1.0]))
    if other.height:
        seen = other.get_column(_Y).unique().sort().head(5).to_list()
        raise InputError(
            f"kind='binary' needs a Boolean or 0 / 1 label, but {label!r} holds {seen}; "
            "use kind='ordinal' for graded labels, or map them to true / false first"
        )


# ------------------------------------------------------------------------------ binary


def _auroc(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """AUROC from counts per score level (ascending), ties half: (..., levels) -> (...)."""
    below = np.cumsum(neg, axis=-1) - neg
    return (pos * (below + 0.5 * neg)).sum(-1) / (pos.sum(-1) * neg.sum(-1))


def _average_precision(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Average precision from counts per score level (ascending), one step per level."""
    pos_desc, neg_desc = pos[..., ::-1], neg[..., ::-1]
    tp, fp = np.cumsum(pos_desc, axis=-1), np.cumsum(neg_desc, axis=-1)
    precision = tp / np.maximum(tp + fp, 1.0)
    return (pos_desc * precision).sum(-1) / pos.sum(-1)


def _confusion_figures(tp: np.ndarray, fn: np.ndarray, fp: np.ndarray, tn: np.ndarray) -> Any:
    """Balanced accuracy, F1 of the true class and Cohen's kappa from a 2 x 2 table."""
    p, n_neg = tp + fn, fp + tn
    total = p + n_neg
    balanced = (tp / p + tn / n_neg) / 2
    f1 = np.where(tp > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1.0), 0.0)
    observed = (tp + tn) / total
    chance = ((tp + fp) * p + (fn + tn) * n_neg) / total**2
    kappa = (observed - chance) / (1 - chance)
    return np.stack(np.broadcast_arrays(balanced, f1, kappa))


def _binary(s: np.ndarray, y: np.ndarray, data: Data, folds: int) -> list[Figure]:
    n, n_pos = s.size, int(y.sum())
    rate = mean_interval(y.astype(np.float64), data.level, seed=data.seed)
    figures = [
        Figure(
            "positive_rate", rate.mean, rate.low, rate.high, n, rate.method, "share of true labels"
        )
    ]
    names = ("auroc", "average_precision", "balanced_accuracy", "f1", "kappa", "threshold")
    if n_pos == 0 or n_pos == n:
        why = f"needs both labels; these {n} rows have {n_pos} true"
        return figures + [Figure(name, None, n=n, note=why) for name in names]
    levels, code = np.unique(s, return_inverse=True)
    pos = np.bincount(code[y], minlength=levels.size).astype(np.float64)
    neg = np.bincount(code[~y], minlength=levels.size).astype(np.float64)
    values = (float(_auroc(pos, neg)), float(_average_precision(pos, neg)))
    if levels.size == 1:  # no resample can move a constant score's figures: no interval
        why = f"every row scored {levels[0] * data.sign:g}: a constant score cannot rank rows"
        figures += [Figure(name, v, n=n, note=why) for name, v in zip(names, values, strict=False)]
        return figures + _cross_validated(s, y, data, folds)
    boot = resampled(
        lambda p, q: np.stack([_auroc(p, q), _average_precision(p, q)]), [pos, neg], data
    )
    note = f"{n_pos} true, {n - n_pos} false; bootstrap within each label"
    sizes = (n, min(n_pos, n - n_pos))
    figures += boot_figures(names[:2], values, boot, sizes, data, [(0.0, 1.0)] * 2, note)
    return figures + _cross_validated(s, y, data, folds)


def _cross_validated(s: np.ndarray, y: np.ndarray, data: Data, folds: int) -> list[Figure]:
    """Balanced accuracy, F1 and kappa of the held-out predictions, and the fold thresholds."""
    n, n_pos = s.size, int(y.sum())
    k = min(folds, n_pos, n - n_pos)
    names = ("balanced_accuracy", "f1", "kappa")
    if k < 2:
        why = "cross-validation needs at least 2 rows of each label"
        return [Figure(name, None, n=n, note=why) for name in (*names, "threshold")]
    pred, _, cuts = cross_validated_predictions(s, y, k, data.rng)
    cells = [float(np.sum(pred & y)), float(np.sum(~pred & y))]
    cells += [float(np.sum(pred & ~y)), float(np.sum(~pred & ~y))]
    values = _confusion_figures(*(np.array(c) for c in cells))

    def statistic(positives: np.ndarray, negatives: np.ndarray) -> np.ndarray:
        return _confusion_figures(
            positives[:, 0], positives[:, 1], negatives[:, 0], negatives[:, 1]
        )

    boot = resampled(statistic, [np.array(cells[:2]), np.array(cells[2:])], data)
    note = (
        f"held-out predictions of {k}-fold cross-validation, each fold's threshold fitted on "
        "the other folds; interval: bootstrap of the held-out predictions (thresholds fixed)"
    )
    if pred.all() or not pred.any():
        note += (
            f"; every row was predicted {str(bool(pred[0])).lower()}: on no training folds did "
            "a cut beat predicting one label, so these figures sit at chance with no spread"
        )
    bounds = [(0.0, 1.0), (0.0, 1.0), (-1.0, 1.0)]
    sizes = (n, min(n_pos, n - n_pos))
    figures = boot_figures(names, [float(v) for v in values], boot, sizes, data, bounds, note)
    shown = cuts * data.sign
    rule = ">=" if data.sign > 0 else "<="
    listed = ", ".join(f"{t:.4g}" for t in shown)
    why = f"median of the fold thresholds ({listed}); score {rule} threshold predicts true"
    return [*figures, Figure("threshold", float(np.median(shown)), n=n, method="folds", note=why)]


def stratified_folds(y: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """A fold number (0..folds-1) per row, each label class dealt round the folds in a random
    order, so every fold holds both classes in about the data's proportion."""
    fold = np.empty(y.size, dtype=np.int64)
    start = 0
    for cls in (False, True):
        idx = np.flatnonzero(y == cls)
        rng.shuffle(idx)
        fold[idx] = (np.arange(idx.size) + start) % folds
        start = (start + idx.size) % folds
    return fold


def fit_threshold(s: np.ndarray, y: np.ndarray) -> float:
    """The cut maximising balanced accuracy of "s >= cut predicts true" on these rows: a
    midpoint between distinct scores (or -inf / inf: everything true / false), the middle one
    when several tie."""
    y = y.astype(bool)
    levels, code = np.unique(s, return_inverse=True)
    pos = np.bincount(code[y], minlength=levels.size)
    neg = np.bincount(code[~y], minlength=levels.size)
    n_pos, n_neg = max(int(pos.sum()), 1), max(int(neg.sum()), 1)
    # Candidate k predicts true for the levels k.. (k = 0: all true; k = levels: none).
    true_pos = pos.sum() - np.concatenate([[0], np.cumsum(pos)])
    true_neg = np.concatenate([[0], np.cumsum(neg)])
    balanced = (true_pos / n_pos + true_neg / n_neg) / 2
    best = np.flatnonzero(balanced >= balanced.max() - 1e-12)
    cuts = np.concatenate([[-np.inf], (levels[:-1] + levels[1:]) / 2, [np.inf]])
    return float(cuts[best[(best.size - 1) // 2]])


def cross_validated_predictions(
    s: np.ndarray, y: np.ndarray, folds: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out predictions: for each fold, `fit_threshold` on the other folds' rows, applied
    to this fold's. Returns (prediction per row, fold per row, threshold per fold)."""
    y = y.astype(bool)
    fold = stratified_folds(y, folds, rng)
    pred = np.zeros(s.size, dtype=bool)
    cuts = np.empty(folds)
    for k in range(folds):
        held = fold == k
        cuts[k] = fit_threshold(s[~held], y[~held])
        pred[held] = s[held] >= cuts[k]
    return pred, fold, cuts


# ------------------------------------------------------------------------------ ordinal


def kendall_tau_b(table: np.ndarray) -> np.ndarray:
    """Kendall's tau-b from count tables (..., x levels ascending, y levels ascending)."""
    t = np.asarray(table, dtype=np.float64)
    ge = t[..., ::-1, ::-1].cumsum(-2).cumsum(-1)[..., ::-1, ::-1]  # x >= i and y >= j
    above = np.zeros_like(t)
    above[..., :-1, :-1] = ge[..., 1:, 1:]  # x > i and y > j
    ge_le = t[..., ::-1, :].cumsum(-2)[..., ::-1, :].cumsum(-1)  # x >= i and y <= j
    below = np.zeros_like(t)
    below[..., :-1, 1:] = ge_le[..., 1:, :-1]  # x > i and y < j
    score = (t * above).sum((-2, -1)) - (t * below).sum((-2, -1))
    n = t.sum((-2, -1))
    rows, cols = t.sum(-1), t.sum(-2)
    pairs = n * (n - 1) / 2
    tied_x = (rows * (rows - 1) / 2).sum(-1)
    tied_y = (cols * (cols - 1) / 2).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return score / np.sqrt((pairs - tied_x) * (pairs - tied_y))


def spearman(table: np.ndarray) -> np.ndarray:
    """Spearman's rho (Pearson of the mid-ranks) from count tables (..., x levels, y levels)."""
    t = np.asarray(table, dtype=np.float64)
    rows, cols = t.sum(-1), t.sum(-2)
    n = rows.sum(-1)
    rank_x = np.cumsum(rows, -1) - (rows - 1) / 2
    rank_y = np.cumsum(cols, -1) - (cols - 1) / 2
    dx = rank_x - ((rows * rank_x).sum(-1) / n)[..., None]
    dy = rank_y - ((cols * rank_y).sum(-1) / n)[..., None]
    cov = np.einsum("...i,...ij,...j->...", dx, t, dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        return cov / np.sqrt((rows * dx**2).sum(-1) * (cols * dy**2).sum(-1))


def _pairs_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b pair by pair, in blocks: for tables too large to hold."""
    n, block = x.size, max(1, BLOCK_ELEMENTS // max(1, x.size))
    score = tied_x = tied_y = 0.0
    for start in range(0, n, block):
        sx = np.sign(x[start : start + block, None] - x[None, :])
        sy = np.sign(y[start : start + block, None] - y[None, :])
        score += float((sx * sy).sum())
        tied_x += float((sx == 0).sum())
        tied_y += float((sy == 0).sum())
    pairs = n * (n - 1) / 2
    # Every pair was seen twice, and each row with itself once (a tie).
    denominator = (pairs - (tied_x - n) / 2) * (pairs - (tied_y - n) / 2)
    return score / 2 / math.sqrt(denominator) if denominator > 0 else math.nan


def _pairs_spearman(x: np.ndarray, y: np.ndarray) -> float:
    def midranks(v: np.ndarray) -> np.ndarray:
        _, code, counts = np.unique(v, return_inverse=True, return_counts=True)
        return (np.cumsum(counts) - (counts - 1) / 2)[code]

    rx, ry = midranks(x), midranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def _ordinal(x: np.ndarray, y: np.ndarray, data: Data) -> list[Figure]:
    n = x.size
    names = ("spearman", "kendall_tau_b")
    if n < 3 or np.unique(x).size < 2 or np.unique(y).size < 2:
        why = f"needs at least 3 rows and two distinct scores and labels ({n} rows)"
        return [Figure(name, None, n=n, note=why) for name in names]
    ux, cx = np.unique(x, return_inverse=True)
    uy, cy = np.unique(y, return_inverse=True)
    shape = (ux.size, uy.size)
    cells, counts = np.unique(cx * uy.size + cy, return_counts=True)
    if ux.size * uy.size <= _TABLE_MAX_CELLS:
        table = np.zeros(ux.size * uy.size)
        table[cells] = counts
        table = table.reshape(shape)
        values = [float(spearman(table)), float(kendall_tau_b(table))]
    else:
        values = [_pairs_spearman(x, y), _pairs_tau_b(x, y)]
    note = f"{shape[0]} distinct scores x {shape[1]} distinct labels"
    if ux.size * uy.size > BOOTSTRAP_MAX_CELLS:
        return _fisher_z(names, values, n, data.level, note)

    def statistic(drawn: np.ndarray) -> np.ndarray:
        tables = np.zeros((drawn.shape[0], shape[0] * shape[1]))
        tables[:, cells] = drawn
        tables = tables.reshape(-1, *shape)
        return np.stack([spearman(tables), kendall_tau_b(tables)])

    boot = resampled(statistic, [counts.astype(np.float64)], data, width=shape[0] * shape[1])
    return boot_figures(names, values, boot, (n, n), data, [(-1.0, 1.0)] * 2, note)


def _fisher_z(
    names: Sequence[str], values: Sequence[float], n: int, level: float, note: str
) -> list[Figure]:
    """Intervals on Fisher's z scale for tables too large to bootstrap (module docstring)."""
    q = NormalDist().inv_cdf(1 - (1 - level) / 2)
    out = []
    for name, r in zip(names, values, strict=True):
        if not math.isfinite(r) or n < 5 or abs(r) >= 1:
            out.append(Figure(name, r, None, None, n, "none", note))
            continue
        se = (
            math.sqrt(0.437 / (n - 4))
            if name == "kendall_tau_b"
            else math.sqrt((1 + r * r / 2) / (n - 3))
        )
        z = math.atanh(r)
        out.append(
            Figure(name, r, math.tanh(z - q * se), math.tanh(z + q * se), n, "fisher-z", note)
        )
    return out


# ------------------------------------------------------------------------------ pairwise


def _pairwise(a: np.ndarray, b: np.ndarray, pref: np.ndarray, data: Data) -> list[Figure]:
    """Each figure is a mean over pairs (of 1 right / 0 wrong, 1 tie / 0 not, or 1 / 0.5 / 0),
    so `ragframe.stats.mean_interval` gives its interval (exact bound at 0 or 1)."""
    n_all = a.size
    people_tied = pref == 0
    judge = np.sign(b - a)[~people_tied]
    people = np.sign(pref)[~people_tied]
    right = judge == people
    tied = judge == 0
    counts = f"{int(right.sum())} right, {int((~right & ~tied).sum())} wrong"
    per_pair = (
        (
            "label_ties",
            people_tied,
            f"{int(people_tied.sum())} of {n_all} pairs tied by people: left out below",
        ),
        ("accuracy", right[~tied], f"{counts}; {int(tied.sum())} judge ties left out"),
        ("judge_ties", tied, f"{int(tied.sum())} of {judge.size} pairs scored equal by the judge"),
        ("accuracy_ties_half", right + 0.5 * tied, "judge ties counted half right"),
    )
    figures = []
    for name, values, note in per_pair:
        got = mean_interval(values.astype(np.float64), data.level, seed=data.seed)
        figures.append(Figure(name, got.mean, got.low, got.high, got.n, got.method, note))
    return figures
