"""Crashes and interruptions of `ragframe score`: SIGKILL, Ctrl-C, and an existing output.

Every test drives the real command line in a subprocess, so a kill hits a process with live
HTTP connections, an open SQLite cache and, perhaps, a half-written output, as it would in
use. The fake server runs in this process (a thread), behind a valve: it answers up to a set
number of chat requests and holds every later one until the test raises the limit. A kill
lands once the valve has let its share through AND the cache holds every one of those
answers, with the client's next requests held open at the server; so what "answered before
the kill" means is exact, and no wall-clock margin is needed: a rerun must send none of it.

Cost: about 35 s on a loaded 2-core machine (a dozen `ragframe score` processes, each
paying 1-3 s of interpreter start and imports).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe.testing.server import FakeServer, auto_answer, messages_hash

ROWS = 60
#: Metrics whose scripted answers are all usable (no repair, no failed row), so every answer
#: becomes exactly one cache entry and "answered" equals "committed" once the client caught up.
METRICS = "faithfulness,context_precision,hallucination"
SEED = 20240611
#: How long a wait for the client may take before the test fails (a bound, not a margin:
#: every wait ends as soon as its condition holds).
PATIENCE = 120.0


def rows(n: int) -> pl.DataFrame:
    """`n` distinct rows (every prompt differs, so each request names one row)."""
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "question": [f"What does device {i} measure?" for i in range(n)],
            "answer": [
                f"Device {i} measures pressure. It was built in {1900 + i} in plant {i % 7}."
                for i in range(n)
            ],
            "contexts": [
                [f"Device {i} measures pressure.", f"Plant {i % 7} is big."] for i in range(n)
            ],
            "ground_truth": [f"Device {i} measures air pressure." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


class Valve:
    """A chat handler that answers (the scripted answer) until `passed` reaches the limit,
    then holds every further request until the limit is raised (None: no limit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limit: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self.passed = 0

    async def __call__(self, body: dict[str, Any]) -> str:
        while True:
            with self._lock:
                if self._limit is None or self.passed < self._limit:
                    self.passed += 1
                    break
                self._loop = asyncio.get_running_loop()
                wake = self._wake
            await wake.wait()
        return auto_answer(body)

    def allow(self, limit: int | None) -> None:
        """Let `limit` answers through in all (None: every one) and wake held requests."""
        with self._lock:
            self._limit = limit
            loop, wake = self._loop, self._wake
            self._wake = asyncio.Event()
        if loop is not None:
            loop.call_soon_threadsafe(wake.set)


@pytest.fixture(scope="module")
def valved() -> Iterator[tuple[FakeServer, Valve]]:
    """One fake server for the module, behind a valve: 50 ms per request, 8 slots."""
    valve = Valve()
    with FakeServer(valve, latency=0.05, capacity=8) as server:
        yield server, valve


def answered(server: FakeServer, key: str | None = None) -> list[str]:
    """messages_hash of every chat request answered 200 (only those sent with `key`)."""
    return [
        messages_hash(r.body["messages"])
        for r in list(server.requests)
        if r.path.endswith("/chat/completions")
        and r.status == 200
        and (key is None or r.headers.get("authorization") == f"Bearer {key}")
    ]


def cached(cache: Path) -> int:
    """Answers committed to the cache file (0 before it exists)."""
    if not cache.exists():
        return 0
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
        except sqlite3.OperationalError:  # the table is not created yet
            return 0


def score(source: Path, target: Path, cache: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "ragframe.cli", "score", str(source), "-o", str(target),
        "--cache", str(cache), "--metrics", METRICS, "--base-url", base_url, "--model", "m",
        "--no-progress", *extra,
    ]  # fmt: skip


def env(key: str = "test") -> dict[str, str]:
    """No OpenAI/ragframe settings from the caller; `key` as the API key (each process of a
    series gets its own, so the server's records say which process sent what)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}
    return {**clean, "OPENAI_API_KEY": key}


def start(command: list[str], key: str = "test") -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env(key), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen[str]) -> bool:
    """Poll `predicate` until it holds (True), or the process ends or PATIENCE runs out
    (False)."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return predicate()
        time.sleep(0.02)
    return False


def caught_up(
    server: FakeServer, valve: Valve, limit: int, key: str, cache: Path, base: int
) -> Callable[[], bool]:
    """Whether the valve let `limit` answers through and the process sending with `key` has
    committed every answer it got (`base`: cache entries before it started)."""

    def check() -> bool:
        # Every pass recorded as answered (the record is closed just after the handler
        # returns), then every answer of this process committed.
        if valve.passed < limit or len(answered(server)) < valve.passed:
            return False
        return cached(cache) - base >= len(set(answered(server, key)))

    return check


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep and p.suffix == ".tmp")


# ---------------------------------------------------------------------------------- SIGKILL


def test_sigkill_at_random_moments_then_rerun_resends_nothing_answered(
    tmp_path: Path, valved: tuple[FakeServer, Valve]
) -> None:
    """Kill `ragframe score` with SIGKILL at four seeded moments (20%..80% of the job
    answered), restarting it each time, then let it finish. Each kill lands while the client
    has requests open at the server and every answer it was given is in the cache. The output
    equals an uninterrupted run's; after a kill OUT is absent; the cache passes SQLite's
    integrity check; and no request answered before a kill is ever sent again."""
    server, valve = valved
    valve.allow(None)
    source = tmp_path / "in.parquet"
    rows(ROWS).write_parquet(source)
    keep = {"in.parquet", "ref.parquet", "ref.sqlite3", "ref.sqlite3-wal", "ref.sqlite3-shm"}

    # The uninterrupted run: the reference output, its duration, its requests.
    ref_cache = tmp_path / "ref.sqlite3"
    t0 = time.monotonic()
    first = start(score(source, tmp_path / "ref.parquet", ref_cache, server.base_url), "ref")
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    seconds = time.monotonic() - t0
    reference = pl.read_parquet(tmp_path / "ref.parquet")
    total = len(answered(server, "ref"))
    # The premise of exact accounting: every scripted answer was usable and cached once.
    for name in METRICS.split(","):
        errors = reference.get_column(f"{name}_detail").struct.field("error")
        assert errors.null_count() == ROWS, (name, errors.drop_nulls().to_list()[:3])
    assert len(set(answered(server, "ref"))) == total == cached(ref_cache)

    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    command = score(source, out, cache, server.base_url)
    rng = random.Random(SEED)
    before_kill: set[str] = set()  # every answer a process got before its kill
    lived: list[str] = []  # the answers each process got while it was alive
    kills: list[dict[str, Any]] = []
    resent: list[int] = []  # per restart: requests answered before a kill, sent again
    # Four seeded moments, one in each quarter of 20%..80% of the job: a kill lands once that
    # share of the uninterrupted run's requests has been answered and committed.
    moments = [0.2 + 0.15 * (k + rng.random()) for k in range(4)]
    for kill, share in enumerate(moments, 1):
        key = f"run-{kill}"
        base = cached(cache)
        # Never behind what the earlier processes got done: every kill interrupts work.
        limit = valve.passed + max(1, int(share * total) - base)
        valve.allow(limit)
        t_start = time.monotonic()
        proc = start(command, key)
        landed = wait_for(caught_up(server, valve, limit, key, cache, base), proc)
        assert landed and proc.poll() is None, f"kill {kill}: the run stopped or stalled"
        at = time.monotonic() - t_start
        mine = answered(server, key)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        resent.append(len(set(mine) & before_kill))
        before_kill |= set(mine)
        lived += mine
        # Atomic output: the run never got to write it.
        assert not out.exists()
        kills.append(
            {"kill": kill, "share": round(share, 2), "at_s": round(at, 2), "answered": len(mine)}
        )

    # The rerun to completion.
    valve.allow(None)
    finished = start(command, "final")
    _, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    rerun = answered(server, "final")
    resent.append(len(set(rerun) & before_kill))
    assert pl.read_parquet(out).equals(reference)
    # Every prompt was answered to a live process exactly once: nothing paid for was lost.
    # (A request a killed process had sent may still be answered after its death, once the
    # valve opens for the next process and before the server has seen the closed
    # connection: that answer reached no one, like any request in flight at a kill.)
    series = [*lived, *rerun]
    to_the_dead = sum(len(answered(server, f"run-{i}")) for i in range(1, 5)) - len(lived)
    assert resent == [0] * 5, resent
    assert len(series) == len(set(series)) == total
    with sqlite3.connect(cache) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    figures = {
        "requests_uninterrupted": total,
        "uninterrupted_seconds": round(seconds, 2),
        "kills": kills,
        "resent_after_each_kill": resent,
        "requests_with_kills": len(series) + to_the_dead,
        "answered_after_a_kill_to_no_one": to_the_dead,
        "tmp_files_left": leftovers(tmp_path, keep | {out.name, cache.name}),
    }
    print("\nCRASH FIGURES " + json.dumps(figures))


# ----------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_exits_with_a_resume_hint_and_keeps_answers(
    tmp_path: Path, valved: tuple[FakeServer, Valve]
) -> None:
    """SIGINT mid-run (60 answers given, all committed, the next requests open at the
    server): exit 130 (never 1, a failed gate's), a message saying how to resume, no output;
    the rerun sends only what was left, none of the 60 again."""
    server, valve = valved
    source = tmp_path / "in.parquet"
    rows(ROWS).write_parquet(source)
    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    command = score(source, out, cache, server.base_url)
    limit = valve.passed + 60
    valve.allow(limit)
    proc = start(command, "interrupted")
    assert wait_for(caught_up(server, valve, limit, "interrupted", cache, 0), proc), "stalled"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    interrupted = answered(server, "interrupted")
    assert proc.returncode == 130, err
    assert "run the same command again" in err and "Traceback" not in err
    assert not out.exists()
    valve.allow(None)
    rerun = subprocess.run(command, env=env("rerun"), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    resent = answered(server, "rerun")
    assert len(interrupted) == 60 and resent
    assert not set(resent) & set(interrupted)
    assert pl.read_parquet(out).height == ROWS
    print(
        f"\nCTRL-C FIGURES answered before SIGINT {len(interrupted)}, rerun sent "
        f"{len(resent)} of {len(set(resent) | set(interrupted))}, re-sent 0"
    )


# ----------------------------------------------------------------------------------- output


def test_existing_output_is_kept_without_overwrite(
    tmp_path: Path, valved: tuple[FakeServer, Valve]
) -> None:
    """An existing OUT is not replaced without --overwrite (exit 2, a one-line reason, the
    file untouched, nothing sent), and is with it; the input file is never written."""
    server, valve = valved
    valve.allow(None)
    endpoint = server.base_url
    source = tmp_path / "in.parquet"
    rows(4).write_parquet(source)
    source_bytes, source_mtime = source.read_bytes(), source.stat().st_mtime_ns
    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    out.write_bytes(b"an earlier result")
    old_mtime = out.stat().st_mtime_ns
    before = len(answered(server))
    refused = subprocess.run(
        score(source, out, cache, endpoint), env=env(), capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "exists" in lines[0] and "--overwrite" in lines[0]
    assert out.read_bytes() == b"an earlier result" and out.stat().st_mtime_ns == old_mtime
    assert len(answered(server)) == before  # refused before any request
    replaced = subprocess.run(
        score(source, out, cache, endpoint, "--overwrite"),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replaced.returncode == 0, replaced.stderr
    assert pl.read_parquet(out).height == 4
    assert source.read_bytes() == source_bytes and source.stat().st_mtime_ns == source_mtime
    assert leftovers(tmp_path, set()) == []
