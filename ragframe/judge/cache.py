"""A persistent answer cache in SQLite, so an interrupted run resumes without paying twice.

Each answer is committed as soon as it arrives (WAL mode), so a run killed with SIGKILL loses
nothing it had been answered. Several processes may share one file: SQLite's locking keeps it
consistent and `INSERT OR IGNORE` makes concurrent writers of the same key harmless.

Answers live in `answers`. Requests that failed for good in a way a rerun would repeat (cut
off at max_tokens at temperature 0; `store.REMEMBERED_KINDS`) live apart, by the same key, in
`failures`: a ragframe that predates that table never reads it, so it cannot take a failure
for an answer, and an answer for the key (written by any version) wins over it.

Off the event loop: writes go to one writer thread that commits whatever is queued in one
transaction, and the async reads run on a reader thread, so a slow disk or another process
holding the file locked delays only the callers waiting on the cache, never the requests in
flight. An async writer resumes only once its row is committed: an answer counts as received
only when a crash can no longer lose it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import math
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ragframe.errors import RagframeError
from ragframe.judge.cache_tables import (
    SCHEMA,
    AnswerRow,
    answer_row,
    failure_row,
    select_answer_rows,
    select_answers,
    select_failures,
    select_scored,
    select_vectors,
)
from ragframe.judge.private_files import create_private_file, make_private_dirs

try:
    import fcntl
except ImportError:  # Windows: no claim by lock; names are taken as given
    fcntl = None  # type: ignore[assignment]

#: Seconds a write or read waits for another process's lock before it fails.
_LOCK_TIMEOUT = 60.0
#: Rows committed in one transaction at most (a backlog is drained in a few commits).
_MAX_BATCH = 1000
#: How long the writer waits after an async write arrives, for others to share its commit.
_GROUP_COMMIT_SECONDS = 0.02

#: Answers, many rows in one statement (one JSON array of rows): sqlite3 lets go of the
#: GIL around every statement it steps, and a writer thread taking it back once per row
#: forces a switch away from the event loop each time (measured: 48,000 context switches
#: for 8,500 answers with executemany). `json_extract`, not `->>`: the operator needs SQLite
#: 3.38 (2022), and Pythons linked to an older one (Ubuntu 20.04, RHEL 8) would fail every
#: insert; JSON1's functions date from 3.9 (2015).
_ROW_FIELDS = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(8))
_ANSWERS_INSERT = f"INSERT OR IGNORE INTO answers SELECT {_ROW_FIELDS} FROM json_each(?)"
#: The same rows one statement each, where SQLite was built without JSON1.
_ANSWERS_INSERT_ROWS = "INSERT OR IGNORE INTO answers VALUES (?,?,?,?,?,?,?,?)"
_VECTOR_INSERT = "INSERT OR IGNORE INTO embeddings (key, model, vector) VALUES (?,?,?)"
#: A failure replaces an earlier one of its key (sent again, it failed again: the newer reason).
_FAILURE_INSERT = "INSERT OR REPLACE INTO failures VALUES (?,?,?,?,?,?,?,?)"
_SCORED_INSERT = "INSERT OR REPLACE INTO scored (key, frame, created) VALUES (?,?,?)"
_FAILURE_DELETE = "DELETE FROM failures WHERE key = ?"


def default_cache_path() -> Path:
    """`$RAGFRAME_CACHE`, else `$XDG_CACHE_HOME/ragframe/cache.sqlite3`, else under `~/.cache`."""
    explicit = os.environ.get("RAGFRAME_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragframe" / "cache.sqlite3"


def request_key(payload: dict[str, Any]) -> str:
    """A stable hash of everything that decides an answer: model, endpoint, messages, schema,
    sampling parameters. (The structured-output transport is not part of it, so a server
    that falls back from json_schema to json_object still finds earlier answers.)"""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class _Write:
    """Rows for the writer thread, and the future that tells their caller they are committed:
    an asyncio future of `loop` (an `aput` caller), or a concurrent one (a sync `put` caller)."""

    answers: list[tuple[Any, ...]] = field(default_factory=list)
    vectors: list[tuple[str, str, bytes]] = field(default_factory=list)
    failures: list[tuple[Any, ...]] = field(default_factory=list)
    #: Keys whose remembered failure an answer in this write replaces.
    cleared: list[str] = field(default_factory=list)
    #: (key, Arrow IPC bytes, created): a metric's scored columns for one chunk.
    scored: list[tuple[str, bytes, float]] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[None] | concurrent.futures.Future[None] | None = None


_STOP = _Write()


class CacheWriteError(RagframeError):
    """Rows could not be committed (the file locked past the timeout, a full disk...).

    Its own class so that a run can tell it from a failed request: the answer is still good.
    """


def _settle_on_loop(settled: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    """Runs on the event loop (asyncio futures are not thread-safe)."""
    for future, error in settled:
        if future.done():  # the caller was cancelled; its row is committed all the same
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class AnswerCache:
    """Key -> answer payload (a JSON object: content, logprobs, usage), stored on disk.

    Thread-safe. Sync `put`/`get_many` (for callers off the event loop) and async `aput`/
    `aget_many` (for the event loop) share one writer thread; `close` commits what is queued.
    """

    #: WAL: readers never wait for the writer, and a writer killed mid-commit is recovered by
    #: the next connection, a read-only one included.
    journal_mode = "WAL"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        make_private_dirs(self.path.parent)
        create_private_file(self.path)  # SQLite gives its -wal and -shm files the same mode
        self._lock = threading.Lock()  # the sync reads' connection
        self._state = threading.Lock()  # the threads, the closed flag
        self._db = self._connect()
        self._prepare_file()
        #: Whether answers go in as one JSON array per commit (else one statement per row).
        self._bulk = _has_json1(self._db)
        self._queue: queue.SimpleQueue[_Write] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        _OPEN.add(self)

    def _prepare_file(self) -> None:
        """Set the journal mode and create the tables, waiting out another process doing the
        same: SQLite answers a journal-mode change on a file another connection is opening
        with "database is locked" at once, without its busy timeout (two `ragframe score`
        processes started together on one new cache file failed 1 open in 10)."""
        deadline = time.monotonic() + _LOCK_TIMEOUT
        for attempt in itertools.count():
            try:
                self._db.execute(f"PRAGMA journal_mode={self.journal_mode}")
                self._db.executescript(SCHEMA)
                self._db.commit()
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(min(0.005 * 2**attempt, 0.25))

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=_LOCK_TIMEOUT, check_same_thread=False)
        db.execute("PRAGMA synchronous=NORMAL")  # with WAL: a commit survives a killed process
        return db

    # ------------------------------------------------------------------------------- reads

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Look many keys up at once (one query per 500 keys keeps warm reruns cheap).

        Each hit is a payload like the one `put` took: `value` (the normalised answer, JSON
        text), `logprobs`, `usage`, and `content` (the raw answer) only when there is no value.
        """
        with self._lock:
            return select_answers(self._db, keys)

    def get_rows(self, keys: Sequence[str]) -> dict[str, AnswerRow]:
        """`get_many` as stored (`cache_tables.AnswerRow`): nothing decoded, for a warm
        rerun that passes each answer's JSON text on as it is."""
        with self._lock:
            return select_answer_rows(self._db, keys)

    def get_failures(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The remembered failures among `keys` that no answer has replaced, by key: each a
        payload like the one `put_failure` took (`kind`, `reason`, `conditions`, `usage`)."""
        with self._lock:
            return select_failures(self._db, keys)

    def get_vectors(self, keys: Sequence[str]) -> dict[str, bytes]:
        with self._lock:
            return select_vectors(self._db, keys)

    def get_scored(self, keys: Sequence[str]) -> dict[str, bytes]:
        """A metric's scored columns kept for reuse, by key (`ragframe.engine.reuse`)."""
        with self._lock:
            return select_scored(self._db, keys)

    async def aget_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """`get_many` on the reader thread: the loop goes on serving requests meanwhile."""
        return await self._off_loop(self.get_many, keys)

    async def aget_rows(self, keys: Sequence[str]) -> dict[str, AnswerRow]:
        """`get_rows` on the reader thread."""
        return await self._off_loop(self.get_rows, keys)

    async def aget_failures(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """`get_failures` on the reader thread."""
        return await self._off_loop(self.get_failures, keys)

    async def aget_vectors(self, keys: Sequence[str]) -> dict[str, bytes]:
        """`get_vectors` on the reader thread."""
        return await self._off_loop(self.get_vectors, keys)

    async def aget_scored(self, keys: Sequence[str]) -> dict[str, bytes]:
        """`get_scored` on the reader thread."""
        return await self._off_loop(self.get_scored, keys)

    async def _off_loop(self, read: Callable[[Sequence[str]], Any], keys: Sequence[str]) -> Any:
        if not keys:
            return {}
        with self._state:
            if self._reader is None:
                self._reader = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="ragframe-cache-read"
                )
            reader = self._reader
        return await asyncio.get_running_loop().run_in_executor(reader, read, keys)

    # ------------------------------------------------------------------------------ writes

    def put(self, key: str, model: str, payload: dict[str, Any]) -> None:
        """Store one answer and return once it is committed: a crash after must not lose it.

        `payload`: `content` (the raw answer), optional `value` (normalised JSON text),
        `logprobs`, `usage` ({prompt_tokens, completion_tokens}).
        """
        self._write_and_wait(_Write(answers=[answer_row(key, model, payload)]))

    def put_vectors(self, model: str, items: Iterable[tuple[str, bytes]]) -> None:
        """Store embedding vectors and return once they are committed."""
        self._write_and_wait(_Write(vectors=[(key, model, blob) for key, blob in items]))

    async def aput(
        self, key: str, model: str, payload: dict[str, Any], *, replaces_failure: bool = False
    ) -> None:
        """`put` for the event loop: queued for the writer thread; returns once committed.

        If the caller is cancelled meanwhile, the row is still committed. `replaces_failure`:
        the key has a remembered failure, deleted in the same transaction.
        """
        cleared = [key] if replaces_failure else []
        await self._awrite(_Write(answers=[answer_row(key, model, payload)], cleared=cleared))

    def put_failure(self, key: str, model: str, payload: dict[str, Any]) -> None:
        """Remember that a request failed for good, and return once that is committed.

        `payload`: `kind` (the AnswerError kind), `reason` (the row's error), `conditions`
        (a JSON-able dict of the settings the failure depends on beyond its key), `usage`.
        """
        self._write_and_wait(_Write(failures=[failure_row(key, model, payload)]))

    async def aput_failure(self, key: str, model: str, payload: dict[str, Any]) -> None:
        """`put_failure` for the event loop: returns once committed."""
        await self._awrite(_Write(failures=[failure_row(key, model, payload)]))

    async def aput_vectors(self, model: str, items: Iterable[tuple[str, bytes]]) -> None:
        """`put_vectors` for the event loop: returns once the vectors are committed."""
        await self._awrite(_Write(vectors=[(key, model, blob) for key, blob in items]))

    async def aput_scored(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Keep scored columns for reuse (key, Arrow IPC bytes); returns once committed."""
        now = time.time()
        await self._awrite(_Write(scored=[(key, frame, now) for key, frame in items]))

    def _write_and_wait(self, write: _Write) -> None:
        """Queue `write` for the writer thread and block until it is committed."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        write.future = done
        self._submit(write)
        done.result()

    async def _awrite(self, write: _Write) -> None:
        """Queue `write` for the writer thread and wait, on the loop, until it is committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        write.loop, write.future = loop, done
        self._submit(write)
        await done

    def _submit(self, write: _Write) -> None:
        with self._state:
            if self._closed:
                raise RuntimeError(f"the answer cache {str(self.path)!r} is closed")
            if self._writer is None or not self._writer.is_alive():  # not alive: a forked child
                # A daemon thread: a process that never closes its cache still exits; the
                # atexit hook below commits what is queued first.
                self._writer = threading.Thread(
                    target=self._write_loop, name="ragframe-cache-write", daemon=True
                )
                self._writer.start()
            self._queue.put(write)

    def _write_loop(self) -> None:
        """The writer thread: take what is queued, commit it in one transaction, tell each
        caller; until `close` queues the stop marker."""
        db = self._connect()
        db.isolation_level = None  # transactions are begun explicitly below
        try:
            stop = False
            while not stop:
                batch = [self._queue.get()]
                if batch[0].loop is not None:
                    # Group commit: answers arrive hundreds a second; waiting a moment for
                    # the next ones saves a transaction, a thread switch and a loop wake-up
                    # for each. A sync caller (one row at a time) is not kept waiting.
                    time.sleep(_GROUP_COMMIT_SECONDS)
                while len(batch) < _MAX_BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(write is _STOP for write in batch)
                self._commit(db, batch)
        finally:
            db.close()

    def _commit(self, db: sqlite3.Connection, batch: list[_Write]) -> None:
        """Insert every row of `batch` in one transaction and tell each caller how it went.

        A failure that is not about the file as a whole (a lock held past the timeout, a full
        or failing disk) is retried write by write, so one bad row fails only its caller. One
        about the file that came at once (not after waiting out the lock timeout: waiting
        again would double the stall) is retried once, since every row of the batch hangs on it.
        """
        started = time.monotonic()
        error = _insert(db, batch, self._bulk)
        if isinstance(error, sqlite3.OperationalError) and (
            time.monotonic() - started < _LOCK_TIMEOUT / 2
        ):
            error = _insert(db, batch, self._bulk)
        if error is not None and len(batch) > 1 and not isinstance(error, sqlite3.OperationalError):
            for write in batch:
                self._commit(db, [write])
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for write in batch:
            failure = None if error is None else self._write_failed(error)
            if write.loop is not None:
                by_loop.setdefault(write.loop, []).append((write.future, failure))
            elif isinstance(write.future, concurrent.futures.Future):
                if failure is None:
                    write.future.set_result(None)
                else:
                    write.future.set_exception(failure)
        for loop, settled in by_loop.items():  # one wake-up per loop, not one per row
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
                loop.call_soon_threadsafe(_settle_on_loop, settled)

    def _write_failed(self, error: Exception) -> CacheWriteError:
        failure = CacheWriteError(
            f"could not write to the answer cache {str(self.path)!r}: {error}. If another "
            "process holds it locked, let it finish; or pass another cache file (--cache, "
            "Judge(cache=...)), or none (--no-cache, cache=False)"
        )
        failure.__cause__ = error
        return failure

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        """Commit what is queued, stop the threads, close the file. Idempotent."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            writer, reader = self._writer, self._reader
            if writer is not None:
                self._queue.put(_STOP)
        if writer is not None:
            writer.join()
        if reader is not None:
            reader.shutdown(wait=True)
        with self._lock:
            self._db.close()
        _OPEN.discard(self)


def _has_json1(db: sqlite3.Connection) -> bool:
    """Whether SQLite has the JSON1 functions (built in since 3.38, an option before)."""
    try:
        db.execute("SELECT json_extract(value, '$[0]') FROM json_each('[[1]]')").fetchall()
    except sqlite3.OperationalError:
        return False
    return True


def _insert(db: sqlite3.Connection, batch: list[_Write], bulk: bool) -> Exception | None:
    """Insert the rows of `batch` in one transaction; the error if it failed (rolled back).

    Answers alone (the usual batch) take one statement, which SQLite runs as a transaction of
    its own: one call, so the writer thread takes the GIL back once, not three times. Without
    JSON1 (`bulk` false) they go in row by row, inside one explicit transaction.
    """
    answers = [row for write in batch for row in write.answers]
    vectors = [row for write in batch for row in write.vectors]
    failures = [row for write in batch for row in write.failures]
    cleared = [(key,) for write in batch for key in write.cleared]
    scored = [row for write in batch for row in write.scored]
    try:
        if not (vectors or failures or cleared or scored) and bulk:
            if answers:
                db.execute(_ANSWERS_INSERT, (json.dumps(answers),))
            return None
        db.execute("BEGIN IMMEDIATE")  # the write lock now, waiting up to the busy timeout
    except Exception as exc:  # the writer thread must survive anything a row can cause
        return exc
    try:
        if answers and bulk:
            db.execute(_ANSWERS_INSERT, (json.dumps(answers),))
        elif answers:
            db.executemany(_ANSWERS_INSERT_ROWS, answers)
        db.executemany(_VECTOR_INSERT, vectors)
        db.executemany(_FAILURE_DELETE, cleared)
        db.executemany(_FAILURE_INSERT, failures)
        db.executemany(_SCORED_INSERT, scored)
        db.execute("COMMIT")
    except Exception as exc:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        return exc
    return None


class SharedAnswerCache(AnswerCache):
    """One worker's answer cache in a directory that all workers of a cluster reach (shared
    storage): the worker writes only its own file, `{name}.sqlite3`, and reads every
    `*.sqlite3` file of the directory, its own first.

    So no SQLite file is ever written by two processes, which SQLite's locking cannot make
    safe over a network filesystem. The name is claimed with an exclusive `flock` (released
    by the kernel when the process dies, however it dies): a second live process asking for a
    taken name writes `name.1` instead. The other files are opened read-only and only read; a
    file that cannot be read at the moment (a filesystem whose locks or shared memory do not
    reach across hosts, as WAL needs) is passed over for that lookup: it costs a request,
    never a wrong answer (answers are found by the hash of their whole request). New files
    (workers started since) are picked up at most `rescan_seconds` after they appear.
    """

    def __init__(self, directory: str | Path, name: str, *, rescan_seconds: float = 5.0) -> None:
        self.directory = Path(directory)
        make_private_dirs(self.directory)
        self._lockfile, own = _claim(self.directory, name)
        super().__init__(self.directory / f"{own}.sqlite3")
        self.rescan_seconds = rescan_seconds
        self._peers: dict[Path, sqlite3.Connection | None] = {}
        self._scanned = -math.inf

    def peers(self) -> list[Path]:
        """The other workers' files read besides this one's (as of the last scan)."""
        with self._lock:
            self._rescan()
            return sorted(self._peers)

    def _rescan(self) -> None:
        now = time.monotonic()
        if now - self._scanned < self.rescan_seconds:
            return
        self._scanned = now
        for path in sorted(self.directory.glob("*.sqlite3")):
            if path != self.path and path not in self._peers:
                self._peers[path] = None

    def _peer(self, path: Path) -> sqlite3.Connection | None:
        db = self._peers.get(path)
        if db is None:
            try:
                db = sqlite3.connect(
                    f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0,
                    check_same_thread=False,
                )  # fmt: skip
            except sqlite3.Error:
                return None
            self._peers[path] = db
        return db

    def _read_all(self, keys: Sequence[str], read: Callable[..., dict[str, Any]]) -> dict[str, Any]:
        """`read(db, keys)` on this worker's file, then on each other file for the keys still
        missing; a file that fails to answer is passed over (and reopened next time)."""
        with self._lock:
            found = read(self._db, keys)
            self._rescan()
            for path in list(self._peers):
                missing = [k for k in keys if k not in found]
                if not missing:
                    break
                db = self._peer(path)
                if db is None:
                    continue
                try:
                    found.update(read(db, missing))
                except sqlite3.Error:
                    with contextlib.suppress(sqlite3.Error):
                        db.close()
                    self._peers[path] = None
        return found

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        return self._read_all(keys, select_answers)

    def get_rows(self, keys: Sequence[str]) -> dict[str, AnswerRow]:
        return self._read_all(keys, select_answer_rows)

    def get_failures(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        # A failure one worker remembers is overruled by an answer any worker holds.
        failed = self._read_all(keys, select_failures)
        answered = self._read_all(list(failed), select_answers) if failed else {}
        return {k: v for k, v in failed.items() if k not in answered}

    def get_vectors(self, keys: Sequence[str]) -> dict[str, bytes]:
        return self._read_all(keys, select_vectors)

    def get_scored(self, keys: Sequence[str]) -> dict[str, bytes]:
        return self._read_all(keys, select_scored)

    def close(self) -> None:
        super().close()
        with self._lock:
            for db in self._peers.values():
                if db is not None:
                    db.close()
            self._peers.clear()
        if self._lockfile is not None:
            self._lockfile.close()  # releases the claim
            self._lockfile = None


def _claim(directory: Path, name: str) -> tuple[IO[str] | None, str]:
    """The file name this process writes: `name`, or `name.1`, `name.2`... when another live
    process holds it (two runs sharing a directory). Held by an exclusive `flock` on
    `{name}.lock`, which the kernel releases when the process dies, however it dies, so a
    killed worker's file is free for its restarted self. Where locks are unavailable the name
    is taken as given."""
    if fcntl is None:
        return None, name
    for attempt in itertools.count():
        candidate = name if attempt == 0 else f"{name}.{attempt}"
        create_private_file(directory / f"{candidate}.lock")
        handle = open(directory / f"{candidate}.lock", "a")  # noqa: SIM115 -- held until close
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return handle, candidate
    raise AssertionError("unreachable")


#: Caches with a writer that may hold queued rows: committed at interpreter exit.
_OPEN: weakref.WeakSet[AnswerCache] = weakref.WeakSet()


@atexit.register
def _close_open_caches() -> None:
    for cache in list(_OPEN):
        cache.close()
