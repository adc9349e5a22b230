"""Pairwise A/B judging: which of two answers to the same question is better, asked in both orders.

A judge asked "which answer is better" compares two systems more directly than two scores
do, but it tends to prefer the answer it reads first (MT-Bench, Zheng et al. 2023: GPT-4 kept
its verdict when the order was swapped in only about two thirds of cases). So every pair is
asked twice, through the shared judge session (dedup, cache, concurrency and retries are the
judge's): `ab` shows answer_a first, `ba` shows answer_b first. Each order's verdict
("first" / "second" / "tie", schema-enforced) is turned back into the answer it names
(`prefers`: "a" / "b" / "tie"), and the two are combined:

- both orders name the same answer (or both say tie): that is the `preference`, and the pair
  is `position_consistent`;
- anything else (each order prefers the answer it read first, or second; or one order prefers
  an answer and the other says tie): the verdict moved with the order, so the `preference` is
  "tie" and `position_consistent` is False. This is the conservative rule (MT-Bench's): a
  preference that one order does not confirm is not counted, not even at half weight, so a
  judge cannot win a comparison on its position bias.

Score: 1.0 when B is preferred, 0.0 when A is, 0.5 for a tie (either kind), so the mean of the
column is B's win rate with ties counted half. Null (with the reason in the detail's `error`)
when an input is missing (no request) or when either order's request failed for good (the
other order's verdict is kept in the detail).

Criteria: one of the catalogue's (`CRITERIA`: faithfulness to the contexts, answer relevancy,
correctness against the ground truth), or the user's own text (G-Eval style) with the inputs
the judge should see (`inputs=`).

Inputs: `answer_a` and `answer_b` (the two answers), and whatever the criteria read
(`question`, `contexts`, `ground_truth`). The two answer columns are not inputs of a
single-answer log (`ragframe.inputs.columns.CANONICAL`), so this metric checks its own inputs
(`Pairwise.run`); `run_pairs` scores a frame of pairs without the engine's column mapping.
`ragframe.decide.pairwise` summarises the verdicts (win rate, consistency, first-position rate).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from ragframe._sync import run_sync
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.columns import ALIASES, CANONICAL, ROW_ID, WHITESPACE, missing_input_reason
from ragframe.judge.results import RunStats
from ragframe.judge.schema import obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import (
    ERROR,
    SCORE,
    USAGE_FIELDS,
    Context,
    Metric,
    MetricInfo,
    clean_contexts,
    collect_chunk,
    escape,
    fence,
    fence_items,
    prompt,
)
from ragframe.prompts import load

__all__ = [
    "CRITERIA",
    "ORDERS",
    "PAIR_COLUMNS",
    "Criterion",
    "Pairwise",
    "arun_pairs",
    "run_pairs",
]

#: The two answers of a pair.
PAIR_COLUMNS = ("answer_a", "answer_b")
#: What a judge may answer in one order: the answer it read first, second, or neither.
VERDICTS = ("first", "second", "tie")
#: The two orders: answer_a shown first (`ab`), answer_b shown first (`ba`).
ORDERS = ("ab", "ba")
#: A final preference: answer_a, answer_b, or neither.
PREFERENCES = ("a", "b", "tie")
#: The inputs criteria may show the judge, in prompt order (the answers always come last).
JUDGEABLE = ("question", "contexts", "ground_truth")

VERDICT = obj(reason=string(), verdict=string(enum=list(VERDICTS)))
#: One order's verdict in the detail: what the judge wrote, which answer that names, and why.
ORDER_VERDICT = pl.Struct({"verdict": pl.String(), "prefers": pl.String(), "reason": pl.String()})
#: Enough for a three-sentence reason and the verdict.
MAX_TOKENS = 512

_DESCRIBE = {
    "question": "<question>: the user's question",
    "contexts": '<context index="n">: the retrieved contexts, numbered from 1',
    "ground_truth": "<ground_truth>: the reference answer, taken as complete and correct",
}


@dataclass(frozen=True)
class Criterion:
    """What "better" means for a pair, and the inputs the judge needs to tell."""

    text: str
    inputs: tuple[str, ...]


#: The catalogue's criteria, by the name of the single-answer metric they mirror.
CRITERIA: dict[str, Criterion] = {
    "faithfulness": Criterion(
        "Faithfulness to the retrieved contexts: the better answer makes only claims that the "
        "contexts state or that follow from them, and contradicts none of them. An answer that "
        "adds claims the contexts do not support is worse, however plausible they sound; do "
        "not reward knowledge from outside the contexts.",
        ("question", "contexts"),
    ),
    "answer_relevancy": Criterion(
        "Relevancy to the question: the better answer addresses what was asked, directly and "
        "completely, without off-topic or redundant content. Do not judge whether its facts "
        "are correct.",
        ("question",),
    ),
    "answer_correctness": Criterion(
        "Correctness against the reference answer: the better answer agrees with the reference "
        "in its facts (terms, numbers, dates, units) and covers more of it; an answer that "
        "contradicts the reference is worse than one that leaves part of it out.",
        ("question", "ground_truth"),
    ),
}
#: Short names accepted for the catalogue's criteria.
CRITERIA_ALIASES = {"relevancy": "answer_relevancy", "correctness": "answer_correctness"}


def _render(template: str, **values: str) -> str:
    """Fill `{name}` placeholders in one pass (inserted text is never re-scanned)."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def _criterion(criteria: str, inputs: Sequence[str] | None) -> tuple[str | None, Criterion]:
    """(catalogue key or None, the criterion): a catalogue name, or the user's own text."""
    if not isinstance(criteria, str) or not criteria.strip():
        raise ConfigError(
            f"Pairwise needs criteria: one of {sorted(CRITERIA)} or your own text, got {criteria!r}"
        )
    key = CRITERIA_ALIASES.get(criteria.strip(), criteria.strip())
    if key in CRITERIA and inputs is None:
        return key, CRITERIA[key]
    if inputs is None:
        inputs = ("question",)
    if isinstance(inputs, str):
        raise ConfigError(
            f"Pairwise: inputs must be a sequence of names, not the string {inputs!r}"
        )
    names = [ALIASES.get(i, i) for i in inputs]
    unknown = [i for i, n in zip(inputs, names, strict=True) if n not in JUDGEABLE]
    if unknown:
        raise ConfigError(
            f"Pairwise: unknown inputs {unknown}; the judge can be shown {', '.join(JUDGEABLE)} "
            "besides the two answers"
        )
    text = CRITERIA[key].text if key in CRITERIA else criteria.strip()
    return (key if key in CRITERIA else None), Criterion(
        text, tuple(n for n in JUDGEABLE if n in names)
    )


def _pair_missing(required: Sequence[str]) -> pl.Expr:
    """Why a pair cannot be judged (null when it can): the first missing input, by the rule of
    `ragframe.inputs.columns.missing_input_reason`, applied to the answer columns too."""
    reason: pl.Expr = pl.lit(None, dtype=pl.String)
    for name in reversed(list(required)):
        if name in CANONICAL:
            why = missing_input_reason([name])
        else:
            col = pl.col(name)
            blank = col.is_null() | (col.str.strip_chars(WHITESPACE).str.len_chars() == 0)
            why = pl.when(blank).then(pl.lit(f"missing input: {name!r} is null or empty"))
        reason = pl.coalesce(why, reason)
    return reason


def _prefers(verdict: pl.Expr, order: str) -> pl.Expr:
    """The answer ("a" / "b" / "tie") that one order's verdict names."""
    first, second = ("a", "b") if order == "ab" else ("b", "a")
    return (
        pl.when(verdict == "first")
        .then(pl.lit(first))
        .when(verdict == "second")
        .then(pl.lit(second))
        .when(verdict == "tie")
        .then(pl.lit("tie"))
    )


class Pairwise(Metric):
    """Which of two answers is better, judged in both orders (1.0: B, 0.0: A, 0.5: tie).

    Formula: per pair, 1.0 when both orders prefer answer_b, 0.0 when both prefer answer_a,
    0.5 otherwise (both say tie, or the verdict moved with the order: module docstring);
    the column's mean is B's win rate with ties counted half.
    Requests per pair: 2 (answer_a first, then answer_b first), whatever the verdicts.
    Empty input: null with the reason, no request (a missing answer_a / answer_b, or an input
    the criteria read).
    Detail: `preference` ("a" / "b" / "tie"), `ab` and `ba` (each order's `verdict` as the
    judge wrote it, the answer it `prefers`, and its `reason`), `position_consistent`.

    `criteria`: a catalogue name (`CRITERIA`: faithfulness, answer_relevancy,
    answer_correctness) or your own text; `inputs`: what the judge sees besides the answers
    (default: the catalogue criterion's, else the question); `name`: the score column
    (default `pairwise_{criterion}`, or `pairwise` for your own text).
    """

    name = "pairwise"
    requires: ClassVar[tuple[str, ...]] = ("question", *PAIR_COLUMNS)
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "preference": pl.String(),
        "ab": ORDER_VERDICT,
        "ba": ORDER_VERDICT,
        "position_consistent": pl.Boolean(),
    }
    info = MetricInfo(
        formula="1 if both orders prefer B, 0 if both prefer A, else 0.5 (tie)",
        requests_per_row="2 (both orders)",
        empty_input="null: a missing answer_a, answer_b or criteria input",
        source="MT-Bench (Zheng et al. 2023), swap-and-tie rule",
    )

    def __init__(
        self,
        criteria: str = "answer_correctness",
        *,
        inputs: Sequence[str] | None = None,
        name: str | None = None,
        reasons: bool | None = None,
    ) -> None:
        super().__init__(reasons=reasons)
        key, criterion = _criterion(criteria, inputs)
        self.criteria = criterion.text
        self.criterion = key
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"Pairwise: name must be a non-empty string, got {name!r}")
        self.name = name or (f"pairwise_{key}" if key else "pairwise")
        self.requires = (*criterion.inputs, *PAIR_COLUMNS)  # type: ignore[misc]
        self.inputs = criterion.inputs

    @property
    def task(self) -> Task:
        """The one task both orders are asked with: the criteria are its instructions."""
        system = _render(
            load("pairwise"),
            criteria=self.criteria,
            inputs="\n".join(f"- {_DESCRIBE[n]}" for n in self.inputs),
        )
        return Task(name="pairwise.verdict", system=system, schema=VERDICT, max_tokens=MAX_TOKENS)

    def tasks(self) -> list[Task]:
        return [self.task]

    def config(self) -> dict[str, Any]:
        return {"criteria": self.criteria, "criterion": self.criterion, "inputs": [*self.inputs]}

    def _prompt(self, first: str, second: str) -> pl.Expr:
        """The user message: the shared inputs first (a common prefix for both orders), then
        the two answers in the order asked, fenced as numbered answers."""
        shared = [
            fence_items("context", pl.col(n)) if n == "contexts" else fence(n, pl.col(n))
            for n in self.inputs
        ]
        answers = [
            pl.concat_str(
                [pl.lit(f'<answer index="{k}">\n'), escape(pl.col(c)), pl.lit("\n</answer>")]
            )
            for k, c in ((1, first), (2, second))
        ]
        return prompt(*shared, *answers)

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        both = pl.concat(
            [
                rows.select(
                    ROW_ID, pl.lit(order).alias("order"), self._prompt(*cols).alias("prompt")
                )
                for order, cols in (("ab", PAIR_COLUMNS), ("ba", PAIR_COLUMNS[::-1]))
            ]
        )
        asked = await ctx.ask(self.task, both)
        verdict = pl.col("answer").struct.field("verdict")
        per_order = {
            order: asked.filter(pl.col("order") == order).select(
                ROW_ID,
                pl.struct(
                    verdict.alias("verdict"),
                    _prefers(verdict, order).alias("prefers"),
                    pl.col("answer").struct.field("reason").alias("reason"),
                ).alias(order),
                pl.col(ERROR).alias(f"{order}_error"),
            )
            for order in ORDERS
        }
        ab, ba = (pl.col(o).struct.field("prefers") for o in ORDERS)
        failed = pl.col("ab_error").is_not_null() | pl.col("ba_error").is_not_null()
        consistent = pl.when(~failed).then(ab == ba)
        preference = pl.when(~failed).then(pl.when(ab == ba).then(ab).otherwise(pl.lit("tie")))
        return (
            rows.select(ROW_ID)
            .join(per_order["ab"], on=ROW_ID, how="left", maintain_order="left")
            .join(per_order["ba"], on=ROW_ID, how="left", maintain_order="left")
            .select(
                ROW_ID,
                *ORDERS,
                consistent.alias("position_consistent"),
                preference.alias("preference"),
                preference.replace_strict(
                    {"a": 0.0, "b": 1.0, "tie": 0.5}, default=None, return_dtype=pl.Float64
                ).alias(SCORE),
                pl.concat_str(
                    [
                        pl.lit("answer_a first: ") + pl.col("ab_error"),
                        pl.lit("answer_b first: ") + pl.col("ba_error"),
                    ],
                    separator="; ",
                    ignore_nulls=True,
                )
                .replace("", None)
                .alias(ERROR),
            )
        )

    async def run(self, inputs: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Score every pair of `inputs`: ROW_ID, `{name}`, `{name}_detail`, in row order.

        `Metric.run`'s contract, with the missing-input rule extended to the answer columns
        (which `ragframe.inputs.columns` does not know); no pass column (a preference has no pass
        threshold).
        """
        absent = [c for c in (ROW_ID, *self.requires) if c not in inputs.columns]
        if absent:
            raise InputError(
                f"{self.name} needs the columns {absent}, and the frame has none of that name "
                f"(its columns: {inputs.columns}); a pair is answer_a and answer_b beside "
                f"{', '.join(self.inputs)}"
            )
        ctx = ctx.view(reasons=self.reasons_asked)
        reasons = inputs.select(ROW_ID, _pair_missing(self.requires).alias("missing"))
        valid = inputs.filter(reasons.get_column("missing").is_null()).select(
            ROW_ID, *self.requires
        )
        if "contexts" in self.requires:
            valid = clean_contexts(valid.with_columns(pl.col("contexts").cast(pl.List(pl.String))))
        if valid.height:
            scored = await self.compute(valid, ctx)
        else:
            scored = pl.DataFrame(schema={ROW_ID: pl.UInt32})
        scored = _typed(scored, {SCORE: pl.Float64(), ERROR: pl.String(), **self.detail_fields})
        out = (
            reasons.lazy()
            .join(scored.lazy(), on=ROW_ID, how="left", maintain_order="left")
            .join(ctx.usage_by_row(), on=ROW_ID, how="left", maintain_order="left")
            .with_columns(pl.coalesce("missing", ERROR).alias(ERROR))
            .with_columns(
                pl.when(pl.col(ERROR).is_null()).then(pl.col(SCORE)).alias(SCORE),
                pl.when(pl.col(ERROR).is_null()).then(pl.col("preference")).alias("preference"),
                *(pl.col(k).fill_null(0) for k in USAGE_FIELDS),
            )
        )
        return out.select(
            ROW_ID,
            pl.col(SCORE).alias(self.name),
            pl.struct(*self.detail_fields, ERROR, *USAGE_FIELDS).alias(f"{self.name}_detail"),
        ).pipe(collect_chunk)


def _typed(scored: pl.DataFrame, fields: dict[str, pl.DataType]) -> pl.DataFrame:
    """`scored` with every one of `fields` in its type (all null where compute gave none)."""
    return scored.with_columns(
        pl.col(f).cast(t) if f in scored.columns else pl.lit(None, dtype=t).alias(f)
        for f, t in fields.items()
    )


async def arun_pairs(
    pairs: pl.DataFrame, metric: Pairwise | str = "answer_correctness", *, judge: Any
) -> tuple[pl.DataFrame, RunStats]:
    """Judge every pair of `pairs` in both orders on `judge` (async): the frame unchanged plus
    `{name}`, `{name}_detail` and `preference`, and the session's `RunStats` (requests sent,
    cache hits, tokens).

    `pairs` holds answer_a, answer_b and the inputs the criteria read; `metric` is a
    `Pairwise`, or criteria for one (a catalogue name or your own text). One judge session for
    the whole frame, so both orders of every pair share its pool, cache and retries.
    """
    metric = metric if isinstance(metric, Pairwise) else Pairwise(metric)
    if metric.reasons is None:  # follow the judge, as a run does (`with_reasons`)
        metric = copy.copy(metric)
        metric.reasons = bool(judge.reasons)
    missing = [c for c in metric.requires if c not in pairs.columns]
    if missing:
        raise InputError(
            f"{metric.name} needs the columns {missing}; the frame has {pairs.columns}. A pair "
            "is answer_a and answer_b beside the inputs its criteria read "
            f"({', '.join(metric.inputs)})"
        )
    inputs = pairs.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias(ROW_ID), *metric.requires)
    session = judge.session()
    session.plan({metric.task.name: 2 * pairs.height})
    async with session:
        scored = await metric.run(inputs, Context(session, {}))
    detail = f"{metric.name}_detail"
    out = pairs.hstack(scored.drop(ROW_ID).get_columns()).with_columns(
        pl.col(detail).struct.field("preference").alias("preference")
    )
    return out, session.stats


async def aestimate_pairs(
    pairs: pl.DataFrame, metric: Pairwise | str = "answer_correctness", *, judge: Any
) -> dict[str, int]:
    """What judging `pairs` in both orders would send, without sending anything (a dry run:
    the counts `JudgeSession.estimate` keeps; cached answers are free and not counted)."""
    metric = metric if isinstance(metric, Pairwise) else Pairwise(metric)
    inputs = pairs.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias(ROW_ID), *metric.requires)
    session = judge.session(backend="dry")
    await metric.run(inputs, Context(session, {}))
    return dict(session.estimate)


def run_pairs(
    pairs: pl.DataFrame, metric: Pairwise | str = "answer_correctness", *, judge: Any
) -> tuple[pl.DataFrame, RunStats]:
    """`arun_pairs` from sync code (also inside a running loop, on a worker thread)."""
    return run_sync(arun_pairs(pairs, metric, judge=judge))  # type: ignore[no-any-return]
