"""What every metric shares: the output contract, the per-run context, and prompt fencing.

A metric is a small class whose `compute` turns a frame of valid input rows into a frame of
scores and typed details, in Polars. It never talks to the network itself: it hands whole
columns of prompts to `Context.ask`, and the judge does the rest. Rows whose inputs are missing
never reach `compute`; they get a null score and the reason, and no request.

Blank contexts, one rule for every metric: a null, empty or whitespace-only item of `contexts`
is dropped before `compute` sees the row (`clean_contexts`), so it is neither judged nor
counted; a row whose contexts are all blank is missing input (null, a reason, no request).
Prompts number the kept contexts 1..m; `compute` also gets `context_positions`, the 1-based
positions of those contexts in the input list, and every detail that names a context
(`context_index`, `source_context`, ...) gives that input position, never the kept number.

Reasons, one rule for every metric: `reasons=False` (on the metric, or for the run through
`with_reasons`) sends every task of the metric in its variant without reasons
(`Task.with_reasons`: no reason fields in the schema, no request for one in the
instructions). `Context.ask` applies it, so no metric handles it; the answers decode to the
same struct with null reasons, so details keep their type. `None` follows the run and counts
as True when nothing set it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import polars as pl

from ragframe.errors import ConfigError
from ragframe.inputs.columns import ROW_ID, WHITESPACE, missing_input_reason
from ragframe.judge.client import JudgeSession
from ragframe.judge.task import Task
from ragframe.metrics.thresholds import DEFAULT_THRESHOLD, PASS_SUFFIX, Threshold, check_threshold

SCORE = "score"
ERROR = "error"

#: How a row's reason starts when an input it needs is missing (`missing_input_reason`,
#: pairwise's too): the row is never sent.
MISSING_INPUT = "missing input:"
#: Faithfulness: the answer makes no factual claim, so there is nothing to verify.
NO_CLAIM_FOUND = "no factual claims found in the answer"
#: Faithfulness with the row's own claims: the list given is empty or blank.
NO_CLAIM_GIVEN = "no claims given: the row's 'claims' list is empty or blank"
#: The reasons of a row with every input that had nothing to score: the answer, the ground
#: truth, the contexts or the claims given state nothing the metric could judge (null, never
#: 1.0 nor 0.0). A metric that adds such a reason lists it here, or it counts as a failure.
NOTHING_TO_SCORE = (
    NO_CLAIM_FOUND,
    NO_CLAIM_GIVEN,
    "no facts found in ground_truth",
    "no factual statements found in the answer or the ground truth",
    "no statements found in the contexts",
    "no statements found in the answer",
)


def null_by_design(error: pl.Expr) -> pl.Expr:
    """Whether a null score's reason (`{metric}_detail.error`) says the row is unscored by
    design, not failed: a missing input, or nothing to score. One rule for what exit status
    4 and `RowsFailedWarning` count as failed; False for a null reason."""
    by_design = error.str.starts_with(MISSING_INPUT) | error.is_in(list(NOTHING_TO_SCORE))
    return by_design.fill_null(False)


#: List(Int32): the 1-based input positions of a row's kept (non-blank) contexts.
CONTEXT_POSITIONS = "context_positions"
USAGE_FIELDS = {"prompt_tokens": pl.Int64(), "completion_tokens": pl.Int64()}

#: Tags that fence judged text in prompts. Inside judged text, anything that would open or
#: close one of them is escaped, so an answer cannot break out of its fence.
FENCE_TAGS = (
    "question",
    "answer",
    "ground_truth",
    "context",
    "contexts",
    "claim",
    "claims",
    "statement",
    "statements",
    "fact",
    "response",
    "reference",
    "criteria",
    "steps",
    "rubric",
    "data",
)
_FENCE_ESCAPE = r"(?i)<(/?)\s*(" + "|".join(FENCE_TAGS) + r")\b"


def collect_chunk(plan: pl.LazyFrame) -> pl.DataFrame:
    """Run a plan over one chunk's rows on Polars' in-memory engine: the engine the eager
    steps these plans replace ran on (the same results), and for frames of a few thousand
    rows a third cheaper than the streaming engine `collect` defaults to in Polars 2."""
    return plan.collect(engine="in-memory")


def escape(expr: pl.Expr) -> pl.Expr:
    """Neutralise fence tags inside judged text (`</answer>` becomes `&lt;/answer>`)."""
    return expr.str.replace_all(_FENCE_ESCAPE, "&lt;$1$2")


def fence(tag: str, expr: pl.Expr) -> pl.Expr:
    """`<tag>` + escaped text + `</tag>`, as a Polars String expression."""
    return pl.concat_str([pl.lit(f"<{tag}>\n"), escape(expr), pl.lit(f"\n</{tag}>")])


def fence_items(tag: str, expr: pl.Expr) -> pl.Expr:
    """A list column as numbered, fenced items: `<tag index="1">...</tag>` one per line."""
    return expr.list.eval(
        pl.concat_str(
            [
                pl.lit(f'<{tag} index="'),
                pl.int_range(1, pl.len() + 1).cast(pl.String),
                pl.lit('">\n'),
                escape(pl.element()),
                pl.lit(f"\n</{tag}>"),
            ]
        )
    ).list.join("\n")


def _filled(text: pl.Expr) -> pl.Expr:
    """True where a text item has something besides whitespace (null counts as blank), by the
    same rule as missing input (`ragframe.inputs.columns.WHITESPACE`)."""
    return text.fill_null("").str.strip_chars(WHITESPACE).str.len_chars() > 0


def kept_contexts(column: str = "contexts") -> pl.Expr:
    """The non-blank items of a list column, in input order: the contexts that are judged."""
    return pl.col(column).list.eval(pl.element().filter(_filled(pl.element())))


def context_positions(column: str = "contexts") -> pl.Expr:
    """The 1-based input positions (Int32) of the items `kept_contexts` keeps."""
    return pl.col(column).list.eval(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int32).filter(_filled(pl.element()))
    )


def clean_contexts(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` with blank contexts dropped and their input positions in CONTEXT_POSITIONS.

    Applied by `Metric.run` to every metric that reads `contexts`, so the rule cannot differ
    between metrics; positions come first, computed from the uncleaned list.
    """
    return rows.with_columns(
        context_positions().alias(CONTEXT_POSITIONS), kept_contexts().alias("contexts")
    )


def prompt(*parts: pl.Expr | str) -> pl.Expr:
    """Join prompt parts with blank lines; strings become literals."""
    exprs = [pl.lit(p) if isinstance(p, str) else p for p in parts]
    return pl.concat_str(exprs, separator="\n\n")


#: Context's shared key for the cleaned contexts of the frame being scored.
_CLEANED = "__ragframe_cleaned_contexts"
#: Metric.run's column: why a row misses an input (null when it has them all).
_MISSING = "__ragframe_missing"


class Context:
    """One run's shared services, seen from one metric: ask, embed, share a stage.

    Usage (tokens) of every answer a metric uses is recorded against that metric and row.
    `reasons` is the metric's setting: every task it asks is sent in that variant.
    """

    def __init__(
        self,
        session: JudgeSession,
        shared: dict[str, asyncio.Future[Any]],
        *,
        reasons: bool = True,
        failures: list[int] | None = None,
    ) -> None:
        self.session = session
        self._shared = shared
        self.reasons = reasons
        #: Answers that came back as failures, one count per ask, shared by every view of the
        #: chunk: a chunk with any is not kept for reuse (`ragframe.engine.reuse`).
        self.failures = [] if failures is None else failures
        #: Lazy: the usage is summed per row once, in the plan that assembles the metric's output.
        self.usage: list[pl.LazyFrame] = []

    def view(self, *, reasons: bool | None = None) -> Context:
        """A fresh view for one metric (its own usage), sharing the run's stages; asking for
        reasons as `reasons` says (as this view does when None)."""
        reasons = self.reasons if reasons is None else reasons
        return Context(self.session, self._shared, reasons=reasons, failures=self.failures)

    async def ask(
        self,
        task: Task,
        frame: pl.DataFrame,
        prompt_col: str = "prompt",
        count_col: str | Sequence[str] | None = None,
        *,
        record_usage: bool = True,
        wave_col: str | None = None,
    ) -> pl.DataFrame:
        """Send `frame[prompt_col]` to the judge; return `frame` with the answers added.

        Adds `answer` (a Struct typed by the task's schema, null on failure), `error` (null on
        success), and the answer's `prompt_tokens` / `completion_tokens`. `frame` must hold
        the ROW_ID column so usage is charged to the right rows. `count_col` names the column
        of per-prompt counts, or one column per array when `task.counted` is a tuple.
        The task is sent with or without reasons as this view says (`reasons`). `wave_col`
        names a column of wave numbers (`JudgeSession.ask_frame`'s `waves`).
        """
        task = task.with_reasons(self.reasons)
        counts: pl.Series | list[Any] | None = None
        if isinstance(count_col, str):
            counts = frame.get_column(count_col)
        elif count_col:
            columns = [frame.get_column(c).to_list() for c in count_col]
            counts = list(zip(*columns, strict=True))
        prompts = frame.get_column(prompt_col)
        if prompts.dtype != pl.String:  # a Categorical or Enum column is text too
            prompts = prompts.cast(pl.String)
        waves = None if wave_col is None else frame.get_column(wave_col)
        answers = await self.session.ask_frame(task, prompts, counts, waves=waves)
        failed = answers.height - answers.get_column("error").null_count()
        if failed:
            self.failures.append(failed)
        # The answers decoded as one column (one query), set beside the frame (none).
        decoded = answers.get_column("json").str.json_decode(task.dtype).alias("answer")
        result = frame.hstack([decoded, *(c for c in answers.get_columns() if c.name != "json")])
        if record_usage:
            self.record_usage(result)
        return result

    def record_usage(self, frame: pl.DataFrame | pl.LazyFrame) -> None:
        """Charge the token columns of `frame` to its rows for this metric (no query: kept
        lazy until `usage_by_row`)."""
        self.usage.append(frame.lazy().select(ROW_ID, *USAGE_FIELDS))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts`; NaN rows where the request failed (see `embedding_errors`)."""
        return await self.session.embed(texts)

    def embedding_errors(self, texts: Sequence[str]) -> list[str | None]:
        """Why each text has no vector (its embedding request failed for good), else None."""
        failed = self.session.embedding_errors
        return [failed.get(text) for text in texts]

    async def cosine(
        self, left: Sequence[str], right: Sequence[str]
    ) -> tuple[np.ndarray, list[str | None]]:
        """Row-wise cosine similarity of two aligned text lists (one embedding call set, each
        distinct text embedded once), and for each pair why it has none (an embedding request
        failed for good), else None. Failed pairs are NaN."""
        if not left:
            return np.zeros(0), []
        texts = list(dict.fromkeys([*left, *right]))
        index = {text: i for i, text in enumerate(texts)}
        matrix = await self.embed(texts)
        cosine = np.einsum(
            "ij,ij->i", matrix[[index[t] for t in left]], matrix[[index[t] for t in right]]
        ).astype(np.float64)
        errors = self.embedding_errors(texts)
        reasons = [errors[index[a]] or errors[index[b]] for a, b in zip(left, right, strict=True)]
        return cosine, reasons

    def cleaned_contexts(self, inputs: pl.DataFrame) -> list[pl.Series]:
        """`clean_contexts` of `inputs`, as its CONTEXT_POSITIONS and `contexts` columns
        (aligned with `inputs`): computed once per frame for every metric of the run that
        reads contexts (they all see the same frame), not once per metric."""
        future = self._shared.get(_CLEANED)
        if future is None or future.result()[0] is not inputs:
            future = asyncio.get_running_loop().create_future()
            cleaned = inputs.select(
                context_positions().alias(CONTEXT_POSITIONS), kept_contexts().alias("contexts")
            )
            future.set_result((inputs, cleaned.get_columns()))
            self._shared[_CLEANED] = future
        columns: list[pl.Series] = future.result()[1]
        return columns

    async def once(self, key: str, make: Callable[[], Awaitable[pl.DataFrame]]) -> pl.DataFrame:
        """Compute a stage once per run, whichever metric asks first; charge its usage here.

        The stage's frame must carry ROW_ID and the usage columns.
        """
        future = self._shared.get(key)
        if future is None:
            future = asyncio.ensure_future(make())
            self._shared[key] = future
        frame = await future
        self.record_usage(frame)
        return frame

    def usage_by_row(self) -> pl.LazyFrame:
        """ROW_ID and the tokens charged to each row for this metric, as a lazy plan (joined
        into the metric's output without a query of its own)."""
        if not self.usage:
            return pl.LazyFrame(
                schema={ROW_ID: pl.UInt32, **{k: v for k, v in USAGE_FIELDS.items()}}
            )
        return (
            pl.concat(self.usage).group_by(ROW_ID).agg(pl.col(name).sum() for name in USAGE_FIELDS)
        )


@dataclass(frozen=True)
class MetricInfo:
    """What the README's metric table says about a metric."""

    formula: str
    requests_per_row: str
    empty_input: str
    source: str


class Metric:
    """Base class: subclasses set the class attributes and implement `compute`.

    `reasons`: False asks the judge for no written reasons (cheaper: fewer completion tokens),
    True for them, None (the default) follows the run (`with_reasons`), True when nothing set
    it. What a metric reports follows the setting with no code of its own: `tasks()` gives
    the variants it sends (their prompt hashes go into the metadata) and `config()` says
    `reasons` once set, when the metric has reasons to leave out (both wrapped in
    `__init_subclass__`).
    """

    name: str = ""
    requires: ClassVar[tuple[str, ...]] = ()
    direction: ClassVar[Literal["higher", "lower"]] = "higher"
    uses_llm: ClassVar[bool] = True
    uses_embeddings: ClassVar[bool] = False
    #: True when the metric cannot score without token logprobs (G-Eval with
    #: `require_logprobs=True`), so a run can be refused up front on a judge without them.
    needs_logprobs: bool = False
    #: The metric's own detail fields (the base adds `error` and the token counts).
    detail_fields: ClassVar[dict[str, pl.DataType]] = {}
    info: ClassVar[MetricInfo]
    #: Ask for written reasons: True, False, or None to follow the run (see the class doc).
    reasons: bool | None = None
    #: The pass rule (`ragframe.metrics.thresholds`): a row passes at or above `threshold` (at or
    #: below for a lower-is-better metric); `strict` passes only a perfect score. None: no
    #: threshold set, no `{name}_pass` column (summaries and gates then use
    #: DEFAULT_THRESHOLD, 0.5, unless given one).
    threshold: float | None = None
    strict: bool = False
    #: Inputs the metric uses when the frame has them and scores without otherwise (a
    #: row's own `claims` for faithfulness); checked like required inputs when present.
    optional: tuple[str, ...] = ()

    def __init__(
        self, *, reasons: bool | None = None, threshold: float | None = None, strict: bool = False
    ) -> None:
        self.reasons = check_reasons(type(self).__name__, reasons)
        set_threshold(self, threshold, strict)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap a subclass's own `tasks` and `config` so they report the reasons setting, and
        its own `__init__` so that every metric takes `threshold=` and `strict=`."""
        super().__init_subclass__(**kwargs)
        for name, wrap in (("tasks", _asked_tasks), ("config", _recorded_config)):
            own = cls.__dict__.get(name)
            if callable(own) and not getattr(own, "_reports_reasons", False):
                setattr(cls, name, wrap(own))
        init = cls.__dict__.get("__init__")
        if callable(init) and not getattr(init, "_takes_threshold", False):
            cls.__init__ = _taking_threshold(init)  # type: ignore[method-assign]

    @property
    def pass_rule(self) -> Threshold | None:
        """The metric's pass rule when a threshold (or strict mode) was set, else None."""
        if self.threshold is None and not self.strict:
            return None
        value = DEFAULT_THRESHOLD if self.threshold is None else self.threshold
        return Threshold(value, self.strict, self.direction)

    @property
    def reasons_asked(self) -> bool:
        """Whether this metric's requests ask for reasons: `reasons`, None counting as True."""
        return self.reasons is not False

    def tasks(self) -> list[Task]:
        """The judge tasks this metric may send, as it sends them (with or without reasons):
        their prompt hashes go into the metadata."""
        return []

    def config(self) -> dict[str, Any]:
        """Settings worth recording in the output metadata (and `reasons`, once set, added for
        every metric whose tasks have reasons to leave out)."""
        return {}

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame | pl.LazyFrame:
        """Score rows whose inputs are all present (blank contexts already dropped; see
        CONTEXT_POSITIONS for where the kept ones stood in the input).

        Returns one row per input row: ROW_ID, `score` (Float64, null when not computable),
        `error` (String, null when scored) and one column per `detail_fields` entry. A
        LazyFrame is welcome: `run` folds it into the plan that assembles the output, so the
        metric's post-processing costs no query of its own.
        """
        raise NotImplementedError

    async def run(self, inputs: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        """Score every row of `inputs`: ROW_ID, `{name}`, `{name}_detail`, in row order."""
        ctx = ctx.view(reasons=self.reasons_asked)
        # Three queries: why rows are missing input (once: the filter and the output read
        # it), the valid rows before `compute`, the output after it.
        checked = inputs.with_columns(missing_input_reason(self.requires).alias(_MISSING))
        columns = [ROW_ID, *self.requires, *(c for c in self.optional if c in inputs.columns)]
        valid = checked
        if "contexts" in self.requires:
            cleaned = ctx.cleaned_contexts(inputs)
            valid = pl.DataFrame(
                [*(c for c in checked.get_columns() if c.name != "contexts"), *cleaned]
            )
            columns.append(CONTEXT_POSITIONS)
        rows = collect_chunk(valid.lazy().filter(pl.col(_MISSING).is_null()).select(columns))
        if rows.height:
            scored = (await self.compute(rows, ctx)).lazy()
        else:
            scored = pl.LazyFrame(schema={ROW_ID: pl.UInt32})
        have = scored.collect_schema()
        fields = {SCORE: pl.Float64(), ERROR: pl.String(), **self.detail_fields}
        recast = [f for f, dtype in fields.items() if f in have and have[f] != dtype]
        if len(recast) > 1:
            # Cast one field at a time, in order: Polars runs one plan's casts in parallel, so
            # a metric returning two uncastable fields would fail on either, at random.
            done = scored.collect()
            for field in recast:
                done = done.with_columns(pl.col(field).cast(fields[field]))
            scored = done.lazy()
        scored = scored.with_columns(
            pl.col(field).cast(dtype) if field in have else pl.lit(None, dtype=dtype).alias(field)
            for field, dtype in fields.items()
        )
        rule = self.pass_rule
        return collect_chunk(
            checked.lazy()
            .select(ROW_ID, pl.col(_MISSING).alias("missing"))
            .join(scored, on=ROW_ID, how="left", maintain_order="left")
            .join(ctx.usage_by_row(), on=ROW_ID, how="left", maintain_order="left")
            .with_columns(pl.coalesce("missing", ERROR).alias(ERROR))
            .with_columns(
                # A score is only ever reported with no error, and always clipped into [0, 1].
                pl.when(pl.col(ERROR).is_null())
                .then(pl.col(SCORE).clip(0.0, 1.0))
                .otherwise(None)
                .alias(SCORE),
                *(pl.col(k).fill_null(0) for k in USAGE_FIELDS),
            )
            .select(
                ROW_ID,
                pl.col(SCORE).alias(self.name),
                pl.struct(*self.detail_fields, ERROR, *USAGE_FIELDS).alias(f"{self.name}_detail"),
                *([rule.passes(pl.col(SCORE)).alias(self.name + PASS_SUFFIX)] if rule else []),
            )
        )


def set_threshold(metric: Metric, threshold: Any, strict: Any) -> None:
    """Set a metric's pass rule, checked: a threshold in [0, 1] (or None), strict a bool."""
    where = type(metric).__name__
    if threshold is not None:
        threshold = check_threshold(threshold, f"{where}: threshold")
    if not isinstance(strict, bool):
        raise ConfigError(f"{where}: strict must be True or False, got {strict!r}")
    metric.threshold, metric.strict = threshold, strict


def _taking_threshold(init: Callable[..., None]) -> Callable[..., None]:
    """A subclass's `__init__` that also takes `threshold=` and `strict=` (keyword only)."""

    @functools.wraps(init)
    def takes(
        self: Metric, *args: Any, threshold: float | None = None, strict: bool = False, **kw: Any
    ) -> None:
        init(self, *args, **kw)
        set_threshold(self, threshold, strict)

    own = inspect.signature(init)
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in (("threshold", None), ("strict", False))
        if name not in own.parameters
    ]
    params = list(own.parameters.values())
    last = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    takes.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[*params[:last], *extra, *params[last:]]
    )
    takes._takes_threshold = True  # type: ignore[attr-defined]
    return takes


def check_reasons(metric: str, reasons: Any) -> bool | None:
    """`reasons` as given when it is True, False or None; a ConfigError naming the metric."""
    if reasons is not None and not isinstance(reasons, bool):
        raise ConfigError(
            f"{metric}: reasons must be True, False or None (follow the run), got {reasons!r}"
        )
    return reasons


def _asked_tasks(tasks: Callable[[Any], list[Task]]) -> Callable[[Any], list[Task]]:
    """A metric's `tasks` giving each task in the variant the metric sends."""

    @functools.wraps(tasks)
    def asked(self: Metric) -> list[Task]:
        return [task.with_reasons(self.reasons_asked) for task in tasks(self)]

    asked._reports_reasons = True  # type: ignore[attr-defined]
    return asked


def _recorded_config(config: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """A metric's `config` with `reasons` once set (a run sets it: `with_reasons`) when any
    of its tasks has reasons to leave out; left unset, the metric follows the run."""

    @functools.wraps(config)
    def recorded(self: Metric) -> dict[str, Any]:
        settings = dict(config(self))
        if self.reasons is not None and any(task.has_reasons for task in self.tasks()):
            settings["reasons"] = self.reasons
        rule = self.pass_rule
        if rule is not None:
            settings.update(threshold=rule.value, strict=rule.strict)
        return settings

    recorded._reports_reasons = True  # type: ignore[attr-defined]
    return recorded


Metric.config = _recorded_config(Metric.config)  # type: ignore[method-assign]


def average_precision(flags: pl.Expr) -> pl.Expr:
    """Average precision of a List(Boolean) of relevance flags in rank order.

    AP = sum_k (precision@k * r_k) / (number of relevant items); 0.0 when none is relevant.
    """
    return flags.list.eval(
        (
            (pl.element().cast(pl.Float64).cum_sum() / pl.int_range(1, pl.len() + 1))
            * pl.element().cast(pl.Float64)
        ).sum()
        / pl.element().cast(pl.Float64).sum().clip(lower_bound=1.0)
    ).list.first()
