"""Score Arrow data: the seam any engine can call (Ray Data, Spark, Daft, Dask).

`score_arrow(batch, metrics, judge)` takes a `pyarrow.RecordBatch` or `Table` and returns a
`pyarrow.Table`: every input column and row as they came, plus `{metric}` and
`{metric}_detail` (and `{metric}_pass` with a threshold), with exactly the types a
single-process run gives (`ragframe.run(...).frame.to_arrow()`). It is synchronous, so it can be
a UDF; an engine's workers keep one `ArrowSession` each (one pool of requests, one answer
cache, HTTP connections kept open) and pass it to every call:

>>> with ArrowSession(judge) as session:                      # doctest: +SKIP
...     for batch in batches:
...         yield score_arrow(batch, metrics, session=session)

No progress bar is shown (engines have their own).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa

from ragframe.engine.prepare import choose_metrics, needs_judge, prepare_run, score_frame
from ragframe.engine.spec import RunSpec
from ragframe.errors import ConfigError, InputError
from ragframe.judge.client import Judge, JudgeSession, RunStats
from ragframe.metrics import Metric, RagasScore

__all__ = ["ArrowSession", "prepare", "score_arrow", "to_frame"]

T = TypeVar("T")
Metrics = Iterable[str | Metric | RagasScore] | str


class ArrowSession:
    """A judge session for synchronous callers: the session lives on an event loop of its
    own, in a daemon thread, for as long as the `ArrowSession` is open.

    Why: a UDF is called once per batch, from a thread the engine owns and that has no
    event loop; opening a session per batch would pay for new connections, a new pool (its
    AIMD limit learnt again) and a new cache reader each time. The session itself is entered
    only when a batch first needs the judge (non-LLM metrics never open a connection).
    """

    def __init__(self, judge: Judge | None = None) -> None:
        given = judge if judge is not None else Judge()
        # The cache the judge holds open, passed on: `replace` copies without it (as a pickled
        # copy), and the copy would open a plain cache on the same file; an actor's
        # `SharedAnswerCache` (reading every other actor's file) would never be read.
        opened = vars(given).get("_cache")
        keep: dict[str, Any] = {} if opened is None else {"cache": opened}
        self.judge = given.replace(progress=False, **keep)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ragframe-arrow-loop", daemon=True
        )
        self._thread.start()
        self._session: JudgeSession | None = None
        self._entered = False
        self._closed = False

    @property
    def stats(self) -> RunStats:
        """What the session has sent and received so far (all batches together)."""
        return self.session.stats

    @property
    def session(self) -> JudgeSession:
        if self._session is None:
            self._session = self.run(_make_session(self.judge))
        return self._session

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the session's loop and wait for its result."""
        if self._closed:
            coro.close()
            raise ConfigError("this ArrowSession is closed; open a new one")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def open(self) -> JudgeSession:
        """Enter the judge session now (its HTTP client and request pool) rather than at the
        first batch that needs the judge: for a caller that adjusts the pool before any request
        (a Ray actor drawing on the cluster's rate limits). Idempotent."""
        session = self.session
        if not self._entered:
            self.run(session.__aenter__())
            self._entered = True
        return session

    def score(
        self,
        frame: pl.DataFrame,
        metrics: list[Metric | RagasScore],
        columns: Mapping[str, str] | None = None,
    ) -> pl.DataFrame:
        """Score a frame with metrics already prepared (`prepare`)."""
        session = self.session
        if frame.height and needs_judge(metrics):
            self.open()
        try:
            return self.run(score_frame(frame, metrics, session, columns))
        finally:
            # Bounded memory over any number of batches: the disk cache keeps the answers.
            session.forget()

    def close(self) -> None:
        """Close the session (its HTTP connections) and stop the loop. Idempotent."""
        if self._closed:
            return
        if self._entered and self._session is not None:
            with contextlib.suppress(Exception):
                self.run(self._session.__aexit__(None, None, None))
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ArrowSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_session(judge: Judge) -> JudgeSession:
    """A session made inside its loop (asyncio primitives belong to the loop they are made on)."""
    return judge.session()


def to_frame(batch: pa.RecordBatch | pa.Table) -> pl.DataFrame:
    """A RecordBatch or Table as a Polars frame, or an InputError saying what it got."""
    if not isinstance(batch, pa.RecordBatch | pa.Table):
        raise InputError(
            f"score_arrow takes a pyarrow.RecordBatch or pyarrow.Table, got "
            f"{type(batch).__name__}; for a Polars or pandas frame use ragframe.evaluate"
        )
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return frame


def prepare(
    frame: pl.DataFrame,
    metrics: Metrics,
    judge: Judge,
    *,
    columns: Mapping[str, str] | None = None,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
) -> list[Metric | RagasScore]:
    """The run's metric instances for a frame of these columns, prepared and checked as
    every path prepares them (`ragframe.engine.prepare.prepare_run`) before any request. Only the
    frame's columns and types are looked at."""
    options = {"reasons": reasons, "thresholds": thresholds, "strict": strict}
    spec = RunSpec.of(metrics, columns=columns, **options)
    return prepare_run(frame.head(0), spec, judge).metrics


def score_arrow(
    batch: pa.RecordBatch | pa.Table,
    metrics: Metrics,
    judge: Judge | None = None,
    *,
    columns: Mapping[str, str] | None = None,
    reasons: bool | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
    session: ArrowSession | None = None,
) -> pa.Table:
    """Score one Arrow batch: every input column and row kept, `{metric}` and
    `{metric}_detail` added, the schema a single-process run writes.

    metrics, columns, reasons, thresholds, strict : as in `ragframe.evaluate`.
    judge : the judge; default that of `session`, else `Judge()`.
    session : an open `ArrowSession`, kept across calls (one per worker): its judge is used,
        and its pool, connections and answers are shared by every batch it scores. Without
        one, a session is opened and closed for this batch alone.
    """
    frame = to_frame(batch)
    options = {"columns": columns, "reasons": reasons, "thresholds": thresholds, "strict": strict}
    if session is not None:
        if judge is not None and judge.describe() != session.judge.describe():
            raise ConfigError("score_arrow got a judge and a session of another judge; pass one")
        chosen = prepare(frame, metrics, session.judge, **options)
        return session.score(frame, chosen, columns).to_arrow()
    if judge is None:
        judge = Judge(cache=needs_judge(choose_metrics(metrics, frame.columns, columns)))
    with ArrowSession(judge) as own:
        chosen = prepare(frame, metrics, own.judge, **options)
        return own.score(frame, chosen, columns).to_arrow()
