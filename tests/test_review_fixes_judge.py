"""The judge layer answers as it did before issue 29's speed work (the review's findings)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import polars as pl
import pytest

from ragframe.errors import ConfigError
from ragframe.judge.client import Judge
from ragframe.judge.limits import AdaptiveLimiter
from ragframe.judge.task import Task
from ragframe.metrics import faithfulness
from ragframe.testing import FakeServer

Reply = Callable[[dict[str, Any]], Any]


class _Embeddings:
    """A local endpoint answering every POST with `reply(body)` as JSON: embeddings replies
    FakeServer cannot script (an index sent as a string, no data)."""

    def __init__(self) -> None:
        self.reply: Reply = lambda body: {}
        self.seen: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.seen.append(body)
                raw = json.dumps(owner.reply(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"


@pytest.fixture
def endpoint() -> Iterator[_Embeddings]:
    served = _Embeddings()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


def _embed(endpoint: _Embeddings, reply: Reply) -> dict[str, str]:
    """The embedding errors of embedding two texts against `endpoint` answering `reply`."""
    endpoint.reply = reply
    judge = Judge(
        model="m", base_url=endpoint.base_url, embedding_model="e", cache=False,
        progress=False, max_attempts=2, backoff_base=0.01, backoff_max=0.01,
    )  # fmt: skip

    async def main() -> dict[str, str]:
        async with judge.session() as session:
            await session.embed(["a", "b"])
            return dict(session.embedding_errors)

    return asyncio.run(main())


def test_an_embedding_index_sent_as_a_string_fails_the_order_check(
    endpoint: _Embeddings,
) -> None:
    """The index is kept as sent, as the SDK's reply model kept it: "0" is not position 0,
    so the reply is asked again, then its texts fail (it was read as 0 and accepted)."""
    errors = _embed(
        endpoint,
        lambda body: {
            "data": [{"index": str(i), "embedding": [1.0, 0.0]} for i in range(len(body["input"]))]
        },
    )
    assert len(endpoint.seen) == 2  # asked again once (repair_attempts=1)
    assert set(errors) == {"a", "b"}
    assert "returned 2 vectors" in errors["a"]


@pytest.mark.parametrize(
    "reply",
    [
        {"object": "list"},  # no data
        {"data": [{"embedding": [1.0, 0.0]}, {"embedding": [0.0, 1.0]}]},  # no index
    ],
)
def test_an_embeddings_reply_without_its_fields_is_retried_as_not_an_embeddings_reply(
    endpoint: _Embeddings, reply: dict[str, Any]
) -> None:
    """Retried like any invalid reply (the SDK path raised a TypeError that ended the run),
    and said to be no embeddings reply, not no chat completion."""
    errors = _embed(endpoint, lambda body: reply)
    assert len(endpoint.seen) == 2  # max_attempts=2
    assert set(errors) == {"a", "b"}
    assert "the endpoint's reply is not an embeddings reply" in errors["a"]
    assert "chat completion" not in errors["a"]


def _a_task() -> Task:
    return next(t for t in vars(faithfulness).values() if isinstance(t, Task))


def _judge(server: FakeServer) -> Judge:
    """A judge of one attempt a request, no cache, on `server`."""
    return Judge(
        model="m", base_url=server.base_url, api_key="sk-x", cache=False, progress=False,
        max_attempts=1,
    )  # fmt: skip


def test_a_session_entered_again_sends_again() -> None:
    """`close` forgets the client it closed: the session entered a second time, on the same
    loop or on another, builds a new one ("the client has been closed" before)."""
    task = _a_task()
    with FakeServer() as server:
        session = _judge(server).session()

        async def ask(prompt: str) -> str | None:
            async with session:
                return (await session.ask(task, [prompt]))[0].error

        async def twice() -> list[str | None]:
            return [await ask("p1"), await ask("p2")]

        assert asyncio.run(twice()) == [None, None]  # one loop
        assert asyncio.run(ask("p3")) is None  # another loop
    assert session.stats.requests == 3


class _HttpClient:
    """Stands in for the embedded judge's HTTP client: remembers being closed."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True


def test_the_embedded_judges_http_client_is_closed_when_nothing_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session of the embedded judge that sends nothing (a cached run) never builds the SDK
    client, which would close the HTTP client it was given: `close` closes it itself."""
    from ragframe.judge import local

    made: list[_HttpClient] = []

    def http_client(timeout: float) -> _HttpClient:
        made.append(_HttpClient())
        return made[-1]

    monkeypatch.setattr(local, "start_local_judge", lambda: "http://127.0.0.1:9/v1")
    monkeypatch.setattr(local, "local_http_client", http_client)
    judge = Judge(model="local", embedding_model="e", cache=False, progress=False)
    assert judge.local

    async def enter() -> None:
        async with judge.session():
            pass

    asyncio.run(enter())
    assert len(made) == 1 and made[0].closed


def test_a_client_that_cannot_be_built_sends_no_counted_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK client is built before a request is counted: one that fails to build sent
    nothing, and the stats say so."""
    import openai

    def refuse(**options: Any) -> Any:
        raise RuntimeError("no client")

    monkeypatch.setattr(openai, "AsyncOpenAI", refuse)
    task = _a_task()
    with FakeServer() as server:
        session = _judge(server).session()

        async def ask() -> None:
            async with session:
                await session.ask(task, ["p1"])

        with pytest.raises(RuntimeError, match="no client"):
            asyncio.run(ask())
        assert server.requests == []
    assert session.stats.requests == 0
    assert sum(session.stats.by_task.values()) == 0


async def _pause_and_release(limiter: AdaptiveLimiter) -> None:
    """With one slot held and requests queued for it: a 429 pauses the pool (0.1 s), then the
    holder releases its slot."""
    await asyncio.sleep(0.01)  # every request queued, in order
    limiter.on_throttle(limiter.epoch, retry_after=0.1)
    await limiter.release()


def test_the_queue_keeps_its_order_through_a_pause() -> None:
    """The requests woken to wait out a pause keep their places: after it, the slots go in
    order of arrival (the front one used to queue again behind the others: CDEB)."""

    async def main() -> str:
        limiter = AdaptiveLimiter(1, adaptive=False)
        await limiter.acquire()
        order: list[str] = []

        async def one(name: str) -> None:
            await limiter.acquire()
            order.append(name)
            await asyncio.sleep(0)
            await limiter.release()

        tasks = [asyncio.create_task(one(name)) for name in "BCDE"]
        await _pause_and_release(limiter)
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        return "".join(order)

    assert asyncio.run(main()) == "BCDE"


@pytest.mark.parametrize("leave", ["cancelled", "gives_up"])
def test_a_request_that_leaves_while_it_waits_out_a_pause_passes_the_wake_up_on(
    leave: str,
) -> None:
    """B, woken to wait out the pause, leaves (cancelled as it sleeps, or its rate_limit_wait
    is shorter than the pause): C, queued behind it, still gets the slot (it waited forever)."""

    async def main() -> tuple[int, str]:
        limiter = AdaptiveLimiter(1, adaptive=False)
        await limiter.acquire()
        b = asyncio.create_task(limiter.acquire(0.05 if leave == "gives_up" else 10))
        c = asyncio.create_task(limiter.acquire(10))
        await _pause_and_release(limiter)
        if leave == "cancelled":
            for _ in range(3):  # B runs: woken, it sleeps out the pause
                await asyncio.sleep(0)
            b.cancel()
        await asyncio.wait_for(c, 2)  # a TimeoutError here: C was never woken
        outcome = await asyncio.gather(b, return_exceptions=True)
        return limiter.in_flight, type(outcome[0]).__name__

    in_flight, b_ended = asyncio.run(main())
    assert in_flight == 1  # C's slot, and only it
    assert b_ended == ("CancelledError" if leave == "cancelled" else "PauseTooLong")


def test_a_price_given_as_a_numpy_array_is_accepted() -> None:
    """Any sized iterable of numbers is a price, as before issue 29 (a Sequence was asked
    for, and a numpy array is none); it is kept as a tuple."""
    judge = Judge(model="m", base_url="http://h/v1", price=np.array([0.15, 0.6]), cache=False)
    assert judge.price == (0.15, 0.6) and isinstance(judge.price, tuple)
    with pytest.raises(ConfigError, match="price must be"):
        Judge(model="m", base_url="http://h/v1", price=np.array(0.15), cache=False)


def test_null_prompts_are_counted_in_the_error() -> None:
    """A String Series with nulls is refused saying how many are null (it said "got String",
    the very dtype asked for)."""
    task = _a_task()
    judge = Judge(model="m", base_url="http://127.0.0.1:9/v1", cache=False, progress=False)

    async def main() -> None:
        async with judge.session() as session:
            await session.ask_frame(task, pl.Series(["p1", None, "p3", None], dtype=pl.String))

    with pytest.raises(TypeError, match="got 2 null of 4 prompts"):
        asyncio.run(main())
