"""Run metrics together over one frame in memory and join the results back in row order:
`evaluate`, `run`, `estimate` and their async twins, all through `execute`.

Their options are keyword-only parameters, typed and named in each signature, so that a
notebook completes them and the API page lists them one by one. The frame type that goes in
comes out: a pandas frame is converted at this edge, once each way (`RunResult.to_pandas`);
the engine's work is Polars only, and pandas is imported only when the input is pandas.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from ragframe._sync import run_sync
from ragframe.engine.jury import check_jury, execute_jury, refuse_lead_and_jury
from ragframe.engine.prepare import prepare_run, sampled_frame, score_frame, work_plan
from ragframe.engine.result import RowsFailedWarning, RunResult, index_columns, is_pandas
from ragframe.engine.spec import DEFAULT_CHUNK_ROWS, RunSpec, refuse_unsupported
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.columns import list_columns, load_frame
from ragframe.inputs.io import open_input, refuse_unwritable_output
from ragframe.judge.client import Judge
from ragframe.metrics import CORE, Metric, RagasScore
from ragframe.metrics.calibration import Calibration, add_p_human, run_calibrations

if TYPE_CHECKING:
    import pandas as pd


def _refuse_unknown(unknown: Mapping[str, Any], taker: Callable[..., Any], who: str) -> None:
    """A ConfigError for a keyword `taker` does not take. Python would raise a TypeError of
    its own; this one also says where the command line's options went (gates, a dry run)."""
    if not unknown:
        return
    known = sorted(
        name
        for name, p in inspect.signature(taker).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )
    raise ConfigError(
        f"{who}: no such option {sorted(unknown)[0]!r} (the options: {known}); for gates "
        "use ragframe.check_gates(frame, ...), for a dry run ragframe.estimate(...), for a "
        "cost cap Judge(max_cost=...)"
    )


def _rows(
    data: Any,
    sample: int | None,
    seed: int,
    columns: Mapping[str, str] | None,
    storage_options: Mapping[str, Any] | None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The frame to score and what sample it is (`sampled_frame`); a path given storage
    options (an `s3://` URL's credentials, say) is read with them, a sample drawn while
    streaming as for any file. Storage options are never recorded in the run's metadata:
    they may hold a key."""
    if sample is not None:
        _refuse_index_clash(data)
    if storage_options is None:
        return sampled_frame(data, sample, seed, columns)
    if not isinstance(data, str | Path):
        raise ConfigError(
            f"storage_options applies to a path (s3://..., gs://...), but data is a "
            f"{type(data).__name__}: drop storage_options, or pass the path"
        )
    options = dict(storage_options)
    if sample is None:
        return load_frame(data, columns, storage_options=options), {}
    from ragframe.inputs.sample import draw_sample

    drawn = draw_sample(data, sample, seed=seed, columns=columns, storage_options=options)
    return load_frame(drawn.frame, columns), {"sample": drawn.describe()}


def _refuse_index_clash(data: Any) -> None:
    """A frame to sample that already has `row_index`, where the sample puts each row's
    position: said with the rename of the frame's own library (pandas' `columns=`), since
    `draw_sample`'s `index_column=` is no option of `evaluate`. A file's is said by
    `draw_sample` as it reads the file's columns."""
    from ragframe.inputs.sample import INDEX_COLUMN

    rename = f"{{{INDEX_COLUMN!r}: 'original_{INDEX_COLUMN}'}}"
    if isinstance(data, pl.DataFrame | pl.LazyFrame):
        names, how = data.collect_schema().names(), f"df.rename({rename})"
    elif is_pandas(data) and hasattr(data, "columns"):
        names, how = [str(c) for c in data.columns], f"df.rename(columns={rename})"
    else:
        return
    if INDEX_COLUMN in names:
        raise InputError(
            f"the frame already has a column {INDEX_COLUMN!r}, where sample= puts each sampled "
            f"row's position in the log; rename it first ({how}), or score every row (no sample=)"
        )


async def execute(
    data: Any,
    spec: RunSpec,
    judge: Judge | None = None,
    *,
    path: str = "in-memory",
    storage_options: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run a specification in memory: the one orchestration of `evaluate`, `run` and
    `ragframe score --sample / --repeats`."""
    from ragframe.engine.repeats import check_repeat_seeds

    refuse_unsupported(spec, path)
    repeats = spec.repeats  # checked when the spec was made
    if judge is not None and repeats > 1:  # seeds past the bound, before any row is read
        check_repeat_seeds(judge, repeats)
    judges = check_jury(spec, judge) if spec.judges else []
    frame, extra = _rows(data, spec.sample, spec.seed, spec.columns, storage_options)
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
        session.plan(work_plan(ready.metrics, frame, spec.columns))
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
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    repeats: int = 1,
    calibration: Calibration | str | Path | Sequence[Calibration | str | Path] | None = None,
    judges: Sequence[Judge] = (),
    aggregate: Literal["mean", "median"] = "mean",
    storage_options: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> RunResult:
    """Async twin of `run`, for callers already inside an event loop (`await` it in
    Jupyter). The parameters are `run`'s."""
    _refuse_unknown(unknown, arun, "evaluate / run")
    result = await _run(
        data,
        metrics,
        judge,
        storage_options,
        columns=columns,
        sample=sample,
        seed=seed,
        reasons=reasons,
        thresholds=thresholds,
        strict=strict,
        repeats=repeats,
        calibration=calibration,
        judges=judges,
        aggregate=aggregate,
    )
    warn_failed(result)
    return result


def run(
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    repeats: int = 1,
    calibration: Calibration | str | Path | Sequence[Calibration | str | Path] | None = None,
    judges: Sequence[Judge] = (),
    aggregate: Literal["mean", "median"] = "mean",
    storage_options: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> RunResult:
    """Score `data` and keep the run: the scored frame with its statistics and metadata.

    What `evaluate` does, returning a `RunResult` instead of the bare frame: `str(result)`
    (or the result itself in Jupyter) is the run summary, `result.frame` the scored Polars
    frame, `result.to_pandas()` the same as pandas (with a pandas input's index and columns),
    and `result.write_parquet(path)` writes it with the run's metadata, which
    `ragframe.read_metadata`, `compare` and `report` read back.

    Args:
        data: What to score, as in `evaluate`.
        metrics: The metrics, as in `evaluate` (default: the four core metrics).
        judge: The `Judge`, as in `evaluate`.
        columns: Input columns renamed, as in `evaluate`.
        sample: Score a uniform random sample of this many rows, as in `evaluate`.
        seed: The sample's seed and the repeats' base seed, as in `evaluate`.
        reasons: False for verdicts without a written reason, as in `evaluate`.
        thresholds: Pass thresholds by metric name, as in `evaluate`.
        strict: Metric names in strict mode, as in `evaluate`.
        repeats: Times to score each row, as in `evaluate`.
        calibration: Calibrations to apply, as in `evaluate`.
        judges: A jury of judges instead of `judge`, as in `evaluate`.
        aggregate: How a jury combines scores, as in `evaluate`.
        storage_options: Options for reading a remote path, as in `evaluate`.
        **unknown: Refused with a `ConfigError`, as in `evaluate`.

    Returns:
        The run: `.frame`, `.stats`, `.summary()`, `.metadata()`, `.to_pandas()`,
        `.write_parquet(path)`.

    Raises:
        ConfigError: An option, metric or judge setting that cannot work (before any request).
        InputError: A missing or mistyped input column (before any request).

    Warns:
        RowsFailedWarning: Rows got no score, as `evaluate` warns.

    Examples:
        >>> result = ragframe.run("data/sample.parquet", ["faithfulness"])
        >>> print(result)  # the run summary
        >>> result.write_parquet("scored.parquet")
    """
    _refuse_unknown(unknown, run, "evaluate / run")
    result: RunResult = run_sync(
        _run(
            data,
            metrics,
            judge,
            storage_options,
            columns=columns,
            sample=sample,
            seed=seed,
            reasons=reasons,
            thresholds=thresholds,
            strict=strict,
            repeats=repeats,
            calibration=calibration,
            judges=judges,
            aggregate=aggregate,
        )
    )
    warn_failed(result)
    return result


async def _run(
    data: Any,
    metrics: Iterable[str | Metric | RagasScore],
    judge: Judge | None,
    storage_options: Mapping[str, Any] | None,
    output: str | Path | None = None,
    overwrite: bool = False,
    **options: Any,
) -> RunResult:
    """What `run` and `evaluate` (and their async twins) do, short of the warning each gives
    its caller: `output` checked before anything is read or sent, written after the run."""
    _refuse_output(data, output, overwrite)
    spec = RunSpec.of(metrics, **options)
    result = await execute(data, spec, judge, storage_options=storage_options)
    if is_pandas(data):  # kept for `to_pandas`: the input's index and columns as they were
        result.source = data
    if output is not None:
        result.write_parquet(output, overwrite=overwrite)
    return result


def warn_failed(result: RunResult) -> None:
    """Warn the caller of `evaluate` / `run` (in one line, a `RowsFailedWarning`) when rows
    got no score: a notebook shows it under the cell, where a null score would go unseen,
    and a CI script can make it an error. Pointed at the caller's line, past `df.pipe` and
    past asyncio's loop (`asyncio.run(ragframe.aevaluate(...))`, a task)."""
    line = result.failed_line()
    if line is None:
        return
    level, frame = 3, sys._getframe(2)  # 1: this function, 2: evaluate / run, 3: its caller
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_BETWEEN):
        frame, level = frame.f_back, level + 1
    warnings.warn(line, RowsFailedWarning, stacklevel=level)


#: Modules between a caller and `evaluate`: `df.pipe(ragframe.evaluate, ...)` (pandas,
#: Polars), and the event loop that runs `aevaluate` for `asyncio.run` or a task.
_BETWEEN = ("pandas.", "polars.", "asyncio.")


def _refuse_output(data: Any, output: str | Path | None, overwrite: bool) -> None:
    """`evaluate(output=...)`'s file, before anything is read or sent: not the input, not an
    existing file unless `overwrite=True` (as `ragframe score -o` without --overwrite), and
    nothing the write would fail on after the run (a URL, a .csv name, a directory, a
    directory that cannot be written)."""
    if output is None:
        return
    refuse_unwritable_output(output)
    target = Path(output)
    if isinstance(data, str | Path) and Path(data).resolve() == target.resolve():
        raise ConfigError("output must not be the input file; the input is never written")
    if target.exists() and not overwrite:
        raise ConfigError(f"output {str(target)!r} exists; pass overwrite=True to replace it")
    if is_pandas(data) and hasattr(data, "columns"):
        index_columns(data)  # the named index is written too: said now if it cannot be


async def aevaluate(
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    repeats: int = 1,
    calibration: Calibration | str | Path | Sequence[Calibration | str | Path] | None = None,
    judges: Sequence[Judge] = (),
    aggregate: Literal["mean", "median"] = "mean",
    storage_options: Mapping[str, Any] | None = None,
    output: str | Path | None = None,
    overwrite: bool = False,
    **unknown: Any,
) -> pl.DataFrame | pd.DataFrame:
    """Async twin of `evaluate`, for callers already inside an event loop (`await` it in
    Jupyter). The parameters are `evaluate`'s."""
    _refuse_unknown(unknown, aevaluate, "evaluate / run")
    result = await _run(
        data,
        metrics,
        judge,
        storage_options,
        output,
        overwrite,
        columns=columns,
        sample=sample,
        seed=seed,
        reasons=reasons,
        thresholds=thresholds,
        strict=strict,
        repeats=repeats,
        calibration=calibration,
        judges=judges,
        aggregate=aggregate,
    )
    warn_failed(result)
    return result.to_pandas() if result.source is not None else result.frame


def evaluate(
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    repeats: int = 1,
    calibration: Calibration | str | Path | Sequence[Calibration | str | Path] | None = None,
    judges: Sequence[Judge] = (),
    aggregate: Literal["mean", "median"] = "mean",
    storage_options: Mapping[str, Any] | None = None,
    output: str | Path | None = None,
    overwrite: bool = False,
    **unknown: Any,
) -> pl.DataFrame | pd.DataFrame:
    """Score a RAG log: every input column and row unchanged, plus `{metric}` (Float64 in
    [0, 1], null when not computable) and `{metric}_detail` (typed verdicts, reasons, error).

    Works as `df.pipe(ragframe.evaluate, metrics=[...])`. The frame type that goes in comes
    out: a Polars DataFrame for a Polars DataFrame or a path; a LazyFrame is collected and a
    DataFrame comes out (scoring sends requests, which cannot wait for a later `collect`);
    a pandas DataFrame gives a pandas DataFrame with the input's index and columns as they
    were, the added columns in pandas' Arrow-backed types (`pd.ArrowDtype`: a score is
    `double[pyarrow]`, missing as `<NA>`; a detail cell is a dict of Python values, its
    fields reachable with `.struct.field("error")`). To keep the run's provenance (judge,
    prompts, summary) with the scores, pass `output=` or use `ragframe.run(...)` and its
    `write_parquet`.

    Args:
        data: A Polars DataFrame or LazyFrame, a pandas DataFrame, or the path of a Parquet,
            JSON Lines or CSV file.
        metrics: Metric names or instances, one name, a comma-separated string of names (as
            `--metrics` takes it), or `"all"` (default: the four core metrics, `CORE`).
        judge: The `Judge` (default: `Judge()`, from the environment; the embedded judge
            when no model, endpoint or key is named, or when asked for as `Judge("local")`).
        columns: Input columns renamed, `{"question": "my_prompt", ...}`.
        sample: Score a uniform random sample of this many rows of `data` instead of all of
            it, drawn while streaming (a file is never loaded whole) and reproducible for
            `seed`. The sample's rows keep their order and gain `row_index`, their 0-based
            position in `data`, so they join back to the log; the run summary says the
            figures come from a sample of N of the log's rows.
        seed: The sample's seed, and the repeats' base seed.
        reasons: False to ask the judge for verdicts without a written reason each (fewer
            completion tokens; the detail keeps its reason fields, null). None: the judge's
            setting (`Judge.reasons`: on, except for the embedded judge). A metric's own
            `reasons=` wins over both.
        thresholds: Pass thresholds by metric name (`{"faithfulness": 0.8}`), as a metric's
            own `threshold=` sets them: each such metric gets a Boolean `{metric}_pass`
            column (null where the score is null) and the summary its pass rate.
        strict: Metric names in strict mode: a row passes only with a perfect score.
        repeats: Score the rows this many times, 1 to 100 (`MAX_REPEATS`; more is a
            ConfigError before anything is read or sent), at the judge's seed + 0..k-1:
            `{metric}` is then the mean of the k scores, `{metric}_repeats` lists them, and
            the summary gives the per-row spread and the test-retest reliability (see
            `ragframe.engine.repeats`).
        calibration: A `Calibration` (`ragframe.calibrate`), its JSON file, or a list of
            them: each adds `{metric}_p_human`, the probability that a person labels the row
            true (null where the score is null); one fitted for another judge or prompt is a
            warning.
        judges: A jury (two or more `Judge`s, instead of `judge`): every metric scored by
            each judge through its own pool, limits, cache and cost; `{metric}` is then the
            jury's score, each judge's kept as `{metric}@{model}`, and the summary gives the
            judges' agreement (see `ragframe.engine.jury`).
        aggregate: How a jury combines the scores of metrics it does not vote on claim by
            claim: `"mean"` or `"median"`.
        storage_options: Options for reading a remote path (`s3://`, `gs://`, `az://`,
            `hf://`), as Polars takes them (`{"aws_region": "eu-west-1", ...}`); never
            recorded in the output's metadata.
        output: Also write the scored frame to this Parquet file with the run's metadata
            (judge, prompt hashes, summary), so that `ragframe.read_metadata`, `compare` and
            `report` see the run's provenance (a pandas frame's named index is written as
            its first columns); checked before anything is sent.
        overwrite: Replace an existing `output` (otherwise it is refused before the run).
        **unknown: Any other keyword is refused with a `ConfigError` naming it, never
            dropped; gates are `ragframe.check_gates`, a dry run `ragframe.estimate`, a cost
            cap `Judge(max_cost=...)`.

    Returns:
        The scored frame, in the type that went in (above).

    Raises:
        ConfigError: An option, metric, output or judge setting that cannot work (before any
            request).
        InputError: A missing or mistyped input column (before any request).

    Warns:
        RowsFailedWarning: Rows got no score (null): one line with the rows failed per
            metric and the first error; each row's reason is in `{metric}_detail.error`.

    Examples:
        >>> scored = df.pipe(ragframe.evaluate, metrics=["faithfulness"])
        >>> scored = ragframe.evaluate(df, output="scored.parquet")
        >>> ragframe.read_metadata("scored.parquet")["judge"]
    """
    _refuse_unknown(unknown, evaluate, "evaluate / run")
    result: RunResult = run_sync(
        _run(
            data,
            metrics,
            judge,
            storage_options,
            output,
            overwrite,
            columns=columns,
            sample=sample,
            seed=seed,
            reasons=reasons,
            thresholds=thresholds,
            strict=strict,
            repeats=repeats,
            calibration=calibration,
            judges=judges,
            aggregate=aggregate,
        )
    )
    warn_failed(result)
    return result.to_pandas() if result.source is not None else result.frame


async def aestimate(
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    repeats: int = 1,
    judges: Sequence[Judge] = (),
    storage_options: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> dict[str, Any]:
    """Async twin of `estimate`, for callers already inside an event loop. The parameters
    are `estimate`'s."""
    from ragframe.engine.repeats import check_repeat_seeds, check_repeats

    _refuse_unknown(unknown, aestimate, "estimate")
    if judges:
        refuse_lead_and_jury(judge)
        each = [
            await aestimate(
                data,
                metrics,
                judge=j,
                columns=columns,
                chunk_rows=chunk_rows,
                sample=sample,
                seed=seed,
                reasons=reasons,
                repeats=repeats,
                storage_options=storage_options,
            )
            for j in judges
        ]
        return _jury_estimate(each)
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be at least 1, got {chunk_rows}")
    repeats = check_repeats(repeats)
    if judge is not None and repeats > 1:
        check_repeat_seeds(judge, repeats)
    head, source = _head(data, columns, sample, seed, storage_options)
    spec = RunSpec.of(metrics, columns=columns, reasons=reasons)
    ready = prepare_run(head, spec, judge if judge is not None else Judge())
    return await _count(ready, head, source, chunk_rows, columns, repeats)


async def _count(
    ready: Any,
    head: pl.DataFrame,
    source: Any,
    chunk_rows: int,
    columns: Mapping[str, str] | None,
    repeats: int,
) -> dict[str, Any]:
    """A dry run's counts: every chunk through placeholder answers, once per repeat."""
    from ragframe.engine.repeats import repeat_judges

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
    return estimate_figures(ready.judge, totals, rows, repeats)


def _head(
    data: Any,
    columns: Mapping[str, str] | None,
    sample: int | None,
    seed: int,
    storage_options: Mapping[str, Any] | None,
) -> tuple[pl.DataFrame, Any]:
    """What a dry run validates (the columns and types: a sample, a file's schema, or the
    frame) and, for a file, the file to read chunk by chunk."""
    if sample is not None:
        return _rows(data, sample, seed, columns, storage_options)[0], None
    if isinstance(data, str | Path):
        options = None if storage_options is None else dict(storage_options)
        source = open_input(data, list_columns=list_columns(columns), storage_options=options)
        return source.schema_frame(), source
    return _rows(data, None, seed, columns, storage_options)[0], None


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


def estimate_figures(
    judge: Judge, totals: Mapping[str, int], rows: int, repeats: int
) -> dict[str, Any]:
    """A dry run's counts (a dry session's `estimate` counter) as `estimate` reports them,
    priced at the judge's price; `estimate_generate` reports each stage's the same way."""
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
    data: pl.DataFrame | pl.LazyFrame | pd.DataFrame | str | Path,
    metrics: Iterable[str | Metric | RagasScore] = CORE,
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    sample: int | None = None,
    seed: int = 0,
    reasons: bool | None = None,
    repeats: int = 1,
    judges: Sequence[Judge] = (),
    storage_options: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> dict[str, Any]:
    """What scoring `data` would send, without sending anything (a dry run, `--dry-run`).

    Requests the cache already answers are free and not counted. Multi-stage metrics are
    followed through placeholder answers (see `ragframe.judge.estimate`), so their later
    stages are counted at a typical size. Embedding requests are not counted (they are
    cheap).

    Args:
        data: What `evaluate` would score: a frame or the path of a file.
        metrics: The metrics, as in `evaluate` (default: the four core metrics).
        judge: The `Judge` whose price and cache count (default: `Judge()`).
        columns: Input columns renamed, as in `evaluate`.
        chunk_rows: A file is counted this many rows at a time, in the memory a streamed
            run needs; identical prompts are counted once within a chunk (and a frame), once
            per chunk across chunks, so for a file with repeats the figure is an upper bound.
        sample: Count a uniform random sample of this many rows, as `evaluate` would score.
        seed: The sample's seed.
        reasons: False for verdicts without a written reason, as in `evaluate`.
        repeats: Each repeat's requests counted at its own judge seed, as `run` sends them
            (their cached answers are free too).
        judges: A jury: every judge's requests counted at its own price and added up (an
            upper bound: the judges after the first verify the first judge's claims instead
            of extracting their own).
        storage_options: Options for reading a remote path, as in `evaluate`.
        **unknown: Refused with a `ConfigError` naming it, never dropped.

    Returns:
        `rows`, `repeats`, `requests` (and `requests_by_task`), `prompt_tokens`,
        `completion_tokens`, `model` and `cost_usd` (None when the judge has no price).

    Raises:
        ConfigError: An option, metric or judge setting that cannot work.
        InputError: A missing or mistyped input column.
    """
    _refuse_unknown(unknown, estimate, "estimate")
    return run_sync(  # type: ignore[no-any-return]
        aestimate(
            data,
            metrics,
            judge=judge,
            columns=columns,
            chunk_rows=chunk_rows,
            sample=sample,
            seed=seed,
            reasons=reasons,
            repeats=repeats,
            judges=judges,
            storage_options=storage_options,
        )
    )
