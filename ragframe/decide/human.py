"""What people would say about the whole log: the mean human label over every scored row, from
the judge's scores on all N rows and a person's labels on n of them (`human_estimate`).

The estimate is PPI++ (`ragframe.decide.ppi`, whose docstring has the formulas): the judge's
mean over the N scored rows, corrected by the judge's bias measured on the n labelled rows, so
it is unbiased whatever the judge gets wrong. Three methods are reported: "ppi++" (the estimate
to quote), "labels_only" (the labels' mean with a Clopper-Pearson interval, exact at any n and
rate: ten labels all 0 give [0, 0.308]) and "judge_only": mean(f) over N +- q * sd(f) /
sqrt(N), beside the judge's measured bias mean(f - Y) on the labelled rows with its interval: a
judge-only interval is about the judge, not people, and misses the human rate by the bias (the
reason this module exists). With fewer than 10 labels of the rarer kind (always below 20
labels) the ppi++ interval is widened to hold the labels-only one, and its note says so
(`ragframe.decide.ppi`, "Rare labels"): its normal interval covered 41 % at ten labels and a
5 % rate. `effective_n` = n * var(labels-only) / var(PPI++): how many labels the labels-only
estimate would need for the PPI++ interval's width (the judge's scores are worth effective_n - n
labels); None when the interval was widened.

Which rows: labelled rows are a subset of the scored log, joined on `on`. The "unlabelled" term
runs over all N scored rows, the labelled ones included (ppi_py's Yhat_unlabeled is then the
whole log). The estimate is unbiased for the log's mean label when the labelled rows are a
uniform random sample of it; the interval, whose first variance term counts the N rows as a
sample of a larger population, is a little conservative for the log itself (a finite-population
correction would narrow it) and nominal for the process the log was drawn from.

Stratified labels: a draw with unequal inclusion probabilities (`ragframe label-sheet
--stratify` writes `sample_weight` = 1 / inclusion probability) weighs each labelled row by its
weight, normalised to mean 1 (ppi_py's `w`; a Hajek-normalised Horvitz-Thompson weight), in the
labelled term and in lam; rows of equal weight are taken as one stratum for the variance (the
larger of the stratified and the linearised variance: `ragframe.decide.ppi`, "Weights").
`weight="auto"` uses a `sample_weight` column when the labels have it.

Scores: f must estimate the probability that the label is true. A lower-is-better metric
(hallucination) is turned around (1 - score) first; a calibration (`ragframe.decide.calibration`)
maps a raw score to that probability, which helps the judge-only figure and lam, never validity.
Rows whose score is null are left out of both terms and counted (`n_null_scores`, and a note):
a judge that fails on hard rows leaves those rows out of what is estimated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

import numpy as np
import polars as pl

from ragframe.decide.labels import labelled, weight_column
from ragframe.decide.ppi import (
    MIN_EACH,
    Quantile,
    human_intervals,
    normal_quantile,
    off_mode,
    quantile,
)
from ragframe.decide.summarize import checked_scores, direction_of, load_scored, score_values
from ragframe.errors import ConfigError, InputError

__all__ = [
    "COLUMNS",
    "human_estimate",
    "human_estimate_difference",
    "labelled_scores",
    "labels_needed",
]

#: `human_estimate`'s columns after the group columns.
COLUMNS = (
    "metric",
    "label",
    "method",
    "estimate",
    "ci_low",
    "ci_high",
    "level",
    "se",
    "n_labelled",
    "n_scored",
    "n_null_scores",
    "lam",
    "effective_n",
    "bias",
    "bias_ci_low",
    "bias_ci_high",
    "note",
)


# ------------------------------------------------------------------------------ reading


def _scores(
    scored: Any, score: str, on: str, groups: list[str], calibration: Any
) -> tuple[pl.DataFrame, str]:
    """The scored rows: `on`, the groups and f (the judge's estimate of P(label true))."""
    lazy, meta, where = load_scored(scored)
    schema = lazy.collect_schema()
    if on == "row_index" and on not in schema:
        lazy = lazy.with_row_index("row_index")
        schema = lazy.collect_schema()
    for name in (score, on, *groups):
        if name not in schema:
            hint = (
                "; a label sheet drawn from a file without ids keys its rows by row_index: "
                "pass on='row_index' (--on row_index)"
                if name == on
                else ""
            )
            raise InputError(f"no column {name!r} in {where}; the columns are {list(schema)}{hint}")
    if not (schema[score].is_numeric() or schema[score] == pl.Boolean):
        raise InputError(f"score column {score!r} in {where} is {schema[score]}, not a number")
    # The score checked in [0, 1] as it is read.
    frame = checked_scores(lazy, [on, *groups, score_values(score)], [score], where)
    if calibration is not None:
        # The check `apply_calibration` makes: a map fitted to another judge or prompt warns.
        calibration.check_provenance(meta, where)
        frame = frame.with_columns(
            pl.Series(score, calibration.predict(frame.get_column(score).to_numpy()))
        )
        frame = frame.with_columns(pl.col(score).fill_nan(None))
    elif direction_of(score, meta) == "lower":
        frame = frame.with_columns((1.0 - pl.col(score)).alias(score))
    dupes = frame.filter(pl.col(on).is_duplicated()).get_column(on)
    if dupes.len():
        raise InputError(
            f"{dupes.n_unique()} keys appear more than once in {where}'s {on!r} column "
            f"(e.g. {dupes.head(3).to_list()}); `on` must name one row each"
        )
    return frame, where


def _check(level: float, on: str, score: str, label: str) -> None:
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    for name, value in (("on", on), ("score", score), ("label", label)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{name} must name a column, not {value!r}")


# ------------------------------------------------------------------------------ estimates

#: The ppi++ row's note when its interval was widened to hold the labels-only one.
WIDENED_NOTE = (
    f"fewer than {MIN_EACH} labels of the rarer kind, or of rows where the judge's error "
    "differs from its most common value; with weighted labels, also a stratum whose labels all "
    f"agree, or a rarer kind whose Kish effective count is below {MIN_EACH}: PPI++'s normal "
    "interval cannot be trusted there, so it is widened to hold the labels-only "
    "(Clopper-Pearson) interval"
)


def _rows(
    y: np.ndarray,
    fl: np.ndarray,
    fa: np.ndarray,
    w: np.ndarray | None,
    level: float,
    lam: float | None,
    interval: Quantile,
) -> list[dict[str, Any]]:
    """The three methods' rows for one group (figures only; the caller adds the counts)."""
    n, big_n = y.size, fa.size
    z_judge = quantile(level, big_n, interval) if big_n >= 2 else normal_quantile(level)
    if n < 2:
        return _too_few_labels(y, fa)
    found = human_intervals(y, fl, fa, lam=lam, w=w, level=level, interval=interval)
    ppi, only = found.ppi, found.labels_only
    ppi_var, only_var = float(ppi.se) ** 2, float(only.se) ** 2
    widened = bool(found.widened)
    return [
        {
            "method": "ppi++",
            "estimate": float(ppi.estimate),
            "ci_low": float(ppi.low),
            "ci_high": float(ppi.high),
            "se": float(ppi.se),
            "lam": float(ppi.lam),
            "effective_n": n * only_var / ppi_var if ppi_var > 0 and not widened else None,
            "note": WIDENED_NOTE if widened else None,
        },
        _judge_only(y, fl, fa, w, quantile(level, n, interval), z_judge),
        {
            "method": "labels_only",
            "estimate": float(only.estimate),
            "ci_low": float(only.low),
            "ci_high": float(only.high),
            "se": float(only.se),
            "lam": 0.0,
        },
    ]


def _too_few_labels(y: np.ndarray, fa: np.ndarray) -> list[dict[str, Any]]:
    """The rows of a group with fewer than 2 labels: means only, no intervals."""
    n, big_n = y.size, fa.size
    note = f"{n} labelled rows with a score: PPI needs at least 2"
    judge = float(fa.mean()) if big_n else None
    empty: dict[str, Any] = {"estimate": None, "ci_low": None, "ci_high": None, "se": None}
    return [
        {"method": "ppi++", **empty, "note": note},
        {"method": "judge_only", **empty, "estimate": judge, "note": note},
        {"method": "labels_only", **empty, "estimate": float(y.mean()) if n else None},
    ]


def _judge_only(
    y: np.ndarray, fl: np.ndarray, fa: np.ndarray, w: np.ndarray | None, z: float, z_judge: float
) -> dict[str, Any]:
    """The judge's mean over N with its interval, and its bias mean(f - y) on the labels."""
    n, big_n = y.size, fa.size
    wn = np.ones(n) if w is None else w / w.sum() * n
    gap = wn * (fl - y)
    bias, bias_se = float(gap.mean()), float(gap.std() / math.sqrt(n))
    judge_mean = float(fa.mean())
    judge_se = float(fa.std(ddof=1) / math.sqrt(big_n)) if big_n > 1 else 0.0
    return {
        "method": "judge_only",
        "estimate": judge_mean,
        "ci_low": judge_mean - z_judge * judge_se,
        "ci_high": judge_mean + z_judge * judge_se,
        "se": judge_se,
        "bias": bias,
        "bias_ci_low": bias - z * bias_se,
        "bias_ci_high": bias + z * bias_se,
        "note": "the judge's mean: its interval is about the judge, not people; "
        "bias = mean(judge - label) on the labelled rows",
    }


def _table(rows: list[dict[str, Any]], group_schema: pl.Schema, low: float) -> pl.DataFrame:
    schema: dict[str, Any] = {
        **group_schema,
        "metric": pl.String,
        "label": pl.String,
        "method": pl.String,
        **{c: pl.Float64 for c in ("estimate", "ci_low", "ci_high", "level", "se")},
        "n_labelled": pl.Int64,
        "n_scored": pl.Int64,
        "n_null_scores": pl.Int64,
        **{c: pl.Float64 for c in ("lam", "effective_n", "bias", "bias_ci_low", "bias_ci_high")},
        "note": pl.String,
    }
    table = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
    # A mean label lives in [0, 1] (a difference in [-1, 1]); the interval is clipped to it.
    return table.with_columns(
        pl.col("ci_low").clip(low, 1.0),
        pl.col("ci_high").clip(low, 1.0),
    )


def _estimate_groups(
    frame: pl.DataFrame,
    groups: list[str],
    label: str,
    weight: str | None,
    common: dict[str, Any],
    level: float,
    lam: float | None,
    interval: Quantile,
    low: float = 0.0,
) -> pl.DataFrame:
    """`frame`: every scored row (`_f` the score, `label` null where not labelled)."""
    parts = (
        frame.sort(groups, nulls_last=True).partition_by(groups, maintain_order=True, as_dict=True)
        if groups
        else {(): frame}
    )
    rows: list[dict[str, Any]] = []
    for key, part in parts.items():
        null_scores = int(part.get_column("_f").null_count())
        scored = part.filter(pl.col("_f").is_not_null())
        labelled = scored.filter(pl.col(label).is_not_null())
        lost = part.filter(pl.col("_f").is_null() & pl.col(label).is_not_null()).height
        y = labelled.get_column(label).to_numpy()
        fl = labelled.get_column("_f").to_numpy()
        fa = scored.get_column("_f").to_numpy()
        w = labelled.get_column(weight).to_numpy() if weight else None
        notes = []
        if null_scores:
            notes.append(
                f"{null_scores} rows with a null score left out of N"
                + (f" ({lost} of them labelled)" if lost else "")
            )
        if w is not None:
            notes.append(f"labelled rows weighted by {weight!r} (a stratified draw)")
        counts = {
            **dict(zip(groups, key, strict=True)),
            **common,
            "level": float(level),
            "n_labelled": y.size,
            "n_scored": fa.size,
            "n_null_scores": null_scores,
        }
        for row in _rows(y, fl, fa, w, level, lam, interval):
            said = [x for x in (row.get("note"), *notes) if x]
            rows.append({**counts, **row, "note": "; ".join(said) or None})
    return _table(rows, frame.select(groups).schema, low)


def human_estimate(
    scored: Any,
    labels: Any,
    score: str = "faithfulness",
    label: str = "faithful",
    on: str = "id",
    by: str | Sequence[str] | None = None,
    *,
    level: float = 0.95,
    weight: str | None = "auto",
    calibration: Any = None,
    lam: float | None = None,
    interval: Quantile = "t",
) -> pl.DataFrame:
    """The mean human `label` over every scored row, one table row per (group and) method:
    "ppi++" (the estimate to quote), "judge_only" (the judge's mean, with its measured bias) and
    "labels_only" (module docstring for each). Columns: the group columns, then COLUMNS.

    `scored`: a frame, `ragframe.run`'s result, or a scored file (a score outside [0, 1] is
    an InputError naming its column and row). `labels`: a frame or a file (a filled label
    sheet's CSV) holding `on` and `label` (0 / 1 or Boolean; empty is not labelled).
    `weight`: the labels' column of 1 / inclusion probability for a stratified draw ("auto":
    `sample_weight` if present; None: a uniform draw). `calibration`: a `Calibration`
    applied to the score first. `lam`: fix lam (1: classical PPI). `interval`:
    "t" or "normal" (the quantile; "normal" is ppi_py's interval)."""
    _check(level, on, score, label)
    groups = [by] if isinstance(by, str) else list(by or [])
    weight = weight_column(weight, labels)
    joined, unmatched, where = _scored_and_labelled(
        scored, labels, score, label, on, groups, calibration, weight
    )
    if unmatched:
        raise InputError(
            f"{unmatched} labelled keys are not in {where}'s {on!r} column; labels must be rows "
            "of the scored log (was the sheet drawn from another file?)"
        )
    joined = joined.rename({score: "_f"})
    return _estimate_groups(
        joined, groups, label, weight, {"metric": score, "label": label}, level, lam, interval
    )


def _scored_and_labelled(
    scored: Any,
    labels: Any,
    score: str,
    label: str,
    on: str,
    groups: list[str],
    calibration: Any,
    weight: str | None = None,
) -> tuple[pl.DataFrame, int, str]:
    """Every scored row with its label (null where not labelled), how many labelled keys the
    scored log lacks, and where the scores came from."""
    frame, where = _scores(scored, score, on, groups, calibration)
    joined, unmatched = _join(frame, labelled(labels, on, label, weight), on, label, where)
    return joined, unmatched, where


def _join(
    frame: pl.DataFrame, labelled: pl.DataFrame, on: str, label: str, where: str
) -> tuple[pl.DataFrame, int]:
    if label in frame.columns:
        frame = frame.drop(label)
    try:
        keys = labelled.with_columns(pl.col(on).cast(frame.schema[on]))
    except pl.exceptions.PolarsError as exc:
        raise InputError(
            f"the labels' {on!r} values cannot be read as {where}'s {frame.schema[on]}: {exc}"
        ) from exc
    unmatched = keys.join(frame.select(on), on=on, how="anti").height
    return frame.join(keys, on=on, how="left"), unmatched


def human_estimate_difference(
    scored_a: Any,
    scored_b: Any,
    labels_a: Any,
    labels_b: Any,
    score: str = "faithfulness",
    label: str = "faithful",
    on: str = "id",
    *,
    level: float = 0.95,
    lam: float | None = None,
    interval: Quantile = "t",
) -> pl.DataFrame:
    """The mean human label of system b minus system a on the same questions: PPI++ on the
    per-row differences (label_b - label_a against score_b - score_a; paired, so what the two
    systems share cancels). Rows scored by both systems (joined on `on`) make N; rows labelled
    on both sides make n (labels of one side only are left out, counted in the note). Same
    columns as `human_estimate`; `estimate` > 0 means people would rate b higher."""
    _check(level, on, score, label)
    fa, where_a = _scores(scored_a, score, on, [], None)
    fb, where_b = _scores(scored_b, score, on, [], None)
    both = fa.join(fb, on=on, how="inner", suffix="_b")
    if both.height == 0:
        raise InputError(
            f"no {on!r} key is in both {where_a} and {where_b}: a paired difference needs the "
            "same questions scored by both systems"
        )
    diff = both.select(on, (pl.col(f"{score}_b") - pl.col(score)).alias("_f"))
    la, lb = labelled(labels_a, on, label), labelled(labels_b, on, label)
    pair = la.join(lb, on=on, how="inner", suffix="_b")
    one_side = la.height + lb.height - 2 * pair.height
    dy = pair.select(on, (pl.col(f"{label}_b") - pl.col(label)).alias(label))
    joined, unmatched = _join(diff, dy, on, label, "the rows both systems scored")
    if unmatched:
        raise InputError(
            f"{unmatched} keys labelled on both sides are not scored by both systems; labels "
            "must be rows of the scored logs"
        )
    table = _estimate_groups(
        joined,
        [],
        label,
        None,
        {"metric": f"{score} (b - a)", "label": label},
        level,
        lam,
        interval,
        -1.0,
    )
    if one_side:
        note = f"{one_side} labels on one side only left out"
        table = table.with_columns(
            pl.when(pl.col("note").is_null())
            .then(pl.lit(note))
            .otherwise(pl.col("note") + "; " + note)
            .alias("note")
        )
    return table


# ------------------------------------------------------------------------------ power


def labels_needed(
    width: float,
    y: Any,
    f: Any,
    *,
    n_scored: int | None = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """How many labels a PPI++ interval of total `width` needs, from a first batch of labels
    `y` and the judge's scores `f` on those rows (power analysis).

    With lam at its optimum, var(PPI++) ~ var(Y) * (1 - rho^2) / n + lam^2 var(f) / N, rho the
    judge's correlation with the labels measured on the batch (ppi_py's `ppi_corr`, Broska et
    al. 2024). So n = z^2 var(Y) (1 - rho^2) / (h^2 - z^2 lam^2 var(f) / N), h = width / 2;
    labels-only needs z^2 var(Y) / h^2. These are planning figures: rho and var(Y) come from a
    small batch and carry its error (quote the batch's n beside them). `n_needed` is None when
    N scored rows cannot reach the width however many are labelled (or would need more labels
    than there are rows).

    Bounds: `n_needed` is never below `n_floor`: 2 * MIN_EACH, and enough rows for MIN_EACH
    labels of the rarer kind and MIN_EACH rows where the judge's error departs from its most
    common value, at the batch's rates (below that the PPI++ interval is widened to the
    labels-only Clopper-Pearson one, `ragframe.decide.ppi`); above the floor, never more than
    labels-only's figure (lam = 0 is one of PPI++'s choices). A judge that matched every label
    of a small batch is not taken to make labels unnecessary (it was planned at 0 labels)."""
    y = np.asarray(y, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    keep = ~(np.isnan(y) | np.isnan(f))
    y, f = y[keep], f[keep]
    if not (isinstance(width, float | int) and 0 < width < 2):
        raise ConfigError(f"width must be a positive interval width (e.g. 0.1), not {width!r}")
    if y.size < 3:
        raise InputError(f"a power calculation needs at least 3 labelled rows, not {y.size}")
    z = normal_quantile(level)
    half = width / 2
    var_y, var_f = float(y.var()), float(f.var())
    cov = float(((y - y.mean()) * (f - f.mean())).mean())
    rho = cov / math.sqrt(var_y * var_f) if var_y > 0 and var_f > 0 else 0.0
    rho = min(max(rho, 0.0), 1 - 1 / y.size)  # a negative correlation: lam clips to 0
    lam = cov / var_f if var_f > 0 and rho > 0 else 0.0
    lam = min(max(lam, 0.0), 1.0)
    # A batch whose labels all agree says little of var(Y): take at least the variance of a
    # rate one label off the batch's (the rule-of-three idea), so the figure is not 0.
    rate = min(max(float(y.mean()), 1 / (y.size + 1)), y.size / (y.size + 1))
    var_y = max(var_y, rate * (1 - rate))
    only = math.ceil(z * z * var_y / (half * half))
    # Rows where the judge's error y - lam * f departs from its most common value: a judge that
    # matched every label of the batch has none, and PPI++ then never narrows (its interval is
    # held to the labels-only one), so it needs what labels alone need.
    off = int(off_mode(y - lam * f))
    floor_ = math.ceil(max(2 * MIN_EACH, MIN_EACH / min(rate, 1 - rate)))
    floor_ = max(floor_, math.ceil(MIN_EACH * y.size / off)) if off else max(floor_, only)
    spare = z * z * lam * lam * var_f / n_scored if n_scored else 0.0
    room = half * half - spare
    resid = var_y - (2 * lam * cov - lam * lam * var_f)
    # The floor wins over labels-only's count: below it PPI++ is widened to Clopper-Pearson,
    # which a Wald count of labels alone does not reach (rate 0.5, width 0.5: 16 < 20).
    needed = max(min(math.ceil(z * z * resid / room), only), floor_) if room > 0 else None
    if needed is not None and n_scored is not None and needed > n_scored:
        needed = None
    return {
        "width": float(width),
        "level": float(level),
        "n_batch": int(y.size),
        "correlation": rho,
        "lam": lam,
        "n_needed": needed,
        "n_labels_only": only,
        "n_floor": floor_,
        "n_scored": n_scored,
    }


class LabelledOptions(TypedDict, total=False):
    """Which score and label `labelled_scores` reads, as `human_estimate` names them."""

    score: str
    label: str
    on: str
    calibration: Any


def labelled_scores(
    scored: Any, labels: Any, **options: Unpack[LabelledOptions]
) -> tuple[np.ndarray, np.ndarray, int]:
    """(labels, the judge's scores on those rows, N scored rows) as `human_estimate` reads
    them, for `labels_needed` after a first batch; `score` (default faithfulness), `label`
    (faithful), `on` (id) and `calibration` as `human_estimate` takes them."""
    score, label = options.get("score", "faithfulness"), options.get("label", "faithful")
    on, calibration = options.get("on", "id"), options.get("calibration")
    joined, _, _ = _scored_and_labelled(scored, labels, score, label, on, [], calibration)
    scored_rows = joined.filter(pl.col(score).is_not_null())
    both = scored_rows.filter(pl.col(label).is_not_null())
    return (
        both.get_column(label).to_numpy(),
        both.get_column(score).to_numpy(),
        scored_rows.height,
    )
