"""The fake OpenAI server, driven by the real ``openai`` client over HTTP.

The rest of the suite and the benchmarks trust this server, so these tests pin what it
promises: valid schema answers, scripted replies, slots and latency, embeddings, seeded
faults, the Files + Batches round trip, raw HTTP details and the subprocess mode.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import math
import os
import random
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

from ragframe.testing.server import (
    STATUS_CLIENT_GONE,
    FakeServer,
    Faults,
    Reply,
    auto_answer,
    embed_text,
    messages_hash,
    synthesize,
)

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def valid(value: Any, schema: Any, root: Any = None) -> bool:
    """A tiny JSON-schema checker for the subset the server claims to honour."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return schema is not False
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return valid(value, node, root)
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "anyOf" in schema and not any(valid(value, s, root) for s in schema["anyOf"]):
        return False
    if "oneOf" in schema and sum(valid(value, s, root) for s in schema["oneOf"]) != 1:
        return False
    if "allOf" in schema and not all(valid(value, s, root) for s in schema["allOf"]):
        return False
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "null": lambda v: v is None,
    }
    if kinds and not any(checks[k](value) for k in kinds):
        return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(name not in value for name in schema.get("required", [])):
            return False
        if not all(valid(value[k], s, root) for k, s in props.items() if k in value):
            return False
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return False
        if len(value) > schema.get("maxItems", math.inf):
            return False
        if not all(valid(v, schema.get("items", {}), root) for v in value):
            return False
    if isinstance(value, str) and not (
        schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf)
    ):
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return False
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return False
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            return False
    return True


def sync_client(srv: FakeServer, **kw: Any) -> OpenAI:
    return OpenAI(base_url=srv.base_url, api_key="test", max_retries=0, **kw)


def async_client(srv: FakeServer, **kw: Any) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0, **kw)


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "judge"}, {"role": "user", "content": text}]


VERDICT = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "label": {"type": "string", "enum": ["supported", "unsupported", "partial"]},
        "ok": {"type": "boolean"},
        "note": {"type": ["string", "null"], "maxLength": 12},
        "claims": {
            "type": "array",
            "minItems": 2,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "verdict": {
                        "anyOf": [{"type": "string", "enum": ["yes", "no"]}, {"type": "null"}]
                    },
                },
                "required": ["text", "verdict"],
            },
        },
    },
    "required": ["score", "confidence", "label", "ok", "note", "claims"],
}


class Claim(BaseModel):
    text: str
    supported: bool


class Judgement(BaseModel):
    claims: list[Claim]
    score: int | None = None


@pytest.fixture
def server() -> Any:
    with FakeServer() as srv:
        yield srv


# --------------------------------------------------------------------------------------------
# default answers
# --------------------------------------------------------------------------------------------


def test_auto_answers_are_valid_and_deterministic(server: FakeServer) -> None:
    client = sync_client(server)
    pyd = Judgement.model_json_schema()  # nested models live under $defs
    for schema in (VERDICT, pyd, {"type": "array", "items": {"type": "integer"}, "maxItems": 0}):
        for i in range(5):
            r = client.chat.completions.create(
                model="judge", messages=msgs(f"q{i}"), response_format=schema_format(schema)
            )
            content = r.choices[0].message.content
            assert content is not None and valid(json.loads(content), schema), content
            assert r.model == "judge" and r.choices[0].finish_reason == "stop"
            assert r.usage is not None and r.usage.total_tokens > 0
    ask: Any = {"model": "m", "messages": msgs("same"), "response_format": schema_format(VERDICT)}
    first = client.chat.completions.create(**ask).choices[0].message.content
    again = client.chat.completions.create(**ask).choices[0].message.content
    assert first == again == auto_answer(ask, seed=0)
    assert {auto_answer(ask, seed=s) for s in range(5)} != {first}  # the seed matters
    # llama.cpp's spelling of a schema, and no schema at all
    llama: Any = {"type": "json_object", "schema": VERDICT}
    r = client.chat.completions.create(model="m", messages=msgs("x"), response_format=llama)
    assert valid(json.loads(r.choices[0].message.content or ""), VERDICT)
    r = client.chat.completions.create(model="m", messages=msgs("x"))
    assert r.choices[0].message.content == "{}"
    assert server.count() == 19 and len(server.chat_requests) == 19


leaf = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(
        lambda a, b: {"type": "integer", "minimum": min(a, b), "maximum": max(a, b)},
        st.integers(-50, 50),
        st.integers(-50, 50),
    ),
    st.builds(
        lambda a, b: {"type": "number", "minimum": min(a, b), "maximum": max(a, b)},
        st.floats(-10, 10),
        st.floats(-10, 10),
    ),
    st.builds(
        lambda lo, extra: {"type": "string", "minLength": lo, "maxLength": lo + extra},
        st.integers(0, 20),
        st.integers(0, 20),
    ),
    st.lists(st.text(max_size=5), min_size=1, max_size=4).map(lambda xs: {"enum": xs}),
)


def _container(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    obj = st.dictionaries(st.text("abcdef", min_size=1, max_size=4), children, max_size=4).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props)}
    )
    arr = st.builds(
        lambda items, lo, extra: {
            "type": "array", "items": items, "minItems": lo, "maxItems": lo + extra,
        },
        children, st.integers(0, 3), st.integers(0, 3),
    )  # fmt: skip
    nullable = children.map(lambda s: {"anyOf": [s, {"type": "null"}]})
    return st.one_of(obj, arr, nullable)


@settings(max_examples=100, deadline=None)
@given(st.recursive(leaf, _container, max_leaves=12), st.integers(0, 2**32))
def test_synthesize_is_valid_for_random_schemas(schema: dict[str, Any], seed: int) -> None:
    assert valid(synthesize(schema, random.Random(seed)), schema)


# --------------------------------------------------------------------------------------------
# scripted replies
# --------------------------------------------------------------------------------------------


def test_handler_reply_fields(server: FakeServer) -> None:
    client = sync_client(server)
    logprobs = [
        {
            "token": "5",
            "logprob": -0.1,
            "bytes": [53],
            "top_logprobs": [{"token": "5", "logprob": -0.1, "bytes": [53]}],
        }
    ]
    script: list[Any] = [
        Reply(status=429, headers={"Retry-After": "1"}),
        Reply(status=500, content="boom"),
        Reply(status=400, content={"error": {"message": "bad", "type": "x", "code": "c"}}),
        Reply(content={"score": 5}, finish_reason="length", logprobs=logprobs),
        Reply(content="hello", prompt_tokens=7, completion_tokens=3),
        ["a", "b"],
        Reply(drop_connection=True),
    ]
    server.handler = lambda body: script.pop(0)
    with pytest.raises(openai.RateLimitError) as rate:
        client.chat.completions.create(model="m", messages=msgs("a"))
    assert rate.value.response.headers["retry-after"] == "1"
    assert rate.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.InternalServerError, match="boom"):
        client.chat.completions.create(model="m", messages=msgs("a"))
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="m", messages=msgs("a"))
    assert bad.value.code == "c"
    r = client.chat.completions.create(model="m", messages=msgs("a"), logprobs=True)
    choice = r.choices[0]
    assert choice.finish_reason == "length" and choice.message.content == '{"score": 5}'
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert choice.logprobs.content[0].top_logprobs[0].logprob == -0.1
    r = client.chat.completions.create(model="m", messages=msgs("a"))
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (7, 3)
    r = client.chat.completions.create(model="m", messages=msgs("a"))
    assert r.choices[0].message.content == '["a", "b"]'
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=msgs("a"))
    assert [r.status for r in server.requests] == [429, 500, 400, 200, 200, 200, 0]
    assert len(server.chat_attempts) == 7 and len(server.chat_requests) == 3
    # back to the default, which also synthesises logprobs when asked
    server.handler = None
    r = client.chat.completions.create(model="m", messages=msgs("a"), logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content and len(lp.content[0].top_logprobs) == 2


def test_async_handler_delay_and_client_timeout(server: FakeServer) -> None:
    async def handler(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0)
        return Reply(content="late", delay=3600.0)

    server.handler = handler
    client = sync_client(server, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=msgs("a"))
    deadline = time.monotonic() + 30  # a bound on the wait, not a margin
    while (not server.requests or server.requests[0].ended is None) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    # The server saw the hang-up and freed the request: with an hour's delay, an ended
    # record can only come from the hang-up.
    assert server.requests[0].status == STATUS_CLIENT_GONE
    assert server.requests[0].ended is not None
    assert server.in_flight == 0


def test_handler_exception_becomes_500(server: FakeServer) -> None:
    def handler(body: dict[str, Any]) -> str:
        raise RuntimeError("oops")

    server.handler = handler
    with pytest.raises(openai.InternalServerError, match="oops"):
        sync_client(server).chat.completions.create(model="m", messages=msgs("a"))
    assert isinstance(server.handler_errors[0], RuntimeError)


def test_reject_json_schema_and_json_object() -> None:
    with FakeServer(reject_json_schema=True) as srv:
        client = sync_client(srv)
        with pytest.raises(openai.BadRequestError, match="json_schema"):
            client.chat.completions.create(
                model="m", messages=msgs("a"), response_format=schema_format(VERDICT)
            )
        llama: Any = {"type": "json_object", "schema": VERDICT}
        r = client.chat.completions.create(model="m", messages=msgs("a"), response_format=llama)
        assert valid(json.loads(r.choices[0].message.content or ""), VERDICT)
        srv.reject_json_object = True
        with pytest.raises(openai.BadRequestError, match="json_object"):
            client.chat.completions.create(
                model="m", messages=msgs("a"), response_format={"type": "json_object"}
            )
        assert srv.count() == 3 and srv.count(ok_only=True) == 1


# --------------------------------------------------------------------------------------------
# latency, capacity, streaming
# --------------------------------------------------------------------------------------------


def test_latency_and_capacity() -> None:
    async def run(srv: FakeServer) -> float:
        client = async_client(srv)
        t0 = time.monotonic()
        await asyncio.gather(
            *(client.chat.completions.create(model="m", messages=msgs(str(i))) for i in range(8))
        )
        await client.close()
        return time.monotonic() - t0

    async def hold_until_all_arrived(body: dict[str, Any]) -> str:
        # The first wave waits (bounded) until all 8 requests are at the server, so "8 open
        # at once" does not depend on how fast the client sends them.
        for _ in range(3000):
            if len(srv.requests) == 8:
                break
            await asyncio.sleep(0.01)
        return "{}"

    with FakeServer(hold_until_all_arrived, latency=0.2, capacity=4) as srv:
        elapsed = asyncio.run(run(srv))
        # Two waves of 0.2 s (a lower bound: load only adds to it); the slot counters show
        # four at a time of eight open, not one or eight.
        assert elapsed >= 0.38, elapsed
        assert srv.max_in_flight == 4 and srv.max_open == 8
        srv.reset()
        assert srv.max_in_flight == 0 and srv.requests == []


def test_streaming(server: FakeServer) -> None:
    stream = sync_client(server).chat.completions.create(
        model="m",
        messages=msgs("a"),
        response_format=schema_format(VERDICT),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert valid(json.loads(text), VERDICT) and chunks[-1].usage is not None


# --------------------------------------------------------------------------------------------
# embeddings
# --------------------------------------------------------------------------------------------


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_embeddings_float_base64_and_similarity() -> None:
    texts = [
        "the cat sat on the mat",
        "a cat sat on a mat today",
        "quantum chromodynamics lattice gauge",
    ]
    with FakeServer(embedding_dim=48) as srv:
        client = sync_client(srv)
        default = client.embeddings.create(model="e", input=texts)  # client asks for base64
        floats = client.embeddings.create(model="e", input=texts, encoding_format="float")
        b64 = client.embeddings.create(model="e", input=texts[0], encoding_format="base64")
        assert srv.requests[0].body["encoding_format"] == "base64"
    got = [d.embedding for d in default.data]
    want = [d.embedding for d in floats.data]
    for g, w in zip(got, want, strict=True):
        assert len(g) == 48 and max(abs(x - y) for x, y in zip(g, w, strict=True)) < 1e-6
        assert abs(_cos(w, w) - 1) < 1e-9
    raw = base64.b64decode(b64.data[0].embedding)  # type: ignore[arg-type]
    assert list(struct.unpack("<48f", raw)) == pytest.approx(want[0], abs=1e-6)
    assert _cos(want[0], want[1]) > _cos(want[0], want[2]) + 0.3
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert any(x != 0 for x in embed_text("", 8))  # never an all-zero vector


# --------------------------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------------------------

FAULTS = Faults(rate_429=0.1, rate_500=0.05, rate_503=0.05, rate_reset=0.05, rate_malformed=0.1)


def _expected_counts(faults: Faults, seed: int, n: int) -> dict[str, int]:
    rng, out = random.Random(seed), dict.fromkeys(["429", "500", "503", "reset", "malformed"], 0)
    for _ in range(n):
        u = rng.random()
        for name, rate in faults._table():
            if u < rate:
                out[name] += 1
                break
            u -= rate
    return {k: v for k, v in out.items() if v}


def test_faults_are_seeded_and_visible_to_the_client() -> None:
    n = 300

    async def run(srv: FakeServer) -> dict[str, int]:
        client = async_client(srv)

        async def one(i: int) -> str:
            ask: Any = {"model": "m", "messages": msgs(str(i))}
            ask["response_format"] = schema_format(VERDICT)
            try:
                r = await client.chat.completions.create(**ask)
            except openai.RateLimitError as e:
                return "429+ra" if "retry-after" in e.response.headers else "429"
            except openai.InternalServerError as e:
                return str(e.status_code)
            except openai.APIConnectionError:
                return "reset"
            c = r.choices[0]
            # the fake is deterministic, so a spoilt answer is one that differs from the clean one
            clean = c.message.content == auto_answer(ask, seed=7) and c.finish_reason == "stop"
            return "ok" if clean else "bad"

        sem = asyncio.Semaphore(16)

        async def limited(i: int) -> str:
            async with sem:
                return await one(i)

        seen = await asyncio.gather(*(limited(i) for i in range(n)))
        await client.close()
        return {k: seen.count(k) for k in set(seen)}

    with FakeServer(faults=FAULTS, seed=7) as srv:
        seen = asyncio.run(run(srv))
        counts = srv.fault_counts()
        assert srv.count() == n
        assert seen["429"] + seen["429+ra"] == counts["429"]
        assert abs(seen["429"] - seen["429+ra"]) <= 1  # every other 429 has Retry-After
        assert seen["500"] == counts["500"] and seen["503"] == counts["503"]
        assert seen["reset"] == counts["reset"]
        assert seen["bad"] == counts["malformed"]
        assert seen["ok"] == srv.count(ok_only=True) - seen["bad"]
        # the same seed gives the same counts whatever the arrival order: one draw per request
        assert counts == _expected_counts(FAULTS, 7, n)
        assert 15 <= counts["429"] <= 45  # about 10% of 300
        srv.reset()  # also rewinds the fault RNG
        assert srv.fault_counts() == {} and srv.requests == []
        client = sync_client(srv)
        for i in range(40):
            with contextlib.suppress(openai.APIError):
                client.chat.completions.create(model="m", messages=msgs(str(i)))
        assert srv.fault_counts() == _expected_counts(FAULTS, 7, 40)


def test_malformed_kinds_cycle(server: FakeServer) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}
    server.faults = Faults(rate_malformed=1.0)
    client = sync_client(server)
    for i in range(6):
        r = client.chat.completions.create(
            model="m", messages=msgs(str(i)), response_format=schema_format(schema)
        )
        content, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
        try:
            ok = valid(json.loads(content), schema)
        except ValueError:
            ok = False
        assert not ok or finish == "length", (content, finish)
    kinds = server.fault_counts(detailed=True)
    assert set(kinds) == {
        f"malformed:{k}"
        for k in ("truncated", "wrong_shape", "wrong_count", "empty", "length", "prose")
    }


def test_timeout_fault_frees_the_slot() -> None:
    # A stall of an hour: had a timed-out request kept the one slot, the next request would
    # never get it, never be labelled "timeout" (the label is set once the slot is held),
    # and the last, fault-free request would time out too.
    faults = Faults(rate_timeout=1.0, slow_seconds=3600.0)
    with FakeServer(faults=faults, capacity=1) as srv:
        client = sync_client(srv, timeout=0.5)
        for _ in range(2):
            with pytest.raises(openai.APITimeoutError):
                client.chat.completions.create(model="m", messages=msgs("a"))
        srv.faults = None
        r = client.chat.completions.create(model="m", messages=msgs("a"))
        assert r.choices[0].message.content == "{}"
        assert srv.fault_counts() == {"timeout": 2}
        assert [r.fault for r in srv.requests] == ["timeout", "timeout", None]


# --------------------------------------------------------------------------------------------
# files and batches
# --------------------------------------------------------------------------------------------


def _batch_input(n: int) -> bytes:
    lines = [
        {
            "custom_id": f"row-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "m",
                "messages": msgs(f"q{i}"),
                "response_format": schema_format(VERDICT),
            },
        }
        for i in range(n)
    ]
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def _wait(client: OpenAI, batch_id: str, statuses: tuple[str, ...]) -> Any:
    deadline = time.monotonic() + 5
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses or time.monotonic() > deadline:
            return batch
        time.sleep(0.02)


def test_files_and_batches_round_trip() -> None:
    n = 40
    with FakeServer(faults=Faults(rate_500=0.2), seed=3, batch_delay=0.15) as srv:
        client = sync_client(srv)
        f = client.files.create(file=("in.jsonl", _batch_input(n)), purpose="batch")
        assert f.purpose == "batch" and f.bytes == len(_batch_input(n)) and f.status == "processed"
        assert client.files.retrieve(f.id).filename == "in.jsonl"
        assert client.files.content(f.id).read() == _batch_input(n)
        batch = client.batches.create(
            input_file_id=f.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"run": "t"},
        )
        assert batch.status in ("validating", "in_progress") and batch.metadata == {"run": "t"}
        batch = _wait(client, batch.id, ("completed",))
        assert batch.status == "completed" and batch.request_counts is not None
        failed = srv.fault_counts()["500"]
        assert (batch.request_counts.total, batch.request_counts.failed) == (n, failed)
        assert batch.output_file_id and batch.error_file_id
        out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
        errs = [json.loads(x) for x in client.files.content(batch.error_file_id).text.splitlines()]
        ids = [x["custom_id"] for x in out]
        assert ids != sorted(ids, key=lambda s: int(s.split("-")[1]))  # shuffled: join by id
        assert sorted(ids + [x["custom_id"] for x in errs]) == sorted(f"row-{i}" for i in range(n))
        for line in out:
            assert line["response"]["status_code"] == 200 and line["error"] is None
            body = line["response"]["body"]
            assert valid(json.loads(body["choices"][0]["message"]["content"]), VERDICT)
        for line in errs:
            assert line["response"]["status_code"] == 500 and line["error"]["code"] == "500"
        assert [b.id for b in client.batches.list()] == [batch.id]
        assert srv.count("/files") == 1 and srv.count("/batches") == 2  # create + list
        assert client.files.delete(f.id).deleted
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(f.id)


def test_batch_cancel() -> None:
    with FakeServer(batch_delay=5.0) as srv:
        client = sync_client(srv)
        f = client.files.create(file=("in.jsonl", _batch_input(3)), purpose="batch")
        batch = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
        batch = _wait(client, batch.id, ("cancelled",))
        assert batch.status == "cancelled" and batch.cancelled_at is not None


# --------------------------------------------------------------------------------------------
# raw HTTP and the subprocess mode
# --------------------------------------------------------------------------------------------


def test_raw_http_chunked_keepalive_and_expect(server: FakeServer) -> None:
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    payload = json.dumps({"model": "m", "messages": msgs("chunky")}).encode()
    parts = [payload[:10], payload[10:30], payload[30:]]
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=iter(parts),
        headers={"Content-Type": "application/json"},
        encode_chunked=True,
    )
    r1 = conn.getresponse()
    assert r1.status == 200 and json.loads(r1.read())["choices"][0]["message"]["content"] == "{}"
    conn.request(  # same socket: keep-alive
        "POST",
        "/v1/embeddings",
        body=json.dumps({"model": "e", "input": "x"}),
        headers={"Content-Type": "application/json", "Expect": "100-continue"},
    )
    r2 = conn.getresponse()
    assert r2.status == 200 and len(json.loads(r2.read())["data"][0]["embedding"]) == 64
    conn.request("GET", "/v1/nope")
    r3 = conn.getresponse()
    assert r3.status == 404 and "error" in json.loads(r3.read())
    conn.close()
    assert server.requests[0].headers["transfer-encoding"] == "chunked"
    assert server.requests[0].body["messages"] == msgs("chunky")


def test_subprocess_mode() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    faults = json.dumps({"rate_429": 0.5})
    cmd = [sys.executable, "-m", "ragframe.testing.server", "--port", "0", "--capacity", "4"]
    proc = subprocess.Popen(
        [*cmd, "--seed", "1", "--faults", faults], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:") and line.endswith("/v1")
        base = line.split()[1]
        client = OpenAI(base_url=base, api_key="test", max_retries=0)
        sent: list[str] = []
        for i in range(10):
            try:
                client.chat.completions.create(model="m", messages=msgs(str(i)))
                sent.append(messages_hash(msgs(str(i))))
            except openai.RateLimitError:
                pass
        root = base.removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/stats?hashes=1") as resp:
            stats = json.loads(resp.read())
        assert stats["requests"] == {"/v1/chat/completions": 10}
        assert stats["chat_ok"] == len(sent) and stats["chat_hashes"] == sent
        assert stats["faults"]["429"] == 10 - len(sent) and stats["max_in_flight"] == 1
        reset = urllib.request.Request(f"{root}/reset", method="POST", data=b"")
        urllib.request.urlopen(reset).close()
        with urllib.request.urlopen(f"{root}/stats") as resp:
            assert json.loads(resp.read())["requests"] == {}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
