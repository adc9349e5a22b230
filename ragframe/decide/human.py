"""What people would say about the whole log: the mean human label over every scored row, from
the judge's scores on all N rows and a person's labels on n of them (`human_estimate`).

Prediction-powered inference, power-tuned (PPI++; Angelopoulos, Duchi, Zrnic 2023). With f the
judge's score (on the label's scale, see "Scores" below) and Y the label:

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
takes the normal quantile and is ppi_py's interval exactly. Labels-only is the same with lam = 0
(a Wald interval, with the same quantile); judge-only is mean(f) over N +- q * sd(f) / sqrt(N),
beside the judge's measured bias mean(f - Y) on the labelled rows with its interval: a
judge-only interval is about the judge, not about people, and misses the human rate by the
bias (the reason this module exists).
`effective_n` = n * var(labels-only) / var(PPI++): how many labels the labels-only estimate
would need for the PPI++ interval's width (the judge's scores are worth effective_n - n labels).

Which rows: labelled rows are a subset of the scored log, joined on `on`. The "unlabelled" term
runs over all N scored rows, the labelled ones included (ppi_py's Yhat_unlabeled is then the
whole log). The estimate is unbiased for the log's mean label when the labelled rows are a
uniform random sample of it; the interval, whose first variance term counts the N rows as a
sample of a larger population, is a little conservative for the log itself (a finite-population
correction would narrow it) and nominal for the process the log was drawn from.

Stratified labels: a draw with unequal inclusion probabilities (`ragframe label-sheet
--stratify` writes `sample_weight` = 1 / inclusion probability) weighs each labelled row by its
weight, normalised to mean 1 (ppi_py's `w`; a Hajek-normalised Horvitz-Thompson weight), in the
labelled term, in lam and in the variance; the variance treats the weighted rows as independent
draws, which ignores the gain from stratifying (conservative). `weight="auto"` uses a
`sample_weight` column when the labels have one.

Scores: f must estimate the probability that the label is true. A lower-is-better metric
(hallucination) is turned around (1 - score) first; a calibration (`ragframe.decide.calibration`)
maps a raw score to that probability, which helps the judge-only figure and lam, never validity.
Rows whose score is null are left out of both terms and counted (`n_null_scores`, and a note):
a judge that fails on hard rows leaves those rows out of what is estimated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import polars as pl

from ragframe.decide.summarize import direction_of, load_scored
from ragframe.errors import ConfigError, InputError
from ragframe.stats import t_quantile

Quantile = Literal["t", "normal"]

__all__ = [
    "COLUMNS",
    "PPIResult",
    "human_estimate",
    "human_estimate_difference",
    "labelled_scores",
    "labels_needed",
    "ppi_mean",
    "read_labels",
]

#: The label-sheet column that holds a stratified draw's weights (1 / inclusion probability).
WEIGHT_COLUMN = "sample_weight"

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

_TRUE = {"1", "1.0", "true", "t", "yes", "y"}
_FALSE = {"0", "0.0", "false", "f", "no", "n"}


@dataclass(frozen=True)
class PPIResult:
    """Arrays of shape (...,) for a batch of problems (scalars as 0-d arrays): the estimate,
    its standard error, the lam used and the interval at `level` (unclipped)."""

    estimate: np.ndarray
    se: np.ndarray
    lam: np.ndarray
    low: np.ndarray
    high: np.ndarray


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def _quantile(level: float, n: int, interval: Quantile) -> float:
    if interval == "t":
        return t_quantile(0.5 + level / 2, n - 1)
    if interval == "normal":
        return _z(level)
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
        first = fa.mean(-1, keepdims=True) + (wn * (y - fl)).mean(-1, keepdims=True)
        g = wn * (y - first)
        gh = wn * (fl - first)
        ghu = fa - first
        cov = ((g - g.mean(-1, keepdims=True)) * (gh - gh.mean(-1, keepdims=True))).mean(-1)
        var = np.concatenate([gh, ghu], axis=-1).var(axis=-1, ddof=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = np.where(var > 0, cov / ((1 + n / big_n) * var), 0.0)
        lam_a = np.clip(raw, 0.0, 1.0)
    else:
        lam_a = np.broadcast_to(np.float64(lam), y.shape[:-1])
    lam_k = np.asarray(lam_a)[..., None]
    rect = wn * (y - lam_k * fl)
    estimate = (lam_k * fa).mean(-1) + rect.mean(-1)
    se = np.sqrt((lam_k * fa).var(-1) / big_n + rect.var(-1) / n)
    z = _quantile(level, n, interval)
    return PPIResult(estimate, se, np.asarray(lam_a), estimate - z * se, estimate + z * se)


# ------------------------------------------------------------------------------ reading


def read_labels(labels: Any, on: str, label: str, weight: str | None = None) -> pl.DataFrame:
    """The labels as a frame of `on`, `label` (Float64, 0 / 1, null where not filled in) and,
    when `weight` is named, that weight column: from a frame, or a CSV / Parquet / JSON Lines
    file such as a filled label sheet. A label reads 1 / 0, true / false, yes / no (any case);
    an empty cell is null (not labelled yet)."""
    if isinstance(labels, pl.LazyFrame):
        frame = labels.collect()
    elif isinstance(labels, pl.DataFrame):
        frame = labels
    elif isinstance(labels, str | Path):
        path = Path(labels)
        if not path.exists():
            raise InputError(f"no labels file {str(path)!r}")
        suffix = path.suffix.lower()
        if suffix == ".csv":
            frame = pl.read_csv(path, infer_schema_length=0)  # all strings: parsed below
        elif suffix == ".parquet":
            frame = pl.read_parquet(path)
        elif suffix in (".jsonl", ".ndjson"):
            frame = pl.read_ndjson(path)
        else:
            raise InputError(
                f"cannot read labels from {str(path)!r}: use a .csv (a filled label sheet), "
                ".parquet or .jsonl file"
            )
    else:
        raise InputError(
            f"cannot read labels from a {type(labels).__name__}: pass a polars frame or the "
            "path of a CSV / Parquet / JSON Lines file"
        )
    where = "the labels"
    for name in (on, label, *([weight] if weight else [])):
        if name not in frame.columns:
            raise InputError(
                f"no column {name!r} in {where}; its columns are {frame.columns} (name the "
                "key with on= / --on and the label with label= / --label-column)"
            )
    column = frame.get_column(label)
    if column.dtype == pl.Boolean or column.dtype.is_numeric():
        values = column.cast(pl.Float64)
    else:
        text = column.cast(pl.String).str.strip_chars().str.to_lowercase()
        values = (
            pl.when(text.is_in(list(_TRUE)))
            .then(1.0)
            .when(text.is_in(list(_FALSE)))
            .then(0.0)
            .otherwise(None)
        )
        values = frame.select(values.alias(label)).get_column(label)
        bad = frame.filter(
            text.is_not_null() & (text != "") & ~text.is_in(list(_TRUE | _FALSE))
        ).get_column(label)
        if bad.len():
            raise InputError(
                f"label column {label!r} holds {bad.unique().head(5).to_list()}; a label is "
                "1 / 0, true / false or yes / no (an empty cell: not labelled)"
            )
    other = values.drop_nulls().filter(~values.drop_nulls().is_in([0.0, 1.0]))
    if other.len():
        raise InputError(
            f"label column {label!r} holds {other.unique().head(5).to_list()}; human_estimate "
            "needs a Boolean or 0 / 1 label (map graded labels to true / false first)"
        )
    out = [frame.get_column(on).alias(on), values.alias(label)]
    if weight:
        out.append(frame.get_column(weight).cast(pl.Float64).alias(weight))
    result = pl.DataFrame(out)
    dupes = result.filter(pl.col(on).is_duplicated()).get_column(on)
    if dupes.len():
        raise InputError(
            f"{dupes.n_unique()} keys appear more than once in the labels' {on!r} column "
            f"(e.g. {dupes.head(3).to_list()}); keep one label per row"
        )
    if weight:
        w = result.get_column(weight)
        if w.null_count() or (w.drop_nulls() <= 0).any():
            raise InputError(
                f"weight column {weight!r} must hold a positive number on every row (1 / the "
                "row's inclusion probability)"
            )
    return result


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
    frame = lazy.select(on, *groups, pl.col(score).cast(pl.Float64).fill_nan(None)).collect()
    if calibration is not None:
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


def _weight_name(weight: str | None, labels: Any) -> str | None:
    if weight != "auto":
        return weight
    if isinstance(labels, pl.DataFrame | pl.LazyFrame):
        names = labels.collect_schema().names()
    elif isinstance(labels, str | Path) and Path(labels).suffix.lower() == ".csv":
        names = pl.read_csv(labels, n_rows=0).columns if Path(labels).exists() else []
    elif isinstance(labels, str | Path) and Path(labels).suffix.lower() == ".parquet":
        names = pl.read_parquet_schema(labels).keys() if Path(labels).exists() else []
    else:
        names = []
    return WEIGHT_COLUMN if WEIGHT_COLUMN in names else None


def _check(level: float, on: str, score: str, label: str) -> None:
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")
    for name, value in (("on", on), ("score", score), ("label", label)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{name} must name a column, not {value!r}")


# ------------------------------------------------------------------------------ estimates


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
    z = _quantile(level, n, interval) if n >= 2 else _z(level)
    z_judge = _quantile(level, big_n, interval) if big_n >= 2 else _z(level)
    if n < 2:
        note = f"{n} labelled rows with a score: PPI needs at least 2"
        judge = float(fa.mean()) if big_n else None
        empty: dict[str, Any] = {"estimate": None, "ci_low": None, "ci_high": None, "se": None}
        return [
            {"method": "ppi++", **empty, "note": note},
            {"method": "judge_only", **empty, "estimate": judge, "note": note},
            {"method": "labels_only", **empty, "estimate": float(y.mean()) if n else None},
        ]
    ppi = ppi_mean(y, fl, fa, lam=lam, w=w, level=level, interval=interval)
    only = ppi_mean(y, fl, fa, lam=0.0, w=w, level=level, interval=interval)
    wn = np.ones(n) if w is None else w / w.sum() * n
    gap = wn * (fl - y)
    bias, bias_se = float(gap.mean()), float(gap.std() / math.sqrt(n))
    judge_mean = float(fa.mean())
    judge_se = float(fa.std(ddof=1) / math.sqrt(big_n)) if big_n > 1 else 0.0
    ppi_var, only_var = float(ppi.se) ** 2, float(only.se) ** 2
    effective = n * only_var / ppi_var if ppi_var > 0 else None
    return [
        {
            "method": "ppi++",
            "estimate": float(ppi.estimate),
            "ci_low": float(ppi.low),
            "ci_high": float(ppi.high),
            "se": float(ppi.se),
            "lam": float(ppi.lam),
            "effective_n": effective,
        },
        {
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
        },
        {
            "method": "labels_only",
            "estimate": float(only.estimate),
            "ci_low": float(only.low),
            "ci_high": float(only.high),
            "se": float(only.se),
            "lam": 0.0,
        },
    ]


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

    `scored`: a frame, `ragframe.run`'s result, or a scored file. `labels`: a frame or a file
    (a filled label sheet's CSV) holding `on` and `label` (0 / 1 or Boolean; empty is not
    labelled). `weight`: the labels' column of 1 / inclusion probability for a stratified draw
    ("auto": `sample_weight` if present; None: a uniform draw). `calibration`: a
    `Calibration` applied to the score first. `lam`: fix lam (1: classical PPI). `interval`:
    "t" or "normal" (the quantile; "normal" is ppi_py's interval)."""
    _check(level, on, score, label)
    groups = [by] if isinstance(by, str) else list(by or [])
    frame, where = _scores(scored, score, on, groups, calibration)
    weight = _weight_name(weight, labels)
    labelled = read_labels(labels, on, label, weight).filter(pl.col(label).is_not_null())
    joined, unmatched = _join(frame, labelled, on, label, where)
    if unmatched:
        raise InputError(
            f"{unmatched} labelled keys are not in {where}'s {on!r} column; labels must be rows "
            "of the scored log (was the sheet drawn from another file?)"
        )
    joined = joined.rename({score: "_f"})
    return _estimate_groups(
        joined, groups, label, weight, {"metric": score, "label": label}, level, lam, interval
    )


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
    la = read_labels(labels_a, on, label).filter(pl.col(label).is_not_null())
    lb = read_labels(labels_b, on, label).filter(pl.col(label).is_not_null())
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
    N scored rows cannot reach the width however many are labelled."""
    y = np.asarray(y, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    keep = ~(np.isnan(y) | np.isnan(f))
    y, f = y[keep], f[keep]
    if not (isinstance(width, float | int) and 0 < width < 2):
        raise ConfigError(f"width must be a positive interval width (e.g. 0.1), not {width!r}")
    if y.size < 3:
        raise InputError(f"a power calculation needs at least 3 labelled rows, not {y.size}")
    z = _z(level)
    half = width / 2
    var_y, var_f = float(y.var()), float(f.var())
    cov = float(((y - y.mean()) * (f - f.mean())).mean())
    rho = cov / math.sqrt(var_y * var_f) if var_y > 0 and var_f > 0 else 0.0
    rho = min(max(rho, 0.0), 1 - 1 / y.size)  # a negative correlation: lam clips to 0
    lam = cov / var_f if var_f > 0 and rho > 0 else 0.0
    lam = min(max(lam, 0.0), 1.0)
    only = math.ceil(z * z * var_y / (half * half))
    floor = z * z * lam * lam * var_f / n_scored if n_scored else 0.0
    room = half * half - floor
    resid = var_y - (2 * lam * cov - lam * lam * var_f)
    needed = math.ceil(z * z * resid / room) if room > 0 else None
    return {
        "width": float(width),
        "level": float(level),
        "n_batch": int(y.size),
        "correlation": rho,
        "lam": lam,
        "n_needed": needed,
        "n_labels_only": only,
        "n_scored": n_scored,
    }


def labelled_scores(
    scored: Any,
    labels: Any,
    score: str = "faithfulness",
    label: str = "faithful",
    on: str = "id",
    *,
    calibration: Any = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(labels, the judge's scores on those rows, N scored rows) as `human_estimate` reads
    them, for `labels_needed` after a first batch."""
    frame, where = _scores(scored, score, on, [], calibration)
    labelled = read_labels(labels, on, label).filter(pl.col(label).is_not_null())
    joined, _ = _join(frame, labelled, on, label, where)
    scored_rows = joined.filter(pl.col(score).is_not_null())
    both = scored_rows.filter(pl.col(label).is_not_null())
    return (
        both.get_column(label).to_numpy(),
        both.get_column(score).to_numpy(),
        scored_rows.height,
    )
