"""Deterministic failures remembered in the cache, so an unchanged rerun does not pay again;
transient ones sent again by a plain rerun.

At temperature 0 an answer cut off at max_tokens would be cut off the same way if sent again:
the cache keeps the failure by the request's key, a rerun gives the row the same error (marked
as remembered) without a request, and `retry_failed` sends it again. Answers that were not
JSON or did not fit their schema after their repairs, timeouts, 5xx and failures at
temperature > 0 are transient: sent again on every rerun. `kept_failures` counts the failures
a plain rerun will not send. The scripted server counts every request.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for, router, user_text

import ragframe
from ragframe.engine.batch import BatchJob
from ragframe.errors import JudgeError
from ragframe.judge.cache import AnswerCache, CacheWriteError
from ragframe.judge.store import REMEMBERED
from ragframe.testing.server import FakeServer, Faults, Reply, auto_answer

METRIC = "context_recall"
TASK = "context_recall_attribute"  # the json_schema name of its one task


def rows(n: int = 2) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What is topic {i}?" for i in range(n)],
            "answer": [f"Topic {i} is blue." for i in range(n)],
            "contexts": [[f"Topic {i} is a blue thing."] for i in range(n)],
            "ground_truth": [f"Topic {i} is blue." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


def errors(result: ragframe.RunResult) -> list[str | None]:
    return result.frame[f"{METRIC}_detail"].struct.field("error").to_list()


def cut_off(body: dict[str, Any]) -> Reply:
    return Reply(content='{"verdicts": [{"index": 1, "attri', finish_reason="length")


def scored(server: FakeServer, tmp_path: Path, n: int = 2, **options: Any) -> ragframe.RunResult:
    """One run of the metric over `rows(n)` against the shared cache file under tmp_path."""
    judge = judge_for(server, tmp_path, cache=True, **options)
    return ragframe.run(rows(n), [METRIC], judge=judge)


def test_a_cut_off_answer_is_not_paid_for_twice(server: FakeServer, tmp_path: Path) -> None:
    server.handler = router(**{TASK: cut_off})
    first = scored(server, tmp_path)
    sent = server.count()
    assert sent == 4  # two rows, each asked and repaired once
    assert all("cut off at max_tokens" in e for e in errors(first))
    assert first.stats.failures["invalid_length"] == 2 and first.stats.remembered_failures == 0
    assert first.stats.kept_failures == 2  # a plain rerun will not send them

    again = scored(server, tmp_path)
    assert server.count() == sent  # nothing sent
    assert errors(again) == [e + REMEMBERED for e in errors(first)]
    assert "--retry-failed" in errors(again)[0] and "retry_failed=True" in errors(again)[0]
    assert again.stats.remembered_failures == again.stats.kept_failures == 2
    assert again.stats.requests == 0 and dict(again.stats.failures) == {}
    assert again.summary()["remembered_failures"] == 2

    # retry_failed sends them again; still cut off, they are remembered anew.
    retried = scored(server, tmp_path, retry_failed=True)
    assert server.count() == sent + 4
    assert errors(retried) == errors(first) and retried.stats.remembered_failures == 0

    # The judge now answers: a retry's answer replaces the failure, for good.
    server.handler = None  # the server's valid answers
    fixed = scored(server, tmp_path, retry_failed=True)
    assert server.count() == sent + 6 and errors(fixed) == [None, None]
    later = scored(server, tmp_path)
    # Scored whole at last, the chunk's columns were kept: the rerun reuses them.
    assert server.count() == sent + 6 and later.stats.reused == 2
    assert later.frame[METRIC].null_count() == 0
    assert later.frame[METRIC].to_list() == fixed.frame[METRIC].to_list()
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM failures").fetchone() == (0,)


def test_a_failure_the_cache_could_not_keep_is_not_counted_as_kept(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kept_failures` says how many failures a plain rerun will not send again: one whose
    write failed (the cache file locked, a full disk) is not among them, and is sent again."""

    async def refused(self: AnswerCache, key: str, model: str, payload: Any) -> None:
        raise CacheWriteError(f"could not write to the answer cache {str(self.path)!r}: full")

    server.handler = router(**{TASK: cut_off})
    with monkeypatch.context() as patched:
        patched.setattr(AnswerCache, "aput_failure", refused)
        with pytest.warns(UserWarning, match="could not write to the answer cache"):
            first = scored(server, tmp_path)
    assert first.stats.failures["invalid_length"] == first.stats.failures["cache_write"] == 2
    assert first.stats.kept_failures == 0 and first.summary()["kept_failures"] == 0
    sent = server.count()
    again = scored(server, tmp_path)
    assert server.count() == 2 * sent and again.stats.remembered_failures == 0


@pytest.mark.parametrize(
    "garbled",
    ["I cannot answer that in JSON.", '{"verdicts": [{"index": 1, "attri', '{"verdicts": 3}'],
    ids=["prose", "cut_json", "wrong_shape"],
)
def test_an_answer_that_never_fits_its_schema_is_sent_again_by_a_rerun(
    server: FakeServer, tmp_path: Path, garbled: str
) -> None:
    """A garbled answer is transient (a server or proxy that garbled it once may not again):
    it is not remembered, and a plain rerun sends it, and scores it when it comes back."""
    server.handler = router(**{TASK: garbled})
    first = scored(server, tmp_path)
    sent = server.count()
    assert sent == 4 and first.stats.repairs == 2
    assert all("unusable answer" in e for e in errors(first))
    assert first.stats.kept_failures == 0 and first.summary()["kept_failures"] == 0
    again = scored(server, tmp_path)
    assert server.count() == 2 * sent and again.stats.remembered_failures == 0
    assert errors(again) == errors(first)
    server.handler = None  # the server answers now: the rerun scores every row
    fixed = scored(server, tmp_path)
    assert server.count() == 2 * sent + 2 and errors(fixed) == [None, None]


def test_a_garbled_failure_an_older_version_remembered_is_sent_again(
    server: FakeServer, tmp_path: Path
) -> None:
    """A cache written when garbled answers were remembered: those failures are not given
    back (sent again, and answered); a cut-off one still is."""
    server.handler = router(**{TASK: cut_off})
    scored(server, tmp_path)
    path = tmp_path / "cache.sqlite3"
    with sqlite3.connect(path) as db:
        (first,) = db.execute("SELECT key FROM failures ORDER BY key LIMIT 1").fetchone()
        db.execute("UPDATE failures SET kind = 'schema' WHERE key = ?", (first,))
    sent = server.count()
    server.handler = None
    again = scored(server, tmp_path)
    assert server.count() == sent + 1  # the 'schema' one sent again, the cut-off one not
    assert again.stats.remembered_failures == again.stats.kept_failures == 1
    assert sorted(e is None for e in errors(again)) == [False, True]


def test_a_rerun_sends_every_failed_request_again_but_the_cut_off_ones(
    server: FakeServer, tmp_path: Path
) -> None:
    """A third of the rows get prose for an answer, a third an answer cut off at max_tokens.
    The first run keeps only the cut-off ones (`kept_failures`); a rerun, the server fixed,
    sends the garbled ones again and scores them, and gives the cut-off ones back unsent."""

    def handle(body: dict[str, Any]) -> Any:
        topic = int(re.findall(r"[Tt]opic (\d+)", user_text(body))[0])
        if topic % 3 == 0:
            return "I cannot answer that in JSON."
        return cut_off(body) if topic % 3 == 1 else auto_answer(body)

    server.handler = router(**{TASK: handle})
    first = scored(server, tmp_path, n=30)
    assert first.frame[METRIC].null_count() == 20
    assert first.stats.kept_failures == first.stats.failures["invalid_length"] == 10
    assert first.summary()["kept_failures"] == 10
    sent = server.count()
    server.handler = None
    again = scored(server, tmp_path, n=30)
    assert server.count() == sent + 10  # the garbled ten, each answered at once
    assert again.stats.remembered_failures == again.stats.kept_failures == 10
    assert again.frame[METRIC].null_count() == 10
    assert all(REMEMBERED in e for e in errors(again) if e is not None)


def test_at_40_percent_malformed_answers_a_rerun_gives_back_only_the_cut_off(
    tmp_path: Path,
) -> None:
    """The issue's run: 40% of answers malformed (cut JSON, wrong shape or count, empty, cut
    off at max_tokens, prose, in turn, drawn at random). What the first run keeps is exactly
    its requests cut off at max_tokens, and what a plain rerun gives back unsent is exactly
    that: every other failed request is sent again."""
    frame = rows(60)
    with FakeServer(faults=Faults(rate_malformed=0.4), seed=3) as server:
        first = ragframe.run(frame, [METRIC], judge=judge_for(server, tmp_path, cache=True))
        failed = sum(first.stats.failures.values())
        kept = first.stats.kept_failures
        assert kept == first.stats.failures["invalid_length"]
        sent = server.count()
        again = ragframe.run(frame, [METRIC], judge=judge_for(server, tmp_path, cache=True))
    assert again.stats.remembered_failures == kept == again.stats.kept_failures
    assert again.stats.cache_hits == len(frame) - failed
    resent = server.count() - sent
    assert failed - kept <= resent <= 2 * (failed - kept)  # each sent again (and repaired)


@pytest.mark.parametrize(
    ("handler", "options"),
    [
        (lambda body: Reply(status=500, content="boom"), {"max_attempts": 1}),
        (lambda body: Reply(content="{}", delay=2.0), {"max_attempts": 1, "timeout": 0.3}),
        (cut_off, {"temperature": 0.7}),
    ],
    ids=["5xx", "timeout", "temperature>0"],
)
def test_transient_failures_and_sampled_answers_are_sent_again(
    server: FakeServer,
    tmp_path: Path,
    handler: Callable[[dict[str, Any]], Reply],
    options: dict[str, Any],
) -> None:
    server.handler = router(**{TASK: handler})
    first = scored(server, tmp_path, **options)
    sent = server.count()
    assert sent >= 2 and all(e is not None for e in errors(first))
    again = scored(server, tmp_path, **options)
    assert server.count() == 2 * sent and again.stats.remembered_failures == 0
    assert all(e is not None and REMEMBERED not in e for e in errors(again))


def test_fail_fast_stops_on_a_remembered_failure(server: FakeServer, tmp_path: Path) -> None:
    server.handler = router(**{TASK: cut_off})
    scored(server, tmp_path)
    sent = server.count()
    with pytest.raises(JudgeError, match="remembered"):
        scored(server, tmp_path, fail_fast=True)
    assert server.count() == sent


def test_a_dry_run_counts_remembered_failures_as_free(server: FakeServer, tmp_path: Path) -> None:
    server.handler = router(**{TASK: cut_off})
    scored(server, tmp_path)
    judge = judge_for(server, tmp_path, cache=True)
    assert ragframe.estimate(rows(), [METRIC], judge=judge)["requests"] == 0
    retry = judge_for(server, tmp_path, cache=True, retry_failed=True)
    assert ragframe.estimate(rows(), [METRIC], judge=retry)["requests"] == 2


def test_the_batch_api_does_not_resubmit_a_remembered_failure(
    server: FakeServer, tmp_path: Path
) -> None:
    server.handler = router(**{TASK: cut_off})
    scored(server, tmp_path)
    judge = judge_for(server, tmp_path, cache=True)
    nothing = BatchJob(tmp_path / "job.json", judge).export_jsonl(
        rows(), [METRIC], tmp_path / "req.jsonl"
    )
    assert nothing.requests == 0
    retry = judge_for(server, tmp_path, cache=True, retry_failed=True)
    again = BatchJob(tmp_path / "job2.json", retry).export_jsonl(
        rows(), [METRIC], tmp_path / "req2.jsonl"
    )
    assert again.requests == 2


OLD_SCHEMA = """
CREATE TABLE answers (key TEXT PRIMARY KEY, model TEXT NOT NULL, value TEXT,
    content TEXT NOT NULL, logprobs TEXT, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE embeddings (key TEXT PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL);
"""
#: The query an older ragframe reads answers with (its `AnswerCache.get_many`).
OLD_READ = (
    "SELECT key, value, CASE WHEN value IS NULL THEN content END, logprobs, "
    "prompt_tokens, completion_tokens FROM answers WHERE key IN (?)"
)


def test_cache_files_of_either_version_open_and_an_old_reader_sees_no_answer(
    server: FakeServer, tmp_path: Path
) -> None:
    """A cache file written before failures were kept opens and learns them; what an older
    ragframe reads from a newer file holds no row for a failed request (it sends it again)."""
    path = tmp_path / "cache.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    server.handler = router(**{TASK: cut_off})
    scored(server, tmp_path)
    sent = server.count()
    scored(server, tmp_path)
    assert server.count() == sent
    with sqlite3.connect(path) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM failures")]
        assert len(keys) == 2
        assert all(db.execute(OLD_READ, (k,)).fetchall() == [] for k in keys)
    cache = AnswerCache(path)
    assert cache.get_many(keys) == {} and len(cache) == 0
    failure = cache.get_failures(keys)[keys[0]]
    assert failure["kind"] == "length" and "cut off" in failure["reason"]
    assert failure["conditions"]["repair_attempts"] == 1
    cache.close()


def test_an_answer_wins_over_a_failure_of_its_key(tmp_path: Path) -> None:
    """An answer for a key (written by any version, or by a batch collect) hides its failure."""
    cache = AnswerCache(tmp_path / "cache.sqlite3")
    failure = {"kind": "length", "reason": "cut off", "conditions": {"repair_attempts": 1}}
    cache.put_failure("k", "m", failure)
    assert set(cache.get_failures(["k"])) == {"k"}
    cache.put("k", "m", {"content": "{}", "value": "{}"})
    assert cache.get_failures(["k"]) == {}

    async def replace() -> None:
        await cache.aput_failure("j", "m", failure)
        await cache.aput("j", "m", {"content": "{}", "value": "{}"}, replaces_failure=True)

    asyncio.run(replace())
    with sqlite3.connect(tmp_path / "cache.sqlite3") as db:
        assert db.execute("SELECT key FROM failures").fetchall() == [("k",)]
    assert json.loads(cache.get_many(["j"])["j"]["value"]) == {}
    cache.close()


def test_a_stage_two_metrics_share_is_remembered_once(server: FakeServer, tmp_path: Path) -> None:
    """faithfulness and answer_relevancy_llm both need the answer's claims: a claims request
    cut off fails both metrics' rows, and a rerun sends nothing and counts it once."""
    server.handler = router(answer_claims=cut_off)
    metrics = ["faithfulness", "answer_relevancy_llm"]
    judge = judge_for(server, tmp_path, cache=True)
    first = ragframe.run(rows(), metrics, judge=judge)
    sent = server.count()
    assert first.stats.failures["invalid_length"] == 2
    again = ragframe.run(rows(), metrics, judge=judge_for(server, tmp_path, cache=True))
    assert server.count() == sent and again.stats.remembered_failures == 2
    for metric in metrics:
        details = again.frame[f"{metric}_detail"].struct.field("error").to_list()
        assert all("cut off at max_tokens" in e and REMEMBERED in e for e in details)
