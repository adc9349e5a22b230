"""Canonical input columns: loading, renaming peers' names, and validation before any request."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.io import FORMATS_READ, StorageOptions, open_input

#: The columns ragframe understands, with the Polars type each must have.
CANONICAL: dict[str, pl.DataType] = {
    "question": pl.String(),
    "answer": pl.String(),
    "contexts": pl.List(pl.String()),
    "ground_truth": pl.String(),
    "reference_contexts": pl.List(pl.String()),
    "retrieved_context_ids": pl.List(pl.String()),
    "reference_context_ids": pl.List(pl.String()),
    # Optional (see OPTIONAL): the answer's claims, when the user's pipeline has them.
    "claims": pl.List(pl.String()),
}

#: Inputs no metric requires, used by the metrics that read them when a frame has them
#: (`select_inputs(optional=...)`), each with how to score without it.
OPTIONAL: dict[str, str] = {
    "claims": "Faithfulness(given_claims=False) extracts the claims from the answer instead",
}

#: Column names used by ragas and deepeval, recognised without a `columns=` mapping.
ALIASES: dict[str, str] = {
    # ragas
    "user_input": "question",
    "response": "answer",
    "retrieved_contexts": "contexts",
    "reference": "ground_truth",
    # deepeval
    "input": "question",
    "actual_output": "answer",
    "retrieval_context": "contexts",
    "expected_output": "ground_truth",
    "context": "reference_contexts",
}

ROW_ID = "__ragframe_row"
#: Identifier columns: matched exactly by the ID metrics, so never truncated.
ID_COLUMNS = frozenset({"retrieved_context_ids", "reference_context_ids"})


def list_columns(columns: Mapping[str, str] | None = None) -> frozenset[str]:
    """The column names whose CSV cells hold a JSON list of strings: the list inputs (contexts,
    reference contexts, context IDs), their ragas and deepeval aliases, and the columns that a
    `columns=` mapping names for them."""
    lists = {name for name, dtype in CANONICAL.items() if isinstance(dtype, pl.List)}
    aliases = {alias for alias, canonical in ALIASES.items() if canonical in lists}
    mapped = {source for canonical, source in (columns or {}).items() if canonical in lists}
    return frozenset(lists | aliases | mapped)


def load_frame(
    data: Any,
    columns: Mapping[str, str] | None = None,
    *,
    storage_options: StorageOptions | None = None,
) -> pl.DataFrame:
    """Accept a Polars frame, a LazyFrame, a pandas frame or the path or URL of a Parquet, JSON
    Lines or CSV file; return a DataFrame. `columns` (the run's mapping) says which CSV columns
    hold JSON lists besides the canonical ones; `storage_options`, how to reach a URL
    (`s3://...`): Polars' storage options, else the store's environment variables."""
    if isinstance(data, pl.DataFrame):
        return data
    if isinstance(data, pl.LazyFrame):
        return data.collect()
    if isinstance(data, str | Path):
        lists = list_columns(columns)
        return open_input(data, list_columns=lists, storage_options=storage_options).read()
    if type(data).__module__.startswith("pandas"):
        if not hasattr(data, "columns"):  # a Series (df["question"]), an Index...
            raise InputError(
                f"cannot score a pandas {type(data).__name__}: pass the whole DataFrame (df, not "
                "df['question']), whose columns are the question, answer and contexts"
            )
        try:
            return pl.from_pandas(data)
        except (ValueError, TypeError, ImportError, pl.exceptions.PolarsError) as exc:
            # pyarrow's ArrowInvalid is a ValueError, ArrowTypeError a TypeError.
            raise InputError(_pandas_problem(data, exc)) from exc
    raise InputError(
        f"cannot score a {type(data).__name__}: pass a polars DataFrame or LazyFrame, "
        f"a pandas DataFrame, or the path or URL of a file in {FORMATS_READ}"
    )


def _pandas_problem(data: Any, exc: Exception) -> str:
    """Name the pandas columns that cannot become Polars columns, and the usual fix."""
    names = [str(c) for c in data.columns]
    if len(set(names)) < len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        return f"the pandas frame repeats the column names {repeated}; rename them to be unique"
    bad = []
    for i, name in enumerate(names):
        try:
            pl.from_pandas(data.iloc[:, [i]])
        except (ValueError, TypeError, pl.exceptions.PolarsError):
            bad.append(name)
    if not bad:
        return f"cannot convert the pandas frame to Polars: {exc}"
    return (
        f"cannot convert the pandas column(s) {bad} to Polars ({exc}): a column must hold one "
        f"type (or lists of one type), e.g. df[{bad[0]!r}] = df[{bad[0]!r}].astype(str), "
        "or drop it"
    )


def canonical_names(
    present: Iterable[str],
    columns: Mapping[str, str] | None = None,
    *,
    needed: Iterable[str] | None = None,
) -> dict[str, str]:
    """Map canonical name -> the frame's column that holds it.

    An explicit `columns` mapping ({"question": "my_prompt", ...}) wins; then a column named
    canonically (ragframe's own name always means that input: a `reference` beside a
    `ground_truth` is left alone); then a ragas or deepeval alias. A column is read as one
    input only: `columns=` may not map two inputs to it, and a column it maps is not also read
    under its own name. Two aliases for one input and no column of its own name
    (`reference` and `expected_output`) are ambiguous: for an input in `needed` (None: every
    input) that is an InputError saying how to choose, never a pick by column order.
    """
    present = list(present)
    mapping: dict[str, str] = {}
    for canonical, source in (columns or {}).items():
        if canonical not in CANONICAL:
            raise InputError(
                f"columns= maps {canonical!r}, which is not a ragframe input; "
                f"the inputs are {', '.join(CANONICAL)}"
            )
        if source not in present:
            raise InputError(
                f"columns= maps {canonical!r} to {source!r}, but the frame has no column "
                f"{source!r}; its columns are {present}"
            )
        other = next((c for c, s in mapping.items() if s == source), None)
        if other is not None:
            raise InputError(
                f"columns= maps both {other!r} and {canonical!r} to column {source!r}; each "
                "input needs a column of its own: map one of them to another column (to read "
                f"the same text twice on purpose, copy it first: "
                f"df.with_columns(pl.col({source!r}).alias('{source}_copy')))"
            )
        mapping[canonical] = source
    used = set(mapping.values())
    checked = set(CANONICAL) if needed is None else set(needed)
    for canonical in CANONICAL:
        if canonical in mapping:
            continue
        if canonical in present and canonical not in used:
            mapping[canonical] = canonical
            continue
        found = [n for n in present if n not in used and ALIASES.get(n) == canonical]
        if len(found) > 1 and canonical in checked:
            raise InputError(
                f"columns {found} are all ragas / deepeval names for input {canonical!r}; say "
                f"which to read: columns={{{canonical!r}: {found[0]!r}}} (CLI: --columns "
                f"{canonical}={found[0]}), or drop or rename the others"
            )
        if found:  # (two of them for an input no metric reads: the first, unused)
            mapping[canonical] = found[0]
    return mapping


def _castable_list_of_str(dtype: pl.DataType) -> bool:
    return isinstance(dtype, pl.List | pl.Array) and (
        dtype.inner in (pl.String, pl.Categorical, pl.Enum, pl.Null)
        or isinstance(dtype.inner, pl.Categorical | pl.Enum)
    )


#: Separators a text column of several contexts is commonly joined with, most specific first.
_SEPARATORS = ("\n\n", "\n", " | ", "|", ";")


def list_conversion(source: str, dtype: pl.DataType, example: str | None) -> str:
    """Polars code that turns column `source` (of type `dtype`) into a List(String) column,
    fitted to what its first non-null value (`example`) looks like.

    Text cannot be cast to a list (Polars refuses: "casting from Utf8View to list type is not
    supported"), so text is decoded (a JSON list), split (a separator it contains), or wrapped
    (one context per row). Other types (lists of numbers, categoricals) are cast item by item.
    """
    col = f"pl.col({source!r})"
    textual = dtype == pl.String or isinstance(dtype, pl.Categorical | pl.Enum)
    depth, leaf = 0, dtype
    while isinstance(leaf, pl.List | pl.Array) and isinstance(leaf.inner, pl.List | pl.Array):
        depth, leaf = depth + 1, leaf.inner
    if depth:
        # Lists of lists (passages per retrieved document): one list of every passage, in order.
        flat = f"{col}.list.eval(pl.element(){'.explode()' * depth})"
        return flat if leaf.inner == pl.String else f"{flat}.cast(pl.List(pl.String))"
    if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct):
        # A list of records (ExpertQA's claims: claim, evidence, support): keep its text field.
        texts = [f.name for f in dtype.inner.fields if f.dtype == pl.String]
        if texts:
            return f"{col}.list.eval(pl.element().struct.field({texts[0]!r}))"
    if not textual:
        return f"{col}.cast(pl.List(pl.String))"
    if dtype != pl.String:
        col += ".cast(pl.String)"
    if example is not None and example.lstrip().startswith("["):
        return f"{col}.str.json_decode(pl.List(pl.String))"
    separator = next((s for s in _SEPARATORS if example and s in example), None)
    if separator is not None:
        return f"{col}.str.split({separator!r})"
    return f"pl.concat_list({col})"


def _list_hint(frame: pl.DataFrame, source: str) -> str:
    """The end of the message for a list column given as something else: the conversion that
    fits its data, as a line to paste."""
    dtype = frame.schema[source]
    example = None
    if dtype == pl.String or isinstance(dtype, pl.Categorical | pl.Enum):
        values = frame.get_column(source).cast(pl.String).drop_nulls()
        example = values[0] if values.len() else None
    code = list_conversion(source, dtype, example)
    try:  # the hint must work when pasted: tried on the first rows, dropped if it fails
        tried = frame.head(100).select(eval(code, {"pl": pl}))  # our own code, not the user's
        works = tried.schema[source] == pl.List(pl.String)
    except (pl.exceptions.PolarsError, TypeError, ValueError, AttributeError):
        works = False
    if not works:
        return (
            f"a list of strings per row, one text per context (no one-line conversion from "
            f"{dtype} is known: build each row's list from its fields or items)"
        )
    hint = f"a list of strings per row, e.g. df = df.with_columns({code})"
    if ".explode()" in code:
        return hint + " (its inner lists joined into one list of contexts per row)"
    if code.endswith(".str.json_decode(pl.List(pl.String))"):
        return hint + " (its values look like JSON lists)"
    if ".str.split(" in code:
        return hint + " (its values look like several texts joined by that separator)"
    if code.startswith("pl.concat_list("):
        return (
            hint + " (one text per row, as one context; if each value joins several, split "
            f"it instead, e.g. pl.col({source!r}).str.split('\\n'))"
        )
    return hint


def truncate(expr: pl.Expr, max_chars: int) -> pl.Expr:
    """Cut a text longer than `max_chars` to that length plus a marker saying how much went."""
    length = expr.str.len_chars()
    return (
        pl.when(length > max_chars)
        .then(
            pl.concat_str(
                [
                    expr.str.slice(0, max_chars),
                    pl.lit(" [... truncated "),
                    (length - max_chars).cast(pl.String),
                    pl.lit(" characters]"),
                ]
            )
        )
        .otherwise(expr)
    )


def _check_type(
    frame: pl.DataFrame, metric: str, canonical: str, source: str, *, optional: bool = False
) -> None:
    """Refuse a column whose type cannot hold `canonical`: an InputError naming the metric,
    the column and the conversion that fits its data (and, for an optional input, how to
    score without it)."""
    expected = CANONICAL[canonical]
    dtype = frame.schema[source]
    ok = dtype == expected or dtype == pl.Null
    if not ok and expected == pl.String:
        ok = isinstance(dtype, pl.Categorical | pl.Enum)
    if not ok and isinstance(expected, pl.List):
        ok = _castable_list_of_str(dtype)
    if ok:
        return
    hint = (
        _list_hint(frame, source)
        if isinstance(expected, pl.List)
        else f"a string per row, e.g. pl.col({source!r}).cast(pl.String)"
    )
    used = "uses column" if optional else "reads column"
    message = (
        f"metric {metric!r} {used} {source!r} as {canonical!r}, which must be "
        f"{expected}, but it is {dtype}. Convert it to {hint}"
    )
    if optional:
        message += (
            f". {canonical!r} is optional: to score without it, drop or rename the column "
            f"(df.drop({source!r}))"
        )
        if canonical in OPTIONAL:
            message += f", or: {OPTIONAL[canonical]}"
    raise InputError(message)


def select_inputs(
    frame: pl.DataFrame,
    needs: Mapping[str, Iterable[str]],
    columns: Mapping[str, str] | None = None,
    *,
    max_chars: int | None = None,
    optional: Mapping[str, Iterable[str]] | None = None,
    flag_cuts: bool = False,
) -> pl.DataFrame:
    """Return the canonical input columns (plus a row id) that the requested metrics need.

    `needs` maps metric name -> canonical columns it requires. Every problem is raised here,
    before any request: a missing column, or a column of the wrong type, names the metric,
    the column and the fix. `optional` maps metric name -> canonical columns it uses when the
    frame has them (`claims`): absent, they are left out without a word; present, they are
    checked and selected like required ones. With `max_chars`, every text (and every list
    item, IDs aside) longer than that is cut to `max_chars` characters followed by
    " [... truncated N characters]", so one huge context cannot overflow the judge's window;
    with `flag_cuts` too, a Boolean column `CUT_FLAG + input` per cut input says, in the same
    pass, whether the row's text (or any item of its list) was cut.
    """
    needed = {c for required in needs.values() for c in required}
    needed |= {c for used in (optional or {}).values() for c in used}
    mapping = canonical_names(frame.columns, columns, needed=needed)
    wanted: list[str] = []
    for metric, required in needs.items():
        for canonical in required:
            source = mapping.get(canonical)
            if source is None:
                aliases = [a for a, c in ALIASES.items() if c == canonical]
                taken = [
                    f"{name!r} is read as {other!r}"
                    for other, name in mapping.items()
                    if name == canonical or ALIASES.get(name) == canonical
                ]
                why = f", as columns= says: {', '.join(taken)}" if taken else ""
                raise InputError(
                    f"metric {metric!r} needs a {canonical!r} column, and the frame has none"
                    f"{why} (its columns: {frame.columns}). Rename a column to {canonical!r}, "
                    f"use one of {aliases}, or pass columns={{{canonical!r}: 'your_column'}}"
                )
            _check_type(frame, metric, canonical, source)
            if canonical not in wanted:
                wanted.append(canonical)
    for metric, used in (optional or {}).items():
        for canonical in used:
            source = mapping.get(canonical)
            if source is None or canonical in wanted:
                continue
            _check_type(frame, metric, canonical, source, optional=True)
            wanted.append(canonical)

    def canonical(name: str) -> pl.Expr:
        expr = pl.col(mapping[name]).cast(CANONICAL[name])
        # IDs are compared, never shown to the judge: cut, two IDs sharing a prefix would match.
        limit = None if name in ID_COLUMNS else max_chars
        if isinstance(CANONICAL[name], pl.List):
            # A null item becomes "": items keep their positions, so "context 3" is the
            # third item of the input list, and the judge is shown every numbered item.
            item = pl.element().fill_null("")
            if limit is not None:
                item = truncate(item, limit)
            expr = expr.list.eval(item)
        elif limit is not None:
            expr = truncate(expr, limit)
        return expr.alias(name)

    def cut(name: str, limit: int) -> pl.Expr:
        text = pl.col(mapping[name]).cast(CANONICAL[name])
        if isinstance(CANONICAL[name], pl.List):
            long = text.list.eval(pl.element().str.len_chars() > limit).list.any()
        else:
            long = text.str.len_chars() > limit
        return long.fill_null(False).alias(CUT_FLAG + name)

    flags = (
        [cut(c, max_chars) for c in wanted if c not in ID_COLUMNS]
        if flag_cuts and max_chars is not None
        else []
    )
    return frame.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias(ROW_ID),
        *(canonical(c) for c in wanted),
        *flags,
    )


#: The prefix of `select_inputs(flag_cuts=True)`'s columns saying which texts were cut.
CUT_FLAG = "__ragframe_cut:"


#: A text with nothing to read: only Unicode white space (`\s`: what Python's `str.strip()`
#: strips, bar four ASCII separators), control characters (`\p{Cc}`: those four, NUL...) and
#: format characters (`\p{Cf}`: zero-width spaces and joiners, the byte-order mark, bidi
#: marks, soft hyphens, tags). A judge or embedding endpoint has nothing to read in such a text
#: ("\u200b\u200b" looks empty and is), so it counts as missing input, like "".
BLANK_PATTERN = r"^[\s\p{Cc}\p{Cf}]*$"


def is_blank(text: pl.Expr) -> pl.Expr:
    """True where a text is null or blank (BLANK_PATTERN): one regex pass, no copy."""
    return text.is_null() | text.str.contains(BLANK_PATTERN)


def _ranges(*pairs: tuple[int, int]) -> str:
    return "".join(chr(c) for first, last in pairs for c in range(first, last + 1))


#: Every character BLANK_PATTERN matches, for `str.strip_chars` (a text that strips to "" is
#: blank, as `is_blank` says: tests/test_ambiguous_input.py checks the two agree on every code
#: point). Unicode 15's white space, Cc and Cf, as Polars' regex engine classes them.
WHITESPACE = _ranges(
    (0x0000, 0x0020),
    (0x007F, 0x00A0),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x2064),
    (0x2066, 0x206F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)


def missing_input_reason(required: Iterable[str]) -> pl.Expr:
    """A String expression: why a row cannot be scored (null when every input is present).

    A null or blank string (`is_blank`: empty, or only white space, zero-width and other
    invisible characters), an empty list, or a list whose items are all blank counts as
    missing. The reason names the first input that is missing.
    """
    reason: pl.Expr = pl.lit(None, dtype=pl.String)
    for name in reversed(list(required)):
        col = pl.col(name)
        if isinstance(CANONICAL[name], pl.List):
            empty = (
                col.is_null()
                | (col.list.len() == 0)
                | col.list.eval(is_blank(pl.element())).list.all()
            )
            why = f"missing input: {name!r} is null or has no non-empty items"
        else:
            empty = is_blank(col)
            why = f"missing input: {name!r} is null or empty"
        reason = pl.when(empty).then(pl.lit(why)).otherwise(reason)
    return reason
