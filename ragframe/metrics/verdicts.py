"""One verdict per prompt item: the task that asks for them, and matching them to their items.

A metric that judges the items of a row (its claims, its contexts) numbers them in the prompt
(`fence_items`), and the judge returns one verdict per item, each naming the item it judges by
`index` (bounded 1..n by the schema, checked to be exactly 1..n by `Task.finish`). Verdicts are
matched to items by that number here, never by where they stand in the answer:

- `verdict_task` asks for `{"verdicts": [{"index", "reason", ...}]}`, pinned to n;
- `ask_about_contexts` sends one prompt per row about all its contexts, `per_context` turns the
  answers into one detail entry per context (with its input position, `context_index`);
- `numbered_items`, `verdicts_by_index` and `matched_items` do the same for any other list of
  items (claims, statements), several requests per row included (`keys`, `on`).

Every helper but the one that asks returns the kind of frame it is given: given LazyFrames,
a metric chains them into one plan and collects once (or hands the plan back to
`Metric.run`, which folds it into the output's), instead of one Polars query per step; given
a DataFrame, the helper collects its own plan (one query), as a metric written before may
expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

import polars as pl

from ragframe.inputs.columns import ROW_ID
from ragframe.judge.schema import Spec, array, obj
from ragframe.judge.task import Task
from ragframe.metrics.base import CONTEXT_POSITIONS, ERROR, Context, collect_chunk

#: A DataFrame or a LazyFrame: each helper returns the kind it is given.
F = TypeVar("F", pl.DataFrame, pl.LazyFrame)


def _like(given: F, plan: pl.LazyFrame) -> F:
    """`plan` as the kind of frame `given` is: collected for a DataFrame, else lazy."""
    return collect_chunk(plan) if isinstance(given, pl.DataFrame) else plan


def verdict_task(name: str, system: str, verdict: Spec, *, max_tokens: int) -> Task:
    """A task that returns `{"verdicts": [verdict, ...]}`, one `verdict` (an
    `indexed_verdict`) per numbered item of its prompt; the count goes with each prompt
    (`Context.ask(count_col=...)`)."""
    return Task(
        name=name,
        system=system,
        schema=obj(verdicts=array(verdict)),
        counted="verdicts",
        indexed=("verdicts",),
        max_tokens=max_tokens,
    )


# ------------------------------------------------------------------------------ contexts


async def ask_about_contexts(
    ctx: Context, task: Task, rows: pl.DataFrame, user_prompt: pl.Expr
) -> pl.DataFrame:
    """One request per row about all its contexts, their number `n` pinning the answer's
    counted array; the answers keep CONTEXT_POSITIONS to name contexts by input position."""
    return await ctx.ask(
        task,
        rows.select(
            ROW_ID,
            CONTEXT_POSITIONS,
            user_prompt.alias("prompt"),
            pl.col("contexts").list.len().alias("n"),
        ),
        count_col="n",
    )


def judged_contexts(judged: F, verdicts: pl.Expr) -> F:
    """One row per verdict of the rows that got an answer: ROW_ID, `verdict` (the judge's
    item) and `context_index`, the input position of the context its `index` names.

    `judged` holds ROW_ID, `error` and CONTEXT_POSITIONS. Verdicts are matched to contexts by
    their `index` (checked to be exactly 1..n by `Task.finish`), never by where they stand.
    """
    plan = verdicts_by_index(
        judged.lazy().filter(pl.col(ERROR).is_null()), verdicts, keys=(ROW_ID, CONTEXT_POSITIONS)
    ).select(
        ROW_ID,
        "verdict",
        pl.col(CONTEXT_POSITIONS)
        .list.get(pl.col("index") - 1, null_on_oob=True)
        .alias("context_index"),
    )
    return _like(judged, plan)


def per_context(judged: F, fields: Sequence[str], into: str) -> F:
    """ROW_ID and `into`: for each judged context, in input order, its `context_index` and the
    `fields` of its verdict (the answer's `verdicts`)."""
    verdicts = judged_contexts(judged.lazy(), pl.col("answer").struct.field("verdicts"))
    plan = verdicts.group_by(ROW_ID).agg(
        pl.struct("context_index", *verdict_fields(fields)).sort_by("context_index").alias(into)
    )
    return _like(judged, plan)


# --------------------------------------------------------------------------------- items


def numbered_items(frame: F, items: str, item_name: str) -> F:
    """One row per list item, with its 0-based position `pos` in the list and its number
    `index` (pos + 1) in a prompt that numbers the whole list."""
    plan = (
        frame.lazy()
        .select(
            ROW_ID,
            pl.col(items).alias(item_name),
            pl.int_ranges(pl.col(items).list.len()).alias("pos"),
        )
        .explode([item_name, "pos"])
        .drop_nulls("pos")
        .with_columns((pl.col("pos") + 1).alias("index"))
    )
    return _like(frame, plan)


def verdicts_by_index(frame: F, verdicts: pl.Expr, *, keys: Sequence[str] = (ROW_ID,)) -> F:
    """One row per verdict in the list column `verdicts`: `keys`, `index` (the number of the
    item it judges) and `verdict`; prompts without an answer give none."""
    plan = (
        frame.lazy()
        .select(*keys, verdicts.alias("verdict"))
        .explode("verdict")
        .drop_nulls("verdict")
        .with_columns(pl.col("verdict").struct.field("index").alias("index"))
    )
    return _like(frame, plan)


def verdict_fields(fields: Sequence[str]) -> list[pl.Expr]:
    """The named fields of the `verdict` column, as columns of the same names."""
    return [pl.col("verdict").struct.field(f) for f in fields]


def matched_items(
    items: F,
    verdicts: pl.DataFrame | pl.LazyFrame,
    item: str,
    fields: Sequence[str],
    into: str,
    *,
    on: Sequence[str] = (ROW_ID,),
    how: Literal["left", "inner"] = "left",
) -> F:
    """ROW_ID and `into`: each item (`item`, `pos` and `index`, as `numbered_items` gives
    them) with the `fields` of the verdict that names it (same
    `on` keys and `index`), in the items' order. `how="inner"` leaves out unjudged items."""
    keys = [*on, "index"]
    plan = (
        items.lazy()
        .join(verdicts.lazy().select(*keys, "verdict"), on=keys, how=how)
        .group_by(ROW_ID)
        .agg(pl.struct(item, *verdict_fields(fields)).sort_by("pos").alias(into))
    )
    return _like(items, plan)
