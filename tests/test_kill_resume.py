"""A jury (`ragframe score --jury`) and pairwise judging (`ragframe prefer`) killed mid-run
(SIGKILL) resume from the cache: the rerun sends only the requests no judge answered before
the kill. The last row's requests are held at the server until the process is dead, so the
kill always lands mid-run, however loaded the host."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from conftest import fenced, task_name, wait_for

from ragframe.testing.server import FakeServer, auto_answer

ROOT = Path(__file__).resolve().parent.parent
DRIVER = "import sys\nfrom ragframe.cli import main\nsys.exit(main(sys.argv[1:]))\n"
ROWS = 6
LAST = f"Fact {ROWS - 1} is"


def log(n: int = ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [f"q{i}" for i in range(n)],
            "question": [f"What is fact {i}?" for i in range(n)],
            "answer": [f"Fact {i} is true. Fact {i} is old." for i in range(n)],
            "contexts": [[f"Fact {i} is true.", "Other text."] for i in range(n)],
            "ground_truth": [f"Fact {i} is true." for i in range(n)],
        }
    )


def held(gate: threading.Event) -> Callable[[dict[str, Any]], Any]:
    """Requests about the last row wait while `gate` is closed; every request is answered
    validly (a pairwise verdict prefers the second answer)."""

    async def handle(body: dict[str, Any]) -> str:
        if LAST in json.dumps(body.get("messages")):
            while not gate.is_set():
                await asyncio.sleep(0.02)
        if task_name(body) == "pairwise_verdict":  # the shorter answer, in either order
            first, second = fenced(body, "answer")
            verdict = "second" if len(second) < len(first) else "first"
            return json.dumps({"reason": "shorter", "verdict": verdict})
        return auto_answer(body)

    return handle


def answers(cache: Path) -> int:
    db = sqlite3.connect(f"{cache.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
    finally:
        db.close()


def killed_then_resumed(
    command: list[str], cache: Path, server: FakeServer, gate: Any
) -> tuple[int, int]:
    """Run `command`, SIGKILL it while the last row's requests are held, release them, rerun:
    (the answers cached before the rerun, the requests the rerun sent)."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-not-a-real-key"}
    run = [sys.executable, "-c", DRIVER, *command]
    process = subprocess.Popen(run, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    held_now = wait_for(lambda: server.in_flight > 0 and cache.exists(), 120)
    time.sleep(0.5)  # the answers not held are committed as they arrive
    process.send_signal(signal.SIGKILL)
    _, problem = process.communicate()
    assert held_now and process.returncode == -signal.SIGKILL, problem[-3000:]
    gate.set()
    assert wait_for(lambda: server.in_flight == 0, 30)
    before = answers(cache)
    server.reset()
    again = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    return before, len(server.chat_attempts)


def test_a_jury_killed_mid_run_resumes_from_the_cache(tmp_path: Path) -> None:
    source, cache = tmp_path / "log.parquet", tmp_path / "cache.sqlite3"
    log().write_parquet(source)
    gate = threading.Event()
    with FakeServer(held(gate)) as server:
        jury = f"juror-a,juror-b,juror-c@{server.base_url}"
        command = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--overwrite"]
        command += ["--metrics", "faithfulness", "--jury", jury, "--base-url", server.base_url]
        command += ["--cache", str(cache), "--no-progress"]
        before, resent = killed_then_resumed(command, cache, server, gate)
    scored = pl.read_parquet(tmp_path / "out.parquet")
    assert scored["faithfulness"].null_count() == 0
    assert set(scored.columns) >= {f"faithfulness@juror-{j}" for j in "abc"}
    # What the killed run had answered was not paid for again: the rerun sent exactly the
    # requests no judge had answered (the held last row's among them), each once.
    assert before > 0 and resent == answers(cache) - before > 0


def test_pairwise_killed_mid_run_resumes_from_the_cache(tmp_path: Path) -> None:
    a, b, cache = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "cache.sqlite3"
    log().write_parquet(a)
    log().with_columns(pl.col("answer").str.split(". ").list.first()).write_parquet(b)
    gate = threading.Event()
    with FakeServer(held(gate)) as server:
        command = ["prefer", str(a), str(b), "--on", "id", "-o", str(tmp_path / "pairs.parquet")]
        command += ["--criteria", "faithfulness", "--model", "fake-judge", "--no-progress"]
        command += ["--base-url", server.base_url, "--cache", str(cache)]
        before, resent = killed_then_resumed(command, cache, server, gate)
    assert before == 2 * (ROWS - 1)  # every pair but the held one, both orders
    assert resent == 2 and answers(cache) == 2 * ROWS  # the held pair's two orders, once
    assert pl.read_parquet(tmp_path / "pairs.parquet")["preference"].to_list() == ["b"] * ROWS
