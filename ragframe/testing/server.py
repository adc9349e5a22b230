"""A local OpenAI-compatible HTTP server for tests and benchmarks.

The real ``openai`` client talks to it over HTTP, so the whole transport path (connection
pooling, retries, timeouts, error mapping) is exercised, not a mock of it. It is written on
the standard library only: one asyncio loop, an ``asyncio.Protocol`` per connection (cheaper
than streams, and it learns at once when a client hangs up, so a request the client gave up
on frees its slot), HTTP/1.1 keep-alive, Content-Length and chunked request bodies.

What it serves (under ``/v1``): chat completions, embeddings, models, files and batches; and
two control endpoints, ``GET /stats`` and ``POST /reset``, for use from another process.
Faults (429/500/503, resets, timeouts, malformed answers) are drawn from a seeded RNG so that
reliability tests are deterministic. Two misbehaviours of real servers can be switched on:
``echo_credentials`` repeats the request's credentials in error replies and raw 200 bodies,
``reply_bytes`` pads every answer's reasons to that size whatever the request's max_tokens.

Prompt caching is modelled as OpenAI reports it (``prompt_cache``, on by default): every chat
answer's usage carries ``prompt_tokens_details.cached_tokens``, the part of its prompt that
shares a prefix of at least 1,024 tokens with an earlier request, rounded down to 128-token
steps (OpenAI's documented rule; see `FakeServer`).

Run ``python -m ragframe.testing.server --port 0`` to serve in the foreground; it prints one
``READY http://127.0.0.1:PORT/v1`` line once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import hashlib
import inspect
import json
import math
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import parse_qs

from ragframe.judge.schema import first_branch, kind_of, merge_all_of, numeric_bounds, resolve

__all__ = [
    "STATUS_CLIENT_GONE",
    "STATUS_DROPPED",
    "FakeServer",
    "Faults",
    "Handler",
    "Recorded",
    "Reply",
    "auto_answer",
    "embed_text",
    "error_body",
    "messages_hash",
    "schema_of",
    "synthesize",
]

#: ``Recorded.status`` of a request whose connection the server dropped without answering.
STATUS_DROPPED = 0
#: ``Recorded.status`` of a request whose client hung up before it was answered (nginx's 499).
STATUS_CLIENT_GONE = 499

_HOST = "127.0.0.1"
_MAX_HEAD = 64 * 1024
_MODEL_PATHS = ("/chat/completions", "/embeddings")
#: Request headers that carry credentials (repeated by ``FakeServer(echo_credentials=True)``).
_CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")


# --------------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """What a handler may return instead of plain content, to script status, timing and shape."""

    content: str | dict[str, Any] | list[Any] | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    finish_reason: str = "stop"
    logprobs: list[dict[str, Any]] | None = None
    drop_connection: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: ``usage.prompt_tokens_details.cached_tokens`` as scripted (else the server's own count).
    cached_tokens: int | None = None
    #: Sent as the whole 200 body instead of a chat completion (a proxy's error page).
    raw_body: bytes | None = None


HandlerResult: TypeAlias = "Reply | str | dict[str, Any] | list[Any] | None"
#: Gets the parsed JSON body of a chat request; may also be ``async def``.
Handler: TypeAlias = Callable[[dict[str, Any]], "HandlerResult | Awaitable[HandlerResult]"]


@dataclass
class Faults:
    """Rates of injected failures, drawn per request in arrival order from ``Random(seed)``.

    The rates are probabilities of disjoint outcomes, so their sum must not exceed 1. Every
    other 429 carries ``Retry-After: retry_after`` (the first one does), so clients see both.
    429, 503 and resets are answered at once, like a server that turns work away at the door;
    500, timeouts and malformed answers come after the latency, holding a slot.
    """

    rate_429: float = 0.0
    retry_after: float = 0.05
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_reset: float = 0.0
    rate_timeout: float = 0.0
    slow_seconds: float = 5.0
    rate_malformed: float = 0.0
    only_paths: tuple[str, ...] = _MODEL_PATHS

    def __post_init__(self) -> None:
        self.only_paths = tuple(self.only_paths)
        rates = self._table()
        if any(not 0.0 <= r <= 1.0 for _, r in rates) or sum(r for _, r in rates) > 1.0 + 1e-9:
            raise ValueError(f"fault rates must lie in [0, 1] and sum to at most 1: {rates}")

    def _table(self) -> list[tuple[str, float]]:
        return [
            ("429", self.rate_429),
            ("500", self.rate_500),
            ("503", self.rate_503),
            ("reset", self.rate_reset),
            ("timeout", self.rate_timeout),
            ("malformed", self.rate_malformed),
        ]

    @classmethod
    def from_json(cls, text: str) -> Faults:
        """Build from the JSON object the command line takes (``--faults``)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("--faults must be a JSON object")
        return cls(**data)


@dataclass
class Recorded:
    """One HTTP request as the server saw it, for assertions after the fact.

    ``status`` is 0 until answered, ``STATUS_DROPPED`` (0) when the server dropped the
    connection, and ``STATUS_CLIENT_GONE`` (499) when the client hung up first. ``started`` and
    ``ended`` are ``time.monotonic()`` readings: request fully read, answer written.
    ``fault`` is the injected fault's label (``"429"``, ``"429:retry_after"``, ``"500"``,
    ``"503"``, ``"reset"``, ``"timeout"``, ``"malformed:<kind>"``) or None.
    """

    path: str
    method: str
    body: Any
    status: int = 0
    started: float = 0.0
    ended: float | None = None
    fault: str | None = None
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Schema-driven answers
# --------------------------------------------------------------------------------------------

_WORDS = (
    "alpha", "amber", "apple", "arch", "atlas", "basil", "birch", "blue", "brook", "cedar",
    "clay", "cloud", "coral", "delta", "dune", "ember", "fern", "field", "flint", "frost",
    "gale", "grove", "harbor", "hazel", "iris", "ivory", "jade", "kelp", "lake", "lark",
    "linen", "maple", "marsh", "meadow", "mint", "moss", "north", "oak", "olive", "opal",
    "pearl", "pine", "plum", "quartz", "rain", "reed", "ridge", "river", "sage", "sand",
    "shore", "slate", "snow", "stone", "storm", "thorn", "tide", "umber", "vale", "willow",
)  # fmt: skip


def schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a chat request asks for, in OpenAI's or llama.cpp's spelling, or None."""
    rf = body.get("response_format")
    if not isinstance(rf, dict):
        return None
    kind = rf.get("type")
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else {}
    if kind == "json_object":
        schema = rf.get("schema")
        return schema if isinstance(schema, dict) else None
    return None


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
    """The range to draw a number from: the schema's bounds (exclusive ones one step in),
    100 wide where a side is open."""
    lo, hi, emin, emax = numeric_bounds(schema)
    step = 1 if integer else 1e-3
    if emin is not None:
        lo = emin + step if lo is None else max(lo, emin + step)
    if emax is not None:
        hi = emax - step if hi is None else min(hi, emax - step)
    if lo is None and hi is None:
        lo, hi = 0, 100
    elif lo is None:
        lo = hi - 100  # type: ignore[operator]
    elif hi is None:
        hi = lo + 100
    return float(lo), float(hi)  # type: ignore[arg-type]


def _words(rng: random.Random, schema: dict[str, Any]) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        s = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    elif fmt == "date-time":
        s = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z"
    elif fmt == "email":
        s = f"{rng.choice(_WORDS)}@example.com"
    elif fmt in ("uri", "url"):
        s = f"https://example.com/{rng.choice(_WORDS)}"
    elif fmt == "uuid":
        s = "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031 -- fixed-width hex fields
            rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(12),
            rng.getrandbits(12), rng.getrandbits(48),
        )  # fmt: skip
    else:
        s = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
    min_len, max_len = schema.get("minLength"), schema.get("maxLength")
    if isinstance(min_len, int):
        while len(s) < min_len:
            s += " " + rng.choice(_WORDS)
    if isinstance(max_len, int) and len(s) > max_len:
        s = s[:max_len]
        if s.endswith(" "):
            s = s[:-1] + "a"
    return s


def synthesize(schema: Any, rng: random.Random, *, root: Any = None, depth: int = 0) -> Any:
    """A value valid against ``schema`` (the subset judges use), drawn from ``rng``.

    Supports object/array/string/boolean/integer/number/null, type lists (the first non-null
    type wins), ``enum``, ``const``, ``anyOf``/``oneOf`` (the first non-null branch),
    ``allOf``, local ``$ref`` (``$defs``), numeric bounds, string lengths and formats, and
    array ``minItems``/``maxItems`` (1..3 items when unbounded). Deep recursive schemas stop
    growing: past depth 6 arrays take their minimum length and objects only required keys.
    The schema is read through `ragframe.judge.schema`, leniently: a ref that leads nowhere
    allows anything.
    """
    if root is None:
        root = schema
    if not isinstance(schema, dict):
        return None if schema is False else rng.choice(_WORDS)
    if isinstance(schema.get("$ref"), str):
        return synthesize(resolve(schema, root, strict=False), rng, root=root, depth=depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    if any(isinstance(schema.get(key), list) and schema[key] for key in ("anyOf", "oneOf")):
        return synthesize(first_branch(schema, root), rng, root=root, depth=depth)
    if isinstance(schema.get("allOf"), list):
        return synthesize(merge_all_of(schema, root), rng, root=root, depth=depth)
    make = _MAKERS.get(kind_of(schema))
    return rng.choice(_WORDS) if make is None else make(schema, rng, root, depth)


def _object(schema: dict[str, Any], rng: random.Random, root: Any, depth: int) -> Any:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if depth > 6 and name not in required:
            continue
        out[name] = synthesize(sub, rng, root=root, depth=depth + 1)
    for name in required:
        if name not in out:
            out[name] = rng.choice(_WORDS)
    if out.get("covered") is False and "source_context" in out:
        out["source_context"] = None  # a fact not covered names no source (context_recall)
    return out


def _array(schema: dict[str, Any], rng: random.Random, root: Any, depth: int) -> Any:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    lo_n = lo if isinstance(lo, int) else None
    hi_n = hi if isinstance(hi, int) else None
    if lo_n is None and hi_n is None:
        lo_n, hi_n = 1, 3
    elif lo_n is None:
        lo_n = min(1, hi_n)  # type: ignore[type-var]
    elif hi_n is None:
        hi_n = lo_n + 2
    assert lo_n is not None and hi_n is not None
    n = lo_n if depth > 6 else rng.randint(lo_n, max(lo_n, hi_n))
    items = schema.get("items", {})
    indexed = _has_index(items, root)
    values: list[Any] = []
    for position in range(n):
        value = synthesize(items, rng, root=root, depth=depth + 1)
        if indexed and isinstance(value, dict):
            value["index"] = position + 1  # verdicts name the item they judge, 1..n
        if schema.get("uniqueItems"):
            for _ in range(20):
                if value not in values:
                    break
                value = synthesize(items, rng, root=root, depth=depth + 1)
        values.append(value)
    return values


def _integer(schema: dict[str, Any], rng: random.Random, root: Any, depth: int) -> Any:
    lo_f, hi_f = _bounds(schema, integer=True)
    lo_i, hi_i = math.ceil(lo_f), math.floor(hi_f)
    return lo_i if lo_i >= hi_i else rng.randint(lo_i, hi_i)


def _number(schema: dict[str, Any], rng: random.Random, root: Any, depth: int) -> Any:
    lo_f, hi_f = _bounds(schema, integer=False)
    if lo_f >= hi_f:
        return lo_f
    return min(max(round(rng.uniform(lo_f, hi_f), 3), lo_f), hi_f)


#: How a value of each kind is made: (schema, rng, root, depth) -> value.
_MAKERS: dict[str, Callable[[dict[str, Any], random.Random, Any, int], Any]] = {
    "object": _object,
    "array": _array,
    "string": lambda schema, rng, root, depth: _words(rng, schema),
    "boolean": lambda schema, rng, root, depth: rng.random() < 0.5,
    "integer": _integer,
    "number": _number,
    "null": lambda schema, rng, root, depth: None,
}


def _has_index(items: Any, root: Any) -> bool:
    """Array items that are objects with an integer `index` (the item a verdict judges)."""
    items = resolve(items, root, strict=False)
    props = items.get("properties") if isinstance(items, dict) else None
    index = props.get("index") if isinstance(props, dict) else None
    return isinstance(index, dict) and index.get("type") == "integer"


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8")


def messages_hash(messages: Any) -> str:
    """sha256 hex of the canonical JSON of a ``messages`` list: how /stats names a request."""
    return hashlib.sha256(_canonical(messages)).hexdigest()


def auto_answer(body: dict[str, Any], seed: int = 0) -> str:
    """The default handler: a valid instance of the requested schema (``{}`` if none).

    Deterministic in (seed, messages), so a rerun of the same rows gets the same answers.
    """
    schema = schema_of(body)
    if schema is None:
        return "{}"
    digest = hashlib.sha256(_canonical([seed, body.get("messages")])).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return json.dumps(synthesize(schema, rng))


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\w+")


@functools.lru_cache(maxsize=8192)
def _embed_cached(text: str, dim: int) -> tuple[float, ...]:
    vec = [0.0] * dim
    for tok in _TOKEN_RE.findall(text.lower()):
        h = zlib.crc32(tok.encode("utf-8"))
        # Signed feature hashing: colliding unrelated words cancel out on average.
        vec[h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    # A small positive per-text component: no vector is all zero, equal bags still differ.
    for i, b in enumerate(hashlib.shake_128(text.encode("utf-8")).digest(dim)):
        vec[i] += b / 255.0 * 0.05
    norm = math.sqrt(sum(v * v for v in vec))
    return tuple(v / norm for v in vec)


def embed_text(text: str, dim: int = 64) -> list[float]:
    """A hashed bag of lowercase words, L2-normalised: texts sharing words score closer."""
    return list(_embed_cached(text, dim))


# --------------------------------------------------------------------------------------------
# Error bodies and malformed answers
# --------------------------------------------------------------------------------------------

_ERROR_KINDS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Bad request"),
    401: ("authentication_error", "invalid_api_key", "Invalid API key"),
    403: ("permission_error", None, "Forbidden"),
    404: ("not_found_error", None, "Not found"),
    408: ("timeout", "timeout", "Request timed out"),
    409: ("conflict_error", None, "Conflict"),
    422: ("invalid_request_error", None, "Unprocessable entity"),
    429: ("rate_limit_error", "rate_limit_exceeded", "Rate limit reached, retry later"),
    500: ("server_error", "server_error", "The server had an error processing the request"),
    502: ("server_error", "bad_gateway", "Bad gateway"),
    503: ("server_error", "service_unavailable", "The server is overloaded, retry later"),
}

_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
}  # fmt: skip


def error_body(
    status: int, message: str | None = None, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error body, which the client turns into ``err.message`` / ``err.code``."""
    kind, default_code, default_message = _ERROR_KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error")
    )
    return {
        "error": {
            "message": message or default_message,
            "type": kind,
            "param": param,
            "code": code if code is not None else default_code,
        }
    }


def _reply_error_body(reply: Reply) -> dict[str, Any]:
    content = reply.content
    if isinstance(content, dict) and "error" in content:
        return content
    if isinstance(content, dict):
        return {"error": content}
    return error_body(reply.status, content if isinstance(content, str) else None)


_MALFORMED_KINDS = ("truncated", "wrong_shape", "wrong_count", "empty", "length", "prose")


def _first_array(value: Any) -> list[Any] | None:
    """The first list in a JSON value, breadth-first, so "wrong count" hits the main list."""
    queue = [value]
    while queue:
        node = queue.pop(0)
        if isinstance(node, list):
            return node
        if isinstance(node, dict):
            queue.extend(node.values())
    return None


def _malform(content: str | None, kind: str, flip: bool) -> tuple[str, str, str | None]:
    """Spoil a valid answer: returns (label, content, finish_reason override or None)."""
    text = content or ""
    if kind == "truncated":
        return kind, text[: max(1, len(text) // 2)] if len(text) > 1 else "{", None
    if kind == "empty":
        return kind, "", None
    if kind == "length":
        return kind, text[: max(1, (len(text) * 2) // 3)] if len(text) > 1 else "{", "length"
    if kind == "prose":
        return (
            kind,
            f"Sure! Here is the JSON you asked for:\n```json\n{text}\n```\nHope this helps.",
            None,
        )
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if kind == "wrong_count":
        arr = _first_array(value)
        if arr is not None:
            if flip or not arr:
                arr.append(json.loads(json.dumps(arr[-1])) if arr else _WORDS[0])
            else:
                arr.pop()
            return kind, json.dumps(value), None
        kind = "wrong_shape"  # nothing to count: spoil the shape instead
    if isinstance(value, dict):
        wrong: Any = [value]
    elif isinstance(value, list):
        wrong = {"items": value}
    else:
        wrong = {"value": value}
    return kind, json.dumps(wrong), None


def _pad_answer(content: str, size: int) -> str:
    """`content` (a JSON answer) with its "reason" strings (else every string) lengthened by
    repeated words to about `size` bytes in all; content that is not JSON is padded whole."""
    try:
        value = json.loads(content)
    except ValueError:
        return content + " lorem" * max(0, (size - len(content)) // 6)
    found: list[tuple[Any, Any]] = []  # (container, key) of each string to pad

    def walk(node: Any, reasons_only: bool) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                walk(child, reasons_only)
            elif isinstance(child, str) and (key == "reason" or not reasons_only):
                found.append((node, key))

    if isinstance(value, dict | list):
        walk(value, True)
        if not found:
            walk(value, False)
    if not found:
        return content + " " * max(0, size - len(content))
    each = max(0, size - len(content)) // len(found)
    for node, key in found:
        node[key] += " lorem" * (each // 6)
    return json.dumps(value)


def _synth_logprobs(content: str, top_n: int, seed: int) -> list[dict[str, Any]]:
    """Deterministic, plausible logprobs when a request asks for them and the handler gave none."""
    rng = random.Random(zlib.crc32(content.encode("utf-8")) ^ seed)
    tokens = [content[i : i + 4] for i in range(0, len(content), 4)]
    out: list[dict[str, Any]] = []
    for tok in tokens:
        lp = -round(rng.random() * 0.1, 6)
        top = [{"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))}]
        for k in range(1, top_n):
            alt = rng.choice(_WORDS)[:4]
            top.append({"token": alt, "logprob": lp - 2.0 * k, "bytes": list(alt.encode("utf-8"))})
        out.append(
            {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")), "top_logprobs": top}
        )
    return out


def _prompt_chars(messages: Any) -> int:
    n = 0
    for m in messages if isinstance(messages, list) else ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            n += len(c)
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += len(part["text"])
    return n


#: OpenAI's prompt caching: prompts of 1,024 tokens or more, hits in steps of 128 tokens.
_CACHE_MIN = 1024
_CACHE_STEP = 128
_CHARS_PER_TOKEN = 4


def _prefix_digests(body: dict[str, Any]) -> list[bytes]:
    """A digest of each whole 128-token prefix of the request's prompt, in order.

    The tokens are the characters `_prompt_chars` counts, 4 to a token; what precedes them
    (model, response format, tools) and each message's role are hashed in without tokens.
    """
    step = _CACHE_STEP * _CHARS_PER_TOKEN
    head = {k: body.get(k) for k in ("model", "response_format", "tools")}
    hasher = hashlib.blake2b(json.dumps(head, sort_keys=True, default=str).encode(), digest_size=16)
    out: list[bytes] = []
    filled = 0  # characters of the current block
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict):
            continue
        hasher.update(f"\x00{m.get('role')}\x00".encode())
        c = m.get("content")
        texts = [c] if isinstance(c, str) else []
        if isinstance(c, list):
            texts = [p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
        for text in texts:
            at = 0
            while at < len(text):
                take = min(step - filled, len(text) - at)
                hasher.update(text[at : at + take].encode("utf-8", "surrogatepass"))
                at += take
                filled += take
                if filled == step:
                    out.append(hasher.copy().digest())
                    filled = 0
    return out


def _content_str(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content)


def parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """Split a multipart/form-data body into {field: (filename or None, bytes)}."""
    m = re.search(r'boundary="?([^";,]+)"?', content_type)
    if m is None:
        raise ValueError("multipart body without a boundary")
    sep = b"\r\n--" + m.group(1).encode("latin-1")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in (b"\r\n" + body).split(sep)[1:]:
        if part.startswith(b"--"):
            break
        part = part.lstrip(b" \t")
        if part.startswith(b"\r\n"):
            part = part[2:]
        head, found, data = part.partition(b"\r\n\r\n")
        if not found:
            continue
        disposition = ""
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                disposition = value
        name = re.search(r'\bname="([^"]*)"', disposition)
        filename = re.search(r'\bfilename="([^"]*)"', disposition)
        if name:
            fields[name.group(1)] = (filename.group(1) if filename else None, data)
    return fields


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


class _BadRequest(Exception):
    pass


@dataclass(slots=True)
class _Head:
    method: str
    target: str
    headers: dict[str, str]
    keep_alive: bool
    chunked: bool
    length: int


@dataclass(slots=True)
class _Out:
    """A response before it is written: JSON (dict/list) or raw bytes."""

    status: int
    body: Any = None
    headers: dict[str, str] | None = None
    content_type: str = "application/json"
    delay: float = 0.0
    drop: bool = False


def _encode(out: _Out, keep_alive: bool, request_id: str) -> bytes:
    body = out.body
    if isinstance(body, bytes | bytearray):
        payload = bytes(body)
    elif body is None:
        payload = b""
    else:
        payload = json.dumps(body).encode("utf-8")
    lines = [
        f"HTTP/1.1 {out.status} {_REASONS.get(out.status, 'Unknown')}\r\n"
        f"Content-Type: {out.content_type}\r\nContent-Length: {len(payload)}\r\n"
        f"x-request-id: {request_id}\r\n"
    ]
    if out.headers:
        lines.extend(f"{k}: {v}\r\n" for k, v in out.headers.items())
    if not keep_alive:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1") + payload


class _Conn(asyncio.Protocol):
    """One client connection: parses requests one at a time and hands them to the server."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: _Head | None = None
        self.busy = False
        self.closed = False
        self.eof = False
        self.dropped = False
        self.task: asyncio.Task[None] | None = None
        self.chunk_left: int | None = None
        self.chunks: list[bytes] = []

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._conns.discard(self)
        task = self.task
        if task is not None and not task.done() and not self.dropped:
            task.cancel()  # the client gave up: free its slot now, as a real server would

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def eof_received(self) -> None:
        # A client that shuts its side has given up (httpx does so on a timeout): returning
        # None closes the transport, and connection_lost cancels the pending answer.
        self.eof = True

    # parsing
    def _next(self) -> None:
        while not self.busy and not self.closed:
            try:
                parsed = self._parse()
            except _BadRequest as exc:
                self.write(_encode(_Out(400, error_body(400, str(exc))), False, "req_bad"))
                self.close()
                return
            if parsed is None:
                if self.eof and self.transport is not None:
                    self.close()
                return
            head, body = parsed
            self.busy = True
            self.task = self.server._loop_ref().create_task(self.server._handle(self, head, body))

    def _parse(self) -> tuple[_Head, bytes] | None:
        buf = self.buf
        if self.head is None:
            while buf.startswith(b"\r\n"):
                del buf[:2]
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise _BadRequest("request head too large")
                return None
            lines = buf[:end].decode("latin-1").split("\r\n")
            del buf[: end + 4]
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                raise _BadRequest("malformed request line") from None
            headers: dict[str, str] = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            conn = headers.get("connection", "").lower()
            keep = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            try:
                length = 0 if chunked else int(headers.get("content-length", "0") or 0)
            except ValueError:
                raise _BadRequest("bad Content-Length") from None
            self.head = _Head(method.upper(), target, headers, keep, chunked, length)
            if headers.get("expect", "").lower() == "100-continue" and (
                chunked or len(buf) < length
            ):
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        head = self.head
        if head.chunked:
            body = self._dechunk()
            if body is None:
                return None
        else:
            if len(buf) < head.length:
                return None
            body = bytes(buf[: head.length])
            del buf[: head.length]
        self.head = None
        return head, body

    def _dechunk(self) -> bytes | None:
        buf = self.buf
        while True:
            if self.chunk_left is None:  # a size line
                i = buf.find(b"\r\n")
                if i < 0:
                    return None
                try:
                    size = int(bytes(buf[:i]).split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise _BadRequest("bad chunk size") from None
                del buf[: i + 2]
                self.chunk_left = size if size > 0 else -1
            elif self.chunk_left == -1:  # trailers, up to an empty line
                i = buf.find(b"\r\n")
                if i < 0:
                    return None
                empty = i == 0
                del buf[: i + 2]
                if empty:
                    body = b"".join(self.chunks)
                    self.chunks, self.chunk_left = [], None
                    return body
            else:
                need = self.chunk_left + 2
                if len(buf) < need:
                    return None
                self.chunks.append(bytes(buf[: self.chunk_left]))
                del buf[:need]
                self.chunk_left = None

    # writing
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def reset(self) -> None:
        """Close abruptly with an RST, so the client sees a reset rather than a clean EOF."""
        self.dropped = True
        if self.transport is None or self.closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def finished(self, keep_alive: bool) -> None:
        self.task = None
        self.busy = False
        if self.closed or self.dropped:
            return
        if not keep_alive:
            self.close()
            return
        if self.buf or self.eof:
            self._next()


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 with scripted answers, latency, slots and faults.

    ``start()`` runs it on its own loop in a daemon thread (the test's loop and client stay
    separate, as with a real server); the command line runs it in the foreground.

    Prompt caching (``prompt_cache=True``, the default) reports cached prompt tokens as OpenAI
    does, so a saving is measured rather than assumed. A prompt is its messages' text (what
    ``prompt_tokens`` counts, 4 characters a token), each message opened by its role, behind
    the request's model, ``response_format`` and ``tools`` (OpenAI puts the schema before the
    system message: a request with another schema shares no prefix). The server remembers
    every 128-token prefix it has answered; a request is reported as cached up to the longest
    remembered prefix, when that is 1,024 tokens or more (so in steps of 128, never beyond
    ``prompt_tokens``). Eviction is first in, first out past ``PROMPT_CACHE_PREFIXES``
    prefixes (a bound on the server's memory in long benchmarks, not a provider's time to
    live); not modelled: routing (one machine holds every prefix), a cache per organisation. A
    prefix becomes visible when its request is answered, and a request looks when it takes
    its slot: two requests sharing a prefix that are served at the same time both miss, as a
    provider's can when they arrive together. With no latency and a plain handler, a request
    is taken and answered in one step, so which requests hit depends only on arrival order,
    and the total cached over requests that each share one prefix with all the others does
    not. ``prompt_cache=False`` sends no ``prompt_tokens_details`` at all (servers that do
    not report it).
    """

    #: 128-token prefixes the prompt cache remembers (oldest forgotten first): about 40 MB.
    PROMPT_CACHE_PREFIXES = 262_144

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        latency: float = 0.0,
        capacity: int | None = None,
        faults: Faults | None = None,
        seed: int = 0,
        embedding_dim: int = 64,
        reject_json_schema: bool = False,
        reject_json_object: bool = False,
        batch_delay: float = 0.0,
        port: int = 0,
        echo_credentials: bool = False,
        reply_bytes: int = 0,
        prompt_cache: bool = True,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.handler = handler  # None means auto_answer
        self.latency = latency
        self.capacity = capacity
        self.faults = faults
        self.seed = seed
        self.embedding_dim = embedding_dim
        self.reject_json_schema = reject_json_schema
        self.reject_json_object = reject_json_object
        self.batch_delay = batch_delay
        #: Repeat the request's credentials in every error reply and raw 200 body of the model
        #: routes, as careless servers and proxies do (see `_echo_credentials`).
        self.echo_credentials = echo_credentials
        #: When > 0, every chat answer's reasons are padded to about this many bytes in all,
        #: whatever the request's max_tokens (a server that ignores it; see `_pad_answer`).
        self.reply_bytes = reply_bytes
        #: Report ``usage.prompt_tokens_details.cached_tokens`` as OpenAI does (see the class).
        self.prompt_cache = prompt_cache
        self.model = "fake-model"
        self.port = port
        self.requests: list[Recorded] = []
        #: Exceptions a handler raised (each answered with a 500), so a test can re-raise them.
        self.handler_errors: list[BaseException] = []
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._files: dict[str, dict[str, Any]] = {}
        self._file_data: dict[str, bytes] = {}
        self._batches: dict[str, dict[str, Any]] = {}
        self._batch_cancel: dict[str, asyncio.Event] = {}
        self._ids = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._slot: asyncio.Semaphore | None = None
        self._clear()

    # configuration
    @property
    def handler(self) -> Handler:
        """The chat handler; assigning None restores ``auto_answer`` with this server's seed."""
        return self._handler

    @handler.setter
    def handler(self, value: Handler | None) -> None:
        self._handler: Handler = value if value is not None else self._auto

    def _auto(self, body: dict[str, Any]) -> str:
        return auto_answer(body, self.seed)

    @property
    def base_url(self) -> str:
        return f"http://{_HOST}:{self.port}/v1"

    # records
    def _clear(self) -> None:
        self.requests.clear()
        self.handler_errors.clear()
        self._path_counts: Counter[str] = Counter()
        self._fault_counts: Counter[str] = Counter()
        self._chat_hashes: list[str] = []
        self._chat_ok = 0
        self._in_flight = 0
        self._open = 0
        self.max_in_flight = 0
        self.max_open = 0
        self._fault_rng = random.Random(self.seed)
        self._n429 = 0
        self._nmalformed = 0
        #: Prompt-cache entries: digest of a 128-token prefix -> the answer that made it known.
        self._prefixes: dict[bytes, int] = {}
        self._prefix_clock = 0
        self._prompt_tokens = 0
        self._cached_tokens = 0

    def reset(self) -> None:
        """Clear records, counters and the fault RNG (files and batches stay)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread or not loop.is_running():
            self._clear()
            return
        done = threading.Event()

        def clear() -> None:
            self._clear()
            done.set()

        loop.call_soon_threadsafe(clear)
        done.wait(5)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of chat requests answered 200."""
        return [
            r.body
            for r in list(self.requests)
            if r.path.endswith("/chat/completions") and r.status == 200
        ]

    @property
    def chat_attempts(self) -> list[Any]:
        """Bodies of every chat request, whatever its answer."""
        return [r.body for r in list(self.requests) if r.path.endswith("/chat/completions")]

    @property
    def chat_hashes(self) -> list[str]:
        """``messages_hash`` of each chat request answered 200, in arrival order."""
        return list(self._chat_hashes)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def count(self, path_suffix: str = "/chat/completions", ok_only: bool = False) -> int:
        """How many requests hit a path ending in ``path_suffix`` (only 200s if ``ok_only``)."""
        return sum(
            1
            for r in list(self.requests)
            if r.path.endswith(path_suffix) and (not ok_only or r.status == 200)
        )

    def fault_counts(self, detailed: bool = False) -> dict[str, int]:
        """Faults applied so far, by kind (``"429"``...) or by full label if ``detailed``."""
        if detailed:
            return dict(self._fault_counts)
        out: Counter[str] = Counter()
        for label, n in self._fault_counts.items():
            out[label.split(":", 1)[0]] += n
        return dict(out)

    def stats(self, hashes: bool = False) -> dict[str, Any]:
        """What ``GET /stats`` answers."""
        out: dict[str, Any] = {
            "requests": dict(self._path_counts),
            "chat_ok": self._chat_ok,
            "max_in_flight": self.max_in_flight,
            "max_open": self.max_open,
            "in_flight": self._in_flight,
            "faults": self.fault_counts(),
            "faults_detailed": self.fault_counts(detailed=True),
            "prompt_tokens": self._prompt_tokens,
            "cached_tokens": self._cached_tokens,
        }
        if hashes:
            out["chat_hashes"] = list(self._chat_hashes)
        return out

    # lifecycle
    def _loop_ref(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    async def _open_server(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._slot = asyncio.Semaphore(self.capacity) if self.capacity else None
        self._server = await self._loop.create_server(
            lambda: _Conn(self), host=_HOST, port=self.port, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close_server(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for conn in list(self._conns):
            if conn.task is not None:
                tasks.append(conn.task)
            if conn.transport is not None:
                conn.transport.abort()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._server = None

    def start(self) -> FakeServer:
        """Listen on 127.0.0.1 (port 0: any free port) from a daemon thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._open_server())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close_server())
                loop.close()

        self._thread = threading.Thread(target=run, name="ragframe-fakeserver", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving and join the thread; open connections are aborted."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._loop_ref().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:024x}"

    # request handling
    async def _handle(self, conn: _Conn, head: _Head, raw: bytes) -> None:
        path, _, query = head.target.partition("?")
        route = path[3:] if path.startswith("/v1/") else path
        route = route.rstrip("/") or "/"
        keep = head.keep_alive
        rec: Recorded | None = None
        request_id = f"req_{self._ids + 1:x}"
        try:
            if route in ("/stats", "/reset", "/health"):
                out = self._control(route, head.method, query)
                conn.write(_encode(out, keep, request_id))
                return
            body: Any = None
            if raw and "multipart/" not in head.headers.get("content-type", ""):
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
            rec = Recorded(
                path, head.method, body, started=time.monotonic(), query=query,
                headers=head.headers,
            )  # fmt: skip
            self.requests.append(rec)
            self._path_counts[path] += 1
            if head.method == "POST" and route in _MODEL_PATHS:
                if raw and body is None:
                    self._finish(conn, rec, _Out(400, error_body(400, "body is not JSON")), keep)
                    return
                await self._model_request(conn, rec, route, body if body is not None else {}, keep)
                return
            out = self._rest(head, route, query, raw)
            self._finish(conn, rec, out, keep)
        except asyncio.CancelledError:
            if rec is not None and rec.ended is None:
                rec.status, rec.ended = STATUS_CLIENT_GONE, time.monotonic()
            keep = False
            raise
        except Exception as exc:  # a bug or a handler error: answer 500, keep serving
            self.handler_errors.append(exc)
            out = _Out(500, error_body(500, f"fake server error: {exc!r}"))
            if rec is not None and rec.ended is None:
                self._finish(conn, rec, out, keep)
            else:
                conn.write(_encode(out, keep, request_id))
        finally:
            conn.finished(keep)

    def _finish(self, conn: _Conn, rec: Recorded, out: _Out, keep: bool) -> None:
        """Write (or drop) the answer and close the record."""
        # Record first: the client may read the answer (and the test this record) at once.
        rec.ended = time.monotonic()
        if out.drop:
            rec.status = STATUS_DROPPED
            conn.reset()
        else:
            rec.status = out.status
            conn.write(_encode(out, keep, f"req_{len(self.requests):x}"))

    def _echo_credentials(self, out: _Out, rec: Recorded) -> _Out:
        """`out`, repeating the request's credentials when `echo_credentials` is on: an error's
        message, and a raw 200 body (a proxy's page), get the Authorization header (and the
        user:password of a Basic one, decoded), any api-key header and the query string."""
        if not self.echo_credentials or out.drop:
            return out
        seen = [f"{k}: {v}" for k, v in rec.headers.items() if k in _CREDENTIAL_HEADERS]
        scheme, _, token = rec.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            with contextlib.suppress(ValueError):
                seen.append(f"user:password {base64.b64decode(token).decode()}")
        if rec.query:
            seen.append(f"query {rec.query}")
        echo = f" [the request had {'; '.join(seen) or 'no credentials'}]"
        body = out.body
        if isinstance(body, bytes | bytearray):
            out.body = bytes(body) + echo.encode()
        elif out.status != 200 and isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
            out.body = {**body, "error": {**error, "message": f"{error.get('message')}{echo}"}}
        return out

    def _draw_fault(self, path: str) -> str | None:
        faults = self.faults
        if faults is None or not path.endswith(faults.only_paths):
            return None
        u = self._fault_rng.random()
        for name, rate in faults._table():
            if u < rate:
                return name
            u -= rate
        return None

    def _fault_out(self, fault: str) -> tuple[str, _Out]:
        """The immediate answer for an HTTP-level fault, with its label."""
        assert self.faults is not None
        if fault == "429":
            self._n429 += 1
            if self._n429 % 2 == 1:
                headers = {"Retry-After": f"{self.faults.retry_after:g}"}
                return "429:retry_after", _Out(429, error_body(429), headers)
            return "429", _Out(429, error_body(429))
        if fault == "reset":
            return "reset", _Out(STATUS_DROPPED, drop=True)
        return fault, _Out(int(fault), error_body(int(fault)))

    async def _model_request(
        self, conn: _Conn, rec: Recorded, route: str, body: dict[str, Any], keep: bool
    ) -> None:
        fault = self._draw_fault(route)
        if fault in ("429", "503", "reset"):
            fault_label, out = self._fault_out(fault)
            rec.fault = fault_label
            self._fault_counts[fault_label] += 1
            self._finish(conn, rec, self._echo_credentials(out, rec), keep)
            return
        self._open += 1
        self.max_open = max(self.max_open, self._open)
        slot = self._slot
        try:
            if slot is not None:
                await slot.acquire()
            try:
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
                counted = True
                seen = self._prefix_clock  # the prompt cache as this request found it
                try:
                    if self.latency > 0:
                        await asyncio.sleep(self.latency)
                    if fault == "timeout":
                        rec.fault = "timeout"
                        self._fault_counts["timeout"] += 1
                        assert self.faults is not None
                        await asyncio.sleep(self.faults.slow_seconds)
                        fault = None
                    label: str | None
                    if fault == "500":
                        label, out = self._fault_out(fault)
                    elif route == "/embeddings":
                        label, out = self._embeddings(body, fault)
                    else:
                        label, out = await self._chat(body, fault, seen)
                    if label is not None:
                        rec.fault = label
                        self._fault_counts[label] += 1
                    if out.delay > 0:
                        await asyncio.sleep(out.delay)
                    if out.status == 200 and route == "/chat/completions" and not out.drop:
                        self._chat_ok += 1
                        self._chat_hashes.append(messages_hash(body.get("messages")))
                    self._in_flight -= 1  # before the write, so a client never sees it stale
                    counted = False
                    self._finish(conn, rec, self._echo_credentials(out, rec), keep)
                finally:
                    if counted:
                        self._in_flight -= 1
            finally:
                if slot is not None:
                    slot.release()
        finally:
            self._open -= 1

    async def _call_handler(self, body: dict[str, Any]) -> Reply:
        result = self._handler(body)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, Reply) else Reply(content=result)

    async def _chat(
        self, body: dict[str, Any], fault: str | None, seen: int | None = None
    ) -> tuple[str | None, _Out]:
        """Answer a chat request; ``fault`` may be "malformed". Returns (fault label, answer).
        ``seen``: the prompt cache's clock when the request took its slot (None: now)."""
        if not isinstance(body.get("messages"), list):
            return None, _Out(400, error_body(400, "'messages' is required", param="messages"))
        rf = body.get("response_format")
        rtype = rf.get("type") if isinstance(rf, dict) else None
        if (rtype == "json_schema" and self.reject_json_schema) or (
            rtype == "json_object" and self.reject_json_object
        ):
            message = f"response_format type '{rtype}' is not supported by this server"
            out = _Out(400, error_body(400, message, param="response_format"))
            return ("malformed:skipped" if fault else None), out
        try:
            reply = await self._call_handler(body)
        except Exception as exc:
            self.handler_errors.append(exc)
            return fault and "malformed:skipped", _Out(
                500, error_body(500, f"handler raised {exc!r}")
            )
        headers = dict(reply.headers) if reply.headers else None
        if reply.drop_connection:
            return fault and "malformed:skipped", _Out(0, drop=True, delay=reply.delay)
        if reply.status != 200:
            out = _Out(reply.status, _reply_error_body(reply), headers, delay=reply.delay)
            return fault and "malformed:skipped", out
        if reply.raw_body is not None:
            out = _Out(200, reply.raw_body, headers, "text/html", reply.delay)
            return fault and "malformed:skipped", out
        content = _content_str(reply.content)
        if self.reply_bytes > 0 and content:
            content = _pad_answer(content, self.reply_bytes)
        finish = reply.finish_reason
        label = None
        if fault == "malformed":
            kind = _MALFORMED_KINDS[self._nmalformed % len(_MALFORMED_KINDS)]
            self._nmalformed += 1
            flip = (self._nmalformed // len(_MALFORMED_KINDS)) % 2 == 0
            kind, content, finish_override = _malform(content, kind, flip)
            finish = finish_override or finish
            label = f"malformed:{kind}"
        completion = self._completion(body, content, finish, reply)
        self._cache_prompt(body, completion["usage"], reply, seen)
        if body.get("stream"):
            return label, _Out(
                200, self._sse(completion, body), headers, "text/event-stream", reply.delay
            )
        return label, _Out(200, completion, headers, delay=reply.delay)

    def _completion(
        self, body: dict[str, Any], content: str | None, finish: str, reply: Reply
    ) -> dict[str, Any]:
        logprobs = reply.logprobs
        if logprobs is None and body.get("logprobs") and content is not None:
            logprobs = _synth_logprobs(content, int(body.get("top_logprobs") or 0), self.seed)
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = _prompt_chars(body.get("messages")) // 4
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = len(content or "") // 4 + 1
        return {
            "id": self._new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "finish_reason": finish,
                    "logprobs": None
                    if logprobs is None
                    else {"content": logprobs, "refusal": None},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _cache_prompt(
        self, body: dict[str, Any], usage: dict[str, Any], reply: Reply, seen: int | None
    ) -> None:
        """Add ``prompt_tokens_details.cached_tokens`` to ``usage`` (see the class docstring)
        and remember this prompt's prefixes."""
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self._prompt_tokens += prompt_tokens
        if not self.prompt_cache:
            return
        digests = _prefix_digests(body)
        clock = self._prefix_clock if seen is None else seen
        hit = 0
        for blocks, digest in enumerate(digests, 1):
            known = self._prefixes.get(digest)
            if known is None or known > clock:
                break
            hit = blocks
        self._prefix_clock += 1
        prefixes = self._prefixes
        for digest in digests:
            prefixes.setdefault(digest, self._prefix_clock)
        while len(prefixes) > self.PROMPT_CACHE_PREFIXES:
            del prefixes[next(iter(prefixes))]
        cached = hit * _CACHE_STEP if hit * _CACHE_STEP >= _CACHE_MIN else 0
        if reply.cached_tokens is not None:
            cached = reply.cached_tokens
        cached = min(cached, prompt_tokens)
        self._cached_tokens += cached
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}

    @staticmethod
    def _sse(completion: dict[str, Any], body: dict[str, Any]) -> bytes:
        """The completion as one content chunk and one finish chunk of server-sent events."""
        choice = completion["choices"][0]
        base = {k: completion[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant",
             "content": choice["message"]["content"]}, "logprobs": choice["logprobs"],
             "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason":
             choice["finish_reason"]}]},
        ]  # fmt: skip
        opts = body.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            chunks.append({**base, "choices": [], "usage": completion["usage"]})
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return events.encode("utf-8")

    def _embeddings(self, body: dict[str, Any], fault: str | None) -> tuple[str | None, _Out]:
        raw = body.get("input")
        if isinstance(raw, str):
            texts = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
            texts = [" ".join(map(str, raw))]  # one pre-tokenised input
        elif isinstance(raw, list) and raw:
            texts = [t if isinstance(t, str) else " ".join(map(str, t)) for t in raw]
        else:
            return None, _Out(400, error_body(400, "'input' is required", param="input"))
        dim = body.get("dimensions") or self.embedding_dim
        as_b64 = body.get("encoding_format") == "base64"
        data: list[dict[str, Any]] = []
        for i, text in enumerate(texts):
            vec = _embed_cached(text, dim)
            emb: Any = (
                base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii")
                if as_b64
                else list(vec)
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        label = None
        if fault == "malformed":
            data.pop()  # one embedding too few
            label = "malformed:wrong_count"
        tokens = sum(len(t) // 4 + 1 for t in texts)
        return label, _Out(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model") or self.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # control endpoints
    def _control(self, route: str, method: str, query: str) -> _Out:
        if route == "/health":
            return _Out(200, {"status": "ok"})
        if route == "/reset" and method == "POST":
            self._clear()
            return _Out(200, {"ok": True})
        if route == "/stats" and method == "GET":
            flag = parse_qs(query).get("hashes", ["0"])[-1]
            return _Out(200, self.stats(hashes=flag not in ("0", "", "false")))
        return _Out(405, error_body(400, f"{method} not allowed on {route}"))

    # REST endpoints: models, files, batches
    def _rest(self, head: _Head, route: str, query: str, raw: bytes) -> _Out:
        method = head.method
        parts = route.strip("/").split("/")
        if parts[0] == "models":
            model = {"id": self.model, "object": "model", "created": 0, "owned_by": "ragframe"}
            if method == "GET" and len(parts) == 1:
                return _Out(200, {"object": "list", "data": [model]})
            if method == "GET" and len(parts) == 2:
                return _Out(200, {**model, "id": parts[1]})
        if parts[0] == "files":
            return self._files_route(method, parts[1:], head, raw, query)
        if parts[0] == "batches":
            return self._batches_route(method, parts[1:], raw, query)
        return _Out(404, error_body(404, f"no route for {method} {route}"))

    def _add_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        file_id = self._new_id("file-")
        meta = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self._files[file_id] = meta
        self._file_data[file_id] = data
        return meta

    def _files_route(
        self, method: str, rest: list[str], head: _Head, raw: bytes, query: str
    ) -> _Out:
        if not rest and method == "POST":
            ctype = head.headers.get("content-type", "")
            try:
                fields = parse_multipart(raw, ctype)
            except ValueError as exc:
                return _Out(400, error_body(400, str(exc)))
            if "file" not in fields:
                return _Out(400, error_body(400, "missing 'file' field", param="file"))
            filename, data = fields["file"]
            purpose = fields.get("purpose", (None, b"batch"))[1].decode("utf-8")
            return _Out(200, self._add_file(data, filename or "upload", purpose))
        meta = self._listed_or_found(self._files, "file", method, rest, query)
        if isinstance(meta, _Out):
            return meta
        if len(rest) == 1 and method == "DELETE":
            del self._files[rest[0]]
            self._file_data.pop(rest[0], None)
            return _Out(200, {"id": rest[0], "object": "file", "deleted": True})
        if len(rest) == 2 and rest[1] == "content" and method == "GET":
            return _Out(200, self._file_data[rest[0]], content_type="application/octet-stream")
        return _Out(404, error_body(404, f"no route for {method} /files/{'/'.join(rest)}"))

    def _listed_or_found(
        self, store: dict[str, dict[str, Any]], noun: str, method: str, rest: list[str], query: str
    ) -> _Out | dict[str, Any]:
        """The answer to a GET of the collection (a page) or of one item, or a 404 for an
        unknown item; else the item `rest[0]` names, for the route to act on."""
        if not rest and method == "GET":
            return _Out(200, self._page(list(store.values()), query))
        item = store.get(rest[0]) if rest else None
        if item is None:
            return _Out(404, error_body(404, f"no such {noun}: {rest[0] if rest else ''}"))
        if len(rest) == 1 and method == "GET":
            return _Out(200, item)
        return item

    @staticmethod
    def _page(items: list[dict[str, Any]], query: str) -> dict[str, Any]:
        """A cursor page, newest first, honouring ``limit`` and ``after``."""
        params = parse_qs(query)
        items = sorted(items, key=lambda x: x["id"], reverse=True)
        after = params.get("after", [None])[-1]
        if after is not None:
            ids = [x["id"] for x in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        limit = int(params.get("limit", ["20"])[-1])
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }

    def _batches_route(self, method: str, rest: list[str], raw: bytes, query: str) -> _Out:
        if not rest and method == "POST":
            try:
                req = json.loads(raw or b"{}")
            except ValueError:
                return _Out(400, error_body(400, "body is not JSON"))
            input_id = req.get("input_file_id")
            if input_id not in self._files:
                return _Out(
                    404, error_body(404, f"no such file: {input_id}", param="input_file_id")
                )
            now = int(time.time())
            batch_id = self._new_id("batch_")
            batch: dict[str, Any] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": req.get("endpoint", "/v1/chat/completions"),
                "input_file_id": input_id,
                "completion_window": req.get("completion_window", "24h"),
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "errors": None,
                "created_at": now,
                "in_progress_at": None,
                "expires_at": now + 24 * 3600,
                "finalizing_at": None,
                "completed_at": None,
                "failed_at": None,
                "expired_at": None,
                "cancelling_at": None,
                "cancelled_at": None,
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
                "metadata": req.get("metadata"),
                "model": None,
            }
            self._batches[batch_id] = batch
            self._batch_cancel[batch_id] = asyncio.Event()
            self._spawn(self._run_batch(batch))
            return _Out(200, batch)
        found = self._listed_or_found(self._batches, "batch", method, rest, query)
        if isinstance(found, _Out):
            return found
        if len(rest) == 2 and rest[1] == "cancel" and method == "POST":
            if found["status"] in ("validating", "in_progress", "finalizing"):
                found["status"] = "cancelling"
                found["cancelling_at"] = int(time.time())
                self._batch_cancel[found["id"]].set()
            return _Out(200, found)
        return _Out(404, error_body(404, f"no route for {method} /batches/{'/'.join(rest)}"))

    async def _run_batch(self, batch: dict[str, Any]) -> None:
        """Answer every line through the handler and faults, then publish shuffled results."""
        await asyncio.sleep(0)
        cancel = self._batch_cancel[batch["id"]]
        if batch["status"] == "validating":
            batch["status"] = "in_progress"
            batch["in_progress_at"] = int(time.time())
        lines = self._file_data.get(batch["input_file_id"], b"").decode("utf-8").splitlines()
        ok: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        todo = [line for line in lines if line.strip()]
        batch["request_counts"]["total"] = len(todo)
        for i, line in enumerate(todo):
            if i % 64 == 63:
                await asyncio.sleep(0)  # keep serving HTTP while a big batch runs
            try:
                entry = json.loads(line)
            except ValueError:
                failed.append(
                    {
                        "id": self._new_id("batch_req_"),
                        "custom_id": None,
                        "response": None,
                        "error": {"code": "invalid_json_line", "message": f"line {i + 1}"},
                    }
                )
                continue
            status, line_out = await self._batch_entry(batch, entry)
            (ok if status == 200 else failed).append(line_out)
            batch["request_counts"]["completed" if status == 200 else "failed"] += 1
        if self.batch_delay > 0 and not cancel.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(cancel.wait(), self.batch_delay)
        self._publish_batch(batch, ok, failed, cancelled=cancel.is_set())

    async def _batch_entry(
        self, batch: dict[str, Any], entry: dict[str, Any]
    ) -> tuple[int | None, dict[str, Any]]:
        """One parsed line of a batch answered: its status (None if no answer) and result line."""
        body = entry.get("body") if isinstance(entry.get("body"), dict) else {}
        if batch["model"] is None:
            batch["model"] = body.get("model")
        url = str(entry.get("url") or batch["endpoint"])
        status, resp_body, error = await self._batch_line(url, body)
        line_out = {
            "id": self._new_id("batch_req_"),
            "custom_id": entry.get("custom_id"),
            "response": None
            if status is None
            else {"status_code": status, "request_id": f"req_{self._ids:x}", "body": resp_body},
            "error": error,
        }
        return status, line_out

    def _publish_batch(
        self,
        batch: dict[str, Any],
        ok: list[dict[str, Any]],
        failed: list[dict[str, Any]],
        *,
        cancelled: bool,
    ) -> None:
        """Write the output and error files, each shuffled (as OpenAI's come), and end the batch."""
        batch["finalizing_at"] = int(time.time())
        shuffler = random.Random(f"{self.seed}:{batch['id']}")
        shuffler.shuffle(ok)
        shuffler.shuffle(failed)
        for results, kind in ((ok, "output"), (failed, "error")):
            if results:
                data = "".join(json.dumps(x) + "\n" for x in results).encode("utf-8")
                meta = self._add_file(data, f"{batch['id']}_{kind}.jsonl", "batch_output")
                batch[f"{kind}_file_id"] = meta["id"]
        now = int(time.time())
        if cancelled:
            batch["status"], batch["cancelled_at"] = "cancelled", now
        else:
            batch["status"], batch["completed_at"] = "completed", now

    async def _batch_line(
        self, url: str, body: dict[str, Any]
    ) -> tuple[int | None, Any, dict[str, str] | None]:
        """One batch line: (status or None if no answer, response body, error or None)."""
        path = url.split("?", 1)[0]
        route = path[3:] if path.startswith("/v1/") else path
        if route not in _MODEL_PATHS:
            return None, None, {"code": "invalid_url", "message": f"unsupported url {url}"}
        fault = self._draw_fault(route)
        if fault in ("429", "500", "503"):
            fault_label, out = self._fault_out(fault)
            self._fault_counts[fault_label] += 1
            return out.status, out.body, {"code": str(out.status), "message": "injected fault"}
        if fault in ("reset", "timeout"):
            self._fault_counts[fault] += 1
            code = "connection_reset" if fault == "reset" else "timeout"
            return None, None, {"code": code, "message": f"injected fault: {fault}"}
        label: str | None
        if route == "/embeddings":
            label, out = self._embeddings(body, fault)
        else:
            label, out = await self._chat(body, fault)
        if label is not None:
            self._fault_counts[label] += 1
        if out.drop:
            return None, None, {"code": "connection_reset", "message": "handler dropped it"}
        if out.status != 200:
            err = out.body.get("error", {}) if isinstance(out.body, dict) else {}
            code = str(err.get("code") or out.status)
            return out.status, out.body, {"code": code, "message": str(err.get("message", ""))}
        return 200, out.body, None


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ragframe.testing.server",
        description="Serve a fake OpenAI-compatible API on 127.0.0.1 until SIGTERM/SIGINT.",
    )
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--latency", type=float, default=0.0, help="seconds per model request")
    p.add_argument("--capacity", type=int, default=None, help="concurrent slots (default: no cap)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--faults", type=Faults.from_json, default=None, help="Faults as JSON")
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--batch-delay", type=float, default=0.0)
    p.add_argument("--reject-json-schema", action="store_true")
    p.add_argument("--reject-json-object", action="store_true")
    p.add_argument(
        "--echo-credentials",
        action="store_true",
        help="repeat the request's credentials in error replies and raw 200 bodies",
    )
    p.add_argument(
        "--reply-bytes",
        type=int,
        default=0,
        help="pad every chat answer's reasons to about this many bytes (ignoring max_tokens)",
    )
    p.add_argument(
        "--no-prompt-cache",
        action="store_true",
        help="send no usage.prompt_tokens_details (a server that does not report cached tokens)",
    )
    return p.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    server = FakeServer(
        latency=args.latency,
        capacity=args.capacity,
        faults=args.faults,
        seed=args.seed,
        embedding_dim=args.embedding_dim,
        reject_json_schema=args.reject_json_schema,
        reject_json_object=args.reject_json_object,
        batch_delay=args.batch_delay,
        port=args.port,
        echo_credentials=args.echo_credentials,
        reply_bytes=args.reply_bytes,
        prompt_cache=not args.no_prompt_cache,
    )
    await server._open_server()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(f"READY {server.base_url}\n")
    sys.stdout.flush()
    await stop.wait()
    await server._close_server()


def main(argv: list[str] | None = None) -> int:
    """Entry point: serve in the foreground; exit 0 on SIGTERM or SIGINT."""
    asyncio.run(_serve(_parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
