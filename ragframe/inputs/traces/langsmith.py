"""LangSmith run exports: JSON Lines of runs as `langsmith.schemas.Run` serialises them (what
`Client.list_runs` yields, `run.model_dump_json()` a line: `id`, `trace_id`, `parent_run_id`,
`run_type`, `inputs`, `outputs`, `extra`, ISO times, `session_id`, token counts).

Run types map onto span kinds: chain / parser → CHAIN, llm / chat_model → LLM, retriever →
RETRIEVER. Text fields are found by JSON path, never by a fixed schema of `inputs` / `outputs`
(they hold whatever the traced function took and returned; a list or an object comes out as
JSON text):

question
    The first of OpenInference's `INPUT_KEYS` in `inputs` (`question`, `query` as LangChain's
    `RetrievalQA` writes it, `input`, `query_str`, ...); an LLM run's last user message in
    `inputs.messages` (dicts with `role` / `type`, LangChain's serialised messages, nested
    lists, content parts).
answer
    The first of `OUTPUT_KEYS` in `outputs` (`answer`, `output`, `response`, `result` as
    `RetrievalQA` writes it, ...; `@traceable` stores a returned non-dict as
    `{"output": value}`); an LLM run's `outputs.choices[0].message.content`, `outputs.content`
    or `outputs.generations[0][0].text`.
documents
    A retriever's `outputs.documents`, else `outputs.output` (what `@traceable` writes for a
    function returning a list): a list or a single document, each a dict with `page_content` or
    `content` and `metadata.id` / `metadata.source` / `metadata.score`, or a plain string (its
    content). An id that is an object or a number comes out as JSON text; a score that is
    not a number (or a number's text) is null; a document with no text is no context (as
    OpenInference drops it).
tokens, model
    `prompt_tokens` / `completion_tokens` / `total_tokens` of the run, else `usage_metadata`
    (`input_tokens`, `output_tokens`, `total_tokens`) in `outputs` or `extra.metadata`, else
    `outputs.llm_output.token_usage` / `outputs.usage`, each read through Float64 (`12.0` is
    12); the model from `extra.metadata.ls_model_name`, `extra.invocation_params.model(_name)`
    or `outputs.model`.
times
    ISO text with any offset or none (UTC), or an epoch number in the unit its size says.
trace-level
    `project_id` ← the run's `session_id` (its tracing project, which the feedback API wants;
    `project_id` in the runs of `client.runs.query_v2`); `session_id` ←
    `extra.metadata.session_id | thread_id | conversation_id` (the thread), else `thread_id`;
    `user_id` ← `extra.metadata.user_id`; `metadata` ← `extra.metadata` as JSON text; `tags`.

Documents, messages and tags are decoded by Polars a batch at a time; a batch holding a run of
another shape is read per run in Python (`documents_of`, `last_user_message`, `tags_of`), so
one odd run costs neither the file nor the speed of the rest. `runs_as_lines` turns a frame of
runs (a Parquet export) into the lines `scan_runs` reads.

`span_id` is the run id, so feedback goes back on it: a run with no id (null or empty) forms
no row (its scores could go nowhere) and is listed as skipped, "run has no id"
(`skip_reason`). `KNOWN_FIELDS` lists, per place the reader reads from, every field LangSmith
writes there that it maps or deliberately ignores (the real-writer test fails on a field
outside it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import polars as pl

from ragframe.inputs.traces.assemble import DOCUMENT, TIME, normalize_id
from ragframe.inputs.traces.openinference import INPUT_KEYS, OUTPUT_KEYS, epoch_time, parse_time

KINDS = {
    "chain": "CHAIN",
    "llm": "LLM",
    "chat_model": "LLM",
    "retriever": "RETRIEVER",
    "tool": "TOOL",
    "embedding": "EMBEDDING",
    "prompt": "PROMPT",
    "parser": "CHAIN",
}
#: Roles of a user's message: OpenAI's and LangChain's (`type` of a serialised message).
USER_ROLES = frozenset({"user", "human", "HumanMessage", "HumanMessageChunk"})
#: The usual shapes, decoded by Polars a batch at a time (any other shape: by Python, per run).
_DOCS = pl.List(
    pl.Struct(
        {
            "page_content": pl.String,
            "content": pl.String,
            "id": pl.String,
            # the score as text, cast as `_score` reads it (`true` is no score)
            "metadata": pl.Struct({"id": pl.String, "source": pl.String, "score": pl.String}),
        }
    )
)
OUTPUTS = pl.Struct({"documents": _DOCS, "output": _DOCS})
INPUTS = pl.Struct({"messages": pl.List(pl.Struct({"role": pl.String, "content": pl.String}))})

#: Per place the reader reads from, the fields LangSmith writes there that it maps (→) or
#: deliberately leaves (ids of things ragframe has no column for, costs, timings, runtime).
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    # a run, as `langsmith.schemas.Run` serialises it
    "run": frozenset(
        {
            "id",  # → span_id
            "trace_id",
            "parent_run_id",  # → parent_id
            "run_type",  # → kind
            "start_time",
            "end_time",
            "inputs",
            "outputs",
            "extra",
            "tags",
            "session_id",  # → project_id
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "name",
            "error",
            "serialized",
            "events",
            "reference_example_id",
            "attachments",
            "child_run_ids",
            "child_runs",
            "feedback_stats",
            "app_path",
            "manifest_id",
            "status",
            "prompt_token_details",
            "completion_token_details",
            "first_token_time",
            "total_cost",
            "prompt_cost",
            "completion_cost",
            "prompt_cost_details",
            "completion_cost_details",
            "parent_run_ids",
            "dotted_order",
            "in_dataset",
            # `langsmith.types.run.Run` (`client.runs.query_v2`) names beside those above
            "project_id",  # → project_id
            "thread_id",  # → session_id
            "metadata",
            "is_root",
            "is_in_dataset",
            "inputs_preview",
            "outputs_preview",
            "error_preview",
            "latency_seconds",
            "ls_user_id",
            "manifest",
            "price_model_id",
            "query_metadata",
            "reference_dataset_id",
            "share_url",
            "last_queued_at",
            "thread_evaluation_time",
        }
    ),
    "extra": frozenset({"metadata", "runtime", "invocation_params", "batch_size"}),
    # the keys LangSmith itself adds to `extra.metadata` (the rest are the user's own)
    "extra.metadata": frozenset(
        {
            "ls_method",
            "ls_provider",
            "ls_model_name",  # → model_name
            "ls_model_type",
            "ls_temperature",
            "ls_max_tokens",
            "ls_stop",
            "ls_run_depth",
            "revision_id",
            "usage_metadata",  # → tokens
            "session_id",  # → session_id
            "thread_id",
            "conversation_id",
            "user_id",  # → user_id
        }
    ),
    "usage_metadata": frozenset(
        {
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "input_token_details",
            "output_token_details",
            "input_cost",
            "output_cost",
            "total_cost",
            "input_cost_details",
            "output_cost_details",
        }
    ),
    # a retriever's document
    "document": frozenset({"page_content", "content", "metadata", "type", "id"}),
    "document.metadata": frozenset({"id", "source", "score"}),
}

#: The skipped reason of a run without an id: no row, since feedback could not reach it.
NO_ID = "run has no id"
#: `extra.metadata` also holds the client's environment variables named so (kept in `metadata`).
ENV_METADATA_PREFIXES = ("LANGSMITH_", "LANGCHAIN_")

__all__ = ["ENV_METADATA_PREFIXES", "KINDS", "KNOWN_FIELDS", "runs_as_lines", "scan_runs"]


#: The parts of a run cut out once (as JSON text), so that the fields inside them are looked
#: up in a small text rather than by parsing the whole run again for each path.
PARTS = {"inputs": "$.inputs", "outputs": "$.outputs", "extra": "$.extra"}
#: Parts of `extra`, looked up in its text: an export that holds `extra` as JSON text (a
#: Parquet export's column) has them there too.
EXTRA_PARTS = {"meta": "$.metadata", "params": "$.invocation_params"}


def _path(*paths: str, within: str = "text") -> pl.Expr:
    """The first of `paths` that column `within` (the run, or one of its `PARTS`) has;
    objects and lists as JSON text."""
    return pl.coalesce(*(pl.col(within).str.json_path_match(p) for p in paths))


def _text(value: Any) -> str | None:
    """A field as text: strings as they are, anything else (object, list, number) as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as Polars writes a JSON number it reads as text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # as Polars writes it


def _score(value: Any) -> float | None:
    """A document's score: a number, or a number's text; anything else (`true`) is none."""
    try:
        return float(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _first(mapping: dict[str, Any], *keys: str) -> Any:
    """The first of `keys` whose value is not null (as `pl.coalesce` takes them)."""
    return next((mapping[k] for k in keys if mapping.get(k) is not None), None)


def _document(item: Any) -> dict[str, Any]:
    """One retrieved document, whatever its shape: a plain string is its content."""
    if not isinstance(item, dict):
        return {"content": _text(item), "id": None, "score": None}
    meta = item.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    content = _first(item, "page_content", "content")
    ident = _first(meta, "id", "source")
    ident = item.get("id") if ident is None else ident
    return {"content": _text(content), "id": _text(ident), "score": _score(meta.get("score"))}


def documents_of(outputs: str | None) -> list[dict[str, Any]] | None:
    """A retriever run's documents from its `outputs` JSON: `documents`, else `output` (what
    `@traceable` stores for a returned list or string), else the outputs themselves when they
    are one document; a single document counts as a list of one."""
    try:
        value = json.loads(outputs) if outputs is not None else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    docs = _first(value, "documents", "output")
    if docs is None and ("page_content" in value or "content" in value):
        docs = value  # `@traceable` stores a returned dict as the outputs themselves
    if docs is None:
        return None
    documents = [
        _document(d) for d in (docs if isinstance(docs, list) else [docs]) if d is not None
    ]
    return [d for d in documents if d["content"] is not None]  # no text: no context


def _content(value: Any) -> str | None:
    """A message's content: text, or the text parts of a list of content parts."""
    if isinstance(value, list):
        parts = [p.get("text") if isinstance(p, dict) else p for p in value]
        texts = [p for p in parts if isinstance(p, str)]
        return "\n".join(texts) if texts else _text(value)
    return _text(value)


def _role_and_content(message: Any) -> tuple[str | None, str | None]:
    if not isinstance(message, dict):
        return None, None
    fields = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
    role = fields.get("role", fields.get("type"))
    ids = message.get("id")
    if role is None and isinstance(ids, list) and ids:
        role = ids[-1]  # LangChain's serialised class path, e.g. [..., "HumanMessage"]
    return (role if isinstance(role, str) else None), _content(fields.get("content"))


def last_user_message(inputs: str | None) -> str | None:
    """The last user message of an LLM run's `inputs.messages` (a list, or LangChain's list of
    lists), None when it has none."""
    try:
        value = json.loads(inputs) if inputs is not None else None
    except ValueError:
        return None
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list):
        return None
    if messages and all(isinstance(m, list) for m in messages):
        messages = messages[-1]
    users = [c for role, c in map(_role_and_content, messages) if role in USER_ROLES]
    return users[-1] if users else None


def tags_of(tags: str | None) -> list[str] | None:
    """A run's tags whatever their shape: a list's items (objects as JSON text), one tag."""
    try:
        value = json.loads(tags) if tags is not None else None
    except ValueError:
        return [tags] if tags else None
    if value is None:
        return None
    return [t for t in map(_text, value if isinstance(value, list) else [value]) if t is not None]


def _per_batch(
    expr: pl.Expr,
    fast: Callable[[pl.Series], pl.Series | None],
    slow: Callable[[str], Any],
    dtype: pl.DataType,
) -> pl.Expr:
    """`fast(texts)` (Polars' typed JSON decoding) of each batch of `expr`'s texts, or, when
    it refuses the batch (a value of an unexpected shape), `slow` over each text in Python:
    Polars' decoding is all or nothing, and one odd run must cost neither the file nor the
    speed of the usual shapes. Elementwise, so that the streaming engine keeps it batched."""

    def batch(texts: pl.Series) -> pl.Series:
        try:
            done = fast(texts)
        except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError):
            done = None
        if done is not None:
            return done
        return pl.Series([None if t is None else slow(t) for t in texts], dtype=dtype)

    return expr.map_batches(batch, return_dtype=dtype, is_elementwise=True)


def _documents_fast(outputs: pl.Series) -> pl.Series | None:
    """`documents_of` by Polars for outputs of the usual shape; None when some have another."""
    frame = pl.DataFrame({"outputs": outputs.str.json_decode(OUTPUTS)})
    docs = pl.coalesce(
        pl.col("outputs").struct.field("documents"), pl.col("outputs").struct.field("output")
    )
    if frame.select((pl.col("outputs").is_not_null() & docs.is_null()).any()).item():
        return None  # e.g. one document as the outputs themselves
    doc = pl.element().struct.field
    meta = doc("metadata").struct.field
    return frame.select(
        docs.list.drop_nulls()
        .list.eval(
            pl.struct(
                pl.coalesce(doc("page_content"), doc("content")).alias("content"),
                pl.coalesce(meta("id"), meta("source"), doc("id")).alias("id"),
                meta("score").cast(pl.Float64, strict=False).alias("score"),
            )
        )
        .list.eval(pl.element().filter(pl.element().struct.field("content").is_not_null()))
    ).to_series()


def _user_message_fast(inputs: pl.Series) -> pl.Series | None:
    """`last_user_message` by Polars for OpenAI-style messages; None for other shapes."""
    frame = pl.DataFrame({"inputs": inputs.str.json_decode(INPUTS)})
    messages = pl.col("inputs").struct.field("messages")
    role = pl.element().struct.field("role")
    if frame.select(messages.list.eval(role.is_null()).list.any().any()).item():
        return None  # LangChain's messages carry `type`, not `role`
    user = pl.element().filter(role.is_in(list(USER_ROLES))).struct.field("content")
    return frame.select(messages.list.eval(user).list.last()).to_series()


def _tags_fast(tags: pl.Series) -> pl.Series:
    return tags.str.json_decode(pl.List(pl.String))


def runs_as_lines(runs: pl.LazyFrame) -> pl.LazyFrame:
    """A frame of runs (a column a field, as a Parquet export of runs holds them: `inputs`,
    `outputs`, `extra` as structs or as JSON text) as the (`n`, `line`) JSON Lines that
    `scan_runs` reads; times as ISO text."""
    schema = runs.collect_schema()
    fields = []
    for name, dtype in schema.items():
        column = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            zone = "%:z" if dtype.time_zone else ""
            column = column.dt.strftime(f"%Y-%m-%dT%H:%M:%S%.f{zone}")
        fields.append(column)
    return runs.with_row_index("n", offset=1).select(
        pl.col("n").cast(pl.Int64), pl.struct(fields).struct.json_encode().alias("line")
    )


def _count(*paths: str, within: str = "text") -> pl.Expr:
    """A token count, through Float64 as OpenInference reads one (`12.0` is 12); text, NaN or
    a number beyond Int64 is null, so the next place holding the count is tried."""
    return _path(*paths, within=within).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False)


def _tokens(name: str, usage: str, other: str) -> pl.Expr:
    return pl.coalesce(
        _count(f"$.{name}"),
        _count(f"$.usage_metadata.{usage}", f"$.llm_output.token_usage.{name}", within="outputs"),
        _count(f"$.usage_metadata.{usage}", within="meta"),
        _count(f"$.usage.{name}", f"$.usage.{other}", within="outputs"),
    )


def _time(path: str) -> pl.Expr:
    """An ISO time, or an epoch number in the unit its size says (`epoch_time`)."""
    text = _path(path)
    number = text.cast(pl.Float64, strict=False)
    usable = pl.when(number.is_finite() & (number.abs() < 1e18)).then(number)
    return pl.coalesce(parse_time(text), epoch_time(usable))


def scan_runs(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The span frame of LangSmith run lines (`n`: line number, `line`: one run)."""
    runs = lines.select(
        pl.col("n").cast(pl.Int64).alias("line"),
        pl.col("line").alias("text"),
        *(pl.col("line").str.json_path_match(path).alias(part) for part, path in PARTS.items()),
    ).with_columns(
        pl.col("extra").str.json_path_match(path).alias(part) for part, path in EXTRA_PARTS.items()
    )
    ident = _path("$.id")
    run_type = _path("$.run_type").str.to_lowercase()  # `query_v2` writes "CHAIN", "LLM"...
    kind = run_type.replace_strict(KINDS, default=None, return_dtype=pl.String)
    outputs = pl.when(kind == "RETRIEVER").then(pl.col("outputs"))
    inputs = pl.when(kind == "LLM").then(pl.col("inputs"))
    return runs.select(
        "line",
        normalize_id(_path("$.trace_id", "$.id")).alias("trace_id"),
        normalize_id(ident).alias("span_id"),
        normalize_id(_path("$.parent_run_id")).alias("parent_id"),
        kind.alias("kind"),
        _time("$.start_time").cast(TIME).alias("start_time"),
        _time("$.end_time").cast(TIME).alias("end_time"),
        _path(*(f"$.{k}" for k in INPUT_KEYS), within="inputs").alias("input"),
        _path(*(f"$.{k}" for k in OUTPUT_KEYS), within="outputs").alias("output"),
        _per_batch(inputs, _user_message_fast, last_user_message, pl.String()).alias(
            "user_message"
        ),
        _path(
            "$.choices[0].message.content",
            "$.generations[0][0].text",
            "$.content",
            within="outputs",
        ).alias("assistant_message"),
        _per_batch(outputs, _documents_fast, documents_of, pl.List(DOCUMENT)).alias("documents"),
        pl.coalesce(
            _path("$.ls_model_name", within="meta"),
            _path("$.model", "$.model_name", within="params"),
            _path("$.model", within="outputs"),
        ).alias("model_name"),
        _tokens("prompt_tokens", "input_tokens", "input_tokens").alias("prompt_tokens"),
        _tokens("completion_tokens", "output_tokens", "output_tokens").alias("completion_tokens"),
        _tokens("total_tokens", "total_tokens", "total_tokens").alias("total_tokens"),
        pl.coalesce(
            _path("$.reference", within="outputs"), _path("$.reference_outputs.answer")
        ).alias("ground_truth"),
        (pl.col("inputs").is_not_null() | pl.col("outputs").is_not_null()).alias("has_attributes"),
        pl.coalesce(
            _path("$.session_id", "$.thread_id", "$.conversation_id", within="meta"),
            _path("$.thread_id"),  # `client.runs.query_v2`'s runs
        ).alias("session_id"),
        _path("$.user_id", within="meta").alias("user_id"),
        pl.col("meta").alias("metadata"),
        _per_batch(_path("$.tags"), _tags_fast, tags_of, pl.List(pl.String())).alias("tags"),
        normalize_id(_path("$.session_id", "$.project_id")).alias("project_id"),
        # why the run forms no row, listed as skipped by `assemble`
        pl.when(ident.is_null() | (ident == "")).then(pl.lit(NO_ID)).alias("skip_reason"),
    )
