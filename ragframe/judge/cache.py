"""A persistent answer cache in SQLite, so an interrupted run resumes without paying twice.

Each answer is committed the moment it arrives (WAL mode), so a run killed with SIGKILL loses
nothing it had been answered. Several processes may share one file: SQLite's locking keeps it
consistent and `INSERT OR IGNORE` makes concurrent writers of the same key harmless.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
"""

_LOOKUP_CHUNK = 500


def default_cache_path() -> Path:
    """`$RAGFRAME_CACHE`, else `$XDG_CACHE_HOME/ragframe/cache.sqlite3`, else under `~/.cache`."""
    explicit = os.environ.get("RAGFRAME_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragframe" / "cache.sqlite3"


def request_key(payload: dict[str, Any]) -> str:
    """A stable hash of everything that decides an answer: model, endpoint, messages, schema,
    sampling parameters. (The structured-output transport is not part of it, so a server
    that falls back from json_schema to json_object still finds earlier answers.)"""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class AnswerCache:
    """Key -> answer payload (a JSON object: content, logprobs, usage), stored on disk."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.commit()

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Look many keys up at once (one query per 500 keys keeps warm reruns cheap).

        Each hit is a payload like the one `put` took: `value` (the normalised answer, JSON
        text), `logprobs`, `usage`, and `content` (the raw answer) only when there is no value.
        """
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                chunk = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    "SELECT key, value, CASE WHEN value IS NULL THEN content END, logprobs, "
                    f"prompt_tokens, completion_tokens FROM answers WHERE key IN ({marks})",
                    chunk,
                )
                for key, value, content, logprobs, prompt_tokens, completion_tokens in rows:
                    found[key] = {
                        "value": value,
                        "content": content,
                        "logprobs": json.loads(logprobs) if logprobs else None,
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                        },
                    }
        return found

    def put(self, key: str, model: str, payload: dict[str, Any]) -> None:
        """Store and commit one answer now: a crash a moment later must not lose it.

        `payload`: `content` (the raw answer), optional `value` (normalised JSON text),
        `logprobs`, `usage` ({prompt_tokens, completion_tokens}).
        """
        usage = payload.get("usage") or {}
        logprobs = payload.get("logprobs")
        row = (
            key,
            model,
            payload.get("value"),
            payload.get("content") or "",
            json.dumps(logprobs, separators=(",", ":")) if logprobs else None,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            time.time(),
        )
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO answers VALUES (?,?,?,?,?,?,?,?)", row)
            self._db.commit()

    def get_vectors(self, keys: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._lock:
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                chunk = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk
                )
                found.update(rows)
        return found

    def put_vectors(self, model: str, items: Iterable[tuple[str, bytes]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR IGNORE INTO embeddings (key, model, vector) VALUES (?,?,?)",
                [(key, model, blob) for key, blob in items],
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
