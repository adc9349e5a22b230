"""Crashes and interruptions of `ragframe score`: SIGKILL, Ctrl-C, and an existing output.

Every test drives the real command line in a subprocess against the fake server, itself a
subprocess (`python -m ragframe.testing.server`), so a kill hits a process with live HTTP
connections, an open SQLite cache and, perhaps, a half-written output, as it would in use.

Cost: about 35 s on a loaded 2-core machine (a dozen `ragframe score` processes, each
paying 1-3 s of interpreter start and imports).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

ROWS = 60
METRICS = "faithfulness,context_recall,context_precision"
#: An answer the server wrote this long before the kill must have reached the cache. Below it,
#: the killed client may not yet have read (or committed) an answer the server had sent.
MARGIN = 0.2
SEED = 20240611


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


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """One fake server in its own process for the module: 50 ms per request, 8 slots."""
    server = [sys.executable, "-m", "ragframe.testing.server", "--port", "0"]
    proc = subprocess.Popen(
        [*server, "--latency", "0.05", "--capacity", "8"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(10)


def answered(base_url: str) -> list[str]:
    """messages_hash of every chat request the server has answered 200, in arrival order."""
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/stats?hashes=1", timeout=10) as resp:
        return list(json.loads(resp.read())["chat_hashes"])


def score(source: Path, target: Path, cache: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "ragframe.cli", "score", str(source), "-o", str(target),
        "--cache", str(cache), "--metrics", METRICS, "--base-url", base_url, "--model", "m",
        "--no-progress", *extra,
    ]  # fmt: skip


def env() -> dict[str, str]:
    """No OpenAI/ragframe settings from the caller; a dummy key; no embedding model."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}
    return {**clean, "OPENAI_API_KEY": "test"}


def start(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(predicate: Any, proc: subprocess.Popen[str], limit: float = 60.0) -> bool:
    """Poll `predicate` every 20 ms until it holds (True), the process ends or time runs out
    (False)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep and p.suffix == ".tmp")


# ---------------------------------------------------------------------------------- SIGKILL


def test_sigkill_at_random_moments_then_rerun_resends_nothing_answered(
    tmp_path: Path, endpoint: str
) -> None:
    """Kill `ragframe score` with SIGKILL at four seeded moments (20%..80% of the job
    done), restarting it each time, then let it finish. The output equals an uninterrupted
    run's; after a kill OUT is absent (or, had the kill come after the rename, the complete
    file); and no request the server answered more than MARGIN (0.2 s) before a kill is sent
    again afterwards. Answers written in the last 0.2 s may be re-sent: the killed client may
    not have read them yet (that is the in-flight margin, counted in the figures)."""
    source = tmp_path / "in.parquet"
    rows(ROWS).write_parquet(source)
    keep = {"in.parquet", "ref.parquet", "ref.sqlite3", "ref.sqlite3-wal", "ref.sqlite3-shm"}

    # The uninterrupted run: the reference output, its duration, its number of requests.
    before = len(answered(endpoint))
    t0 = time.monotonic()
    first = start(score(source, tmp_path / "ref.parquet", tmp_path / "ref.sqlite3", endpoint))
    assert wait_for(lambda: len(answered(endpoint)) > before, first)
    first_answer = time.monotonic() - t0
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    working = time.monotonic() - t0 - first_answer
    total = len(answered(endpoint)) - before
    reference = pl.read_parquet(tmp_path / "ref.parquet")

    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    command = score(source, out, cache, endpoint)
    rng = random.Random(SEED)
    mark = len(answered(endpoint))  # answers before the series
    early: set[str] = set()  # answered to a killed process more than MARGIN before its kill
    before_kill: set[str] = set()  # every answer before the latest kill
    kills: list[dict[str, Any]] = []
    resent: list[int] = []  # per restart: requests answered before the kill, sent again
    finished: subprocess.Popen[str] | None = None
    # Four seeded moments, one in each quarter of 20%..80% of the job: a kill lands once that
    # share of the uninterrupted run's requests has been answered (plus MARGIN).
    moments = [0.2 + 0.15 * (k + rng.random()) for k in range(4)]
    for kill, share in enumerate(moments, 1):
        t_start = time.monotonic()
        proc = start(command)
        started = len(answered(endpoint))
        # Never behind what the earlier processes got done: every kill interrupts work.
        target = max(share, len(set(answered(endpoint)[mark:])) / total + 0.05) * total
        landed = wait_for(lambda t=target: len(set(answered(endpoint)[mark:])) >= t, proc)
        snapshot = answered(endpoint)
        time.sleep(MARGIN)
        if not landed or proc.poll() is not None:
            finished = proc  # it reached the end before its kill
            break
        at = time.monotonic() - t_start
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        time.sleep(0.1)  # the server notices the closed connections
        mine = answered(endpoint)[started:]
        assert not set(mine) & early, f"after kill {kill - 1}: answered requests sent again"
        if kill > 1:
            resent.append(len(set(mine) & before_kill))
        before_kill |= set(mine)
        # Atomic output: nothing at OUT, or (the kill came after the rename) the whole file.
        if out.exists():
            assert pl.read_parquet(out).equals(reference)
            break
        kills.append(
            {"kill": kill, "share": round(share, 2), "at_s": round(at, 2), "answered": len(mine)}
        )
        # Only this process's answers: one written after an earlier kill reached no client.
        early |= set(snapshot[started:])
    assert len(kills) >= 3, f"only {len(kills)} kills landed mid-run: {kills}"

    # The rerun to completion (unless the last restart got there before its kill).
    if not out.exists():
        if finished is None:
            started = len(answered(endpoint))
            finished = start(command)
        _, err = finished.communicate(timeout=300)
        assert finished.returncode == 0, err
        rerun = answered(endpoint)[started:]
        assert not set(rerun) & early
        resent.append(len(set(rerun) & before_kill))
    assert pl.read_parquet(out).equals(reference)
    # Every prompt was answered; each once, but for the in-flight margin.
    series = answered(endpoint)[mark:]
    assert len(set(series)) == total
    assert len(series) - total == sum(resent)
    with sqlite3.connect(cache) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    figures = {
        "requests_uninterrupted": total,
        "uninterrupted_seconds": round(first_answer + working, 2),
        "kills": kills,
        "resent_after_each_kill": resent,
        "requests_with_kills": len(series),
        "tmp_files_left": leftovers(tmp_path, keep | {out.name, cache.name}),
    }
    print("\nCRASH FIGURES " + json.dumps(figures))


# ----------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_exits_with_a_resume_hint_and_keeps_answers(tmp_path: Path, endpoint: str) -> None:
    """SIGINT mid-run: exit 130 (or 1), a message saying how to resume, no output; the
    answers received are in the cache, so the rerun sends only what was left."""
    source = tmp_path / "in.parquet"
    rows(ROWS).write_parquet(source)
    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    command = score(source, out, cache, endpoint)
    before = len(answered(endpoint))
    proc = start(command)
    assert wait_for(lambda: len(answered(endpoint)) >= before + 60, proc), "no progress"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    time.sleep(0.1)
    interrupted = answered(endpoint)[before:]
    assert proc.returncode in (130, 1), err
    assert "run the same command again" in err and "Traceback" not in err
    assert not out.exists()
    rerun = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    resent = answered(endpoint)[before + len(interrupted) :]
    job = set(interrupted) | set(resent)
    assert len(resent) < len(job)
    assert len(set(resent) & set(interrupted)) <= 16  # at most the requests in flight
    assert pl.read_parquet(out).height == ROWS
    print(
        f"\nCTRL-C FIGURES answered before SIGINT {len(interrupted)}, rerun sent "
        f"{len(resent)} of {len(job)}, re-sent {len(set(resent) & set(interrupted))}"
    )


# ----------------------------------------------------------------------------------- output


def test_existing_output_is_kept_without_overwrite(tmp_path: Path, endpoint: str) -> None:
    """An existing OUT is not replaced without --overwrite (exit 2, a one-line reason, the
    file untouched, nothing sent), and is with it; the input file is never written."""
    source = tmp_path / "in.parquet"
    rows(4).write_parquet(source)
    source_bytes, source_mtime = source.read_bytes(), source.stat().st_mtime_ns
    out, cache = tmp_path / "out.parquet", tmp_path / "cache.sqlite3"
    out.write_bytes(b"an earlier result")
    old_mtime = out.stat().st_mtime_ns
    before = len(answered(endpoint))
    refused = subprocess.run(
        score(source, out, cache, endpoint), env=env(), capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "exists" in lines[0] and "--overwrite" in lines[0]
    assert out.read_bytes() == b"an earlier result" and out.stat().st_mtime_ns == old_mtime
    assert len(answered(endpoint)) == before  # refused before any request
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
