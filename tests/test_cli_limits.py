"""`ragframe score --requests-per-minute/--tokens-per-minute`: the API's rate limits on the
command line, checked on what the fake server received."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe.cli import main
from ragframe.testing.server import FakeServer, auto_answer


def _log(path: Path, n: int) -> Path:
    pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(n)],
            "answer": [f"Answer {i}." for i in range(n)],
            "contexts": [[f"Context {i}."] for i in range(n)],
            "ground_truth": [f"Truth {i}." for i in range(n)],
        }
    ).write_parquet(path)
    return path


def _argv(server: FakeServer, tmp_path: Path, *extra: str) -> list[str]:
    source = _log(tmp_path / "log.parquet", 6)
    argv = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--overwrite"]
    argv += ["--metrics", "context_recall", "--model", "fake-judge"]
    argv += ["--base-url", server.base_url, "--no-progress", "--no-cache"]
    return [*argv, *extra]


def test_requests_per_minute_spaces_the_requests(server, tmp_path):
    # 120 a minute: a bucket of one second's worth (2 requests) at the start, then one
    # every 0.5 s, however fast the server answers.
    assert main(_argv(server, tmp_path, "--requests-per-minute", "120")) == 0
    starts = sorted(r.started for r in server.requests if r.path.endswith("/chat/completions"))
    assert len(starts) == 6
    # A lower bound (load only adds to it): four waits of 0.5 s, with clock slack.
    assert starts[-1] - starts[0] >= 4 * 0.5 * 0.95


def test_without_a_limit_every_request_is_in_flight_at_once(server, tmp_path):
    """The same run unlimited sends all 6 at once (concurrency 16): the server holds each
    request until all have arrived (a bounded wait) and counts them in flight together. (The
    test above fails without its limit: the six then start within milliseconds.)"""

    async def hold_until_all_arrived(body: dict[str, Any]) -> str:
        for _ in range(3000):
            if len(server.requests) == 6:
                break
            await asyncio.sleep(0.01)
        return auto_answer(body)

    server.handler = hold_until_all_arrived
    assert main(_argv(server, tmp_path)) == 0
    assert server.max_in_flight == 6


@pytest.mark.parametrize("flag", ["--requests-per-minute", "--tokens-per-minute"])
def test_a_limit_of_zero_is_refused_before_any_request(server, tmp_path, capsys, flag):
    assert main(_argv(server, tmp_path, flag, "0")) == 2
    assert f"argument {flag}: must be a finite number above 0" in capsys.readouterr().err
    assert server.requests == []
