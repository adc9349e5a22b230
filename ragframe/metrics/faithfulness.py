"""Faithfulness: the share of the answer's claims that the retrieved contexts support."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl

from ragframe.columns import ROW_ID
from ragframe.errors import ConfigError
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence_items, prompt
from ragframe.metrics.statements import CLAIMS, answer_claims, explode_items
from ragframe.prompts import load

VERIFY = Task(
    name="faithfulness.verify",
    system=load("faithfulness_verify"),
    schema={
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"reason": {"type": "string"}, "supported": {"type": "boolean"}},
                    "required": ["reason", "supported"],
                },
            }
        },
        "required": ["verdicts"],
    },
    counted="verdicts",
    max_tokens=1024,
)

CLAIM = pl.Struct({"claim": pl.String(), "supported": pl.Boolean(), "reason": pl.String()})


class Faithfulness(Metric):
    """Share of the answer's claims that can be inferred from the contexts (higher is better).

    Formula: supported claims / claims.
    Requests per row: 1 to extract the claims (shared with answer_relevancy_llm and
    answer_correctness), then ceil(claims / batch_size) to verify them: at most
    1 + ceil(claims / batch_size).
    Empty input: a null or empty answer, question or contexts gives null with the reason and
    sends nothing; an answer with no factual claim gives null ("no factual claims"), never 1.0.
    Source: llm4s Faithfulness (seed 000), deepeval's definition (seed 003).
    """

    name = "faithfulness"
    requires = ("question", "answer", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"claims": pl.List(CLAIM)}
    info = MetricInfo(
        formula="supported claims / claims",
        requests_per_row="1 + ceil(claims / batch_size)",
        empty_input="null: missing input, or no factual claims in the answer",
        source="llm4s Faithfulness (000), deepeval (003)",
    )

    def __init__(self, batch_size: int = 5) -> None:
        if batch_size < 1:
            raise ConfigError(f"faithfulness batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size

    def tasks(self) -> list[Task]:
        return [CLAIMS, VERIFY]

    def config(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        stated = await answer_claims(ctx, rows)
        ok = stated.filter(pl.col("error").is_null() & (pl.col("claims").list.len() > 0))
        claims = explode_items(ok, "claims", "claim").with_columns(
            (pl.col("pos") // self.batch_size).alias("batch")
        )
        batches = (
            claims.group_by(ROW_ID, "batch", maintain_order=True)
            .agg("claim")
            .join(rows.select(ROW_ID, "contexts"), on=ROW_ID, how="left")
            .with_columns(
                prompt(
                    fence_items("context", pl.col("contexts")),
                    fence_items("claim", pl.col("claim")),
                ).alias("prompt"),
                pl.col("claim").list.len().alias("n"),
            )
        )
        judged = await ctx.ask(
            VERIFY, batches.select(ROW_ID, "batch", "prompt", "n"), count_col="n"
        )
        verdicts = claims.join(
            judged.select(ROW_ID, "batch", "answer", "error"), on=[ROW_ID, "batch"], how="left"
        ).with_columns(
            pl.col("answer")
            .struct.field("verdicts")
            .list.get(pl.col("pos") - pl.col("batch") * self.batch_size, null_on_oob=True)
            .alias("verdict")
        )
        per_row = verdicts.group_by(ROW_ID).agg(
            pl.struct(
                "claim",
                pl.col("verdict").struct.field("supported"),
                pl.col("verdict").struct.field("reason"),
            )
            .sort_by("pos")
            .alias("claims"),
            pl.col("verdict").struct.field("supported").cast(pl.Float64).mean().alias("score"),
            pl.col("error").drop_nulls().first().alias("verify_error"),
        )
        return (
            stated.select(ROW_ID, pl.col("error").alias("extract_error"))
            .join(per_row, on=ROW_ID, how="left")
            .select(
                ROW_ID,
                "score",
                "claims",
                pl.coalesce(
                    "extract_error",
                    "verify_error",
                    pl.when(pl.col("claims").is_null()).then(
                        pl.lit("no factual claims found in the answer")
                    ),
                ).alias("error"),
            )
        )
