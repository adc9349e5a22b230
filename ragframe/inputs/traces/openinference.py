"""OpenInference spans (Phoenix, Arize, the LlamaIndex / LangChain / OpenAI instrumentors).

Two shapes are read:

* JSON Lines of spans as the OpenTelemetry SDK serialises them (`ReadableSpan.to_json()`, what
  a file or console exporter writes): `context.trace_id`, `context.span_id`, `parent_id`,
  ISO `start_time` / `end_time` and a flat `attributes` object keyed by the OpenInference
  conventions (`retrieval.documents.0.document.content`, ...).
* Span frames as Phoenix's `get_spans_dataframe()` returns them (`context.span_id`,
  `parent_id`, `span_kind`, `attributes.input.value`, `attributes.retrieval.documents` as a
  list of `{"document.content": ...}` objects), given as a Polars or pandas DataFrame, or
  saved as Parquet or JSON Lines.

Attribute names come from `openinference-semantic-conventions`, never typed by hand. JSON
Lines are parsed by Polars with an explicit schema (no per-line Python); the schema's number
of document and message slots is measured by a first streaming pass over the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    SpanAttributes,
)

from ragframe.errors import InputError
from ragframe.inputs.traces.assemble import DOCUMENT, TIME, normalize_id

S = SpanAttributes
DOC_FIELDS = {
    "content": DocumentAttributes.DOCUMENT_CONTENT,
    "id": DocumentAttributes.DOCUMENT_ID,
    "score": DocumentAttributes.DOCUMENT_SCORE,
}
ROLE = MessageAttributes.MESSAGE_ROLE
CONTENT = MessageAttributes.MESSAGE_CONTENT
#: JSON fields tried, in order, for the text of a JSON `input.value` / `output.value`.
INPUT_KEYS = ("question", "query", "input", "query_str", "user_input", "text")
OUTPUT_KEYS = ("answer", "output", "response", "result", "content", "text")
SCALARS = (
    S.OPENINFERENCE_SPAN_KIND,
    S.INPUT_VALUE,
    S.INPUT_MIME_TYPE,
    S.OUTPUT_VALUE,
    S.OUTPUT_MIME_TYPE,
    S.LLM_MODEL_NAME,
    S.LLM_TOKEN_COUNT_PROMPT,
    S.LLM_TOKEN_COUNT_COMPLETION,
    S.LLM_TOKEN_COUNT_TOTAL,
)

__all__ = ["from_frame", "json_text", "scan_jsonl", "slots"]


def json_text(value: pl.Expr, mime: pl.Expr, keys: tuple[str, ...]) -> pl.Expr:
    """The text of an `input.value` / `output.value`: a JSON object's first known field
    (`question`, `answer`, ...) when its mime type is JSON, else the value as it is."""
    fields = [value.str.json_path_match(f"$.{k}") for k in keys]
    return pl.when(mime == "application/json").then(pl.coalesce(*fields, value)).otherwise(value)


def doc_key(i: int, field: str) -> str:
    return f"{S.RETRIEVAL_DOCUMENTS}.{i}.{DOC_FIELDS[field]}"


def msg_key(prefix: str, i: int, field: str) -> str:
    return f"{prefix}.{i}.{field}"


def slots(lines: pl.LazyFrame) -> tuple[int, int, int]:
    """The most documents, input messages and output messages any span of the file has (one
    streaming pass of counts; the schema then has that many slots)."""

    def most(pattern: str) -> pl.Expr:
        return pl.col("line").str.count_matches(pattern).max()

    counts = lines.select(
        most(rf'"{S.RETRIEVAL_DOCUMENTS}\.\d+\.{DocumentAttributes.DOCUMENT_CONTENT}"'),
        most(rf'"{S.LLM_INPUT_MESSAGES}\.\d+\.{ROLE}"').alias("i"),
        most(rf'"{S.LLM_OUTPUT_MESSAGES}\.\d+\.{ROLE}"').alias("o"),
    ).collect()
    return tuple(int(v or 0) for v in counts.row(0))  # type: ignore[return-value]


def attribute_dtype(docs: int, inputs: int, outputs: int) -> pl.Struct:
    """The flat `attributes` object, every value read as text (a number in a string slot is
    kept; a mixed-type value never fails the whole file) and cast afterwards."""
    keys = list(SCALARS)
    keys += [doc_key(i, f) for i in range(docs) for f in DOC_FIELDS]
    keys += [msg_key(S.LLM_INPUT_MESSAGES, i, f) for i in range(inputs) for f in (ROLE, CONTENT)]
    keys += [msg_key(S.LLM_OUTPUT_MESSAGES, i, f) for i in range(outputs) for f in (ROLE, CONTENT)]
    return pl.Struct({k: pl.String for k in keys})


def last_message(prefix: str, n: int, role: str) -> pl.Expr:
    """The content of the last message with `role` among `n` flat message slots."""
    field = pl.col("attributes").struct.field
    messages = [
        pl.when(field(msg_key(prefix, i, ROLE)) == role).then(field(msg_key(prefix, i, CONTENT)))
        for i in range(n)
    ]
    return pl.coalesce(*reversed(messages)) if messages else pl.lit(None, pl.String)


def span_columns(attr: Any, documents: pl.Expr, user: pl.Expr, assistant: pl.Expr) -> list[pl.Expr]:
    """The attribute-derived span columns, given how to read one attribute (`attr(key)`)."""

    def number(key: str) -> pl.Expr:
        return attr(key).cast(pl.String).cast(pl.Float64, strict=False).cast(pl.Int64)

    return [
        attr(S.OPENINFERENCE_SPAN_KIND).cast(pl.String).str.to_uppercase().alias("kind"),
        json_text(attr(S.INPUT_VALUE), attr(S.INPUT_MIME_TYPE), INPUT_KEYS).alias("input"),
        json_text(attr(S.OUTPUT_VALUE), attr(S.OUTPUT_MIME_TYPE), OUTPUT_KEYS).alias("output"),
        user.alias("user_message"),
        assistant.alias("assistant_message"),
        documents.alias("documents"),
        attr(S.LLM_MODEL_NAME).cast(pl.String).alias("model_name"),
        number(S.LLM_TOKEN_COUNT_PROMPT).alias("prompt_tokens"),
        number(S.LLM_TOKEN_COUNT_COMPLETION).alias("completion_tokens"),
        pl.coalesce(
            number(S.LLM_TOKEN_COUNT_TOTAL),
            number(S.LLM_TOKEN_COUNT_PROMPT) + number(S.LLM_TOKEN_COUNT_COMPLETION),
        ).alias("total_tokens"),
    ]


#: ISO times with an offset (`+00:00`, `+0000`), then naive ones (taken as UTC), `T` or space.
ZONED_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%d %H:%M:%S%.f%z")
NAIVE_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f")


def parse_time(expr: pl.Expr) -> pl.Expr:
    """ISO times as the SDK writes them (`2024-05-01T10:00:00.123456Z`), with any offset or
    none (UTC). The formats are explicit: inferring one makes Polars' streaming engine hold
    the whole file (1.3 GiB for a million spans), and it fixed one format for all lines."""
    text = expr.str.replace(r"Z$", "+00:00")
    zoned = [
        text.str.to_datetime(f, time_zone="UTC", strict=False, time_unit="us")
        for f in ZONED_FORMATS
    ]
    naive = [
        text.str.to_datetime(f, strict=False, time_unit="us").dt.replace_time_zone("UTC")
        for f in NAIVE_FORMATS
    ]
    return pl.coalesce(*zoned, *naive).cast(TIME)


def scan_jsonl(lines: pl.LazyFrame, line_numbers: pl.Expr) -> pl.LazyFrame:
    """The span frame of SDK-serialised JSON lines (column `line`: the text; `line_numbers`:
    its 1-based number). Malformed lines are removed by the caller before this."""
    docs, inputs, outputs = slots(lines)
    dtype = pl.Struct(
        {
            "name": pl.String,
            "context": pl.Struct({"trace_id": pl.String, "span_id": pl.String}),
            "parent_id": pl.String,
            "start_time": pl.String,
            "end_time": pl.String,
            "attributes": attribute_dtype(docs, inputs, outputs),
        }
    )
    field = pl.col("attributes").struct.field
    documents = pl.concat_list(
        [
            pl.struct(
                field(doc_key(i, "content")).alias("content"),
                field(doc_key(i, "id")).alias("id"),
                field(doc_key(i, "score")).cast(pl.Float64, strict=False).alias("score"),
            )
            for i in range(docs)
        ]
        or [pl.lit([], pl.List(DOCUMENT))]
    ).list.eval(pl.element().filter(pl.element().struct.field("content").is_not_null()))
    raw = lines.select(line_numbers.cast(pl.Int64).alias("line"), pl.col("line").alias("text"))
    decoded = raw.select("line", pl.col("text").str.json_decode(dtype).alias("span")).unnest("span")
    has_attributes = pl.col("attributes").is_not_null() & pl.any_horizontal(
        [field(k).is_not_null() for k in SCALARS]
    )
    return decoded.select(
        "line",
        normalize_id(pl.col("context").struct.field("trace_id")).alias("trace_id"),
        normalize_id(pl.col("context").struct.field("span_id")).alias("span_id"),
        normalize_id(pl.col("parent_id")).alias("parent_id"),
        parse_time(pl.col("start_time")).alias("start_time"),
        parse_time(pl.col("end_time")).alias("end_time"),
        *span_columns(
            field,
            documents,
            last_message(S.LLM_INPUT_MESSAGES, inputs, "user"),
            last_message(S.LLM_OUTPUT_MESSAGES, outputs, "assistant"),
        ),
        pl.lit(None, pl.String).alias("ground_truth"),
        has_attributes.fill_null(False).alias("has_attributes"),
    )


#: The prefix of a Phoenix span frame's attribute columns.
FRAME_ATTR = "attributes."


def from_frame(frame: pl.LazyFrame) -> pl.LazyFrame:
    """The span frame of a Phoenix span frame (`get_spans_dataframe()`, or its Parquet)."""
    names = frame.collect_schema()
    span_kind = _frame_kind(names)
    columns = span_columns(
        lambda k: span_kind if k == S.OPENINFERENCE_SPAN_KIND else _frame_attr(names, k),
        _frame_documents(names),
        _frame_message(names, S.LLM_INPUT_MESSAGES, "user"),
        _frame_message(names, S.LLM_OUTPUT_MESSAGES, "assistant"),
    )
    attr_columns = [c for c in names if c.startswith(FRAME_ATTR)]
    return frame.with_row_index("line", offset=1).select(
        pl.col("line").cast(pl.Int64),
        _frame_ident(names, "context.trace_id").alias("trace_id"),
        _frame_ident(names, "context.span_id").alias("span_id"),
        _frame_ident(names, "parent_id").alias("parent_id"),
        _frame_time(names, "start_time").cast(TIME).alias("start_time"),
        _frame_time(names, "end_time").cast(TIME).alias("end_time"),
        *columns,
        pl.lit(None, pl.String).alias("ground_truth"),
        (
            pl.any_horizontal([pl.col(c).is_not_null() for c in attr_columns])
            if attr_columns
            else pl.lit(False)
        )
        .fill_null(False)
        .alias("has_attributes"),
    )


def _frame_attr(names: pl.Schema, key: str) -> pl.Expr:
    """An attribute column of the frame, null where the frame has none."""
    name = FRAME_ATTR + key
    return pl.col(name) if name in names else pl.lit(None, pl.String)


def _frame_kind(names: pl.Schema) -> pl.Expr:
    """The span kind attribute, else Phoenix's `span_kind` column."""
    if FRAME_ATTR + S.OPENINFERENCE_SPAN_KIND in names:
        return _frame_attr(names, S.OPENINFERENCE_SPAN_KIND)
    return pl.col("span_kind") if "span_kind" in names else pl.lit(None, pl.String)


def _frame_documents(names: pl.Schema) -> pl.Expr:
    """The retrieved documents as DOCUMENT structs (fields the frame lacks are null)."""
    docs_col = FRAME_ATTR + S.RETRIEVAL_DOCUMENTS
    if docs_col not in names or not isinstance(names[docs_col], pl.List):
        return pl.lit([], pl.List(DOCUMENT))
    inner = names[docs_col].inner  # type: ignore[attr-defined]
    fields = set(inner.to_schema()) if isinstance(inner, pl.Struct) else set()

    def doc_field(name: str, dtype: pl.DataType) -> pl.Expr:
        key = DOC_FIELDS[name]
        if key in fields:
            return pl.element().struct.field(key).cast(dtype, strict=False).alias(name)
        return pl.lit(None, dtype).alias(name)

    return pl.col(docs_col).list.eval(
        pl.struct(
            doc_field("content", pl.String()),
            doc_field("id", pl.String()),
            doc_field("score", pl.Float64()),
        )
    )


def _frame_message(names: pl.Schema, column: str, role: str) -> pl.Expr:
    """The content of the last `role` message of a list-of-messages attribute column."""
    name = FRAME_ATTR + column
    if name not in names or not isinstance(names[name], pl.List):
        return pl.lit(None, pl.String)
    return (
        pl.col(name)
        .list.eval(
            pl.element().filter(pl.element().struct.field(ROLE) == role).struct.field(CONTENT)
        )
        .list.last()
    )


def _frame_time(names: pl.Schema, name: str) -> pl.Expr:
    """A time column in UTC, whether it is ISO text, naive (taken as UTC) or zoned."""
    if name not in names:
        return pl.lit(None, TIME)
    if names[name] == pl.String:
        return parse_time(pl.col(name))
    return (
        pl.col(name).dt.replace_time_zone("UTC")
        if getattr(names[name], "time_zone", None) is None
        else pl.col(name).dt.convert_time_zone("UTC")
    )


def _frame_ident(names: pl.Schema, name: str) -> pl.Expr:
    return normalize_id(pl.col(name)) if name in names else pl.lit(None, pl.String)


def is_sdk_json(first: dict[str, Any]) -> bool:
    """A span as `ReadableSpan.to_json()` writes it (nested `context`, flat `attributes`)."""
    return isinstance(first.get("context"), dict) and "attributes" in first


def is_phoenix_record(first: dict[str, Any]) -> bool:
    """A row of a Phoenix span frame written as JSON (`context.span_id` as one key)."""
    return "context.span_id" in first


def read_phoenix_file(path: Path) -> pl.LazyFrame:
    """A Phoenix span frame saved as Parquet or JSON Lines, lazily."""
    if path.suffix == ".parquet":
        return pl.scan_parquet(path)
    try:
        return pl.scan_ndjson(path, infer_schema_length=None)
    except pl.exceptions.ComputeError as exc:  # pragma: no cover - polars message varies
        raise InputError(f"{path}: not a Phoenix span frame in JSON Lines ({exc})") from exc


def first_record(path: Path) -> dict[str, Any] | None:
    """The first non-empty line of a JSON Lines file, parsed (None when it is not JSON)."""
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    value = json.loads(raw)
                except ValueError:
                    return None
                return value if isinstance(value, dict) else None
    return None
