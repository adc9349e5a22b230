"""`ragframe.score_arrow`: the seam an engine maps over Arrow batches.

The promises: the table it returns is exactly what a single-process run gives for the same
rows (`ragframe.run(...).frame.to_arrow()`: inputs kept, score and detail columns, same types),
for a RecordBatch or a Table; an `ArrowSession` keeps one judge session across batches (its
answers serve later batches); an empty batch gives the same schema; wrong input is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

import ragframe
from ragframe import ConfigError, InputError, Judge
from ragframe.engine.arrow import ArrowSession, score_arrow
from ragframe.judge.cache import AnswerCache
from ragframe.testing.server import FakeServer

METRICS = ["faithfulness", "context_recall", "context_recall_nonllm"]


def rows(n: int = 12) -> pl.DataFrame:
    """Rows whose every text is distinct, one with an empty answer (a null score)."""
    return pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(n)],
            "question": [f"[{i}] What do panels do?" for i in range(n)],
            "answer": [f"[{i}] Panels convert light. It ages." if i != 3 else "" for i in range(n)],
            "contexts": [[f"[{i}] Panels convert light.", f"[{i}] Heat ages."] for i in range(n)],
            "ground_truth": [f"[{i}] Panels turn light into power." for i in range(n)],
            "reference_contexts": [[f"[{i}] Panels convert light."] for i in range(n)],
        }
    )


def test_score_arrow_equals_a_single_process_run(make_judge: Callable[..., Judge]) -> None:
    frame = rows()
    expected = ragframe.run(
        frame, METRICS, judge=make_judge(), thresholds={"faithfulness": 0.5}
    ).frame.to_arrow()
    for batch in (frame.to_arrow(), frame.to_arrow().to_batches()[0]):
        got = score_arrow(batch, METRICS, make_judge(), thresholds={"faithfulness": 0.5})
        assert isinstance(got, pa.Table)
        assert got.schema == expected.schema
        assert got.equals(expected)
    assert "faithfulness_pass" in got.column_names
    assert got.column_names[:6] == frame.columns  # inputs first, as they came


def test_a_session_serves_every_batch(server: FakeServer, make_judge: Callable[..., Judge]) -> None:
    frame = rows(8)
    with ArrowSession(make_judge(cache=True)) as session:
        first = score_arrow(frame.to_arrow(), METRICS, session=session)
        sent = len(server.chat_requests)
        again = score_arrow(frame.to_arrow(), METRICS, session=session)
        # The second batch was answered from the cache file: its metrics' columns, kept
        # beside the answers for a batch scored before (`engine.reuse`).
        assert len(server.chat_requests) == sent > 0
        assert session.stats.reused == 8 * 2 and session.stats.cache_hits == 0  # judged ones
        empty = score_arrow(frame.head(0).to_arrow(), METRICS, session=session)
    assert again.equals(first)
    assert empty.num_rows == 0 and empty.schema == first.schema
    with pytest.raises(ConfigError, match="closed"):
        score_arrow(frame.to_arrow(), METRICS, session=session)


def test_a_session_uses_the_cache_its_judge_holds_open(
    make_judge: Callable[..., Judge], tmp_path: Path
) -> None:
    """An open cache given to the judge (a worker's own, e.g. one reading other workers'
    files) is the one the session reads and writes, not another opened on its file."""
    opened = AnswerCache(tmp_path / "worker.sqlite3")
    judge = make_judge().replace(cache=opened)
    with ArrowSession(judge) as session:
        assert session.judge.cache is opened
        score_arrow(rows(2).to_arrow(), METRICS, session=session)
    assert len(opened) > 0
    opened.close()


def test_non_llm_metrics_open_no_connection(server: FakeServer, judge: Judge) -> None:
    got = score_arrow(rows(3).to_arrow(), ["context_recall_nonllm"], judge)
    assert got.column("context_recall_nonllm").null_count == 0
    assert server.requests == []


def test_refuses_what_is_not_arrow(judge: Judge) -> None:
    with pytest.raises(InputError, match=r"pyarrow\.RecordBatch or pyarrow\.Table"):
        score_arrow(rows(2), METRICS, judge)  # type: ignore[arg-type]


def test_checks_inputs_before_any_request(server: FakeServer, judge: Judge) -> None:
    with pytest.raises(InputError, match="ground_truth"):
        score_arrow(rows(2).drop("ground_truth").to_arrow(), METRICS, judge)
    assert server.requests == []
