"""OTLP JSON (the OpenTelemetry Collector's file exporter: one `{"resourceSpans": [...]}`
request per line) into the span frame.

Attributes are OTLP key / AnyValue lists. Both conventions that ride on OTLP are read:
OpenInference's (what Phoenix ingests: `openinference.span.kind`, `input.value`,
`retrieval.documents.N.document.*`, `llm.*`; the user / assistant message is the last
message with that role, its text its `message.content`, else its content parts'
`message.contents.M.message_content.text` joined by a newline, null when it has neither, as
the OpenInference reader reads it) and OpenTelemetry GenAI's: `gen_ai.operation.name`
(chat / text_completion / generate_content → LLM, invoke_agent → AGENT, invoke_workflow →
CHAIN, retrieval → RETRIEVER, embeddings, execute_tool), `gen_ai.request.model` /
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`, the retrieved
documents in `gen_ai.retrieval.documents` (a JSON array of `{id, score, content}`; documents
without content, as when content capture is off, are not contexts), and the messages in
`gen_ai.input.messages` / `gen_ai.output.messages` (JSON, text parts; an agent or workflow
span's input and output when it has no `input.value` / `output.value`) or in
`gen_ai.user.message` / `gen_ai.choice` span events with a `content` attribute. Parsing, the
explode to spans and the attribute lookups are Polars expressions.

OTLP JSON is read as each of OpenTelemetry's writers writes it: the OTLP JSON encoding (the
JSON file exporter, `opentelemetry-proto-json`, the Collector: hex ids, camelCase) and
protobuf's own JSON mapping of the same request (`json_format.MessageToJson` /
`MessageToDict`: ids in base64, read back to the hex Phoenix shows; snake_case names with
`preserving_proto_field_name=True`). int64 fields and `intValue` may be strings or numbers.
Attribute values of every AnyValue kind are read: scalars as text, `arrayValue` and
`kvlistValue` as JSON text (and `tag.tags` as a list), `bytesValue` as its base64 text.

One bad span never costs the file. A batch of lines Polars decodes in one go; a batch it
cannot (a value of a shape OTLP does not have, an array inside an array, attributes given as
an object) is decoded line by line in Python (`canonical`): odd values are read as JSON
text, attributes given as an object map are read as key / value pairs, and a span, scope or
resource that is not an object becomes a span without ids, listed as skipped with its line.
A line that is not a JSON object is left to the caller, which lists it. A line that is
an object without `resourceSpans` (another signal's request, as a Collector file exporter
shared by a logs pipeline writes, or a misspelt key) becomes a span without ids whose
`skip_reason` says so, so that it is listed with its line, never lost.

GenAI's JSON attributes (`gen_ai.retrieval.documents`, `gen_ai.input.messages`,
`gen_ai.output.messages`) are decoded by Polars a batch at a time, and value by value in
Python only for a batch it refuses (`_decoded`): a single object is read as a list of one, a
plain-string document as its content, a content that is a list or object as JSON text. A
value that is not JSON at all (typically cut by the SDK's attribute length limit,
`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) costs its span only: the span is not used
(`has_attributes` false) and its `skip_reason` names the attribute and the limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    MessageContentAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)

from ragframe.inputs.traces.assemble import DOCUMENT, TIME, normalize_id
from ragframe.inputs.traces.openinference import (
    INPUT_KEYS,
    OUTPUT_KEYS,
    PART_SEPARATOR,
    json_text,
)

S = SpanAttributes
#: AnyValue's scalar kinds, each read as text (a JSON number or boolean as its literal).
SCALARS = ("stringValue", "intValue", "doubleValue", "boolValue", "bytesValue")
#: An array's or key / value list's item: a nested array or list is declared as text so that
#: Polars refuses it (it would drop an undeclared one silently) and `canonical` reads it.
SCALAR = pl.Struct(
    {**{kind: pl.String for kind in SCALARS}, "arrayValue": pl.String, "kvlistValue": pl.String}
)
VALUE = pl.Struct(
    {
        **{kind: pl.String for kind in SCALARS},
        "arrayValue": pl.Struct({"values": pl.List(SCALAR)}),  # of scalars; nested: canonical
        "kvlistValue": pl.Struct(
            {"values": pl.List(pl.Struct({"key": pl.String, "value": SCALAR}))}
        ),
    }
)
KV = pl.List(pl.Struct({"key": pl.String, "value": VALUE}))
#: A span's fields read as text (ids, name, times), in the Polars schema, the field canary
#: and the line-by-line decoder alike.
SPAN_TEXT_FIELDS = (
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "startTimeUnixNano",
    "endTimeUnixNano",
)
SPAN = pl.Struct(
    {
        **dict.fromkeys(SPAN_TEXT_FIELDS, pl.String),
        "attributes": KV,
        "events": pl.List(pl.Struct({"name": pl.String, "attributes": KV})),
    }
)
REQUEST = pl.Struct(
    {
        "resourceSpans": pl.List(
            pl.Struct({"scopeSpans": pl.List(pl.Struct({"spans": pl.List(SPAN)}))})
        )
    }
)
#: The key of an OTLP trace request; a line without it is listed as skipped with `NO_SPANS`.
REQUEST_KEY = "resourceSpans"
NO_SPANS = (
    "line has no 'resourceSpans' key (its first key is '{}': another signal's request, such as "
    "a Collector file exporter's logs or metrics, or a misspelt key)"
)
#: The OTLP fields known in each place the reader reads from: read, or deliberately left
#: (resource and scope attributes, status, links, ...). tests/test_real_otel.py checks that
#: what OpenTelemetry's writers write, and every field of the proto messages, is in here.
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "request": frozenset({"resourceSpans"}),
    "resource_spans": frozenset({"resource", "scopeSpans", "schemaUrl"}),
    "scope_spans": frozenset({"scope", "spans", "schemaUrl"}),
    "span": frozenset(
        {
            *SPAN_TEXT_FIELDS,
            "attributes",
            "events",
            "kind",
            "traceState",
            "flags",
            "status",
            "links",
            "droppedAttributesCount",
            "droppedEventsCount",
            "droppedLinksCount",
        }
    ),
    "event": frozenset({"name", "attributes", "timeUnixNano", "droppedAttributesCount"}),
    # `keyStrindex` / `stringValueStrindex` index the Profiling signal's string table; spans
    # never use them (left).
    "key_value": frozenset({"key", "value", "keyStrindex"}),
    "any_value": frozenset({*SCALARS, "arrayValue", "kvlistValue", "stringValueStrindex"}),
}
#: protobuf's JSON mapping with `preserving_proto_field_name=True` writes the proto names;
#: a key is always followed by `:` (inside a string a quote is escaped), so the swap below
#: renames keys only, never an attribute's name or value.
SNAKE_CASE = {
    "resource_spans": "resourceSpans",
    "scope_spans": "scopeSpans",
    "schema_url": "schemaUrl",
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
    "trace_state": "traceState",
    "start_time_unix_nano": "startTimeUnixNano",
    "end_time_unix_nano": "endTimeUnixNano",
    "time_unix_nano": "timeUnixNano",
    "dropped_attributes_count": "droppedAttributesCount",
    "dropped_events_count": "droppedEventsCount",
    "dropped_links_count": "droppedLinksCount",
    "string_value": "stringValue",
    "int_value": "intValue",
    "double_value": "doubleValue",
    "bool_value": "boolValue",
    "bytes_value": "bytesValue",
    "array_value": "arrayValue",
    "kvlist_value": "kvlistValue",
}
GENAI_KINDS = {
    "chat": OpenInferenceSpanKindValues.LLM.value,
    "text_completion": OpenInferenceSpanKindValues.LLM.value,
    "generate_content": OpenInferenceSpanKindValues.LLM.value,
    "invoke_agent": OpenInferenceSpanKindValues.AGENT.value,
    "invoke_workflow": OpenInferenceSpanKindValues.CHAIN.value,
    "retrieval": OpenInferenceSpanKindValues.RETRIEVER.value,
    "embeddings": OpenInferenceSpanKindValues.EMBEDDING.value,
    "execute_tool": OpenInferenceSpanKindValues.TOOL.value,
}
#: The GenAI attributes read (checked against `opentelemetry-semantic-conventions` in the tests).
GENAI = {
    "operation": "gen_ai.operation.name",
    "input_messages": "gen_ai.input.messages",
    "output_messages": "gen_ai.output.messages",
    "documents": "gen_ai.retrieval.documents",
    "request_model": "gen_ai.request.model",
    "response_model": "gen_ai.response.model",
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "user_event": "gen_ai.user.message",
    "choice_event": "gen_ai.choice",
}
#: GenAI's retrieved documents: a JSON array of objects with `id`, `score` and, when content
#: capture is on, `content` (read as text, the score cast afterwards).
GENAI_DOCUMENTS = pl.List(pl.Struct({"content": pl.String, "id": pl.String, "score": pl.String}))
MESSAGES = pl.List(
    pl.Struct(
        {"role": pl.String, "parts": pl.List(pl.Struct({"type": pl.String, "content": pl.String}))}
    )
)
DOC_FIELDS = "|".join(
    k.removeprefix("document.")
    for k in (
        DocumentAttributes.DOCUMENT_CONTENT,
        DocumentAttributes.DOCUMENT_ID,
        DocumentAttributes.DOCUMENT_SCORE,
    )
)
#: A message's fields as `_indexed` names them (after `message.`), and a content part's text
#: (`llm.input_messages.1.message.contents.0.message_content.text`).
ROLE_FIELD = MessageAttributes.MESSAGE_ROLE.removeprefix("message.")
CONTENT_FIELD = MessageAttributes.MESSAGE_CONTENT.removeprefix("message.")
CONTENTS_FIELD = MessageAttributes.MESSAGE_CONTENTS.removeprefix("message.")
PART_TEXT = MessageContentAttributes.MESSAGE_CONTENT_TEXT
DOC_PATTERN = rf"^{S.RETRIEVAL_DOCUMENTS}\.(\d+)\.document\.({DOC_FIELDS})$"

__all__ = ["KNOWN_FIELDS", "canonical", "json_documents", "scan_otlp"]


def _json_string(text: pl.Expr) -> pl.Expr:
    """`text` as a JSON string literal (null stays null)."""
    quoted = pl.struct(text.alias("v")).struct.json_encode().str.slice(5).str.strip_suffix("}")
    return pl.when(text.is_not_null()).then(quoted)


def _scalar_text(value: pl.Expr) -> pl.Expr:
    return pl.coalesce(*(value.struct.field(kind) for kind in SCALARS))


def _scalar_json(value: pl.Expr) -> pl.Expr:
    """A scalar AnyValue as a JSON literal (strings and bytes quoted)."""
    return pl.coalesce(
        _json_string(value.struct.field("stringValue")),
        value.struct.field("intValue"),
        value.struct.field("doubleValue"),
        value.struct.field("boolValue"),
        _json_string(value.struct.field("bytesValue")),
        pl.lit("null"),
    )


def _text(value: pl.Expr) -> pl.Expr:
    """An AnyValue as text: a scalar as itself, an array or key / value list as JSON."""
    array = value.struct.field("arrayValue").struct.field("values")
    kvlist = value.struct.field("kvlistValue").struct.field("values")
    pairs = kvlist.list.eval(
        _json_string(pl.element().struct.field("key"))
        + pl.lit(":")
        + _scalar_json(pl.element().struct.field("value"))
    )
    return pl.coalesce(
        _scalar_text(value),
        pl.lit("[") + array.list.eval(_scalar_json(pl.element())).list.join(",") + pl.lit("]"),
        pl.lit("{") + pairs.list.join(",") + pl.lit("}"),
    )


def _items(value: pl.Expr) -> pl.Expr:
    """An AnyValue as a list of texts: an array's items, else the scalar alone."""
    array = value.struct.field("arrayValue").struct.field("values")
    scalar = _scalar_text(value)
    return pl.coalesce(
        array.list.eval(_scalar_text(pl.element())),
        pl.when(scalar.is_not_null()).then(pl.concat_list(scalar)),
    )


def _attr(key: str, column: str = "attrs") -> pl.Expr:
    """The text of the span's attribute `key` (its first, if repeated)."""
    return (
        pl.col(column)
        .list.eval(
            pl.element().filter(pl.element().struct.field("key") == key).struct.field("text")
        )
        .list.first()
    )


def _last_message(column: str, role: str) -> pl.Expr:
    """The text parts of the last `role` message of a GenAI messages attribute decoded by
    `_decoded` into `column`."""
    messages = pl.col(column).struct.field("value")
    return messages.list.eval(
        pl.element()
        .filter(pl.element().struct.field("role") == role)
        .struct.field("parts")
        .list.eval(pl.element().struct.field("content"))
        .list.join(PART_SEPARATOR)
    ).list.last()


def _indexed(
    spans: pl.LazyFrame, pattern: str, fields: dict[str, str], parts: str | None = None
) -> pl.LazyFrame:
    """Per span (`sid`), the attributes `prefix.N.field` regrouped by N, in N order, as a list
    of structs with `fields` (output name → attribute field). `parts`: also the output name of
    the texts of keys `prefix.N.<list>.M.<field>` (the pattern's third group is M), joined by
    PART_SEPARATOR in M order; null when the item has none."""
    part = pl.col("key").str.extract(pattern, 3).cast(pl.Int64) if parts else pl.lit(None)
    long = (
        spans.select("sid", "attrs")
        .explode("attrs")
        .select("sid", pl.col("attrs").struct.field("key"), pl.col("attrs").struct.field("text"))
        .filter(pl.col("key").str.contains(pattern))
        .with_columns(
            pl.col("key").str.extract(pattern, 1).cast(pl.Int64).alias("index"),
            pl.col("key").str.extract(pattern, 2).alias("field"),
            part.alias("part"),
        )
    )
    aggregates = [
        pl.col("text").filter(pl.col("field") == attr).first().alias(name)
        for name, attr in fields.items()
    ]
    if parts:
        is_part = pl.col("part").is_not_null() & pl.col("text").is_not_null()
        texts = pl.col("text").filter(is_part).sort_by(pl.col("part").filter(is_part))
        aggregates.append(pl.when(is_part.any()).then(texts.str.join(PART_SEPARATOR)).alias(parts))
    per_item = long.group_by("sid", "index").agg(aggregates)
    names = [*fields, *([parts] if parts else [])]
    return per_item.group_by("sid").agg(pl.struct(names).sort_by("index").alias("items"))


def scan_otlp(lines: pl.LazyFrame, *, tolerant: bool = True) -> pl.LazyFrame:
    """The span frame of OTLP JSON lines (`n`: line number, `line`: one export request).

    tolerant : decode through `_decode` (a Python call per batch, `canonical` per line of a
        batch Polars refuses), so that values of any shape are read. False: Polars alone,
        which refuses the whole file on one odd value but is faster and lighter (at 1M spans,
        512 a line: 76 s and 3,136 MiB against 121 s and 3,286 MiB); a caller that retries
        with True when it fails gets both."""
    spans = _spans(lines, tolerant=tolerant)
    frame = spans.join(_documents(spans), on="sid", how="left")
    for role, name in (("user", "oi_user"), ("assistant", "oi_assistant")):
        frame = frame.join(_openinference_message(spans, role, name), on="sid", how="left")
    frame = frame.with_columns(
        _decoded(GENAI["documents"], GENAI_DOCUMENTS, _documents_value).alias("genai_documents"),
        _decoded(GENAI["input_messages"], MESSAGES, _messages_value).alias("genai_input"),
        _decoded(GENAI["output_messages"], MESSAGES, _messages_value).alias("genai_output"),
    )
    reason = pl.coalesce(
        "line_reason",
        *(
            pl.col(c).struct.field("error")
            for c in ("genai_documents", "genai_input", "genai_output")
        ),
    )
    return frame.select(
        "line",
        *_ids(),
        _kind().alias("kind"),
        _nanos("startTimeUnixNano").alias("start_time"),
        _nanos("endTimeUnixNano").alias("end_time"),
        *_texts(),
        pl.coalesce(
            pl.when(pl.col("documents").list.len() > 0).then("documents"),
            _genai_documents(),
            pl.lit([], pl.List(DOCUMENT)),
        ).alias("documents"),
        *_model_and_tokens(),
        pl.lit(None, pl.String).alias("ground_truth"),
        # a span the reader could not read is not used (listed as skipped by `assemble`)
        ((pl.col("attrs").list.len() > 0) & reason.is_null())
        .fill_null(False)
        .alias("has_attributes"),
        _attr(S.SESSION_ID).alias("session_id"),
        _attr(S.USER_ID).alias("user_id"),
        _attr(S.METADATA).alias("metadata"),
        "tags",
        reason.alias("skip_reason"),  # why the span forms nothing, for the skipped list
    )


CHUNK = 1 << 20
#: Anything but JSON's whitespace (which is skipped between documents).
_INK = re.compile(r"[^ \t\n\r]")


def json_documents(path: Path) -> pl.LazyFrame:
    """A file of JSON documents that are not one a line, as the JSON Lines frame the readers
    take (`n`: the line a document starts on, `line`: the document, compact): protobuf's
    `MessageToJson` (indented by default), `json.dump(..., indent=2)`, the SDK console
    exporter's indented span after span, or a JSON array of requests (one document per item).
    The file is parsed in chunks, but the documents are held as compact text (a fraction of
    the file): these are debugging exports, not the bulk path, which is JSON Lines. Text that
    is no JSON is one document of its own (from where it starts to the end of its line), so
    that the reader lists it with its line."""
    numbers, texts = [], []
    for number, text in _documents_of(path):
        numbers.append(number)
        texts.append(text)
    return pl.LazyFrame({"n": numbers, "line": texts}, schema={"n": pl.UInt32, "line": pl.String})


def _documents_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line it starts on, compact text) of each document, and of each item of a top-level
    array, parsed once each from a position in the buffer (an array is not parsed whole, so
    a 56 MB array reads as fast per MB as small documents and is never held as objects).
    A document not yet whole is parsed again after each read, and each read is at least as
    large as what is held (the buffer doubles), so its parses add up to about twice its size.
    An array not closed by the end of the file ends with `[`, which the caller lists."""
    decoder = json.JSONDecoder()
    buffer, pos, line, done = "", 0, 1, False
    array_line = 0  # the line of the top-level array being read, 0 outside one
    with path.open(encoding="utf-8") as handle:

        def more() -> None:
            nonlocal buffer, pos, done
            chunk = handle.read(max(CHUNK, len(buffer) - pos))
            buffer, pos, done = buffer[pos:] + chunk, 0, not chunk

        while True:
            found = _INK.search(buffer, pos)
            start = found.start() if found else len(buffer)
            line += buffer.count("\n", pos, start)
            pos = start
            if pos == len(buffer):
                if not done:
                    more()
                    continue
                if array_line:
                    yield array_line, "["
                return
            if array_line and buffer[pos] in ",]":
                array_line = 0 if buffer[pos] == "]" else array_line
                pos += 1
                continue
            if not array_line and buffer[pos] == "[":
                array_line, pos = line, pos + 1
                continue
            try:
                value, end = decoder.raw_decode(buffer, pos)
            except ValueError:
                if not done:
                    more()
                    continue
                end = buffer.find("\n", pos)
                end = len(buffer) if end < 0 else end
                yield line, buffer[pos:end]
                pos = end
                continue
            if end == len(buffer) and not done:  # a number or literal may go on in the next chunk
                more()
                continue
            yield line, json.dumps(value, ensure_ascii=False)
            line += buffer.count("\n", pos, end)
            pos = end


def _spans(lines: pl.LazyFrame, *, tolerant: bool) -> pl.LazyFrame:
    """One row per span (`sid`: its index), its attributes as `attrs` (key, text), its tags."""
    snake = [f'"{name}":' for name in SNAKE_CASE]
    camel = [f'"{name}":' for name in SNAKE_CASE.values()]
    text = pl.col("line").str.replace_many(snake, camel)
    first_key = pl.col("line").str.extract(r'^\s*\{\s*"([^"\\]*)"', 1)
    return (
        lines.select(
            pl.col("n").cast(pl.Int64).alias("line"),
            pl.when(first_key.is_null())
            .then(pl.lit(f"line has no {REQUEST_KEY!r} key"))
            .otherwise(pl.format(NO_SPANS, first_key))
            .alias("no_spans"),
            (
                text.map_batches(_decode, return_dtype=REQUEST, is_elementwise=True)
                if tolerant
                else text.str.json_decode(REQUEST)
            ).alias("request"),
        )
        .unnest("request")
        # a line with no resourceSpans (another signal's request, a misspelt key) is one span
        # without ids and with its reason, so that it is listed, not lost
        .with_columns(
            pl.when(pl.col("resourceSpans").is_null()).then("no_spans").alias("line_reason")
        )
        .explode("resourceSpans")
        .select("line", "line_reason", pl.col("resourceSpans").struct.field("scopeSpans"))
        .explode("scopeSpans")
        .select("line", "line_reason", pl.col("scopeSpans").struct.field("spans"))
        .explode("spans")
        .filter(pl.col("spans").is_not_null() | pl.col("line_reason").is_not_null())
        .unnest("spans")
        .with_row_index("sid")
        .select(
            pl.exclude("attributes"),
            _tags(pl.col("attributes")).alias("tags"),
            pl.col("attributes")
            .list.eval(
                pl.struct(
                    pl.element().struct.field("key"),
                    _text(pl.element().struct.field("value")).alias("text"),
                )
            )
            .alias("attrs"),
        )
    )


def _tags(attributes: pl.Expr) -> pl.Expr:
    """OpenInference's `tag.tags`: an array's items as texts (a single text as one tag)."""
    value = attributes.list.eval(
        pl.element().filter(pl.element().struct.field("key") == S.TAG_TAGS).struct.field("value")
    ).list.first()
    return _items(value)


def _decode(lines: pl.Series) -> pl.Series:
    """A batch of OTLP JSON lines as `REQUEST`s: by Polars in one go, else (a value of a shape
    the schema does not have) line by line through `canonical`."""
    try:
        return lines.str.json_decode(REQUEST)
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError):
        fixed = pl.Series(lines.name, [canonical(line) for line in lines], pl.String)
        return fixed.str.json_decode(REQUEST)


def canonical(line: str) -> str:
    """One OTLP JSON request line in the shape `REQUEST` decodes, whatever its values' shapes
    (an unexpected value as JSON text; a span that is not an object as a span without ids,
    which the assembly lists as skipped with its line). A line that is not a JSON object
    raises ComputeError, as Polars does, so that the caller lists it."""
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise pl.exceptions.ComputeError(f"line is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise pl.exceptions.ComputeError("line is not a JSON object")
    if request.get(REQUEST_KEY) is None:  # not a trace request: listed by `_spans`
        return "{}"
    resources = []
    for resource in _listed(request.get("resourceSpans")):
        scopes = []
        for scope in _listed(_field(resource, "scopeSpans", [None])):
            spans = [_span(span) for span in _listed(_field(scope, "spans", [None]))]
            scopes.append({"spans": spans})
        resources.append({"scopeSpans": scopes})
    return json.dumps({"resourceSpans": resources})


def _listed(value: Any) -> list[Any]:
    """A repeated field: a list as it is, absent as empty, anything else as one odd item."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _field(container: Any, name: str, odd: Any) -> Any:
    """`container[name]`, or `odd` when the container is not an object."""
    return container.get(name) if isinstance(container, dict) else odd


def _span(span: Any) -> dict[str, Any]:
    if not isinstance(span, dict):
        return {}
    out: dict[str, Any] = {key: _as_text(span.get(key)) for key in SPAN_TEXT_FIELDS}
    out["attributes"] = _attributes(span.get("attributes"))
    out["events"] = [
        {"name": _as_text(event.get("name")), "attributes": _attributes(event.get("attributes"))}
        for event in _listed(span.get("events"))
        if isinstance(event, dict)
    ]
    return out


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _dumps(_plain(value))


def _dumps(value: Any) -> str:
    """JSON text as the Polars path writes it (compact), so both paths give the same text."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _attributes(value: Any) -> list[dict[str, Any]]:
    """OTLP's key / value list, or an object map of names to values, as key / value pairs."""
    if isinstance(value, dict):
        pairs = [{"key": k, "value": v} for k, v in value.items()]
    else:
        pairs = [p for p in _listed(value) if isinstance(p, dict) and "key" in p]
    return [{"key": _as_text(p["key"]), "value": _value(p.get("value"))} for p in pairs]


def _any_kind(value: Any) -> str | None:
    """The AnyValue kind of `value` (an object with one known kind key), else None."""
    if isinstance(value, dict) and len(value) == 1:
        kind = next(iter(value))
        return kind if kind in (*SCALARS, "arrayValue", "kvlistValue") else None
    return None


def _value(value: Any) -> dict[str, Any]:
    """A value as the AnyValue `VALUE` decodes: a scalar as it is, an array or key / value
    list of scalars kept, anything else (nested, or of no AnyValue shape) as JSON text."""
    kind = _any_kind(value)
    if kind in SCALARS:
        inner = value[kind]
        return {kind: inner if isinstance(inner, str) else _dumps(inner)}
    items = _field(value.get(kind), "values", None) if kind else None
    if isinstance(items, list):
        inner_values = [i.get("value") if kind == "kvlistValue" else i for i in items]
        flat = all(isinstance(i, dict) for i in items) and all(
            _any_kind(v) in SCALARS for v in inner_values
        )
        if flat:
            return {
                kind: {"values": [_value(i) if kind == "arrayValue" else _pair(i) for i in items]}
            }
    plain = _plain(value)
    return {"stringValue": plain if isinstance(plain, str) else _dumps(plain)}


def _pair(item: dict[str, Any]) -> dict[str, Any]:
    return {"key": _as_text(item.get("key")), "value": _value(item.get("value"))}


def _plain(value: Any) -> Any:
    """An AnyValue (or any JSON) as the plain value it stands for."""
    kind = _any_kind(value)
    if kind is None:
        if isinstance(value, list):
            return [_plain(v) for v in value]
        if isinstance(value, dict):
            return {k: _plain(v) for k, v in value.items()}
        return value
    inner = value[kind]
    if kind == "arrayValue":
        return [_plain(v) for v in _listed(_field(inner, "values", inner))]
    if kind == "kvlistValue":
        pairs = _listed(_field(inner, "values", inner))
        return {str(p.get("key")): _plain(p.get("value")) for p in pairs if isinstance(p, dict)}
    if isinstance(inner, str) and kind in ("intValue", "doubleValue", "boolValue"):
        try:
            return json.loads(inner)
        except ValueError:
            return inner
    return inner


def _documents(spans: pl.LazyFrame) -> pl.LazyFrame:
    """Per span, its retrieved documents (OpenInference's indexed attributes), with content."""
    items = _indexed(spans, DOC_PATTERN, {"content": "content", "id": "id", "score": "score"})
    return items.select("sid", _with_content(pl.col("items")).alias("documents"))


def _genai_documents() -> pl.Expr:
    """GenAI's `gen_ai.retrieval.documents` (JSON on the span) as documents with content."""
    return _with_content(pl.col("genai_documents").struct.field("value"))


def _decoded(key: str, dtype: pl.DataType, read: Callable[[Any], Any]) -> pl.Expr:
    """The span's JSON attribute `key` as a struct of `value` (in `dtype`) and `error` (why it
    could not be read, else null). A batch is decoded by Polars in one go; a batch it refuses
    value by value in Python (`_json_values`), so that one bad value costs its span only."""

    def decode(texts: pl.Series) -> pl.Series:
        return _json_values(texts, key, dtype, read)

    dtypes = {"value": dtype, "error": pl.String()}
    return _attr(key).map_batches(decode, return_dtype=pl.Struct(dtypes), is_elementwise=True)


def _json_values(
    texts: pl.Series, key: str, dtype: pl.DataType, read: Callable[[Any], Any]
) -> pl.Series:
    """`_decoded`'s batch: `read` turns one parsed value into `dtype`'s shape or raises
    ValueError with what is wrong with it."""
    try:
        values = texts.str.json_decode(dtype)
        errors = pl.Series([None] * len(texts), dtype=pl.String)
    except pl.exceptions.PolarsError:
        decoded, reasons = [], []
        for text in texts:
            value, reason = None, None
            if text is not None:
                try:
                    value = read(json.loads(text))
                except ValueError as exc:
                    reason = _json_error(key, text, exc)
            decoded.append(value)
            reasons.append(reason)
        values = pl.Series(decoded, dtype=dtype)
        errors = pl.Series(reasons, dtype=pl.String)
    return pl.DataFrame({"value": values, "error": errors}).to_struct(texts.name)


def _json_error(key: str, text: str, exc: ValueError) -> str:
    """One line: why `key`'s value `text` was not read, and what to do when it was cut."""
    if not isinstance(exc, json.JSONDecodeError):
        return f"{key} could not be read: {exc}"
    if not text.rstrip().endswith(("]", "}")):
        return (
            f"{key} is not JSON: it stops after {len(text)} characters, as when an attribute "
            "length limit cuts it (raise OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT or the SDK's "
            "SpanLimits)"
        )
    return f"{key} is not JSON ({exc.msg} at character {exc.pos})"


def _text_of(value: Any) -> str | None:
    """A JSON value read as text: a string as itself, anything else as compact JSON."""
    return value if value is None or isinstance(value, str) else _dumps(value)


def _objects(value: Any, what: str) -> list[Any]:
    """A JSON array as its items, a single object or string as one item."""
    if isinstance(value, list):
        return value
    if isinstance(value, (dict, str)):
        return [value]
    raise ValueError(f"{what} is a {type(value).__name__}, not a list")


def _documents_value(value: Any) -> list[dict[str, Any]]:
    """GenAI documents in `GENAI_DOCUMENTS`' shape: a single object as one document, a plain
    string as a document's content, fields that are not text as JSON text."""
    documents = []
    for item in _objects(value, "gen_ai.retrieval.documents"):
        fields = item if isinstance(item, dict) else {"content": item}
        documents.append({name: _text_of(fields.get(name)) for name in ("content", "id", "score")})
    return documents


def _messages_value(value: Any) -> list[dict[str, Any]]:
    """GenAI messages in `MESSAGES`' shape: a single message or part as a list of one, a part
    given as a plain string as a text part, a part's content that is not text as JSON text."""
    messages = []
    for message in _objects(value, "the messages"):
        if not isinstance(message, dict):
            raise ValueError(f"a message is a {type(message).__name__}, not an object")
        parts = []
        for part in _objects(message.get("parts") or [], "a message's parts"):
            if isinstance(part, dict):
                parts.append(
                    {"type": _text_of(part.get("type")), "content": _text_of(part.get("content"))}
                )
            else:
                parts.append({"type": "text", "content": _text_of(part)})
        messages.append({"role": _text_of(message.get("role")), "parts": parts})
    return messages


def _with_content(items: pl.Expr) -> pl.Expr:
    """Documents read as text (content, id, score) as `DOCUMENT`s, the score a number, those
    without content left out (they cannot be contexts)."""
    return items.list.eval(
        pl.struct(
            pl.element().struct.field("content"),
            pl.element().struct.field("id"),
            pl.element().struct.field("score").cast(pl.Float64, strict=False),
        ).filter(pl.element().struct.field("content").is_not_null())
    )


def _openinference_message(spans: pl.LazyFrame, role: str, name: str) -> pl.LazyFrame:
    """Per span, the text of the last `role` message of its OpenInference input (user) or
    output (assistant) messages, as column `name`: its `message.content`, else the text of its
    content parts (`message.contents.M.message_content.text`, what the OpenAI instrumentor
    writes when the request's content is a list of parts) joined by PART_SEPARATOR; null when
    that message has no text (only tool calls, an image), not an earlier message's."""
    prefix = re.escape(S.LLM_INPUT_MESSAGES if role == "user" else S.LLM_OUTPUT_MESSAGES)
    pattern = (
        rf"^{prefix}\.(\d+)\.message\.({ROLE_FIELD}|{CONTENT_FIELD}|"
        rf"{CONTENTS_FIELD}\.(\d+)\.{re.escape(PART_TEXT)})$"
    )
    fields = {"role": ROLE_FIELD, "content": CONTENT_FIELD}
    message = pl.element().struct.field
    text = pl.coalesce(message("content"), message("parts"))
    return _indexed(spans, pattern, fields, parts="parts").select(
        "sid",
        pl.col("items").list.eval(text.filter(message("role") == role)).list.last().alias(name),
    )


def _event_content(name: str) -> pl.Expr:
    """The `content` attribute of the span's last `name` event (GenAI's message events)."""
    return (
        pl.col("events")
        .list.eval(
            pl.element()
            .filter(pl.element().struct.field("name") == name)
            .struct.field("attributes")
            .list.eval(
                _text(
                    pl.element()
                    .filter(pl.element().struct.field("key") == "content")
                    .struct.field("value")
                )
            )
            .list.first()
        )
        .list.drop_nulls()
        .list.last()
    )


def _kind() -> pl.Expr:
    """OpenInference's span kind, else the one GenAI's operation name implies."""
    operation = _attr(GENAI["operation"])
    return pl.coalesce(
        _attr(S.OPENINFERENCE_SPAN_KIND).str.to_uppercase(),
        operation.replace_strict(GENAI_KINDS, default=None, return_dtype=pl.String),
    )


def _nanos(column: str) -> pl.Expr:
    return pl.from_epoch(pl.col(column).cast(pl.Int64, strict=False), "ns").cast(TIME)


def _hex_id(column: str) -> pl.Expr:
    """An id as Phoenix shows it (lower-case hex). protobuf's JSON mapping writes the bytes
    in base64, which for 8 and 16 bytes always ends in `=` (hex never has one)."""
    raw = pl.col(column)
    decoded = raw.str.decode("base64", strict=False).bin.encode("hex")
    return pl.when(raw.str.ends_with("=")).then(decoded).otherwise(normalize_id(raw))


def _ids() -> list[pl.Expr]:
    return [
        _hex_id("traceId").alias("trace_id"),
        _hex_id("spanId").alias("span_id"),
        pl.when(pl.col("parentSpanId") != "").then(_hex_id("parentSpanId")).alias("parent_id"),
    ]


def _texts() -> list[pl.Expr]:
    """input, output and the last user / assistant message, from either convention."""
    return [
        pl.coalesce(
            json_text(_attr(S.INPUT_VALUE), _attr(S.INPUT_MIME_TYPE), INPUT_KEYS),
            _last_message("genai_input", "user"),
        ).alias("input"),
        pl.coalesce(
            json_text(_attr(S.OUTPUT_VALUE), _attr(S.OUTPUT_MIME_TYPE), OUTPUT_KEYS),
            _last_message("genai_output", "assistant"),
        ).alias("output"),
        pl.coalesce(
            "oi_user",
            _last_message("genai_input", "user"),
            _event_content(GENAI["user_event"]),
        ).alias("user_message"),
        pl.coalesce(
            "oi_assistant",
            _last_message("genai_output", "assistant"),
            _event_content(GENAI["choice_event"]),
        ).alias("assistant_message"),
    ]


def _number(*keys: str) -> pl.Expr:
    return pl.coalesce(*(_attr(k).cast(pl.Float64, strict=False) for k in keys)).cast(pl.Int64)


def _model_and_tokens() -> list[pl.Expr]:
    prompt = _number(S.LLM_TOKEN_COUNT_PROMPT, GENAI["input_tokens"])
    completion = _number(S.LLM_TOKEN_COUNT_COMPLETION, GENAI["output_tokens"])
    return [
        pl.coalesce(
            _attr(S.LLM_MODEL_NAME), _attr(GENAI["response_model"]), _attr(GENAI["request_model"])
        ).alias("model_name"),
        prompt.alias("prompt_tokens"),
        completion.alias("completion_tokens"),
        pl.coalesce(_number(S.LLM_TOKEN_COUNT_TOTAL), prompt + completion).alias("total_tokens"),
    ]
