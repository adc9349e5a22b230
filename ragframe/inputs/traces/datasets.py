"""Golden sets from ragas and deepeval, moved over whole: every column the file had is kept.

Files, as each tool's own save methods write them (tested in tests/test_real_datasets.py):

* ragas `EvaluationDataset`: `to_jsonl`, `to_csv` (list cells as Python list literals),
  `to_pandas()` then `to_parquet` / `to_json` (any `orient` of records or columns) / `to_csv`,
  `to_hf_dataset()` then `to_parquet` / `to_json` / `to_csv` (list cells as numpy's array
  repr), `to_list()` dumped as a JSON array.
* deepeval `EvaluationDataset.save_as("json" | "jsonl" | "csv")` of goldens or test cases: a
  JSON array; in JSON Lines and CSV the contexts are joined with `|` (deepeval's `DELIMITER`,
  split again here as deepeval's own loader does; a context that held `|` is cut there).

Columns: the tool's names for the four inputs become ragframe's (ragas `user_input`,
`response`, `retrieved_contexts`, `reference`; deepeval `input`, `actual_output`,
`retrieval_context`, `expected_output`), and the tool's names that ragframe knows as inputs
of their own keep their meaning (ragas `reference_contexts`, `retrieved_context_ids`,
`reference_context_ids`; deepeval `context` as `reference_contexts`). Every other column is
kept under its own name, `ragas.<name>` / `deepeval.<name>` only when that name is one of
ragframe's row columns. A column no row has a value for is left out, and nothing is added:
a dataset has no trace, so no trace, time or token column. Lists stay lists (an ID list as
text: ragas allows ints there, ragframe's ID metrics match text); an object (ragas
`rubrics`, deepeval `additional_metadata`) or a list of objects (deepeval `tools_called`)
becomes JSON text, since its keys differ from row to row. Contexts of a deepeval record whose
`retrieval_context` is empty (null, [], "" as its JSON Lines and CSV write [], or only blank
items) are its `context`, and its row says so in `note`; an empty `context` is none.

Odd records, one at a time (one never changes how the others read): a list cell (contexts,
context ids, `multi_responses`) that is one text is that one document, `[text]`, the team's
rule for a plain-string document, and a blank text no document; a question, answer or
reference that is a list, an object or a number is its JSON text. pandas' JSON by columns
or by index keeps the order pandas wrote (the frame's), and an index that is not the
default 0, 1, ... as an `index` column. Skipped and listed (reason and line): a JSON Lines
line that is not a JSON object, an element of a JSON array that is not one (the line it
starts on), and a record with no question (null, missing or blank; a Parquet row or pandas
index label named in the reason). A JSON document that does not parse (cut short) is
refused in one line naming the decoder's line and column.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.traces.assemble import ROW_SCHEMA, SKIP_SCHEMA

__all__ = ["KNOWN_FIELDS", "RENAMED", "read"]

#: The fields each tool writes for a single-turn record, mapped or kept as they are: a real
#: writer's field outside these is a field this reader has not been checked against.
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    # ragas 0.4 SingleTurnSample
    "ragas": frozenset(
        {
            "user_input",
            "retrieved_contexts",
            "reference_contexts",
            "retrieved_context_ids",
            "reference_context_ids",
            "response",
            "multi_responses",
            "reference",
            "rubrics",
            "persona_name",
            "query_style",
            "query_length",
        }
    ),
    # deepeval 4 Golden as save_as writes it (test cases are saved as goldens)
    "deepeval": frozenset(
        {
            "input",
            "actual_output",
            "expected_output",
            "retrieval_context",
            "context",
            "name",
            "comments",
            "source_file",
            "tools_called",
            "expected_tools",
            "token_cost",
            "input_token_count",
            "output_token_count",
            "additional_metadata",
            "custom_column_key_values",
            "expectations",
        }
    ),
}

#: The tool's column -> ragframe's column.
RENAMED: dict[str, dict[str, str]] = {
    "ragas": {
        "user_input": "question",
        "response": "answer",
        "retrieved_contexts": "contexts",
        "reference": "ground_truth",
        "reference_contexts": "reference_contexts",
        "retrieved_context_ids": "retrieved_context_ids",
        "reference_context_ids": "reference_context_ids",
    },
    "deepeval": {
        "input": "question",
        "actual_output": "answer",
        "retrieval_context": "contexts",
        "expected_output": "ground_truth",
        "context": "reference_contexts",
    },
}
_QUESTION = {"ragas": "user_input", "deepeval": "input"}
#: Columns holding a list of texts (cells of a CSV decoded as lists).
_LISTS = frozenset(
    {"contexts", "reference_contexts", "retrieved_context_ids", "reference_context_ids"}
)
#: ragas's own list-of-text fields kept under their own names, read as the lists above.
_TOOL_LISTS = frozenset({"multi_responses"})
#: ragframe's text columns: a list or object there is JSON text, a number its text.
_TEXTS = frozenset({"question", "answer", "ground_truth"})
#: deepeval's numbers, typed alike whatever file they came from.
_DEEPEVAL_TYPES: dict[str, pl.DataType] = {
    "token_cost": pl.Float64(),
    "input_token_count": pl.Int64(),
    "output_token_count": pl.Int64(),
}
_DEEPEVAL_MARKER = re.compile(r"^deepeval_source=(?P<source>.*?),deepeval_context=(?P<context>.*)$")
#: One Python string literal (numpy's array repr separates them by spaces, not commas).
_PY_STRING = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_NUMPY_ARRAY = re.compile(rf"^\[\s*(?:{_PY_STRING}\s*)*\]$", re.S)
_FALLBACK_NOTE = "contexts are deepeval's context (retrieval_context is empty)"
_NO_ANSWER_NOTE = "no answer in the dataset"
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_RESERVED = frozenset(ROW_SCHEMA) | {"reference_contexts", "retrieved_context_ids"}
_RESERVED |= {"reference_context_ids", "claims"}


def _parse_literal(text: str) -> Any:
    """A CSV cell written from a list or dict: JSON, a Python literal (ragas's `to_csv`, pandas'
    `to_csv`) or numpy's array repr (a Hugging Face dataset's `to_csv`); None when it is none."""
    text = text.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    if _NUMPY_ARRAY.match(text):
        # Before literal_eval, which reads ['a' 'b'] as ['ab'] (adjacent literals concatenate).
        return [ast.literal_eval(m) for m in re.findall(_PY_STRING, text, re.S)]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _decode_csv_column(values: list[Any]) -> list[Any]:
    """A CSV column's cells as lists / dicts when every non-empty cell is one, else as is."""
    parsed = []
    for value in values:
        if value is None or value == "":
            parsed.append(None)
            continue
        literal = _parse_literal(value)
        if not isinstance(literal, (list, tuple, dict)):
            return values
        parsed.append(list(literal) if isinstance(literal, tuple) else literal)
    return parsed


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str | None:
    """One text: a string as it is, anything else (a list, an object, a number) as JSON."""
    return value if value is None or isinstance(value, str) else _json_text(value)


def _text_list(value: Any, *, literal: bool) -> list[str | None] | None:
    """One cell of a list-of-texts column, decided alone (never by its column, never by
    iterating a string): a list as its items' texts, a blank text as no item, any other text
    (after a CSV's list literal, when `literal`) as the one document it is, the team's rule
    for a plain-string document; an object or number likewise as one item of JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            return []
        parsed = _parse_literal(value) if literal else None
        value = list(parsed) if isinstance(parsed, (list, tuple)) else [value]
    if not isinstance(value, (list, tuple)):
        value = [value]
    return [x if x is None or isinstance(x, str) else _json_text(x) for x in value]


def _blank(value: list[str | None] | None) -> bool:
    """No context to score: none, an empty list, or only blank items."""
    return not value or all(not (x or "").strip() for x in value)


def _column(name: str, values: list[Any], *, list_of_text: bool) -> pl.Series:
    """A typed column: lists of scalars stay lists, objects (and lists of them) become JSON
    text, values of mixed kinds that Polars cannot hold as one type become text."""
    if list_of_text:
        return pl.Series(name, values, dtype=pl.List(pl.String))
    nested = any(
        isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, dict) for x in v))
        for v in values
    )
    if nested:
        return pl.Series(name, [None if v is None else _json_text(v) for v in values], pl.String)
    try:
        return pl.Series(name, values, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        texts = [None if v is None else v if isinstance(v, str) else _json_text(v) for v in values]
        return pl.Series(name, texts, pl.String)


def _split_contexts(value: Any) -> Any:
    """deepeval's contexts: a list, or in its JSON Lines and CSV files one `|`-joined text (a
    list as pandas' `to_csv` writes it is read as that list); an item saved from a
    `RetrievedContextData` reads as its text."""
    if isinstance(value, str):
        literal = _parse_literal(value)
        if isinstance(literal, (list, tuple)):
            value = list(literal)
        else:  # deepeval writes an empty list as ""
            value = value.split("|") if value else []
    if isinstance(value, list):
        return [
            m["context"] if isinstance(x, str) and (m := _DEEPEVAL_MARKER.match(x)) else x
            for x in value
        ]
    return value


class _Records:
    """Where a file's records came from, for the ones that are skipped: `lines[i]` the line
    record i starts on (None where a file has none), `labels[i]` what names it otherwise."""

    def __init__(self, lines: Callable[[], list[int | None]], labels: list[str] | None = None):
        self._lines = lines
        self._cache: list[int | None] | None = None
        self.labels = labels

    def line(self, i: int) -> int | None:
        if self._cache is None:
            self._cache = self._lines()
        return self._cache[i] if i < len(self._cache) else None

    def label(self, i: int) -> str:
        return f"{self.labels[i]}: " if self.labels is not None else ""


def _records_from_json(
    path: Path, question: str
) -> tuple[list[dict[str, Any]], list[tuple[int | None, str]], _Records]:
    """The records of a JSON document (an array of records; deepeval's object of `test_cases`
    / `goldens`; pandas' `to_json` by columns or by index) or of JSON Lines, the elements or
    lines that are not records, and where each record came from."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as exc:
        error: json.JSONDecodeError | None = exc if isinstance(exc, json.JSONDecodeError) else None
    else:
        error = None
        key = None
        if isinstance(data, dict):
            key = next((k for k in ("test_cases", "testCases", "goldens") if k in data), None)
            if key is not None and data[key] is not None:
                data = data[key]
            elif question in data and isinstance(data[question], dict):
                records, index = _by_columns(data)
                return records, [], _Records(lambda: [], index)
            elif data and all(isinstance(v, dict) and question in v for v in data.values()):
                records, index = _by_index(data)
                return records, [], _Records(lambda: [], index)
            else:
                data = [data]
                key = None
        if isinstance(data, list):
            return _array_records(text, data, key)
    records: list[dict[str, Any]] = []
    numbers: list[int | None] = []
    bad: list[tuple[int | None, str]] = []
    first_unparsed = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            first_unparsed = first_unparsed or not (records or bad)
            bad.append((number, f"line is not JSON ({exc.msg}, column {exc.colno})"))
            continue
        if isinstance(value, dict):
            records.append(value)
            numbers.append(number)
        else:
            bad.append((number, "line is not a JSON object"))
    if error is not None and first_unparsed and (not records or text.lstrip()[:1] == "["):
        # One JSON document (its first line is no record of its own), cut short or broken.
        raise InputError(
            f"{path}: not valid JSON ({error.msg} at line {error.lineno} column "
            f"{error.colno}); was the file cut short? Export it again"
        )
    return records, bad, _Records(lambda: numbers)


def _array_records(
    text: str, data: list[Any], key: str | None
) -> tuple[list[dict[str, Any]], list[tuple[int | None, str]], _Records]:
    """A JSON array's objects; an element that is not one is listed with the line it starts
    on (found only then, or when a record is skipped later)."""
    kept = [i for i, d in enumerate(data) if isinstance(d, dict)]

    def starts() -> list[int | None]:
        try:
            return list(_element_lines(text, key))
        except (ValueError, IndexError):
            return [None] * len(data)

    element_lines = starts() if len(kept) < len(data) else None
    bad: list[tuple[int | None, str]] = [
        (
            element_lines[i] if element_lines else None,
            f"element {i + 1} of the JSON array is not a JSON object ({_json_kind(d)})",
        )
        for i, d in enumerate(data)
        if not isinstance(d, dict)
    ]

    def lines() -> list[int | None]:
        every = element_lines if element_lines is not None else starts()
        return [every[i] for i in kept]

    labels = [f"element {i + 1} of the JSON array" for i in kept]
    return [data[i] for i in kept], bad, _Records(lines, labels)


def _json_kind(value: Any) -> str:
    """A JSON value's kind as JSON names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {str: "a string", list: "an array"}.get(type(value), "a number")


def _element_lines(text: str, key: str | None) -> Iterator[int]:
    """The line each element of the document's records array starts on (the top-level array,
    or the one under `key` of the top-level object), by the decoder's own positions."""
    position = _SPACE.match(text).end()  # type: ignore[union-attr]
    if key is not None:  # {"goldens": [...], ...}: walk the object's members to the key's
        position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
        while True:
            name, position = _DECODER.raw_decode(text, position)
            position = _SPACE.match(text, position).end() + 1  # type: ignore[union-attr]
            position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
            if name == key:
                break
            _, position = _DECODER.raw_decode(text, position)
            position = _SPACE.match(text, position).end() + 1  # type: ignore[union-attr]
            position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
    if text[position] != "[":
        raise ValueError("no array")
    position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    line, counted = 1, 0
    while text[position] != "]":
        line += text.count("\n", counted, position)
        counted = position
        yield line
        _, position = _DECODER.raw_decode(text, position)
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        if text[position] == ",":
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]


def _with_index(records: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """pandas' index kept as an `index` column when it is not the default 0, 1, ... (a team's
    ids), unless the frame already has a column of that name."""
    if keys != [str(i) for i in range(len(keys))] and not any("index" in r for r in records):
        return [{"index": k, **r} for k, r in zip(keys, records, strict=True)]
    return records


def _by_columns(data: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """pandas' `to_json()` default (orient="columns": {column: {index: value}}) as records,
    in the order pandas wrote the index (the frame's order), and the index labels."""
    index: dict[str, None] = {}
    for column in data.values():
        if isinstance(column, dict):
            index.update(dict.fromkeys(column))
    keys = list(index)
    records = [
        {c: v.get(k) if isinstance(v, dict) else None for c, v in data.items()} for k in keys
    ]
    return _with_index(records, keys), [f"index {k!r}" for k in keys]


def _by_index(data: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """pandas' `to_json(orient="index")` ({index: record}) in the order written."""
    keys = list(data)
    return _with_index(list(data.values()), keys), [f"index {k!r}" for k in keys]


def _frame_of_records(records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names: list[str] = []
    for record in records:
        names.extend(k for k in record if k not in names)
    return {name: [r.get(name) for r in records] for name in names}


def _without_nulls(value: Any) -> Any:
    """A Parquet struct as the object it was written from: Arrow gives every row every key of
    the column, a key the row never had as null."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _columns(
    path: Path, question: str
) -> tuple[dict[str, list[Any]], list[tuple[int | None, str]], bool, _Records]:
    """The file's columns as Python lists (a dataset is small), its bad lines, whether it
    was CSV (every cell text), and where each record came from."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            frame = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
        columns = {}
        for name, dtype in frame.schema.items():
            values = frame.get_column(name).to_list()
            nested = isinstance(dtype, pl.Struct) or "Struct" in str(dtype)
            columns[name] = [_without_nulls(v) for v in values] if nested else values
        rows = [f"row {i + 1}" for i in range(frame.height)]
        return columns, [], False, _Records(lambda: [], rows)
    if suffix == ".csv":
        try:
            frame = pl.read_csv(path, infer_schema=False)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"{path}: not a readable CSV file ({exc})") from exc
        columns = {c: frame.get_column(c).to_list() for c in frame.columns}
        first = frame.columns[0] if frame.width else ""
        if _unnamed_first(path) and columns[first] == [str(i) for i in range(frame.height)]:
            del columns[first]  # pandas' `to_csv()` index (0, 1, ...), no data of the file's
        return columns, [], True, _Records(lambda: _csv_lines(path, frame.height))
    records, bad, where = _records_from_json(path, question)
    return _frame_of_records(records), bad, False, where


def _csv_lines(path: Path, height: int) -> list[int | None]:
    """The line each CSV row starts on (a quoted cell may span lines; a blank line is a row
    of nulls to Polars too); none when Python's reader counts the rows otherwise."""
    lines: list[int | None] = []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        start = reader.line_num + 1
        for _ in reader:
            lines.append(start)
            start = reader.line_num + 1
    return lines if len(lines) == height else [None] * height


def _unnamed_first(path: Path) -> bool:
    """The CSV header starts with an empty name (as pandas writes its index)."""
    with path.open(encoding="utf-8", newline="") as handle:
        header = next(csv.reader(handle), [])
    return bool(header) and header[0] == ""


def _out_name(name: str, fmt: str, mapped: dict[str, str]) -> str:
    if name in mapped:
        return mapped[name]
    return f"{fmt}.{name}" if name in _RESERVED else name


def read(path: Path, fmt: str) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(rows, skipped) of a ragas or deepeval dataset file; see the module's docstring."""
    question = _QUESTION[fmt]
    columns, bad, is_csv, where = _columns(path, question)
    if question not in columns:
        raise InputError(
            f"{path}: a {fmt} dataset needs a {question} column "
            f"(it has {sorted(columns)[:12]}); pass the right --from (format=)"
        )
    mapped = RENAMED[fmt]
    height = len(columns[question])
    tool_lists = _TOOL_LISTS if fmt == "ragas" else frozenset()
    lists = {n for n in columns if _out_name(n, fmt, mapped) in _LISTS or n in tool_lists}
    if fmt == "deepeval":
        for name in ("retrieval_context", "context"):
            if name in columns:
                columns[name] = [_split_contexts(v) for v in columns[name]]
    for name in lists:
        # Cell by cell: one odd cell is read alone, never decides for its column.
        columns[name] = [_text_list(v, literal=is_csv) for v in columns[name]]
    texts = {n for n, ours in mapped.items() if ours in _TEXTS and n in columns}
    for name in texts:
        columns[name] = [_text(v) for v in columns[name]]
    if is_csv:
        # Other columns are decoded when every cell is a list or object literal; the texts
        # never (an answer may well start with "[").
        columns = {
            name: values if name in lists | texts else _decode_csv_column(values)
            for name, values in columns.items()
        }
    fallback = [False] * height
    if fmt == "deepeval" and "context" in columns:
        # An empty context (JSON [], JSON Lines "", an empty CSV cell) is no context alike.
        context = [None if _blank(c) else c for c in columns["context"]]
        retrieved = columns.get("retrieval_context", [None] * height)
        fallback = [_blank(r) and c is not None for r, c in zip(retrieved, context, strict=True)]
        columns["context"] = context
        columns["retrieval_context"] = [
            c if f else r for r, c, f in zip(retrieved, context, fallback, strict=True)
        ]
    keep = [isinstance(q, str) and bool(q.strip()) for q in columns[question]]
    for i in (i for i, k in enumerate(keep) if not k):
        bad.append((where.line(i), f"{where.label(i)}no question ({question} is missing or empty)"))
    if not all(keep):
        columns = {n: [v for v, k in zip(vs, keep, strict=True) if k] for n, vs in columns.items()}
        fallback = [f for f, k in zip(fallback, keep, strict=True) if k]
        height = sum(keep)
    series: list[pl.Series] = []
    for name, values in columns.items():
        if all(v is None for v in values) and mapped.get(name) not in ("question", "answer"):
            continue
        out = _out_name(name, fmt, mapped)
        if fmt == "deepeval" and name in _DEEPEVAL_TYPES:
            series.append(pl.Series(out, values).cast(_DEEPEVAL_TYPES[name], strict=False))
            continue
        series.append(_column(out, values, list_of_text=name in lists))
    frame = pl.DataFrame(series, height=height)
    frame = _with_core(frame, fallback)
    bad.sort(key=lambda b: (b[0] is None, b[0] or 0))
    skipped = pl.DataFrame(
        {
            "reason": [r for _, r in bad],
            "trace_id": [None] * len(bad),
            "span_id": [None] * len(bad),
            "line": [n for n, _ in bad],
        },
        schema=SKIP_SCHEMA,
    )
    return frame.lazy(), skipped.lazy()


def _with_core(frame: pl.DataFrame, fallback: Iterable[bool]) -> pl.DataFrame:
    """question, answer, contexts first (typed; an absent answer is null and noted, absent
    contexts an empty list), then the rest in the file's order; `note` only when a row has one."""
    core = {"question": pl.String(), "answer": pl.String(), "contexts": pl.List(pl.String)}
    frame = frame.with_columns(
        pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c)
        for c, t in core.items()
    ).with_columns(pl.col("contexts").fill_null(pl.lit([], pl.List(pl.String))))
    notes = [
        "; ".join(n for n, on in ((_NO_ANSWER_NOTE, answer is None), (_FALLBACK_NOTE, used)) if on)
        or None
        for answer, used in zip(frame.get_column("answer").to_list(), fallback, strict=True)
    ]
    if any(notes):
        frame = frame.with_columns(pl.Series("note", notes, pl.String))
    first = [c for c in ("question", "answer", "contexts", "ground_truth") if c in frame.columns]
    return frame.select(first + [c for c in frame.columns if c not in first])
