"""Streaming a Parquet file through the judge in chunks (`ragframe.engine.stream.score_file`).

The promises: the file it writes equals the in-memory `ragframe.run` result on the same
input (row order kept across chunks), with the run's metadata and summary; at most
`chunks_in_flight` chunks are scored at once; a failure midway leaves nothing at the output
path (or the old output untouched); and a rerun after a failure re-reads the finished chunks'
answers from the cache instead of asking again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import user_text
from polars.testing import assert_frame_equal

import ragframe
from ragframe import ConfigError, InputError, JudgeError
from ragframe.engine import stream as stream_module
from ragframe.engine.stream import score_file
from ragframe.metrics import CORE
from ragframe.testing.server import Reply, auto_answer

ROWS = 50
CHUNK = 7  # 50 rows: 7 full chunks and one of 1 row


def tag(i: int) -> str:
    return f"[r{i:02d}]"


def log(n: int = ROWS) -> pl.DataFrame:
    """A log whose every text carries its row's tag, with a few empty inputs and metadata."""
    return pl.DataFrame(
        {
            "run_id": [f"exp-{i % 3}" for i in range(n)],
            "question": [f"What does {tag(i)} say about solar power?" for i in range(n)],
            "answer": [
                None if i == 9 else f"{tag(i)} Solar panels convert light. They last {i} years."
                for i in range(n)
            ],
            "contexts": [
                [] if i == 20 else [f"{tag(i)} Panels convert light.", f"{tag(i)} They age."]
                for i in range(n)
            ],
            "ground_truth": [f"{tag(i)} Panels turn light into power." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "log.parquet"
    log().write_parquet(path)
    return path


def asked_rows(bodies: list[dict[str, Any]]) -> set[int]:
    """Which rows' texts the given chat requests carried."""
    return {i for i in range(ROWS) for body in bodies if tag(i) in user_text(body)}


def test_output_equals_in_memory_run_across_chunks(server, judge, log_file, tmp_path):
    out = tmp_path / "scored.parquet"
    result = score_file(log_file, out, CORE, judge=judge, chunk_rows=CHUNK)
    streamed_chat = server.count()
    expected = ragframe.run(log(), CORE, judge=judge)

    assert_frame_equal(pl.read_parquet(out), expected.frame)
    assert result.chunks == 8 and result.rows == ROWS
    summary, reference = result.summary(), expected.summary()
    for name in CORE:
        got, want = summary["metrics"][name], reference["metrics"][name]
        assert (got["scored"], got["failed"]) == (want["scored"], want["failed"])
        assert got["failed"] >= 1  # the null answer / empty contexts rows
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
    # The same chat requests; only embeddings are batched per chunk instead of per file.
    assert server.count() == 2 * streamed_chat
    assert summary["requests"] - summary["embedding_requests"] == streamed_chat


def test_metadata_records_the_final_summary(server, judge, log_file, tmp_path):
    out = tmp_path / "scored.parquet"
    result = score_file(log_file, out, CORE, judge=judge, chunk_rows=CHUNK)
    meta = ragframe.read_metadata(out)
    assert meta["summary"] is not None, "read_metadata sees only the start-of-run metadata"
    assert meta["summary"]["rows"] == ROWS
    assert meta["summary"]["chunks"] == 8 and meta["summary"]["chunk_rows"] == CHUNK
    assert meta["summary"]["requests"] == result.stats.requests
    assert result.stats.requests == server.count() + server.count("/embeddings")
    assert meta["judge"]["model"] == "fake-judge"
    assert set(meta["metrics"]) == set(CORE)
    assert meta["metrics"]["faithfulness"]["prompt_hashes"]
    assert "sk-test" not in str(meta)


def test_at_most_two_chunks_in_flight_and_written_in_order(
    server, judge, log_file, tmp_path, monkeypatch
):
    """Each chunk is held until the next one has started (so two overlap whenever the
    streamer allows it, however fast the server answers), and chunk k must have ended
    before chunk k + 2 starts: exactly two in flight, never three."""
    events: list[tuple[str, int]] = []
    started: dict[int, asyncio.Event] = {}
    last = (ROWS - 1) // CHUNK
    score_frame = stream_module.score_frame

    def chunk_of(frame: pl.DataFrame) -> int:
        return int(frame["question"][0].split("[r", 1)[1][:2]) // CHUNK

    async def holding(frame: pl.DataFrame, *args: Any) -> pl.DataFrame:
        if frame.height == 0:  # the schema template, scored before any chunk
            return await score_frame(frame, *args)
        k = chunk_of(frame)
        events.append(("start", k))
        started.setdefault(k, asyncio.Event()).set()
        try:
            if k < last:
                # A bound for a streamer that never overlaps chunks, not a timing margin.
                await asyncio.wait_for(started.setdefault(k + 1, asyncio.Event()).wait(), 60)
            return await score_frame(frame, *args)
        finally:
            events.append(("end", k))

    monkeypatch.setattr(stream_module, "score_frame", holding)
    out = tmp_path / "scored.parquet"
    score_file(log_file, out, ["context_recall"], judge=judge, chunk_rows=CHUNK)
    live, peak = 0, 0
    for kind, _ in events:
        live += 1 if kind == "start" else -1
        peak = max(peak, live)
    assert peak == 2, events  # the next chunk is scored while the previous one finishes
    for k in range(last - 1):
        assert events.index(("end", k)) < events.index(("start", k + 2)), events
    assert [k for kind, k in events if kind == "start"] == list(range(last + 1))
    assert pl.read_parquet(out)["question"].to_list() == log()["question"].to_list()


def test_failure_in_chunk_3_leaves_nothing_at_the_output(
    server, judge, log_file, tmp_path, monkeypatch
):
    score_frame = stream_module.score_frame

    async def failing(frame: pl.DataFrame, *args: Any) -> pl.DataFrame:
        if frame.height and tag(2 * CHUNK) in frame["question"][0]:
            raise RuntimeError("chunk 3 broke")
        return await score_frame(frame, *args)

    monkeypatch.setattr(stream_module, "score_frame", failing)
    out = tmp_path / "scored.parquet"
    with pytest.raises(RuntimeError, match="chunk 3 broke"):
        score_file(log_file, out, ["context_recall"], judge=judge, chunk_rows=CHUNK)
    assert server.count() >= 2 * CHUNK  # chunks 1 and 2 were scored before the failure
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]  # no temp file left

    # Replacing an existing output: the old file stays as it was.
    out.write_bytes(b"old output")
    with pytest.raises(RuntimeError, match="chunk 3 broke"):
        score_file(log_file, out, ["context_recall"], judge=judge, chunk_rows=CHUNK, overwrite=True)
    assert out.read_bytes() == b"old output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet", "scored.parquet"]


def test_rerun_after_failure_resumes_from_cache(server, make_judge, log_file, tmp_path):
    broken = tag(2 * CHUNK + 2)  # a row of chunk 3

    def handler(body: dict[str, Any]) -> Any:
        if broken in user_text(body):
            return Reply(status=500)
        return auto_answer(body)

    server.handler = handler
    out = tmp_path / "scored.parquet"
    first = make_judge(cache=True, fail_fast=True, max_attempts=1)
    with pytest.raises(JudgeError):
        score_file(log_file, out, CORE, judge=first, chunk_rows=CHUNK)
    assert not out.exists()

    server.handler = None
    server.reset()
    resumed = score_file(log_file, out, CORE, judge=make_judge(cache=True), chunk_rows=CHUNK)
    again = asked_rows(server.chat_requests)
    # Chunks 1 and 2 were written before chunk 3 failed: their answers come from the cache.
    assert again and again.isdisjoint(range(2 * CHUNK))
    assert resumed.stats.cache_hits > 0
    expected = ragframe.run(log(), CORE, judge=make_judge())
    assert_frame_equal(pl.read_parquet(out), expected.frame)


def test_identical_rows_in_different_chunks_are_sent_once(server, make_judge, tmp_path):
    """Rows 0-9 twice: each repeat lands in a later chunk than its first, and finds the
    answer in the cache (or in flight) instead of asking again."""
    source, out = tmp_path / "repeated.parquet", tmp_path / "scored.parquet"
    pl.concat([log(10), log(10)]).write_parquet(source)
    judge = make_judge(cache=True)
    score_file(source, out, ["context_recall"], judge=judge, chunk_rows=CHUNK)
    assert server.count() == 10
    scores = pl.read_parquet(out).get_column("context_recall").to_list()
    assert scores[:10] == scores[10:] and None not in scores


def test_bad_input_is_refused_before_any_request(server, judge, log_file, tmp_path):
    out = tmp_path / "scored.parquet"
    with pytest.raises(InputError, match="ground_truth"):
        score_file(log_file, out, CORE, judge=judge, columns={"ground_truth": "nope"})
    shadowed = tmp_path / "shadowed.parquet"
    log().with_columns(context_recall=pl.lit(1.0)).write_parquet(shadowed)
    with pytest.raises(ConfigError, match="already has a column 'context_recall'"):
        score_file(shadowed, out, CORE, judge=judge)
    with pytest.raises(ConfigError, match="chunk_rows"):
        score_file(log_file, out, CORE, judge=judge, chunk_rows=0)
    with pytest.raises(ConfigError, match="must not be the input"):
        score_file(log_file, log_file, CORE, judge=judge, overwrite=True)
    out.write_bytes(b"keep me")
    with pytest.raises(ConfigError, match="exists"):
        score_file(log_file, out, CORE, judge=judge)
    assert server.count() + server.count("/embeddings") == 0
    assert out.read_bytes() == b"keep me"


def test_empty_file_gives_an_empty_scored_file(server, judge, tmp_path):
    source = tmp_path / "empty.parquet"
    log(3).head(0).write_parquet(source)
    out = tmp_path / "scored.parquet"
    result = score_file(source, out, CORE, judge=judge)
    assert server.count() + server.count("/embeddings") == 0
    scored = pl.read_parquet(out)
    assert scored.height == 0 and result.rows == 0
    assert scored.schema == ragframe.run(log(3), CORE, judge=judge).frame.schema
    assert ragframe.read_metadata(out)["summary"]["rows"] == 0


def test_cli_score_streams_in_chunks(server, log_file, tmp_path, monkeypatch, capsys):
    from ragframe.cli import main

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_CACHE"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "scored.parquet"
    argv = ["score", str(log_file), "-o", str(out), "--metrics", "context_recall"]
    argv += ["--model", "fake-judge", "--base-url", server.base_url, "--no-cache"]
    assert main([*argv, "--no-progress", "--chunk-rows", str(CHUNK)]) == 0
    assert f"rows {ROWS}" in capsys.readouterr().out
    summary = ragframe.read_metadata(out)["summary"]
    assert (summary["chunk_rows"], summary["chunks"]) == (CHUNK, 8)
    assert pl.read_parquet(out)["question"].to_list() == log()["question"].to_list()
