"""The answer store read as columns: keys hashed from a prompt Series' Arrow buffer are the keys
of the list path and of the formula older caches were written with, so existing caches still
hit; cached rows read without a decoded payload give the answers `get_many` gave.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import judge_for

from ragframe.judge.cache import AnswerCache, request_key
from ragframe.judge.results import RunStats
from ragframe.judge.store import AnswerStore
from ragframe.judge.task import Task
from ragframe.testing.server import FakeServer

SCHEMA = {
    "type": "object",
    "properties": {"verdicts": {"type": "array", "items": {"type": "integer"}}},
    "required": ["verdicts"],
}
TASK = Task(name="columns_verdicts", system="Judge each item.", schema=SCHEMA, counted="verdicts")
#: Non-ASCII, an empty prompt, a duplicate: the bytes hashed must be the prompt's UTF-8.
PROMPTS = ["plain", "é, 日本, \u2028 and 🙂", "", "plain", "x" * 5000]
COUNTS = [1, 2, 1, 1, 3]


def old_key(judge: object, task: Task, user: str, count: int | None) -> str:
    """The key formula caches were written with before keys were hashed from columns."""
    head = {
        "model": judge.model,  # type: ignore[attr-defined]
        "endpoint": judge.endpoint_host,  # type: ignore[attr-defined]
        "system": task.system,
        "schema": task.schema_for(count),
        "params": {
            "temperature": judge.temperature,  # type: ignore[attr-defined]
            "seed": judge.seed,  # type: ignore[attr-defined]
            "max_tokens": judge.max_tokens_for(task),  # type: ignore[attr-defined]
            "top_logprobs": task.top_logprobs,
        },
    }
    digest = hashlib.sha256(request_key(head).encode()).digest()
    return hashlib.sha256(digest + user.encode()).hexdigest()


@pytest.mark.parametrize(
    "column",
    [
        pytest.param(lambda: pl.Series(PROMPTS), id="series"),
        pytest.param(lambda: pl.Series(["skipped", *PROMPTS])[1:], id="sliced"),
        pytest.param(
            lambda: pl.concat([pl.Series(PROMPTS[:2]), pl.Series(PROMPTS[2:])], rechunk=False),
            id="chunked",
        ),
    ],
)
def test_series_keys_are_the_list_keys_and_the_old_keys(tmp_path: Path, column: object) -> None:
    with FakeServer() as server:
        judge = judge_for(server, tmp_path)
    store = AnswerStore(judge, RunStats())
    series = column()  # type: ignore[operator]
    keys, requests = store.requests(TASK, series, COUNTS)
    listed, _ = AnswerStore(judge, RunStats()).requests(TASK, PROMPTS, COUNTS)
    expected = [old_key(judge, TASK, u, c) for u, c in zip(PROMPTS, COUNTS, strict=True)]
    assert keys == listed == expected
    assert len(requests) == 4 and store.stats.deduplicated == 1
    # A request is built from the prompt that first had its key, with its count's schema.
    built = requests[keys[1]]
    assert built["messages"][1]["content"] == PROMPTS[1]
    assert built["schema"]["properties"]["verdicts"]["maxItems"] == 2


def test_vector_keys_are_the_old_keys(tmp_path: Path) -> None:
    with FakeServer() as server:
        judge = judge_for(server, tmp_path)
    store = AnswerStore(judge, RunStats())
    texts = {t: t.strip() for t in PROMPTS}
    got = store.vector_keys("fake-embedding", texts)
    endpoint = judge.endpoint_host
    assert got == {
        t: request_key({"embedding_model": "fake-embedding", "endpoint": endpoint, "text": s})
        for t, s in texts.items()
    }


def test_a_cache_written_by_the_old_code_is_read_as_columns(tmp_path: Path) -> None:
    """Rows put under the old keys (value stored, raw content only, logprobs) are answered
    from the cache as `get_many` decoded them, without a request."""
    with FakeServer() as server:
        judge = judge_for(server, tmp_path, cache=True)
        cache = judge.cache
        assert isinstance(cache, AnswerCache)
        normalised = {u: json.dumps({"verdicts": [1] * c}, separators=(",", ":")) for u, c in
                      zip(PROMPTS, COUNTS, strict=True)}  # fmt: skip
        for i, (user, count) in enumerate(zip(PROMPTS, COUNTS, strict=True)):
            payload = {
                "content": normalised[user],
                "usage": {"prompt_tokens": 10 + i, "completion_tokens": 3},
            }
            if user != "":  # the empty prompt's answer is stored raw, validated on reading
                payload["value"] = normalised[user]
            cache.put(old_key(judge, TASK, user, count), judge.model, payload)

        async def ask() -> pl.DataFrame:
            async with judge.session() as session:
                frame = await session.ask_frame(TASK, pl.Series(PROMPTS), pl.Series(COUNTS))
                assert session.stats.cache_hits == 4
            return frame

        frame = asyncio.run(ask())
        assert server.stats()["requests"].get("/v1/chat/completions", 0) == 0
    assert frame["json"].to_list() == [normalised[u] for u in PROMPTS]
    assert frame["error"].null_count() == len(PROMPTS)
    # duplicates share the first prompt's stored answer (10 + 0 tokens)
    assert frame["prompt_tokens"].to_list() == [10, 11, 12, 10, 14]
    rows = cache.get_rows([old_key(judge, TASK, "plain", 1)])
    many = cache.get_many([old_key(judge, TASK, "plain", 1)])
    ((value, content, logprobs, prompt_tokens, completion_tokens),) = rows.values()
    (payload,) = many.values()
    assert (value, content, logprobs) == (payload["value"], payload["content"], None)
    assert payload["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
    }
    cache.close()
