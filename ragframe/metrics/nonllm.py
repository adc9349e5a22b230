"""Retriever metrics that need no LLM: string similarity and ID overlap, plus the ragas score.

They never call the judge, so they cost nothing but CPU and give the same result every run.
The text metrics compare every retrieved context with every reference context of a row by
normalised Levenshtein similarity (rapidfuzz), all pairs of the whole frame in one call; the ID
metrics are set overlaps in Polars.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import polars as pl
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID
from ragframe.metrics.base import (
    CONTEXT_POSITIONS,
    USAGE_FIELDS,
    Context,
    Metric,
    MetricInfo,
    average_precision,
)
from ragframe.metrics.sources import RAGAS

#: Inputs of the two text metrics; equal on purpose, so both see the same valid rows and can
#: share one table of similarities per run.
TEXT_INPUTS = ("contexts", "reference_contexts")
#: Inputs of the two ID metrics.
ID_INPUTS = ("retrieved_context_ids", "reference_context_ids")


def _indexed(rows: pl.DataFrame, column: str, item: str, index: str) -> pl.DataFrame:
    """One row per list item: ROW_ID, the item, its 1-based position in the list."""
    return rows.select(
        ROW_ID,
        pl.col(column).alias(item),
        pl.int_ranges(1, pl.col(column).list.len() + 1, dtype=pl.Int32).alias(index),
    ).explode([item, index])


async def similarity_pairs(rows: pl.DataFrame) -> pl.DataFrame:
    """Every (retrieved context, reference context) pair of each row, with its similarity.

    Columns: ROW_ID, `context_index`, `reference_index` (1-based input positions),
    `similarity` (Float64, rapidfuzz `Levenshtein.normalized_similarity` = 1 - distance /
    max(len), as ragas's NonLLMStringSimilarity), and zero usage columns (no tokens are spent).
    Blank or null items are left out on both sides: `rows` comes with blank contexts already
    dropped (base.py's rule for every metric) and CONTEXT_POSITIONS giving their input
    positions; blank reference items are dropped here.
    """
    retrieved = rows.select(
        ROW_ID,
        pl.col("contexts").alias("context"),
        pl.col(CONTEXT_POSITIONS).alias("context_index"),
    ).explode(["context", "context_index"])
    reference = _indexed(rows, "reference_contexts", "reference", "reference_index").filter(
        pl.col("reference").str.strip_chars().str.len_chars() > 0
    )
    pairs = retrieved.join(reference, on=ROW_ID, how="inner", maintain_order="left_right")
    # All pairs of the frame in one vectorised call, off the event loop (rapidfuzz releases
    # the GIL), so the judge's requests for other metrics keep flowing meanwhile.
    scores = await asyncio.to_thread(
        process.cpdist,
        pairs.get_column("context").to_list(),
        pairs.get_column("reference").to_list(),
        scorer=Levenshtein.normalized_similarity,
        dtype=np.float64,
        workers=-1,
    )
    return pairs.select(ROW_ID, "context_index", "reference_index").with_columns(
        pl.Series("similarity", scores, dtype=pl.Float64),
        *(pl.lit(0, dtype=dtype).alias(name) for name, dtype in USAGE_FIELDS.items()),
    )


def _check_similarity(threshold: float) -> float:
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"similarity_threshold must lie in [0, 1], got {threshold}")
    return float(threshold)


CONTEXT_MATCH = pl.Struct(
    {
        "context_index": pl.Int32(),
        "best_similarity": pl.Float64(),
        "best_reference_index": pl.Int32(),
        "relevant": pl.Boolean(),
    }
)
REFERENCE_MATCH = pl.Struct(
    {
        "reference_index": pl.Int32(),
        "best_similarity": pl.Float64(),
        "best_context_index": pl.Int32(),
        "matched": pl.Boolean(),
    }
)


def _no_llm_info(formula: str, inputs: tuple[str, ...], source: str) -> MetricInfo:
    """The catalog entry of a metric that sends nothing and needs both of its `inputs`."""
    return MetricInfo(
        formula=formula,
        requests_per_row="0",
        empty_input=f"null: missing {' or '.join(inputs)}",
        source=source,
    )


class _TextOverlap(Metric):
    """Shared computation of the two text metrics: each item of `side` (named by its index
    column) gets its best match among the items of `other` and `flag` (that match reaches the
    similarity threshold), listed in the detail `into`; `score` turns the flags into the row's
    score. ragas calls the similarity threshold `threshold`; here `threshold` is the pass
    threshold every metric takes (`ragframe.metrics.thresholds`), so this one is
    `similarity_threshold`."""

    requires: ClassVar[tuple[str, ...]] = TEXT_INPUTS
    uses_llm: ClassVar[bool] = False
    side: ClassVar[str]
    other: ClassVar[str]
    flag: ClassVar[str]
    into: ClassVar[str]

    def __init__(self, similarity_threshold: float = 0.5) -> None:
        self.similarity_threshold = _check_similarity(similarity_threshold)

    def config(self) -> dict[str, Any]:
        return {
            "similarity_threshold": self.similarity_threshold,
            "similarity": "levenshtein normalized_similarity",
        }

    def score(self, flags: pl.Expr) -> pl.Expr:
        """The row's score from its List(Boolean) of flags, in `side`'s order."""
        raise NotImplementedError

    async def pairs(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        return await ctx.once("nonllm.levenshtein_pairs", lambda: similarity_pairs(rows))

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        pairs = await self.pairs(rows, ctx)
        best_other = f"best_{self.other}"
        best = (
            pairs.group_by(ROW_ID, self.side)
            .agg(
                pl.col("similarity").max().alias("best_similarity"),
                pl.col(self.other).get(pl.col("similarity").arg_max()).alias(best_other),
            )
            .with_columns((pl.col("best_similarity") >= self.similarity_threshold).alias(self.flag))
        )
        per_row = best.group_by(ROW_ID).agg(
            pl.struct(self.side, "best_similarity", best_other, self.flag)
            .sort_by(self.side)
            .alias(self.into)
        )
        flags = pl.col(self.into).list.eval(pl.element().struct.field(self.flag))
        return (
            rows.select(ROW_ID)
            .join(per_row, on=ROW_ID, how="left")
            .with_columns(
                self.score(flags).alias("score"), pl.lit(None, dtype=pl.String).alias("error")
            )
        )


class ContextPrecisionNonLLM(_TextOverlap):
    """Are retrieved contexts that match a reference context ranked first? (higher is better)

    Formula: a retrieved context is relevant when its best normalised Levenshtein similarity
    to any reference context is >= similarity_threshold (0.5); the score is the average precision of
    those flags in rank order, AP = sum_k (precision@k * r_k) / relevant, 0.0 when none is
    relevant (ragas adds 1e-10 to the denominator, hence its 0.9999999999 for 1).
    Requests per row: 0 (no LLM).
    Empty input: null or empty contexts or reference_contexts (or only blank items) give null
    with the reason, never 1.0. Blank contexts are dropped before ranking (ragas would rank an
    empty string as an irrelevant slot); `context_index` in the detail is the 1-based position
    in the input list, blanks included.
    Source: ragas NonLLMContextPrecisionWithReference (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/).
    """

    name = "context_precision_nonllm"
    side, other, flag, into = "context_index", "reference_index", "relevant", "contexts"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"contexts": pl.List(CONTEXT_MATCH)}
    info = _no_llm_info(
        "average precision of (best Levenshtein similarity to a reference >= similarity_threshold)",
        TEXT_INPUTS,
        f"ragas NonLLMContextPrecisionWithReference ({RAGAS}context_precision/)",
    )

    def score(self, flags: pl.Expr) -> pl.Expr:
        return average_precision(flags)


class ContextRecallNonLLM(_TextOverlap):
    """Share of the reference contexts that some retrieved context matches (higher is better).

    Formula: a reference context is matched when its best normalised Levenshtein similarity
    to any retrieved context is >= similarity_threshold (0.5); score = matched / reference contexts.
    ragas's NonLLMContextRecall tests `> threshold` (its precision twin `>=`); both use `>=`
    here, so one similarity threshold means the same thing in both.
    Requests per row: 0 (no LLM).
    Empty input: null or empty contexts or reference_contexts (or only blank items) give null
    with the reason, never 1.0. Blank reference items are not counted; blank contexts are
    dropped before matching (`best_context_index` is the 1-based input position).
    Source: ragas NonLLMContextRecall (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/).
    """

    name = "context_recall_nonllm"
    side, other, flag, into = "reference_index", "context_index", "matched", "references"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"references": pl.List(REFERENCE_MATCH)}
    info = _no_llm_info(
        "reference contexts with a retrieved context >= similarity_threshold similar / references",
        TEXT_INPUTS,
        f"ragas NonLLMContextRecall ({RAGAS}context_recall/)",
    )

    def score(self, flags: pl.Expr) -> pl.Expr:
        return flags.list.eval(pl.element().cast(pl.Float64)).list.mean()


def clean_ids(column: str) -> pl.Expr:
    """The IDs of a list column, stripped, without blanks or nulls, each once, in order."""
    return (
        pl.col(column)
        .list.eval(pl.element().str.strip_chars())
        .list.eval(pl.element().filter(pl.element().str.len_chars() > 0))
        .list.unique(maintain_order=True)
    )


RETRIEVED_ID = pl.Struct({"id": pl.String(), "relevant": pl.Boolean()})
REFERENCE_ID = pl.Struct({"id": pl.String(), "retrieved": pl.Boolean()})


def _flag_members(rows: pl.DataFrame, items: str, other: str, flag: str) -> pl.DataFrame:
    """ROW_ID and a List(Struct{id, flag}): each ID of `items`, flagged if `other` holds it."""
    mine = rows.select(
        ROW_ID, pl.col(items).alias("id"), pl.int_ranges(pl.col(items).list.len()).alias("pos")
    ).explode(["id", "pos"])
    theirs = rows.select(ROW_ID, pl.col(other).alias("id")).explode("id")
    return (
        mine.join(theirs.with_columns(pl.lit(True).alias(flag)), on=[ROW_ID, "id"], how="left")
        .with_columns(pl.col(flag).fill_null(False))
        .group_by(ROW_ID)
        .agg(pl.struct("id", flag).sort_by("pos").alias("flagged"))
    )


class _IDOverlap(Metric):
    """Shared computation of the two ID metrics: the share of `side`'s distinct IDs that the
    other side holds, and each of them flagged (`flag`) in the detail named `side`."""

    requires: ClassVar[tuple[str, ...]] = ID_INPUTS
    uses_llm: ClassVar[bool] = False
    side: ClassVar[Literal["retrieved", "reference"]]
    flag: ClassVar[str]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        ids = rows.select(
            ROW_ID,
            clean_ids("retrieved_context_ids").alias("retrieved_ids"),
            clean_ids("reference_context_ids").alias("reference_ids"),
        )
        mine = f"{self.side}_ids"
        theirs = "reference_ids" if self.side == "retrieved" else "retrieved_ids"
        flagged = _flag_members(ids, mine, theirs, self.flag)
        return ids.join(flagged, on=ROW_ID, how="left", maintain_order="left").select(
            ROW_ID,
            pl.col("flagged").alias(self.side),
            (pl.col(mine).list.set_intersection(theirs).list.len() / pl.col(mine).list.len()).alias(
                "score"
            ),
            pl.lit(None, dtype=pl.String).alias("error"),
        )


class ContextPrecisionIDs(_IDOverlap):
    """Share of the retrieved context IDs that are reference IDs (higher is better).

    Formula: |retrieved ∩ reference| / |retrieved|, over distinct IDs (stripped; blanks
    dropped). Plain precision, rank ignored: ragas's IDBasedContextPrecision computes
    hits / len(set(retrieved)) although its docstring speaks of average precision.
    Requests per row: 0 (no LLM).
    Empty input: null or empty retrieved_context_ids or reference_context_ids (or only blank
    IDs) give null with the reason, never 1.0.
    Source: ragas IDBasedContextPrecision (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/).
    """

    name = "context_precision_ids"
    side, flag = "retrieved", "relevant"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"retrieved": pl.List(RETRIEVED_ID)}
    info = _no_llm_info(
        "|retrieved ids ∩ reference ids| / |retrieved ids| (distinct ids)",
        ID_INPUTS,
        f"ragas IDBasedContextPrecision ({RAGAS}context_precision/)",
    )


class ContextRecallIDs(_IDOverlap):
    """Share of the reference context IDs that were retrieved (higher is better).

    Formula: |retrieved ∩ reference| / |reference|, over distinct IDs (stripped; blanks
    dropped).
    Requests per row: 0 (no LLM).
    Empty input: null or empty retrieved_context_ids or reference_context_ids (or only blank
    IDs) give null with the reason, never 1.0.
    Source: ragas IDBasedContextRecall (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/).
    """

    name = "context_recall_ids"
    side, flag = "reference", "retrieved"
    detail_fields: ClassVar[dict[str, pl.DataType]] = {"reference": pl.List(REFERENCE_ID)}
    info = _no_llm_info(
        "|retrieved ids ∩ reference ids| / |reference ids| (distinct ids)",
        ID_INPUTS,
        f"ragas IDBasedContextRecall ({RAGAS}context_recall/)",
    )


@dataclass(frozen=True)
class RagasScore:
    """The ragas score: the harmonic mean of other metrics' score columns (higher is better).

    Formula: n / sum(1 / score_i) over the columns in `of`; null when any of them is null
    (a row is not half-scored), 0.0 when any is 0 (the harmonic mean's limit). It reads the
    outputs of other metrics, so it is no `Metric`: it sends nothing and needs those columns
    to be computed first; `expression()` is applied to the scored frame.
    Source: ragas's aggregate score (harmonic mean of its core metrics).
    """

    of: tuple[str, ...] = (
        "faithfulness",
        "answer_relevancy",
        "context_precision",
        "context_recall",
    )
    name: str = "ragas_score"
    direction: ClassVar[str] = "higher"

    def __post_init__(self) -> None:
        if not self.of:
            raise ConfigError("RagasScore needs at least one metric column in `of`")
        if len(set(self.of)) != len(self.of):
            raise ConfigError(f"RagasScore lists a column twice: {list(self.of)}")

    def expression(self) -> pl.Expr:
        """Float64 `{name}`: the harmonic mean of the `of` columns, row by row."""
        cols = [pl.col(c).cast(pl.Float64) for c in self.of]
        harmonic = pl.lit(float(len(cols))) / pl.sum_horizontal(1.0 / c for c in cols)
        return (
            pl.when(pl.any_horizontal(c.is_null() for c in cols))
            .then(pl.lit(None, dtype=pl.Float64))
            .when(pl.any_horizontal(c == 0.0 for c in cols))
            .then(pl.lit(0.0))
            .otherwise(harmonic)
            .alias(self.name)
        )
