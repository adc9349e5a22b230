"""Run metrics together over one frame in memory and join the results back in row order:
`evaluate`, `run`, `estimate` and their async twins, all through `execute`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import polars as pl

from ragframe._sync import run_sync
from ragframe.engine.jury import check_jury, execute_jury, refuse_lead_and_jury
from ragframe.engine.prepare import prepare_run, sampled_frame, score_frame, work_plan
from ragframe.engine.result import RunResult
from ragframe.engine.spec import DEFAULT_CHUNK_ROWS, RunSpec, refuse_unsupported
from ragframe.errors import ConfigError
from ragframe.inputs.columns import list_columns, load_frame
from ragframe.inputs.io import open_input
from ragframe.judge.client import Judge
from ragframe.metrics import CORE, Metric, RagasScore
from ragframe.metrics.calibration import add_p_human, run_calibrations


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
    calibration: Any
    judges: Sequence[Judge]
    aggregate: str


def spec_of(metrics: Any, options: RunOptions) -> RunSpec:
    """The run specification of `evaluate(data, metrics, **options)`; an option `evaluate`
    does not take (a gate, a dry run: the command line's) is refused, never dropped."""
    _refuse_unknown(options, RunOptions, "evaluate / run")
    return RunSpec.of(metrics, **{k: v for k, v in options.items() if k != "judge"})


def _refuse_unknown(options: Mapping[str, Any], taken: Any, who: str) -> None:
    """A ConfigError for an option `who` does not take (a TypedDict of `taken` ones): the
    keyword is accepted by `**options`, so it would otherwise be dropped without a word."""
    known = taken.__optional_keys__ | taken.__required_keys__
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"{who}: no such option {unknown[0]!r} (the options: {sorted(known)}); for gates "
            "use ragframe.check_gates(frame, ...), for a dry run ragframe.estimate(...), for a "
            "cost cap Judge(max_cost=...)"
        )


async def execute(
    data: Any, spec: RunSpec, judge: Judge | None = None, *, path: str = "in-memory"
) -> RunResult:
    """Run a specification in memory: the one orchestration of `evaluate`, `run` and
    `ragframe score --sample / --repeats`."""
    from ragframe.engine.repeats import check_repeat_seeds

    refuse_unsupported(spec, path)
    repeats = spec.repeats  # checked when the spec was made
    if judge is not None and repeats > 1:  # seeds past the bound, before any row is read
        check_repeat_seeds(judge, repeats)
    judges = check_jury(spec, judge) if spec.judges else []
    frame, extra = sampled_frame(data, spec.sample, spec.seed, spec.columns)
    if judges:  # a jury: each judge runs this function, then the verdicts are combined
        # Every judge's checks (and the calibrations') before the lead sends its first request.
        ready = [
            prepare_run(frame, spec, j, extra if i == 0 else None) for i, j in enumerate(judges)
        ]
        calibrations = run_calibrations(spec.calibration, ready[0].metrics, judges[0])
        return await execute_jury(frame, extra, spec, judges, calibrations, path, execute)
    ready = prepare_run(frame, spec, judge, extra)
    calibrations = run_calibrations(spec.calibration, ready.metrics, ready.judge)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    if repeats > 1:  # k runs at the judge's seed + 0..k-1, combined (see ragframe.repeats)
        from ragframe.engine.repeats import score_repeats

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
    scored = add_p_human(scored, calibrations)
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


class EstimateOptions(TypedDict, total=False):
    """The keyword options of `estimate` / `aestimate` (see `aestimate`)."""

    judge: Judge | None
    columns: Mapping[str, str] | None
    chunk_rows: int
    sample: int | None
    seed: int
    reasons: bool | None
    repeats: int
    judges: Sequence[Judge]


async def aestimate(
    data: Any, metrics: Iterable[str | Metric | RagasScore], **options: Unpack[EstimateOptions]
) -> dict[str, Any]:
    """What scoring `data` would send, without sending anything (a dry run).

    Requests the cache already answers are free and not counted. Multi-stage metrics are
    followed through placeholder answers (see `ragframe.judge.estimate`), so their later stages
    are counted at a typical size. Embedding requests are not counted (they are cheap). A file
    (Parquet, JSON Lines or CSV) is counted `chunk_rows` rows (default 2,000) at a time, in the
    memory a streamed run needs; identical prompts are counted once within a chunk (and a
    frame), once per chunk across chunks, so for a file with repeats the figure is an upper
    bound. With `repeats` k, each repeat's requests are counted at its own judge seed, as `run`
    sends them (their cached answers are free too). With `judges` (a jury), every judge's
    requests are counted at its own price and added up: an upper bound, since the judges after
    the first verify the first judge's claims instead of extracting their own. `judge`,
    `columns`, `sample`, `seed`, `reasons`: as in `evaluate`.
    """
    from ragframe.engine.repeats import check_repeat_seeds, check_repeats, repeat_judges

    _refuse_unknown(options, EstimateOptions, "estimate")
    judges = options.pop("judges", ())
    if judges:
        refuse_lead_and_jury(options.pop("judge", None))
        each = [await aestimate(data, metrics, **options, judge=j) for j in judges]
        return _jury_estimate(each)
    chunk_rows, columns = options.get("chunk_rows", DEFAULT_CHUNK_ROWS), options.get("columns")
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be at least 1, got {chunk_rows}")
    repeats = check_repeats(options.get("repeats", 1))
    if options.get("judge") is not None and repeats > 1:
        check_repeat_seeds(options["judge"], repeats)
    head, source = _head(data, options)
    spec = RunSpec.of(metrics, columns=columns, reasons=options.get("reasons"))
    judge = options.get("judge")
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


def _head(data: Any, options: EstimateOptions) -> tuple[pl.DataFrame, Any]:
    """What a dry run validates (the columns and types: a sample, a file's schema, or the
    frame) and, for a file, the file to read chunk by chunk."""
    columns, sample = options.get("columns"), options.get("sample")
    if sample is not None:
        return sampled_frame(data, sample, options.get("seed", 0), columns)[0], None
    if isinstance(data, str | Path):
        source = open_input(data, list_columns=list_columns(columns))
        return source.schema_frame(), source
    return load_frame(data, columns), None


def _jury_estimate(each: list[dict[str, Any]]) -> dict[str, Any]:
    """A jury's dry run: every judge's counts and cost added up, each judge's kept."""
    total = dict(each[0])
    for key in ("requests", "prompt_tokens", "completion_tokens"):
        total[key] = sum(e[key] for e in each)
    costs = [e["cost_usd"] for e in each]
    total["cost_usd"] = None if None in costs else round(sum(costs), 6)
    total["model"] = ", ".join(e["model"] for e in each)
    total["judges"] = each
    return total


def _estimate_figures(
    judge: Judge, totals: Mapping[str, int], rows: int, repeats: int
) -> dict[str, Any]:
    """A dry run's counts as `estimate` reports them, priced at the judge's price."""
    from ragframe.judge.pricing import cost

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
    data: Any, metrics: Iterable[str | Metric | RagasScore], **options: Unpack[EstimateOptions]
) -> dict[str, Any]:
    """Estimate requests, tokens and cost before any request is sent (`--dry-run`); the
    options of `aestimate`."""
    return run_sync(aestimate(data, metrics, **options))  # type: ignore[no-any-return]


async def aevaluate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    **options: Unpack[RunOptions],
) -> pl.DataFrame:
    """Async twin of `evaluate`, for callers already inside an event loop."""
    return (await arun(data, metrics, **options)).frame


def run(
    data: Any, metrics: Iterable[str | Metric | RagasScore], **options: Unpack[RunOptions]
) -> RunResult:
    """Score `data`; return the frame with the run's statistics and metadata (the options
    of `evaluate`)."""
    return run_sync(arun(data, metrics, **options))  # type: ignore[no-any-return]


def evaluate(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    **options: Unpack[RunOptions],
) -> pl.DataFrame:
    """Score a RAG log: every input column and row unchanged, plus `{metric}` (Float64 in
    [0, 1], null when not computable) and `{metric}_detail` (typed verdicts, reasons, error).

    `data` is a Polars DataFrame or LazyFrame, a pandas DataFrame or the path of a Parquet,
    JSON Lines or CSV file; works as `df.pipe(evaluate, metrics=[...])`. Options, all
    keyword-only (`RunOptions`):

    judge : the `Judge` (default: `Judge()`, from the environment; the embedded judge when
        no model, endpoint or key is named, or when asked for as `Judge("local")`).
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
    repeats : score the rows this many times, 1 to 100 (`MAX_REPEATS`; more is a ConfigError
        before anything is read or sent), at the judge's seed + 0..k-1 (distinct cached
        answers; a rerun is free): `{metric}` is then the mean of the k scores,
        `{metric}_repeats` lists them, and the summary gives per metric the per-row standard
        deviation, the test-retest reliability with its interval and the runs to average for
        0.9 (see `ragframe.engine.repeats`).
    judges : a jury (two or more `Judge`s, instead of `judge`): every metric scored by each
        judge through its own pool, limits, cache and cost; `{metric}` is then the jury's
        score (faithfulness: a majority vote on each shared claim, then supported / claims;
        the others: the mean, or the median with `aggregate="median"`), each judge's kept as
        `{metric}@{model}`, and the summary gives the judges' agreement (see
        `ragframe.engine.jury`).
    calibration : a `Calibration` (`ragframe.calibrate`), its JSON file, or a list of them:
        each adds `{metric}_p_human`, the probability that a person labels the row true
        (null where the score is null); a calibration fitted for another judge or prompt is
        a warning.
    """
    return run(data, metrics, **options).frame
