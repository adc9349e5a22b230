"""OTLP JSON (the OpenTelemetry Collector's file exporter: one `{"resourceSpans": [...]}`
request per line) into the span frame.

Attributes are OTLP key / AnyValue lists. Both conventions that ride on OTLP are read:
OpenInference's (what Phoenix ingests: `openinference.span.kind`, `input.value`,
`retrieval.documents.N.document.*`, `llm.*`) and OpenTelemetry GenAI's: `gen_ai.operation.name`
(chat / text_completion / generate_content → LLM, invoke_agent → AGENT, invoke_workflow →
CHAIN, retrieval → RETRIEVER, embeddings, execute_tool), `gen_ai.request.model` /
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`, the retrieved
documents in `gen_ai.retrieval.documents` (a JSON array of `{id, score, content}`; documents
without content, as when content capture is off, are not contexts), and the messages in
`gen_ai.input.messages` / `gen_ai.output.messages` (JSON, text parts; an agent or workflow
span's input and output when it has no `input.value` / `output.value`) or in
`gen_ai.user.message` / `gen_ai.choice` span events with a `content` attribute. Parsing, the
explode to spans and the attribute lookups are Polars expressions.
"""

from __future__ import annotations

import polars as pl
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)

from ragframe.inputs.traces.assemble import DOCUMENT, TIME, normalize_id
from ragframe.inputs.traces.openinference import INPUT_KEYS, OUTPUT_KEYS, json_text

S = SpanAttributes
VALUE = pl.Struct(
    {
        "stringValue": pl.String,
        "intValue": pl.String,
        "doubleValue": pl.String,
        "boolValue": pl.String,
    }
)
KV = pl.List(pl.Struct({"key": pl.String, "value": VALUE}))
SPAN = pl.Struct(
    {
        "traceId": pl.String,
        "spanId": pl.String,
        "parentSpanId": pl.String,
        "name": pl.String,
        "startTimeUnixNano": pl.String,
        "endTimeUnixNano": pl.String,
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
DOC_PATTERN = rf"^{S.RETRIEVAL_DOCUMENTS}\.(\d+)\.document\.({DOC_FIELDS})$"

__all__ = ["scan_otlp"]


def _text(value: pl.Expr) -> pl.Expr:
    return pl.coalesce(
        value.struct.field("stringValue"),
        value.struct.field("intValue"),
        value.struct.field("doubleValue"),
        value.struct.field("boolValue"),
    )


def _attr(key: str, column: str = "attrs") -> pl.Expr:
    return (
        pl.col(column)
        .list.eval(
            pl.element().filter(pl.element().struct.field("key") == key).struct.field("text")
        )
        .list.first()
    )


def _last_message(column: str, role: str) -> pl.Expr:
    """The text parts of the last `role` message of a GenAI messages attribute (JSON)."""
    messages = _attr(column).str.json_decode(MESSAGES)
    return messages.list.eval(
        pl.element()
        .filter(pl.element().struct.field("role") == role)
        .struct.field("parts")
        .list.eval(pl.element().struct.field("content"))
        .list.join("")
    ).list.last()


def _indexed(spans: pl.LazyFrame, pattern: str, fields: dict[str, str]) -> pl.LazyFrame:
    """Per span (`sid`), the attributes `prefix.N.field` regrouped by N, in N order, as a list
    of structs with `fields` (output name → attribute field)."""
    long = (
        spans.select("sid", "attrs")
        .explode("attrs")
        .select("sid", pl.col("attrs").struct.field("key"), pl.col("attrs").struct.field("text"))
        .filter(pl.col("key").str.contains(pattern))
        .with_columns(
            pl.col("key").str.extract(pattern, 1).cast(pl.Int64).alias("index"),
            pl.col("key").str.extract(pattern, 2).alias("field"),
        )
    )
    per_item = long.group_by("sid", "index").agg(
        pl.col("text").filter(pl.col("field") == attr).first().alias(name)
        for name, attr in fields.items()
    )
    return per_item.group_by("sid").agg(pl.struct(list(fields)).sort_by("index").alias("items"))


def scan_otlp(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The span frame of OTLP JSON lines (`n`: line number, `line`: one export request)."""
    spans = _spans(lines)
    frame = spans.join(_documents(spans), on="sid", how="left")
    for role, name in (("user", "oi_user"), ("assistant", "oi_assistant")):
        frame = frame.join(_openinference_message(spans, role, name), on="sid", how="left")
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
        (pl.col("attrs").list.len() > 0).fill_null(False).alias("has_attributes"),
    )


def _spans(lines: pl.LazyFrame) -> pl.LazyFrame:
    """One row per span (`sid`: its index), its attributes as `attrs` (key, text)."""
    return (
        lines.select(
            pl.col("n").cast(pl.Int64).alias("line"),
            pl.col("line").str.json_decode(REQUEST).alias("request"),
        )
        .unnest("request")
        .explode("resourceSpans")
        .select("line", pl.col("resourceSpans").struct.field("scopeSpans"))
        .explode("scopeSpans")
        .select("line", pl.col("scopeSpans").struct.field("spans"))
        .explode("spans")
        .filter(pl.col("spans").is_not_null())
        .unnest("spans")
        .with_row_index("sid")
        .with_columns(
            pl.col("attributes")
            .list.eval(
                pl.struct(
                    pl.element().struct.field("key"),
                    _text(pl.element().struct.field("value")).alias("text"),
                )
            )
            .alias("attrs")
        )
    )


def _documents(spans: pl.LazyFrame) -> pl.LazyFrame:
    """Per span, its retrieved documents (OpenInference's indexed attributes), with content."""
    items = _indexed(spans, DOC_PATTERN, {"content": "content", "id": "id", "score": "score"})
    return items.select("sid", _with_content(pl.col("items")).alias("documents"))


def _genai_documents() -> pl.Expr:
    """GenAI's `gen_ai.retrieval.documents` (JSON on the span) as documents with content."""
    return _with_content(_attr(GENAI["documents"]).str.json_decode(GENAI_DOCUMENTS))


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
    """Per span, the content of the last `role` message of its OpenInference input (user) or
    output (assistant) messages, as column `name`."""
    prefix = S.LLM_INPUT_MESSAGES if role == "user" else S.LLM_OUTPUT_MESSAGES
    pattern = rf"^{prefix}\.(\d+)\.message\.(role|content)$"
    fields = {"role": MessageAttributes.MESSAGE_ROLE.removeprefix("message."), "content": "content"}
    return _indexed(spans, pattern, fields).select(
        "sid",
        pl.col("items")
        .list.eval(
            pl.element().filter(pl.element().struct.field("role") == role).struct.field("content")
        )
        .list.last()
        .alias(name),
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


def _ids() -> list[pl.Expr]:
    return [
        normalize_id(pl.col("traceId")).alias("trace_id"),
        normalize_id(pl.col("spanId")).alias("span_id"),
        pl.when(pl.col("parentSpanId") != "")
        .then(normalize_id(pl.col("parentSpanId")))
        .alias("parent_id"),
    ]


def _texts() -> list[pl.Expr]:
    """input, output and the last user / assistant message, from either convention."""
    return [
        pl.coalesce(
            json_text(_attr(S.INPUT_VALUE), _attr(S.INPUT_MIME_TYPE), INPUT_KEYS),
            _last_message(GENAI["input_messages"], "user"),
        ).alias("input"),
        pl.coalesce(
            json_text(_attr(S.OUTPUT_VALUE), _attr(S.OUTPUT_MIME_TYPE), OUTPUT_KEYS),
            _last_message(GENAI["output_messages"], "assistant"),
        ).alias("output"),
        pl.coalesce(
            "oi_user",
            _last_message(GENAI["input_messages"], "user"),
            _event_content(GENAI["user_event"]),
        ).alias("user_message"),
        pl.coalesce(
            "oi_assistant",
            _last_message(GENAI["output_messages"], "assistant"),
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
