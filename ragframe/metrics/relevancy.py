"""deepeval's statement-counting metrics: contextual relevancy, LLM answer relevancy and
hallucination (deepeval's documentation: https://deepeval.com/docs/metrics-introduction).

Each sends one request per row where deepeval sends one per context or per stage: every
context (or statement) of a row is judged at once, with the array's length pinned by the schema
and each verdict naming the `index` of the item it judges (checked to be exactly 1..n and
re-asked once when not), so verdicts are matched to items by index, never by position.
"""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl

from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import array, boolean, indexed_verdict, integer, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import ERROR, Context, Metric, MetricInfo, fence, fence_items, prompt
from ragframe.metrics.sources import DEEPEVAL
from ragframe.metrics.statements import (
    MAX_CLAIMS,
    answer_claims,
    check_max_claims,
    claims_task,
    effective_cap,
)
from ragframe.metrics.verdicts import (
    ask_about_contexts,
    judged_contexts,
    matched_items,
    numbered_items,
    per_context,
    verdict_task,
    verdicts_by_index,
)
from ragframe.prompts import load

# ------------------------------------------------------------------------ contextual relevancy

#: A context split into statements, each judged; the context named by number (`index`).
STATEMENT_VERDICT = obj(statement=string(), reason=string(), relevant=boolean())
CONTEXT_VERDICT = obj(index=integer(), statements=array(STATEMENT_VERDICT))
RELEVANCY = Task(
    name="contextual_relevancy.statements",
    system=load("contextual_relevancy"),
    schema=obj(contexts=array(CONTEXT_VERDICT)),
    counted="contexts",
    indexed=("contexts",),
    max_tokens=4096,
)

#: No schema cap on a context's statements: only a judge's `output_bounds` cut them.
UNCAPPED = 1 << 30

STATEMENT = STATEMENT_VERDICT.struct("statement", "relevant", "reason")
CONTEXT_STATEMENTS = pl.Struct({"context_index": pl.Int32(), "statements": pl.List(STATEMENT)})


class ContextualRelevancy(Metric):
    """Share of the contexts' statements that are relevant to the question (higher is better).

    Formula: relevant statements / statements, counted over all contexts of the row (deepeval's
    ContextualRelevancyMetric). The judge splits each context into statements and judges each.
    Requests per row: 1 (every context split and judged in one request, the number of contexts
    pinned by the schema; deepeval sends one per context plus one for its reason).
    Empty input: a null or empty question or contexts gives null with the reason and sends
    nothing; blank contexts are dropped before judging (neither judged nor counted); contexts
    with no statement at all give null ("no statements"), never 0/0.
    Detail: `contexts`, one entry per judged context; `context_index` is the 1-based position
    of that context in the input list (blanks included). `truncated` is true when some
    context's statement list reached a judge's `output_bounds` (the embedded judge: 6), so it
    may have been cut; the schema itself sets no cap.
    Source: deepeval ContextualRelevancyMetric
    (https://deepeval.com/docs/metrics-contextual-relevancy). A worked example (9/11 = 0.8182) is
    pinned in the tests.
    """

    name = "contextual_relevancy"
    requires: ClassVar[tuple[str, ...]] = ("question", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "contexts": pl.List(CONTEXT_STATEMENTS),
        "truncated": pl.Boolean(),
    }
    info = MetricInfo(
        formula="relevant statements / statements, over all contexts",
        requests_per_row="1",
        empty_input="null: missing question or contexts, or no statements in the contexts",
        source=f"deepeval ContextualRelevancyMetric ({DEEPEVAL}contextual-relevancy)",
    )

    def tasks(self) -> list[Task]:
        return [RELEVANCY]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        judged = await ask_about_contexts(
            ctx,
            RELEVANCY,
            rows,
            prompt(
                fence("question", pl.col("question")), fence_items("context", pl.col("contexts"))
            ),
        )
        statements = pl.col("verdict").struct.field("statements")
        contexts = pl.col("answer").struct.field("contexts")
        per_context = judged_contexts(judged.lazy(), contexts).with_columns(
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
            (pl.col("statements").list.len().max() >= effective_cap(ctx, UNCAPPED)).alias(
                "truncated"
            ),
        )
        return (
            judged.lazy()
            .select(ROW_ID, "error")
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
            .select(
                ROW_ID,
                "contexts",
                "truncated",
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

#: The judge's verdict on one statement of the answer, which it names by number (`index`).
RELEVANT = indexed_verdict(verdict=string(enum=["yes", "no", "idk"]))
VERDICTS = verdict_task(
    "answer_relevancy_llm.verdicts", load("answer_relevancy_llm"), RELEVANT, max_tokens=2048
)

ANSWER_STATEMENT = RELEVANT.struct("statement", "verdict", "reason", statement=pl.String())


class AnswerRelevancyLLM(Metric):
    """Share of the answer's statements that are relevant to the question (higher is better).

    Formula: relevant statements / statements, where a statement is relevant unless its verdict
    is "no": "idk" (ambiguous, supporting information) counts as relevant, as deepeval's
    AnswerRelevancyMetric counts it. Every verdict is kept in the detail, so a stricter
    yes-only share can be recomputed from it.
    Requests per row: 1 to extract the statements (the claims stage shared with faithfulness
    and answer_correctness: one extraction per row between them) + 1 judging every statement
    (their number pinned by the schema; deepeval sends 3).
    Each verdict carries the `index` of the statement it judges and is matched to it by that
    index (checked 1..n, re-asked once when wrong).
    Empty input: a null or empty question or answer gives null with the reason and sends
    nothing; an answer with no statement gives null ("no statements"), never deepeval's 1.0.
    Note: the shared stage extracts factual claims, so greetings and hedges are not judged.
    `truncated` (from the shared stage) is true when the statement list reached its cap
    (`max_claims`, default 40, or a judge's `output_bounds`), so later statements may not have
    been judged; metrics with the same `max_claims` share one extraction per row.
    Source: deepeval AnswerRelevancyMetric (https://deepeval.com/docs/metrics-answer-relevancy). A
    worked example (2/2 = 1.0) is pinned in the tests.
    """

    name = "answer_relevancy_llm"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "statements": pl.List(ANSWER_STATEMENT),
        "truncated": pl.Boolean(),
    }
    info = MetricInfo(
        formula='statements with verdict != "no" / statements ("idk" counts as relevant)',
        requests_per_row="1 (shared claims extraction) + 1",
        empty_input="null: missing question or answer, or no statements in the answer",
        source=f"deepeval AnswerRelevancyMetric ({DEEPEVAL}answer-relevancy)",
    )

    def __init__(self, max_claims: int = MAX_CLAIMS, *, reasons: bool | None = None) -> None:
        super().__init__(reasons=reasons)
        self.max_claims = check_max_claims(self.name, max_claims)

    def tasks(self) -> list[Task]:
        return [claims_task(self.max_claims), VERDICTS]

    def config(self) -> dict[str, Any]:
        return {"max_claims": self.max_claims}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        stated = await answer_claims(ctx, rows, self.max_claims)
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
        # Each verdict names the statement it judges (`index`, 1-based): matched by it.
        verdicts = verdicts_by_index(
            judged.lazy().filter(pl.col(ERROR).is_null()),
            pl.col("answer").struct.field("verdicts"),
        )
        statements = numbered_items(ok.lazy(), "claims", "statement")
        relevant = (pl.element().struct.field("verdict") != "no").cast(pl.Float64)
        per_row = matched_items(
            statements, verdicts, "statement", ("verdict", "reason"), "statements", how="inner"
        ).with_columns(pl.col("statements").list.eval(relevant).list.mean().alias("score"))
        return (
            stated.lazy()
            .select(ROW_ID, pl.col("error").alias("extract_error"), "truncated")
            .join(
                judged.lazy().select(ROW_ID, "error"), on=ROW_ID, how="left", maintain_order="left"
            )
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
            .select(
                ROW_ID,
                "score",
                "statements",
                "truncated",
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

#: The judge's verdict on one context, which it names by number (`index`).
CONTRADICTED = indexed_verdict(contradicted=boolean())
HALLUCINATION = verdict_task(
    "hallucination.contexts", load("hallucination"), CONTRADICTED, max_tokens=1536
)

CONTRADICTION = CONTRADICTED.struct(
    "context_index", "contradicted", "reason", context_index=pl.Int32()
)


class Hallucination(Metric):
    """Share of the contexts that the answer contradicts (LOWER is better).

    Formula: contradicted contexts / contexts (deepeval's HallucinationMetric). Only a direct
    conflict counts: an answer that adds to or leaves out what a context says does not
    contradict it.
    Requests per row: 1 (every context judged in one request, their number pinned by the
    schema).
    Empty input: a null or empty answer or contexts gives null with the reason and sends
    nothing; blank contexts are dropped before judging (neither judged nor counted).
    Detail: `contexts`, one verdict per judged context; `context_index` is the 1-based position
    of that context in the input list (blanks included), matched by the verdict's `index`.
    Inputs: answer and contexts. deepeval judges against `context` (ground-truth passages);
    to do so here, map that column: columns={"contexts": "context"}.
    Source: deepeval HallucinationMetric (https://deepeval.com/docs/metrics-hallucination), as it
    scored before deepeval 4, whose score is 1 minus this one (agreeing contexts, higher is
    better). A worked example (0/2 = 0.0) is pinned in the tests.
    """

    name = "hallucination"
    requires: ClassVar[tuple[str, ...]] = ("answer", "contexts")
    direction = "lower"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"contexts": pl.List(CONTRADICTION)}
    info = MetricInfo(
        formula="contradicted contexts / contexts (lower is better)",
        requests_per_row="1",
        empty_input="null: missing answer or contexts",
        source=f"deepeval HallucinationMetric ({DEEPEVAL}hallucination), before deepeval 4 "
        "(deepeval 4 scores 1 minus this)",
    )

    def tasks(self) -> list[Task]:
        return [HALLUCINATION]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        judged = await ask_about_contexts(
            ctx,
            HALLUCINATION,
            rows,
            # Contexts first: the part a row may share with other requests.
            prompt(fence_items("context", pl.col("contexts")), fence("answer", pl.col("answer"))),
        )
        contradicted = pl.element().struct.field("contradicted").cast(pl.Float64)
        per_row = per_context(judged.lazy(), ("contradicted", "reason"), "contexts").with_columns(
            pl.col("contexts").list.eval(contradicted).list.mean().alias("score")
        )
        return (
            judged.lazy()
            .select(ROW_ID, "error")
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
        )
