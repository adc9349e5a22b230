"""Run metrics together over one frame and join the results back in row order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import polars as pl

from ragframe import __version__
from ragframe.columns import ROW_ID, list_columns, load_frame, select_inputs
from ragframe.engine.spec import RunSpec, refuse_unsupported
from ragframe.errors import ConfigError
from ragframe.io import open_input
from ragframe.judge.client import Judge, JudgeSession, RunStats
from ragframe.metrics import (
    Context,
    Metric,
    RagasScore,
    resolve,
    with_reasons,
    with_thresholds,
)
from ragframe.thresholds import PASS_SUFFIX


@dataclass
class RunResult:
    """A scored frame with what the run cost and how it went."""

    frame: pl.DataFrame
    metrics: list[Metric | RagasScore]
    judge: Judge
    stats: RunStats
    seconds: float
    started: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: The run specification it executed (`RunSpec.metadata`), recorded as "run".
    run: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Per metric: mean with its interval, rows scored, rows failed; then requests and
        tokens (and, for a sample, how many of the log's rows it holds)."""
        from ragframe.summary import metric_summary

        per_metric = {
            m.name: metric_summary(
                self.frame.get_column(m.name), m.direction, rule=getattr(m, "pass_rule", None)
            )
            for m in self.metrics
        }
        return {
            "rows": self.frame.height,
            "seconds": round(self.seconds, 3),
            "metrics": per_metric,
            **self.stats.as_dict(),
            **self.extra,
        }

    def metadata(self) -> dict[str, Any]:
        """What the output Parquet file records: version, judge, prompts, time. No API key."""
        return {
            "ragframe_version": __version__,
            "created": self.started,
            "judge": self.judge.describe(),
            "metrics": {
                m.name: {
                    "class": type(m).__name__,
                    "direction": m.direction,
                    "config": m.config() if isinstance(m, Metric) else {"of": list(m.of)},
                    "prompt_hashes": (
                        {t.name: t.prompt_hash for t in m.tasks()} if isinstance(m, Metric) else {}
                    ),
                }
                for m in self.metrics
            },
            "summary": self.summary(),
            **({"run": self.run} if self.run else {}),
            # A sampled run says so at the top level too, where `summarize` and the report
            # look for it: {"rows": N, "of": total, "seed": S, "index_column": "row_index"}.
            **({"sample": self.extra["sample"]} if "sample" in self.extra else {}),
        }

    def write_parquet(self, path: str | Path, *, overwrite: bool = False) -> None:
        """Write the scored frame with its metadata, atomically. An existing file is refused
        unless `overwrite=True`: the same rule as `ragframe score` without `--overwrite`."""
        from ragframe.io import write_parquet

        write_parquet(self.frame, path, self.metadata(), overwrite=overwrite)

    def __str__(self) -> str:
        from ragframe.summary import format_summary

        return format_summary(self.summary(), self.judge.local)

    def _repr_html_(self) -> str:
        from ragframe.summary import summary_html

        return summary_html(self.summary(), self.judge.local)


def check_output_names(frame: pl.DataFrame, metrics: list[Metric | RagasScore]) -> None:
    """Refuse to shadow an input column (inputs are never touched), and check that every
    aggregate has the columns it combines."""
    names = {m.name for m in metrics}
    for metric in metrics:
        passed = [metric.name + PASS_SUFFIX] if getattr(metric, "pass_rule", None) else []
        for name in (metric.name, f"{metric.name}_detail", *passed):
            if name in frame.columns:
                raise ConfigError(
                    f"the input already has a column {name!r}; drop or rename it before scoring "
                    f"{metric.name!r} again (e.g. df.drop({name!r}))"
                )
        if isinstance(metric, RagasScore):
            absent = [c for c in metric.of if c not in names and c not in frame.columns]
            if absent:
                raise ConfigError(
                    f"{metric.name!r} combines {list(metric.of)}, but {absent} is neither "
                    "requested nor a column of the input; add it to metrics=[...]"
                )


def check_judge(judge: Judge, metrics: Iterable[Metric | RagasScore]) -> None:
    """Refuse a run that needs what the judge cannot serve (an embedding model, logprobs),
    before it pays for every other request and then fails."""
    from ragframe.judge.capabilities import missing_capabilities

    problems = missing_capabilities(judge, [m for m in metrics if isinstance(m, Metric)])
    if problems:
        raise ConfigError("; ".join(problems) + ". Nothing was sent.")


def check_run(
    frame: pl.DataFrame,
    metrics: list[Metric | RagasScore],
    columns: Mapping[str, str] | None,
    judge: Judge | None = None,
) -> list[Metric]:
    """Every problem a run can know of before any request (or any row read): output names
    that would shadow an input, missing or mistyped inputs, and (given the judge) a metric
    that needs what the judge cannot serve. Returns the metrics that score (aggregates
    aside). `frame` may have no rows: only its columns and types are looked at."""
    check_output_names(frame, metrics)
    scorers = [m for m in metrics if isinstance(m, Metric)]
    optional = {m.name: m.optional for m in scorers if m.optional}
    select_inputs(frame.head(0), {m.name: m.requires for m in scorers}, columns, optional=optional)
    if judge is not None:
        check_judge(judge, scorers)
    return scorers


def needs_judge(metrics: Iterable[Metric | RagasScore]) -> bool:
    """Whether any metric asks an LLM or an embedder (else no endpoint is configured)."""
    return any(isinstance(m, Metric) and (m.uses_llm or m.uses_embeddings) for m in metrics)


#: Exit status of the command line when some metric failed on every row it could score
#: (1 is kept for quality gates, 2 is a configuration or input error, 130 an interruption).
EXIT_METRIC_FAILED = 4
#: How `ragframe.columns.missing_input_reason` starts: such rows are never sent to the judge.
MISSING_INPUT = "missing input:"


def failed_metrics(
    scored: pl.DataFrame | pl.LazyFrame,
    metrics: Iterable[Metric | RagasScore],
    stats: RunStats,
) -> dict[str, str]:
    """Metrics that failed on every row they could score -> the first row's error.

    A metric failed on every row when at least one row had all its inputs (its error does not
    start with "missing input:"), none of those rows got a score, and the run had failed
    requests (`stats.failures`, or failures remembered from an earlier run): so a metric
    whose every answer legitimately has nothing to score ("no factual claims found") in a run
    where the judge answered everything is not a failure, and rows with missing inputs never
    count. Aggregates are not judged and are left out. `scored` may be a scan of the written
    output (only these columns are read).
    """
    if not sum(stats.failures.values()) and not stats.remembered_failures:
        return {}
    names = [m.name for m in metrics if isinstance(m, Metric)]
    if not names:
        return {}
    exprs = []
    for name in names:
        error = pl.col(f"{name}_detail").struct.field("error")
        judged = error.is_null() | ~error.str.starts_with(MISSING_INPUT)
        exprs += [
            judged.sum().alias(f"{name}:judged"),
            pl.col(name).is_not_null().sum().alias(f"{name}:scored"),
            error.filter(judged & pl.col(name).is_null()).first().alias(f"{name}:error"),
        ]
    row = scored.lazy().select(exprs).collect().row(0, named=True)
    return {
        name: row[f"{name}:error"] or "no score and no reason"
        for name in names
        if row[f"{name}:judged"] and not row[f"{name}:scored"]
    }


def aggregate_columns(frame: pl.DataFrame, aggregate: RagasScore) -> pl.DataFrame:
    """The aggregate's score and detail (which inputs were null), computed without requests."""
    missing = pl.concat_list(
        [pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in aggregate.of]
    ).list.drop_nulls()
    return frame.select(
        aggregate.expression(),
        pl.struct(
            pl.lit(list(aggregate.of), dtype=pl.List(pl.String)).alias("of"),
            pl.when(missing.list.len() > 0)
            .then(pl.lit("null input score: ") + missing.list.join(", "))
            .alias("error"),
        ).alias(f"{aggregate.name}_detail"),
    )


async def score_frame(
    frame: pl.DataFrame,
    metrics: list[Metric | RagasScore],
    session: JudgeSession,
    columns: Mapping[str, str] | None = None,
) -> pl.DataFrame:
    """Score one frame with a judge session: the input plus a score and a detail column per
    metric (and `{metric}_pass` for a metric with a threshold).

    A metric whose `reasons` is unset asks for reasons as the judge says (`Judge.reasons`)."""
    scorers = [m for m in with_reasons(metrics, session.judge.reasons) if isinstance(m, Metric)]
    inputs = select_inputs(
        frame,
        {m.name: m.requires for m in scorers},
        columns,
        max_chars=session.judge.max_text_chars,
        optional={m.name: m.optional for m in scorers if m.optional},
    )
    ctx = Context(session, {})
    results = await asyncio.gather(*(m.run(inputs, ctx.view()) for m in scorers))
    scored = frame.hstack([col for result in results for col in result.drop(ROW_ID).get_columns()])
    for aggregate in (m for m in metrics if isinstance(m, RagasScore)):
        scored = scored.hstack(aggregate_columns(scored, aggregate).get_columns())
    return scored


def work_plan(metrics: Iterable[Metric | RagasScore], rows: int) -> dict[str, int]:
    """The prompts each task is expected to be asked, for the progress bar's total
    (`JudgeSession.plan`): one per row per task of each metric. An estimate, refined as each
    stage starts (rows with missing inputs, cached answers and repeats come off then)."""
    plan: dict[str, int] = {}
    for metric in metrics:
        if isinstance(metric, Metric) and metric.uses_llm:
            for task in metric.tasks():
                plan[task.name] = plan.get(task.name, 0) + rows
    return plan


def choose_metrics(
    metrics: Iterable[str | Metric | RagasScore] | str,
    present: Iterable[str],
    columns: Mapping[str, str] | None,
    extra: dict[str, Any] | None = None,
) -> list[Metric | RagasScore]:
    """The metrics asked for; `"all"`: every metric whose inputs the frame has (`present`, its
    columns), the others recorded in `extra["skipped_metrics"]` with why."""
    from ragframe.catalog import all_metrics, is_all

    if not is_all(metrics):
        return resolve(metrics)  # type: ignore[arg-type]
    chosen, skipped = all_metrics(present, columns)
    if extra is not None:
        extra["skipped_metrics"] = skipped
    if not chosen:
        raise ConfigError(f"metrics='all', but the input has no metric's inputs: {skipped}")
    return list(chosen)


def prepare_metrics(
    metrics: Iterable[str | Metric | RagasScore],
    judge: Judge,
    reasons: bool | None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
) -> list[Metric | RagasScore]:
    """The run's metric instances, each asking for reasons or not (the metric's own setting,
    else the run's `reasons=`, else the judge's `Judge.reasons`), with the run's thresholds
    and strict modes (by metric name) set."""
    chosen = with_reasons(resolve(metrics), judge.reasons if reasons is None else reasons)
    return with_thresholds(chosen, thresholds, strict)


@dataclass
class Prepared:
    """A run checked and ready to send: its metrics, its judge, and what it records."""

    metrics: list[Metric | RagasScore]
    judge: Judge
    #: Whether any metric asks an LLM or an embedder (else no endpoint is opened).
    uses_judge: bool
    extra: dict[str, Any]
    started: str

    def session(self, backend: str = "live") -> tuple[JudgeSession, Any]:
        """A judge session and the context that opens it (nothing opened when no metric
        needs the judge: string- and ID-based metrics only start no endpoint or model)."""
        session = self.judge.session(backend)  # type: ignore[arg-type]
        return session, (session if self.uses_judge else contextlib.nullcontext())


def prepare_run(
    head: pl.DataFrame,
    spec: RunSpec,
    judge: Judge | None,
    extra: dict[str, Any] | None = None,
) -> Prepared:
    """Every path's preparation, the same for all: the metrics chosen (for "all": those
    whose inputs `head` has, the skipped ones in `extra`), the judge (default: `Judge()` with
    a cache only when a metric needs one), thresholds and reasons set, and every check a
    run can make before a row is read or a request sent. Only `head`'s columns and types are
    looked at."""
    extra = {} if extra is None else extra
    resolved = choose_metrics(spec.metrics, head.columns, spec.columns, extra)
    uses_judge = needs_judge(resolved)
    judge = judge if judge is not None else Judge(cache=uses_judge)
    metric_list = prepare_metrics(resolved, judge, spec.reasons, spec.thresholds, spec.strict)
    check_run(head.head(0), metric_list, spec.columns, judge)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Prepared(metric_list, judge, uses_judge, extra, started)


def sampled_frame(
    data: Any, sample: int | None, seed: int, columns: Mapping[str, str] | None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The frame to score: all of `data`, or a uniform random sample of `sample` rows of it
    (with `row_index`, each row's position in the log) and what the sample was."""
    if sample is None:
        return load_frame(data, columns), {}
    from ragframe.sample import draw_sample

    drawn = draw_sample(data, sample, seed=seed, columns=columns)
    return load_frame(drawn.frame, columns), {"sample": drawn.describe()}


class RunOptions(TypedDict, total=False):
    """The keyword options of `evaluate`, `run` and their async twins (see `evaluate`)."""

    judge: Judge | None
    columns: Mapping[str, str] | None
    sample: int | None
    seed: int
    reasons: bool | None
    thresholds: Mapping[str, float] | None
    strict: Iterable[str]
    repeats: int


def spec_of(metrics: Any, options: RunOptions) -> RunSpec:
    """The run specification of `evaluate(data, metrics, **options)`."""
    return RunSpec.of(metrics, **{k: v for k, v in options.items() if k != "judge"})


async def execute(
    data: Any, spec: RunSpec, judge: Judge | None = None, *, path: str = "in-memory"
) -> RunResult:
    """Run a specification in memory: the one orchestration of `evaluate`, `run` and
    `ragframe score --sample / --repeats`."""
    from ragframe.repeats import check_repeats

    refuse_unsupported(spec, path)
    repeats = check_repeats(spec.repeats)
    frame, extra = sampled_frame(data, spec.sample, spec.seed, spec.columns)
    ready = prepare_run(frame, spec, judge, extra)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    if repeats > 1:  # k runs at the judge's seed + 0..k-1, combined (see ragframe.repeats)
        from ragframe.repeats import score_repeats

        repeated = await score_repeats(
            frame, ready.metrics, ready.judge, repeats, columns=spec.columns, seed=spec.seed
        )
        ready.extra["repeats"] = repeated.summary
        scored, stats = repeated.frame, repeated.stats
    else:
        session, opened = ready.session()
        session.plan(work_plan(ready.metrics, frame.height))
        async with opened:
            scored = await score_frame(frame, ready.metrics, session, spec.columns)
        stats = session.stats
    result = RunResult(
        scored, ready.metrics, ready.judge, stats, loop.time() - t0, ready.started, ready.extra
    )
    result.run = spec.metadata(path, ready.judge)
    return result


async def arun(
    data: Any, metrics: Iterable[str | Metric | RagasScore], **options: Unpack[RunOptions]
) -> RunResult:
    """Score `data` and return the frame with the run's statistics (async); the options of
    `evaluate`."""
    return await execute(data, spec_of(metrics, options), options.get("judge"))


async def aestimate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore],
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    chunk_rows: int = 2000,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """What scoring `data` would send, without sending anything (a dry run).

    Requests the cache already answers are free and not counted. Multi-stage metrics are
    followed through placeholder answers (see `ragframe.judge.estimate`), so their later stages
    are counted at a typical size. Embedding requests are not counted (they are cheap). A file
    (Parquet, JSON Lines or CSV) is counted `chunk_rows` rows at a time, in the memory a
    streamed run needs; identical prompts are counted once within a chunk (and a frame), once
    per chunk across chunks, so for a file with repeats the figure is an upper bound. With
    `repeats` k, each repeat's requests are counted at its own judge seed, as `run` sends them
    (their cached answers are free too).
    """
    from ragframe.repeats import check_repeats, repeat_judges

    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be at least 1, got {chunk_rows}")
    repeats = check_repeats(repeats)
    # `head`: what validation looks at (the columns and types; rows are not needed).
    source = None
    if sample is not None:
        head, _ = sampled_frame(data, sample, seed, columns)
    elif isinstance(data, str | Path):
        source = open_input(data, list_columns=list_columns(columns))
        head = source.schema_frame()
    else:
        head = load_frame(data, columns)
    spec = RunSpec.of(metrics, columns=columns, reasons=reasons)
    ready = prepare_run(head, spec, judge if judge is not None else Judge())
    totals: dict[str, int] = {}
    rows = 0
    for one in repeat_judges(ready.judge, repeats):
        session = one.session(backend="dry")
        chunks: Iterable[pl.DataFrame] = [head] if source is None else source.chunks(chunk_rows)
        rows = 0
        for chunk in chunks:
            await score_frame(chunk, ready.metrics, session, columns)
            session.forget()
            rows += chunk.height
        for key, value in session.estimate.items():
            totals[key] = totals.get(key, 0) + value
    return _estimate_figures(ready.judge, totals, rows, repeats)


def _estimate_figures(
    judge: Judge, totals: Mapping[str, int], rows: int, repeats: int
) -> dict[str, Any]:
    """A dry run's counts as `estimate` reports them, priced at the judge's price."""
    from ragframe.pricing import cost

    prompt, completion = totals.get("prompt_tokens", 0), totals.get("completion_tokens", 0)
    dollars = cost(judge.price, prompt, completion)
    return {
        "rows": rows,
        "repeats": repeats,
        "requests": totals.get("requests", 0),
        "requests_by_task": {
            k.split(":", 1)[1]: v for k, v in totals.items() if k.startswith("requests:")
        },
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "model": judge.model,
        "cost_usd": None if dollars is None else round(dollars, 6),
    }


def estimate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore],
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    chunk_rows: int = 2000,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """Estimate requests, tokens and cost before any request is sent (`--dry-run`)."""
    options = {"judge": judge, "columns": columns, "chunk_rows": chunk_rows, "sample": sample}
    options |= {"seed": seed, "reasons": reasons, "repeats": repeats}
    return run_sync(aestimate(data, metrics, **options))  # type: ignore[no-any-return]


async def aevaluate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore] = ("faithfulness", "answer_relevancy"),
    **options: Unpack[RunOptions],
) -> pl.DataFrame:
    """Async twin of `evaluate`, for callers already inside an event loop."""
    return (await arun(data, metrics, **options)).frame


def run_sync(coro: Any) -> Any:
    """Run a coroutine from sync code, also inside a running loop (Jupyter): there it runs on
    a worker thread with its own loop, so the notebook's loop is never blocked re-entrantly."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ragframe") as pool:
        return pool.submit(asyncio.run, coro).result()


def run(
    data: Any, metrics: Iterable[str | Metric | RagasScore], **options: Unpack[RunOptions]
) -> RunResult:
    """Score `data`; return the frame with the run's statistics and metadata (the options
    of `evaluate`)."""
    return run_sync(arun(data, metrics, **options))  # type: ignore[no-any-return]


def evaluate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore] = ("faithfulness", "answer_relevancy"),
    **options: Unpack[RunOptions],
) -> pl.DataFrame:
    """Score a RAG log: every input column and row unchanged, plus `{metric}` (Float64 in
    [0, 1], null when not computable) and `{metric}_detail` (typed verdicts, reasons, error).

    `data` is a Polars DataFrame or LazyFrame, a pandas DataFrame or the path of a Parquet,
    JSON Lines or CSV file; works as `df.pipe(evaluate, metrics=[...])`. Options, all
    keyword-only (`RunOptions`):

    judge : the `Judge` (default: `Judge()`, from the environment; the embedded judge when
        no endpoint or key is set).
    columns : rename inputs, {"question": "my_prompt", ...}.
    sample : score a uniform random sample of this many rows of `data` instead of all of it,
        drawn while streaming (a file is never loaded whole) and reproducible for `seed`. The
        sample's rows keep their order and gain `row_index`, their 0-based position in
        `data`, so they join back to the log; the run summary says the figures come from a
        sample of N of the log's rows, each mean with its interval.
    seed : the sample's seed, and the repeats' base seed (default 0).
    reasons : False to ask the judge for verdicts without a written reason each (fewer
        completion tokens; the detail keeps its reason fields, null). Default: the judge's
        setting (`Judge.reasons`: on, except for the embedded judge). A metric's own
        `reasons=` wins over both.
    thresholds : pass thresholds by metric name ({"faithfulness": 0.8}), as a metric's own
        `threshold=` sets them: each such metric gets a Boolean `{metric}_pass` column (null
        where the score is null) and the summary its pass rate and ✅ / ❌.
    strict : metric names in strict mode: a row passes only with a perfect score.
    repeats : score the rows this many times, at the judge's seed + 0..k-1 (distinct cached
        answers; a rerun is free): `{metric}` is then the mean of the k scores,
        `{metric}_repeats` lists them, and the summary gives per metric the per-row standard
        deviation, the test-retest reliability with its interval and the runs to average for
        0.9 (see `ragframe.repeats`).
    """
    return run(data, metrics, **options).frame
