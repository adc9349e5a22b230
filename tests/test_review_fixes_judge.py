"""The judge layer answers as it did before issue 29's speed work (the review's findings)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ragframe.judge.client import Judge

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
