"""From spans to rows: one row per trace (one RAG turn), with the rules below.

Every reader (OpenInference, OTLP JSON, LangSmith) first turns its export into the same span
frame (`SPAN_SCHEMA`: ids, kind, times, input / output text, the last user and assistant
messages of an LLM span, retrieved documents, model and token counts, the source line). This
module groups that frame by trace id, lazily, and applies one set of rules:

answer
    The output of the trace's outermost CHAIN or AGENT span that has one: the root span (no
    parent) first, else the one that starts first (ties: the one that ends last). When no
    such span has an output, the last LLM span's output by end time (its last assistant
    message, else `output.value`). `span_id`, `start_time`, `end_time` and `latency_ms` are
    that span's, so scores exported later land on the span the answer came from.
question
    The same span's input (`input.value`, the question field when it is JSON); for an LLM
    span, its last user message.
contexts
    The documents of every RETRIEVER span of the trace, in order of span start time (ties:
    source line), then document position; several retrievals are concatenated, counted in
    `retrievals` and named in `note`. No retriever span: an empty list and the note
    "no retriever span"; retriever spans whose documents carry no text (content capture
    off): an empty list and the note "retriever span(s) recorded no document content".
    `context_document_ids` and `context_scores` run parallel to it.
model, tokens
    `model_name` is the last LLM span's; `prompt_tokens`, `completion_tokens` and
    `total_tokens` are summed over the trace's LLM spans (null when none of them records it;
    a span without a total counts its prompt and completion tokens).
order
    Rows come in source order: by the line (or frame row) of the trace's first span, then
    the answer span's start time, then trace id; the same whether the export was read in one
    pass or in buckets (`ragframe.inputs.traces.buckets`).
duplicate span ids
    A span id seen more than once in a trace (a span exported twice, or resent after an
    update): the copy latest in the source is used (the highest line; one OTLP line holding
    both: the one that ends last), the row says so in `note`, and every other copy is listed
    as skipped ("span exported N times: ...") with its line.
two candidate answers
    When several root CHAIN / AGENT spans have an output, the rule above takes the one that
    starts first, and the row's `note` says how many there were and which span answered.
columns
    `question`, `answer`, `contexts`, `trace_id` and `span_id` are always there (`ALWAYS`);
    every other column of `ROW_SCHEMA` is there only when at least one row has a value for it
    (a list column: at least one element), so an export that records no ground truth, token
    counts or session ids adds no column of nulls (`drop_empty`, applied by the entry points;
    `assemble` itself gives the full `ROW_SCHEMA`, which a lazy plan must fix in advance).
skipped
    A span with no trace id or no attributes, a span its reader marked unusable
    (`skip_reason`, said as the reason), a line that is not JSON, and a trace that has no
    answer (e.g. a retriever span whose trace has no CHAIN, AGENT or LLM output) form no row:
    each is listed in the skipped frame (`reason`, `trace_id`, `span_id`, `line`), never
    dropped silently.
"""

from __future__ import annotations

import polars as pl
from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind

DOCUMENT = pl.Struct({"content": pl.String, "id": pl.String, "score": pl.Float64})
TIME = pl.Datetime("us", "UTC")

#: The span frame every reader produces (`line`: 1-based source line or row, for messages).
SPAN_SCHEMA: dict[str, pl.DataType] = {
    "line": pl.Int64(),
    "trace_id": pl.String(),
    "span_id": pl.String(),
    "parent_id": pl.String(),
    "kind": pl.String(),
    "start_time": TIME,
    "end_time": TIME,
    "input": pl.String(),
    "output": pl.String(),
    "user_message": pl.String(),
    "assistant_message": pl.String(),
    "documents": pl.List(DOCUMENT),
    "model_name": pl.String(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "total_tokens": pl.Int64(),
    "ground_truth": pl.String(),
    "has_attributes": pl.Boolean(),
    # What a team joins scores on, per span (a reader leaves out those its format lacks):
    # OpenInference `session.id` / `user.id` / `metadata` (JSON text) / `tag.tags`; LangSmith's
    # thread id and user id from `extra.metadata`, `extra.metadata` itself, `tags`, and
    # `project_id`, the tracing project a run was logged to (its `session_id`).
    "session_id": pl.String(),
    "user_id": pl.String(),
    "metadata": pl.String(),
    "tags": pl.List(pl.String),
    "project_id": pl.String(),
    # why the reader could not use the span (null when it could): listed as skipped
    "skip_reason": pl.String(),
}
#: The trace-level fields above: a row takes each from the first span (in source order) that
#: has it, which is the root span whenever the root records it.
TRACE_FIELDS = ["session_id", "user_id", "metadata", "tags", "project_id"]

#: The rows' columns, in order.
ROW_SCHEMA: dict[str, pl.DataType] = {
    "question": pl.String(),
    "answer": pl.String(),
    "contexts": pl.List(pl.String),
    "ground_truth": pl.String(),
    "trace_id": pl.String(),
    "span_id": pl.String(),
    "context_document_ids": pl.List(pl.String),
    "context_scores": pl.List(pl.Float64),
    "retrievals": pl.UInt32(),
    "start_time": TIME,
    "end_time": TIME,
    "latency_ms": pl.Float64(),
    "model_name": pl.String(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "total_tokens": pl.Int64(),
    "session_id": pl.String(),
    "user_id": pl.String(),
    "metadata": pl.String(),
    "tags": pl.List(pl.String),
    "project_id": pl.String(),
    "note": pl.String(),
}

#: The row columns every read gives, with or without values; the others of `ROW_SCHEMA` only
#: when some row has one.
ALWAYS = ("question", "answer", "contexts", "trace_id", "span_id")

SKIP_SCHEMA: dict[str, pl.DataType] = {
    "reason": pl.String(),
    "trace_id": pl.String(),
    "span_id": pl.String(),
    "line": pl.Int64(),
}

TOP_KINDS = [Kind.CHAIN.value, Kind.AGENT.value]
LLM = Kind.LLM.value
RETRIEVER = Kind.RETRIEVER.value

#: The order of the rows: the source order of their traces (the line of a trace's first span),
#: then the answer span's start time, then the trace id (a tie-break that makes it total).
ROW_ORDER = ["first_line", "start_time", "trace_id"]
#: `ROW_ORDER` as one sortable column (`order`), the key both the single pass's sort and the
#: merge of sorted buckets use, so that the two give the rows in the same order.
ORDER_KEY = pl.struct(ROW_ORDER).alias("order")

__all__ = [
    "ALWAYS",
    "DOCUMENT",
    "ORDER_KEY",
    "ROW_ORDER",
    "ROW_SCHEMA",
    "SKIP_SCHEMA",
    "SPAN_SCHEMA",
    "TRACE_FIELDS",
    "assemble",
    "assemble_unordered",
    "conform",
    "drop_empty",
    "in_source_order",
    "normalize_id",
    "valued_columns",
]


def normalize_id(expr: pl.Expr) -> pl.Expr:
    """Hex ids as Phoenix shows them: lower case, no `0x` prefix (the SDK's JSON adds one)."""
    return expr.cast(pl.String).str.strip_prefix("0x").str.to_lowercase()


def _cast(frame: pl.LazyFrame, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    """`frame`'s columns of `schema`, in its order and types."""
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])


def _pick(mask: pl.Expr, by: list[pl.Expr], descending: list[bool], *, last: bool) -> pl.Expr:
    """Within a trace, the one span (as a struct) among `mask` ordered by `by`."""
    fields = ["span_id", "input", "output", "user_message", "assistant_message"]
    span = pl.struct([*fields, "start_time", "end_time", "model_name"]).filter(mask)
    ordered = span.sort_by([b.filter(mask) for b in by], descending=descending)
    return ordered.last() if last else ordered.first()


def conform(spans: pl.LazyFrame) -> pl.LazyFrame:
    """A reader's span frame in `SPAN_SCHEMA`'s order and types, the columns its format does
    not have (the trace-level fields, say) as nulls."""
    have = spans.collect_schema()
    return spans.select(
        [
            pl.col(c).cast(t) if c in have else pl.lit(None, t).alias(c)
            for c, t in SPAN_SCHEMA.items()
        ]
    )


def valued_columns(rows: pl.DataFrame) -> set[str]:
    """The columns of `rows` in which some row has a value (a list column: some element, so
    lists of nulls, such as scores no document recorded, count as no value)."""
    if rows.height == 0:
        return set()
    checks = []
    for name, dtype in rows.schema.items():
        column = pl.col(name)
        if isinstance(dtype, pl.List):
            checks.append((column.list.drop_nulls().list.len() > 0).any().alias(name))
        else:
            checks.append(column.is_not_null().any().alias(name))
    found = rows.select(checks).row(0, named=True)
    return {name for name, has in found.items() if has}


def drop_empty(
    rows: pl.DataFrame, keep: tuple[str, ...] = ALWAYS, present: set[str] | None = None
) -> pl.DataFrame:
    """`rows` without the `ROW_SCHEMA` columns no row has a value for, except `keep`; other
    columns (a dataset's own) stay. `present`: the valued columns when already known (the
    union over buckets)."""
    valued = valued_columns(rows) if present is None else present
    return rows.select([c for c in rows.columns if c in keep or c in valued or c not in ROW_SCHEMA])


def assemble(spans: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(rows, skipped) from a span frame with `SPAN_SCHEMA`, both lazy, rows in source order."""
    rows, skipped = assemble_unordered(spans)
    return in_source_order(rows), skipped


def in_source_order(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Rows of `assemble_unordered` sorted by `ROW_ORDER`, their `first_line` dropped: kept
    apart so that rows assembled in several parts sort into the order one pass gives."""
    return rows.sort(ORDER_KEY).drop("first_line")


def assemble_unordered(spans: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(rows with a `first_line` column, in no set order; skipped) of a span frame."""
    spans = conform(spans)
    usable = (
        pl.col("trace_id").is_not_null()
        & pl.col("has_attributes")
        & pl.col("skip_reason").is_null()
    )
    marked = _mark_copies(spans.filter(usable))
    used = pl.col("copy") == 1
    # a trace some of whose spans could not be used says so on its row (its retriever span,
    # say, cut short: "no retriever span" alone would mislead)
    unusable = (
        spans.filter(~usable & pl.col("trace_id").is_not_null())
        .group_by("trace_id")
        .agg(pl.len().cast(pl.UInt32).alias("unusable_spans"))
    )
    decided = _question_and_answer(_per_trace(marked.filter(used))).join(
        unusable, on="trace_id", how="left"
    )
    formable = pl.col("answer").is_not_null() & pl.col("question").is_not_null()
    rows = _rows(decided.filter(formable))
    skipped = pl.concat(
        [
            _unusable_spans(spans.filter(~usable)),
            _dropped_copies(marked.filter(~used)),
            _traces_without_row(decided.filter(~formable)),
        ],
        how="vertical_relaxed",
    )
    return rows, _cast(skipped, SKIP_SCHEMA)


#: A span's identity within an export: a second span with both is a copy of the first.
SPAN_KEY = ["trace_id", "span_id"]


def _mark_copies(spans: pl.LazyFrame) -> pl.LazyFrame:
    """`copies`: how many spans share this one's trace and span id (1 for a span without a
    span id); `copy`: 1 for the copy used (the highest line, then the latest end), 2, 3...
    for the others; `used_line`: the used copy's line; `first_copy_line`: the first copy's,
    which places the trace in source order as if no copy had been dropped."""
    has_id = pl.col("span_id").is_not_null()
    latest_first = pl.struct("line", "end_time").rank("ordinal", descending=True)
    return spans.with_columns(
        pl.when(has_id).then(pl.len().over(SPAN_KEY)).otherwise(1).alias("copies"),
        pl.when(has_id).then(latest_first.over(SPAN_KEY)).otherwise(1).alias("copy"),
        pl.when(has_id).then(pl.col("line").max().over(SPAN_KEY)).alias("used_line"),
        pl.when(has_id)
        .then(pl.col("line").min().over(SPAN_KEY))
        .otherwise(pl.col("line"))
        .alias("first_copy_line"),
    )


def _dropped_copies(copies: pl.LazyFrame) -> pl.LazyFrame:
    """The skipped rows of the copies of a span that were not used."""
    return copies.select(
        pl.format(
            "span exported {} times: this copy dropped, the one on line {} used",
            "copies",
            "used_line",
        ).alias("reason"),
        "trace_id",
        "span_id",
        "line",
    )


def _unusable_spans(spans: pl.LazyFrame) -> pl.LazyFrame:
    """The skipped rows of spans with no trace id or no attributes, or that their reader could
    not use (`skip_reason`: a LangSmith run with no id, an OTLP line of another signal, a GenAI
    value cut short), each with its reason."""
    return spans.select(
        pl.coalesce(
            "skip_reason",
            pl.when(pl.col("trace_id").is_null())
            .then(pl.lit("span has no trace id"))
            .otherwise(pl.lit("span has no attributes")),
        ).alias("reason"),
        "trace_id",
        "span_id",
        "line",
    )


def _per_trace(spans: pl.LazyFrame) -> pl.LazyFrame:
    """One row per trace: the answer's candidate spans, the documents, the LLM metadata."""
    return spans.group_by("trace_id").agg(
        *_answer_candidates(),
        *_retrieved_documents(),
        *_llm_metadata(),
        pl.col("ground_truth").drop_nulls().first(),
        *(pl.col(f).sort_by("line").drop_nulls().first() for f in TRACE_FIELDS),
        pl.col("first_copy_line").min().alias("first_line"),
        (pl.col("copies") > 1).sum().alias("copied_spans"),
        pl.col("span_id").filter(pl.col("copies") > 1).sort().first().alias("first_copied"),
        pl.col("copies").filter(pl.col("copies") > 1).sort().last().alias("most_copies"),
    )


def _answer_candidates() -> list[pl.Expr]:
    """`top`: the outermost CHAIN / AGENT span with an output (root first, then earliest
    start, then latest end); `llm`: the last LLM span with an answer (by end time, line)."""
    kind = pl.col("kind")
    top = kind.is_in(TOP_KINDS) & pl.col("output").is_not_null()
    is_llm = (kind == LLM) & pl.coalesce("assistant_message", "output").is_not_null()
    outermost = [pl.col("parent_id").is_not_null(), pl.col("start_time"), pl.col("end_time")]
    return [
        _pick(top, outermost, [False, False, True], last=False).alias("top"),
        (top & pl.col("parent_id").is_null()).sum().alias("top_roots"),
        _pick(is_llm, [pl.col("end_time"), pl.col("line")], [False, False], last=True).alias("llm"),
    ]


def _retrieved_documents() -> list[pl.Expr]:
    """`docs`: every RETRIEVER span's documents in start order (ties: line); `retrievals`."""
    retriever = pl.col("kind") == RETRIEVER
    return [
        pl.col("documents")
        .filter(retriever)
        .sort_by([pl.col("start_time").filter(retriever), pl.col("line").filter(retriever)])
        .list.explode(keep_nulls=False, empty_as_null=False)
        .drop_nulls()
        .alias("docs"),
        retriever.sum().cast(pl.UInt32).alias("retrievals"),
    ]


def _llm_metadata() -> list[pl.Expr]:
    """The LLM calls: their count, the last one's model, the token counts summed (null when
    the trace has no LLM span)."""
    llm_kind = pl.col("kind") == LLM
    return [
        llm_kind.sum().alias("llm_calls"),
        pl.col("model_name")
        .filter(llm_kind)
        .sort_by(pl.col("end_time").filter(llm_kind))
        .drop_nulls()
        .last()
        .alias("model_name"),
        *(
            pl.when(pl.col(c).filter(llm_kind).is_not_null().any())
            .then(pl.col(c).filter(llm_kind).sum())
            .alias(c)
            for c in ("prompt_tokens", "completion_tokens", "total_tokens")
        ),
    ]


def _question_and_answer(per_trace: pl.LazyFrame) -> pl.LazyFrame:
    """The answer span (the top span when it has an output, else the last LLM span) and the
    question and answer read from it."""
    from_top = pl.col("top").struct.field("output").is_not_null()
    llm = pl.col("llm").struct.field
    question = (
        pl.when(from_top)
        .then(pl.col("top").struct.field("input"))
        .otherwise(pl.coalesce(llm("user_message"), llm("input")))
    )
    answer = (
        pl.when(from_top)
        .then(pl.col("top").struct.field("output"))
        .otherwise(pl.coalesce(llm("assistant_message"), llm("output")))
    )
    return per_trace.with_columns(
        question.alias("question"),
        answer.alias("answer"),
        pl.when(from_top).then(pl.col("top")).otherwise(pl.col("llm")).alias("answer_span"),
        from_top.alias("from_top"),
    )


def _traces_without_row(traces: pl.LazyFrame) -> pl.LazyFrame:
    """The skipped rows of traces with no answer or no question, with the reason."""
    return traces.select(
        pl.when(pl.col("retrievals") > 0)
        .then(
            pl.lit(
                "retriever span(s) but no answer in the trace (no CHAIN, AGENT or LLM span "
                "with an input and an output)"
            )
        )
        .when(pl.col("answer").is_not_null())
        .then(pl.lit("answer span has no input (no question)"))
        .otherwise(pl.lit("no CHAIN, AGENT or LLM span with an input and an output"))
        .alias("reason"),
        "trace_id",
        pl.lit(None, pl.String).alias("span_id"),
        pl.col("first_line").alias("line"),
    )


def _note() -> pl.Expr:
    """What a reader should know about how the row was formed ("; "-joined, null if nothing)."""
    notes = pl.concat_list(
        pl.when(pl.col("retrievals") == 0).then(pl.lit("no retriever span")),
        pl.when((pl.col("retrievals") > 0) & (pl.col("docs").list.len() == 0)).then(
            pl.lit("retriever span(s) recorded no document content")
        ),
        pl.when(pl.col("retrievals") > 1).then(
            pl.format("{} retrievals: contexts concatenated in start order", "retrievals")
        ),
        pl.when(~pl.col("from_top")).then(
            pl.lit("answer from the last LLM span (no CHAIN or AGENT output)")
        ),
        pl.when(pl.col("from_top") & (pl.col("llm_calls") > 1)).then(
            pl.format("{} LLM calls: answer from the outermost CHAIN/AGENT span", "llm_calls")
        ),
        pl.when(pl.col("from_top") & (pl.col("top_roots") > 1)).then(
            pl.format(
                "{} root CHAIN/AGENT spans with an output: answer from the first to start ({})",
                "top_roots",
                pl.col("answer_span").struct.field("span_id"),
            )
        ),
        pl.when(pl.col("unusable_spans") > 0).then(
            pl.format("{} span(s) of this trace skipped (see the skipped list)", "unusable_spans")
        ),
        pl.when(pl.col("copied_spans") == 1).then(
            pl.format(
                "span {} exported {} times: the copy latest in the source used",
                "first_copied",
                "most_copies",
            )
        ),
        pl.when(pl.col("copied_spans") > 1).then(
            pl.format(
                "{} span ids exported more than once (first: {}): the copies latest in the "
                "source used",
                "copied_spans",
                "first_copied",
            )
        ),
    ).list.drop_nulls()
    return pl.when(notes.list.len() > 0).then(notes.list.join("; "))


def _rows(traces: pl.LazyFrame) -> pl.LazyFrame:
    """The rows (`ROW_SCHEMA`, then `first_line` to order them by) of traces with a question
    and an answer."""
    span_field = pl.col("answer_span").struct.field

    def documents(field: str) -> pl.Expr:
        return pl.col("docs").list.eval(pl.element().struct.field(field))

    rows = traces.select(
        "question",
        "answer",
        documents("content").alias("contexts"),
        "ground_truth",
        "trace_id",
        span_field("span_id").alias("span_id"),
        documents("id").alias("context_document_ids"),
        documents("score").alias("context_scores"),
        "retrievals",
        span_field("start_time").alias("start_time"),
        span_field("end_time").alias("end_time"),
        (
            (span_field("end_time") - span_field("start_time")).dt.total_microseconds() / 1000.0
        ).alias("latency_ms"),
        pl.coalesce("model_name", span_field("model_name")).alias("model_name"),
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        *TRACE_FIELDS,
        _note().alias("note"),
        "first_line",
    )
    return _cast(rows, {**ROW_SCHEMA, "first_line": pl.Int64()})
