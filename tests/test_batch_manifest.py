"""The batch job's manifest on disk: typed, versioned, read whole or refused with what to do.

`OLD` is a manifest as ragframe 0.1.0 wrote it (the untyped dict), the layout version 1
keeps: it must read as is and be written back the same.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ragframe import ConfigError, Judge
from ragframe.engine.batch import BatchJob
from ragframe.judge.batch import MANIFEST_VERSION, BatchStatus, JobState, Mode
from ragframe.judge.batch.manifest import Failure, ManifestFile, parse

CID = ["a" * 64, "b" * 64, "c" * 64]

OLD: dict[str, Any] = {
    "format": "ragframe-batch-manifest",
    "version": 1,
    "job": "0123456789abcdef",
    "ragframe_version": "0.1.0",
    "created": "2025-01-02T03:04:05+00:00",
    "updated": "2025-01-02T03:09:05+00:00",
    "input": {"path": "/data/in.parquet", "copied": False, "rows": 3},
    "metrics": [
        {
            "name": "faithfulness",
            "class": "Faithfulness",
            "config": {"batch_size": None, "max_claims": 40},
            "prompt_hashes": {"answer.claims": "ebfec17fbf1ff3aa"},
        }
    ],
    "columns": {"response": "answer"},
    "judge": {
        "model": "fake-judge",
        "endpoint_host": "SET BY THE TEST",
        "embedding_model": None,
        "cache": "SET BY THE TEST",
    },
    "max_attempts": 3,
    "mode": "file",
    "stage": 2,
    "state": "submitted",
    "output": None,
    "batches": [
        {
            "id": "batch_1",
            "kind": "api",
            "stage": 1,
            "part": 1,
            "status": "completed",
            "created": "2025-01-02T03:04:05+00:00",
            "requests_path": "/data/job_batch_files/stage1-part1.jsonl",
            "input_file_id": "file-1",
            "output_file_id": "file-2",
            "error_file_id": None,
            "request_counts": {"total": 3, "completed": 2, "failed": 1},
            "errors": None,
            "collected": True,
            "collected_at": "2025-01-02T03:06:05+00:00",
            "result": {"answered": 1, "failed": 2},
            "custom_ids": CID,
        },
        {
            "id": "file-2",
            "kind": "file",
            "stage": 2,
            "part": 1,
            "status": "exported",
            "created": "2025-01-02T03:07:05+00:00",
            "requests_path": "/data/req2.jsonl",
            "input_file_id": None,
            "output_file_id": None,
            "error_file_id": None,
            "request_counts": {"total": 2, "completed": 0, "failed": 0},
            "errors": None,
            "collected": False,
            "collected_at": None,
            "result": None,
            "custom_ids": CID[1:],
        },
    ],
    "failures": {
        CID[1]: {"attempts": 1, "usage": [0, 0], "reason": "HTTP 500: overloaded"},
        CID[2]: {
            "attempts": 2,
            "usage": [120, 7],
            "reason": "unusable answer (json): no JSON object found in the answer",
            "content": "I would rather not say.",
            "repair": "no JSON object found in the answer",
        },
    },
    "totals": {
        "requests": 5,
        "answered": 1,
        "failed_lines": 3,
        "prompt_tokens": 300,
        "completion_tokens": 40,
    },
}


@pytest.fixture
def judge(tmp_path: Path) -> Judge:
    return Judge(
        "fake-judge",
        base_url="http://vllm-batch/v1",
        api_key="sk-test-not-a-real-key",
        cache=tmp_path / "cache.sqlite3",
        progress=False,
    )


def old_manifest(judge: Judge, **changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(OLD)
    raw["judge"].update(endpoint_host=judge.endpoint_host, cache=str(judge.cache_path))
    raw.update(changes)
    return raw


def write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(json.dumps(raw, indent=1))
    return path


def test_a_manifest_of_today_reads_typed_and_writes_back_the_same(judge, tmp_path):
    raw = old_manifest(judge)
    m = parse(raw, tmp_path / "job.json")
    assert m.state is JobState.SUBMITTED and m.mode is Mode.FILE
    assert [b.kind for b in m.batches] == [Mode.API, Mode.FILE]
    assert m.batches[0].status is BatchStatus.COMPLETED and m.batches[0].result.failed == 2
    assert m.failures[CID[2]] == Failure(
        attempts=2,
        usage=(120, 7),
        reason="unusable answer (json): no JSON object found in the answer",
        content="I would rather not say.",
        repair="no JSON object found in the answer",
    )
    assert m.failures[CID[1]].repair is None
    assert m.metrics[0].cls == "Faithfulness"
    assert m.held() == set(CID[1:]) and m.given_up() == {}
    # Same keys in the same order, same values: the layout did not change.
    assert json.dumps(m.to_json()) == json.dumps(raw)


def test_a_job_goes_on_from_an_old_manifest(judge, tmp_path):
    path = write(tmp_path / "job.json", old_manifest(judge))
    info = BatchJob(path, judge).status()  # file mode: nothing to poll
    assert info["state"] == "submitted" and info["stage"] == 2
    assert [b["status"] for b in info["batches"]] == ["completed", "exported"]
    assert info["retrying"] == 2 and info["given_up"] == 0
    saved = json.loads(path.read_text())
    assert saved["version"] == MANIFEST_VERSION
    assert {**saved, "updated": None} == {**old_manifest(judge), "updated": None}


def test_an_unversioned_manifest_is_read_when_it_can_be(judge, tmp_path):
    raw = old_manifest(judge)
    del raw["version"], raw["ragframe_version"]  # what a ragframe writes anyway: not needed
    path = write(tmp_path / "job.json", raw)
    assert BatchJob(path, judge).status()["stage"] == 2
    saved = json.loads(path.read_text())
    assert saved["version"] == MANIFEST_VERSION and saved["ragframe_version"] == "unknown"


def test_an_unversioned_manifest_that_does_not_fit_is_refused_with_what_to_do(judge, tmp_path):
    raw = old_manifest(judge)
    del raw["version"]
    del raw["batches"][1]["custom_ids"]
    path = write(tmp_path / "job.json", raw)
    with pytest.raises(ConfigError) as refused:
        BatchJob(path, judge)
    message = str(refused.value)
    assert "batches[1].custom_ids is missing" in message
    assert "written by an older ragframe (it has no version field)" in message
    assert "collect it with ragframe 0.1.0, or start a new --manifest" in message


def test_a_newer_manifest_is_refused_with_what_to_do(judge, tmp_path):
    raw = old_manifest(judge, version=MANIFEST_VERSION + 1, ragframe_version="9.0.0")
    path = write(tmp_path / "job.json", raw)
    with pytest.raises(ConfigError, match=r"version 2 batch manifest, written by ragframe 9\.0\.0"):
        BatchJob(path, judge)
    with pytest.raises(
        ConfigError, match=r"collect it with ragframe 9\.0\.0 \(or a later one\), or start a new"
    ):
        BatchJob(path, judge)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m["batches"][0].update(stage="1"), "batches[0].stage is '1', not an integer"),
        (lambda m: m.update(state="paused"), "state is 'paused', not one of"),
        (lambda m: m["failures"][CID[1]].update(usage=[1]), "usage is [1], not a list of 2"),
        (lambda m: m["totals"].update(answered=True), "totals.answered is True"),
        (lambda m: m.update(version="1"), "has version '1', which no ragframe writes"),
        (lambda m: m.update(version=0), "has version 0, which no ragframe writes"),
    ],
)
def test_a_damaged_manifest_names_the_field(judge, tmp_path, change, named):
    raw = old_manifest(judge)
    change(raw)
    with pytest.raises(ConfigError) as refused:
        BatchJob(write(tmp_path / "job.json", raw), judge)
    assert named in str(refused.value)


def test_a_status_this_ragframe_does_not_know_is_kept(judge, tmp_path):
    raw = old_manifest(judge)
    raw["batches"][0]["status"] = "paused_by_provider"
    m = parse(raw, tmp_path / "job.json")
    assert m.batches[0].status == "paused_by_provider"
    assert m.to_json()["batches"][0]["status"] == "paused_by_provider"


def test_not_a_manifest(tmp_path):
    with pytest.raises(ConfigError, match="not a ragframe batch manifest"):
        parse({"format": "something-else"}, tmp_path / "x.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        ManifestFile(tmp_path / "broken.json").load()


def test_a_save_that_fails_leaves_the_old_manifest(judge, tmp_path, monkeypatch):
    path = write(tmp_path / "job.json", old_manifest(judge))
    before = path.read_text()
    store = ManifestFile(path)
    m = store.load()
    assert m is not None
    m.stage = 99

    def crash(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.save(m)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]  # no temporary file left


def test_an_unusable_answer_kept_for_its_repair_is_scrubbed_as_an_answer(judge, tmp_path):
    """The reason and the repair are error texts (every credential out, the URL's user name
    too); the unusable answer kept for its repair is the judge's own words, scrubbed as an
    answer: a word that only looks like a short credential stays, so the repair quotes it."""
    from ragframe.judge.transport import Secrets

    secret_judge = Judge(
        "fake-judge", base_url="http://reason:pass@127.0.0.1:9/v1", api_key="sk-x", cache=False
    )
    secrets = Secrets.of(secret_judge)
    m = parse(old_manifest(judge), tmp_path / "job.json")
    answer = '{"reason": "The user passes"}'
    m.fail(
        "c1",
        "unusable answer: reason missing",
        scrub=secrets.scrub,
        content=answer,
        repair="add 'reason'",
        scrub_content=secrets.scrub_answer,
    )
    record = m.failures["c1"]
    assert record.content == answer
    assert "reason" not in record.reason and "reason" not in record.repair
