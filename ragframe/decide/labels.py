"""People's labels as the human estimates read them: a frame, or a CSV / Parquet / JSON Lines
file such as a filled label sheet, keyed by a column of the scored log (`read_labels`).

A label reads 1 / 0, true / false, yes / no (any case); an empty cell is null (not labelled
yet). A stratified draw's label sheet carries `sample_weight` (1 / inclusion probability),
which `weight_column(..., "auto")` finds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import InputError

__all__ = ["WEIGHT_COLUMN", "labelled", "read_labels", "weight_column"]

#: The label-sheet column that holds a stratified draw's weights (1 / inclusion probability).
WEIGHT_COLUMN = "sample_weight"

_TRUE = {"1", "1.0", "true", "t", "yes", "y"}
_FALSE = {"0", "0.0", "false", "f", "no", "n"}


def read_labels(labels: Any, on: str, label: str, weight: str | None = None) -> pl.DataFrame:
    """The labels as a frame of `on`, `label` (Float64, 0 / 1, null where not filled in) and,
    when `weight` is named, that weight column: from a frame, or a CSV / Parquet / JSON Lines
    file such as a filled label sheet. A label reads 1 / 0, true / false, yes / no (any case);
    an empty cell is null (not labelled yet)."""
    frame = _load(labels)
    for name in (on, label, *([weight] if weight else [])):
        if name not in frame.columns:
            raise InputError(
                f"no column {name!r} in the labels; its columns are {frame.columns} (name the "
                "key with on= / --on and the label with label= / --label-column)"
            )
    out = [frame.get_column(on).alias(on), _values(frame, label).alias(label)]
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


def labelled(labels: Any, on: str, label: str, weight: str | None = None) -> pl.DataFrame:
    """`read_labels`, keeping only the rows that have a label."""
    return read_labels(labels, on, label, weight).filter(pl.col(label).is_not_null())


def _load(labels: Any) -> pl.DataFrame:
    """The labels' frame, from a frame or a file (a CSV is read as text, parsed later)."""
    if isinstance(labels, pl.LazyFrame):
        return labels.collect()
    if isinstance(labels, pl.DataFrame):
        return labels
    if not isinstance(labels, str | Path):
        raise InputError(
            f"cannot read labels from a {type(labels).__name__}: pass a polars frame or the "
            "path of a CSV / Parquet / JSON Lines file"
        )
    path = Path(labels)
    if not path.exists():
        raise InputError(f"no labels file {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pl.read_csv(path, infer_schema_length=0)  # all strings: parsed by _values
    if suffix == ".parquet":
        return pl.read_parquet(path)
    if suffix in (".jsonl", ".ndjson"):
        return pl.read_ndjson(path)
    raise InputError(
        f"cannot read labels from {str(path)!r}: use a .csv (a filled label sheet), "
        ".parquet or .jsonl file"
    )


def _values(frame: pl.DataFrame, label: str) -> pl.Series:
    """The label column as Float64 0 / 1 (null: not labelled); anything else is refused."""
    column = frame.get_column(label)
    if column.dtype == pl.Boolean or column.dtype.is_numeric():
        values = column.cast(pl.Float64)
    else:
        text = column.cast(pl.String).str.strip_chars().str.to_lowercase()
        parsed = (
            pl.when(text.is_in(list(_TRUE)))
            .then(1.0)
            .when(text.is_in(list(_FALSE)))
            .then(0.0)
            .otherwise(None)
        )
        values = frame.select(parsed.alias(label)).get_column(label)
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
    return values


def weight_column(weight: str | None, labels: Any) -> str | None:
    """The weight column to read: `weight` as named, or for "auto" `sample_weight` when the
    labels have it (else None: a uniform draw)."""
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
