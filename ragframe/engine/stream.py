"""Score a log too large for memory (Parquet, JSON Lines or CSV): read, score and write it in
chunks of rows.

One judge session serves the whole file (one pool of requests, one limiter, one progress bar),
so a chunk boundary costs nothing: the next chunk is already being scored while the previous
one's last requests finish, and chunks are written strictly in input order. Memory is bounded
by `chunk_rows` and `chunks_in_flight`, not by the file: each written chunk is dropped, and the
session's in-memory answers are forgotten between chunks (the disk cache still deduplicates
across the whole file). The output appears only when every row is written (a temporary file
renamed into place), so a failure leaves the old output, or none. Chunks are read and decoded
on a thread of their own, one ahead of the scoring, so the event loop keeps serving requests
while the next chunk is parsed.

Resuming is the cache's job: every answer is committed the moment it arrives, so running the
same command again after an interruption re-reads the finished chunks' answers from the cache
and sends requests only for what was never answered.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import polars as pl

from ragframe._sync import run_sync
from ragframe.engine.prepare import prepare_run, score_frame, work_plan
from ragframe.engine.result import RunResult
from ragframe.engine.spec import DEFAULT_CHUNK_ROWS, RunSpec, refuse_unsupported
from ragframe.engine.summary import Tally, add_cut, cut_rows
from ragframe.errors import ConfigError
from ragframe.inputs.columns import list_columns
from ragframe.inputs.io import (
    AtomicParquetWriter,
    InputFile,
    check_writable,
    open_input,
    refuse_remote_output,
    remote_url,
)
from ragframe.judge.client import Judge, JudgeSession
from ragframe.metrics import Metric, RagasScore
from ragframe.metrics.calibration import Calibration, add_p_human, run_calibrations


class StreamOptions(TypedDict, total=False):
    """The keyword options of `score_file` (those of `ascore_file`, with its defaults)."""

    judge: Judge | None
    columns: Mapping[str, str] | None
    chunk_rows: int | None
    overwrite: bool
    chunks_in_flight: int
    reasons: bool | None
    thresholds: Mapping[str, float] | None
    strict: Iterable[str]
    spec: RunSpec | None
    storage_options: Mapping[str, Any] | None


@dataclass
class StreamResult(RunResult):
    """A streamed run: the statistics of a `RunResult`, without the rows (they are on disk).

    `frame` holds no rows, only the output schema; `summary()` and `metadata()` have the same
    shape as a `RunResult`'s, with the per-metric means accumulated chunk by chunk.
    """

    output: Path = Path()
    rows: int = 0
    chunks: int = 0
    #: Per metric: its scores so far, folded in bounded memory.
    tallies: dict[str, Tally] = field(default_factory=dict)
    #: The rows whose texts were cut before judging so far (`ragframe.engine.summary.cut_rows`).
    cut: dict[str, Any] = field(default_factory=dict)

    def add_chunk(self, scored: pl.DataFrame) -> None:
        """Fold one scored chunk into the running tallies."""
        for metric in self.metrics:
            rule = getattr(metric, "pass_rule", None)
            tally = self.tallies.setdefault(metric.name, Tally(metric.direction, rule))
            tally.add(scored.get_column(metric.name))
        self.cut = add_cut(self.cut, cut_rows(scored, [f"{m.name}_detail" for m in self.metrics]))
        self.rows += scored.height
        self.chunks += 1

    def summary(self) -> dict[str, Any]:
        per_metric = {
            m.name: self.tallies.get(
                m.name, Tally(m.direction, getattr(m, "pass_rule", None))
            ).summary()
            for m in self.metrics
        }
        return {
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "metrics": per_metric,
            **self.stats.as_dict(),
            **self.extra,
            **self.cut_summary(self.cut),
            **self.judge_summary(),
        }

    def write_parquet(self, path: str | Path, *, overwrite: bool = False) -> None:
        raise ConfigError(
            f"a streamed run is written as it goes, to {str(self.output)!r}; read that file"
        )


async def ascore_file(
    input_path: str | Path,
    output_path: str | Path,
    metrics: Iterable[str | Metric | RagasScore],
    *,
    judge: Judge | None = None,
    columns: Mapping[str, str] | None = None,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    chunks_in_flight: int = 2,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    spec: RunSpec | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> StreamResult:
    """Async twin of `score_file`."""
    if spec is None:
        options = {"reasons": reasons, "thresholds": thresholds, "strict": strict}
        spec = RunSpec.of(metrics, columns=columns, chunk_rows=chunk_rows, **options)
    refuse_unsupported(spec, "streamed")
    chunk_rows = DEFAULT_CHUNK_ROWS if spec.chunk_rows is None else spec.chunk_rows
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be at least 1, got {chunk_rows}")
    if chunks_in_flight < 1:
        raise ConfigError(f"chunks_in_flight must be at least 1, got {chunks_in_flight}")
    refuse_remote_output(output_path)  # written locally and atomically, before any read
    source, target = remote_url(input_path) or Path(input_path), Path(output_path)
    source_file = open_input(
        source, list_columns=list_columns(spec.columns), storage_options=storage_options
    )
    if target.resolve() == source.resolve():
        raise ConfigError("the output must not be the input file; the input is never written")
    if target.exists() and not overwrite:
        raise ConfigError(
            f"output {str(target)!r} exists; pass overwrite=True (--overwrite) to replace it"
        )
    # Inputs, output names and what the judge can serve, on the file's schema: before a row
    # is read or a request sent.
    empty = source_file.schema_frame()
    ready = prepare_run(empty, spec, judge, rows=source_file)
    calibrations = run_calibrations(spec.calibration, ready.metrics, ready.judge)
    session, opened = ready.session()
    if source_file.rows is not None:  # Parquet records its rows; others are planned by chunk
        session.plan(work_plan(ready.metrics, source_file.rows))
    async with opened:
        result = await _stream(
            source_file,
            empty,
            target,
            ready.metrics,
            session,
            spec.columns,
            chunk_rows=chunk_rows,
            chunks_in_flight=chunks_in_flight,
            overwrite=overwrite,
            started=ready.started,
            extra=ready.extra,
            run=spec.metadata("streamed", ready.judge),
            calibrations=calibrations,
        )
    return result


async def _stream(
    source: InputFile,
    empty: pl.DataFrame,
    target: Path,
    metrics: list[Metric | RagasScore],
    session: JudgeSession,
    columns: Mapping[str, str] | None,
    *,
    chunk_rows: int,
    chunks_in_flight: int,
    overwrite: bool,
    started: str,
    extra: dict[str, Any],
    run: dict[str, Any],
    calibrations: list[Calibration],
) -> StreamResult:
    """Read, score and write chunk by chunk, at most `chunks_in_flight` chunks being scored."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def score(frame: pl.DataFrame) -> pl.DataFrame:
        return add_p_human(await score_frame(frame, metrics, session, columns), calibrations)

    # Scoring zero rows sends nothing and gives the output schema, so the writer (and its
    # overwrite check) exists before the first request.
    template = await score(empty)
    check_writable(template.schema)
    result = StreamResult(
        template, metrics, session.judge, session.stats, 0.0, started,
        extra={"chunk_rows": chunk_rows, **extra}, run=run, output=target,
    )  # fmt: skip
    # The summary is known only at the end: `update_metadata` puts it in the footer.
    meta = {**result.metadata(), "summary": None}
    writer = AtomicParquetWriter(target, template.to_arrow().schema, meta, overwrite=overwrite)
    chunks = _InOrder(writer, result, session, chunks_in_flight)
    reader = _ChunkReader(source.chunks(chunk_rows))
    # A format that does not record its rows: the plan grows with each chunk read, by the
    # rows of the chunk that have each metric's inputs (as a frame in memory is planned).
    planned_by_chunk, planned = source.rows is None, Counter[str]()
    try:
        while (frame := await reader.next()) is not None:
            if planned_by_chunk:
                planned.update(work_plan(metrics, frame, columns))
                session.plan(dict(planned))
            chunks.start(score(frame))
            reader.read_ahead()  # the next chunk is decoded while this one is being scored
            await chunks.write_if_full()
        await chunks.write_all()
        result.seconds = loop.time() - t0
        result.extra["chunks"] = result.chunks
        writer.update_metadata(result.metadata())
        writer.close()
    except BaseException:
        await chunks.abort()
        raise
    finally:
        await reader.close()
    return result


class _InOrder:
    """The chunks being scored, written strictly in input order as each one's turn comes:
    at most `in_flight` of them scored at once, each folded into the result once written."""

    def __init__(
        self,
        writer: AtomicParquetWriter,
        result: StreamResult,
        session: JudgeSession,
        in_flight: int,
    ) -> None:
        self.writer = writer
        self.result = result
        self.session = session
        self.in_flight = in_flight
        self._running: deque[asyncio.Task[pl.DataFrame]] = deque()
        self._writing: asyncio.Future[None] | None = None

    def start(self, scoring: Coroutine[Any, Any, pl.DataFrame]) -> None:
        """Start scoring the next chunk (it is written after every chunk before it)."""
        self._running.append(asyncio.create_task(scoring))

    async def write_if_full(self) -> None:
        """Write the oldest chunk when `in_flight` chunks are being scored."""
        if len(self._running) >= self.in_flight:
            await self._write_next()

    async def write_all(self) -> None:
        """Write every chunk still being scored, in order."""
        while self._running:
            await self._write_next()

    async def _write_next(self) -> None:
        scored = await self._running.popleft()
        # Compression runs off the loop, so the chunk still in flight keeps its requests going.
        # Shielded: a cancelled run waits for the write thread before closing the writer.
        loop = asyncio.get_running_loop()
        self._writing = loop.run_in_executor(None, self.writer.write, scored)
        await asyncio.shield(self._writing)
        self.result.add_chunk(scored)
        self.session.forget()

    async def abort(self) -> None:
        """Cancel the chunks being scored, wait for a write in progress, drop the output."""
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._writing is not None:
            await asyncio.wait([self._writing])
        self.writer.abort()


class _ChunkReader:
    """Advances a chunk iterator on one thread of its own, at most one chunk ahead.

    Decoding a chunk (Parquet pages, JSON, CSV) takes CPU time; on the event loop it would
    stall every request in flight. One dedicated thread keeps the chunks in file order and
    suits iterators that must not be advanced from two threads at once.
    """

    def __init__(self, chunks: Iterator[pl.DataFrame]) -> None:
        self._chunks = chunks
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ragframe-read")
        self._ahead: asyncio.Future[pl.DataFrame | None] | None = None

    def read_ahead(self) -> None:
        """Start decoding the next chunk now, unless that has started already."""
        if self._ahead is None:
            loop = asyncio.get_running_loop()
            self._ahead = loop.run_in_executor(self._thread, next, self._chunks, None)

    async def next(self) -> pl.DataFrame | None:
        """The next chunk, or None at the end of the file."""
        self.read_ahead()
        assert self._ahead is not None
        ahead, self._ahead = self._ahead, None
        return await ahead

    async def close(self) -> None:
        """Wait for a read in progress (it holds the file), then let the thread go."""
        if self._ahead is not None:
            await asyncio.wait([self._ahead])
            self._ahead = None
        self._thread.shutdown(wait=False)


def score_file(
    input_path: str | Path,
    output_path: str | Path,
    metrics: Iterable[str | Metric | RagasScore],
    **options: Unpack[StreamOptions],
) -> StreamResult:
    """Score a Parquet, JSON Lines or CSV file chunk by chunk and write the scored Parquet
    file, in input order.

    The output holds what `ragframe.run(...).write_parquet(...)` would write for the same
    input (every input column and row, plus `{metric}` and `{metric}_detail`), with the run's
    metadata and summary; memory stays bounded by `chunk_rows` (default 2,000) x
    `chunks_in_flight` (default 2). An interrupted run resumes from the cache when run
    again. `metrics` may be "all"; `judge`, `reasons`, `thresholds` and `strict` as in
    `evaluate`; `overwrite` to replace an existing output. The input may be a URL (`s3://`,
    `gs://`, `az://`, `hf://`, `http(s)://`) read with `storage_options` (or the store's
    environment variables); the output is a local file. `spec`, when given, is the whole
    run specification (the command line's), and replaces metrics, columns, chunk_rows,
    reasons, thresholds and strict. The options are keyword-only (`StreamOptions`).
    """
    return run_sync(ascore_file(input_path, output_path, metrics, **options))  # type: ignore[no-any-return]
