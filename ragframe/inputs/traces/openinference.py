"""OpenInference spans (Phoenix, Arize, the LlamaIndex / LangChain / OpenAI instrumentors).

Three shapes are read:

* JSON Lines of spans as the OpenTelemetry SDK serialises them (`ReadableSpan.to_json()`, what
  a file or console exporter writes): `context.trace_id`, `context.span_id`, `parent_id`,
  ISO `start_time` / `end_time` and a flat `attributes` object keyed by the OpenInference
  conventions (`retrieval.documents.0.document.content`, ...).
* Span frames as Phoenix's `get_spans_dataframe()` returns them (`context.span_id`,
  `parent_id`, `span_kind`, `attributes.input.value`, `attributes.retrieval.documents` as a
  list of `{"document.content": ...}` objects), given as a Polars or pandas DataFrame
  (`from_pandas`), or saved as Parquet, JSON Lines, or by pandas' `to_json()` with its
  defaults (`columns_frame`).
* Phoenix's REST span list (`Client().spans.get_spans()`, `GET /v1/projects/{p}/spans`): the
  SDK shape with the kind in `span_kind`, written a span a line or as one JSON array.

Attribute names come from `openinference-semantic-conventions`, never typed by hand. JSON
Lines are parsed by Polars with an explicit schema (no per-line Python); a first streaming pass
over the file (`survey`) measures the schema's number of document and message slots, and finds
the attributes the reader reads that some span holds as a list or an object (valid in OTel):
those are read as their JSON text, so no span's shape stops the file. The trace-level
`session.id`, `user.id`, `metadata` (JSON text) and `tag.tags` are read wherever they are.
A message's text is its `message.content`, else its content parts' text (`message.contents.N.
message_content.text`, what the OpenAI instrumentor writes for a list of parts) joined by a
newline; a message of tool calls only has none. A token count that is no integer ("NaN", inf,
1e30) is null and a tag that is an object its JSON text: one span's value never costs the file.
`KNOWN_FIELDS` lists every field the reader knows, for the tests' unknown-field canary.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    MessageContentAttributes,
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
#: A message's content as a list of parts (what the OpenAI instrumentor writes when the
#: request's content is a list): `message.contents.0.message_content.text`, ...
CONTENTS = MessageAttributes.MESSAGE_CONTENTS
PART_TEXT = MessageContentAttributes.MESSAGE_CONTENT_TEXT
#: How a message's text parts are joined into its text (as the LangSmith reader joins them).
PART_SEPARATOR = "\n"
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
    S.SESSION_ID,
    S.USER_ID,
    S.METADATA,
)
#: The trace-level attributes a row carries (`tag.tags` is a list of strings in OTel).
TRACE_TEXT = {S.SESSION_ID: "session_id", S.USER_ID: "user_id", S.METADATA: "metadata"}
TAGS = S.TAG_TAGS

#: The fields the reader knows, by place (read, or left alone on purpose): a real export with
#: a field outside these fails the canary test, so a tool's new field is looked at, not missed.
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    # Phoenix's REST span list (`Client().spans.get_spans()`), each span's keys.
    "rest_span": frozenset(
        {"id", "name", "context", "span_kind", "parent_id", "start_time", "end_time"}
        | {"status_code", "status_message", "attributes", "events"}
    ),
    # An SDK span (`ReadableSpan.to_json()`), its keys.
    "sdk_span": frozenset(
        {"name", "context", "kind", "parent_id", "start_time", "end_time", "status"}
        | {"attributes", "events", "links", "resource"}
    ),
    # `context` of either.
    "context": frozenset({"trace_id", "span_id", "trace_state"}),
    # Phoenix's span frame (`get_spans_dataframe()`), its columns other than `attributes.*`.
    "frame_column": frozenset(
        {"name", "span_kind", "parent_id", "start_time", "end_time", "status_code"}
        | {"status_message", "events", "context.span_id", "context.trace_id"}
    ),
    # Attributes: read ones (retrieval documents and messages by their list name) and those
    # deliberately left (request parameters, vendor, finish reason, tool schemas, and the
    # token counts' details, such as the cached prompt tokens the endpoint reported: the
    # pipeline's own usage, not the judge's).
    "attribute": frozenset(
        {*SCALARS, TAGS, S.RETRIEVAL_DOCUMENTS, S.LLM_INPUT_MESSAGES, S.LLM_OUTPUT_MESSAGES}
        | {S.LLM_INVOCATION_PARAMETERS, S.LLM_SYSTEM, S.LLM_PROVIDER, "llm.finish_reason"}
        | {S.LLM_TOOLS, S.EMBEDDING_MODEL_NAME, S.EMBEDDING_EMBEDDINGS}
        | {S.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ, S.LLM_TOKEN_COUNT_PROMPT_DETAILS_AUDIO}
        | {S.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE}
        | {S.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_INPUT}
        | {S.LLM_TOKEN_COUNT_COMPLETION_DETAILS_AUDIO}
        | {S.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING}
    ),
    # A retrieved document's fields (`document.metadata` is left).
    "document": frozenset({*DOC_FIELDS.values(), DocumentAttributes.DOCUMENT_METADATA}),
    # A message's fields (tool calls are left; the text of its content parts is read).
    "message": frozenset(
        {ROLE, CONTENT, MessageAttributes.MESSAGE_TOOL_CALLS, MessageAttributes.MESSAGE_NAME}
        | {CONTENTS, MessageAttributes.MESSAGE_TOOL_CALL_ID}
    ),
    # A content part's fields (the text is read; images, audio and the rest are left).
    "content_part": frozenset(
        getattr(MessageContentAttributes, name)
        for name in dir(MessageContentAttributes)
        if name.startswith("MESSAGE_CONTENT_")
    ),
}

__all__ = [
    "KNOWN_FIELDS",
    "Survey",
    "attribute_family",
    "columns_frame",
    "from_frame",
    "from_pandas",
    "json_text",
    "scan_jsonl",
    "survey",
]


JSON_MIME = "application/json"


def json_text(value: pl.Expr, mime: pl.Expr, keys: tuple[str, ...]) -> pl.Expr:
    """The text of an `input.value` / `output.value`: a JSON object's first known field
    (`question`, `answer`, ...) when its mime type is JSON, else the value as it is."""
    fields = [value.str.json_path_match(f"$.{k}") for k in keys]
    return pl.when(mime == JSON_MIME).then(pl.coalesce(*fields, value)).otherwise(value)


def doc_key(i: int, field: str) -> str:
    return f"{S.RETRIEVAL_DOCUMENTS}.{i}.{DOC_FIELDS[field]}"


def msg_key(prefix: str, i: int, field: str) -> str:
    return f"{prefix}.{i}.{field}"


def part_key(prefix: str, i: int, j: int) -> str:
    """The text of content part `j` of message `i` (`llm.input_messages.1.message.contents.0.
    message_content.text`)."""
    return f"{prefix}.{i}.{CONTENTS}.{j}.{PART_TEXT}"


#: A read attribute whose value is a list or an object (`"input.value": [`, `"tag.tags": [`); a
#: key inside a JSON string has escaped quotes and does not match.
NESTED_READ = (
    '"('
    + "|".join(
        [re.escape(k) for k in (*SCALARS, TAGS)]
        + [rf"{re.escape(S.RETRIEVAL_DOCUMENTS)}\.\d+\.{re.escape(f)}" for f in DOC_FIELDS.values()]
        + [
            rf"{re.escape(m)}\.\d+\.{f}"
            for m in (S.LLM_INPUT_MESSAGES, S.LLM_OUTPUT_MESSAGES)
            for f in (
                re.escape(ROLE),
                re.escape(CONTENT),
                rf"{re.escape(CONTENTS)}\.\d+\.{re.escape(PART_TEXT)}",
            )
        ]
    )
    + r')"\s*:\s*[\[{]'
)


#: The first pass's flag for NESTED_READ: the same keys, the indexed ones by their tail only
#: (`.document.content"`), which Polars' regex finds by literals first (a third of the time of
#: NESTED_READ over a million spans); a false alarm only costs the second pass.
NESTED_FLAG = (
    "(?:"
    + "|".join(
        ['"' + re.escape(k) for k in (*SCALARS, TAGS)]
        + [
            r"\.document\.(?:"
            + "|".join(re.escape(f.split(".")[-1]) for f in DOC_FIELDS.values())
            + ")"
        ]
        + [r"\.message\.(?:role|content)", r"\." + re.escape(PART_TEXT)]
    )
    + r')"\s*:\s*[\[{]'
)


@dataclass(frozen=True)
class Survey:
    """What the first pass over a file found: the most document / input / output message slots
    of any span, the read attributes some span holds as a list or object, and whether some
    line is a JSON array of spans (Phoenix's REST span list saved with `json.dump`)."""

    docs: int
    inputs: int
    outputs: int
    nested: frozenset[str]
    arrays: bool
    metadata: tuple[str, ...] = ()
    #: The most content parts of any message (`message.contents.N.message_content.text`).
    parts: int = 0

    def attributes(self) -> list[str]:
        """Every attribute read, in schema order."""
        keys = [*SCALARS, TAGS]
        keys += [doc_key(i, f) for i in range(self.docs) for f in DOC_FIELDS]
        for prefix, n in (
            (S.LLM_INPUT_MESSAGES, self.inputs),
            (S.LLM_OUTPUT_MESSAGES, self.outputs),
        ):
            for i in range(n):
                keys += [msg_key(prefix, i, ROLE), msg_key(prefix, i, CONTENT)]
                keys += [part_key(prefix, i, j) for j in range(self.parts)]
        return keys


def survey(lines: pl.LazyFrame) -> Survey:
    """One streaming pass of counts and flags over the lines (see `Survey`); only when it
    flags a read attribute held as a list or object, or a flattened metadata key, a second
    streaming pass names them. Every aggregate is one the streaming engine keeps in constant
    memory (a list of matches gathered beside them would hold the file: 2 GiB at 1M spans)."""

    def most(pattern: str) -> pl.Expr:
        return pl.col("line").str.count_matches(pattern).max()

    found = lines.select(
        most(rf'"{S.RETRIEVAL_DOCUMENTS}\.\d+\.{DocumentAttributes.DOCUMENT_CONTENT}"'),
        most(rf'"{S.LLM_INPUT_MESSAGES}\.\d+\.{ROLE}"').alias("i"),
        most(rf'"{S.LLM_OUTPUT_MESSAGES}\.\d+\.{ROLE}"').alias("o"),
        pl.col("line").str.contains(NESTED_FLAG).any().alias("nested"),
        pl.col("line").str.contains(f'"{S.METADATA}.', literal=True).any().alias("flat"),
        pl.col("line").str.strip_chars_start().str.starts_with("[").any().alias("arrays"),
        pl.col("line").str.contains(f".{PART_TEXT}", literal=True).any().alias("parts"),
    ).collect(engine="streaming")
    docs, inputs, outputs, nested, flat, arrays, parts = found.row(0)
    slots = Survey(
        int(docs or 0),
        int(inputs or 0),
        int(outputs or 0),
        frozenset(),
        bool(arrays),
        parts=content_parts(lines) if parts else 0,
    )
    if not (nested or flat):
        return slots
    matches = (
        lines.select(
            pl.concat_list(
                pl.col("line").str.extract_all(NESTED_READ),
                pl.col("line").str.extract_all(FLAT_METADATA),
            ).alias("match")
        )
        .explode("match")
        .drop_nulls()
        .unique()
        .collect(engine="streaming")["match"]
        .to_list()
    )
    names = {m.group(1) for m in map(re.compile(NESTED_READ).match, matches) if m}
    keys = sorted({m.group(1) for m in map(re.compile(FLAT_METADATA).match, matches) if m})
    return replace(slots, nested=frozenset(names & set(slots.attributes())), metadata=tuple(keys))


def content_parts(lines: pl.LazyFrame) -> int:
    """The most content parts of any message: one more than the highest part index. A pass of
    its own, made only for a file that has content parts (a literal search flags them): the
    regex costs a third of the first pass over a million spans that have none."""
    index = pl.element().str.extract(r"(\d+)", 1).cast(pl.Int64)
    most = (
        lines.select(pl.col("line").str.extract_all(PART_INDEX).list.eval(index).list.max().max())
        .collect(engine="streaming")
        .item()
    )
    return 0 if most is None else int(most) + 1


#: A content part's text key, from its index on (`.message.contents.3.message_content.text"`).
PART_INDEX = rf'\.{re.escape(CONTENTS)}\.\d+\.{re.escape(PART_TEXT)}"'
#: A metadata key flattened by Phoenix's REST span list (`"metadata.turn": 2`).
FLAT_METADATA = rf'"{S.METADATA}\.([^"\\]+)"\s*:'
#: A JSON scalar or a list of scalars, as written (a flattened attribute's value).
JSON_VALUE = r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^,}\s]+'


def flat_metadata(keys: tuple[str, ...]) -> pl.Expr:
    """The `metadata.<key>` attributes of a span (Phoenix's REST list flattens the metadata
    object) gathered back into one JSON object, each value as written; null when it has none.
    Nested objects come back as dotted keys."""
    if not keys:
        return pl.lit(None, pl.String)
    parts = [
        pl.concat_str(
            pl.lit(f'"{key}":'),
            pl.col("text").str.extract(
                rf'"{S.METADATA}\.{re.escape(key)}"\s*:\s*({JSON_VALUE})', 1
            ),
        )
        for key in keys
    ]
    joined = pl.concat_str(parts, separator=",", ignore_nulls=True)
    return pl.when(joined.str.len_chars() > 0).then(pl.concat_str(pl.lit("{"), joined, pl.lit("}")))


def attribute_family(key: str) -> str:
    """The attribute a flat key belongs to: `retrieval.documents.0.document.content` is
    `retrieval.documents` (as Phoenix's span frame names its column), `metadata.turn` (the REST
    list flattens the metadata object) `metadata`, others themselves."""
    for family in (S.RETRIEVAL_DOCUMENTS, S.LLM_INPUT_MESSAGES, S.LLM_OUTPUT_MESSAGES, S.METADATA):
        if key.startswith(family + "."):
            return family
    return key


def attribute_name(key: str) -> str:
    """A JSON path to attribute `key` of a span line (keys hold dots: bracket notation)."""
    return "$.attributes['" + key.replace("'", "\\'") + "']"


def attribute_dtype(shape: Survey) -> pl.Struct:
    """The flat `attributes` object, every value read as text (a number in a string slot is
    kept; a mixed-type value never fails the whole file) and cast afterwards; attributes some
    span holds as a list or object are left out (read by `json_path_match` instead)."""
    return pl.Struct({k: pl.String for k in shape.attributes() if k not in shape.nested})


def attribute_reader(shape: Survey) -> Any:
    """How to read one attribute of a decoded span: the struct field, or for an attribute some
    span holds as a list or object, its text (a list or object as JSON) from the line."""
    field = pl.col("attributes").struct.field

    def attr(key: str) -> pl.Expr:
        if key in shape.nested:
            return pl.col("text").str.json_path_match(attribute_name(key))
        return field(key)

    return attr


TAG_LIST = pl.List(pl.String)


def tags_of(text: pl.Expr, *, json: bool) -> pl.Expr:
    """`tag.tags` as a list of strings: a JSON list's items (`json`: some span holds a list;
    an item that is not a string as its JSON text), a plain string as one tag."""
    if not json:
        return pl.when(text.is_not_null()).then(pl.concat_list(text))
    listed = pl.when(text.str.starts_with("[")).then(text)
    return (
        pl.when(text.str.starts_with("["))
        .then(listed.map_batches(_tag_lists, return_dtype=TAG_LIST, is_elementwise=True))
        .when(text.is_not_null())
        .then(pl.concat_list(text))
    )


def _tag_lists(texts: pl.Series) -> pl.Series:
    """JSON lists of tags decoded by Polars a batch at a time, or, when it refuses the batch
    (an item that is an object or a list, a list that is not JSON), in Python one list at a
    time: Polars' decoding is all or nothing, and one odd span must not cost the file."""
    try:
        return texts.str.json_decode(TAG_LIST)
    except pl.exceptions.ComputeError:
        return pl.Series([None if t is None else tag_list(t) for t in texts], dtype=TAG_LIST)


def tag_list(text: str) -> list[str | None]:
    """A JSON list of tags: strings as they are, other items as their JSON text (a text that
    is not a JSON list: one tag)."""
    try:
        value = json.loads(text)
    except ValueError:
        return [text]
    if not isinstance(value, list):
        return [text]
    return [t if t is None or isinstance(t, str) else json.dumps(t) for t in value]


def message_text(attr: Any, prefix: str, i: int, parts: int) -> pl.Expr:
    """The text of flat message `i`: its `message.content`, else its content parts' text
    joined by PART_SEPARATOR (null when it has neither: only tool calls, an image)."""
    content = attr(msg_key(prefix, i, CONTENT))
    texts = [attr(part_key(prefix, i, j)) for j in range(parts)]
    if not texts:
        return content
    joined = pl.concat_str(texts, separator=PART_SEPARATOR, ignore_nulls=True)
    has_text = pl.any_horizontal([t.is_not_null() for t in texts])
    return pl.coalesce(content, pl.when(has_text).then(joined))


def last_message(attr: Any, prefix: str, n: int, role: str, parts: int = 0) -> pl.Expr:
    """The text of the last message with `role` among `n` flat message slots (null when that
    message has no text, as in a span frame: not an earlier message's)."""
    if not n:
        return pl.lit(None, pl.String)
    last = pl.coalesce(
        *(
            pl.when(attr(msg_key(prefix, i, ROLE)) == role).then(pl.lit(i))
            for i in reversed(range(n))
        )
    )
    return pl.coalesce(
        *(pl.when(last == i).then(message_text(attr, prefix, i, parts)) for i in range(n))
    )


def span_columns(
    attr: Any, documents: pl.Expr, user: pl.Expr, assistant: pl.Expr, tags: pl.Expr
) -> list[pl.Expr]:
    """The attribute-derived span columns, given how to read one attribute (`attr(key)`)."""

    def number(key: str) -> pl.Expr:
        # non-strict throughout: one span's "NaN", inf or 1e30 is a null count, not the file's end
        value = attr(key).cast(pl.String).cast(pl.Float64, strict=False)
        return value.cast(pl.Int64, strict=False)

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
        *[attr(key).cast(pl.String).alias(name) for key, name in TRACE_TEXT.items()],
        tags.alias("tags"),
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
    its 1-based number), or of Phoenix's REST spans (a span a line, or a line holding a JSON
    array of them, each span then numbered by that line). Malformed lines are removed by the
    caller before this."""
    shape = survey(lines)
    dtype = pl.Struct(
        {
            "name": pl.String,
            "context": pl.Struct({"trace_id": pl.String, "span_id": pl.String}),
            "span_kind": pl.String,
            "parent_id": pl.String,
            "start_time": pl.String,
            "end_time": pl.String,
            "attributes": attribute_dtype(shape),
        }
    )
    attr = attribute_reader(shape)
    documents = pl.concat_list(
        [
            pl.struct(
                attr(doc_key(i, "content")).alias("content"),
                attr(doc_key(i, "id")).alias("id"),
                attr(doc_key(i, "score")).cast(pl.Float64, strict=False).alias("score"),
            )
            for i in range(shape.docs)
        ]
        or [pl.lit([], pl.List(DOCUMENT))]
    ).list.eval(pl.element().filter(pl.element().struct.field("content").is_not_null()))
    raw = lines.select(line_numbers.cast(pl.Int64).alias("line"), pl.col("line").alias("text"))
    if shape.arrays:
        raw = raw.with_columns(
            pl.col("text").map_elements(array_items, return_dtype=pl.List(pl.String))
        ).explode("text")
    decoded = raw.select(
        "line", "text", pl.col("text").str.json_decode(dtype).alias("span")
    ).unnest("span")
    has_attributes = pl.col("attributes").is_not_null() & pl.any_horizontal(
        [attr(k).is_not_null() for k in SCALARS]
    )
    # Phoenix's REST spans keep the kind in `span_kind`, not among the attributes.
    kind = pl.coalesce(attr(S.OPENINFERENCE_SPAN_KIND), pl.col("span_kind"))
    metadata = pl.coalesce(attr(S.METADATA), flat_metadata(shape.metadata))

    # An object as `input.value` / `output.value` is JSON, whatever its mime type says.
    objects = {S.INPUT_MIME_TYPE: S.INPUT_VALUE, S.OUTPUT_MIME_TYPE: S.OUTPUT_VALUE}

    def read(key: str) -> pl.Expr:
        if key == S.OPENINFERENCE_SPAN_KIND:
            return kind
        if key == S.METADATA:
            return metadata
        value = objects.get(key)
        if value in shape.nested:
            is_object = attr(value).str.starts_with("{")
            return pl.when(is_object).then(pl.lit(JSON_MIME)).otherwise(attr(key))
        return attr(key)

    return decoded.select(
        "line",
        normalize_id(pl.col("context").struct.field("trace_id")).alias("trace_id"),
        normalize_id(pl.col("context").struct.field("span_id")).alias("span_id"),
        normalize_id(pl.col("parent_id")).alias("parent_id"),
        parse_time(pl.col("start_time")).alias("start_time"),
        parse_time(pl.col("end_time")).alias("end_time"),
        *span_columns(
            read,
            documents,
            last_message(attr, S.LLM_INPUT_MESSAGES, shape.inputs, "user", shape.parts),
            last_message(attr, S.LLM_OUTPUT_MESSAGES, shape.outputs, "assistant", shape.parts),
            tags_of(attr(TAGS), json=TAGS in shape.nested),
        ),
        pl.lit(None, pl.String).alias("ground_truth"),
        has_attributes.fill_null(False).alias("has_attributes"),
    )


def array_items(text: str) -> list[str]:
    """A line holding a JSON array of spans as one JSON text per span; any other line (or one
    that does not parse: the caller lists it) as it is. Run only on files that have such a
    line: a whole-document JSON the size of the file, already read whole to find its format."""
    if not text.lstrip().startswith("["):
        return [text]
    try:
        items = json.loads(text)
    except ValueError:
        return [text]
    return [json.dumps(item) for item in items] if isinstance(items, list) else [text]


#: The prefix of a Phoenix span frame's attribute columns.
FRAME_ATTR = "attributes."


def from_frame(frame: pl.LazyFrame) -> pl.LazyFrame:
    """The span frame of a Phoenix span frame (`get_spans_dataframe()`, or its Parquet)."""
    names = frame.collect_schema()
    span_kind = _frame_kind(names)
    columns = span_columns(
        lambda k: span_kind if k == S.OPENINFERENCE_SPAN_KIND else _frame_attr(names, k, True),
        _frame_documents(names),
        _frame_message(names, S.LLM_INPUT_MESSAGES, "user"),
        _frame_message(names, S.LLM_OUTPUT_MESSAGES, "assistant"),
        _frame_tags(names),
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


def _frame_attr(names: pl.Schema, key: str, objects_as_json: bool = False) -> pl.Expr:
    """An attribute column of the frame as text (a list or object as its JSON, a number as
    written), null where the frame has none; with `objects_as_json`, the mime type of an
    `input.value` / `output.value` column of objects is JSON whatever the frame says."""
    name = FRAME_ATTR + key
    value = {S.INPUT_MIME_TYPE: S.INPUT_VALUE, S.OUTPUT_MIME_TYPE: S.OUTPUT_VALUE}.get(key)
    if objects_as_json and value and isinstance(names.get(FRAME_ATTR + value), pl.Struct):
        return pl.lit(JSON_MIME)
    if name not in names:
        return pl.lit(None, pl.String)
    return as_text(pl.col(name), names[name])


def as_text(column: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """A column as text: strings as they are, lists and structs as JSON, others cast."""
    if dtype == pl.String:
        return column
    if isinstance(dtype, (pl.Struct, pl.List, pl.Array)):
        wrapped = pl.struct(column.alias("v")).struct.json_encode()
        return pl.when(column.is_not_null()).then(wrapped.str.extract(r'^\{"v":(.*)\}$', 1))
    return column.cast(pl.String)


def _frame_tags(names: pl.Schema) -> pl.Expr:
    """`tag.tags` as a list of strings, whether the frame holds a list or a string."""
    name = FRAME_ATTR + TAGS
    dtype = names.get(name)
    if dtype is None:
        return pl.lit(None, pl.List(pl.String))
    if isinstance(dtype, (pl.List, pl.Array)):
        # items that are objects or lists as their JSON text, others cast
        return pl.col(name).cast(pl.List(dtype.inner)).list.eval(as_text(pl.element(), dtype.inner))
    return tags_of(as_text(pl.col(name), dtype), json=False)


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
    fields = inner.to_schema() if isinstance(inner, pl.Struct) else {}

    def doc_field(name: str, dtype: pl.DataType) -> pl.Expr:
        key = DOC_FIELDS[name]
        if name == "content" and inner == pl.String:
            return pl.element().alias(name)  # documents given as plain strings: the content
        if key not in fields:
            return pl.lit(None, dtype).alias(name)
        value = pl.element().struct.field(key)
        if dtype == pl.String:
            return as_text(value, fields[key]).alias(name)
        return value.cast(dtype, strict=False).alias(name)

    return pl.col(docs_col).list.eval(
        pl.struct(
            doc_field("content", pl.String()),
            doc_field("id", pl.String()),
            doc_field("score", pl.Float64()),
        )
    )


def _frame_message(names: pl.Schema, column: str, role: str) -> pl.Expr:
    """The text of the last `role` message of a list-of-messages attribute column: its
    `message.content`, else its content parts' text joined by PART_SEPARATOR. The frame's
    message struct holds only the fields some span wrote (no `message.content` when every
    message came as parts or tool calls); a field it lacks is null, and messages that are not
    objects have no role (null)."""
    name = FRAME_ATTR + column
    dtype = names.get(name)
    inner = dtype.inner if isinstance(dtype, pl.List) else None
    if not isinstance(inner, pl.Struct):
        return pl.lit(None, pl.String)
    fields = inner.to_schema()
    if ROLE not in fields:
        return pl.lit(None, pl.String)
    message = pl.element().struct.field
    text = _part_texts(fields.get(CONTENTS), message(CONTENTS))
    if CONTENT in fields:
        text = pl.coalesce(as_text(message(CONTENT), fields[CONTENT]), text)
    is_role = as_text(message(ROLE), fields[ROLE]) == role
    return pl.col(name).list.eval(text.filter(is_role)).list.last()


def _part_texts(dtype: pl.DataType | None, parts: pl.Expr) -> pl.Expr:
    """A message's content parts' text (a list of `{"message_content.text": ...}` objects),
    joined by PART_SEPARATOR; null when it has none."""
    inner = dtype.inner if isinstance(dtype, pl.List) else None
    if not isinstance(inner, pl.Struct) or PART_TEXT not in inner.to_schema():
        return pl.lit(None, pl.String)
    part_text = as_text(pl.element().struct.field(PART_TEXT), inner.to_schema()[PART_TEXT])
    texts = parts.list.eval(part_text).list.drop_nulls()
    return pl.when(texts.list.len() > 0).then(texts.list.join(PART_SEPARATOR))


def _frame_time(names: pl.Schema, name: str) -> pl.Expr:
    """A time column in UTC, whether it is ISO text, naive (taken as UTC) or zoned."""
    if name not in names:
        return pl.lit(None, TIME)
    if names[name] == pl.String:
        return parse_time(pl.col(name))
    if names[name].is_numeric():
        return epoch_time(pl.col(name))
    return (
        pl.col(name).dt.replace_time_zone("UTC")
        if getattr(names[name], "time_zone", None) is None
        else pl.col(name).dt.convert_time_zone("UTC")
    )


def epoch_time(number: pl.Expr) -> pl.Expr:
    """Epoch times in whichever unit their size says (pandas' `to_json()` writes milliseconds
    by default): seconds below 1e11, milliseconds below 1e14, microseconds below 1e17, else
    nanoseconds; any of them is a date between 1973 and 5138."""
    value = number.cast(pl.Float64)
    micros = (
        pl.when(value.abs() < 1e11)
        .then(value * 1e6)
        .when(value.abs() < 1e14)
        .then(value * 1e3)
        .when(value.abs() < 1e17)
        .then(value)
        .otherwise(value / 1e3)
    )
    return pl.from_epoch(micros.round(0).cast(pl.Int64), "us").dt.replace_time_zone("UTC")


def _frame_ident(names: pl.Schema, name: str) -> pl.Expr:
    return normalize_id(pl.col(name)) if name in names else pl.lit(None, pl.String)


def is_sdk_json(first: dict[str, Any]) -> bool:
    """A span as `ReadableSpan.to_json()` writes it (nested `context`, flat `attributes`)."""
    return isinstance(first.get("context"), dict) and "attributes" in first


def is_phoenix_record(first: dict[str, Any]) -> bool:
    """A row of a Phoenix span frame written as JSON (`context.span_id` as one key)."""
    return "context.span_id" in first


def read_phoenix_file(path: Path) -> pl.LazyFrame:
    """A Phoenix span frame saved as Parquet, as JSON Lines, or by pandas' `to_json()` with its
    defaults (one object per column keyed by the index), lazily."""
    if path.suffix == ".parquet":
        return pl.scan_parquet(path)
    first = first_record(path)
    if first is not None and isinstance(first.get("context.span_id"), dict):
        return columns_frame(first).lazy()
    try:
        return pl.scan_ndjson(path, infer_schema_length=None)
    except pl.exceptions.ComputeError as exc:  # pragma: no cover - polars message varies
        raise InputError(f"{path}: not a Phoenix span frame in JSON Lines ({exc})") from exc


def columns_frame(columns: dict[str, Any]) -> pl.DataFrame:
    """A frame written by pandas' `DataFrame.to_json()` (orient "columns": `{column: {index:
    value}}`, the whole file one object, already parsed to detect it): one row per index key,
    in the file's order, each column's values taken as Polars infers them over the column."""
    index = list(columns["context.span_id"])
    data = {}
    for name, values in columns.items():
        cells = values if isinstance(values, dict) else {}
        data[name] = pl.Series(name, mixed_cells([cells.get(k) for k in index]), strict=False)
    return pl.DataFrame(data)


def mixed_cells(cells: list[Any]) -> list[Any]:
    """A column's cells, its lists and objects as JSON text when it holds scalars too (an
    attribute may take either shape in OTel; a column takes one type, and Polars would write a
    list beside strings as `[x,y]`, not JSON)."""
    containers = [isinstance(v, (dict, list, tuple)) for v in cells if v is not None]
    if any(containers) and not all(containers):
        return [
            json.dumps(v, default=str) if isinstance(v, (dict, list, tuple)) else v for v in cells
        ]
    return cells


def from_pandas(frame: Any) -> pl.DataFrame:
    """A pandas span frame (Phoenix's `get_spans_dataframe()`) as Polars. Where Arrow refuses
    an object column (lists or objects beside strings, numbers beside text), that column's
    cells go through `mixed_cells`, so one span's shape never costs the frame."""
    try:
        return pl.from_pandas(frame)
    except (TypeError, ValueError):  # pyarrow's ArrowTypeError / ArrowInvalid
        pass
    data = {}
    for name in frame.columns:
        column = frame[name]
        if column.dtype != object:
            data[name] = pl.from_pandas(column)
            continue
        cells = [_cell(v) for v in column.tolist()]
        data[name] = pl.Series(str(name), mixed_cells(cells), strict=False)
    return pl.DataFrame(data)


def _cell(value: Any) -> Any:
    """A pandas object cell as plain Python: NaN and None as None, arrays as lists."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, str) else value


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
