"""deepeval's statement-counting metrics: contextual relevancy, LLM answer relevancy and
hallucination (the guide, seed 003).

Each sends one request per row where deepeval sends one per context or per stage: every
context (or statement) of a row is judged at once, with the array's length pinned by the schema.
"""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ragframe.columns import ROW_ID
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence, fence_items, prompt
from ragframe.metrics.statements import CLAIMS, answer_claims, explode_items
from ragframe.prompts import load

# -------------------------------------------------------------------------------- shared parts


def _kept_contexts(rows: pl.DataFrame) -> pl.DataFrame:
    """ROW_ID, `kept` (the row's non-blank contexts) and `context_index` (their 1-based
    positions in the input), so a blank item is neither judged nor counted, and every verdict
    still names the context the user passed."""
    return (
        rows.select(
            ROW_ID,
            pl.col("contexts").alias("kept"),
            pl.int_ranges(1, pl.col("contexts").list.len() + 1, dtype=pl.Int32).alias(
                "context_index"
            ),
        )
        .explode(["kept", "context_index"])
        .filter(pl.col("kept").str.strip_chars().str.len_chars() > 0)
        .group_by(ROW_ID, maintain_order=True)
        .agg("kept", "context_index")
    )


def _per_context(judged: pl.DataFrame, verdicts: pl.Expr) -> pl.DataFrame:
    """One row per judged context of the rows that got an answer: ROW_ID, `context_index`,
    `verdict` (the judge's item for that context, matched by position)."""
    return (
        judged.filter(pl.col("error").is_null())
        .select(ROW_ID, "context_index", verdicts.alias("verdict"))
        .explode(["context_index", "verdict"])
    )


# ------------------------------------------------------------------------ contextual relevancy

RELEVANCY = Task(
    name="contextual_relevancy.statements",
    system=load("contextual_relevancy"),
    schema={
        "type": "object",
        "properties": {
            "contexts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "statements": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "statement": {"type": "string"},
                                    "reason": {"type": "string"},
                                    "relevant": {"type": "boolean"},
                                },
                                "required": ["statement", "reason", "relevant"],
                            },
                        }
                    },
                    "required": ["statements"],
                },
            }
        },
        "required": ["contexts"],
    },
    counted="contexts",
    max_tokens=4096,
)

STATEMENT = pl.Struct({"statement": pl.String(), "relevant": pl.Boolean(), "reason": pl.String()})
CONTEXT_STATEMENTS = pl.Struct({"context_index": pl.Int32(), "statements": pl.List(STATEMENT)})


class ContextualRelevancy(Metric):
    """Share of the contexts' statements that are relevant to the question (higher is better).

    Formula: relevant statements / statements, counted over all contexts of the row (deepeval's
    ContextualRelevancyMetric). The judge splits each context into statements and judges each.
    Requests per row: 1 (every context split and judged in one request, the number of contexts
    pinned by the schema; deepeval sends one per context plus one for its reason).
    Empty input: a null or empty question or contexts gives null with the reason and sends
    nothing; blank context items are skipped; contexts with no statement at all give null
    ("no statements"), never 0/0.
    Source: the guide's Contextual Relevancy (seed 003, worked example 9/11 = 0.8182).
    """

    name = "contextual_relevancy"
    requires: ClassVar[tuple[str, ...]] = ("question", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"contexts": pl.List(CONTEXT_STATEMENTS)}
    info = MetricInfo(
        formula="relevant statements / statements, over all contexts",
        requests_per_row="1",
        empty_input="null: missing question or contexts, or no statements in the contexts",
        source="guide Contextual Relevancy (003), deepeval",
    )

    def tasks(self) -> list[Task]:
        return [RELEVANCY]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        kept = _kept_contexts(rows).join(rows.select(ROW_ID, "question"), on=ROW_ID)
        judged = await ctx.ask(
            RELEVANCY,
            kept.select(
                ROW_ID,
                "context_index",
                prompt(
                    fence("question", pl.col("question")),
                    fence_items("context", pl.col("kept")),
                ).alias("prompt"),
                pl.col("kept").list.len().alias("n"),
            ),
            count_col="n",
        )
        statements = pl.col("verdict").struct.field("statements")
        per_context = _per_context(judged, pl.col("answer").struct.field("contexts")).with_columns(
            statements.list.eval(
                pl.struct(
                    pl.element().struct.field("statement"),
                    pl.element().struct.field("relevant"),
                    pl.element().struct.field("reason"),
                )
            ).alias("statements")
        )
        per_row = per_context.group_by(ROW_ID).agg(
            pl.struct("context_index", "statements").sort_by("context_index").alias("contexts"),
            pl.col("statements").list.len().sum().alias("total"),
            pl.col("statements")
            .list.eval(pl.element().struct.field("relevant").cast(pl.Int64))
            .list.sum()
            .sum()
            .alias("relevant"),
        )
        return (
            judged.select(ROW_ID, "error")
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
            .select(
                ROW_ID,
                "contexts",
                pl.when(pl.col("total") > 0)
                .then(pl.col("relevant") / pl.col("total"))
                .alias("score"),
                pl.coalesce(
                    "error",
                    pl.when(pl.col("total") == 0).then(
                        pl.lit("no statements found in the contexts")
                    ),
                ).alias("error"),
            )
        )


# ---------------------------------------------------------------------- answer relevancy (LLM)

VERDICTS = Task(
    name="answer_relevancy_llm.verdicts",
    system=load("answer_relevancy_llm"),
    schema={
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string"},
                        "verdict": {"type": "string", "enum": ["yes", "no", "idk"]},
                    },
                    "required": ["reason", "verdict"],
                },
            }
        },
        "required": ["verdicts"],
    },
    counted="verdicts",
    max_tokens=2048,
)

ANSWER_STATEMENT = pl.Struct(
    {"statement": pl.String(), "verdict": pl.String(), "reason": pl.String()}
)


class AnswerRelevancyLLM(Metric):
    """Share of the answer's statements that are relevant to the question (higher is better).

    Formula: relevant statements / statements, where a statement is relevant unless its verdict
    is "no": "idk" (ambiguous, supporting information) counts as relevant, as deepeval's
    AnswerRelevancyMetric counts it. Every verdict is kept in the detail, so a stricter
    yes-only share can be recomputed from it.
    Requests per row: 1 to extract the statements (the claims stage shared with faithfulness
    and answer_correctness: one extraction per row between them) + 1 judging every statement
    (their number pinned by the schema; deepeval sends 3).
    Empty input: a null or empty question or answer gives null with the reason and sends
    nothing; an answer with no statement gives null ("no statements"), never deepeval's 1.0.
    Note: the shared stage extracts factual claims, so greetings and hedges are not judged.
    Source: the guide's LLM-based Answer Relevancy (seed 003, worked example 2/2 = 1.0).
    """

    name = "answer_relevancy_llm"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"statements": pl.List(ANSWER_STATEMENT)}
    info = MetricInfo(
        formula='statements with verdict != "no" / statements ("idk" counts as relevant)',
        requests_per_row="1 (shared claims extraction) + 1",
        empty_input="null: missing question or answer, or no statements in the answer",
        source="guide LLM-based Answer Relevancy (003), deepeval",
    )

    def tasks(self) -> list[Task]:
        return [CLAIMS, VERDICTS]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        stated = await answer_claims(ctx, rows)
        ok = stated.filter(pl.col("error").is_null() & (pl.col("claims").list.len() > 0))
        judged = await ctx.ask(
            VERDICTS,
            ok.join(rows.select(ROW_ID, "question"), on=ROW_ID).select(
                ROW_ID,
                prompt(
                    fence("question", pl.col("question")),
                    fence_items("statement", pl.col("claims")),
                ).alias("prompt"),
                pl.col("claims").list.len().alias("n"),
            ),
            count_col="n",
        )
        items = explode_items(ok, "claims", "statement").join(
            judged.select(ROW_ID, "answer", "error"), on=ROW_ID, how="left"
        )
        verdict = (
            pl.col("answer").struct.field("verdicts").list.get(pl.col("pos"), null_on_oob=True)
        )
        per_row = (
            items.filter(pl.col("error").is_null())
            .with_columns(verdict.alias("v"))
            .group_by(ROW_ID)
            .agg(
                pl.struct(
                    "statement",
                    pl.col("v").struct.field("verdict"),
                    pl.col("v").struct.field("reason"),
                )
                .sort_by("pos")
                .alias("statements"),
                (pl.col("v").struct.field("verdict") != "no")
                .cast(pl.Float64)
                .mean()
                .alias("score"),
            )
        )
        return (
            stated.select(ROW_ID, pl.col("error").alias("extract_error"))
            .join(judged.select(ROW_ID, "error"), on=ROW_ID, how="left", maintain_order="left")
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
            .select(
                ROW_ID,
                "score",
                "statements",
                pl.coalesce(
                    "extract_error",
                    "error",
                    pl.when(pl.col("statements").is_null()).then(
                        pl.lit("no statements found in the answer")
                    ),
                ).alias("error"),
            )
        )


# -------------------------------------------------------------------------------- hallucination

HALLUCINATION = Task(
    name="hallucination.contexts",
    system=load("hallucination"),
    schema={
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string"},
                        "contradicted": {"type": "boolean"},
                    },
                    "required": ["reason", "contradicted"],
                },
            }
        },
        "required": ["verdicts"],
    },
    counted="verdicts",
    max_tokens=1536,
)

CONTRADICTION = pl.Struct(
    {"context_index": pl.Int32(), "contradicted": pl.Boolean(), "reason": pl.String()}
)


class Hallucination(Metric):
    """Share of the contexts that the answer contradicts (LOWER is better).

    Formula: contradicted contexts / contexts (deepeval's HallucinationMetric). Only a direct
    conflict counts: an answer that adds to or leaves out what a context says does not
    contradict it.
    Requests per row: 1 (every context judged in one request, their number pinned by the
    schema).
    Empty input: a null or empty answer or contexts gives null with the reason and sends
    nothing; blank context items are skipped (neither judged nor counted).
    Inputs: answer and contexts. deepeval judges against `context` (ground-truth passages);
    to do so here, map that column: columns={"contexts": "context"}.
    Source: the guide's Hallucination Check (seed 003, worked example 0/2 = 0.0).
    """

    name = "hallucination"
    requires: ClassVar[tuple[str, ...]] = ("answer", "contexts")
    direction = "lower"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"contexts": pl.List(CONTRADICTION)}
    info = MetricInfo(
        formula="contradicted contexts / contexts (lower is better)",
        requests_per_row="1",
        empty_input="null: missing answer or contexts",
        source="guide Hallucination Check (003), deepeval",
    )

    def tasks(self) -> list[Task]:
        return [HALLUCINATION]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        kept = _kept_contexts(rows).join(rows.select(ROW_ID, "answer"), on=ROW_ID)
        judged = await ctx.ask(
            HALLUCINATION,
            kept.select(
                ROW_ID,
                "context_index",
                # Contexts first: the part a row may share with other requests.
                prompt(
                    fence_items("context", pl.col("kept")),
                    fence("answer", pl.col("answer")),
                ).alias("prompt"),
                pl.col("kept").list.len().alias("n"),
            ),
            count_col="n",
        )
        verdict = pl.col("verdict")
        per_row = (
            _per_context(judged, pl.col("answer").struct.field("verdicts"))
            .group_by(ROW_ID)
            .agg(
                pl.struct(
                    "context_index",
                    verdict.struct.field("contradicted"),
                    verdict.struct.field("reason"),
                )
                .sort_by("context_index")
                .alias("contexts"),
                verdict.struct.field("contradicted").cast(pl.Float64).mean().alias("score"),
            )
        )
        return judged.select(ROW_ID, "error").join(
            per_row, on=ROW_ID, how="left", maintain_order="left"
        )
