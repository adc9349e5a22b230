"""The scoring actors: `RayScorer`, the callable class `map_batches` runs (one judge session
per actor), the registry that gives each actor its slot, and what a batch cost, as a column
the driver adds up (`STATS_COLUMN`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import ray

from ragframe.engine.arrow import ArrowSession, Metrics, prepare, to_frame
from ragframe.errors import RagframeError
from ragframe.judge.client import Judge, RunStats
from ragframe.metrics import Metric, RagasScore
from ragframe.ray.limits import Limits, RemoteRate, actor_judge

#: A column each scored batch carries in CLI runs: the batch's request counts (row 0 only).
STATS_COLUMN = "__ragframe_stats__"

#: The registries of this driver's runs, latest last, each with the Ray job it belongs to
#: (for `scorer_actors`): a registry of an earlier `ray.init` is gone with its cluster.
_REGISTRIES: list[tuple[str, Any]] = []


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _Registry:
    """Gives each scoring actor its slot: its share of the limits, its endpoint and its cache
    file. A restarted actor keeps its actor id, so it gets its old slot back. It also keeps
    the first ragframe error an actor raised, for the driver (see `batch_error`)."""

    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._members: dict[str, dict[str, Any]] = {}
        self._failure: RagframeError | None = None

    def join(self, actor_id: str, pid: int, node: str, handle: Any = None) -> int:
        slot = self._slots.setdefault(actor_id, len(self._slots))
        restarts = self._members.get(actor_id, {}).get("starts", 0)
        self._members[actor_id] = {
            "actor_id": actor_id,
            "slot": slot,
            "pid": pid,
            "node": node,
            "starts": restarts + 1,
            "handle": handle,
        }
        return slot

    def members(self) -> list[dict[str, Any]]:
        return list(self._members.values())

    def fail(self, error: RagframeError) -> None:
        if self._failure is None:
            self._failure = error

    def failure(self) -> RagframeError | None:
        return self._failure


def start_registry() -> Any:
    """A new run's registry (kept for `scorer_actors`; those of earlier clusters are dropped)."""
    job = _current_job()
    _REGISTRIES[:] = [(owner, kept) for owner, kept in _REGISTRIES if owner == job]
    registry = _Registry.remote()  # type: ignore[attr-defined]
    _REGISTRIES.append((job, registry))
    return registry


def _current_job() -> str:
    """This driver's job in this cluster (a job id alone repeats across `ray.init` calls)."""
    context = ray.get_runtime_context()
    return f"{context.get_session_name()}/{context.get_job_id()}"


def batch_error(registry: Any) -> RagframeError | None:
    """The first ragframe error a scoring actor of this run raised (a judge that gave up
    under `fail_fast`, say), as it was raised; None if none did.

    Why through the registry: Ray Data wraps an exception raised in a batch in its own
    `UserCodeException`, which reaches the driver without what it wraps (Python does not
    pickle `__cause__`) and with Ray's advice appended to its text. The actor hands the
    error to the registry before raising, so the driver can raise it as one process does:
    its one line, its exit status."""
    try:
        return ray.get(registry.failure.remote())
    except Exception:  # the cluster went with the failure: nothing more to tell
        return None


def scorer_actors() -> list[dict[str, Any]]:
    """The scoring actors of this driver's runs, latest run first: actor id, slot, pid, node,
    how many times it started (2 or more: Ray restarted it) and its handle (for `ray.kill`)."""
    if not ray.is_initialized():
        return []
    job = _current_job()
    out: list[dict[str, Any]] = []
    for owner, registry in reversed(_REGISTRIES):
        if owner == job:  # a registry of an earlier cluster cannot be asked
            out.extend(ray.get(registry.members.remote()))
    return out


class RayScorer:
    """The callable class of `map_batches`: one per actor, holding one judge session.

    `options` are `prepare`'s (columns, reasons, thresholds, strict). Columns named in
    `carry` pass through unscored (removed before, appended after); with `report_stats`,
    each output batch also carries what it cost (`STATS_COLUMN`, row 0)."""

    def __init__(
        self,
        metrics: Metrics,
        judge: Judge,
        *,
        registry: Any,
        actors: int,
        options: Mapping[str, Any],
        cache_dir: str | None = None,
        carry: tuple[str, ...] = (),
        report_stats: bool = False,
        limits: Limits = "actor",
        limiter: Any = None,
    ) -> None:
        context = ray.get_runtime_context()
        me = (context.get_actor_id(), os.getpid(), context.get_node_id(), context.current_actor)
        slot = ray.get(registry.join.remote(*me))
        self.registry = registry
        own = actor_judge(judge, slot, actors, Path(cache_dir) if cache_dir else None, limits)
        self.session = ArrowSession(own)
        if limiter is not None:
            # The pool's rate limiter, swapped for the cluster's (Transport has no option
            # for it yet): every request of this actor asks the limiter actor.
            self.session.open().transport._rate = RemoteRate(limiter)  # type: ignore[assignment]
        self.metrics = metrics
        self.options = {**options, "strict": tuple(options.get("strict", ()))}
        self.carry = carry
        self.report_stats = report_stats
        self._prepared: dict[tuple[tuple[str, str], ...], list[Metric | RagasScore]] = {}

    def __call__(self, batch: pa.Table) -> pa.Table:
        try:
            return self._score(batch)
        except RagframeError as err:
            with contextlib.suppress(Exception):  # kept for the driver (`batch_error`)
                ray.get(self.registry.fail.remote(err))
            raise

    def _score(self, batch: pa.Table) -> pa.Table:
        carried = [batch.column(name) for name in self.carry]
        frame = to_frame(batch.drop_columns(list(self.carry)) if self.carry else batch)
        chosen = self._metrics_for(frame)
        before = stats_counts(self.session.stats)
        scored = self.session.score(frame, chosen, self.options["columns"]).to_arrow()
        for name, column in zip(self.carry, carried, strict=True):
            scored = scored.append_column(name, column)
        if self.report_stats:
            scored = self._with_cost(scored, before)
        return scored

    def _metrics_for(self, frame: pl.DataFrame) -> list[Metric | RagasScore]:
        """The metrics prepared for batches of this frame's schema (once per schema)."""
        shape = tuple((name, str(dtype)) for name, dtype in frame.schema.items())
        chosen = self._prepared.get(shape)
        if chosen is None:
            chosen = prepare(frame, self.metrics, self.session.judge, **self.options)  # type: ignore[arg-type]
            self._prepared[shape] = chosen
        return chosen

    def _with_cost(self, scored: pa.Table, before: Mapping[str, float]) -> pa.Table:
        """`scored` with what it cost since `before` in `STATS_COLUMN` (row 0, JSON)."""
        delta = {k: v - before.get(k, 0) for k, v in stats_counts(self.session.stats).items()}
        cell = [json.dumps({k: v for k, v in delta.items() if v})] if scored.num_rows else []
        values = cell + [None] * max(0, scored.num_rows - 1)
        return scored.append_column(STATS_COLUMN, pa.array(values, pa.large_string()))


def stats_counts(stats: RunStats) -> dict[str, float]:
    """The additive figures of a session's stats, flat (`by_task.X`, `failures.X`...): what a
    batch cost is the difference of two of these."""
    flat: dict[str, float] = {}
    for name in (
        "requests", "answered", "repairs", "cache_hits", "deduplicated", "reused",
        "remembered_failures",
        "kept_failures", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
        "embedding_requests", "embedding_texts_cut",
    ):  # fmt: skip
        flat[name] = getattr(stats, name)
    for name in ("by_task", "retries", "failures"):
        for key, value in getattr(stats, name).items():
            flat[f"{name}.{key}"] = value
    return flat


def add_counts(stats: RunStats, counts: Mapping[str, float]) -> None:
    """Add the figures of `stats_counts` (one batch's) to a partition's stats."""
    for key, value in counts.items():
        name, _, sub = key.partition(".")
        if sub:
            getattr(stats, name)[sub] += int(value)
        else:
            setattr(stats, name, getattr(stats, name) + value)
