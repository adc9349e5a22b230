"""NVIDIA's dual-judge metrics: answer accuracy, context relevance, response groundedness.

Each asks two differently worded judge templates for a bare rating (no reason: a few output
tokens, which is why these metrics suit small judges), scales each rating into [0, 1] and
averages the valid ones. A rating that fails (a request error, or a number off the scale) drops
out of the average instead of failing the row, as NVIDIA's metrics do ("if only one is valid,
that score is used", https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/);
never silently: the detail's `partial` then names the failed template and its reason.
Only when both fail is the row null.

The templates rate the contexts (or the answer) as a whole, not item by item, so their answers
carry no per-item `index`. Blank contexts are dropped before the prompt is built (base.py's
rule), also for the verbatim shortcuts.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import polars as pl

from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import integer, obj
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence, fence_items, prompt
from ragframe.metrics.sources import RAGAS
from ragframe.prompts import load

#: Enough for `{"rating": 4}` with some whitespace; the templates ask for the rating only.
RATING_MAX_TOKENS = 32


def rating_info(
    scale: tuple[int, ...], *, requests_per_row: str, empty_input: str, source: str
) -> MetricInfo:
    """The catalog entry of a dual judge whose ratings lie on `scale`."""
    *low, high = (str(point) for point in scale)
    return MetricInfo(
        formula=f"mean of valid ratings / {max(scale)} over two templates "
        f"({', '.join(low)} or {high} each)",
        requests_per_row=requests_per_row,
        empty_input=empty_input,
        source=source,
    )


def rating_task(name: str, prompt_name: str, scale: tuple[int, ...]) -> Task:
    """A judge task whose answer is `{"rating": one of scale}`, nothing else."""
    return Task(
        name=name,
        system=load(prompt_name),
        schema=obj(rating=integer(enum=list(scale))),
        max_tokens=RATING_MAX_TOKENS,
    )


class DualJudge(Metric):
    """Shared machinery: two rating templates per row, each rating / top of scale, averaged.

    Subclasses set `scale`, `templates` (name and Task of each judge) and `prompts`.
    """

    scale: ClassVar[tuple[int, ...]]
    #: What `shortcut()` detects, for the detail's `shortcut` field.
    shortcut_reason: ClassVar[str] = ""
    templates: ClassVar[tuple[tuple[str, Task], tuple[str, Task]]]
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "rating_1": pl.Int64(),
        "rating_2": pl.Int64(),
        "template_1": pl.String(),
        "template_2": pl.String(),
        # Why a template's rating is missing (its request failed or it was off the scale);
        # null when that template rated. The row's `error` is set only when both failed.
        "template_1_error": pl.String(),
        "template_2_error": pl.String(),
        # Set when the row was decided without asking (ragas's verbatim-text shortcuts).
        "shortcut": pl.String(),
        # Set when the score rests on one template alone: which one failed, and why.
        "partial": pl.String(),
    }

    def prompts(self) -> tuple[pl.Expr, pl.Expr]:
        """The user message of template 1 and of template 2, as String expressions."""
        raise NotImplementedError

    def shortcut(self) -> tuple[pl.Expr, float] | None:
        """A condition under which the row is scored without a request, and that score."""
        return None

    def tasks(self) -> list[Task]:
        return [task for _, task in self.templates]

    def config(self) -> dict[str, Any]:
        return {"templates": [name for name, _ in self.templates], "scale": list(self.scale)}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        decided = self._decided(rows)
        todo = rows.filter(decided.get_column("shortcut").is_null())
        first, second = self.prompts()
        (name_1, task_1), (name_2, task_2) = self.templates
        judged_1, judged_2 = await asyncio.gather(
            self._rate(ctx, task_1, todo.select(ROW_ID, first.alias("prompt"))),
            self._rate(ctx, task_2, todo.select(ROW_ID, second.alias("prompt"))),
        )
        top = float(max(self.scale))
        valid = pl.concat_list(
            (pl.col("rating_1") / top), (pl.col("rating_2") / top)
        ).list.drop_nulls()
        return (
            decided.join(
                judged_1.rename({"rating": "rating_1", "why": "template_1_error"}),
                on=ROW_ID,
                how="left",
                maintain_order="left",
            )
            .join(
                judged_2.rename({"rating": "rating_2", "why": "template_2_error"}),
                on=ROW_ID,
                how="left",
                maintain_order="left",
            )
            .select(
                ROW_ID,
                "rating_1",
                "rating_2",
                pl.lit(name_1).alias("template_1"),
                pl.lit(name_2).alias("template_2"),
                "template_1_error",
                "template_2_error",
                "shortcut",
                self._partial(),
                pl.coalesce("shortcut_score", valid.list.mean()).alias("score"),
                pl.when(pl.col("shortcut").is_null() & valid.list.len().eq(0))
                .then(
                    pl.concat_str(
                        pl.lit(f"both ratings failed: {name_1}: "),
                        pl.col("template_1_error"),
                        pl.lit(f"; {name_2}: "),
                        pl.col("template_2_error"),
                    )
                )
                .alias("error"),
            )
        )

    def _decided(self, rows: pl.DataFrame) -> pl.DataFrame:
        """ROW_ID, `shortcut` (why the row was decided without a request) and `shortcut_score`,
        both null for a row to be asked."""
        rule = self.shortcut()
        if rule is None:
            return rows.select(ROW_ID).with_columns(
                pl.lit(None, dtype=pl.String).alias("shortcut"),
                pl.lit(None, dtype=pl.Float64).alias("shortcut_score"),
            )
        condition, score = rule
        why = f"decided without a request: {self.shortcut_reason}"
        return rows.select(
            ROW_ID,
            pl.when(condition).then(pl.lit(why)).alias("shortcut"),
            pl.when(condition).then(pl.lit(score, dtype=pl.Float64)).alias("shortcut_score"),
        )

    def _partial(self) -> pl.Expr:
        """`partial`: when exactly one template rated, the other's name and failure reason."""
        (name_1, _), (name_2, _) = self.templates

        def failed(name: str, error: str, other: str) -> pl.Expr:
            return pl.concat_str(
                pl.lit(f"template {name} failed ("),
                pl.col(error),
                pl.lit(f"); scored from template {other} alone"),
            )

        rated_1, rated_2 = pl.col("rating_1").is_not_null(), pl.col("rating_2").is_not_null()
        return (
            pl.when(rated_1 & ~rated_2)
            .then(failed(name_2, "template_2_error", name_1))
            .when(rated_2 & ~rated_1)
            .then(failed(name_1, "template_1_error", name_2))
            .alias("partial")
        )

    async def _rate(self, ctx: Context, task: Task, frame: pl.DataFrame) -> pl.DataFrame:
        """ROW_ID, `rating` (Int64, null unless on the scale) and `why` (null when rated).

        The schema's enum already makes the judge re-ask for an off-scale number; the check is
        repeated here so that no rating outside the scale can ever reach a score.
        """
        if frame.height == 0:
            return pl.DataFrame(schema={ROW_ID: pl.UInt32, "rating": pl.Int64, "why": pl.String})
        asked = await ctx.ask(task, frame)
        rating = pl.col("answer").struct.field("rating")
        on_scale = rating.is_in(list(self.scale))
        return asked.select(
            ROW_ID,
            pl.when(pl.col("error").is_null() & on_scale).then(rating).alias("rating"),
            pl.coalesce(
                "error",
                pl.when(~on_scale.fill_null(False)).then(
                    pl.concat_str(
                        pl.lit("rating "),
                        rating.cast(pl.String).fill_null("null"),
                        pl.lit(f" is not one of {list(self.scale)}"),
                    )
                ),
            ).alias("why"),
        )


ACCURACY_SCALE = (0, 2, 4)
ACCURACY_1 = rating_task("answer_accuracy.answer_vs_reference", "answer_accuracy_1", ACCURACY_SCALE)
ACCURACY_2 = rating_task("answer_accuracy.reference_vs_answer", "answer_accuracy_2", ACCURACY_SCALE)


class AnswerAccuracy(DualJudge):
    """Does the answer agree with the ground truth? NVIDIA's dual judge (higher is better).

    Formula: mean over the valid ratings of rating / 4, each rating 0, 2 or 4; template 1 grades
    the answer against the ground truth, template 2 the same question with the two swapped
    (the ground truth graded against the answer), so a partial answer and an over-long one are
    both caught. One valid rating alone gives the score, with `partial` naming the failed
    template and its reason (NVIDIA averages only valid ratings); none gives null with both
    reasons.
    Requests per row: 2 (one per template; both columns go out concurrently).
    Empty input: a null or empty question, answer or ground_truth gives null with the reason
    and sends nothing.
    Ratings are read as numbers ("4.0" is 4), unlike ragas's substring scan of the reply.
    Source: NVIDIA AnswerAccuracy, as ragas documents it (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/).
    """

    name = "answer_accuracy"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer", "ground_truth")
    scale = ACCURACY_SCALE
    templates = (("answer_vs_reference", ACCURACY_1), ("reference_vs_answer", ACCURACY_2))
    info = rating_info(
        ACCURACY_SCALE,
        requests_per_row="2",
        empty_input="null: missing question, answer or ground_truth; null if both ratings fail",
        source=f"NVIDIA AnswerAccuracy via ragas ({RAGAS}nvidia_metrics/)",
    )

    def prompts(self) -> tuple[pl.Expr, pl.Expr]:
        question = fence("question", pl.col("question"))
        return (
            prompt(
                question,
                fence("response", pl.col("answer")),
                fence("reference", pl.col("ground_truth")),
            ),
            prompt(
                question,
                fence("response", pl.col("ground_truth")),
                fence("reference", pl.col("answer")),
            ),
        )


RELEVANCE_SCALE = (0, 1, 2)
RELEVANCE_1 = rating_task("context_relevance.direct", "context_relevance_1", RELEVANCE_SCALE)
RELEVANCE_2 = rating_task("context_relevance.rephrased", "context_relevance_2", RELEVANCE_SCALE)


def joined_contexts() -> pl.Expr:
    """The contexts as ragas compares them with other text: joined by newlines, stripped."""
    return pl.col("contexts").list.join("\n").str.strip_chars()


class _VerbatimShortcut(DualJudge):
    """A dual judge whose two templates see the same user message, with ragas's verbatim-text
    shortcut: a row where `verbatim()` holds scores `shortcut_score` without a request
    (`shortcuts=False` always asks)."""

    shortcut_score: ClassVar[float]

    def __init__(self, shortcuts: bool = True, *, reasons: bool | None = None) -> None:
        super().__init__(reasons=reasons)  # accepted for a uniform API: ratings have no reason
        self.shortcuts = shortcuts

    def config(self) -> dict[str, Any]:
        return {**super().config(), "shortcuts": self.shortcuts}

    def verbatim(self) -> pl.Expr:
        """True where the row is decided without asking."""
        raise NotImplementedError

    def user_prompt(self) -> pl.Expr:
        """The user message of both templates."""
        raise NotImplementedError

    def shortcut(self) -> tuple[pl.Expr, float] | None:
        return (self.verbatim(), self.shortcut_score) if self.shortcuts else None

    def prompts(self) -> tuple[pl.Expr, pl.Expr]:
        both = self.user_prompt()
        return both, both


class ContextRelevance(_VerbatimShortcut):
    """Do the retrieved contexts hold what the question needs? NVIDIA's dual judge (higher is
    better).

    Formula: mean over the valid ratings of rating / 2, each rating 0, 1 or 2 for all the
    contexts of the row together, from two differently worded templates. One valid rating alone
    gives the score, with `partial` naming the failed template and its reason (NVIDIA averages
    only valid ratings); none gives null with both reasons.
    Requests per row: 2; 0 when the contexts, joined, appear verbatim in the question (ragas
    scores that 0.0 without asking: the retriever only echoed the question; `shortcuts=False`
    always asks).
    Empty input: a null or empty question or contexts gives null with the reason (ragas: 0.0);
    blank contexts are dropped before judging, all blank is missing input.
    Source: NVIDIA ContextRelevance, as ragas documents it
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/);
    ragas's first implementation sent template 1 twice, here each template is asked once.
    """

    name = "context_relevance"
    requires: ClassVar[tuple[str, ...]] = ("question", "contexts")
    scale = RELEVANCE_SCALE
    templates = (("direct", RELEVANCE_1), ("rephrased", RELEVANCE_2))
    shortcut_reason = "the contexts appear verbatim in the question"
    shortcut_score = 0.0
    info = rating_info(
        RELEVANCE_SCALE,
        requests_per_row="2 (0 when the contexts only repeat the question)",
        empty_input="null: missing question or contexts; null if both ratings fail",
        source=f"NVIDIA ContextRelevance via ragas ({RAGAS}nvidia_metrics/)",
    )

    def verbatim(self) -> pl.Expr:
        return pl.col("question").str.strip_chars().str.contains(joined_contexts(), literal=True)

    def user_prompt(self) -> pl.Expr:
        return prompt(
            fence("question", pl.col("question")), fence_items("context", pl.col("contexts"))
        )


GROUNDEDNESS_SCALE = (0, 1, 2)
GROUNDEDNESS_1 = rating_task(
    "response_groundedness.direct", "response_groundedness_1", GROUNDEDNESS_SCALE
)
GROUNDEDNESS_2 = rating_task(
    "response_groundedness.rephrased", "response_groundedness_2", GROUNDEDNESS_SCALE
)


class ResponseGroundedness(_VerbatimShortcut):
    """Is the answer supported by the retrieved contexts? NVIDIA's dual judge (higher is
    better).

    Formula: mean over the valid ratings of rating / 2, each rating 0, 1 or 2 for the whole
    answer against all the contexts of the row, from two differently worded templates. One
    valid rating alone gives the score, with `partial` naming the failed template and its
    reason (NVIDIA averages only valid ratings); none gives null with both reasons.
    Requests per row: 2; 0 when the answer appears verbatim in the joined contexts (ragas
    scores that 1.0 without asking; `shortcuts=False` always asks).
    Empty input: a null or empty answer or contexts gives null with the reason (ragas: 0.0);
    blank contexts are dropped before judging, all blank is missing input.
    Source: NVIDIA ResponseGroundedness, as ragas documents it
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/).
    """

    name = "response_groundedness"
    requires: ClassVar[tuple[str, ...]] = ("answer", "contexts")
    scale = GROUNDEDNESS_SCALE
    templates = (("direct", GROUNDEDNESS_1), ("rephrased", GROUNDEDNESS_2))
    shortcut_reason = "the answer appears verbatim in the contexts"
    shortcut_score = 1.0
    info = rating_info(
        GROUNDEDNESS_SCALE,
        requests_per_row="2 (0 when the answer is quoted verbatim from the contexts)",
        empty_input="null: missing answer or contexts; null if both ratings fail",
        source=f"NVIDIA ResponseGroundedness via ragas ({RAGAS}nvidia_metrics/)",
    )

    def verbatim(self) -> pl.Expr:
        return joined_contexts().str.contains(pl.col("answer").str.strip_chars(), literal=True)

    def user_prompt(self) -> pl.Expr:
        return prompt(fence_items("context", pl.col("contexts")), fence("answer", pl.col("answer")))
