"""Custom judges: G-Eval (criteria -> evaluation steps -> probability-weighted score) and
ragas's rubric-based scoring. The user writes the criteria or the rubric; ragframe supplies the
prompting, the schema, the parsing and the normalisation to [0, 1].
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ALIASES, ROW_ID
from ragframe.judge.schema import Spec, array, integer, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import Context, Metric, MetricInfo, fence, fence_items, prompt
from ragframe.metrics.sources import DEEPEVAL, G_EVAL_PAPER, RAGAS
from ragframe.prompts import load

#: The inputs a custom judge may see, in the order they appear in its prompt.
JUDGEABLE = ("question", "contexts", "ground_truth", "answer")

#: How each input is fenced and described to the judge (peers' names included, so that steps
#: written for deepeval, "'actual output'", still point at the right text).
_DESCRIBE = {
    "question": "<question>: the user's question (deepeval's 'input', ragas's 'user_input')",
    "contexts": '<context index="n">: the retrieved contexts, numbered from 1 (deepeval\'s '
    "'retrieval context', ragas's 'retrieved_contexts')",
    "ground_truth": "<ground_truth>: the reference answer (deepeval's 'expected output', "
    "ragas's 'reference')",
    "answer": "<answer>: the answer the system generated, which is being evaluated (deepeval's "
    "'actual output', ragas's 'response')",
}


def _checked_name(name: Any, kind: str) -> str:
    """`name`, the metric's score column, unless it is not a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{kind} needs a non-empty name")
    return name


def _judged_inputs(inputs: Sequence[str], metric: str) -> tuple[str, ...]:
    """Canonical names (peers' aliases accepted) in prompt order; refuse anything else."""
    if isinstance(inputs, str):
        raise ConfigError(
            f"{metric}: inputs must be a sequence of names such as ('question', 'answer'), "
            f"not the string {inputs!r}"
        )
    names = [ALIASES.get(i, i) if ALIASES.get(i) in JUDGEABLE else i for i in inputs]
    unknown = [i for i, n in zip(inputs, names, strict=True) if n not in JUDGEABLE]
    if unknown:
        raise ConfigError(
            f"{metric}: unknown inputs {unknown}; a custom judge can see {', '.join(JUDGEABLE)}"
        )
    if not names:
        raise ConfigError(f"{metric}: inputs is empty; give at least one of {JUDGEABLE}")
    return tuple(n for n in JUDGEABLE if n in names)


def _user_prompt(inputs: tuple[str, ...]) -> pl.Expr:
    """The row's judged texts, fenced, in the fixed order of JUDGEABLE."""
    parts = [
        fence_items("context", pl.col(n)) if n == "contexts" else fence(n, pl.col(n))
        for n in inputs
    ]
    return prompt(*parts)


def _render(template: str, **values: str) -> str:
    """Fill `{name}` placeholders in one pass (inserted text is never re-scanned)."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def _describe_inputs(inputs: tuple[str, ...]) -> str:
    return "\n".join(f"- {_DESCRIBE[n]}" for n in inputs)


@dataclass(frozen=True)
class RubricLevel:
    """A score range of G-Eval's rubric and what an output in that range looks like."""

    low: int
    high: int
    expected_outcome: str


STEPS = Task(
    name="g_eval.steps",
    system=load("g_eval_steps"),
    schema=obj(steps=array(string(), min_items=3, max_items=8)),
    max_tokens=768,
)

#: The byte offset of the score digits in the answer's text: the first `"score":` key (a
#: `"score"` inside the reason string is escaped, `\"score\"`, and cannot match).
_SCORE_AT = r'(?s)^(.*?"score"\s*:\s*"?)(\d+)'
_STRIP = ' \t\r\n"'

DISTRIBUTION = pl.Struct({"score": pl.Int64(), "probability": pl.Float64()})


class _Steps:
    """G-Eval's evaluation steps once written, and the lock that writes them once. Shared by
    a metric and its copies (`with_reasons` copies a metric for a run): the steps do not
    depend on reasons, so the metric the user holds sees the steps its run wrote."""

    def __init__(self, steps: list[str] | None) -> None:
        self.steps = steps
        self.lock: asyncio.Lock | None = None
        self.loop: asyncio.AbstractEventLoop | None = None


class GEval(Metric):
    """G-Eval: an LLM judge for any criteria, scored by the probabilities of its score tokens
    (higher is better).

    How it works (Liu et al., G-Eval, 2023, https://arxiv.org/abs/2303.16634, as deepeval's
    GEval implements it):
    1. Steps. From `criteria` the judge writes 3-8 evaluation steps (chain of thought). This
       happens ONCE per metric configuration: the first `compute` call asks, under an
       asyncio.Lock, and caches the steps on the instance (`metric.steps`), so a run of N rows
       sends exactly 1 steps request + N score requests, however many chunks or concurrent
       calls there are (deepeval regenerates them per row). Given `evaluation_steps`, no steps
       request at all. The steps go into `config()`, hence the output metadata, not into each
       row's detail. A failed steps request fails every row of that call with the reason and
       is asked again on the next call (failures are never cached).
    2. Score. One request per row: the criteria, the steps and the optional rubric are the
       system prompt (the same for every row, so servers cache its prefix); the fenced inputs
       are the user message. The schema asks for `reason` FIRST (the judge reasons before it
       scores) and an integer `score` with minimum/maximum = `score_range`; with
       `reasons=False`, for the score alone (cheaper, and the judge no longer reasons first).
    3. Form filling. With `top_logprobs > 0` the request asks for logprobs; the token that
       carries the score digits (the first digits after the `"score"` key) is found in them,
       and each of its top alternatives that is an integer in range gets p = exp(logprob);
       renormalised, raw = sum(p * s). That rewards the judge's uncertainty between levels
       instead of rounding it away. When the endpoint returns no logprobs, or the score token
       cannot be isolated (digits split over tokens), raw = the integer; `method` says which.
       With `require_logprobs=True` there is no such fallback: such a row is null with the
       reason, and `needs_logprobs` lets a run be refused before any request on a judge known
       not to return logprobs.

    Formula: (raw - lo) / (hi - lo) with (lo, hi) = score_range.
    Requests per row: 1 (+ 1 per run to write the steps, when `criteria` is given instead of
    `evaluation_steps`).
    Inputs: `inputs` picks which of question, answer, contexts, ground_truth the judge sees
    (deepeval's evaluation_params; their aliases are accepted); they are the metric's
    `requires`.
    Empty input: a missing or empty input gives null with the reason and no request; blank
    contexts are dropped before judging (base.py's rule), all blank is missing input.
    Detail: `reason`, `raw_score` (on the score_range scale), `integer_score` (what the judge
    wrote), `method` ("logprobs" | "integer"), `distribution` (the renormalised probability
    of each score when method is "logprobs"; raw_score is its mean).
    Source: Liu et al. 2023 (https://arxiv.org/abs/2303.16634), deepeval GEval
    (https://deepeval.com/docs/metrics-llm-evals).
    """

    name = "g_eval"
    requires: ClassVar[tuple[str, ...]] = ("question", "answer")
    detail_fields: ClassVar[dict[str, pl.DataType]] = {
        "reason": pl.String(),
        "raw_score": pl.Float64(),
        "integer_score": pl.Int64(),
        "method": pl.String(),
        "distribution": pl.List(DISTRIBUTION),
    }
    info = MetricInfo(
        formula="(probability-weighted score - lo) / (hi - lo)",
        requests_per_row="1 (+1 per run for the steps when given criteria)",
        empty_input="null: a missing input among `inputs`",
        source=f"Liu et al. 2023, G-Eval ({G_EVAL_PAPER}); deepeval GEval ({DEEPEVAL}llm-evals)",
    )

    def __init__(
        self,
        name: str = "g_eval",
        *,
        criteria: str | None = None,
        evaluation_steps: list[str] | None = None,
        inputs: Sequence[str] = ("question", "answer"),
        rubric: list[RubricLevel] | None = None,
        score_range: tuple[int, int] = (1, 5),
        top_logprobs: int = 20,
        require_logprobs: bool = False,
        reasons: bool | None = None,
    ) -> None:
        super().__init__(reasons=reasons)
        self.name = _checked_name(name, "GEval")
        self.criteria = criteria.strip() if criteria is not None else None
        if evaluation_steps is not None:
            if isinstance(evaluation_steps, str):
                raise ConfigError(f"{name}: evaluation_steps must be a list of strings")
            given = [str(s).strip() for s in evaluation_steps]
            if not given or not all(given):
                raise ConfigError(f"{name}: evaluation_steps must be non-empty strings")
        else:
            given = None
        if given is None and not self.criteria:
            raise ConfigError(
                f"{name}: give criteria (steps are written from it) or evaluation_steps"
            )
        self.evaluation_steps = given
        self.requires = _judged_inputs(inputs, name)  # type: ignore[misc]
        lo, hi = score_range
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo >= hi:
            raise ConfigError(
                f"{name}: score_range must be two integers lo < hi, got {score_range}"
            )
        self.score_range = (lo, hi)
        self.rubric = self._check_rubric(rubric or [])
        if not 0 <= top_logprobs <= 20:
            raise ConfigError(f"{name}: top_logprobs must lie in 0..20 (0 turns logprobs off)")
        self.top_logprobs = top_logprobs
        if require_logprobs and top_logprobs == 0:
            raise ConfigError(
                f"{name}: require_logprobs=True needs top_logprobs > 0 (the score is weighted "
                "by the logprobs of the score token); raise top_logprobs or drop require_logprobs"
            )
        self.require_logprobs = bool(require_logprobs)
        self.needs_logprobs = self.require_logprobs
        self._written = _Steps(given)

    def _check_rubric(self, rubric: list[RubricLevel]) -> list[RubricLevel]:
        lo, hi = self.score_range
        levels = sorted(rubric, key=lambda r: r.low)
        for level in levels:
            if not (lo <= level.low <= level.high <= hi) or not level.expected_outcome.strip():
                raise ConfigError(
                    f"{self.name}: rubric level {level} must have lo <= low <= high <= hi "
                    f"within score_range {self.score_range} and a non-empty expected_outcome"
                )
        for a, b in itertools.pairwise(levels):
            if b.low <= a.high:
                raise ConfigError(f"{self.name}: rubric ranges {a} and {b} overlap")
        return levels

    @property
    def steps(self) -> list[str] | None:
        """The evaluation steps in use: given, or generated by the first run (None before)."""
        steps = self._written.steps
        return None if steps is None else list(steps)

    def tasks(self) -> list[Task]:
        score = self._score_task(self._written.steps or [])
        return [score] if self.evaluation_steps is not None else [STEPS, score]

    def config(self) -> dict[str, Any]:
        return {
            "criteria": self.criteria,
            "steps": self.steps,
            "steps_source": "given" if self.evaluation_steps is not None else "generated",
            "inputs": list(self.requires),
            "rubric": [
                {"low": r.low, "high": r.high, "expected_outcome": r.expected_outcome}
                for r in self.rubric
            ],
            "score_range": list(self.score_range),
            "top_logprobs": self.top_logprobs,
            "require_logprobs": self.require_logprobs,
        }

    def _score_task(self, steps: list[str]) -> Task:
        lo, hi = self.score_range
        criteria = f"Evaluation criteria:\n{self.criteria}" if self.criteria else ""
        if self.rubric:
            lines = [
                f"- {r.low}: {r.expected_outcome}"
                if r.low == r.high
                else f"- {r.low} to {r.high}: {r.expected_outcome}"
                for r in self.rubric
            ]
            rubric = "Rubric (score range: what an output in that range looks like):\n" + "\n".join(
                lines
            )
        else:
            rubric = ""
        system = _render(
            load("g_eval_score"),
            criteria=criteria,
            steps="\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)),
            rubric=rubric,
            inputs=_describe_inputs(self.requires),
            low=str(lo),
            high=str(hi),
        )
        system = re.sub(r"\n{3,}", "\n\n", system).strip()
        return Task(
            name="g_eval.score",
            system=system,
            # The reason first: the judge reasons before it scores.
            schema=obj(reason=string(), score=integer(minimum=lo, maximum=hi)),
            max_tokens=512,
            top_logprobs=self.top_logprobs,
        )

    def _steps_lock(self) -> asyncio.Lock:
        """One lock per event loop (a metric may be reused across runs, each with its loop)."""
        loop, written = asyncio.get_running_loop(), self._written
        if written.lock is None or written.loop is not loop:
            written.lock, written.loop = asyncio.Lock(), loop
        return written.lock

    async def _ensure_steps(self, ctx: Context) -> str | None:
        """Write the steps once (cached on the instance); the error when that failed."""
        if self._written.steps is not None:
            return None
        async with self._steps_lock():
            if self._written.steps is not None:
                return None
            assert self.criteria is not None
            ask = pl.DataFrame({ROW_ID: [0]}, schema={ROW_ID: pl.UInt32}).select(
                ROW_ID,
                prompt(
                    "The judge will see these inputs:\n" + _describe_inputs(self.requires),
                    fence("criteria", pl.lit(self.criteria)),
                ).alias("prompt"),
            )
            # The steps serve every row, so their tokens are charged to the run, not a row.
            asked = await ctx.ask(STEPS, ask, record_usage=False)
            error = asked.get_column("error")[0]
            if error is not None:
                return f"{self.name}: writing the evaluation steps failed: {error}"
            steps = [s.strip() for s in asked.get_column("answer")[0]["steps"] if s.strip()]
            if not steps:
                return f"{self.name}: the judge wrote only empty evaluation steps"
            self._written.steps = steps
            return None

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        failed = await self._ensure_steps(ctx)
        if failed is not None:
            return rows.select(ROW_ID, pl.lit(failed).alias("error"))
        steps = self._written.steps
        assert steps is not None
        task = self._score_task(steps)
        judged = await ctx.ask(
            task, rows.select(ROW_ID, _user_prompt(self.requires).alias("prompt"))
        )
        lo, hi = self.score_range
        integer = pl.col("answer").struct.field("score")
        if "logprobs" in judged.columns:
            weighted = score_distribution(judged, lo, hi)
            has_logprobs = pl.col("logprobs").list.len().fill_null(0) > 0
        else:
            weighted = pl.DataFrame(
                schema={ROW_ID: pl.UInt32, "distribution": pl.List(DISTRIBUTION), "raw": pl.Float64}
            )
            has_logprobs = pl.lit(False)
        return (
            judged.select(
                ROW_ID,
                pl.col("answer").struct.field("reason").alias("reason"),
                integer.alias("integer_score"),
                "error",
                has_logprobs.alias("has_logprobs"),
            )
            .join(weighted, on=ROW_ID, how="left", maintain_order="left")
            .with_columns(
                pl.when(pl.col("integer_score").is_null())
                .then(None)
                .when(pl.col("raw").is_not_null())
                .then(pl.lit("logprobs"))
                .otherwise(pl.lit("integer"))
                .alias("method"),
                pl.coalesce("raw", pl.col("integer_score").cast(pl.Float64)).alias("raw_score"),
            )
            .with_columns(((pl.col("raw_score") - lo) / (hi - lo)).alias("score"))
            .with_columns(self._missing_logprobs())
            .select(
                ROW_ID,
                "score",
                "reason",
                "raw_score",
                "integer_score",
                "method",
                "distribution",
                "error",
            )
        )

    def _missing_logprobs(self) -> pl.Expr:
        """`error`, extended with why a row has no weighted score when logprobs are required."""
        if not self.require_logprobs:
            return pl.col("error")
        why = (
            pl.when(pl.col("has_logprobs"))
            .then(pl.lit("the score's digits are not one token of the returned logprobs"))
            .otherwise(pl.lit("the judge returned no logprobs"))
        )
        return pl.coalesce(
            "error",
            pl.when(pl.col("method") == "integer").then(
                pl.concat_str(
                    pl.lit(f"{self.name}: "),
                    why,
                    pl.lit(
                        " and require_logprobs=True; use a judge that returns logprobs "
                        "(OpenAI chat models do) or set require_logprobs=False to fall back "
                        "to the integer score"
                    ),
                )
            ),
        ).alias("error")


def score_distribution(judged: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """ROW_ID, `distribution` and its mean `raw`, from the logprobs of each row's score token.

    `judged` holds ROW_ID, `answer` (with an integer `score`) and `logprobs` (one entry per
    output token: token, logprob, top alternatives). The score token is the one that covers
    the first digits after the `"score"` key of the JSON text; it is used only when it holds
    exactly those digits and they equal the parsed score (else the row is left out and the
    caller falls back to the integer). Top alternatives that are integers in [lo, hi] are
    weighted by exp(logprob) and renormalised.
    """
    tokens = (
        judged.select(ROW_ID, pl.col("answer").struct.field("score").alias("integer"), "logprobs")
        .filter(pl.col("integer").is_not_null() & (pl.col("logprobs").list.len() > 0))
        .explode("logprobs")
        .unnest("logprobs")
        .with_columns(pl.col("token").str.len_bytes().cast(pl.Int64).alias("nbytes"))
        .with_columns(pl.col("nbytes").cum_sum().over(ROW_ID).alias("end"))
        .with_columns((pl.col("end") - pl.col("nbytes")).alias("start"))
    )
    located = (
        tokens.group_by(ROW_ID)
        .agg(pl.col("token").str.join("").alias("text"))
        .select(
            ROW_ID,
            pl.col("text").str.extract(_SCORE_AT, 1).str.len_bytes().cast(pl.Int64).alias("at"),
            pl.col("text").str.extract(_SCORE_AT, 2).alias("digits"),
        )
    )
    picked = tokens.join(located, on=ROW_ID).filter(
        (pl.col("start") <= pl.col("at"))
        & (pl.col("at") < pl.col("end"))
        & (pl.col("token").str.strip_chars(_STRIP) == pl.col("digits"))
        & (pl.col("digits").cast(pl.Int64, strict=False) == pl.col("integer"))
    )
    top = pl.col("top")
    own = pl.concat_list(pl.struct("token", "logprob"))
    alternatives = (
        picked.select(
            ROW_ID,
            pl.when(top.list.len() > 0).then(top).otherwise(own).alias("top"),
        )
        .explode("top")
        .unnest("top")
        .with_columns(pl.col("token").str.strip_chars(_STRIP).alias("text"))
        .filter(pl.col("text").str.contains(r"^\d{1,9}$") & pl.col("logprob").is_not_null())
        .with_columns(pl.col("text").cast(pl.Int64).alias("value"))
        .filter(pl.col("value").is_between(lo, hi))
        .group_by(ROW_ID, "value")
        .agg(pl.col("logprob").exp().sum().alias("p"))
        .filter(pl.col("p") > 0)
        .with_columns((pl.col("p") / pl.col("p").sum().over(ROW_ID)).alias("probability"))
        .sort(ROW_ID, "value")
    )
    return alternatives.group_by(ROW_ID).agg(
        pl.struct(pl.col("value").alias("score"), "probability").alias("distribution"),
        (pl.col("value") * pl.col("probability")).sum().alias("raw"),
    )


#: A reference-based rubric in the spirit of ragas's default for rubric scoring.
DEFAULT_RUBRIC: dict[int, str] = {
    1: "The answer is wrong or does not address the question: it shares nothing of substance "
    "with the reference answer.",
    2: "The answer agrees with the reference only in part: it has major errors, leaves out key "
    "points of the reference, or is mostly beside the point.",
    3: "The answer broadly agrees with the reference but misses details, is unclear in places, "
    "or has minor inaccuracies.",
    4: "The answer is mostly accurate and agrees well with the reference, with only small gaps "
    "in detail or clarity.",
    5: "The answer is fully accurate, covers everything the reference says, and is clear and "
    "complete.",
}


def rubric_answer(levels: list[int] | None = None) -> Spec:
    """The reason, then one of the rubric's `levels`."""
    return obj(reason=string(), level=integer(enum=levels))


class RubricScore(Metric):
    """Rubric-based criteria scoring: the judge picks the rubric level that fits the output
    (higher is better).

    The user describes each score level (`rubric`, level -> description); the judge returns
    the one level that fits best, constrained by the schema to the rubric's levels (an
    integer `enum`), with its reason first. The default rubric is a 1-5 reference-based scale
    (answer against ground_truth) written after ragas's default.
    Formula: (level - min level) / (max level - min level); level 4 on 1..5 gives 0.75.
    Requests per row: 1.
    Inputs: `inputs` picks which of question, answer, contexts, ground_truth the judge sees
    (default question, answer, ground_truth).
    Empty input: a missing or empty input gives null with the reason and no request; blank
    contexts are dropped before judging (base.py's rule), all blank is missing input.
    Detail: `level` (as the judge chose it), `reason` (null with `reasons=False`: the judge is
    then asked for the level alone).
    Source: ragas RubricsScore, rubrics-based criteria scoring
    (https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/general_purpose/).
    """

    name = "rubric_score"
    requires: ClassVar[tuple[str, ...]] = ("question", "ground_truth", "answer")
    detail_fields: ClassVar[dict[str, pl.DataType]] = dict(
        rubric_answer().struct("level", "reason").to_schema()
    )
    info = MetricInfo(
        formula="(level - min level) / (max level - min level)",
        requests_per_row="1",
        empty_input="null: a missing input among `inputs`",
        source=f"ragas RubricsScore ({RAGAS}general_purpose/)",
    )

    def __init__(
        self,
        rubric: Mapping[int, str] | None = None,
        *,
        name: str = "rubric_score",
        inputs: Sequence[str] = ("question", "answer", "ground_truth"),
        reasons: bool | None = None,
    ) -> None:
        super().__init__(reasons=reasons)
        self.name = _checked_name(name, "RubricScore")
        self.requires = _judged_inputs(inputs, name)  # type: ignore[misc]
        if rubric is None:
            if "ground_truth" not in self.requires:
                raise ConfigError(
                    f"{name}: the default rubric compares the answer with a reference; keep "
                    "'ground_truth' in inputs or pass your own rubric"
                )
            rubric = DEFAULT_RUBRIC
        if not isinstance(rubric, Mapping) or len(rubric) < 2:
            raise ConfigError(f"{name}: a rubric maps at least two integer levels to descriptions")
        for level, text in rubric.items():
            if isinstance(level, bool) or not isinstance(level, int):
                raise ConfigError(f"{name}: rubric levels must be integers, got {level!r}")
            if not isinstance(text, str) or not text.strip():
                raise ConfigError(f"{name}: rubric level {level} needs a non-empty description")
        self.rubric = {level: rubric[level].strip() for level in sorted(rubric)}
        self.task = self._task()

    def _task(self) -> Task:
        levels = list(self.rubric)
        system = _render(
            load("rubric_score"),
            rubric="\n".join(f"- {level}: {text}" for level, text in self.rubric.items()),
            inputs=_describe_inputs(self.requires),
            levels=", ".join(str(level) for level in levels),
        )
        return Task(
            name="rubric_score.score",
            system=system,
            schema=rubric_answer(levels),
            max_tokens=512,
        )

    def tasks(self) -> list[Task]:
        return [self.task]

    def config(self) -> dict[str, Any]:
        return {
            "rubric": [{"level": k, "description": v} for k, v in self.rubric.items()],
            "inputs": list(self.requires),
        }

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        judged = await ctx.ask(
            self.task, rows.select(ROW_ID, _user_prompt(self.requires).alias("prompt"))
        )
        low, high = min(self.rubric), max(self.rubric)
        level = pl.col("answer").struct.field("level")
        return judged.select(
            ROW_ID,
            ((level - low) / (high - low)).alias("score"),
            level.alias("level"),
            pl.col("answer").struct.field("reason").alias("reason"),
            "error",
        )
