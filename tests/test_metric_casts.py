"""What a metric of one's own gets from `Metric.run` and `Context.ask` (docs/writing-a-metric.md):
a prompt column of any text type is sent, and a metric returning fields that cannot take
their declared types fails on its score first, every time."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
import pytest

import ragframe
from ragframe.inputs.columns import ROW_ID
from ragframe.metrics import Context, Metric
from ragframe.metrics.faithfulness import VERIFY

ROWS = pl.DataFrame({"question": ["q", "q"], "answer": ["first", "second"]})


class CategoricalPrompts(Metric):
    name = "categorical_prompts"
    requires: ClassVar[tuple[str, ...]] = ("answer",)

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        asked = rows.select(ROW_ID, pl.col("answer").cast(pl.Categorical).alias("prompt"))
        answers = await ctx.ask(VERIFY, asked)
        return answers.select(ROW_ID, pl.lit(0.5).alias("score"))


class Uncastable(Metric):
    name = "uncastable"
    requires: ClassVar[tuple[str, ...]] = ("answer",)
    detail_fields: ClassVar[dict[str, Any]] = {"n": pl.Int64()}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        return rows.select(ROW_ID, pl.lit("abc").alias("score"), pl.lit("x").alias("n"))


def test_a_categorical_prompt_column_is_sent_as_text(server, judge):
    out = ragframe.evaluate(ROWS, [CategoricalPrompts()], judge=judge)
    assert out["categorical_prompts"].to_list() == [0.5, 0.5]
    assert server.count() == 2


def test_two_uncastable_fields_fail_on_the_score_every_time(judge):
    for _ in range(200):  # Polars casts one plan's columns in parallel: either could fail first
        with pytest.raises(pl.exceptions.InvalidOperationError, match="column 'score'"):
            ragframe.evaluate(ROWS, [Uncastable()], judge=judge)
