"""Batch JSONL: request files cut to the per-file limits, and result lines in the shapes
OpenAI's Batch API and `vllm run-batch` write them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ragframe.errors import ConfigError

#: OpenAI's limits per batch input file (50,000 requests, 200 MB); bytes kept a little under.
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 1024 * 1024
ENDPOINT = "/v1/chat/completions"


def error_text(status: int | None, body: Any, error: Any) -> str:
    """A short reason from a failed result line, whatever shape its error has."""
    message: str | None = None
    for source in (error, body):
        if isinstance(source, str) and source:
            message = source
            break
        if isinstance(source, dict):
            inner = source.get("error") if isinstance(source.get("error"), dict) else source
            found = inner.get("message") or inner.get("code")
            if found:
                message = str(found)
                break
    message = " ".join((message or "no answer").split())[:300]
    return f"HTTP {status}: {message}" if status not in (None, 200) else message


def read_result_line(line: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """(custom_id, chat completion, None) for an answered line, (custom_id, None, reason) else.

    Accepts OpenAI's batch output and `vllm run-batch`'s: `response` as
    `{"status_code", "body"}`, without `status_code` (then 200 when the body has choices), or
    the completion itself; a line with an `error` and no usable body is a failure.
    """
    custom_id = line.get("custom_id")
    cid = custom_id if isinstance(custom_id, str) else None
    response = line.get("response")
    error = line.get("error")
    body: Any = None
    status: int | None = None
    if isinstance(response, dict):
        if "body" in response or "status_code" in response:
            body = response.get("body")
            raw = response.get("status_code")
            status = int(raw) if isinstance(raw, int | str) and str(raw).isdigit() else None
        else:
            body = response
        if status is None and isinstance(body, dict) and body.get("choices"):
            status = 200
    if status == 200 and isinstance(body, dict) and body.get("choices"):
        return cid, body, None
    return cid, None, error_text(status, body, error)


def logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The client's logprobs shape: [{token, logprob, top: [{token, logprob}]}]."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        {
            "token": item.get("token"),
            "logprob": item.get("logprob"),
            "top": [
                {"token": t.get("token"), "logprob": t.get("logprob")}
                for t in item.get("top_logprobs") or []
            ],
        }
        for item in content
    ]


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a request asked its answer to follow, if any."""
    fmt = body.get("response_format") or {}
    schema = (
        (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
    )
    return schema if isinstance(schema, dict) else fmt.get("schema")


def task_name(body: dict[str, Any]) -> str:
    """The task a request is for (its json_schema name)."""
    fmt = body.get("response_format") or {}
    return str((fmt.get("json_schema") or {}).get("name") or "request")


def by_task(lines: Iterable[dict[str, Any]]) -> str:
    """ "task n, task m": how many request lines each task has."""
    counts: dict[str, int] = {}
    for line in lines:
        name = task_name(line["body"])
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def encode(lines: Iterable[dict[str, Any]]) -> list[bytes]:
    """One compact JSON line per request, as uploaded."""
    return [
        (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        for line in lines
    ]


def split(encoded: list[bytes], max_requests: int, max_bytes: int) -> list[list[bytes]]:
    """Greedy parts within the per-file limits, in order."""
    parts: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for line in encoded:
        if len(line) > max_bytes:
            raise ConfigError(f"one batch request is {len(line)} bytes, over the {max_bytes} limit")
        if current and (len(current) >= max_requests or size + len(line) > max_bytes):
            parts.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        parts.append(current)
    return parts


def read_jsonl(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL text; blank and broken lines are skipped."""
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def request_bodies(text: str) -> dict[str, dict[str, Any]]:
    """custom_id -> request body, from a request file's text."""
    return {
        line["custom_id"]: line["body"]
        for line in read_jsonl(text)
        if isinstance(line.get("custom_id"), str) and isinstance(line.get("body"), dict)
    }
