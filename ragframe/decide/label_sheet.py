"""Which rows to label: `draw_labels` picks them from a scored log, `label_sheet` lays them out
for a person (question, answer, numbered contexts, the judge's scores, verdicts and reasons,
an empty label column), and the filled sheet is read back by `human_estimate(labels=...)`.

Draws (seeded by `numpy.random.default_rng(seed)`):

- uniform (default): n rows without replacement, every row equally likely: the labels are a
  uniform random sample, which `human_estimate` assumes unless told otherwise.
- stratified (`stratify=True`): the score's range (lowest to highest) is cut into `strata`
  bins of equal width (empty bins dropped), and n is split evenly across the bins (a bin
  smaller than its share gives all its rows, the rest going to the others). Rare low-score
  rows are then labelled more often than a uniform draw would (equal-size bins would give
  every row the same chance, which is no stratification at all). Each
  drawn row records its `stratum`, its `inclusion_probability` (drawn / rows in its stratum)
  and `sample_weight` = 1 / inclusion_probability, which `human_estimate` reads (its
  `weight="auto"`) so the estimate stays unbiased.

When a score column is named, rows whose score is null are not drawn (they are left out of
the human estimate's N, so a label there would be lost); the sheet says how many there were.
The row key is `on` (default "id"); a scored file without it is keyed by `row_index` (the row's
position in the file, from 0), which `human_estimate(on="row_index")` adds back the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import polars as pl

from ragframe.decide.summarize import checked_scores, load_scored, score_columns
from ragframe.errors import ConfigError, InputError

__all__ = ["draw_labels", "format_contexts", "label_sheet"]

ROW_INDEX = "row_index"
DRAW_COLUMNS = ("stratum", "inclusion_probability", "sample_weight")


def _allocate(sizes: np.ndarray, n: int) -> np.ndarray:
    """n split evenly across strata of `sizes`, no stratum given more than it has."""
    take = np.zeros_like(sizes)
    left = n
    while left > 0:
        room = sizes - take
        open_ = np.flatnonzero(room > 0)
        if open_.size == 0:
            break
        share = np.full(open_.size, left // open_.size)
        share[: left % open_.size] += 1
        give = np.minimum(share, room[open_])
        take[open_] += give
        left -= int(give.sum())
    return take


def draw_labels(
    scored: Any,
    n: int,
    *,
    score: str | None = None,
    stratify: bool = False,
    strata: int = 4,
    seed: int = 0,
    on: str = "id",
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The drawn rows (every column of the scored log, plus DRAW_COLUMNS with `stratify`),
    in file order, and what the draw was ({"rows": n, "of": pool, "null_scores": k, ...}).
    `score` and the log's metrics must be in [0, 1]: a 7.5 is an InputError (column, row)."""
    _check_draw(n, score, stratify, strata)
    lazy, meta, where = load_scored(scored)
    frame, key = _keyed(_read(lazy, meta, score, where), on, where)
    pool, null_scores = _pool(frame, score)
    if n > pool.height:
        raise ConfigError(
            f"asked for {n} rows to label, but {where} has {pool.height} rows to draw from"
            + (f" ({null_scores} more have a null score)" if null_scores else "")
        )
    rng = np.random.default_rng(seed)
    info: dict[str, Any] = {
        "rows": n,
        "of": pool.height,
        "null_scores": null_scores,
        "key": key,
        "seed": seed,
        "draw": "stratified" if stratify else "uniform",
    }
    if not stratify:
        pick = np.sort(rng.choice(pool.height, n, replace=False))
        return pool[pick].drop("_pos"), info
    drawn, info["strata"] = _stratified(pool, score, n, strata, rng)  # type: ignore[arg-type]
    return drawn, info


def _check_draw(n: int, score: str | None, stratify: bool, strata: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be a positive number of rows to label, not {n!r}")
    if stratify and score is None:
        raise ConfigError("a stratified draw needs the score to stratify by (score= / --score)")
    if isinstance(strata, bool) or not isinstance(strata, int) or strata < 2:
        raise ConfigError(f"strata must be an integer of at least 2, not {strata!r}")


def _read(lazy: pl.LazyFrame, meta: dict[str, Any], score: str | None, where: str) -> pl.DataFrame:
    """Every column, with the scores a sheet draws by or shows (`score`, the log's metrics)
    checked in [0, 1] in the same read: a person is never asked to judge beside a 7.5."""
    schema = lazy.collect_schema()
    if score is not None and score not in schema:
        raise InputError(f"no column {score!r} in {where}; the columns are {schema.names()}")
    shown = [*([score] if score else []), *score_columns(schema, meta)]
    names = [m for m in shown if schema[m].is_numeric() or schema[m] == pl.Boolean]
    return checked_scores(lazy, [pl.all()], names, where)


def _keyed(frame: pl.DataFrame, on: str, where: str) -> tuple[pl.DataFrame, str]:
    """The frame and its row key: `on`, or `row_index` added when the default "id" is absent."""
    key = on
    if on not in frame.columns:
        if on != "id":
            raise InputError(f"no column {on!r} in {where}; the columns are {frame.columns}")
        key = ROW_INDEX
        frame = frame.with_row_index(ROW_INDEX)
    if frame.get_column(key).is_duplicated().any():
        raise InputError(f"{where}'s {key!r} column repeats keys; the sheet needs one per row")
    return frame, key


def _pool(frame: pl.DataFrame, score: str | None) -> tuple[pl.DataFrame, int]:
    """The rows that may be drawn (`_pos`: their position), and how many had a null score."""
    pool = frame.with_row_index("_pos")
    if score is None:
        return pool, 0
    values = pl.col(score).cast(pl.Float64).fill_nan(None)
    return pool.filter(values.is_not_null()), pool.filter(values.is_null()).height


def _stratified(
    pool: pl.DataFrame, score: str, n: int, strata: int, rng: np.random.Generator
) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """n rows split evenly across equal-width score bins, with their draw columns, and what
    each stratum held (module docstring)."""
    x = pool.get_column(score).cast(pl.Float64).to_numpy()
    inner = np.linspace(float(x.min()), float(x.max()), strata + 1)[1:-1]
    _, stratum = np.unique(np.searchsorted(inner, x, side="right"), return_inverse=True)
    sizes = np.bincount(stratum)
    take = _allocate(sizes, n)
    chosen = np.concatenate(
        [
            rng.choice(np.flatnonzero(stratum == h), take[h], replace=False)
            for h in range(sizes.size)
        ]
    )
    chosen.sort()
    prob = take / np.maximum(sizes, 1)
    drawn = (
        pool[chosen]
        .drop("_pos")
        .with_columns(
            pl.Series("stratum", stratum[chosen], dtype=pl.Int64),
            pl.Series("inclusion_probability", prob[stratum[chosen]]),
            pl.Series("sample_weight", 1.0 / prob[stratum[chosen]]),
        )
    )
    described = [
        {
            "stratum": h,
            "score_from": float(x[stratum == h].min()) if sizes[h] else None,
            "score_to": float(x[stratum == h].max()) if sizes[h] else None,
            "rows": int(sizes[h]),
            "drawn": int(take[h]),
        }
        for h in range(sizes.size)
    ]
    return drawn, described


def format_contexts(contexts: Sequence[str] | None) -> str:
    """Contexts numbered for a reader: "[1] ...\\n[2] ..."."""
    return "\n".join(
        f"[{i}] {c}" for i, c in enumerate(contexts if contexts is not None else [], start=1)
    )


def _as_text(value: Any, indent: str = "") -> str:
    """A judge's detail (verdicts, reasons) as lines a person can read in a spreadsheet."""
    if value is None:
        return ""
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if v is None or v == [] or v == {}:
                continue
            if isinstance(v, list | dict):
                lines.append(f"{indent}{k}:")
                lines.append(_as_text(v, indent + "  "))
            else:
                lines.append(f"{indent}{k}: {v}")
        return "\n".join(line for line in lines if line)
    if isinstance(value, list):
        lines = []
        for i, item in enumerate(value, start=1):
            if isinstance(item, dict):
                parts = "; ".join(
                    f"{k}: {json.dumps(v) if isinstance(v, list | dict) else v}"
                    for k, v in item.items()
                    if v is not None
                )
                lines.append(f"{indent}{i}. {parts}")
            else:
                lines.append(f"{indent}{i}. {item}")
        return "\n".join(lines)
    if isinstance(value, str):
        try:
            return _as_text(json.loads(value), indent)
        except ValueError:
            return value
    return str(value)


class DrawOptions(TypedDict, total=False):
    """How `draw_labels` draws (its keyword options), for `label_sheet` too."""

    score: str | None
    stratify: bool
    strata: int
    seed: int
    on: str


def label_sheet(
    scored: Any, n: int, *, label: str = "faithful", **draw: Unpack[DrawOptions]
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The sheet for a person (all text columns, CSV-ready): the row key, question, answer,
    numbered contexts, each metric's score and `{metric}_detail` as readable text, the draw's
    columns with `stratify`, and an empty `label` column to fill with 1 / 0 (or yes / no).
    Metrics: those with a `{metric}_detail` column (or `score` alone when it has none). The
    draw's options (`score`, `stratify`, `strata`, `seed`, `on`) are `draw_labels`'s."""
    drawn, info = draw_labels(scored, n, **draw)
    score = draw.get("score")
    key = info["key"]
    if label in drawn.columns:
        raise ConfigError(
            f"the scored log already has a {label!r} column; name the sheet's empty label "
            "column otherwise (label= / --label-column)"
        )
    details = [c for c in drawn.columns if c.endswith("_detail")]
    metrics = [c.removesuffix("_detail") for c in details]
    if score is not None and score not in metrics:
        metrics.insert(0, score)
    cols: list[pl.Series] = [drawn.get_column(key).cast(pl.String)]
    for name in ("question", "answer"):
        if name in drawn.columns:
            cols.append(drawn.get_column(name).cast(pl.String))
    if "contexts" in drawn.columns:
        cols.append(
            pl.Series(
                "contexts", [format_contexts(c) for c in drawn.get_column("contexts").to_list()]
            )
        )
    for metric in metrics:
        if metric in drawn.columns:
            cols.append(drawn.get_column(metric).cast(pl.String))
        if f"{metric}_detail" in drawn.columns:
            values = drawn.get_column(f"{metric}_detail").to_list()
            cols.append(pl.Series(f"{metric}_detail", [_as_text(v) for v in values]))
    for name in DRAW_COLUMNS:
        if name in drawn.columns:
            cols.append(drawn.get_column(name).cast(pl.String))
    cols.append(pl.Series(label, [None] * drawn.height, dtype=pl.String))
    return pl.DataFrame(cols), info


def write_sheet(sheet: pl.DataFrame, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write the sheet as CSV; an existing file (perhaps half filled in) only with overwrite."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise ConfigError(
            f"{str(target)!r} exists (a sheet being filled in?); choose another -o or pass "
            "--overwrite"
        )
    sheet.write_csv(target)
    return target
