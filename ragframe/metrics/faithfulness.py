"""Faithfulness: the share of the answer's claims that the retrieved contexts support."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID, WHITESPACE
from ragframe.judge.schema import boolean, indexed_verdict
from ragframe.judge.task import Task
from ragframe.metrics.base import (
    NO_CLAIM_FOUND,
    NO_CLAIM_GIVEN,
    Context,
    Metric,
    MetricInfo,
    collect_chunk,
    fence_items,
    prompt,
)
from ragframe.metrics.sources import DEEPEVAL, LLM4S, RAGAS
from ragframe.metrics.statements import MAX_CLAIMS, answer_claims, check_max_claims, claims_task
from ragframe.metrics.verdicts import (
    matched_items,
    numbered_items,
    verdict_task,
    verdicts_by_index,
)
from ragframe.prompts import load

#: The judge's verdict on one claim; the claim is matched to it by its number (`index`).
VERDICT = indexed_verdict(supported=boolean())
# Room for a whole row's claims (up to MAX_CLAIMS) in one answer: see verdicts_per_request.
VERIFY = verdict_task("faithfulness.verify", load("faithfulness_verify"), VERDICT, max_tokens=3072)

#: Completion tokens one verdict may take: {"index": k, "reason": one sentence, "supported": b}.
VERDICT_TOKENS = 64
#: Completion tokens of the answer around its verdicts.
ANSWER_OVERHEAD_TOKENS = 32
#: Claim text sent in one verification prompt, in tokens (characters / 4); the contexts come
#: on top, once per request, so fewer requests per row mean fewer prompt tokens.
CLAIM_PROMPT_TOKENS = 4000

CLAIM = VERDICT.struct("claim", "supported", "reason", claim=pl.String())


class Faithfulness(Metric):
    """Share of the answer's claims that can be inferred from the contexts (higher is better).

    Formula: supported claims / claims.
    Requests per row: 1 to extract the claims (shared with answer_relevancy_llm and
    answer_correctness), then 1 to verify them all (the contexts sent once): a row's claims
    are split only when their verdicts would not fit the verify answer's max_tokens (3,072, or
    the judge's lower `max_tokens`, at 64 tokens a verdict: 47 claims, more than the 40 the
    extraction allows) or their text passes 4,000 tokens, and then into the fewest, evenly
    sized requests. `batch_size=k` forces ceil(claims / k) requests of k claims instead.
    Ragas and deepeval also verify all claims in one call.
    Verdicts per request are sized for verdicts with reasons, so `reasons=False` sends the
    same requests, each asking for shorter answers.
    Caps: at most `max_claims` claims (40) per answer, 6 with the embedded judge's
    `output_bounds`; a list that reaches its cap may have been cut, and `truncated` says so.
    Empty input: a null or empty answer, question or contexts gives null with the reason and
    sends nothing; an answer with no factual claim gives null ("no factual claims"), never 1.0.
    Bring your own claims: when the frame has a `claims` column (List(String), optional; see
    `given_claims`), a row whose list is not null has its claims verified as given, in order,
    instead of extracted: no extraction request, no `max_claims` cap, `truncated` False and
    `claims_given` True in the detail. Blank items are not sent: they keep their place in the
    detail with a null verdict, so detail item i is always input claim i. An empty (or
    all-blank) list gives null ("no claims given"), never 1.0. A null list falls back to
    extraction for that row (`claims_given` False): null means "no claims known", as for a
    log where only some rows were annotated. The question and answer are still required (the
    claims are that answer's). `given_claims=False` always extracts and ignores the column
    (its type then goes unchecked).
    Source: ragas Faithfulness and deepeval FaithfulnessMetric, as their documentation defines
    them (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/faithfulness/,
    https://deepeval.com/docs/metrics-faithfulness); llm4s Faithfulness (https://github.com/llm4s/llm4s).
    """

    name = "faithfulness"
    requires = ("question", "answer", "contexts")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "claims": pl.List(CLAIM),
        "truncated": pl.Boolean(),
        "claims_given": pl.Boolean(),
    }
    info = MetricInfo(
        formula="supported claims / claims",
        requests_per_row="2 (claims, shared; one verification of all claims); "
        "1 + ceil(claims / batch_size) with batch_size; 1 (verification only) for a row "
        "whose claims are given in a `claims` column",
        empty_input="null: missing input, no factual claims in the answer, or an empty given "
        "`claims` list",
        source=f"ragas Faithfulness ({RAGAS}faithfulness/); deepeval FaithfulnessMetric "
        f"({DEEPEVAL}faithfulness); llm4s Faithfulness ({LLM4S})",
    )

    def __init__(
        self,
        batch_size: int | None = None,
        max_claims: int = MAX_CLAIMS,
        *,
        given_claims: bool = True,
        reasons: bool | None = None,
    ) -> None:
        super().__init__(reasons=reasons)
        if not isinstance(given_claims, bool):
            raise ConfigError(
                f"faithfulness given_claims must be True (verify a `claims` column's claims "
                f"where the frame has one) or False (always extract), got {given_claims!r}"
            )
        self.given_claims = given_claims
        #: Inputs used when the frame has them (`ragframe.inputs.columns.OPTIONAL`).
        self.optional: tuple[str, ...] = ("claims",) if given_claims else ()
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ConfigError(
                f"faithfulness batch_size must be a positive integer or None (as many claims "
                f"per request as fit), got {batch_size!r}"
            )
        self.batch_size = batch_size
        self.max_claims = check_max_claims("faithfulness", max_claims)

    def tasks(self) -> list[Task]:
        return [claims_task(self.max_claims), VERIFY]

    def config(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "max_claims": self.max_claims,
            "given_claims": self.given_claims,
        }

    def verdicts_per_request(self, ctx: Context) -> int:
        """How many claims one verification may hold: `batch_size` when forced, else as many
        verdicts as fit the verify answer's max_tokens (the judge's cap applied)."""
        if self.batch_size is not None:
            return self.batch_size
        cap = ctx.session.judge.max_tokens_cap
        max_tokens = min(VERIFY.max_tokens, cap) if cap else VERIFY.max_tokens
        return max(1, (max_tokens - ANSWER_OVERHEAD_TOKENS) // VERDICT_TOKENS)

    def _batched(self, claims: pl.LazyFrame, ctx: Context) -> pl.LazyFrame:
        """`claims` (ROW_ID, claim, `k`: its 0-based place among the row's judged claims)
        with `batch` (which request of the row) and `index` (the claim's 1-based number in
        that request's prompt)."""
        per_request = self.verdicts_per_request(ctx)
        if self.batch_size is not None:
            batch = pl.col("k") // per_request
        else:
            n = pl.len().over(ROW_ID)
            claim_tokens = (pl.col("claim").str.len_chars() / 4).sum().over(ROW_ID)
            requests = pl.max_horizontal(
                (n / per_request).ceil(), (claim_tokens / CLAIM_PROMPT_TOKENS).ceil(), pl.lit(1)
            ).cast(pl.Int64)
            # The fewest requests, evenly sized (never more than per_request claims each).
            batch = pl.col("k") * requests // n
        return claims.with_columns(batch.cast(pl.Int64).alias("batch")).with_columns(
            (pl.col("k") - pl.col("k").min().over(ROW_ID, "batch") + 1).alias("index")
        )

    async def _verify(self, claims: pl.LazyFrame, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        """Per row with claims: `claims` (each claim with its verdict, matched by index, in
        list order; a blank given claim is not sent and gets no verdict), `score` and
        `verify_error`, the first error of its requests. `claims` is `numbered_items`.
        Two queries (the judged claims, the prompts); what follows the answers stays lazy."""
        judged = self._batched(
            claims.filter(
                pl.col("claim").str.strip_chars(WHITESPACE).str.len_chars() > 0
            ).with_columns(pl.int_range(pl.len()).over(ROW_ID).alias("k")),
            ctx,
        ).pipe(collect_chunk)
        batches = (
            judged.lazy()
            .group_by(ROW_ID, "batch", maintain_order=True)
            .agg(pl.col("claim").sort_by("index"))
            .join(
                rows.lazy().select(ROW_ID, "contexts"), on=ROW_ID, how="left", maintain_order="left"
            )
            .with_columns(
                prompt(
                    fence_items("context", pl.col("contexts")),
                    fence_items("claim", pl.col("claim")),
                ).alias("prompt"),
                pl.col("claim").list.len().alias("n"),
            )
        )
        asked = batches.select(ROW_ID, "batch", "prompt", "n").pipe(collect_chunk)
        # A row's first verification goes out before its others, which repeat its contexts:
        # a provider's prompt cache knows that prefix only once it has answered the first.
        answers = await ctx.ask(
            VERIFY, asked.with_columns(wave=pl.col("batch").clip(0, 1)), count_col="n",
            wave_col="wave",
        )  # fmt: skip
        verdicts = verdicts_by_index(
            answers.lazy(), pl.col("answer").struct.field("verdicts"), keys=(ROW_ID, "batch")
        )
        placed = claims.drop("index").join(
            judged.lazy().select(ROW_ID, "pos", "batch", "index"), on=(ROW_ID, "pos"), how="left"
        )
        supported = pl.element().struct.field("supported").cast(pl.Float64)
        return (
            matched_items(
                placed, verdicts, "claim", ("supported", "reason"), "claims", on=(ROW_ID, "batch")
            )
            .with_columns(pl.col("claims").list.eval(supported).list.mean().alias("score"))
            .join(
                answers.lazy()
                .group_by(ROW_ID)
                .agg(pl.col("error").drop_nulls().first().alias("verify_error")),
                on=ROW_ID,
                how="left",
            )
        )

    async def _stated(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Per row: ROW_ID, `claims`, `truncated`, `error` (extraction's, or "no claims
        given") and `claims_given`: the `claims` column's list where it is not null (when
        `given_claims`), else the claims the judge extracts from the answer."""
        if "claims" in rows.columns and self.given_claims:
            has = pl.col("claims").is_not_null()
            given, extract = rows.filter(has), rows.filter(~has)
        else:
            given, extract = rows.clear(), rows
        parts: list[pl.LazyFrame] = []
        if extract.height:
            extracted = await answer_claims(ctx, extract, self.max_claims)
            parts.append(extracted.lazy().with_columns(pl.lit(False).alias("claims_given")))
        if given.height:
            blank = pl.col("claims").list.eval(
                pl.element().str.strip_chars(WHITESPACE).str.len_chars() == 0
            )
            parts.append(
                given.lazy().select(
                    ROW_ID,
                    pl.col("claims").cast(pl.List(pl.String)),
                    pl.lit(False).alias("truncated"),
                    pl.when(blank.list.all())
                    .then(pl.lit(NO_CLAIM_GIVEN))
                    .otherwise(pl.lit(None, dtype=pl.String))
                    .alias("error"),
                    pl.lit(True).alias("claims_given"),
                )
            )
        return pl.concat(parts, how="vertical_relaxed").pipe(collect_chunk)

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.LazyFrame:
        stated = await self._stated(rows, ctx)
        ok = stated.lazy().filter(pl.col("error").is_null() & (pl.col("claims").list.len() > 0))
        per_row = await self._verify(numbered_items(ok, "claims", "claim"), rows, ctx)
        return (
            stated.lazy()
            .select(ROW_ID, "truncated", "claims_given", pl.col("error").alias("extract_error"))
            .join(per_row, on=ROW_ID, how="left")
            .select(
                ROW_ID,
                "score",
                "claims",
                "truncated",
                "claims_given",
                pl.coalesce(
                    "extract_error",
                    "verify_error",
                    pl.when(pl.col("claims").is_null()).then(pl.lit(NO_CLAIM_FOUND)),
                ).alias("error"),
            )
        )
