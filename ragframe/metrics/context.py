"""Retriever metrics judged by an LLM: context precision (with and without reference) and
context recall."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ragframe.columns import ROW_ID
from ragframe.judge.task import Task
from ragframe.metrics.base import (
    Context,
    Metric,
    MetricInfo,
    average_precision,
    fence,
    fence_items,
    prompt,
)
from ragframe.prompts import load

_VERDICTS_SCHEMA = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"reason": {"type": "string"}, "relevant": {"type": "boolean"}},
                "required": ["reason", "relevant"],
            },
        }
    },
    "required": ["verdicts"],
}

PRECISION_REFERENCE = Task(
    name="context_precision.reference",
    system=load("context_precision_reference"),
    schema=_VERDICTS_SCHEMA,
    counted="verdicts",
    max_tokens=1536,
)
PRECISION_ANSWER = Task(
    name="context_precision.answer",
    system=load("context_precision_answer"),
    schema=_VERDICTS_SCHEMA,
    counted="verdicts",
    max_tokens=1536,
)

VERDICT = pl.Struct({"context_index": pl.Int32(), "relevant": pl.Boolean(), "reason": pl.String()})


class ContextPrecision(Metric):
    """Are the contexts useful for reaching `ground_truth` ranked first? (higher is better)

    Formula: average precision of the per-context `relevant` flags in rank order,
    AP = sum_k (precision@k * r_k) / (relevant contexts); 0.0 when no context is relevant.
    Requests per row: 1 (every context of the row judged in one request; ragas sends one per
    context).
    Empty input: null question, ground_truth or contexts gives null with the reason.
    Source: the guide's Contextual Precision (seed 003, worked example 0.5833), llm4s
    ContextPrecision (000), ragas LLMContextPrecisionWithReference (002).
    """

    name = "context_precision"
    requires: ClassVar[tuple[str, ...]] = ("question", "ground_truth", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"verdicts": pl.List(VERDICT)}
    info = MetricInfo(
        formula="average precision of relevant flags (judged against ground_truth)",
        requests_per_row="1",
        empty_input="null: missing question, ground_truth or contexts",
        source="guide Contextual Precision (003), llm4s (000), ragas (002)",
    )
    _task: ClassVar[Task] = PRECISION_REFERENCE
    _target: ClassVar[tuple[str, str]] = ("ground_truth", "reference")

    def tasks(self) -> list[Task]:
        return [self._task]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        column, tag = self._target
        judged = await ctx.ask(
            self._task,
            rows.select(
                ROW_ID,
                prompt(
                    fence("question", pl.col("question")),
                    fence(tag, pl.col(column)),
                    fence_items("context", pl.col("contexts")),
                ).alias("prompt"),
                pl.col("contexts").list.len().alias("n"),
            ),
            count_col="n",
        )
        verdicts = pl.col("answer").struct.field("verdicts")
        return judged.select(
            ROW_ID,
            verdicts.list.eval(
                pl.struct(
                    pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias("context_index"),
                    pl.element().struct.field("relevant"),
                    pl.element().struct.field("reason"),
                )
            ).alias("verdicts"),
            average_precision(verdicts.list.eval(pl.element().struct.field("relevant"))).alias(
                "score"
            ),
            "error",
        )


class ContextPrecisionWithoutReference(ContextPrecision):
    """Context precision judged against the `answer` instead of a reference (higher is better).

    Formula, requests per row and edge cases as context_precision; needs question, answer and
    contexts. Source: ragas LLMContextPrecisionWithoutReference (seed 002).
    """

    name = "context_precision_without_reference"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer", "contexts")
    info = MetricInfo(
        formula="average precision of relevant flags (judged against the answer)",
        requests_per_row="1",
        empty_input="null: missing question, answer or contexts",
        source="ragas LLMContextPrecisionWithoutReference (002)",
    )
    _task = PRECISION_ANSWER
    _target = ("answer", "answer")


RECALL = Task(
    name="context_recall.attribute",
    system=load("context_recall"),
    schema={
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "maxItems": 40,
                "items": {
                    "type": "object",
                    "properties": {
                        "fact": {"type": "string"},
                        "reason": {"type": "string"},
                        "covered": {"type": "boolean"},
                        "source_context": {"type": ["integer", "null"]},
                    },
                    "required": ["fact", "reason", "covered", "source_context"],
                },
            }
        },
        "required": ["facts"],
    },
    indexes=("facts.items.source_context",),
    max_tokens=2048,
)

FACT = pl.Struct(
    {
        "fact": pl.String(),
        "covered": pl.Boolean(),
        "source_context": pl.Int32(),
        "reason": pl.String(),
    }
)


class ContextRecall(Metric):
    """Share of the facts of `ground_truth` that the contexts contain (higher is better).

    Formula: covered facts / facts. Each fact is attributed to the context that supports it
    (`source_context`, 1-based, null when not covered; a number outside 1..contexts fails
    validation and is re-asked).
    Requests per row: 1 (facts extracted and attributed together; llm4s FactAttribution).
    Empty input: null question, ground_truth or contexts gives null with the reason; a
    ground truth with no facts gives null ("no facts"), never 1.0.
    Source: llm4s ContextRecall / FactAttribution (seed 000), the guide's Contextual Recall
    (seed 003, worked example 0.5).
    """

    name = "context_recall"
    requires: ClassVar[tuple[str, ...]] = ("question", "ground_truth", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"facts": pl.List(FACT)}
    info = MetricInfo(
        formula="covered facts of ground_truth / facts",
        requests_per_row="1",
        empty_input="null: missing input, or no facts in ground_truth",
        source="llm4s ContextRecall (000), guide Contextual Recall (003)",
    )

    def tasks(self) -> list[Task]:
        return [RECALL]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        judged = await ctx.ask(
            RECALL,
            rows.select(
                ROW_ID,
                prompt(
                    fence("question", pl.col("question")),
                    fence_items("context", pl.col("contexts")),
                    fence("ground_truth", pl.col("ground_truth")),
                ).alias("prompt"),
                pl.col("contexts").list.len().alias("n"),
            ),
            count_col="n",
        )
        facts = pl.col("answer").struct.field("facts")
        source = pl.element().struct.field("source_context")
        covered = pl.element().struct.field("covered")
        return judged.select(
            ROW_ID,
            "n",
            facts.list.eval(
                pl.struct(
                    pl.element().struct.field("fact"),
                    covered,
                    pl.when(covered)
                    .then(source)
                    .otherwise(None)
                    .cast(pl.Int32)
                    .alias("source_context"),
                    pl.element().struct.field("reason"),
                )
            ).alias("facts"),
            "error",
        ).with_columns(
            pl.col("facts")
            .list.eval(pl.element().struct.field("covered").cast(pl.Float64))
            .list.mean()
            .alias("score"),
            pl.coalesce(
                "error",
                pl.when(pl.col("facts").list.len() == 0).then(
                    pl.lit("no facts found in ground_truth")
                ),
            ).alias("error"),
        )
