"""LangSmith run exports: JSON Lines of runs as `langsmith.schemas.Run` serialises them (`id`,
`trace_id`, `parent_run_id`, `run_type`, `inputs`, `outputs`, ISO times, token counts).

Run types map onto span kinds: chain → CHAIN, llm / chat_model → LLM, retriever → RETRIEVER.
Text fields are found by JSON path, never by a fixed schema of `inputs` / `outputs` (they hold
anything): the question from `inputs.question | query | input`, the answer from
`outputs.answer | output | text`, an LLM run's answer from `outputs.generations[0][0].text`
(or `outputs.content`) and its question from the last `inputs.messages` entry; a retriever's
documents from `outputs.documents[*]` (`page_content`, `metadata.id` / `metadata.source`,
`metadata.score`). `span_id` is the run id, so feedback goes back on it.
"""

from __future__ import annotations

import polars as pl

from ragframe.inputs.traces.assemble import TIME, normalize_id
from ragframe.inputs.traces.openinference import parse_time

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
DOCS = pl.List(
    pl.Struct(
        {
            "page_content": pl.String,
            "metadata": pl.Struct({"id": pl.String, "source": pl.String, "score": pl.String}),
        }
    )
)
MESSAGES = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))

__all__ = ["scan_runs"]


def _path(*paths: str) -> pl.Expr:
    return pl.coalesce(*(pl.col("text").str.json_path_match(p) for p in paths))


def scan_runs(lines: pl.LazyFrame) -> pl.LazyFrame:
    """The span frame of LangSmith run lines (`n`: line number, `line`: one run)."""
    runs = lines.select(pl.col("n").cast(pl.Int64).alias("line"), pl.col("line").alias("text"))
    docs = _path("$.outputs.documents").str.json_decode(DOCS)
    documents = docs.list.eval(
        pl.struct(
            pl.element().struct.field("page_content").alias("content"),
            pl.coalesce(
                pl.element().struct.field("metadata").struct.field("id"),
                pl.element().struct.field("metadata").struct.field("source"),
            ).alias("id"),
            pl.element()
            .struct.field("metadata")
            .struct.field("score")
            .cast(pl.Float64, strict=False)
            .alias("score"),
        )
    )
    run_type = _path("$.run_type")
    messages = _path("$.inputs.messages").str.json_decode(MESSAGES)
    tokens = {
        k: _path(f"$.{k}").cast(pl.Int64, strict=False)
        for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    return runs.select(
        "line",
        normalize_id(_path("$.trace_id")).alias("trace_id"),
        normalize_id(_path("$.id")).alias("span_id"),
        normalize_id(_path("$.parent_run_id")).alias("parent_id"),
        run_type.replace_strict(KINDS, default=None, return_dtype=pl.String).alias("kind"),
        parse_time(_path("$.start_time")).cast(TIME).alias("start_time"),
        parse_time(_path("$.end_time")).cast(TIME).alias("end_time"),
        _path("$.inputs.question", "$.inputs.query", "$.inputs.input").alias("input"),
        _path("$.outputs.answer", "$.outputs.output", "$.outputs.text").alias("output"),
        messages.list.eval(
            pl.element()
            .filter(pl.element().struct.field("role").is_in(["user", "human"]))
            .struct.field("content")
        )
        .list.last()
        .alias("user_message"),
        _path("$.outputs.generations[0][0].text", "$.outputs.content").alias("assistant_message"),
        documents.alias("documents"),
        _path(
            "$.extra.metadata.ls_model_name",
            "$.extra.invocation_params.model",
            "$.extra.invocation_params.model_name",
        ).alias("model_name"),
        *(v.alias(k) for k, v in tokens.items()),
        _path("$.outputs.reference", "$.reference_outputs.answer").alias("ground_truth"),
        (_path("$.inputs").is_not_null() | _path("$.outputs").is_not_null()).alias(
            "has_attributes"
        ),
    )
