"""`JudgeSession.ask_frame`: a column of prompts in, a frame of answers out, aligned with the
prompts and equal, value for value, to `ask` (fresh answers, cached ones, duplicates, failures,
logprobs), so a metric can decode a whole column of answers without an object per answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import polars as pl
from conftest import judge_for

from ragframe.judge.client import LOGPROBS_DTYPE, Judge, _in_waves
from ragframe.judge.task import Task
from ragframe.testing.server import FakeServer, Reply, auto_answer

SCHEMA = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"verdict": {"type": "integer", "enum": [0, 1]}},
                "required": ["verdict"],
            },
        }
    },
    "required": ["verdicts"],
}
TASK = Task(name="frame_verdicts", system="Judge each item.", schema=SCHEMA, counted="verdicts")
PROMPTS = ["items: a", "items: a b", "items: a", "items: FAIL", "items: a b c"]
COUNTS = [1, 2, 1, 1, 3]


def cut_off_on_fail(body: dict[str, Any]) -> Any:
    """A valid answer, except for the prompt marked FAIL: cut off at max_tokens."""
    if "FAIL" in body["messages"][-1]["content"]:
        return Reply(content='{"verdicts": [{"verd', finish_reason="length")
    return auto_answer(body)


async def both(judge: Judge, task: Task, prompts: Any, counts: Any) -> tuple[list[Any], Any]:
    """`ask` then `ask_frame` in one session (the second is answered by the store)."""
    async with judge.session() as session:
        answers = await session.ask(task, list(PROMPTS), list(COUNTS))
        frame = await session.ask_frame(task, prompts, counts)
    return answers, frame


def as_columns(answers: list[Any], logprobs: bool = False) -> dict[str, list[Any]]:
    columns = {
        "json": [a.json for a in answers],
        "error": [a.error for a in answers],
        "prompt_tokens": [a.prompt_tokens for a in answers],
        "completion_tokens": [a.completion_tokens for a in answers],
    }
    if logprobs:
        columns["logprobs"] = [
            None if a.logprobs is None else [dict(lp) for lp in a.logprobs] for a in answers
        ]
    return columns


def test_ask_frame_matches_ask_fresh_and_cached(tmp_path: Path) -> None:
    with FakeServer(handler=cut_off_on_fail) as server:
        judge = judge_for(server, tmp_path, cache=True, repair_attempts=0)
        answers, frame = asyncio.run(both(judge, TASK, pl.Series(PROMPTS), pl.Series(COUNTS)))
        assert frame.schema == pl.Schema(
            {
                "json": pl.String,
                "error": pl.String,
                "prompt_tokens": pl.Int64,
                "completion_tokens": pl.Int64,
            }
        )
        assert frame.to_dict(as_series=False) == as_columns(answers)
        assert frame["json"].null_count() == 1 and frame["error"][3] is not None
        # A new session: every answer (and the failure, remembered) comes from the cache.
        sent = server.stats()["requests"]["/v1/chat/completions"]
        answers, frame = asyncio.run(both(judge, TASK, PROMPTS, COUNTS))
        assert server.stats()["requests"]["/v1/chat/completions"] == sent
        assert frame.to_dict(as_series=False) == as_columns(answers)
        decoded = frame["json"].str.json_decode(TASK.dtype)
        assert decoded.struct.field("verdicts").list.len().to_list() == [1, 2, 1, None, 3]


def test_ask_frame_counts_as_tuples_and_logprobs(tmp_path: Path) -> None:
    task = Task(
        name="frame_two",
        system="Judge.",
        schema={
            "type": "object",
            "properties": {
                "a": {"type": "array", "items": {"type": "integer"}},
                "b": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["a", "b"],
        },
        counted=("a", "b"),
        top_logprobs=2,
    )
    counts = pl.DataFrame({"a": [1, 2, 1, 1, 3], "b": [2, 1, 2, 1, 1]}).to_struct("counts")
    with FakeServer() as server:
        judge = judge_for(server, tmp_path)
        frame = asyncio.run(both_tuples(judge, task, counts))
    answers, got = frame
    assert got["logprobs"].dtype == LOGPROBS_DTYPE
    assert got.drop("logprobs").to_dict(as_series=False) == as_columns(answers)
    expected = pl.Series([a.logprobs for a in answers], dtype=LOGPROBS_DTYPE)
    assert got["logprobs"].equals(expected)
    decoded = got["json"].str.json_decode(task.dtype)
    assert decoded.struct.field("b").list.len().to_list() == [2, 1, 2, 1, 1]


async def both_tuples(judge: Judge, task: Task, counts: pl.Series) -> tuple[list[Any], Any]:
    tuples = list(zip(counts.struct.field("a"), counts.struct.field("b"), strict=True))
    async with judge.session() as session:
        answers = await session.ask(task, PROMPTS, tuples)
        frame = await session.ask_frame(task, pl.Series(PROMPTS), counts)
    return answers, frame


def test_ask_frame_sends_each_distinct_prompt_of_a_series_once(tmp_path: Path) -> None:
    """Cold, from a Series: each request carries its own prompt and its count's schema."""
    seen: list[tuple[str, int]] = []

    def record(body: dict[str, Any]) -> Any:
        schema = body["response_format"]["json_schema"]["schema"]
        seen.append((body["messages"][-1]["content"], schema["properties"]["verdicts"]["maxItems"]))
        return auto_answer(body)

    async def main(judge: Judge) -> tuple[pl.DataFrame, list[Any]]:
        async with judge.session() as session:
            frame = await session.ask_frame(TASK, pl.Series(PROMPTS), pl.Series(COUNTS))
            return frame, await session.ask(TASK, PROMPTS, COUNTS)

    with FakeServer(handler=record) as server:
        frame, answers = asyncio.run(main(judge_for(server, tmp_path)))
    assert sorted(seen) == sorted(set(zip(PROMPTS, COUNTS, strict=True)))
    assert frame.to_dict(as_series=False) == as_columns(answers)


def test_a_wave_is_sent_once_every_lower_wave_is_answered(tmp_path: Path) -> None:
    """`waves`: "items: a b" (wave 1) goes out only after every wave-0 answer is in (each
    wave-0 handler has returned when it arrives); "items: a", twice in wave 0, is sent once;
    the frame equals one ask of the column."""
    answered: set[str] = set()
    at_wave_one: list[set[str]] = []

    def record(body: dict[str, Any]) -> Any:
        prompt = body["messages"][-1]["content"]
        if prompt == "items: a b":
            at_wave_one.append(set(answered))
        answered.add(prompt)
        return auto_answer(body)

    prompts, counts = ["items: a", "items: a b", "items: a", "items: a b c"], [1, 2, 1, 3]

    async def main(judge: Judge) -> tuple[pl.DataFrame, list[Any]]:
        async with judge.session() as session:
            frame = await session.ask_frame(TASK, prompts, counts, waves=[0, 1, 0, 0])
            return frame, await session.ask(TASK, prompts, counts)

    with FakeServer(handler=record) as server:
        frame, answers = asyncio.run(main(judge_for(server, tmp_path)))
        assert server.count() == 3
    assert at_wave_one == [{"items: a", "items: a b c"}]
    assert frame.to_dict(as_series=False) == as_columns(answers)


def test_a_request_goes_in_the_lowest_wave_of_its_prompts() -> None:
    """A key asked in waves 1 and 0 is sent in wave 0 (once); the waves go lowest first; only
    what the store does not hold is sent; no waves is one group."""
    keys = ["a", "b", "a", "c"]
    assert _in_waves(keys, ["a", "b", "c"], [1, 1, 0, 0]) == [["a", "c"], ["b"]]
    assert _in_waves(keys, ["b", "c"], [2, 1, 0, 0]) == [["c"], ["b"]]
    assert _in_waves(keys, ["a", "b", "c"], None) == [["a", "b", "c"]]
    assert _in_waves(keys, [], [0, 1, 0, 1]) == []
