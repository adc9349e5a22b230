"""Retriever metrics judged by an LLM: context precision (with and without reference) and
context recall."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl

from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import (
    Spec,
    array,
    boolean,
    indexed_verdict,
    integer,
    nullable,
    obj,
    string,
)
from ragframe.judge.task import Task
from ragframe.metrics.base import (
    CONTEXT_POSITIONS,
    ERROR,
    Context,
    Metric,
    MetricInfo,
    average_precision,
    fence,
    fence_items,
    prompt,
)
from ragframe.metrics.sources import DEEPEVAL, LLM4S, RAGAS
from ragframe.metrics.statements import effective_cap
from ragframe.metrics.verdicts import (
    ask_about_contexts,
    numbered_items,
    per_context,
    verdict_task,
)
from ragframe.prompts import load

#: The judge's verdict on one context, which it names by number (`index`).
RELEVANT = indexed_verdict(relevant=boolean())
PRECISION_REFERENCE = verdict_task(
    "context_precision.reference",
    load("context_precision_reference"),
    RELEVANT,
    max_tokens=1536,
)
PRECISION_ANSWER = verdict_task(
    "context_precision.answer", load("context_precision_answer"), RELEVANT, max_tokens=1536
)

VERDICT = RELEVANT.struct("context_index", "relevant", "reason", context_index=pl.Int32())


class ContextPrecision(Metric):
    """Are the contexts useful for reaching `ground_truth` ranked first? (higher is better)

    Formula: average precision of the per-context `relevant` flags in rank order,
    AP = sum_k (precision@k * r_k) / (relevant contexts); 0.0 when no context is relevant.
    Each verdict carries the `index` of the context it judges (checked 1..n, re-asked once
    when wrong), so the order the judge writes them in does not matter.
    Requests per row: 1 (every context of the row judged in one request; ragas sends one per
    context).
    Empty input: null question, ground_truth or contexts gives null with the reason. Blank
    contexts are dropped before judging (not ranked, not counted); all blank is missing input.
    Detail: `verdicts`, one per judged context in rank order; `context_index` is the 1-based
    position of that context in the input list (blanks included).
    Source: ragas LLMContextPrecisionWithReference
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/),
    deepeval ContextualPrecisionMetric (https://deepeval.com/docs/metrics-contextual-precision),
    llm4s ContextPrecision (https://github.com/llm4s/llm4s). A worked example (0.5833) is
    pinned in the tests.
    """

    name = "context_precision"
    requires: ClassVar[tuple[str, ...]] = ("question", "ground_truth", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"verdicts": pl.List(VERDICT)}
    info = MetricInfo(
        formula="average precision of relevant flags (judged against ground_truth)",
        requests_per_row="1",
        empty_input="null: missing question, ground_truth or contexts",
        source=f"ragas LLMContextPrecisionWithReference ({RAGAS}context_precision/); deepeval "
        f"ContextualPrecisionMetric ({DEEPEVAL}contextual-precision); llm4s ContextPrecision "
        f"({LLM4S})",
    )
    _task: ClassVar[Task] = PRECISION_REFERENCE
    _target: ClassVar[tuple[str, str]] = ("ground_truth", "reference")

    def tasks(self) -> list[Task]:
        return [self._task]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        column, tag = self._target
        judged = await ask_about_contexts(
            ctx,
            self._task,
            rows,
            prompt(
                fence("question", pl.col("question")),
                fence(tag, pl.col(column)),
                fence_items("context", pl.col("contexts")),
            ),
        )
        per_row = per_context(judged.lazy(), ("relevant", "reason"), "verdicts")
        flags = pl.col("verdicts").list.eval(pl.element().struct.field("relevant"))
        return (
            judged.lazy()
            .select(ROW_ID, ERROR)
            .join(
                per_row.with_columns(average_precision(flags).alias("score")),
                on=ROW_ID,
                how="left",
                maintain_order="left",
            )
        )


class ContextPrecisionWithoutReference(ContextPrecision):
    """Context precision judged against the `answer` instead of a reference (higher is better).

    Formula, requests per row and edge cases as context_precision; needs question, answer and
    contexts. Source: ragas LLMContextPrecisionWithoutReference
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/).
    """

    name = "context_precision_without_reference"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer", "contexts")
    info = MetricInfo(
        formula="average precision of relevant flags (judged against the answer)",
        requests_per_row="1",
        empty_input="null: missing question, answer or contexts",
        source=f"ragas LLMContextPrecisionWithoutReference ({RAGAS}context_precision/)",
    )
    _task = PRECISION_ANSWER
    _target = ("answer", "answer")


#: The most facts one ground truth is broken into (the schema's maxItems); a row whose
#: list reaches it says so in its detail (`truncated`).
MAX_FACTS = 40


def recall_consistency(value: dict[str, Any]) -> str | None:
    """The first few facts whose `covered` and `source_context` disagree, as one clause.

    A covered fact names the context that supports it; a fact not covered names none. An
    answer that breaks this is re-asked once with this reason, then reported: never read
    as covered without a source, nor stripped of a source it was given.
    """
    problems = [
        f"$.facts[{number}]: covered is true but source_context is null (name the context "
        "that supports it, or set covered to false)"
        if fact.get("covered")
        else f"$.facts[{number}]: covered is false but source_context is "
        f"{fact.get('source_context')} (a fact that is not covered has source_context null)"
        for number, fact in enumerate(value.get("facts") or [])
        if bool(fact.get("covered")) != (fact.get("source_context") is not None)
    ]
    return "; ".join(problems[:3]) or None


def capped(spec: Spec, max_items: int) -> Spec:
    """An array `spec` of at most `max_items`, its `maxItems` written right after its type
    (where this schema has always had it: a schema's bytes go into cache keys)."""
    return Spec({"type": spec.schema["type"], "maxItems": max_items, **spec.schema}, spec.dtype)


#: One fact of the ground truth: whether the contexts cover it, and which one (its number).
FACT_VERDICT = obj(
    fact=string(), reason=string(), covered=boolean(), source_context=nullable(integer())
)
RECALL = Task(
    name="context_recall.attribute",
    system=load("context_recall"),
    schema=obj(facts=capped(array(FACT_VERDICT), MAX_FACTS)),
    indexes=("facts.items.source_context",),
    check=recall_consistency,
    max_tokens=2048,
)

FACT = FACT_VERDICT.struct("fact", "covered", "source_context", "reason", source_context=pl.Int32())


class ContextRecall(Metric):
    """Share of the facts of `ground_truth` that the contexts contain (higher is better).

    Formula: covered facts / facts. Each covered fact is attributed to the context that
    supports it (`source_context`); a fact not covered has none. A number outside
    1..contexts fails validation, and a verdict whose `covered` and `source_context` disagree
    fails `recall_consistency`: either is re-asked once with the reason, then is the row's
    error.
    Requests per row: 1 (facts extracted and attributed together; llm4s FactAttribution).
    Empty input: null question, ground_truth or contexts gives null with the reason; a
    ground truth with no facts gives null ("no facts"), never 1.0. Blank contexts are dropped
    before judging; all blank is missing input.
    Detail: `facts`; `source_context` is the 1-based position of the supporting context in
    the input list (blanks included), null when not covered. `truncated` is true when the
    judge's list reached its cap, MAX_FACTS (40, the schema's maxItems) or a judge's
    `output_bounds` (the embedded judge: 6): later facts may not have been judged.
    Source: ragas LLMContextRecall
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/),
    deepeval ContextualRecallMetric (https://deepeval.com/docs/metrics-contextual-recall),
    llm4s ContextRecall / FactAttribution (https://github.com/llm4s/llm4s). A worked example
    (0.5) is pinned in the tests.
    """

    name = "context_recall"
    requires: ClassVar[tuple[str, ...]] = ("question", "ground_truth", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "facts": pl.List(FACT),
        "truncated": pl.Boolean(),
    }
    info = MetricInfo(
        formula="covered facts of ground_truth / facts",
        requests_per_row="1",
        empty_input="null: missing input, or no facts in ground_truth",
        source=f"ragas LLMContextRecall ({RAGAS}context_recall/); deepeval "
        f"ContextualRecallMetric ({DEEPEVAL}contextual-recall); llm4s ContextRecall ({LLM4S})",
    )

    def tasks(self) -> list[Task]:
        return [RECALL]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        judged = await ask_about_contexts(
            ctx,
            RECALL,
            rows,
            prompt(
                fence("question", pl.col("question")),
                fence_items("context", pl.col("contexts")),
                fence("ground_truth", pl.col("ground_truth")),
            ),
        )
        ok = judged.lazy().filter(pl.col(ERROR).is_null())
        fact = pl.col("fact")
        per_fact = numbered_items(
            ok.with_columns(pl.col("answer").struct.field("facts")), "facts", "fact"
        ).join(judged.lazy().select(ROW_ID, CONTEXT_POSITIONS), on=ROW_ID)
        per_row = per_fact.group_by(ROW_ID).agg(
            pl.struct(
                fact.struct.field("fact"),
                fact.struct.field("covered"),
                # The kept context's number in the prompt, mapped to its input position.
                pl.col(CONTEXT_POSITIONS)
                .list.get(fact.struct.field("source_context") - 1, null_on_oob=True)
                .alias("source_context"),
                fact.struct.field("reason"),
            )
            .sort_by("pos")
            .alias("facts")
        )
        answered = pl.col(ERROR).is_null()
        cap = effective_cap(ctx, MAX_FACTS)
        return (
            judged.lazy()
            .select(ROW_ID, ERROR)
            .join(per_row, on=ROW_ID, how="left", maintain_order="left")
            .with_columns(
                pl.when(answered).then(pl.col("facts").fill_null([])).alias("facts"),
            )
            .with_columns(
                pl.col("facts")
                .list.eval(pl.element().struct.field("covered").cast(pl.Float64))
                .list.mean()
                .alias("score"),
                pl.when(answered).then(pl.col("facts").list.len() >= cap).alias("truncated"),
                pl.coalesce(
                    ERROR,
                    pl.when(pl.col("facts").list.len() == 0).then(
                        pl.lit("no facts found in ground_truth")
                    ),
                ).alias(ERROR),
            )
        )
