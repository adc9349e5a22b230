"""Answer relevancy, similarity-based: do questions generated from the answer match the question?"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import polars as pl

from ragframe.columns import ROW_ID
from ragframe.errors import ConfigError
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence, prompt
from ragframe.metrics.statements import explode_items
from ragframe.prompts import load

QUESTIONS = Task(
    name="answer_relevancy.questions",
    system=load("answer_relevancy_questions"),
    schema={
        "type": "object",
        "properties": {
            "questions": {"type": "array", "items": {"type": "string"}},
            "noncommittal": {"type": "boolean"},
        },
        "required": ["questions", "noncommittal"],
    },
    counted="questions",
    max_tokens=512,
)

GENERATED = pl.Struct({"question": pl.String(), "similarity": pl.Float64()})


class AnswerRelevancy(Metric):
    """Mean cosine similarity between the question and questions generated from the answer
    (higher is better).

    Formula: mean_i cos(E(generated_i), E(question)), clipped to [0, 1]; 0 when the judge finds
    the answer noncommittal (ragas's rule).
    Requests per row: 1 chat request (all N questions and the noncommittal flag at once; ragas
    asks for n=3 completions, which many servers refuse) plus embeddings, batched across rows
    (up to 128 texts per request, each distinct text embedded once and cached).
    Empty input: a null or empty question or answer gives null with the reason.
    Source: llm4s AnswerRelevancy (seed 000), ragas answer relevancy and the guide's
    similarity-based Answer Relevancy (seed 003, worked example 0.92).
    """

    name = "answer_relevancy"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer")
    uses_embeddings = True
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "questions": pl.List(GENERATED),
        "noncommittal": pl.Boolean(),
    }
    info = MetricInfo(
        formula="mean cosine(question, generated questions), 0 if noncommittal",
        requests_per_row="1 + embeddings (batched across rows)",
        empty_input="null: missing question or answer",
        source="llm4s AnswerRelevancy (000), guide similarity-based (003)",
    )

    def __init__(self, n_questions: int = 3) -> None:
        if n_questions < 1:
            raise ConfigError(f"answer_relevancy n_questions must be at least 1, got {n_questions}")
        self.n_questions = n_questions

    def tasks(self) -> list[Task]:
        return [QUESTIONS]

    def config(self) -> dict[str, Any]:
        return {"n_questions": self.n_questions}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        asked = await ctx.ask(
            QUESTIONS,
            rows.select(
                ROW_ID,
                prompt(
                    f"Number of questions to write: {self.n_questions}",
                    fence("answer", pl.col("answer")),
                ).alias("prompt"),
                pl.lit(self.n_questions).alias("n"),
            ),
            count_col="n",
        )
        generated = asked.select(
            ROW_ID,
            pl.col("answer").struct.field("questions").alias("questions"),
            pl.col("answer").struct.field("noncommittal").alias("noncommittal"),
            "error",
        ).join(rows.select(ROW_ID, "question"), on=ROW_ID, how="left")
        items = explode_items(
            generated.filter(pl.col("error").is_null()), "questions", "generated"
        ).join(generated.select(ROW_ID, "question"), on=ROW_ID, how="left")
        similarity, reasons = await self._similarities(
            ctx, items.get_column("question").to_list(), items.get_column("generated").to_list()
        )
        items = items.with_columns(
            pl.Series("similarity", similarity, dtype=pl.Float64).fill_nan(None),
            pl.Series("embedding_error", reasons, dtype=pl.String),
        )
        per_row = items.group_by(ROW_ID).agg(
            pl.struct(pl.col("generated").alias("question"), "similarity")
            .sort_by("pos")
            .alias("questions"),
            pl.col("similarity").mean().alias("mean_similarity"),
            pl.col("embedding_error").drop_nulls().first().alias("embedding_error"),
        )
        return (
            generated.select(ROW_ID, "noncommittal", "error")
            .join(per_row, on=ROW_ID, how="left")
            .with_columns(
                pl.coalesce("error", "embedding_error").alias("error"),
                pl.when(pl.col("noncommittal"))
                .then(0.0)
                .otherwise(pl.col("mean_similarity").clip(0.0, 1.0))
                .alias("score"),
            )
        )

    @staticmethod
    async def _similarities(
        ctx: Context, originals: list[str], generated: list[str]
    ) -> tuple[np.ndarray, list[str | None]]:
        """Row-wise cosine similarity of two aligned text lists, with one embedding call set,
        and for each pair why it has none (an embedding request failed), else None."""
        if not originals:
            return np.zeros(0), []
        texts = list(dict.fromkeys([*originals, *generated]))
        index = {text: i for i, text in enumerate(texts)}
        matrix = await ctx.embed(texts)
        left = matrix[[index[t] for t in originals]]
        right = matrix[[index[t] for t in generated]]
        errors = ctx.embedding_errors(texts)
        reasons = [
            errors[index[a]] or errors[index[b]] for a, b in zip(originals, generated, strict=True)
        ]
        return np.einsum("ij,ij->i", left, right).astype(np.float64), reasons
