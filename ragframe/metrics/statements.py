"""Stages that several metrics share: the statements of an answer (its claims) and of a ground
truth, extracted by one function, `extract_statements`.

Sharing works at the judge: every metric that needs the claims of an answer builds the very same
prompt through `answer_claims`, and the judge sends each distinct prompt once per run, so
faithfulness, answer_relevancy_llm and answer_correctness together pay for one extraction
(metrics with different `max_claims` ask different questions, so each pays its own).

Caps: the schema lets the judge list at most `max_claims` claims (40 by default; a
grammar-constrained server stops there, any other server's longer list is re-asked once, then
reported), and a judge with `output_bounds` (the embedded judge: 6 items per open list) cuts
the list the server sees further. A list that reaches the effective cap may have been cut, so
the stage says so in `truncated`, and the metrics put it in their details.
"""

from __future__ import annotations

from functools import cache

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import array, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, fence, prompt
from ragframe.prompts import load

MAX_CLAIMS = 40


def statements_task(name: str, prompt_name: str, key: str, max_items: int) -> Task:
    """A task whose answer is `{key: [statement, ...]}`, at most `max_items` of them."""
    return Task(
        name=name,
        system=load(prompt_name),
        schema=obj(**{key: array(string(), max_items=max_items)}),
        # A statement is a short sentence (about 25 tokens): a cap above the default gets room.
        max_tokens=1024 if max_items <= MAX_CLAIMS else 32 * max_items,
    )


@cache
def claims_task(max_claims: int = MAX_CLAIMS) -> Task:
    """The claims-extraction task with its list capped at `max_claims` (one Task per cap, so
    metrics with the same cap send the same prompt and share the answer)."""
    return statements_task("answer.claims", "faithfulness_claims", "claims", max_claims)


@cache
def ground_truth_task(max_statements: int = MAX_CLAIMS) -> Task:
    """The ground-truth twin of `claims_task`: at most `max_statements` statements."""
    return statements_task(
        "ground_truth.statements", "ground_truth_statements", "statements", max_statements
    )


CLAIMS = claims_task()
GROUND_TRUTH_STATEMENTS = ground_truth_task()


def check_max_claims(metric: str, max_claims: int) -> int:
    """`max_claims` as given, or a ConfigError naming the metric."""
    if isinstance(max_claims, bool) or not isinstance(max_claims, int) or max_claims < 1:
        raise ConfigError(f"{metric} max_claims must be a positive integer, got {max_claims!r}")
    return max_claims


def effective_cap(ctx: Context, max_items: int) -> int:
    """The most items a judge can return in an open list whose schema allows `max_items`:
    the judge's `output_bounds` (embedded judge: 6) cut it further."""
    bounds = ctx.session.judge.output_bounds
    return min(max_items, bounds[0]) if bounds is not None else max_items


def listed(answer_list: pl.Expr, cap: int) -> tuple[pl.Expr, pl.Expr]:
    """The judge's list with items stripped and blank ones dropped, and whether the list
    reached `cap` (so it may have been cut: `truncated`)."""
    items = answer_list.list.eval(pl.element().str.strip_chars()).list.eval(
        pl.element().filter(pl.element().str.len_chars() > 0)
    )
    return items, answer_list.list.len() >= cap


async def extract_statements(
    ctx: Context, rows: pl.DataFrame, task: Task, column: str, key: str, max_items: int
) -> pl.DataFrame:
    """ROW_ID, `key` (List(String), blank statements dropped), `truncated` (the judge's list
    reached the effective cap), `error`: the statements of `column`, one request per row
    with the question beside it (the same prompt for every metric that asks)."""
    asked = await ctx.ask(
        task,
        rows.select(
            ROW_ID,
            prompt(fence("question", pl.col("question")), fence(column, pl.col(column))).alias(
                "prompt"
            ),
        ),
    )
    items, truncated = listed(pl.col("answer").struct.field(key), effective_cap(ctx, max_items))
    return asked.select(ROW_ID, items.alias(key), truncated.alias("truncated"), "error")


async def answer_claims(
    ctx: Context, rows: pl.DataFrame, max_claims: int = MAX_CLAIMS
) -> pl.DataFrame:
    """ROW_ID, `claims` (List(String), blank claims dropped), `truncated`, `error`."""
    return await extract_statements(
        ctx, rows, claims_task(max_claims), "answer", "claims", max_claims
    )


async def ground_truth_statements(
    ctx: Context, rows: pl.DataFrame, max_statements: int = MAX_CLAIMS
) -> pl.DataFrame:
    """ROW_ID, `statements` (List(String), blank ones dropped), `truncated`, `error`: the
    ground-truth twin of `answer_claims`."""
    return await extract_statements(
        ctx, rows, ground_truth_task(max_statements), "ground_truth", "statements", max_statements
    )
