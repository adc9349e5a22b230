"""`ragframe.engine.answer`: the user's RAG function over a test set's questions, with a
per-row error column, bounded concurrency, deduplication and a cache that survives a cancel."""

from __future__ import annotations

import asyncio
import collections
import doctest
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import ragframe
from ragframe.engine import answer as answer_module
from ragframe.engine.answer import NO_QUESTION, aanswer, answer
from ragframe.errors import ConfigError, InputError


def questions(n: int) -> list[str]:
    return [f"question {i}?" for i in range(n)]


def rag(question: str) -> tuple[str, list[str]]:
    return f"A: {question}", [f"ctx 1 of {question}", f"ctx 2 of {question}"]


async def arag(question: str) -> tuple[str, list[str]]:
    await asyncio.sleep(0)
    return rag(question)


class Counting:
    """A sync RAG function that records every question it is asked."""

    def __init__(self, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.asked: list[str] = []
        self.fail = set(fail)
        self.lock = threading.Lock()

    def __call__(self, question: str) -> tuple[str, list[str]]:
        with self.lock:
            self.asked.append(question)
        if question in self.fail:
            raise RuntimeError(f"retriever down for {question}")
        return rag(question)


# ---------------------------------------------------------------------------- the frame


def test_sync_and_async_functions_give_the_same_frame_rows_in_order_columns_untouched() -> None:
    n = 3000  # enough rows that a join not keeping the left order would show it
    testset = pl.DataFrame(
        {
            "id": list(range(n)),
            "question": [f"q{(i * 7919) % 1000}" for i in range(n)],  # repeats, unsorted
            "meta": [{"source": f"doc{i % 5}", "page": i} for i in range(n)],
        }
    )
    from_sync = answer(testset, rag, cache=False)
    from_async = answer(testset, arag, cache=False)
    assert from_sync.equals(from_async)
    assert from_sync.columns == ["id", "question", "meta", "answer", "contexts", "answer_error"]
    assert from_sync.select(testset.columns).equals(testset)
    assert from_sync.schema["answer"] == pl.String
    assert from_sync.schema["contexts"] == pl.List(pl.String)
    assert from_sync.schema["answer_error"] == pl.String
    expected = [f"A: {q}" for q in testset["question"]]
    assert from_sync["answer"].to_list() == expected
    assert from_sync["contexts"][5].to_list() == rag(testset["question"][5])[1]
    assert from_sync["answer_error"].null_count() == n


def test_a_lazy_frame_and_another_question_column() -> None:
    lazy = pl.LazyFrame({"prompt": ["b", "a"], "x": [1, 2]})
    out = answer(lazy, rag, question_column="prompt", cache=False)
    assert out["answer"].to_list() == ["A: b", "A: a"]
    assert out.columns == ["prompt", "x", "answer", "contexts", "answer_error"]


@dataclass
class Reply:
    answer: str
    contexts: Any
    latency: float = 0.0


def test_tuple_dict_and_object_returns() -> None:
    replies: dict[str, Any] = {
        "tuple": ("t", ["c1", "c2"]),
        "dict": {"answer": "d", "contexts": ["c"], "sources": [1, 2]},  # extra key ignored
        "object": Reply("o", ("c1", "c2")),
        "one string": ("s", "the only context"),
        "no contexts": {"answer": "n", "contexts": None},
    }
    out = answer(pl.DataFrame({"question": list(replies)}), replies.__getitem__, cache=False)
    assert out["answer"].to_list() == ["t", "d", "o", "s", "n"]
    assert out["contexts"].to_list() == [
        ["c1", "c2"],
        ["c"],
        ["c1", "c2"],
        ["the only context"],
        [],
    ]
    assert out["answer_error"].to_list() == [None] * 5


def test_errors_are_per_row_one_line_and_the_run_goes_on() -> None:
    returns: dict[str, Any] = {
        "int": 42,
        "no key": {"answer": "x"},
        "triple": ("a", [], "extra"),
        "bad contexts": ("a", ["ok", 3]),
        "no answer": (None, ["c"]),
        "fine": ("yes", ["c"]),
    }

    def fn(question: str) -> Any:
        calls.append(question)
        if question == "raises":
            raise ValueError("index is\nmissing")
        return returns[question]

    calls: list[str] = []
    testset = pl.DataFrame(
        {"question": ["raises", "int", "no key", "triple", "bad contexts", "no answer"]}
        | {"n": list(range(6))}
    ).vstack(pl.DataFrame({"question": ["  ", None, "fine"], "n": [6, 7, 8]}))
    out = answer(testset, fn, cache=False)
    errors = out["answer_error"].to_list()
    assert errors[0] == "ValueError: index is missing"
    assert errors[1].startswith("TypeError: fn returned int; expected (answer, contexts)")
    assert errors[2].startswith("KeyError: fn returned a dict without ['contexts']")
    assert errors[3].startswith("TypeError: fn returned a tuple of 3 items")
    assert errors[4] == "TypeError: contexts must be a list of strings, not a list holding int"
    assert errors[5] == "TypeError: the answer is NoneType, not a string"
    assert errors[6] == errors[7] == NO_QUESTION
    assert errors[8] is None
    assert all("\n" not in e for e in errors if e)
    assert out["answer"].to_list() == [None] * 8 + ["yes"]
    assert out["contexts"].to_list()[:8] == [None] * 8
    assert sorted(calls) == sorted(["raises", *returns])  # never a blank or null question


def test_an_async_function_errors_the_same_way() -> None:
    async def fn(question: str) -> Any:
        if question == "boom":
            raise ConnectionError("vector store unreachable")
        return "just a string"

    out = asyncio.run(aanswer(pl.DataFrame({"question": ["boom", "str"]}), fn, cache=False))
    assert out["answer_error"].to_list() == [
        "ConnectionError: vector store unreachable",
        "TypeError: fn returned str; expected (answer, contexts), a dict with 'answer' and "
        "'contexts', or an object with those attributes",
    ]


def test_identical_questions_are_asked_once() -> None:
    fn = Counting()
    testset = pl.DataFrame({"question": ["a", "b", "a", "c", "b", "a"]})
    out = answer(testset, fn, cache=False, concurrency=4)
    assert collections.Counter(fn.asked) == {"a": 1, "b": 1, "c": 1}
    assert out["answer"].to_list() == ["A: a", "A: b", "A: a", "A: c", "A: b", "A: a"]


# ---------------------------------------------------------------------------- concurrency


def test_a_sync_function_runs_at_most_concurrency_calls_at_once() -> None:
    k = 3
    gate = threading.Barrier(k, timeout=10)  # every call waits for k in flight: k is reached
    lock = threading.Lock()
    in_flight, peak = [0], [0]

    def fn(question: str) -> tuple[str, list[str]]:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            gate.wait()
        finally:
            with lock:
                in_flight[0] -= 1
        return rag(question)

    out = answer(pl.DataFrame({"question": questions(4 * k)}), fn, concurrency=k, cache=False)
    assert out["answer_error"].null_count() == 4 * k
    assert peak[0] == k


def test_an_async_function_runs_at_most_concurrency_calls_at_once() -> None:
    k = 4
    full = asyncio.Event()  # bound to asyncio.run's loop on first use
    in_flight, peak = [0], [0]

    async def fn(question: str) -> tuple[str, list[str]]:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        if in_flight[0] == k:
            full.set()
        await full.wait()  # the first calls wait until k are in flight
        await asyncio.sleep(0)
        in_flight[0] -= 1
        return rag(question)

    testset = pl.DataFrame({"question": questions(5 * k)})
    out = asyncio.run(aanswer(testset, fn, concurrency=k, cache=False))
    assert out["answer_error"].null_count() == 5 * k
    assert peak[0] == k


# ---------------------------------------------------------------------------- cache


def test_a_rerun_asks_only_the_questions_that_failed(tmp_path: Path) -> None:
    store = tmp_path / "answers.sqlite3"
    testset = pl.DataFrame({"question": questions(10)})
    failing = {"question 2?", "question 7?"}
    first = Counting(fail=failing)
    out = answer(testset, first, cache=store)
    assert sorted(out.filter(pl.col("answer_error").is_not_null())["question"]) == sorted(failing)
    assert len(first.asked) == 10

    again = Counting()  # the same qualified name: the same function to the cache
    out = answer(testset, again, cache=store)
    assert sorted(again.asked) == sorted(failing)
    assert out["answer_error"].null_count() == 10
    assert out["answer"].to_list() == [f"A: {q}" for q in questions(10)]
    assert sqlite3.connect(store).execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    third = Counting()
    answer(testset, third, cache=store)
    assert third.asked == []


def test_a_new_version_or_another_function_asks_again(tmp_path: Path) -> None:
    store = tmp_path / "answers.sqlite3"
    testset = pl.DataFrame({"question": questions(3)})
    v1 = Counting()
    answer(testset, v1, cache=store, version="v1")
    same = Counting()
    answer(testset, same, cache=store, version="v1")
    assert same.asked == []
    v2 = Counting()
    answer(testset, v2, cache=store, version="v2")
    assert sorted(v2.asked) == questions(3)
    unversioned = Counting()
    answer(testset, unversioned, cache=store)
    assert sorted(unversioned.asked) == questions(3)

    calls: list[str] = []

    def other(question: str) -> tuple[str, list[str]]:  # another name: its own answers
        calls.append(question)
        return "other", []

    out = answer(testset, other, cache=store)
    assert sorted(calls) == questions(3)
    assert out["answer"].to_list() == ["other"] * 3


def test_the_default_cache_file_sits_beside_the_judges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "here" / "cache.sqlite3"))
    answer(pl.DataFrame({"question": ["q"]}), rag)
    assert (tmp_path / "here" / "rag_answers.sqlite3").exists()
    assert not (tmp_path / "here" / "cache.sqlite3").exists()


def test_a_cancelled_run_keeps_every_answer_it_had(tmp_path: Path) -> None:
    asyncio.run(cancel_then_rerun(tmp_path / "answers.sqlite3"))


async def cancel_then_rerun(store: Path) -> None:
    testset = pl.DataFrame({"question": questions(8)})
    quick = set(questions(4))  # asked first; the next ones block until cancelled
    blocked = asyncio.Event()
    waiting = [0]
    never = asyncio.Event()

    async def pipeline(question: str) -> tuple[str, list[str]]:
        if question not in quick:
            waiting[0] += 1
            if waiting[0] == 2:  # both workers are stuck: every quick answer was received
                blocked.set()
            await never.wait()
        return rag(question)

    task = asyncio.create_task(aanswer(testset, pipeline, cache=store, concurrency=2))
    await asyncio.wait_for(blocked.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    asked: list[str] = []

    async def pipeline(
        question: str,
    ) -> tuple[str, list[str]]:  # same qualified name, same cache entries
        asked.append(question)
        return rag(question)

    out = await aanswer(testset, pipeline, cache=store, concurrency=2)
    assert sorted(asked) == questions(8)[4:]
    assert out["answer_error"].null_count() == 8
    assert out["answer"].to_list() == [f"A: {q}" for q in questions(8)]


# ---------------------------------------------------------------------------- timeout


def test_a_timeout_cancels_a_slow_async_call_and_reports_it() -> None:
    cancelled = threading.Event()

    async def fn(question: str) -> tuple[str, list[str]]:
        if question == "slow":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return rag(question)

    testset = pl.DataFrame({"question": ["fast", "slow", "fast too"]})
    out = asyncio.run(aanswer(testset, fn, timeout=0.05, cache=False))
    assert out["answer_error"].to_list() == [None, "TimeoutError: no answer within 0.05 s", None]
    assert out["answer"].to_list() == ["A: fast", None, "A: fast too"]
    assert cancelled.is_set()


def test_a_timeout_reports_a_slow_sync_call_and_leaves_its_thread(tmp_path: Path) -> None:
    release = threading.Event()
    finished = threading.Event()

    def fn(question: str) -> tuple[str, list[str]]:
        if question == "slow":
            release.wait(10)
            finished.set()
        return rag(question)

    store = tmp_path / "answers.sqlite3"
    testset = pl.DataFrame({"question": ["slow", "fast"]})
    out = answer(testset, fn, timeout=0.05, cache=store)
    assert out["answer_error"].to_list() == ["TimeoutError: no answer within 0.05 s", None]
    release.set()
    assert finished.wait(10)  # the thread ran to its end; its late answer was not kept
    asked: list[str] = []

    def fn(question: str) -> tuple[str, list[str]]:  # same qualified name, same cache entries
        asked.append(question)
        return rag(question)

    answer(testset, fn, cache=store)
    assert asked == ["slow"]


def test_a_timed_out_sync_call_keeps_its_slot_until_its_thread_ends() -> None:
    k = 2
    lock = threading.Lock()
    in_flight, peak = [0], [0]
    overlap = threading.Event()  # a quick call ran beside a slow one: the bound was broken

    def fn(question: str) -> tuple[str, list[str]]:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            if question.startswith("slow"):
                overlap.wait(0.3)  # outlives its timeout; ends early only if the bound broke
            elif in_flight[0] > k:
                overlap.set()
        finally:
            with lock:
                in_flight[0] -= 1
        return rag(question)

    testset = pl.DataFrame({"question": ["slow 1", "slow 2", "quick 1", "quick 2"]})
    out = answer(testset, fn, concurrency=k, timeout=0.05, cache=False)
    assert peak[0] == k
    # a call waiting for a slot is not timed out: its clock starts when it does
    assert out["answer_error"].to_list() == ["TimeoutError: no answer within 0.05 s"] * 2 + [
        None,
        None,
    ]


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("taken", [["answer"], ["contexts"], ["answer", "contexts"]])
def test_existing_answer_columns_are_refused_not_overwritten(taken: list[str]) -> None:
    testset = pl.DataFrame({"question": ["q"]} | {name: ["old"] for name in taken})
    with pytest.raises(ConfigError) as err:
        answer(testset, rag, cache=False)
    message = str(err.value)
    assert all(repr(name) in message for name in taken)
    assert "drop" in message and "rename" in message
    assert "\n" not in message


def test_bad_options_are_refused_before_any_call(tmp_path: Path) -> None:
    fn = Counting()
    testset = pl.DataFrame({"question": ["q"], "id": [1]})
    cases: list[tuple[dict[str, Any], str]] = [
        ({"concurrency": 0}, "concurrency must be"),
        ({"timeout": 0}, "timeout must be"),
        (
            {"question_column": "query"},
            "no column 'query' in the test set (its columns: ['question', 'id'])",
        ),
    ]
    for options, words in cases:
        with pytest.raises(ConfigError, match=None) as err:
            answer(testset, fn, cache=tmp_path / "c.sqlite3", **options)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="fn must be callable"):
        answer(testset, "not a function", cache=False)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lambda"):
        answer(testset, lambda q: (q, []), cache=tmp_path / "c.sqlite3")
    with pytest.raises(InputError, match="holds Int64"):
        answer(testset, fn, question_column="id", cache=False)
    assert fn.asked == []
    assert answer(testset, lambda q: (q, []), cache=tmp_path / "c.sqlite3", version="v1")[
        "answer"
    ].to_list() == ["q"]


def test_the_module_example_runs() -> None:
    assert ragframe.answer is answer  # the example calls it from the package root
    assert doctest.testmod(answer_module).failed == 0
