"""Stages that several metrics share: the claims of an answer.

Sharing works at the judge: every metric that needs the claims of an answer builds the very same
prompt through `answer_claims`, and the judge sends each distinct prompt once per run, so
faithfulness, answer_relevancy_llm and answer_correctness together pay for one extraction.
"""

from __future__ import annotations

import polars as pl

from ragframe.columns import ROW_ID
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, fence, prompt
from ragframe.prompts import load

MAX_CLAIMS = 40

CLAIMS = Task(
    name="answer.claims",
    system=load("faithfulness_claims"),
    schema={
        "type": "object",
        "properties": {
            "claims": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_CLAIMS}
        },
        "required": ["claims"],
    },
    max_tokens=1024,
)


async def answer_claims(ctx: Context, rows: pl.DataFrame) -> pl.DataFrame:
    """ROW_ID, `claims` (List(String), blank claims dropped), `error`, usage columns."""
    asked = await ctx.ask(
        CLAIMS,
        rows.select(
            ROW_ID,
            prompt(fence("question", pl.col("question")), fence("answer", pl.col("answer"))).alias(
                "prompt"
            ),
        ),
    )
    return asked.select(
        ROW_ID,
        pl.col("answer")
        .struct.field("claims")
        .list.eval(pl.element().str.strip_chars())
        .list.eval(pl.element().filter(pl.element().str.len_chars() > 0))
        .alias("claims"),
        "error",
    )


def explode_items(frame: pl.DataFrame, items: str, item_name: str) -> pl.DataFrame:
    """One row per list item, with its 0-based position `pos` in the list."""
    return (
        frame.select(
            ROW_ID,
            pl.col(items).alias(item_name),
            pl.int_ranges(pl.col(items).list.len()).alias("pos"),
        )
        .explode([item_name, "pos"])
        .drop_nulls("pos")
    )
