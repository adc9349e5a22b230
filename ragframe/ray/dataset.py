"""A Ray Dataset scored: `evaluate` (public) and `map_scores` (its body, which the
partitioned command-line run calls too), with the batch size and the checks they share."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
import ray.data

from ragframe.engine.arrow import Metrics, prepare, to_frame
from ragframe.errors import ConfigError, RagframeError
from ragframe.judge.client import Judge
from ragframe.ray.actors import RayScorer, batch_error, start_registry
from ragframe.ray.limits import Limits, check_limits, start_limiter

#: Rows per batch for each request slot of an actor (see `batch_rows`).
ROWS_PER_SLOT = 16
#: Batches each actor gets at least, when the log's size is known (see `batch_rows`).
BATCHES_PER_ACTOR = 2


def batch_rows(concurrency: int, actors: int, rows: int | None = None) -> int:
    """Rows per batch: `ROWS_PER_SLOT` (16) for each request slot an actor holds, but no more
    than lets every actor have `BATCHES_PER_ACTOR` (2) batches of a log of `rows` rows.

    Why: an actor scores one batch at a time, and a batch's requests come in stages (the
    statements of an answer, then their verdicts); at the end of each stage the pool drains
    while the last requests finish, about one request latency lost per stage. A batch of 16
    rows per slot gives each slot at least 16 requests per stage (a metric asks at least one
    request per row), so those drains cost at most about 1/16 of the time; more rows per batch
    only add memory and coarser retries. On a small log, fewer rows per batch cost a little
    of that, but an actor without a batch costs its whole share of the pool."""
    slots = max(1, math.ceil(concurrency / actors))
    full = ROWS_PER_SLOT * slots
    if rows is None:
        return full
    return max(slots, min(full, math.ceil(rows / (actors * BATCHES_PER_ACTOR))))


def default_cache_dir(judge: Judge) -> Path | None:
    """Where the actors' cache files go when no directory is given: none without a cache;
    the judge's cache path if it is a directory; else a `ray` directory beside its file."""
    path = judge.cache_path
    if path is None:
        return None
    return path if path.is_dir() else path.parent / "ray"


def check_actors(judge: Judge, actors: int) -> None:
    """Refuse an actor count the cluster's limits cannot serve."""
    if actors < 1:
        raise ConfigError(f"actors must be at least 1, got {actors}")
    if actors > judge.concurrency:
        raise ConfigError(
            f"{actors} actors but a concurrency of {judge.concurrency}: each actor needs at "
            "least one request slot of the cluster's concurrency; raise --concurrency "
            "(Judge(concurrency=...)) or lower --actors"
        )


def evaluate(
    ds: ray.data.Dataset,
    metrics: Metrics = ("faithfulness", "answer_relevancy"),
    judge: Judge | None = None,
    *,
    actors: int = 2,
    batch_size: int | None = None,
    columns: Mapping[str, str] | None = None,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    cache_dir: str | Path | None = None,
    num_cpus: float = 1.0,
    limits: Limits = "actor",
    **ray_remote_args: Any,
) -> ray.data.Dataset:
    """Score a Ray Dataset: each row kept, `{metric}` and `{metric}_detail` added (the
    columns and types of a single-process run), row order kept within each block.

    Lazy, like every Ray Data transform: nothing is sent until the result is consumed
    (`write_parquet`, `iter_batches`, `materialize`...).

    actors : how many actors score at once, each with one judge session; the judge's
        concurrency, rates and `max_cost` are shared among them (see `ragframe.ray`).
    batch_size : rows per batch; default `batch_rows` (16 per request slot of an actor).
    cache_dir : a directory every worker reaches (shared storage on a cluster): one SQLite
        answer file per actor, each actor reading all of them; default: the judge's cache
        path if it is a directory, else a `ray` directory beside its file (None: no cache).
    num_cpus : logical CPUs each actor reserves (an actor uses about one core at its busiest).
    limits : how the judge's requests and tokens per minute are shared: "actor" (one
        limiter actor holds the cluster's buckets; each actor asks it, many requests per
        call) or "divided" (each actor keeps rate / N to itself). See `ragframe.ray`.
    ray_remote_args : passed to `map_batches` (`max_restarts`, `resources`...).
    metrics, columns, reasons, thresholds, strict : as in `ragframe.evaluate`.
    """
    options = {"columns": columns, "reasons": reasons, "thresholds": thresholds}
    return map_scores(
        ds,
        metrics,
        judge if judge is not None else Judge(),
        actors=actors,
        batch_size=batch_size,
        options={**options, "strict": tuple(strict)},
        cache_dir=cache_dir,
        num_cpus=num_cpus,
        limits=limits,
        ray_remote_args=ray_remote_args,
    )


def map_scores(
    ds: ray.data.Dataset,
    metrics: Metrics,
    judge: Judge,
    *,
    actors: int,
    batch_size: int | None,
    options: Mapping[str, Any],
    cache_dir: str | Path | None,
    num_cpus: float,
    limits: Limits = "actor",
    ray_remote_args: Mapping[str, Any] | None = None,
    carry: tuple[str, ...] = (),
    report_stats: bool = False,
    registry: Any = None,
) -> ray.data.Dataset:
    """`evaluate`, with the CLI's pass-through columns and per-batch figures (`report_stats`:
    then each block is scored as one batch, so a batch never straddles two partitions and its
    requests are counted in the partition they were sent for) and the run's `registry`
    (`start_registry()`; a new one if None), which `raising_batch_errors` asks."""
    check_actors(judge, actors)
    check_limits(limits)
    if isinstance(metrics, str) and metrics != "all":
        raise ConfigError(f"metrics must be a list of names or metrics, or 'all'; got {metrics!r}")
    metric_list = metrics if isinstance(metrics, str) else list(metrics)
    _check_schema(ds, metric_list, judge, options, carry)
    where = Path(cache_dir) if cache_dir is not None else default_cache_dir(judge)
    # Ray Data's actors restart when they die (max_restarts=-1) and their batches are sent
    # again (max_task_retries=-1) by default; `ray_remote_args` may say otherwise.
    return ds.map_batches(
        RayScorer,
        fn_constructor_args=(metric_list, judge),
        fn_constructor_kwargs={
            "registry": registry if registry is not None else start_registry(),
            "actors": actors,
            "options": dict(options),
            "cache_dir": None if where is None else str(where),
            "carry": carry,
            "report_stats": report_stats,
            "limits": limits,
            "limiter": start_limiter(judge, limits),
        },
        # The CLI's reader makes each block one partition's slice: a batch of its own.
        batch_size=None if report_stats else batch_size or _batch_for(ds, judge, actors),
        batch_format="pyarrow",
        # One batch at a time per actor, none queued behind it: a batch is seconds of
        # requests, and one queued on a busy actor waits while another actor may be idle
        # (the tail of a run, a slow batch).
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        num_cpus=num_cpus,
        **(ray_remote_args or {}),
    )


@contextlib.contextmanager
def raising_batch_errors(registry: Any) -> Iterator[None]:
    """Consume a scored dataset so that a ragframe error raised in a batch reaches the caller
    as itself (its one line, its class), not as Ray's wrapper of it (see `batch_error`)."""
    try:
        yield
    except Exception as exc:
        error = batch_error(registry)
        if error is None:
            raise
        raise error from exc


def original_error(exc: BaseException) -> RagframeError | None:
    """The ragframe error under Ray's wrappers of `exc`, or None. A Ray task's exception
    arrives as a `RayTaskError` holding it as `cause` (and subclassing its class, with the
    worker's whole traceback as its text); Python's chain (`__cause__`) is followed too."""
    from ray.exceptions import RayTaskError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RayTaskError):
            current = current.cause
        elif isinstance(current, RagframeError):
            return current
        else:
            current = current.__cause__
    return None


def _batch_for(ds: ray.data.Dataset, judge: Judge, actors: int) -> int:
    """`batch_rows` for `ds`, with its row count when Ray knows it without running anything
    (Parquet metadata, in-memory blocks)."""
    try:
        rows = ds._meta_count()
    except Exception:  # a private API: without it, the rule for an unknown size
        rows = None
    return batch_rows(judge.concurrency, actors, rows)


def _check_schema(
    ds: ray.data.Dataset,
    metrics: Metrics,
    judge: Judge,
    options: Mapping[str, Any],
    carry: tuple[str, ...],
) -> None:
    """Check inputs, output names and the judge on the dataset's schema before any request,
    when Ray knows the schema without running anything."""
    schema = ds.schema(fetch_if_missing=False)
    base = getattr(schema, "base_schema", None)
    if not isinstance(base, pa.Schema):
        return
    empty = to_frame(base.empty_table())
    prepare(empty.drop([c for c in carry if c in empty.columns]), metrics, judge, **options)
