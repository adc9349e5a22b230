"""Replies the judge reads no further than its request allows: a server that ignores
`max_tokens` (one sent 3 MB of reasons per request) fails those requests with their reason,
unretried and not remembered, and the client never holds more than the request's bound.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe.judge.local import openai_http_library
from ragframe.judge.task import Task
from ragframe.judge.transport import (
    REPLY_ENVELOPE_BYTES,
    _read_capped,
    _TooLong,
    reply_limit,
)
from ragframe.testing.server import FakeServer

TASK = Task(
    name="probe.verdict",
    system="Judge the text.",
    schema={
        "type": "object",
        "properties": {"verdict": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["verdict", "reason"],
        "additionalProperties": False,
    },
    max_tokens=256,
)


def ask(judge: ragframe.Judge, texts: list[str]) -> tuple[list[Any], Any]:
    async def go() -> tuple[list[Any], Any]:
        async with judge.session() as session:
            return await session.ask(TASK, texts), session.stats

    return asyncio.run(go())


def test_an_over_long_reply_fails_its_request_once_with_its_reason(tmp_path: Path) -> None:
    with FakeServer(reply_bytes=3_000_000) as server:
        judge = judge_for(server, tmp_path, cache=True)
        answers, stats = ask(judge, ["<text>a</text>", "<text>b</text>"])
        assert server.count() == 2  # not retried, not repaired
        for answer in answers:
            assert answer.json is None and answer.error is not None
            assert "max_tokens" in answer.error and "not retried" in answer.error
        assert stats.failures == {"reply_too_long": 2} and stats.requests == 2
        # Not remembered: a rerun sends them again (and the server, fixed, answers).
        server.reply_bytes = 0
        again, stats = ask(judge_for(server, tmp_path, cache=True), ["<text>a</text>"])
        assert server.count() == 3 and again[0].error is None and stats.remembered_failures == 0


def test_a_long_reply_within_its_bound_is_read_whole(tmp_path: Path) -> None:
    """About 10 KB of reasons for a request allowing 256 tokens: under the bound, answered."""
    with FakeServer(reply_bytes=10_000) as server:
        answers, stats = ask(judge_for(server, tmp_path), ["<text>a</text>"])
    assert answers[0].error is None and len(answers[0].value["reason"]) > 9_000
    assert not stats.failures


class Endless:
    """A streamed response that never ends (no Content-Length): the read must stop itself."""

    def __init__(self, declared: int | None = None) -> None:
        self.headers = {} if declared is None else {"content-length": str(declared)}
        self.http_request = None
        self.chunks = 0
        self.closed = False

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        for _ in itertools.count():
            self.chunks += 1
            yield b"x" * 4096

    async def close(self) -> None:
        self.closed = True


def test_reading_stops_at_the_bound_and_closes_the_response() -> None:
    endless = Endless()
    with pytest.raises(_TooLong) as err:
        asyncio.run(_read_capped(endless, 100_000))
    assert err.value.limit == 100_000 and endless.closed
    assert endless.chunks == 100_000 // 4096 + 1  # one chunk past the bound, no more
    declared = Endless(declared=10**9)  # a Content-Length over the bound: nothing read
    with pytest.raises(_TooLong):
        asyncio.run(_read_capped(declared, 100_000))
    assert declared.chunks == 0 and declared.closed


def test_the_bound_grows_with_max_tokens_and_logprobs() -> None:
    small, large = reply_limit({"max_tokens": 256}), reply_limit({"max_tokens": 4096})
    assert REPLY_ENVELOPE_BYTES < small < large < 1_000_000
    with_logprobs = reply_limit({"max_tokens": 256, "logprobs": True, "top_logprobs": 5})
    assert with_logprobs > small + 256 * 6 * 100  # room for each token's six entries
    assert reply_limit({}) == reply_limit({"max_tokens": 4096})  # none given: a default


def test_a_run_against_a_flooding_server_keeps_every_row(tmp_path: Path) -> None:
    """Through the engine: every row present, null with the reason, none of the flood kept."""
    frame = pl.DataFrame(
        {
            "question": ["Q1?", "Q2?"],
            "answer": ["A one.", "A two."],
            "contexts": [["C one."], ["C two."]],
            "ground_truth": ["G one.", "G two."],
        }
    )
    with FakeServer(reply_bytes=3_000_000) as server:
        result = ragframe.run(frame, ["context_recall"], judge=judge_for(server, tmp_path))
    errors = result.frame["context_recall_detail"].struct.field("error").to_list()
    assert result.frame["context_recall"].null_count() == 2
    assert all("max_tokens" in e for e in errors)
    assert result.stats.failures["reply_too_long"] == 2


class Broken(Endless):
    """A streamed response whose body stalls (a read timeout) or breaks off (a reset)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield b'{"choices": '
        raise self.error


@pytest.mark.parametrize("kind", ["timeout", "reset"])
def test_a_body_that_stalls_or_breaks_is_the_sdks_timeout_or_connection_error(kind: str) -> None:
    """Read by the SDK, a body that stalls or breaks raised its APITimeoutError or
    APIConnectionError (retried as such): read chunk by chunk here, it still does."""
    import openai

    http = openai_http_library()
    error = http.ReadTimeout("stalled") if kind == "timeout" else http.RemoteProtocolError("gone")
    broken = Broken(error)
    expected = openai.APITimeoutError if kind == "timeout" else openai.APIConnectionError
    with pytest.raises(expected):
        asyncio.run(_read_capped(broken, 100_000))
    assert broken.closed
