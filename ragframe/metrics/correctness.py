"""Answer correctness: factual F1 of the answer's statements against the ground truth's, blended
with the semantic similarity of the two texts (ragas's answer_correctness)."""

from __future__ import annotations

import asyncio
import math
from typing import Any, ClassVar

import numpy as np
import polars as pl

from ragframe.columns import ROW_ID
from ragframe.errors import ConfigError
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence, fence_items, prompt
from ragframe.metrics.statements import CLAIMS, MAX_CLAIMS, answer_claims, explode_items
from ragframe.prompts import load

GROUND_TRUTH_STATEMENTS = Task(
    name="ground_truth.statements",
    system=load("ground_truth_statements"),
    schema={
        "type": "object",
        "properties": {
            "statements": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_CLAIMS}
        },
        "required": ["statements"],
    },
    max_tokens=1024,
)


async def ground_truth_statements(ctx: Context, rows: pl.DataFrame) -> pl.DataFrame:
    """ROW_ID, `statements` (List(String), blank ones dropped), `error`, usage columns.

    The ground-truth twin of `answer_claims`: one request per row, the same prompt for every
    metric that asks, so the judge sends it once per run.
    """
    asked = await ctx.ask(
        GROUND_TRUTH_STATEMENTS,
        rows.select(
            ROW_ID,
            prompt(
                fence("question", pl.col("question")), fence("ground_truth", pl.col("ground_truth"))
            ).alias("prompt"),
        ),
    )
    return asked.select(
        ROW_ID,
        pl.col("answer")
        .struct.field("statements")
        .list.eval(pl.element().str.strip_chars())
        .list.eval(pl.element().filter(pl.element().str.len_chars() > 0))
        .alias("statements"),
        "error",
    )


CLASSIFY = Task(
    name="answer_correctness.classify",
    system=load("answer_correctness_classify"),
    schema={
        "type": "object",
        "properties": {
            # Pinned per prompt to the number of answer statements (`counted`).
            "answer_statements": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "reason": {"type": "string"},
                        "verdict": {"type": "string", "enum": ["TP", "FP"]},
                    },
                    "required": ["reason", "verdict"],
                },
            },
            # Pinned per prompt to the number of ground-truth statements (`counted`).
            "ground_truth_statements": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"reason": {"type": "string"}, "covered": {"type": "boolean"}},
                    "required": ["reason", "covered"],
                },
            },
        },
        "required": ["answer_statements", "ground_truth_statements"],
    },
    counted=("answer_statements", "ground_truth_statements"),
    max_tokens=2048,
)

ANSWER_STATEMENT = pl.Struct(
    {"statement": pl.String(), "verdict": pl.String(), "reason": pl.String()}
)
GROUND_TRUTH_STATEMENT = pl.Struct(
    {"statement": pl.String(), "covered": pl.Boolean(), "reason": pl.String()}
)
#: The judge's verdict items, as `CLASSIFY.dtype` types them.
_A_VERDICT = pl.Struct({"reason": pl.String(), "verdict": pl.String()})
_G_VERDICT = pl.Struct({"reason": pl.String(), "covered": pl.Boolean()})

#: The detail fields the factual half fills (the semantic half fills `similarity`).
_FACTUAL = ("answer_statements", "ground_truth_statements", "tp", "fp", "fn", "f1")

NO_TRUTH = "the ground truth makes no factual statement, so nothing supports this claim"
NO_CLAIM = "the answer makes no factual claim, so it covers none of the ground truth"


class AnswerCorrectness(Metric):
    """How correct the answer is against the ground truth, factually and semantically (higher
    is better).

    Formula: (w_f * F1 + w_s * similarity) / (w_f + w_s), weights (0.75, 0.25) by default, with
    F1 = TP / (TP + 0.5 (FP + FN)): TP = answer statements the ground truth supports, FP =
    answer statements it does not, FN = ground-truth statements the answer misses; similarity =
    cosine of the answer's and the ground truth's embeddings, clipped to [0, 1].
    Requests per row: 3 chat requests (the answer's statements, shared with faithfulness and
    answer_relevancy_llm; the ground truth's statements; one classification of both), plus
    embeddings batched across rows (each distinct text once). The classification is skipped
    when either side has no statement (the counts follow: all FP or all FN, F1 = 0); with
    w_s = 0 no embeddings are requested, with w_f = 0 no chat request is sent.
    Empty input: a null or empty question, answer or ground_truth gives null with the reason and
    sends nothing; no statement on either side gives null ("no factual statements"), never 1.0.
    Source: ragas answer_correctness (named in seed 004: "two [calls] for decomposing the
    response and reference into standalone statements and one for classifying them").
    """

    name = "answer_correctness"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer", "ground_truth")
    uses_embeddings = True
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "answer_statements": pl.List(ANSWER_STATEMENT),
        "ground_truth_statements": pl.List(GROUND_TRUTH_STATEMENT),
        "tp": pl.Int64(),
        "fp": pl.Int64(),
        "fn": pl.Int64(),
        "f1": pl.Float64(),
        "similarity": pl.Float64(),
    }
    info = MetricInfo(
        formula="(w_f * F1 + w_s * cosine(answer, ground_truth)) / (w_f + w_s), "
        "F1 = TP / (TP + 0.5 (FP + FN)); weights (0.75, 0.25)",
        requests_per_row="3 (answer statements, shared; ground-truth statements; "
        "classification) + embeddings (batched across rows)",
        empty_input="null: missing question, answer or ground_truth, or no statements on "
        "either side",
        source="ragas answer_correctness (004)",
    )

    def __init__(self, weights: tuple[float, float] = (0.75, 0.25)) -> None:
        try:
            w_f, w_s = (float(w) for w in weights)
        except (TypeError, ValueError):
            raise ConfigError(
                f"answer_correctness weights must be two numbers (factual, semantic), "
                f"got {weights!r}"
            ) from None
        if not all(math.isfinite(w) and w >= 0 for w in (w_f, w_s)) or w_f + w_s == 0:
            raise ConfigError(
                "answer_correctness weights must be finite, non-negative and not both zero, "
                f"got {weights!r}"
            )
        self.weights = (w_f, w_s)
        # Per instance: a weight of zero means that half is never computed nor paid for.
        self.uses_embeddings = w_s > 0  # type: ignore[misc]
        self.uses_llm = w_f > 0  # type: ignore[misc]

    def tasks(self) -> list[Task]:
        return [CLAIMS, GROUND_TRUTH_STATEMENTS, CLASSIFY] if self.uses_llm else []

    def config(self) -> dict[str, Any]:
        return {"weights": list(self.weights)}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        w_f, w_s = self.weights
        factual, similarity = await asyncio.gather(
            self._factual(rows, ctx) if w_f > 0 else _nothing(),
            _similarity(rows, ctx) if w_s > 0 else _nothing(),
        )
        out = rows.select(ROW_ID)
        if factual is not None:
            out = out.join(factual, on=ROW_ID, how="left")
        else:
            out = out.with_columns(
                pl.lit(None, dtype=pl.Float64).alias("f1"),
                pl.lit(None, dtype=pl.String).alias("error"),
            )
        if similarity is not None:
            out = out.join(similarity, on=ROW_ID, how="left").with_columns(
                pl.coalesce("error", "similarity_error").alias("error")
            )
        else:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias("similarity"))
        f1 = pl.col("f1") if w_f > 0 else pl.lit(0.0)
        sim = pl.col("similarity") if w_s > 0 else pl.lit(0.0)
        return out.with_columns(((w_f * f1 + w_s * sim) / (w_f + w_s)).alias("score"))

    async def _factual(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """ROW_ID, the two statement lists with verdicts, tp, fp, fn, f1 and error."""
        stated, truth = await asyncio.gather(
            answer_claims(ctx, rows), ground_truth_statements(ctx, rows)
        )
        sides = (
            rows.select(ROW_ID, "question")
            .join(
                stated.select(ROW_ID, "claims", pl.col("error").alias("answer_error")),
                on=ROW_ID,
                how="left",
            )
            .join(
                truth.select(ROW_ID, "statements", pl.col("error").alias("truth_error")),
                on=ROW_ID,
                how="left",
            )
            .with_columns(
                pl.col("claims").list.len().alias("n_a"),
                pl.col("statements").list.len().alias("n_g"),
            )
        )
        extracted = pl.col("answer_error").is_null() & pl.col("truth_error").is_null()
        judgeable = sides.filter(extracted & (pl.col("n_a") > 0) & (pl.col("n_g") > 0))
        judged = await ctx.ask(
            CLASSIFY,
            judgeable.select(
                ROW_ID,
                prompt(
                    fence("question", pl.col("question")),
                    pl.format(
                        "The ground truth has {} facts and the answer {} claims.",
                        pl.col("n_g"),
                        pl.col("n_a"),
                    ),
                    fence_items("fact", pl.col("statements")),
                    fence_items("claim", pl.col("claims")),
                ).alias("prompt"),
                "n_a",
                "n_g",
            ),
            count_col=("n_a", "n_g"),
        )
        verdicts = judged.select(
            ROW_ID,
            pl.col("answer").struct.field("answer_statements").alias("a_verdicts"),
            pl.col("answer").struct.field("ground_truth_statements").alias("g_verdicts"),
            pl.col("error").alias("classify_error"),
        )
        # A side without statements decides the counts alone: no request, fixed reasons.
        unjudged = extracted & ((pl.col("n_a") == 0) | (pl.col("n_g") == 0))
        frame = sides.join(verdicts, on=ROW_ID, how="left").with_columns(
            pl.when(unjudged)
            .then(
                pl.col("claims").list.eval(
                    pl.struct(pl.lit(NO_TRUTH).alias("reason"), pl.lit("FP").alias("verdict"))
                )
            )
            .otherwise(pl.col("a_verdicts"))
            .cast(pl.List(_A_VERDICT))
            .alias("a_verdicts"),
            pl.when(unjudged)
            .then(
                pl.col("statements").list.eval(
                    pl.struct(pl.lit(NO_CLAIM).alias("reason"), pl.lit(False).alias("covered"))
                )
            )
            .otherwise(pl.col("g_verdicts"))
            .cast(pl.List(_G_VERDICT))
            .alias("g_verdicts"),
        )
        answer_items = (
            explode_items(frame, "claims", "statement")
            .join(frame.select(ROW_ID, "a_verdicts"), on=ROW_ID, how="left")
            .with_columns(pl.col("a_verdicts").list.get(pl.col("pos"), null_on_oob=True).alias("v"))
            .group_by(ROW_ID)
            .agg(
                pl.struct(
                    "statement",
                    pl.col("v").struct.field("verdict"),
                    pl.col("v").struct.field("reason"),
                )
                .sort_by("pos")
                .alias("answer_statements")
            )
        )
        truth_items = (
            explode_items(frame, "statements", "statement")
            .join(frame.select(ROW_ID, "g_verdicts"), on=ROW_ID, how="left")
            .with_columns(pl.col("g_verdicts").list.get(pl.col("pos"), null_on_oob=True).alias("v"))
            .group_by(ROW_ID)
            .agg(
                pl.struct(
                    "statement",
                    pl.col("v").struct.field("covered"),
                    pl.col("v").struct.field("reason"),
                )
                .sort_by("pos")
                .alias("ground_truth_statements")
            )
        )
        # Both verdict arrays are pinned to their counts in the classify schema, so the judge
        # has already rejected (and re-asked) any answer with a wrong number of verdicts.
        error = pl.coalesce(
            "answer_error",
            "truth_error",
            "classify_error",
            pl.when((pl.col("n_a") == 0) & (pl.col("n_g") == 0)).then(
                pl.lit("no factual statements found in the answer or the ground truth")
            ),
        )
        verdict = pl.element().struct.field("verdict")
        counts = {
            "tp": pl.col("answer_statements")
            .list.eval((verdict == "TP").cast(pl.Int64))
            .list.sum(),
            "fp": pl.col("answer_statements")
            .list.eval((verdict == "FP").cast(pl.Int64))
            .list.sum(),
            "fn": pl.col("ground_truth_statements")
            .list.eval((~pl.element().struct.field("covered")).cast(pl.Int64))
            .list.sum(),
        }
        empty_a = pl.lit([], dtype=pl.List(ANSWER_STATEMENT))
        empty_g = pl.lit([], dtype=pl.List(GROUND_TRUTH_STATEMENT))
        return (
            frame.join(answer_items, on=ROW_ID, how="left")
            .join(truth_items, on=ROW_ID, how="left")
            .with_columns(
                # Extracted but empty lists explode to nothing: give them back as [].
                pl.when(pl.col("claims").is_not_null())
                .then(pl.col("answer_statements").fill_null(empty_a))
                .alias("answer_statements"),
                pl.when(pl.col("statements").is_not_null())
                .then(pl.col("ground_truth_statements").fill_null(empty_g))
                .alias("ground_truth_statements"),
                error.alias("error"),
            )
            .with_columns(
                pl.when(pl.col("error").is_null()).then(expr).alias(name)
                for name, expr in counts.items()
            )
            .with_columns(
                (pl.col("tp") / (pl.col("tp") + 0.5 * (pl.col("fp") + pl.col("fn")))).alias("f1")
            )
            .select(ROW_ID, *_FACTUAL, "error")
        )


async def _nothing() -> None:
    return None


async def _similarity(rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """ROW_ID, `similarity`: cosine of answer and ground truth, clipped to [0, 1], and
    `similarity_error`: why there is none (an embedding request failed for good).

    One embedding call set for the whole column; each distinct text is embedded once.
    """
    answers = rows.get_column("answer").to_list()
    truths = rows.get_column("ground_truth").to_list()
    texts = list(dict.fromkeys([*answers, *truths]))
    index = {text: i for i, text in enumerate(texts)}
    matrix = await ctx.embed(texts)
    cosine = np.einsum(
        "ij,ij->i", matrix[[index[t] for t in answers]], matrix[[index[t] for t in truths]]
    ).astype(np.float64)
    errors = ctx.embedding_errors(texts)
    reasons = [errors[index[a]] or errors[index[t]] for a, t in zip(answers, truths, strict=True)]
    return rows.select(ROW_ID).with_columns(
        pl.Series("similarity", cosine, dtype=pl.Float64).fill_nan(None).clip(0.0, 1.0),
        pl.Series("similarity_error", reasons, dtype=pl.String),
    )
