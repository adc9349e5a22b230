"""Cached prompt tokens in the totals that add runs up (issue 29): a Batch API job sums its
result lines' cached tokens in its manifest (across restarts) and bills them at the cached
rate; a jury of runs scored apart sums them with the other counts, and its cost and saving
are the runs' own, their Batch API lines' included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for
from test_batch import drive, frame
from test_jury import rows, scripted

import ragframe
from ragframe.decide.jury_of_runs import _summary, combine_runs
from ragframe.engine.batch import BatchJob
from ragframe.testing.server import FakeServer, Reply, auto_answer

#: Prompt and cached tokens every answer reports: an easy sum.
PROMPT, CACHED = 2000, 1280


def cached_answers(body: dict[str, Any]) -> Reply:
    return Reply(content=scripted(body), prompt_tokens=PROMPT, cached_tokens=CACHED)


def runs(tmp_path: Path, prices: list[Any]) -> list[Path]:
    """The same rows scored by one judge per price, each run written as `score` writes it."""
    paths = []
    with FakeServer(handler=cached_answers) as server:
        for i, price in enumerate(prices):
            judge = judge_for(server, tmp_path, f"judge-{i}", price=price)
            result = ragframe.run(rows(3), ["faithfulness"], judge=judge)
            path = tmp_path / f"judge-{i}.parquet"
            result.write_parquet(path)
            paths.append(path)
    return paths


def test_a_jury_of_runs_adds_up_cached_tokens_and_bills_them_at_their_rate(tmp_path):
    paths = runs(tmp_path, [(1.0, 2.0, 0.5), (4.0, 2.0, 1.0)])
    summary = combine_runs(paths).summary
    sent = [ragframe.read_metadata(p)["summary"] for p in paths]
    assert all(s["cached_prompt_tokens"] == s["requests"] * CACHED > 0 for s in sent)
    assert summary["cached_prompt_tokens"] == sum(s["cached_prompt_tokens"] for s in sent)
    assert summary["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in sent), abs=1e-6)
    saving = sum(s["cached_prompt_tokens"] * rate for s, rate in zip(sent, (0.5, 3.0), strict=True))
    assert summary["cached_saving_usd"] == pytest.approx(saving / 1e6, abs=1e-6)


def test_a_run_without_a_cached_rate_leaves_the_jurys_saving_unknown(tmp_path):
    summary = combine_runs(runs(tmp_path, [(1.0, 2.0, 0.5), (1.0, 2.0)])).summary
    assert summary["cached_prompt_tokens"] > 0 and summary["cost_usd"] is not None
    assert summary["cached_saving_usd"] is None  # the second run's saving is not counted


class _Run:
    def __init__(self, summary: dict[str, Any]) -> None:
        self.meta = {"summary": summary}


LIVE = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}


def test_batch_lines_count_their_cached_tokens_and_their_own_cost():
    batch = {
        "requests_submitted": 4,
        "prompt_tokens": 8000,
        "completion_tokens": 100,
        "cached_prompt_tokens": 5120,
        "cost_usd": 0.25,
        "cached_saving_usd": 0.125,
    }
    live = {**LIVE, "cached_saving_usd": 0.0}
    one = {**live, "cached_prompt_tokens": 256, "prompt_tokens": 1000, "cost_usd": 0.5}
    summary = _summary(
        pl.DataFrame({"x": [1]}), [], [_Run({**live, "batch": batch}), _Run(one)], {}
    )
    assert summary["requests"] == 4
    assert summary["prompt_tokens"] == 9000 and summary["cached_prompt_tokens"] == 5376
    assert summary["cost_usd"] == pytest.approx(0.75)  # the batch's lines were paid for too
    assert summary["cached_saving_usd"] == pytest.approx(0.125)
    # A batch section that records tokens but no cost (no price, or an older ragframe):
    # the jury's cost is unknown, not the live part's alone.
    older = {k: v for k, v in batch.items() if k not in ("cost_usd", "cached_saving_usd")}
    summary = _summary(pl.DataFrame({"x": [1]}), [], [_Run({**live, "batch": older})], {})
    assert summary["cost_usd"] is None and summary["prompt_tokens"] == 8000


def test_a_batch_job_counts_its_lines_cached_tokens_and_bills_them_at_half_the_cached_rate(
    tmp_path,
):
    def handler(body: dict[str, Any]) -> Reply:
        return Reply(auto_answer(body), prompt_tokens=1000, completion_tokens=10, cached_tokens=400)

    manifest = tmp_path / "job.json"
    with FakeServer(handler=handler) as server:

        def job() -> BatchJob:  # a new one per call: the counts live in the manifest
            judge = judge_for(server, tmp_path, cache=True, price=(1.0, 2.0, 0.5))
            return BatchJob(manifest, judge)

        job().submit(frame(4), ["faithfulness", "context_recall"])
        done = drive(job())
    batch = done.result.summary()["batch"]
    lines = batch["requests_submitted"]
    assert lines == 12 and batch["stages"] == 2  # one restart at least, between the stages
    assert (batch["prompt_tokens"], batch["cached_prompt_tokens"]) == (1000 * lines, 400 * lines)
    # 600 prompt tokens at $1, 400 cached at $0.5, 10 completion at $2 a line; half of it.
    assert batch["cost_usd"] == pytest.approx(lines * (600 + 200 + 20) / 1e6 / 2)
    assert batch["cached_saving_usd"] == pytest.approx(lines * 400 * 0.5 / 1e6 / 2)
    # A jury of this run and itself: the batch's lines are paid for, twice.
    out = tmp_path / "out.parquet"
    done.result.write_parquet(out)
    summary = combine_runs([out, out]).summary
    assert summary["cached_prompt_tokens"] == 2 * 400 * lines
    assert summary["cost_usd"] == pytest.approx(2 * batch["cost_usd"])
