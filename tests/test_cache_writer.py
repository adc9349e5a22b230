"""The answer cache off the event loop: one writer thread, batched commits, reads on a thread.

The promises: while another process holds the cache file locked, the run keeps sending and
receiving requests (only the callers waiting for their commit wait); every answer is in the
cache once the lock is gone; a caller of `aput` resumes only after its row is committed, and
queued rows share transactions; a cancelled caller's row is committed all the same, and
`close` commits what is queued; reads run off the loop; a lock held past the timeout is an
error naming the file, and a run whose commits fail still scores every row with the answers
it paid for; answers go in on SQLites without `->>` (before 3.38) or without JSON1.

The lock is held by a child process (`BEGIN EXCLUSIVE`) that says on stdout when it holds it
and releases it when told on stdin: no test guesses with sleeps.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe.errors import RagframeError
from ragframe.judge import cache as cache_module
from ragframe.judge.cache import AnswerCache
from ragframe.testing.server import FakeServer, auto_answer

LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("LOCKED", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
db.close()
print("RELEASED", flush=True)
"""


@contextmanager
def locked(path: Path) -> Iterator[Callable[[], None]]:
    """Hold `path` locked (BEGIN EXCLUSIVE) in another process; yields `release`."""
    child = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    def release() -> None:
        if child.poll() is None and not stdin.closed:
            stdin.write("go\n")
            stdin.close()
            assert stdout.readline().strip() == "RELEASED"
            child.wait(timeout=30)

    try:
        assert stdout.readline().strip() == "LOCKED"
        yield release
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def stored_keys(path: Path) -> set[str]:
    """The answer keys committed to the file, read through a connection of this test's own."""
    with sqlite3.connect(path) as db:
        return {key for (key,) in db.execute("SELECT key FROM answers")}


def payload(i: int) -> dict[str, Any]:
    return {"content": f"answer {i}", "value": f'{{"n": {i}}}', "usage": {"prompt_tokens": i}}


def log(n: int, start: int = 0) -> pl.DataFrame:
    rows = range(start, start + n)
    return pl.DataFrame(
        {
            "question": [f"What does device {i} measure?" for i in rows],
            "answer": [f"Device {i} measures pressure. It was built in {1900 + i}." for i in rows],
            "contexts": [[f"Device {i} measures pressure.", f"Device {i} is blue."] for i in rows],
            "ground_truth": [f"Device {i} measures air pressure." for i in rows],
        }
    )


def test_a_locked_cache_does_not_stop_requests(server: FakeServer, tmp_path: Path) -> None:
    """Another process holds the cache locked: the run goes on sending and receiving requests
    (the server answers five times the concurrency while the lock is held), and once the lock
    is gone every answer is committed and the result is complete."""
    path = tmp_path / "cache.sqlite3"
    concurrency = 4
    judge = judge_for(server, tmp_path, cache=path, concurrency=concurrency)
    assert judge.cache is not None  # the file and its tables exist before the lock is taken
    answered = threading.Event()
    seen = 0

    def handler(body: dict[str, Any]) -> Any:
        nonlocal seen
        seen += 1
        if seen >= 5 * concurrency:
            answered.set()
        return auto_answer(body)

    server.handler = handler
    data = log(40)
    metrics = ["context_precision", "answer_relevancy"]
    results: list[Any] = []
    run = threading.Thread(target=lambda: results.append(ragframe.run(data, metrics, judge=judge)))
    with locked(path) as release:
        run.start()
        # With commits on the event loop, the loop froze at the first answer (at most
        # `concurrency` requests answered) and this timed out.
        flowed = answered.wait(timeout=30)
        answered_while_locked = server.count(ok_only=True)
        release()
    run.join(timeout=120)
    assert flowed, f"only {answered_while_locked} requests answered while the cache was locked"
    assert not run.is_alive() and results, "the run did not finish once the lock was released"
    frame = results[0].frame
    assert frame.height == 40
    assert frame.select(pl.col(m).null_count() for m in metrics).row(0) == (0, 0)

    # Every answer was committed: a new judge on the same file sends nothing and agrees.
    before = server.count() + server.count("/embeddings")
    again = ragframe.run(data, metrics, judge=judge_for(server, tmp_path, cache=path))
    assert server.count() + server.count("/embeddings") == before
    assert again.frame.select(metrics).equals(frame.select(metrics))


def test_each_caller_resumes_after_its_commit_and_queued_rows_share_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache.sqlite3"
    inserts: list[str] = []  # each a transaction of its own (answers only: one statement)
    connect = AnswerCache._connect

    def traced(self: AnswerCache) -> sqlite3.Connection:
        db = connect(self)
        db.set_trace_callback(lambda sql: inserts.append(sql) if "INSERT" in sql else None)
        return db

    monkeypatch.setattr(AnswerCache, "_connect", traced)
    cache = AnswerCache(path)

    async def put_then_check(i: int) -> None:
        await cache.aput(f"k{i}", "m", payload(i))
        # Resumed only now that the row is on disk: another connection sees it.
        assert f"k{i}" in stored_keys(path)

    async def main() -> None:
        with locked(path) as release:
            waiting = [asyncio.create_task(put_then_check(i)) for i in range(50)]
            await asyncio.sleep(0)  # one turn of the loop: every task has queued its row
            assert not any(task.done() for task in waiting)  # nothing can commit yet
            release()
        await asyncio.gather(*waiting)

    asyncio.run(main())
    assert stored_keys(path) == {f"k{i}" for i in range(50)}
    # The writer took what was queued when it started waiting for the lock, then the rest.
    assert 1 <= len(inserts) <= 2
    assert cache.get_many(["k7"])["k7"]["usage"]["prompt_tokens"] == 7
    cache.close()


def test_cancelled_callers_rows_are_committed_and_close_flushes(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    cache = AnswerCache(path)
    cache.put("sync", "m", payload(0))  # the sync API still commits before returning
    assert stored_keys(path) == {"sync"}

    async def main() -> None:
        with locked(path) as release:
            task = asyncio.create_task(cache.aput("cancelled", "m", payload(1)))
            vectors = asyncio.create_task(cache.aput_vectors("e", [("v", b"\x00\x01")]))
            await asyncio.sleep(0)  # both rows are queued
            task.cancel()
            vectors.cancel()
            await asyncio.gather(task, vectors, return_exceptions=True)
            release()

    asyncio.run(main())
    cache.close()  # waits for the writer to commit what is queued
    assert stored_keys(path) == {"sync", "cancelled"}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT vector FROM embeddings WHERE key = 'v'").fetchone() == (
            b"\x00\x01",
        )
    with pytest.raises(RuntimeError, match="closed"):
        cache.put("late", "m", payload(2))


def test_reads_run_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = AnswerCache(tmp_path / "cache.sqlite3")
    cache.put("k", "m", payload(3))
    cache.put_vectors("e", [("v", b"abc")])
    threads: list[int] = []
    get_many, get_vectors = AnswerCache.get_many, AnswerCache.get_vectors

    def recorded(read: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: AnswerCache, keys: Any) -> Any:
            threads.append(threading.get_ident())
            return read(self, keys)

        return wrapper

    monkeypatch.setattr(AnswerCache, "get_many", recorded(get_many))
    monkeypatch.setattr(AnswerCache, "get_vectors", recorded(get_vectors))

    async def main() -> tuple[Any, Any]:
        return await cache.aget_many(["k", "absent"]), await cache.aget_vectors(["v", "absent"])

    answers, vectors = asyncio.run(main())  # the loop runs on this thread
    assert set(answers) == {"k"} and answers["k"]["value"] == '{"n": 3}'
    assert vectors == {"v": b"abc"}
    assert len(threads) == 2 and threading.get_ident() not in threads
    cache.close()


def test_a_lock_held_past_the_timeout_names_the_cache_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "_LOCK_TIMEOUT", 0.2)
    path = tmp_path / "cache.sqlite3"
    cache = AnswerCache(path)

    async def main() -> None:
        with locked(path):
            await cache.aput("k", "m", payload(0))

    with pytest.raises(
        RagframeError, match=r"could not write to the answer cache .*cache\.sqlite3"
    ):
        asyncio.run(main())
    cache.close()
    assert stored_keys(path) == set()


# ------------------------------------------------------------- old SQLite, failed commits

#: Payloads as the store writes them: a normalised value, a raw answer only (the Batch API
#: collector), logprobs, text that JSON must escape.
PAYLOADS: dict[str, dict[str, Any]] = {
    "plain": payload(1),
    "raw": {"content": '{"verdict": "yes"}', "usage": {"completion_tokens": 5}},
    "logprobs": {
        "content": "x",
        "value": '{"p": 0.25}',
        "logprobs": [{"token": "yes", "logprob": -0.1}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    },
    "escaped": {"content": 'quote " \\ \n é 漢 \u0000', "value": '{"s": "\\"\\u00e9"}'},
}


def expected(stored: dict[str, Any]) -> dict[str, Any]:
    """What `get_many` gives back for a payload `put` took."""
    usage = stored.get("usage") or {}
    return {
        "value": stored.get("value"),
        "content": None if stored.get("value") is not None else stored["content"],
        "logprobs": stored.get("logprobs"),
        "usage": {
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
        },
    }


def traced_cache(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[AnswerCache, list[str]]:
    """A cache whose connections record every statement they run."""
    statements: list[str] = []
    connect = AnswerCache._connect

    def traced(self: AnswerCache) -> sqlite3.Connection:
        db = connect(self)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(AnswerCache, "_connect", traced)
    return AnswerCache(path), statements


def put_all(cache: AnswerCache) -> None:
    """One answer with the sync API, the rest queued at once (one group commit) with a vector."""
    cache.put("plain", "m", PAYLOADS["plain"])

    async def main() -> None:
        await asyncio.gather(
            *(cache.aput(key, "m", p) for key, p in PAYLOADS.items() if key != "plain"),
            cache.aput_vectors("e", [("v", b"\x00\x01")]),
        )

    asyncio.run(main())


def test_answer_inserts_need_no_sqlite_newer_than_json1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`->>` exists only from SQLite 3.38: on an older one (Ubuntu 20.04, RHEL 8) every insert
    was a syntax error. No statement the cache runs may use `->` or `->>`."""
    cache, statements = traced_cache(tmp_path / "cache.sqlite3", monkeypatch)
    put_all(cache)
    assert cache.get_many(list(PAYLOADS)) == {k: expected(p) for k, p in PAYLOADS.items()}
    cache.close()
    inserts = [sql for sql in statements if "INSERT" in sql]
    assert any("json_each" in sql for sql in inserts)  # the bulk statement was the one used
    assert not [sql for sql in statements if "->" in sql]
    assert "->" not in cache_module._ANSWERS_INSERT


def test_without_json1_answers_go_in_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite built without JSON1 stores and gives back the same answers, one statement a
    row, the rows of one commit in one transaction."""
    monkeypatch.setattr(cache_module, "_has_json1", lambda db: False)
    cache, statements = traced_cache(tmp_path / "cache.sqlite3", monkeypatch)
    put_all(cache)
    assert cache.get_many(list(PAYLOADS)) == {k: expected(p) for k, p in PAYLOADS.items()}
    assert cache.get_vectors(["v"]) == {"v": b"\x00\x01"}
    assert len(cache) == len(PAYLOADS)
    cache.close()
    assert not [sql for sql in statements if "json" in sql.lower()]


def test_a_commit_that_fails_at_once_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that came without waiting out the lock timeout is tried once more before
    every caller of the batch is failed."""
    insert = cache_module._insert
    calls = 0

    def flaky(*args: Any) -> Exception | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            return sqlite3.OperationalError("database is locked")
        return insert(*args)

    monkeypatch.setattr(cache_module, "_insert", flaky)
    path = tmp_path / "cache.sqlite3"
    cache = AnswerCache(path)
    asyncio.run(asyncio.wait_for(cache.aput("k", "m", payload(0)), timeout=30))
    assert calls == 2 and stored_keys(path) == {"k"}
    cache.close()


def test_a_failed_commit_keeps_the_answers_of_the_run(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the cache locked past the timeout: every answer received is
    still used (each row scores), each one not stored is counted and the run warns once,
    naming the file. Once the lock is gone the same judge caches its answers again."""
    monkeypatch.setattr(cache_module, "_LOCK_TIMEOUT", 0.2)
    path = tmp_path / "cache.sqlite3"
    judge = judge_for(server, tmp_path, cache=path, concurrency=4)
    assert judge.cache is not None  # the file and its tables exist before the lock is taken
    metrics = ["context_precision", "answer_relevancy"]
    started = time.monotonic()
    with locked(path), pytest.warns(UserWarning) as warned:
        locked_run = ragframe.run(log(8), metrics, judge=judge)
    assert time.monotonic() - started < 60
    frame = locked_run.frame
    assert frame.height == 8
    assert frame.select(pl.col(m).null_count() for m in metrics).row(0) == (0, 0)
    sent = server.count(ok_only=True) + server.count("/embeddings", ok_only=True)
    assert sent > 0 and locked_run.stats.failures["cache_write"] == sent
    about_cache = [w for w in warned if "answer cache" in str(w.message)]
    assert len(about_cache) == 1
    assert str(path) in str(about_cache[0].message) and "--no-cache" in str(about_cache[0].message)
    assert stored_keys(path) == set()

    # The lock is gone: the writer thread is still there, and answers are committed again.
    data = log(8, start=100)
    later = ragframe.run(data, metrics, judge=judge)
    assert "cache_write" not in later.stats.failures
    assert stored_keys(path)
    before = server.count() + server.count("/embeddings")
    again = ragframe.run(data, metrics, judge=judge_for(server, tmp_path, cache=path))
    assert server.count() + server.count("/embeddings") == before
    assert again.frame.select(metrics).equals(later.frame.select(metrics))


@pytest.mark.parametrize("json1", [True, False], ids=["json1", "no-json1"])
def test_failures_share_the_commit_of_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json1: bool
) -> None:
    """A remembered failure is queued with answers like any row: one transaction commits
    both, with or without JSON1, and an answer that replaces a failure deletes it there."""
    if not json1:
        monkeypatch.setattr(cache_module, "_has_json1", lambda db: False)
    cache, statements = traced_cache(tmp_path / "cache.sqlite3", monkeypatch)
    failure = {"kind": "length", "reason": "cut off", "conditions": {"repair_attempts": 1}}

    async def main() -> None:
        await cache.aput_failure("old", "m", failure)
        await asyncio.gather(
            *(cache.aput(f"k{i}", "m", payload(i)) for i in range(5)),
            cache.aput_failure("f", "m", {**failure, "usage": {"prompt_tokens": 7}}),
            cache.aput("old", "m", payload(9), replaces_failure=True),
        )

    asyncio.run(main())
    assert set(cache.get_many([f"k{i}" for i in range(5)])) == {f"k{i}" for i in range(5)}
    assert cache.get_failures(["f", "old"]) == {
        "f": {
            "kind": "length",
            "reason": "cut off",
            "conditions": {"repair_attempts": 1},
            "usage": {"prompt_tokens": 7, "completion_tokens": 0},
        }
    }
    cache.close()
    # The writer's transactions: everything queued together went in one.
    transactions = " ".join(statements).split("BEGIN IMMEDIATE")
    gathered = [t for t in transactions if "k0" in t]
    assert len(gathered) == 1 and "DELETE FROM failures" in gathered[0]
    assert all(f"k{i}" in gathered[0] for i in range(5)) and "('f'," in gathered[0]
    assert not [sql for sql in statements if "->" in sql]
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT key FROM failures").fetchall() == [("f",)]


#: Four processes open one new cache file at the same instant, then say how it went.
OPEN_TOGETHER = """
import sys, time
from ragframe.judge.cache import AnswerCache
start = float(sys.argv[2])
while time.time() < start:
    pass
AnswerCache(sys.argv[1]).close()
"""


def test_processes_opening_one_new_cache_file_together_all_open_it(tmp_path: Path) -> None:
    """SQLite refuses a journal-mode change on a file another process is opening with
    "database is locked" at once, not after its busy timeout: two `ragframe score` processes
    started together on one new cache file failed about 1 open in 10. Every open waits its
    turn now (12 rounds of 4 processes; before the fix, at least one failed in nearly all
    runs of this test)."""
    for round_ in range(12):
        path = tmp_path / f"shared{round_}.sqlite3"
        start = time.time() + 0.7  # every process imported and waiting by then
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_TOGETHER, str(path), str(start)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
