"""A rerun of a chunk scored before reuses each metric's columns (`ragframe.engine.reuse`):
only when the inputs, the metric, the judge and the code are the same, never over a failure.

Every test scores against the fake server with a cache file and compares the rerun with what
the same run gives without reuse (RAGFRAME_NO_REUSE=1: every answer looked up as before), so
a reused column that differs from a rescored one fails here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import task_name, user_text

import ragframe
from ragframe import Judge
from ragframe.metrics import ContextPrecision, Faithfulness
from ragframe.testing.server import FakeServer, Reply, auto_answer

METRICS = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]


def rows(n: int = 6) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What does device {i} measure?" for i in range(n)],
            "answer": [f"Device {i} measures pressure. Built in {1900 + i}." for i in range(n)],
            "contexts": [[f"Device {i} measures pressure.", f"Plant {i % 3}."] for i in range(n)],
            "ground_truth": [f"Device {i} measures air pressure." for i in range(n)],
        }
    )


def chats(server: FakeServer) -> int:
    return server.count("/chat/completions")


@pytest.fixture
def cached_judge(make_judge: Callable[..., Judge]) -> Callable[..., Judge]:
    """A judge on one cache file for the whole test (a fresh Judge object each call)."""
    return lambda **options: make_judge(cache=True, **options)


def test_a_rerun_reuses_every_metric_and_equals_a_rerun_that_looks_each_answer_up(
    server: FakeServer, cached_judge: Callable[..., Judge], monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = rows()
    first = ragframe.run(frame, METRICS, judge=cached_judge())
    sent = chats(server)
    assert sent > 0 and first.stats.reused == 0
    again = ragframe.run(frame, METRICS, judge=cached_judge())
    assert chats(server) == sent
    assert again.stats.reused == frame.height * len(METRICS)
    assert again.stats.cache_hits == 0  # nothing looked up: the columns came whole
    assert again.summary()["reused"] == frame.height * len(METRICS)
    monkeypatch.setenv("RAGFRAME_NO_REUSE", "1")
    looked_up = ragframe.run(frame, METRICS, judge=cached_judge())
    assert looked_up.stats.reused == 0 and looked_up.stats.cache_hits > 0
    assert again.frame.equals(looked_up.frame) and again.frame.equals(first.frame)


def test_one_changed_row_rescores_its_chunk_and_sends_only_that_row(
    server: FakeServer, cached_judge: Callable[..., Judge], monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = rows()
    ragframe.run(frame, METRICS, judge=cached_judge())
    sent = chats(server)
    changed = frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 2)
        .then(pl.lit("Device 2 measures heat."))
        .otherwise(pl.col("answer"))
        .alias("answer")
    )
    again = ragframe.run(changed, METRICS, judge=cached_judge())
    # context_precision and context_recall read no answer: their columns are reused.
    assert again.stats.reused == 2 * frame.height
    assert 0 < chats(server) - sent < sent  # only the changed row's answer stages
    monkeypatch.setenv("RAGFRAME_NO_REUSE", "1")
    assert again.frame.equals(ragframe.run(changed, METRICS, judge=cached_judge()).frame)


@pytest.mark.parametrize(
    "changed",
    [
        {"metric": ContextPrecision(threshold=0.7)},
        {"metric": ContextPrecision(reasons=False)},
        {"judge": {"temperature": 0.5}},
        {"judge": {"max_text_chars": 20}},
    ],
    ids=["threshold", "reasons", "temperature", "text cut"],
)
def test_a_changed_metric_or_judge_setting_is_not_reused(
    changed: dict[str, Any], server: FakeServer, cached_judge: Callable[..., Judge]
) -> None:
    frame = rows()
    ragframe.run(frame, [ContextPrecision()], judge=cached_judge())
    metric = changed.get("metric", ContextPrecision())
    again = ragframe.run(frame, [metric], judge=cached_judge(**changed.get("judge", {})))
    assert again.stats.reused == 0


def test_a_chunk_with_a_failed_answer_keeps_nothing_and_the_rerun_asks_it_again(
    tmp_path: Path,
) -> None:
    """One row's verdict request fails for good (a 400) on the first run: no metric of that
    chunk is kept, so the rerun looks every answer up and sends the failed one again."""
    failing = {"on": True}

    def handle(body: dict[str, Any]) -> Any:
        asks_precision = task_name(body).startswith("context_precision")
        if failing["on"] and asks_precision and "device 3" in user_text(body).lower():
            return Reply(status=400, content={"error": {"message": "refused"}})
        return auto_answer(body)

    with FakeServer(handle) as server:
        judge = lambda: Judge(  # noqa: E731
            "fake-judge", base_url=server.base_url, api_key="sk-test", cache=tmp_path / "c.db",
            progress=False, embedding_model="fake-embedding",
        )  # fmt: skip
        first = ragframe.run(rows(), ["context_precision", "context_recall"], judge=judge())
        errors = first.frame.get_column("context_precision_detail").struct.field("error")
        assert errors.null_count() == rows().height - 1
        sent = chats(server)
        failing["on"] = False
        again = ragframe.run(rows(), ["context_precision", "context_recall"], judge=judge())
        assert again.stats.reused == 0 and again.stats.cache_hits > 0
        assert chats(server) > sent  # the failed request, sent again
        assert again.frame.get_column("context_precision").null_count() == 0
        # Now the chunk scored whole: a third run reuses both metrics.
        third = ragframe.run(rows(), ["context_precision", "context_recall"], judge=judge())
        assert third.stats.reused == 2 * rows().height and third.frame.equals(again.frame)


def test_a_metric_class_without_a_source_file_is_never_reused(
    server: FakeServer, cached_judge: Callable[..., Judge]
) -> None:
    """A class made where no file holds it (a notebook cell, exec) could change between runs
    with nothing to tell: it is scored again each time."""
    namespace: dict[str, Any] = {"Faithfulness": Faithfulness}
    exec("class CellFaithfulness(Faithfulness):\n    pass\n", namespace)
    metric = namespace["CellFaithfulness"]()
    ragframe.run(rows(), [metric], judge=cached_judge())
    again = ragframe.run(rows(), [metric], judge=cached_judge())
    assert again.stats.reused == 0 and again.stats.cache_hits > 0


class TunedPrecision(ContextPrecision):
    """A user's metric: defined in a file (this one), its settings on the instance."""

    def __init__(self, setting: object) -> None:
        super().__init__()
        self.setting = setting


def test_a_metric_of_ones_own_is_reused_only_with_plain_settings(
    server: FakeServer, cached_judge: Callable[..., Judge]
) -> None:
    """Plain settings (here a dict of sets) are written out the same way in every process;
    an object is not, so a metric holding one is scored again each time."""
    plain = TunedPrecision({"weights": {"b", "a"}, "cut": 0.5})
    ragframe.run(rows(), [plain], judge=cached_judge())
    assert ragframe.run(rows(), [plain], judge=cached_judge()).stats.reused == rows().height
    other = TunedPrecision({"weights": {"b", "c"}, "cut": 0.5})  # another setting: not reused
    assert ragframe.run(rows(), [other], judge=cached_judge()).stats.reused == 0
    opaque = TunedPrecision(object())
    ragframe.run(rows(), [opaque], judge=cached_judge())
    assert ragframe.run(rows(), [opaque], judge=cached_judge()).stats.reused == 0


def test_a_damaged_or_foreign_entry_is_scored_again(
    server: FakeServer, cached_judge: Callable[..., Judge], tmp_path: Path
) -> None:
    frame = rows()
    first = ragframe.run(frame, ["context_precision"], judge=cached_judge())
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM scored").fetchone()[0] == 1
        db.execute("UPDATE scored SET frame = ?", (b"not arrow",))
    again = ragframe.run(frame, ["context_precision"], judge=cached_judge())
    assert again.stats.reused == 0 and again.frame.equals(first.frame)
    # Scored again, and kept again: the next run reuses it.
    assert ragframe.run(frame, ["context_precision"], judge=cached_judge()).stats.reused == 6
