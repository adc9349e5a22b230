"""`score_partitions` (behind `ragframe score DIR -o OUT --ray`): a directory of Parquet
partitions scored on Ray into one output file per input file, each with a single-process
run's metadata, skipping the partitions already scored with the same metrics, judge,
settings and input."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict, Unpack

import polars as pl
import ray
import ray.data

from ragframe.engine.arrow import ArrowSession, Metrics, prepare, to_frame
from ragframe.engine.spec import RunSpec, refuse_unsupported
from ragframe.errors import RagframeError
from ragframe.inputs.io import check_writable
from ragframe.judge.client import Judge, RunStats
from ragframe.judge.pricing import with_cached_rate
from ragframe.metrics import Metric, RagasScore
from ragframe.ray.actors import start_registry
from ragframe.ray.dataset import batch_rows, check_actors, map_scores, raising_batch_errors
from ragframe.ray.limits import Limits, check_limits
from ragframe.ray.outputs import PartitionOutput, PartitionsResult, route
from ragframe.ray.partitions import (
    PART_COLUMN,
    ROW_COLUMN,
    Partition,
    find_partitions,
    one_schema,
    partition_dataset,
    run_identity,
    to_score,
)

#: The options that choose and set up the metrics (a `RunSpec`'s, as in `ragframe.evaluate`).
SCORING = ("columns", "reasons", "thresholds", "strict")
#: `evaluate`'s defaults for the options that place the actors.
ACTOR_DEFAULTS: dict[str, Any] = {
    "actors": 2,
    "cache_dir": None,
    "num_cpus": 1.0,
    "limits": "actor",
}


class PartitionOptions(TypedDict, total=False):
    """The keyword options of `score_partitions`: those of `ragframe.ray.evaluate`, with its
    defaults (actors 2, num_cpus 1.0, limits "actor"; none for the others)."""

    actors: int
    batch_size: int | None
    columns: Mapping[str, str] | None
    reasons: bool | None
    thresholds: Mapping[str, float] | None
    strict: Iterable[str]
    cache_dir: str | Path | None
    num_cpus: float
    limits: Limits


def score_partitions(
    source: str | Path,
    out_dir: str | Path,
    metrics: Metrics,
    judge: Judge,
    *,
    overwrite: bool = False,
    spec: RunSpec | None = None,
    before_scoring: Callable[[list[Metric | RagasScore]], None] | None = None,
    **options: Unpack[PartitionOptions],
) -> PartitionsResult:
    """Score every Parquet file of `source` (a directory, a glob or a file) on Ray into one
    file per input under `out_dir` (same relative path), each with a single-process run's
    metadata plus its input's fingerprint.

    A partition whose output already records this run's metrics, judge, settings and input
    fingerprint is skipped (nothing is read or sent for it); an output that records anything
    else is refused unless `overwrite`. Inside a partition, resuming is the answer cache's
    job (`cache_dir`, as in `evaluate`). Ray must be initialised (`ray.init(...)`). `spec`,
    when given (the command line's), is the whole run specification: it replaces metrics,
    columns, reasons, thresholds and strict, is refused where Ray cannot honour it, and is
    recorded in every output's metadata. `before_scoring(metrics)` is called with the
    run's metrics once they are known, before any request (the command line checks its
    gates there). The other options (`PartitionOptions`) are `evaluate`'s.
    """
    if spec is None:
        spec = RunSpec.of(metrics, **{k: v for k, v in options.items() if k in SCORING})
    refuse_unsupported(spec, "ray")
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    parts = find_partitions(source, out_dir)
    empty = to_frame(one_schema(parts).empty_table())
    scoring = {name: getattr(spec, name) for name in SCORING}
    chosen = prepare(empty, spec.metrics, judge, **scoring)  # every check before any request
    if before_scoring is not None:
        before_scoring(chosen)
    how = {name: options.get(name, default) for name, default in ACTOR_DEFAULTS.items()}
    check_actors(judge, how["actors"])
    check_limits(how["limits"])
    identity = run_identity(chosen, judge, spec.columns)
    todo = to_score(parts, identity, overwrite)
    template = _scored_schema(empty, chosen, judge, spec.columns)
    ray_info = {"actors": how["actors"], "partitions": len(parts)}
    run = spec.metadata("ray", judge)
    outputs = {
        part.index: PartitionOutput.start(
            part, template, chosen, judge, started, ray_info, identity, run
        )
        for part in todo
    }
    total = sum(part.rows for part in todo)
    rows = options.get("batch_size") or batch_rows(judge.concurrency, how["actors"], total)
    with _aborted_on_failure(outputs):
        stats = _drive(outputs, todo, chosen, judge, rows, scoring, how)
    skipped = [p for p in parts if p.index not in outputs]
    results = [outputs[p.index].result for p in todo]
    return PartitionsResult(results, skipped, parts, chosen, judge, stats, time.monotonic() - t0)


def _scored_schema(
    empty: pl.DataFrame,
    metrics: list[Metric | RagasScore],
    judge: Judge,
    columns: Mapping[str, str] | None,
) -> pl.DataFrame:
    """The output's columns and types, with no rows: zero rows scored (nothing is sent),
    checked to be writable before any request."""
    with ArrowSession(judge.replace(cache=False)) as session:
        scored = session.score(empty, metrics, columns)
    check_writable(scored.schema)
    return scored


@contextlib.contextmanager
def _aborted_on_failure(outputs: Mapping[int, PartitionOutput]) -> Iterator[None]:
    """On any failure (an interrupt too), no output of this run is left half written."""
    try:
        yield
    except BaseException:
        for output in outputs.values():
            output.abort()
        raise


def _drive(
    outputs: dict[int, PartitionOutput],
    todo: list[Partition],
    metrics: list[Metric | RagasScore],
    judge: Judge,
    rows: int,
    options: Mapping[str, Any],
    how: Mapping[str, Any],
) -> RunStats:
    """Run the Ray pipeline and write what it returns, partition by partition, in order
    (`how`: `map_scores`'s actors, cache_dir, num_cpus and limits)."""
    stats = RunStats(price=with_cached_rate(judge.price, judge.model))
    for part in todo:
        if part.rows == 0:
            outputs[part.index].finish()
    pending = [p for p in todo if p.rows]
    if not pending:
        return stats
    context = ray.data.DataContext.get_current()
    keep_order = context.execution_options.preserve_order
    context.execution_options.preserve_order = True  # each partition's rows come in order
    registry = start_registry()
    try:
        ds = map_scores(
            partition_dataset(pending, rows), metrics, judge, batch_size=rows, options=options,
            carry=(PART_COLUMN, ROW_COLUMN), report_stats=True, registry=registry, **how,
        )  # fmt: skip
        # A batch's ragframe error (fail_fast) is raised here as itself, as one process's is.
        with raising_batch_errors(registry):
            for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                route(table, outputs, stats)
    finally:
        context.execution_options.preserve_order = keep_order
    unfinished = [o.part for o in outputs.values() if o.written < o.part.rows]
    if unfinished:
        raise RagframeError(
            f"Ray returned {outputs[unfinished[0].index].written} of {unfinished[0].rows} rows "
            f"of {str(unfinished[0].source)!r}; nothing was written for it. Run again to resume"
        )
    return stats
