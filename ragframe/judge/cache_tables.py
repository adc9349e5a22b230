"""The answer cache's tables: their schema, the row a payload is stored as, and the payloads
read back from rows (`ragframe.judge.cache` writes them, off the event loop)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    value TEXT,
    content TEXT NOT NULL,
    logprobs TEXT,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS failures (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    conditions TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS scored (
    key TEXT PRIMARY KEY,
    frame BLOB NOT NULL,
    created REAL NOT NULL
);
"""

#: Keys looked up in one query at most.
_LOOKUP_CHUNK = 500


def answer_row(key: str, model: str, payload: dict[str, Any]) -> tuple[Any, ...]:
    """The `answers` row of a payload as `AnswerCache.put` takes it."""
    logprobs = payload.get("logprobs")
    return (
        key,
        model,
        payload.get("value"),
        payload.get("content") or "",
        json.dumps(logprobs, separators=(",", ":")) if logprobs else None,
        *_usage_columns(payload),
    )


def failure_row(key: str, model: str, payload: dict[str, Any]) -> tuple[Any, ...]:
    """The `failures` row of a payload as `AnswerCache.put_failure` takes it."""
    return (
        key,
        model,
        str(payload["kind"]),
        str(payload["reason"]),
        json.dumps(payload.get("conditions") or {}, sort_keys=True, separators=(",", ":")),
        *_usage_columns(payload),
    )


def _usage_columns(payload: dict[str, Any]) -> tuple[int, int, float]:
    """prompt_tokens, completion_tokens and created, the columns every stored row ends with."""
    usage = payload.get("usage") or {}
    return (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        time.time(),
    )


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}


def _rows(db: sqlite3.Connection, keys: Sequence[str], query: str) -> Iterator[Any]:
    """The rows `query` selects for `keys`, 500 keys a query: `query` names the chunk's
    placeholders `{marks}` (as often as it needs them)."""
    for start in range(0, len(keys), _LOOKUP_CHUNK):
        chunk = keys[start : start + _LOOKUP_CHUNK]
        sql = query.format(marks=",".join("?" * len(chunk)))
        yield from db.execute(sql, [*chunk] * query.count("{marks}"))


#: An `answers` row as `select_answer_rows` gives it: value (normalised JSON text, or None),
#: content (the raw answer, only when there is no value), logprobs (JSON text or None),
#: prompt_tokens, completion_tokens.
AnswerRow = tuple[str | None, str | None, str | None, int, int]


def select_answer_rows(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, AnswerRow]:
    """The answers among `keys` in one file, as stored (no JSON decoded): what a warm rerun
    reads, an answer's text going on as it is."""
    rows: Iterable[Any] = _rows(
        db,
        keys,
        "SELECT key, value, CASE WHEN value IS NULL THEN content END, logprobs, "
        "prompt_tokens, completion_tokens FROM answers WHERE key IN ({marks})",
    )
    return {row[0]: row[1:] for row in rows}


def select_answers(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The answers among `keys` in one file (see `AnswerCache.get_many`)."""
    return {
        key: {
            "value": value,
            "content": content,
            "logprobs": json.loads(logprobs) if logprobs else None,
            "usage": _usage(prompt_tokens, completion_tokens),
        }
        for key, (value, content, logprobs, prompt_tokens, completion_tokens) in (
            select_answer_rows(db, keys).items()
        )
    }


def select_failures(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The remembered failures among `keys` that this file holds no answer for."""
    rows: Iterable[Any] = _rows(
        db,
        keys,
        "SELECT key, kind, reason, conditions, prompt_tokens, completion_tokens "
        "FROM failures WHERE key IN ({marks}) "
        "AND key NOT IN (SELECT key FROM answers WHERE key IN ({marks}))",
    )
    return {
        key: {
            "kind": kind,
            "reason": reason,
            "conditions": json.loads(conditions),
            "usage": _usage(prompt_tokens, completion_tokens),
        }
        for key, kind, reason, conditions, prompt_tokens, completion_tokens in rows
    }


def select_vectors(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, bytes]:
    """The embedding vectors among `keys` in one file."""
    return dict(_rows(db, keys, "SELECT key, vector FROM embeddings WHERE key IN ({marks})"))


def select_scored(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, bytes]:
    """The scored columns among `keys` in one file (Arrow IPC bytes; see
    `ragframe.engine.reuse`); none from a file written before the table existed."""
    try:
        return dict(_rows(db, keys, "SELECT key, frame FROM scored WHERE key IN ({marks})"))
    except sqlite3.OperationalError as err:  # a read-only older file: no such table
        if "no such table" in str(err):
            return {}
        raise
