"""`ragframe.show`: a few rows of a scored log as the report's cards, in a notebook or a
terminal, so nobody has to unnest `{metric}_detail` structs to read a verdict.

The cards are the report's (`_cards`): the same data and HTML, with their styles scoped
under `.rf-cards` and no script; `str()` gives the same card as wrapped text. Needs no extra:
no figure is drawn.

Layer: with the report; imports `decide` (which columns are scores, their direction),
`inputs`, the ground.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import polars as pl

from ragframe.errors import ConfigError, InputError
from ragframe.report._cards import Card, card, cards_html, cards_text
from ragframe.report._data import IDX, display_columns, gather
from ragframe.report._source import Source, load

__all__ = ["Cards", "show"]


@dataclass(frozen=True)
class Cards:
    """Rows of a scored log as cards: Jupyter draws `_repr_html_`, a terminal prints
    `str()`. `note` says which rows these are and why; `positions` are their rows (0-based)."""

    cards: list[Card]
    note: str

    @property
    def positions(self) -> list[int]:
        return [c.position for c in self.cards]

    def __len__(self) -> int:
        return len(self.cards)

    def _repr_html_(self) -> str:
        return cards_html(self.cards, self.note)

    def __str__(self) -> str:
        return cards_text(self.cards, self.note)

    def __repr__(self) -> str:
        return self.__str__()


def show(
    frame: Any,
    *,
    row: int | Iterable[int] | None = None,
    metric: str | Sequence[str] | None = None,
    where: pl.Expr | None = None,
    limit: int = 5,
    storage_options: Mapping[str, Any] | None = None,
) -> Cards:
    """Rows of a scored log with their inputs and every verdict and reason, as the report's
    cards (HTML in Jupyter, wrapped text when printed).

    `frame`: a scored polars DataFrame or LazyFrame, a pandas DataFrame (a named index, such
    as the id `set_index` made, kept as columns, so `where=` can name it), the result of
    `ragframe.run`, or the path or URL of a scored Parquet file (`storage_options`: Polars'
    options for the URL's store). `row`: a position (0-based; -1 is the last row; numpy's
    integers too) or several (a list, a range, a numpy array, a Series), shown in the order
    given. To pick rows by their id
    or any other column, use `where`: a Boolean polars expression, such as
    `pl.col("id") == "q-004"`; its first `limit` matching rows are shown in log order.
    With neither, the `limit` worst rows by the first metric (lowest scores; highest for a
    lower-is-better metric such as hallucination), rows that failed to score left out (the
    note says how many, and the `where=` that shows them with their errors).
    `metric`: the metric(s) whose verdicts each card opens to (default: every metric scored
    in the log); every card lists all scores.
    """
    source = _source(frame, storage_options)
    schema = source.lazy.collect_schema()
    metrics = _metrics(schema, source)
    focus = _focus(metric, metrics)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a positive integer (rows to show), not {limit!r}")
    if row is not None and where is not None:
        raise ConfigError("pass row= (positions) or where= (a filter), not both")
    total = source.lazy.select(pl.len()).collect().item()
    if row is not None:
        positions = _positions(row, total)
        listed = ", ".join(f"{p:,}" for p in positions)
        word = "Row" if len(positions) == 1 else "Rows"
        note = f"{word} {listed} of {source.label} ({total:,} rows)."
    elif where is not None:
        positions, matched = _where(source, where, limit)
        note = (
            f"{_rows(len(positions))} of the {matched:,} matching where= in {source.label} "
            f"({total:,} rows)" + (f"; limit={limit} shown." if matched > limit else ".")
        )
    else:
        positions, note = _worst(source, focus[0], limit, total)
    shown = display_columns(schema, [])
    details = [f"{m}_detail" for m in focus if f"{m}_detail" in schema]
    rows = gather(source, positions, [*shown, *metrics, *details])
    cards = [
        card(rows[p], position=p, shown=shown, metrics=metrics, focus=focus) for p in positions
    ]
    return Cards(cards, note)


def _source(frame: Any, storage_options: Mapping[str, Any] | None) -> Source:
    """`report`'s reader (a pandas frame through Arrow, its named index kept as columns)."""
    try:
        return load(frame, storage_options=storage_options)
    except InputError as exc:
        raise InputError(str(exc).replace("cannot report on", "cannot show")) from exc


def _metrics(schema: pl.Schema, source: Source) -> list[str]:
    """The log's score columns, as `summarize` finds them."""
    from ragframe.decide.summarize import score_columns

    found = score_columns(schema, source.meta)
    if not found:
        raise InputError(
            f"{source.label} has no score columns (Float64 columns with a `{{name}}_detail` "
            f"sibling, as ragframe writes them) among {schema.names()}; score it first with "
            "ragframe.evaluate"
        )
    return found


def _focus(metric: str | Sequence[str] | None, metrics: list[str]) -> list[str]:
    if metric is None:
        return metrics
    asked = [metric] if isinstance(metric, str) else list(metric)
    unknown = [m for m in asked if m not in metrics]
    if unknown or not asked:
        raise ConfigError(
            f"metric={(unknown[0] if unknown else metric)!r} is not a metric of this log; "
            f"its metrics are {metrics}"
        )
    return list(dict.fromkeys(asked))


def _positions(row: Any, total: int) -> list[int]:
    """Row positions as given, negative ones from the end, each checked. A position is any
    integer (numpy's too, as `argmin` returns); several are any iterable of them (a list, a
    range, a numpy array such as `np.where(...)[0]`, a pandas or polars Series)."""
    if isinstance(row, str | bytes) or _integer(row):
        asked: list[Any] = [row]
    elif isinstance(row, Iterable):
        asked = list(row)
    else:
        raise ConfigError(
            f"row={row!r} is not a row position: pass an int (0-based) or a list of them"
        )
    found = []
    for value in asked:
        if isinstance(value, str):
            raise ConfigError(
                f"row={value!r}: row= takes positions (0-based); to pick a row by its id, "
                f"pass where=pl.col('id') == {value!r}"
            )
        if not _integer(value):
            raise ConfigError(f"row={value!r} is not a row position (an int, 0-based)")
        position = operator.index(value)
        if not -total <= position < total:
            raise ConfigError(
                f"row={position} is out of range: the log has {total:,} rows (positions 0 to "
                f"{total - 1:,}, or -1 for the last)"
            )
        found.append(position % total)
    return list(dict.fromkeys(found))


def _integer(value: Any) -> bool:
    """An integer (Python's or numpy's), but not a bool (True is no row position)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def _where(source: Source, where: Any, limit: int) -> tuple[list[int], int]:
    """The first `limit` positions where the filter holds, and how many rows it holds on."""
    if not isinstance(where, pl.Expr):
        raise ConfigError(
            f"where= takes a polars expression such as pl.col('id') == 'q-004', not a "
            f"{type(where).__name__}"
        )
    columns = source.lazy.collect_schema().names()
    missing = [name for name in where.meta.root_names() if name not in columns]
    if missing:
        raise ConfigError(
            f"where= names {missing[0]!r}, which {source.label} lacks; its columns are {columns}"
        )
    try:
        hits = source.lazy.with_row_index(IDX).filter(where).select(IDX).collect()[IDX]
    except pl.exceptions.PolarsError as exc:
        # Polars' message may list the frame's columns, the row index added here among them.
        first = str(exc).strip().splitlines()[0].replace(f'"{IDX}", ', "")
        raise ConfigError(f"where= cannot be applied to the log: {first}") from exc
    return hits.head(limit).to_list(), hits.len()


def _worst(source: Source, metric: str, limit: int, total: int) -> tuple[list[int], str]:
    """The `limit` worst-scored rows by `metric` (ties by position), and the note saying so."""
    from ragframe.decide.summarize import direction_of, score_values

    way = direction_of(metric, source.meta)
    scores = (
        source.lazy.with_row_index(IDX)
        .select(IDX, score_values(metric))
        .filter(pl.col(metric).is_not_null())
        .collect()
    )
    picked = scores.sort([metric, IDX], descending=[way == "lower", False]).head(limit)[IDX]
    which = "highest" if way == "lower" else "lowest"
    failed = total - scores.height
    if scores.height:
        note = (
            f"The {_rows(picked.len())} {which}-scored by {metric} ({way} is better) of "
            f"{scores.height:,} scored in {source.label} ({total:,} rows); pass row= or where= "
            "to choose others."
        )
    elif total:
        note = f"No row of {source.label} ({total:,} rows) has a {metric} score."
    else:
        note = f"{source.label[0].upper()}{source.label[1:]} has no rows."
    if failed:
        nulls = source.lazy.select(pl.col(metric).is_null().sum()).collect().item()
        pick = f"pl.col({metric!r})" + ("" if nulls == failed else ".fill_nan(None)")
        note += (
            f" {_rows(failed)} failed to score by {metric}: where={pick}.is_null() shows "
            f"{'it' if failed == 1 else 'them'} with the error."
        )
    return picked.to_list(), note


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")
