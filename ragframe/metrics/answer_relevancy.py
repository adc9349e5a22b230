"""Answer relevancy, similarity-based: do questions generated from the answer match the question?"""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import array, boolean, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, collect_chunk, fence, prompt
from ragframe.metrics.sources import LLM4S, RAGAS, RAGAS_PAPER
from ragframe.metrics.verdicts import numbered_items
from ragframe.prompts import load

QUESTIONS = Task(
    name="answer_relevancy.questions",
    system=load("answer_relevancy_questions"),
    schema=obj(questions=array(string()), noncommittal=boolean()),
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
    Empty input: a null or empty question or answer gives null with the reason and sends
    nothing; a question whose embedding failed gives null with the embedding's error, never NaN.
    Questions are pinned to n_questions by the schema (a wrong count is re-asked, then reported).
    Source: ragas Response Relevancy
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/answer_relevance/)
    and the RAGAS paper (Es et al. 2023, https://arxiv.org/abs/2309.15217); llm4s
    AnswerRelevancy (https://github.com/llm4s/llm4s). A worked example (0.92) is pinned in the
    tests.
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
        source=f"ragas Response Relevancy ({RAGAS}answer_relevance/); Es et al. 2023 "
        f"({RAGAS_PAPER}); llm4s AnswerRelevancy ({LLM4S})",
    )

    def __init__(self, n_questions: int = 3, *, reasons: bool | None = None) -> None:
        super().__init__(reasons=reasons)  # accepted for a uniform API: no reason is asked
        if n_questions < 1:
            raise ConfigError(f"answer_relevancy n_questions must be at least 1, got {n_questions}")
        self.n_questions = n_questions

    def tasks(self) -> list[Task]:
        return [QUESTIONS]

    def config(self) -> dict[str, Any]:
        return {"n_questions": self.n_questions}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
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
        # One query (the generated questions beside the asked one) before the embeddings;
        # what follows them is one plan, folded into `Metric.run`'s.
        generated = (
            asked.lazy()
            .select(
                ROW_ID,
                pl.col("answer").struct.field("questions").alias("questions"),
                pl.col("answer").struct.field("noncommittal").alias("noncommittal"),
                "error",
            )
            .join(
                rows.lazy().select(ROW_ID, "question"), on=ROW_ID, how="left", maintain_order="left"
            )
        )
        items = (
            numbered_items(generated.filter(pl.col("error").is_null()), "questions", "generated")
            .join(
                generated.select(ROW_ID, "question"), on=ROW_ID, how="left", maintain_order="left"
            )
            .pipe(collect_chunk)
        )
        similarity, reasons = await ctx.cosine(
            items.get_column("question").to_list(), items.get_column("generated").to_list()
        )
        per_row = (
            items.hstack(
                [
                    pl.Series("similarity", similarity, dtype=pl.Float64),
                    pl.Series("embedding_error", reasons, dtype=pl.String),
                ]
            )
            .lazy()
            .with_columns(pl.col("similarity").fill_nan(None))
            .group_by(ROW_ID)
            .agg(
                pl.struct(pl.col("generated").alias("question"), "similarity")
                .sort_by("pos")
                .alias("questions"),
                pl.col("similarity").mean().alias("mean_similarity"),
                pl.col("embedding_error").drop_nulls().first().alias("embedding_error"),
            )
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
