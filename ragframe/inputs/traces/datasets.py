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
`retrieval_context` is empty (a golden) are its `context`, and its row says so in `note`.

A JSON Lines line that is not a JSON object is skipped and listed with its line number.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections.abc import Iterable
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
_IDS = frozenset({"retrieved_context_ids", "reference_context_ids"})
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


def _column(name: str, values: list[Any], *, list_of_text: bool) -> pl.Series:
    """A typed column: lists of scalars stay lists, objects (and lists of them) become JSON
    text, values of mixed kinds that Polars cannot hold as one type become text."""
    if list_of_text:
        cells = [None if v is None else [None if x is None else str(x) for x in v] for v in values]
        return pl.Series(name, cells, dtype=pl.List(pl.String))
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
        value = list(literal) if isinstance(literal, (list, tuple)) else value.split("|")
    if isinstance(value, list):
        return [
            m["context"] if isinstance(x, str) and (m := _DEEPEVAL_MARKER.match(x)) else x
            for x in value
        ]
    return value


def _records_from_json(
    path: Path, question: str
) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The records of a JSON document (an array of records; deepeval's object of `test_cases`
    / `goldens`; pandas' `to_json` by columns or by index) or of JSON Lines, and the bad
    lines."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    else:
        if isinstance(data, dict):
            listed = data.get("test_cases") or data.get("testCases") or data.get("goldens")
            if listed is not None:
                data = listed
            elif question in data and isinstance(data[question], dict):
                data = _by_columns(data)
            elif data and all(isinstance(v, dict) and question in v for v in data.values()):
                data = list(data.values())
            else:
                data = [data]
        if isinstance(data, list) and all(isinstance(d, dict) for d in data):
            return data, []
        if isinstance(data, list):
            raise InputError(f"{path}: a JSON array must hold one object per record")
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            bad.append((number, f"line is not JSON ({exc.msg} at column {exc.colno})"))
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad.append((number, "line is not a JSON object"))
    return records, bad


def _by_columns(data: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """pandas' `to_json()` default (orient="columns": {column: {index: value}}) as records,
    in index order."""
    index: list[str] = []
    for column in data.values():
        index.extend(k for k in column if k not in index)
    order = sorted(index, key=lambda k: (0, int(k), k) if k.lstrip("-").isdigit() else (1, 0, k))
    return [{c: data[c].get(k) for c in data} for k in order]


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


def _columns(path: Path, question: str) -> tuple[dict[str, list[Any]], list[tuple[int, str]], bool]:
    """The file's columns as Python lists (a dataset is small), its bad lines, and whether it
    was CSV (every cell text)."""
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
        return columns, [], False
    if suffix == ".csv":
        try:
            frame = pl.read_csv(path, infer_schema=False)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputError(f"{path}: not a readable CSV file ({exc})") from exc
        columns = {c: frame.get_column(c).to_list() for c in frame.columns}
        first = frame.columns[0] if frame.width else ""
        if _unnamed_first(path) and columns[first] == [str(i) for i in range(frame.height)]:
            del columns[first]  # pandas' `to_csv()` index (0, 1, ...), no data of the file's
        return columns, [], True
    records, bad = _records_from_json(path, question)
    return _frame_of_records(records), bad, False


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
    columns, bad, is_csv = _columns(path, _QUESTION[fmt])
    if _QUESTION[fmt] not in columns:
        raise InputError(
            f"{path}: a {fmt} dataset needs a {_QUESTION[fmt]} column "
            f"(it has {sorted(columns)[:12]}); pass the right --from (format=)"
        )
    mapped = RENAMED[fmt]
    height = len(columns[_QUESTION[fmt]])
    if fmt == "deepeval":
        for name in ("retrieval_context", "context"):
            if name in columns:
                columns[name] = [_split_contexts(v) for v in columns[name]]
    if is_csv:
        # The texts are never decoded (an answer may well start with "["), nor deepeval's
        # contexts (split above).
        plain = {n for n, ours in mapped.items() if ours in ("question", "answer", "ground_truth")}
        if fmt == "deepeval":
            plain |= {"retrieval_context", "context"}
        columns = {
            name: values if name in plain else _decode_csv_column(values)
            for name, values in columns.items()
        }
    fallback = [False] * height
    if fmt == "deepeval" and "context" in columns:
        retrieved = columns.get("retrieval_context", [None] * height)
        fallback = [not r and bool(c) for r, c in zip(retrieved, columns["context"], strict=True)]
        columns["retrieval_context"] = [
            c if f else r for r, c, f in zip(retrieved, columns["context"], fallback, strict=True)
        ]
    series: list[pl.Series] = []
    for name, values in columns.items():
        if all(v is None for v in values) and mapped.get(name) not in ("question", "answer"):
            continue
        out = _out_name(name, fmt, mapped)
        if fmt == "deepeval" and name in _DEEPEVAL_TYPES:
            series.append(pl.Series(out, values).cast(_DEEPEVAL_TYPES[name], strict=False))
            continue
        series.append(_column(out, values, list_of_text=out in _LISTS))
    frame = pl.DataFrame(series, height=height)
    frame = _with_core(frame, fallback)
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
