"""Golden sets from ragas and deepeval, moved over unchanged.

* ragas `EvaluationDataset` as JSON Lines or CSV (`user_input`, `response`,
  `retrieved_contexts`, `reference`): CSV cells holding a list (as pandas writes them, a Python
  list literal, or JSON) are parsed with `ast.literal_eval`, per cell, on this small-file path.
* deepeval test cases / goldens as JSON (a list, or an object with `test_cases` / `goldens`):
  `input`, `actual_output`, `retrieval_context` (else `context`), `expected_output`.

Every record becomes a row (ROW_SCHEMA; trace columns null); a record with no answer keeps its
row with the note "no answer in the dataset" (its answer metrics score null, with the reason).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.traces.assemble import ROW_SCHEMA, SKIP_SCHEMA

__all__ = ["read"]


def _list(cell: Any) -> list[str] | None:
    """A list cell from CSV: JSON or a Python list literal; a plain string is one context."""
    if cell is None or isinstance(cell, list):
        return cell
    text = str(cell).strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return [text]
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _rows(frame: pl.DataFrame, mapping: dict[str, str]) -> pl.DataFrame:
    """The dataset's columns under ragframe's names, the other row columns null."""
    present = {ours: theirs for ours, theirs in mapping.items() if theirs in frame.columns}
    out = frame.select([pl.col(theirs).alias(ours) for ours, theirs in present.items()])
    if "contexts" in out.columns and out.schema["contexts"] != pl.List(pl.String):
        out = out.with_columns(
            pl.col("contexts").map_elements(_list, return_dtype=pl.List(pl.String))
        )
    columns = [
        pl.col(c).cast(t) if c in out.columns else pl.lit(None, t).alias(c)
        for c, t in ROW_SCHEMA.items()
    ]
    out = out.select(columns).with_columns(
        pl.col("contexts").fill_null(pl.lit([], pl.List(pl.String))),
        pl.when(pl.col("answer").is_null()).then(pl.lit("no answer in the dataset")).alias("note"),
    )
    return out


def read(path: Path, fmt: str) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(rows, skipped) of a ragas or deepeval dataset file; nothing is skipped."""
    skipped = pl.DataFrame(schema=SKIP_SCHEMA).lazy()
    if fmt == "ragas":
        mapping = {
            "question": "user_input",
            "answer": "response",
            "contexts": "retrieved_contexts",
            "ground_truth": "reference",
        }
        if path.suffix == ".csv":
            frame = pl.read_csv(path, infer_schema=False)
        else:
            frame = pl.read_ndjson(path, infer_schema_length=None)
        if "user_input" not in frame.columns:
            raise InputError(
                f"{path}: a ragas dataset needs a user_input column (it has {frame.columns})"
            )
        return _rows(frame, mapping).lazy(), skipped
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(
            f"{path}: not a deepeval JSON file (line {exc.lineno}: {exc.msg})"
        ) from exc
    if isinstance(data, dict):
        data = data.get("test_cases") or data.get("testCases") or data.get("goldens") or []
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise InputError(f"{path}: deepeval JSON must be a list of test cases (objects)")
    for record in data:
        record.setdefault("retrieval_context", record.get("context"))
    frame = pl.DataFrame(data, infer_schema_length=None)
    mapping = {
        "question": "input",
        "answer": "actual_output",
        "contexts": "retrieval_context",
        "ground_truth": "expected_output",
    }
    return _rows(frame, mapping).lazy(), skipped
