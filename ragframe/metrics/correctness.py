"""Answer correctness: factual F1 of the answer's statements against the ground truth's, blended
with the semantic similarity of the two texts (ragas's answer_correctness)."""

from __future__ import annotations

import asyncio
import math
from typing import Any, ClassVar

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import array, boolean, indexed_verdict, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import (
    Context,
    Metric,
    MetricInfo,
    collect_chunk,
    fence,
    fence_items,
    prompt,
)
from ragframe.metrics.sources import RAGAS
from ragframe.metrics.statements import (
    MAX_CLAIMS,
    answer_claims,
    check_max_claims,
    claims_task,
    ground_truth_statements,
    ground_truth_task,
)
from ragframe.metrics.verdicts import matched_items, numbered_items, verdicts_by_index
from ragframe.prompts import load

#: The judge's verdicts, each naming the statement it judges by number (`index`, bounded
#: 1..n per prompt), so they are matched to statements by number, not by where they stand.
A_VERDICT = indexed_verdict(verdict=string(enum=["TP", "FP"]))
G_VERDICT = indexed_verdict(covered=boolean())
CLASSIFY = Task(
    name="answer_correctness.classify",
    system=load("answer_correctness_classify"),
    # Each array pinned per prompt to its number of statements (`counted`).
    schema=obj(answer_statements=array(A_VERDICT), ground_truth_statements=array(G_VERDICT)),
    counted=("answer_statements", "ground_truth_statements"),
    indexed=("answer_statements", "ground_truth_statements"),
    max_tokens=2048,
)

ANSWER_STATEMENT = A_VERDICT.struct("statement", "verdict", "reason", statement=pl.String())
GROUND_TRUTH_STATEMENT = G_VERDICT.struct("statement", "covered", "reason", statement=pl.String())

#: The detail fields the factual half fills (the semantic half fills `similarity`).
_FACTUAL = ("answer_statements", "ground_truth_statements", "tp", "fp", "fn", "f1", "truncated")

NO_TRUTH = "the ground truth makes no factual statement, so nothing supports this claim"
NO_CLAIM = "the answer makes no factual claim, so it covers none of the ground truth"


class AnswerCorrectness(Metric):
    """How correct the answer is against the ground truth, factually and semantically (higher
    is better).

    Formula: (w_f * F1 + w_s * similarity) / (w_f + w_s), weights (0.75, 0.25) by default, with
    F1 = TP / (TP + 0.5 (FP + FN)): TP = answer statements the ground truth supports, FP =
    answer statements it does not, FN = ground-truth statements the answer misses; similarity =
    cosine of the answer's and the ground truth's embeddings, clipped to [0, 1]. Each verdict
    names the statement it judges by number (`index`), so their order does not matter; a
    duplicate or missing number is re-asked once with the reason, then reported.
    Requests per row: 3 chat requests (the answer's statements, shared with faithfulness and
    answer_relevancy_llm; the ground truth's statements; one classification of both), plus
    embeddings batched across rows (each distinct text once). The classification is skipped
    when either side has no statement (the counts follow: all FP or all FN, F1 = 0); with
    w_s = 0 no embeddings are requested, with w_f = 0 no chat request is sent.
    Caps: at most `max_claims` statements (40) on each side, 6 with the embedded judge's
    `output_bounds`; `truncated` is true when either list reached its cap (and may be cut).
    Empty input: a null or empty question, answer or ground_truth gives null with the reason and
    sends nothing; no statement on either side gives null ("no factual statements"), never 1.0.
    Source: ragas AnswerCorrectness (ragas's metrics:
    https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/);
    its three calls are the ones ragas's NVIDIA metrics page counts for it: "two [calls] for
    decomposing the response and reference into standalone statements and one for classifying
    them"
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/).
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
        "truncated": pl.Boolean(),
    }
    info = MetricInfo(
        formula="(w_f * F1 + w_s * cosine(answer, ground_truth)) / (w_f + w_s), "
        "F1 = TP / (TP + 0.5 (FP + FN)); weights (0.75, 0.25)",
        requests_per_row="3 (answer statements, shared; ground-truth statements; "
        "classification) + embeddings (batched across rows)",
        empty_input="null: missing question, answer or ground_truth, or no statements on "
        "either side",
        source=f"ragas AnswerCorrectness ({RAGAS})",
    )

    def __init__(
        self,
        weights: tuple[float, float] = (0.75, 0.25),
        max_claims: int = MAX_CLAIMS,
        *,
        reasons: bool | None = None,
    ) -> None:
        super().__init__(reasons=reasons)
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
        self.max_claims = check_max_claims("answer_correctness", max_claims)
        # Per instance: a weight of zero means that half is never computed nor paid for.
        self.uses_embeddings = w_s > 0  # type: ignore[misc]
        self.uses_llm = w_f > 0  # type: ignore[misc]

    def tasks(self) -> list[Task]:
        if not self.uses_llm:
            return []
        return [claims_task(self.max_claims), ground_truth_task(self.max_claims), CLASSIFY]

    def config(self) -> dict[str, Any]:
        return {"weights": list(self.weights), "max_claims": self.max_claims}

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
        """ROW_ID, the two statement lists with verdicts, tp, fp, fn, f1, truncated, error."""
        stated, truth = await asyncio.gather(
            answer_claims(ctx, rows, self.max_claims),
            ground_truth_statements(ctx, rows, self.max_claims),
        )
        sides = (
            rows.select(ROW_ID, "question")
            .join(
                stated.select(ROW_ID, "claims", "truncated", pl.col("error").alias("answer_error")),
                on=ROW_ID,
                how="left",
            )
            .join(
                truth.select(
                    ROW_ID,
                    "statements",
                    pl.col("truncated").alias("truth_truncated"),
                    pl.col("error").alias("truth_error"),
                ),
                on=ROW_ID,
                how="left",
            )
            .with_columns(
                pl.col("claims").list.len().alias("n_a"),
                pl.col("statements").list.len().alias("n_g"),
                (pl.col("truncated") | pl.col("truth_truncated")).alias("truncated"),
            )
        )
        frame = sides.join(await _classify(sides, ctx), on=ROW_ID, how="left")
        answer_items = _matched(
            frame, "claims", "a_verdicts", "answer_statements", ("verdict", "reason")
        )
        truth_items = _matched(
            frame, "statements", "g_verdicts", "ground_truth_statements", ("covered", "reason")
        )
        return _counted(
            frame.lazy()
            .join(answer_items, on=ROW_ID, how="left")
            .join(truth_items, on=ROW_ID, how="left")
        ).pipe(collect_chunk)


async def _classify(sides: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """ROW_ID, `a_verdicts` and `g_verdicts` (lists of verdicts with their `index`) and
    `classify_error`, for rows whose two sides were extracted.

    A row with statements on both sides is classified by the judge; a row where one side has
    none decides the counts alone (no request, fixed reasons; null ones when the metric asks
    for no reasons, as every reason of such a run is).
    """
    extracted = pl.col("answer_error").is_null() & pl.col("truth_error").is_null()
    one_side_empty = (pl.col("n_a") == 0) | (pl.col("n_g") == 0)
    judged = await _judged(sides.filter(extracted & ~one_side_empty), ctx)
    return pl.concat([judged, _unjudged(sides.filter(extracted & one_side_empty), ctx)])


async def _judged(judgeable: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """`_classify`'s columns for rows with statements on both sides: asked of the judge."""
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
    answer = pl.col("answer").struct
    return judged.select(
        ROW_ID,
        answer.field("answer_statements").cast(pl.List(A_VERDICT.dtype)).alias("a_verdicts"),
        answer.field("ground_truth_statements").cast(pl.List(G_VERDICT.dtype)).alias("g_verdicts"),
        pl.col("error").alias("classify_error"),
    )


def _unjudged(rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
    """`_classify`'s columns for rows with no statement on one side: every claim a false
    positive, every fact uncovered, with fixed reasons (null when no reasons are asked)."""
    no_truth, no_claim = (NO_TRUTH, NO_CLAIM) if ctx.reasons else (None, None)
    claims = _fixed_verdicts("claims", no_truth, pl.lit("FP").alias("verdict"), A_VERDICT.dtype)
    facts = _fixed_verdicts("statements", no_claim, pl.lit(False).alias("covered"), G_VERDICT.dtype)
    return rows.select(
        ROW_ID,
        claims.alias("a_verdicts"),
        facts.alias("g_verdicts"),
        pl.lit(None, dtype=pl.String).alias("classify_error"),
    )


def _fixed_verdicts(items: str, reason: str | None, verdict: pl.Expr, dtype: Any) -> pl.Expr:
    """One verdict per item of the list column `items`: its number, `reason` and `verdict`."""
    number = pl.int_range(1, pl.len() + 1).alias("index")
    return (
        pl.col(items)
        .list.eval(pl.struct(number, pl.lit(reason, dtype=pl.String).alias("reason"), verdict))
        .cast(pl.List(dtype))
    )


def _matched(
    frame: pl.DataFrame, items: str, verdicts: str, name: str, fields: tuple[str, ...]
) -> pl.LazyFrame:
    """ROW_ID and `name`: each item of the `items` list with the fields of the verdict whose
    `index` is its number (1-based), in the items' order."""
    judged = verdicts_by_index(frame.lazy(), pl.col(verdicts))
    return matched_items(
        numbered_items(frame.lazy(), items, "statement"), judged, "statement", fields, name
    )


def _counted(frame: pl.LazyFrame) -> pl.LazyFrame:
    """The factual detail of each row from its matched statements: tp, fp, fn, f1, error."""
    # Both verdict arrays are pinned to their counts and their indices checked (1..n, each
    # once), so the judge has already re-asked any answer that leaves a statement unjudged.
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
        "tp": pl.col("answer_statements").list.eval((verdict == "TP").cast(pl.Int64)).list.sum(),
        "fp": pl.col("answer_statements").list.eval((verdict == "FP").cast(pl.Int64)).list.sum(),
        "fn": pl.col("ground_truth_statements")
        .list.eval((~pl.element().struct.field("covered")).cast(pl.Int64))
        .list.sum(),
    }
    empty_a = pl.lit([], dtype=pl.List(ANSWER_STATEMENT))
    empty_g = pl.lit([], dtype=pl.List(GROUND_TRUTH_STATEMENT))
    return (
        frame.with_columns(
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
    cosine, reasons = await ctx.cosine(
        rows.get_column("answer").to_list(), rows.get_column("ground_truth").to_list()
    )
    return rows.select(ROW_ID).with_columns(
        pl.Series("similarity", cosine, dtype=pl.Float64).fill_nan(None).clip(0.0, 1.0),
        pl.Series("similarity_error", reasons, dtype=pl.String),
    )
