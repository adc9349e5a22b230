"""Scoring on Ray Data: the same metrics, output and cache as one process, across a cluster.

`evaluate(ds, metrics, judge, actors=N)` maps `ragframe.score_arrow` over a `ray.data.Dataset`
with `map_batches` and a callable class: each of the N actors opens one judge session, once,
on an event loop of its own (`ArrowSession`), and scores batch after batch with it. Ray does
the rest: placement, data movement, restarting an actor that dies (`max_restarts=-1`) and
sending its batch again (`max_task_retries=-1`). A batch scored twice costs nothing twice:
answers are committed to the answer cache as they arrive.

How the cluster shares one endpoint. The judge's `concurrency`, `requests_per_minute`,
`tokens_per_minute` and `max_cost` are the cluster's: each actor gets its share of the
concurrency (split so the shares add up to the whole) and of the budget (divided by N).
The rates are shared one of two ways (`limits=`): "actor" (the default), one limiter actor
holds the cluster's buckets and every actor asks it when its requests may go (the asks
waiting at once travel in one call), or "divided", each actor keeps rate / N to itself (no
messages, no extra actor, but an actor without work, or not started yet, leaves its share
unused: measured in `bench/bench_ray.py`, 61-89 % of a binding rate reached against 94-103 %
with the limiter actor (the start's one-second burst counted), at one call per 15-30
requests). No limiter actor is started without a rate. Either
way each actor's pool still halves its limit on a 429 and pauses (AIMD), so every actor
backs off when the endpoint says so. With several endpoints (`Judge(base_url=[...])`) actor
i sends to endpoint i mod their number.

The answer cache. Each actor writes a SQLite file of its own in `cache_dir` and reads every
file there (`SharedAnswerCache`): never one SQLite file written by several processes, which a
network filesystem cannot keep safe. Identical prompts in different batches are sent once per
actor at most; two actors may each send one once, when neither had answered it yet.

`score_partitions` (behind `ragframe score DIR -o OUT --ray`) scores a directory of Parquet
partitions into one output file per input file, with a single-process run's metadata, and
skips a partition already scored with the same metrics, judge, settings and input.

Layer: above `report`; imports `engine`, `decide`, `judge`, `metrics`, `inputs`, `stats`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import glob
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from ragframe.engine.arrow import ArrowSession, Metrics, prepare, to_frame
from ragframe.engine.spec import RunSpec, refuse_unsupported
from ragframe.errors import ConfigError, InputError, RagframeError

#: What to install for this module.
EXTRA = "pip install 'ragframe[ray]'"


class RayNotInstalled(ConfigError, ImportError):
    """Ray Data is not installed: the error names the extra that installs it."""


try:
    import ray
    import ray.data
except ImportError as _missing:
    raise RayNotInstalled(
        f"scoring on Ray needs Ray Data, which is not installed ({_missing}); install it with "
        f"{EXTRA}, or score without --ray in one process"
    ) from _missing

import pyarrow.parquet as pq  # noqa: E402

from ragframe.engine.stream import StreamResult  # noqa: E402
from ragframe.engine.summary import Tally  # noqa: E402
from ragframe.inputs.io import AtomicParquetWriter, check_writable, open_parquet, read_metadata  # noqa: E402
from ragframe.judge.cache import SharedAnswerCache  # noqa: E402
from ragframe.judge.client import Judge, RunStats  # noqa: E402
from ragframe.judge.limits import Reservations, share, share_rate  # noqa: E402
from ragframe.metrics import Metric, RagasScore  # noqa: E402

__all__ = [
    "EXTRA",
    "LIMITS",
    "RayNotInstalled",
    "RayScorer",
    "RemoteRate",
    "batch_rows",
    "evaluate",
    "limiter_counts",
    "scorer_actors",
]

#: Rows per batch for each request slot of an actor (see `batch_rows`).
ROWS_PER_SLOT = 16
#: Batches each actor gets at least, when the log's size is known (see `batch_rows`).
BATCHES_PER_ACTOR = 2
#: A column each scored batch carries in CLI runs: the batch's request counts (row 0 only).
STATS_COLUMN = "__ragframe_stats__"
#: How the cluster's requests and tokens per minute are shared (see the module docstring).
Limits = Literal["divided", "actor"]
LIMITS: tuple[str, ...] = ("divided", "actor")
#: Rate asks sent to the limiter actor in one call at most.
MAX_ASKS = 256


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


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _Registry:
    """Gives each scoring actor its slot: its share of the limits, its endpoint and its cache
    file. A restarted actor keeps its actor id, so it gets its old slot back."""

    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._members: dict[str, dict[str, Any]] = {}

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


_REGISTRIES: list[Any] = []
_LIMITERS: list[Any] = []


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _ClusterLimiter:
    """The cluster's request and token buckets (`limits="actor"`): each scoring actor asks
    it, for several requests at once, when they may go. Restarted, it starts full again
    (at most one second's burst more)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.buckets = Reservations(requests_per_minute, tokens_per_minute)
        self.calls = 0

    def reserve(self, tokens: list[int]) -> list[float]:
        self.calls += 1
        return self.buckets.reserve(tokens)

    def counts(self) -> dict[str, int]:
        """Requests granted and calls that asked for them (the cost of sharing this way)."""
        return {"granted": self.buckets.granted, "calls": self.calls}


class RemoteRate:
    """What a judge session's pool asks before each request (`RateLimiter.acquire`), answered
    by the cluster's limiter actor. Asks that arrive while a call is on its way go together in
    the next call: when the rate binds, many requests wait, so one call serves many of them."""

    def __init__(self, limiter: Any) -> None:
        self.limiter = limiter
        self.calls = 0
        self._pending: list[tuple[int, asyncio.Future[float]]] = []
        self._asking: asyncio.Task[None] | None = None

    async def acquire(self, tokens: int) -> None:
        """Wait until the cluster's buckets let one request of about `tokens` tokens go."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pending.append((tokens, future))
        if self._asking is None or self._asking.done():
            self._asking = asyncio.create_task(self._ask())
        delay = await future
        if delay > 0:
            await asyncio.sleep(delay)

    async def _ask(self) -> None:
        while self._pending:
            asks, self._pending = self._pending[:MAX_ASKS], self._pending[MAX_ASKS:]
            try:
                delays = await self.limiter.reserve.remote([tokens for tokens, _ in asks])
            except Exception as exc:  # the requests fail as they would on any pool error
                for _, future in asks:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.calls += 1
            # Delays count from when the limiter reserved them, a moment ago: waiting them
            # out from now errs on the late side, never the early one.
            for (_, future), delay in zip(asks, delays, strict=True):
                if not future.done():
                    future.set_result(delay)


def scorer_actors() -> list[dict[str, Any]]:
    """The scoring actors of this driver's runs, latest run first: actor id, slot, pid, node,
    how many times it started (2 or more: Ray restarted it) and its handle (for `ray.kill`)."""
    out: list[dict[str, Any]] = []
    for registry in reversed(_REGISTRIES):
        out.extend(ray.get(registry.members.remote()))
    return out


def actor_judge(
    judge: Judge, slot: int, actors: int, cache_dir: Path | None, limits: Limits = "actor"
) -> Judge:
    """The judge of the actor in `slot`: its share of the cluster's limits (of the rates too
    with `limits="divided"`; with "actor" the limiter actor holds them), its endpoint, its
    own cache file in `cache_dir` (reading every other actor's), no progress bar."""
    index = slot % actors
    cache: Any = False if cache_dir is None else SharedAnswerCache(cache_dir, f"actor-{slot}")
    parts = actors if limits == "divided" else 1
    return judge.for_endpoint(index).replace(
        concurrency=share(judge.concurrency, actors, index),
        requests_per_minute=share_rate(judge.requests_per_minute, parts),
        tokens_per_minute=share_rate(judge.tokens_per_minute, parts),
        max_cost=None if judge.max_cost is None else judge.max_cost / actors,
        progress=False,
        cache=cache,
    )


class RayScorer:
    """The callable class of `map_batches`: one per actor, holding one judge session.

    Columns named in `carry` pass through unscored (removed before, appended after); with
    `report_stats`, each output batch also carries what it cost (`STATS_COLUMN`, row 0)."""

    def __init__(
        self,
        metrics: Metrics,
        judge: Judge,
        *,
        registry: Any,
        actors: int,
        columns: Mapping[str, str] | None = None,
        reasons: bool | None = None,
        thresholds: Mapping[str, float] | None = None,
        strict: Iterable[str] = (),
        cache_dir: str | None = None,
        carry: tuple[str, ...] = (),
        report_stats: bool = False,
        limits: Limits = "actor",
        limiter: Any = None,
    ) -> None:
        context = ray.get_runtime_context()
        me = (context.get_actor_id(), os.getpid(), context.get_node_id(), context.current_actor)
        slot = ray.get(registry.join.remote(*me))
        own = actor_judge(judge, slot, actors, Path(cache_dir) if cache_dir else None, limits)
        self.session = ArrowSession(own)
        if limiter is not None:
            # The pool's rate limiter, swapped for the cluster's (Transport has no option
            # for it yet): every request of this actor asks the limiter actor.
            self.session.open().transport._rate = RemoteRate(limiter)  # type: ignore[assignment]
        self.metrics = metrics
        self.options = {"columns": columns, "reasons": reasons, "thresholds": thresholds}
        self.options["strict"] = tuple(strict)
        self.carry = carry
        self.report_stats = report_stats
        self._prepared: dict[tuple[tuple[str, str], ...], list[Metric | RagasScore]] = {}

    def __call__(self, batch: pa.Table) -> pa.Table:
        carried = [batch.column(name) for name in self.carry]
        frame = to_frame(batch.drop_columns(list(self.carry)) if self.carry else batch)
        shape = tuple((name, str(dtype)) for name, dtype in frame.schema.items())
        chosen = self._prepared.get(shape)
        if chosen is None:
            chosen = prepare(frame, self.metrics, self.session.judge, **self.options)  # type: ignore[arg-type]
            self._prepared[shape] = chosen
        before = stats_counts(self.session.stats)
        scored = self.session.score(frame, chosen, self.options["columns"]).to_arrow()
        for name, column in zip(self.carry, carried, strict=True):
            scored = scored.append_column(name, column)
        if self.report_stats:
            delta = {k: v - before.get(k, 0) for k, v in stats_counts(self.session.stats).items()}
            cell = [json.dumps({k: v for k, v in delta.items() if v})] if scored.num_rows else []
            values = cell + [None] * max(0, scored.num_rows - 1)
            scored = scored.append_column(STATS_COLUMN, pa.array(values, pa.large_string()))
        return scored


def stats_counts(stats: RunStats) -> dict[str, float]:
    """The additive figures of a session's stats, flat (`by_task.X`, `failures.X`...): what a
    batch cost is the difference of two of these."""
    flat: dict[str, float] = {}
    for name in (
        "requests", "answered", "repairs", "cache_hits", "deduplicated", "remembered_failures",
        "prompt_tokens", "completion_tokens", "embedding_requests", "embedding_texts_cut",
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


def default_cache_dir(judge: Judge) -> Path | None:
    """Where the actors' cache files go when no directory is given: none without a cache;
    the judge's cache path if it is a directory; else a `ray` directory beside its file."""
    path = judge.cache_path
    if path is None:
        return None
    return path if path.is_dir() else path.parent / "ray"


def limiter_counts() -> dict[str, int] | None:
    """The latest run's limiter actor (`limits="actor"`): requests granted, calls it took."""
    return ray.get(_LIMITERS[-1].counts.remote()) if _LIMITERS else None


def check_limits(limits: str) -> None:
    if limits not in LIMITS:
        raise ConfigError(f"limits must be one of {', '.join(LIMITS)}; got {limits!r}")


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
        concurrency, rates and `max_cost` are shared among them (see the module docstring).
    batch_size : rows per batch; default `batch_rows` (16 per request slot of an actor).
    cache_dir : a directory every worker reaches (shared storage on a cluster): one SQLite
        answer file per actor, each actor reading all of them; default: the judge's cache
        path if it is a directory, else a `ray` directory beside its file (None: no cache).
    num_cpus : logical CPUs each actor reserves (an actor uses about one core at its busiest).
    limits : how the judge's requests and tokens per minute are shared: "actor" (one
        limiter actor holds the cluster's buckets; each actor asks it, many requests per
        call) or "divided" (each actor keeps rate / N to itself). See the module docstring.
    ray_remote_args : passed to `map_batches` (`max_restarts`, `resources`...).
    metrics, columns, reasons, thresholds, strict : as in `ragframe.evaluate`.
    """
    return map_scores(
        ds,
        metrics,
        judge if judge is not None else Judge(),
        actors=actors,
        batch_size=batch_size,
        options={
            "columns": columns,
            "reasons": reasons,
            "thresholds": thresholds,
            "strict": tuple(strict),
        },
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
) -> ray.data.Dataset:
    """`evaluate`, with the CLI's pass-through columns and per-batch figures (`report_stats`:
    then each block is scored as one batch, so a batch never straddles two partitions and its
    requests are counted in the partition they were sent for)."""
    check_actors(judge, actors)
    check_limits(limits)
    if isinstance(metrics, str) and metrics != "all":
        raise ConfigError(f"metrics must be a list of names or metrics, or 'all'; got {metrics!r}")
    metric_list = metrics if isinstance(metrics, str) else list(metrics)
    _check_schema(ds, metric_list, judge, options, carry)
    where = Path(cache_dir) if cache_dir is not None else default_cache_dir(judge)
    registry = _Registry.remote()  # type: ignore[attr-defined]
    _REGISTRIES.append(registry)
    limiter = None
    if limits == "actor" and (judge.requests_per_minute or judge.tokens_per_minute):
        rates = (judge.requests_per_minute, judge.tokens_per_minute)
        limiter = _ClusterLimiter.remote(*rates)  # type: ignore[attr-defined]
        _LIMITERS.append(limiter)
    # Ray Data's actors restart when they die (max_restarts=-1) and their batches are sent
    # again (max_task_retries=-1) by default; `ray_remote_args` may say otherwise.
    return ds.map_batches(
        RayScorer,
        fn_constructor_args=(metric_list, judge),
        fn_constructor_kwargs={
            "registry": registry,
            "actors": actors,
            **options,
            "cache_dir": None if where is None else str(where),
            "carry": carry,
            "report_stats": report_stats,
            "limits": limits,
            "limiter": limiter,
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


def empty_frame(schema: pa.Schema) -> pl.DataFrame:
    """A frame of these columns with no rows."""
    return to_frame(schema.empty_table())


# ------------------------------------------------------------------ partitions (the CLI)

#: Pass-through columns of a CLI run: which partition a row came from, and its position.
PART_COLUMN = "__ragframe_partition__"
ROW_COLUMN = "__ragframe_row__"
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass
class Partition:
    """One input Parquet file and where its scored copy goes."""

    index: int
    source: Path
    target: Path
    rows: int
    fingerprint: str
    schema: pa.Schema
    #: Rows in each row group, in file order (the units Ray reads).
    groups: list[int] = field(default_factory=list)


def find_partitions(source: str | Path, out_dir: str | Path) -> list[Partition]:
    """The Parquet files of a directory (every `.parquet` / `.pq` below it), a glob, or one
    file, in path order, each with its output path: the same path relative to the directory
    (or to the glob's fixed prefix) under `out_dir`."""
    text = str(source)
    if any(ch in text for ch in "*?["):
        root = Path(text.split("*")[0].split("?")[0].split("[")[0])
        root = root if text.endswith(os.sep) or root.is_dir() else root.parent
        files = [Path(p) for p in glob.glob(text, recursive=True)]
    elif Path(text).is_dir():
        root = Path(text)
        files = [p for p in root.rglob("*") if p.suffix.lower() in PARQUET_SUFFIXES]
    elif Path(text).is_file():
        root, files = Path(text).parent, [Path(text)]
    else:
        raise InputError(f"{text!r} is neither a file, a directory nor a glob that matches")
    files = sorted(p for p in files if p.is_file() and not p.name.startswith((".", "_")))
    if not files:
        raise InputError(f"no Parquet files (.parquet, .pq) found in {text!r}")
    out = Path(out_dir)
    parts = []
    for index, path in enumerate(files):
        meta = open_parquet(path).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        target = out / path.relative_to(root)
        if target.resolve() == path.resolve():
            raise ConfigError(f"the output {str(target)!r} is its input; pass another -o")
        schema = meta.schema.to_arrow_schema().remove_metadata()
        parts.append(
            Partition(index, path, target, meta.num_rows, fingerprint(path), schema, groups)
        )
    return parts


def fingerprint(path: Path) -> str:
    """What identifies a Parquet file's content without reading its data: a hash of its size
    and its footer (every row group's row count, byte offsets, sizes and column statistics)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(0, size - 8))
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
        handle.seek(max(0, size - 8 - length))
        footer = handle.read(length)
    return hashlib.sha256(size.to_bytes(8, "little") + footer).hexdigest()


def run_identity(
    metrics: list[Metric | RagasScore], judge: Judge, columns: Mapping[str, str] | None
) -> dict[str, Any]:
    """What an output's metadata must record for its partition to count as scored by this
    run: the metrics (classes, settings, prompt hashes), the judge, and the settings that
    change answers or columns (JSON-normalised, as read back from a file)."""
    block = StreamResult(pl.DataFrame(), metrics, judge, RunStats(), 0.0, "").metadata()["metrics"]
    rules = {m.name: getattr(m, "pass_rule", None) for m in metrics}
    settings = {
        "columns": dict(columns or {}),
        "thresholds": {k: [r.value, r.strict] for k, r in rules.items() if r is not None},
        "max_text_chars": judge.max_text_chars,
        "max_tokens": judge.max_tokens_cap,
        "structured": judge.structured,
        "output_bounds": judge.output_bounds,
        "repair_attempts": judge.repair_attempts,
        "embedding_max_tokens": judge.embedding_max_tokens,
        "retry_failed": judge.retry_failed,
    }
    identity = {"metrics": block, "judge": judge.describe(), "settings": settings}
    return json.loads(json.dumps(identity, default=str))  # type: ignore[no-any-return]


def scored_before(part: Partition, identity: Mapping[str, Any]) -> str | None:
    """None when `part.target` holds this partition scored with this identity (skip it);
    else what differs, for the error (or "" when there is no output yet)."""
    if not part.target.exists():
        return ""
    meta = read_metadata(part.target)
    recorded = (meta.get("input") or {}).get("fingerprint")
    if recorded != part.fingerprint:
        return f"it was scored from other input (or not by ragframe --ray): {part.source}"
    for key in ("metrics", "judge", "settings"):
        if meta.get(key) != identity[key]:
            return f"its {key} differ from this run's"
    return None


def read_slices(items: dict[str, Any], rows: int) -> Iterator[pa.Table]:
    """Read row groups (one per item: file, group, first row, partition) in slices of at
    most `rows` rows, each tagged with its partition and each row with its position."""
    for path, group, first, part in zip(
        items["path"], items["group"], items["first"], items["part"], strict=True
    ):
        parquet = pq.ParquetFile(str(path), buffer_size=1 << 20, pre_buffer=False)
        offset = int(first)
        for batch in parquet.iter_batches(
            batch_size=rows, row_groups=[int(group)], use_threads=False
        ):
            n = batch.num_rows
            table = pa.Table.from_batches([batch])
            table = table.append_column(PART_COLUMN, pa.array([int(part)] * n, pa.int32()))
            table = table.append_column(ROW_COLUMN, pa.array(range(offset, offset + n), pa.int64()))
            offset += n
            yield table


def partition_dataset(parts: list[Partition], rows: int) -> ray.data.Dataset:
    """The partitions' rows as a Ray Dataset, read by Ray tasks a row group at a time."""
    items = []
    for part in parts:
        first = 0
        for group, count in enumerate(part.groups):
            if count:
                items.append(
                    {"path": str(part.source), "group": group, "first": first, "part": part.index}
                )
            first += count
    ds = ray.data.from_items(items, override_num_blocks=max(1, len(items)))
    return ds.map_batches(
        read_slices, fn_kwargs={"rows": rows}, batch_size=1, batch_format="numpy", num_cpus=0
    )


class _Output:
    """One partition's output being written: rows arrive in order; the file is put in place
    (atomically, with its metadata and summary) when the last one is written."""

    @classmethod
    def start(
        cls,
        part: Partition,
        template: pl.DataFrame,
        metrics: list[Metric | RagasScore],
        judge: Judge,
        started: str,
        ray_info: Mapping[str, Any],
        identity: Mapping[str, Any],
        run: dict[str, Any],
    ) -> _Output:
        """The output of `part`: a streamed run's result (its metadata), plus the input's
        fingerprint and the run's settings, which a rerun compares to skip it."""
        stats = RunStats(price=judge.price)
        extra = {"ray": {**ray_info, "partition": part.index}}
        result = StreamResult(
            template, metrics, judge, stats, 0.0, started, extra=extra, run=run, output=part.target
        )
        source = {"path": str(part.source), "fingerprint": part.fingerprint, "rows": part.rows}
        return cls(part, result, {"input": source, "settings": identity["settings"]})

    def __init__(self, part: Partition, result: StreamResult, metadata: dict[str, Any]) -> None:
        self.part = part
        self.result = result
        self.metadata = metadata
        self.written = 0
        self.started = time.monotonic()
        self._writer: AtomicParquetWriter | None = None

    def write(self, scored: pl.DataFrame) -> None:
        if self._writer is None:
            schema = self.result.frame.to_arrow().schema
            self._writer = AtomicParquetWriter(
                self.part.target, schema, {**self.metadata, "summary": None}, overwrite=True
            )
        if scored.height:
            self._writer.write(scored)
            self.result.add_chunk(scored)
        self.written += scored.height

    def finish(self) -> None:
        if self._writer is None:  # a partition without rows: its schema and metadata alone
            self.write(self.result.frame)
        assert self._writer is not None
        self.result.seconds = time.monotonic() - self.started
        self._writer.update_metadata({**self.result.metadata(), **_extra_keys(self.metadata)})
        self._writer.close()

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()


def _extra_keys(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: metadata[k] for k in ("input", "settings") if k in metadata}


@dataclass
class PartitionsResult:
    """What a partitioned run did: the partitions it scored (with their results) and those it
    skipped as already scored; `stats` adds up the requests of every scored partition."""

    scored: list[StreamResult]
    skipped: list[Partition]
    partitions: list[Partition]
    metrics: list[Metric | RagasScore]
    judge: Judge
    stats: RunStats
    seconds: float

    def summary(self) -> dict[str, Any]:
        """The run's summary: every scored partition's scores folded together."""
        total = StreamResult(
            pl.DataFrame(), self.metrics, self.judge, self.stats, self.seconds, "", extra={}
        )
        for result in self.scored:
            for name, tally in result.tallies.items():
                _merge(total.tallies.setdefault(name, Tally(tally.direction, tally.rule)), tally)
            total.rows += result.rows
        total.extra = {
            "partitions": len(self.partitions),
            "partitions_scored": len(self.scored),
            "partitions_skipped": len(self.skipped),
        }
        return total.summary()


def _merge(into: Tally, other: Tally) -> None:
    """Fold one partition's tally of a metric into the run's."""
    into.scored += other.scored
    into.passed += other.passed
    into.failed += other.failed
    into.total += other.total
    into.squares += other.squares
    into.minimum = min(into.minimum, other.minimum)
    into.maximum = max(into.maximum, other.maximum)


def score_partitions(
    source: str | Path,
    out_dir: str | Path,
    metrics: Metrics,
    judge: Judge,
    *,
    actors: int = 2,
    batch_size: int | None = None,
    columns: Mapping[str, str] | None = None,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    num_cpus: float = 1.0,
    limits: Limits = "actor",
    spec: RunSpec | None = None,
    before_scoring: Callable[[list[Metric | RagasScore]], None] | None = None,
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
    gates there).
    """
    if spec is None:
        options = {"reasons": reasons, "thresholds": thresholds, "strict": strict}
        spec = RunSpec.of(metrics, columns=columns, **options)
    refuse_unsupported(spec, "ray")
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    parts = find_partitions(source, out_dir)
    schema = _one_schema(parts)
    empty = to_frame(schema.empty_table())
    options = {"columns": spec.columns, "reasons": spec.reasons, "thresholds": spec.thresholds}
    options["strict"] = spec.strict
    chosen = prepare(empty, spec.metrics, judge, **options)  # every check before any request
    if before_scoring is not None:
        before_scoring(chosen)
    check_actors(judge, actors)
    check_limits(limits)
    identity = run_identity(chosen, judge, spec.columns)
    todo = _to_score(parts, identity, overwrite)
    template = ArrowSession(judge.replace(cache=False))
    with template:
        empty_scored = template.score(empty, chosen, columns)
    check_writable(empty_scored.schema)
    ray_info = {"actors": actors, "partitions": len(parts)}
    run = spec.metadata("ray", judge)
    outputs = {
        part.index: _Output.start(
            part, empty_scored, chosen, judge, started, ray_info, identity, run
        )
        for part in todo
    }
    total = sum(part.rows for part in todo)
    rows = batch_size or batch_rows(judge.concurrency, actors, total)
    how = {"actors": actors, "cache_dir": cache_dir, "num_cpus": num_cpus, "limits": limits}
    try:
        stats = _drive(outputs, todo, chosen, judge, rows, options, how)
    except BaseException:
        for output in outputs.values():
            output.abort()
        raise
    skipped = [p for p in parts if p.index not in outputs]
    results = [outputs[p.index].result for p in todo]
    return PartitionsResult(results, skipped, parts, chosen, judge, stats, time.monotonic() - t0)


def _one_schema(parts: list[Partition]) -> pa.Schema:
    """The partitions' one schema, or an InputError naming the first that differs."""
    first = parts[0]
    for part in parts[1:]:
        if not part.schema.equals(first.schema):
            raise InputError(
                f"the partitions differ in columns or types: {str(part.source)!r} has "
                f"{part.schema.names}, {str(first.source)!r} has {first.schema.names}; score "
                "them in separate runs, or cast them to one schema"
            )
    for name in (PART_COLUMN, ROW_COLUMN):
        if name in first.schema.names:
            raise InputError(f"the input has a column {name!r}, which ragframe uses; rename it")
    return first.schema


def _to_score(
    parts: list[Partition], identity: Mapping[str, Any], overwrite: bool
) -> list[Partition]:
    """The partitions to score: those without this run's output (all with `overwrite`)."""
    todo = []
    for part in parts:
        why = "" if overwrite else scored_before(part, identity)
        if why is None:
            continue
        if why:
            raise ConfigError(
                f"output {str(part.target)!r} exists and {why}; pass --overwrite "
                "(overwrite=True) to score it again, or another output directory"
            )
        todo.append(part)
    return todo


def _drive(
    outputs: dict[int, _Output],
    todo: list[Partition],
    metrics: list[Metric | RagasScore],
    judge: Judge,
    rows: int,
    options: Mapping[str, Any],
    how: Mapping[str, Any],
) -> RunStats:
    """Run the Ray pipeline and write what it returns, partition by partition, in order
    (`how`: `map_scores`'s actors, cache_dir, num_cpus and limits)."""
    stats = RunStats(price=judge.price)
    for part in todo:
        if part.rows == 0:
            outputs[part.index].finish()
    pending = [p for p in todo if p.rows]
    if not pending:
        return stats
    context = ray.data.DataContext.get_current()
    keep_order = context.execution_options.preserve_order
    context.execution_options.preserve_order = True  # each partition's rows come in order
    try:
        ds = map_scores(
            partition_dataset(pending, rows), metrics, judge, batch_size=rows, options=options,
            carry=(PART_COLUMN, ROW_COLUMN), report_stats=True, **how,
        )  # fmt: skip
        for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            _route(table, outputs, stats)
    finally:
        context.execution_options.preserve_order = keep_order
    unfinished = [o.part for o in outputs.values() if o.written < o.part.rows]
    if unfinished:
        raise RagframeError(
            f"Ray returned {outputs[unfinished[0].index].written} of {unfinished[0].rows} rows "
            f"of {str(unfinished[0].source)!r}; nothing was written for it. Run again to resume"
        )
    return stats


def _route(table: pa.Table, outputs: dict[int, _Output], stats: RunStats) -> None:
    """Write a scored batch's rows to their partitions' outputs; finish the full ones."""
    frame = to_frame(table)
    counts = frame.get_column(STATS_COLUMN).drop_nulls()
    for cell in counts:  # a batch is one partition's slice (see `map_scores`)
        delta = json.loads(cell)
        add_counts(stats, delta)
        add_counts(outputs[int(frame.item(0, PART_COLUMN))].result.stats, delta)
    frame = frame.drop(STATS_COLUMN)
    for (index,), rows in frame.partition_by(
        PART_COLUMN, maintain_order=True, as_dict=True
    ).items():
        output = outputs[int(index)]  # type: ignore[call-overload]
        positions = rows.get_column(ROW_COLUMN)
        if positions[0] != output.written or positions[-1] != output.written + rows.height - 1:
            raise RagframeError(
                f"rows of {str(output.part.source)!r} came back out of order (row "
                f"{positions[0]} where {output.written} was due); nothing was written for it"
            )
        output.write(rows.drop(PART_COLUMN, ROW_COLUMN))
        if output.written == output.part.rows:
            output.finish()
