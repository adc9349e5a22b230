"""The Batch API backend against the local FakeServer's Files and Batches endpoints.

The server answers batch lines through the same handler and faults as live requests and
writes its output files in a shuffled order, so these tests check the join by custom_id, the
stages of multi-stage metrics, retries, restarts, and that a batch run scores exactly what a
live run scores (the server's default answers are a function of the messages).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import polars as pl
import pytest
from conftest import reply, task_name, user_text

import ragframe
from ragframe import ConfigError, GEval, Judge
from ragframe.cli.batch import add_parser as add_batch_parser
from ragframe.cli.batch import cmd_batch
from ragframe.engine.batch import BatchJob
from ragframe.errors import EndpointError
from ragframe.inputs.columns import ROW_ID
from ragframe.judge.batch import (
    TERMINAL,
    _split,
    format_status,
    read_result_line,
)
from ragframe.judge.task import Task
from ragframe.metrics import Context, Faithfulness, Metric, MetricInfo
from ragframe.testing.server import FakeServer, Faults, Reply, auto_answer

KEY = "sk-test-not-a-real-key"
METRICS = ["faithfulness", "context_recall"]


def frame(n: int = 10) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What is topic {i}?" for i in range(n)],
            "answer": [f"Topic {i} is a thing. It has {i} parts. It is blue." for i in range(n)],
            "contexts": [[f"Topic {i} is a thing with parts.", "Other text."] for i in range(n)],
            "ground_truth": [f"Topic {i} is a blue thing." for i in range(n)],
            "run_id": [f"r{i}" for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


def api(server: FakeServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)


def batch_inputs(server: FakeServer) -> list[tuple[str, list[dict[str, Any]]]]:
    """(batch id, request lines) of every batch the server holds, oldest first."""
    client = api(server)
    batches = sorted(client.batches.list(limit=100), key=lambda b: b.id)
    return [
        (b.id, [json.loads(x) for x in client.files.content(b.input_file_id).text.splitlines()])
        for b in batches
    ]


def live(server: FakeServer, make_judge: Any, data: pl.DataFrame, metrics: list[str]) -> Any:
    """The same job scored live, without cache; the server's records are cleared after."""
    server.reset()
    result = ragframe.run(data, metrics, judge=make_judge())
    by_task = Counter(task_name(b) for b in server.chat_requests)
    server.reset()
    return result, by_task


def drive(job: BatchJob, output: Path | None = None, limit: float = 30.0) -> Any:
    """Collect until done (bounded in time), as a user would run collect again and again."""
    deadline = time.monotonic() + limit
    while True:
        progress = job.collect(output, overwrite=True)
        if progress.state == "done" or time.monotonic() > deadline:
            return progress
        time.sleep(0.02)


def settle(job: BatchJob, limit: float = 20.0) -> None:
    """Poll (bounded in time) until no batch of the job is still running."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        running = [b for b in job.status()["batches"] if b["status"] not in TERMINAL]
        if not running:
            return
        time.sleep(0.05)
    raise AssertionError(f"batches still running after {limit} s")


def same_scores(a: pl.DataFrame, b: pl.DataFrame, rows: list[int] | None = None) -> bool:
    cols = ["faithfulness", "context_recall", "faithfulness_detail", "context_recall_detail"]
    if rows is not None:
        a, b = a[rows], b[rows]
    return a.select(cols).equals(b.select(cols))


# ------------------------------------------------------------------------- the main flow


def test_two_stages_equal_a_live_run(server, make_judge, tmp_path):
    data = frame(10)
    expected, by_task = live(server, make_judge, data, METRICS)
    source = tmp_path / "in.parquet"
    data.write_parquet(source)
    out = tmp_path / "out.parquet"
    manifest = tmp_path / "job.json"
    server.batch_delay = 1.0  # long enough to see a batch still running
    job = BatchJob(manifest, make_judge(cache=True))

    first = job.submit(source, METRICS)
    assert first.state == "submitted" and first.stage == 1 and len(first.submitted) == 1
    [(_, lines)] = batch_inputs(server)
    stage1 = Counter(task_name(x["body"]) for x in lines)
    assert stage1 == {k: v for k, v in by_task.items() if k != "faithfulness_verify"}
    assert stage1["context_recall_attribute"] == 10 and len(stage1) == 2
    waiting = job.collect(out)  # the batch is still running: nothing to do yet
    assert waiting.state == "waiting" and waiting.open == first.submitted and not out.exists()

    settle(job)
    server.batch_delay = 0.0
    second = job.collect(out)
    assert second.state == "submitted" and second.stage == 2
    _, (_, stage2_lines) = batch_inputs(server)
    assert Counter(task_name(x["body"]) for x in stage2_lines) == {
        "faithfulness_verify": by_task["faithfulness_verify"]
    }
    done = drive(job, out)
    assert done.state == "done" and done.output == out and out.exists()

    scored = pl.read_parquet(out)
    assert scored.equals(expected.frame)  # scores, verdicts, reasons, tokens: all the same
    assert scored["faithfulness"].null_count() == 0 and scored["context_recall"].null_count() == 0
    # Nothing sent live, nothing sent twice, exactly the live run's requests.
    assert server.count("/chat/completions") == 0
    ids = [x["custom_id"] for _, lines in batch_inputs(server) for x in lines]
    assert len(ids) == len(set(ids)) == sum(by_task.values())
    meta = ragframe.read_metadata(out)
    assert meta["summary"]["batch"]["batch_ids"] == [b for b, _ in batch_inputs(server)]
    assert meta["summary"]["batch"]["stages"] == 2
    text = manifest.read_text()
    assert KEY not in text and json.loads(text)["state"] == "done"
    assert server.base_url.split("//")[1].split("/")[0] in text  # the host, for the record


def test_restart_resumes_from_the_manifest_alone(server, make_judge, tmp_path):
    data = frame(6)
    expected, _ = live(server, make_judge, data, METRICS)
    manifest = tmp_path / "job.json"
    server.batch_delay = 1.0
    BatchJob(manifest, make_judge(cache=True)).submit(data, METRICS)  # a frame: kept beside

    # A new process: status, and a second submit that must not submit anything again.
    again = BatchJob(manifest, make_judge(cache=True))
    info = again.status()
    assert info["stage"] == 1 and [b["status"] for b in info["batches"]] in (
        ["validating"],
        ["in_progress"],
    )
    assert "stage" in format_status(info) and info["rows"] == 6
    repeat = again.submit(data, METRICS)
    assert repeat.state == "waiting" and repeat.submitted == [] and len(batch_inputs(server)) == 1

    server.batch_delay = 0.0
    settle(again)
    assert BatchJob(manifest, make_judge(cache=True)).collect().state == "submitted"
    settle(again)
    # Another process finishes the job from the manifest alone: no data, no metrics given.
    out = tmp_path / "out.parquet"
    script = (
        "import sys\n"
        "from ragframe import Judge\n"
        "from ragframe.engine.batch import BatchJob\n"
        "judge = Judge('fake-judge', base_url=sys.argv[1], api_key='sk-test-not-a-real-key',"
        " cache=sys.argv[2], progress=False)\n"
        "print(BatchJob(sys.argv[3], judge).collect(sys.argv[4]).state)\n"
    )
    args = [server.base_url, str(tmp_path / "cache.sqlite3"), str(manifest), str(out)]
    child = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0 and child.stdout.strip() == "done", child.stderr
    scored = pl.read_parquet(out)
    assert same_scores(scored, expected.frame)
    assert scored["run_id"].to_list() == data["run_id"].to_list()
    assert len(batch_inputs(server)) == 2
    statuses = [b["status"] for b in BatchJob(manifest, make_judge(cache=True)).status()["batches"]]
    assert statuses == ["completed", "completed"]

    # Another job on the same manifest is refused, and so is another judge.
    cache2 = tmp_path / "other.sqlite3"
    with pytest.raises(ConfigError, match="other metrics"):
        BatchJob(manifest, make_judge(cache=True)).submit(data, ["context_recall"])
    with pytest.raises(ConfigError, match="was made for model"):
        BatchJob(manifest, Judge("other", base_url=server.base_url, api_key=KEY, cache=cache2))


class _FailingUploads:
    """An OpenAI client whose uploads fail: the process 'dies' between manifest and upload."""

    def __init__(self, real: openai.OpenAI) -> None:
        self.batches = real.batches

        class Files:
            def create(self, **_: Any) -> Any:
                raise RuntimeError("network down")

        self.files = Files()


def test_interrupted_submissions_are_finished_not_repeated(server, make_judge, tmp_path):
    data = frame(4)
    manifest = tmp_path / "job.json"
    job = BatchJob(manifest, make_judge(cache=True))
    job._client = _FailingUploads(api(server))
    with pytest.raises(RuntimeError, match="network down"):
        job.submit(data, ["context_recall"])
    recorded = json.loads(manifest.read_text())["batches"]
    assert [(b["status"], b["id"]) for b in recorded] == [("prepared", None)]
    assert batch_inputs(server) == []

    # Died after creating the batch, before recording it: found again by its input file.
    resumed = BatchJob(manifest, make_judge(cache=True)).collect()
    assert resumed.state == "waiting" or resumed.state == "done"
    assert len(batch_inputs(server)) == 1
    m = json.loads(manifest.read_text())
    real_id = m["batches"][0]["id"]
    m["batches"][0].update(id=None, status="uploaded", collected=False)
    manifest.write_text(json.dumps(m))
    done = drive(BatchJob(manifest, make_judge(cache=True)))
    assert done.state == "done" and done.result.frame["context_recall"].null_count() == 0
    assert [b for b, _ in batch_inputs(server)] == [real_id]  # no second batch
    assert json.loads(manifest.read_text())["batches"][0]["id"] == real_id


def test_large_passes_are_split_within_the_limits(server, make_judge, tmp_path):
    data = frame(10)
    expected, _ = live(server, make_judge, data, METRICS)
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True), max_requests=7)
    first = job.submit(data, METRICS)
    assert len(first.submitted) == 3 and first.requests == 20
    sizes = [len(lines) for _, lines in batch_inputs(server)]
    assert sizes == [7, 7, 6]
    done = drive(job)
    assert done.state == "done" and same_scores(done.result.frame, expected.frame)
    ids = [x["custom_id"] for _, lines in batch_inputs(server) for x in lines]
    assert len(ids) == len(set(ids))
    lines = [b"a" * 10 + b"\n"] * 5
    assert [len(p) for p in _split(lines, 100, 25)] == [2, 2, 1]  # by bytes too


# ----------------------------------------------------------------------- failures and retries


def test_failed_lines_are_retried_then_reported_per_row(server, make_judge, tmp_path):
    data = frame(8)

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) == "answer_claims" and "Topic 3 " in user_text(body):
            return Reply(status=500, content="overloaded")
        return auto_answer(body)

    server.handler = handler
    expected, _ = live(server, make_judge, data, METRICS)
    server.faults = Faults(rate_500=0.3)
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True), max_attempts=3)
    job.submit(data, METRICS)
    done = drive(job)
    assert done.state == "done" and done.given_up >= 1
    result = done.result.frame
    error = result["faithfulness_detail"][3]["error"]
    assert result["faithfulness"][3] is None
    assert "failed 3 times" in error and "HTTP 500" in error and "answer.claims" in error
    assert result["context_recall"][3] is not None  # only the claims request of row 3 failed
    # Every other (row, metric) either equals the live run, score and whole detail (nulls
    # included), or has a null score and an error saying which request gave up and why.
    for i in range(8):
        for name in ("faithfulness", "context_recall"):
            cols = [name, f"{name}_detail"]
            got, want = result[i].select(cols), expected.frame[i].select(cols)
            if (i == 3 and name == "faithfulness") or got.equals(want):
                continue
            err = got[f"{name}_detail"][0]["error"]
            assert got[name][0] is None, (i, name, got.to_dicts(), want.to_dicts())
            assert err is not None and "failed 3 times" in err, (i, name, err)
    # Retried lines: the same custom_id in a later batch, only after it failed.
    per_batch = [[x["custom_id"] for x in lines] for _, lines in batch_inputs(server)]
    ids = Counter(i for batch in per_batch for i in batch)
    assert max(ids.values()) == 3 and any(n == 2 for n in ids.values())
    assert all(len(batch) == len(set(batch)) for batch in per_batch)
    assert done.result.summary()["failures"]["batch"] >= 1
    assert server.fault_counts()["500"] >= 1
    # Allowing more attempts retries what was given up (and nothing else).
    more = BatchJob(tmp_path / "job.json", make_judge(cache=True), max_attempts=4).collect()
    assert more.state == "submitted" and more.requests == done.given_up


def test_unusable_answer_is_repaired_in_the_next_batch(server, make_judge, tmp_path):
    data = frame(4)

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) == "answer_claims" and "Topic 2 " in user_text(body):
            if len(body["messages"]) == 2:
                return "I would rather not say."
            return auto_answer({**body, "messages": body["messages"][:2]})
        return auto_answer(body)

    server.handler = handler
    expected, _ = live(server, make_judge, data, METRICS)  # the live run repairs it the same way
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    job.submit(data, METRICS)
    done = drive(job)
    assert done.state == "done" and done.given_up == 0
    assert same_scores(done.result.frame, expected.frame)
    retried = [
        x for _, lines in batch_inputs(server) for x in lines if len(x["body"]["messages"]) == 4
    ]
    assert len(retried) == 1
    assert retried[0]["body"]["messages"][2]["content"] == "I would rather not say."
    assert "could not be used" in retried[0]["body"]["messages"][3]["content"]
    assert len(batch_inputs(server)) == 3  # claims+recall, repair+verify, verify of row 2


def test_cancelled_batch_output_is_kept(server, make_judge, tmp_path):
    server.batch_delay = 5.0
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    first = job.submit(frame(3), ["context_recall"])
    api(server).batches.cancel(first.submitted[0])
    deadline = time.monotonic() + 5
    while job.status()["batches"][0]["status"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.02)
    done = job.collect()
    assert done.state == "done" and done.result.frame["context_recall"].null_count() == 0
    assert len(batch_inputs(server)) == 1


def test_embeddings_are_sent_live(server, make_judge, tmp_path):
    data = frame(3)
    expected, _ = live(server, make_judge, data, ["answer_relevancy"])
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    job.submit(data, ["answer_relevancy"])
    done = drive(job)
    assert done.state == "done"
    assert done.result.frame["answer_relevancy"].equals(expected.frame["answer_relevancy"])
    assert server.count("/embeddings") >= 1 and server.count("/chat/completions") == 0


def test_logprobs_and_generated_steps_match_a_live_run(server, make_judge, tmp_path):
    """G-Eval writes its steps (one request), then scores with logprobs: three passes."""
    data = frame(4)

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) != "g_eval_score":
            return auto_answer(body)
        # The score digit as its own token, with two alternatives: raw score 3.7.
        pieces = ['{"', "reason", '":', ' "', "ok", '",', ' "', "score", '":', " ", "4", "}"]
        top = {"4": math.log(0.7), "3": math.log(0.3)}
        return Reply(
            content="".join(pieces),
            logprobs=[
                {
                    "token": t,
                    "logprob": top.get(t, -0.01),
                    "top_logprobs": [
                        {"token": k, "logprob": v}
                        for k, v in (top if t == "4" else {t: -0.01}).items()
                    ],
                }
                for t in pieces
            ],
        )

    server.handler = handler
    expected = ragframe.run(data, [GEval(criteria="Be correct.")], judge=make_judge()).frame
    server.reset()
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    first = job.submit(data, [GEval(criteria="Be correct.")])
    assert first.requests == 1  # the steps, before any row can be scored
    done = drive(job)
    assert done.state == "done" and done.stage == 2
    assert done.result.frame.equals(expected)
    detail = done.result.frame["g_eval_detail"]
    assert detail.struct.field("method").to_list() == ["logprobs"] * 4
    assert detail.struct.field("raw_score").to_list() == pytest.approx([3.7] * 4)
    with pytest.raises(ConfigError, match="cannot rebuild"):
        BatchJob(tmp_path / "job.json", make_judge(cache=True)).collect()
    again = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    assert again.collect(metrics=[GEval(criteria="Be correct.")]).state == "done"


# -------------------------------------------------------------------- vllm run-batch files


def vllm_answers(requests: Path, out: Path, fail: set[str] = frozenset(), seed: int = 0) -> None:
    """Answer a request file as vllm run-batch would, in its output variants, shuffled."""
    lines = [json.loads(x) for x in requests.read_text().splitlines()]
    results = []
    for i, line in enumerate(lines):
        cid = line["custom_id"]
        if cid in fail:
            results.append(
                {
                    "id": f"vllm-{i}",
                    "custom_id": cid,
                    "response": {"status_code": 400, "request_id": f"r{i}", "body": None},
                    "error": {"object": "error", "message": "context too long", "code": 400},
                }
            )
            continue
        completion = {
            "id": f"cmpl-{i}",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": auto_answer(line["body"])},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        if i % 3 == 0:
            response: dict[str, Any] = {
                "status_code": 200,
                "request_id": f"r{i}",
                "body": completion,
            }
        elif i % 3 == 1:
            response = {"request_id": f"r{i}", "body": completion}  # no status_code
        else:
            response = completion  # the body at `response` directly
        results.append({"id": f"vllm-{i}", "custom_id": cid, "response": response, "error": None})
    random.Random(seed).shuffle(results)
    out.write_text("".join(json.dumps(x) + "\n" for x in results))


def test_export_import_round_trip_for_vllm(server, make_judge, tmp_path):
    data = frame(6)
    expected, _ = live(server, make_judge, data, METRICS)
    manifest = tmp_path / "job.json"
    job = BatchJob(manifest, make_judge(cache=True))
    first = job.export_jsonl(data, METRICS, tmp_path / "req1.jsonl")
    assert first.state == "submitted" and first.requests == 12
    lines = [json.loads(x) for x in (tmp_path / "req1.jsonl").read_text().splitlines()]
    assert {x["method"] for x in lines} == {"POST"} and {x["url"] for x in lines} == {
        "/v1/chat/completions"
    }
    failing = lines[0]["custom_id"]
    waiting = job.collect()
    assert waiting.state == "waiting" and "not imported yet" in waiting.message()
    vllm_answers(tmp_path / "req1.jsonl", tmp_path / "res1.jsonl", fail={failing})
    counts = BatchJob(manifest, make_judge(cache=True)).import_results(tmp_path / "res1.jsonl")
    assert counts == {"answered": 11, "failed": 1, "unknown": 0}
    assert job.collect().state == "missing"  # file mode: nothing is uploaded

    for stage in (2, 3, 4):
        step = job.export_jsonl(data, METRICS, tmp_path / f"req{stage}.jsonl")
        if step.requests == 0:
            break
        vllm_answers(tmp_path / f"req{stage}.jsonl", tmp_path / f"res{stage}.jsonl", seed=stage)
        job.import_results(tmp_path / f"res{stage}.jsonl")
        if stage == 2:
            retry = (tmp_path / "req2.jsonl").read_text()
            assert failing in retry  # the failed line is asked again
    assert step.requests == 0 and step.state == "done"
    done = job.collect(tmp_path / "out.parquet")
    assert done.state == "done" and (tmp_path / "out.parquet").exists()
    ours, theirs = done.result.frame, expected.frame
    assert ours["faithfulness"].equals(theirs["faithfulness"])
    assert ours["context_recall"].equals(theirs["context_recall"])
    claims = pl.col("faithfulness_detail").struct.field("claims")
    assert ours.select(claims).equals(theirs.select(claims))
    assert server.count("/files") == 0 and server.count("/batches") == 0
    assert server.count("/chat/completions") == 0


def test_result_line_variants():
    completion = {"choices": [{"message": {"content": "{}"}, "finish_reason": "stop"}]}
    ok = [
        {"custom_id": "a", "response": {"status_code": 200, "body": completion}, "error": None},
        {"custom_id": "a", "response": {"request_id": "x", "body": completion}},
        {"custom_id": "a", "response": completion},
    ]
    for line in ok:
        assert read_result_line(line) == ("a", completion, None)
    openai_error = {
        "custom_id": "b",
        "response": {"status_code": 429, "body": {"error": {"message": "slow down"}}},
        "error": None,
    }
    assert read_result_line(openai_error) == ("b", None, "HTTP 429: slow down")
    vllm_error = {
        "custom_id": "c",
        "response": {"status_code": 400, "request_id": "r", "body": None},
        "error": {"object": "error", "message": "bad schema", "code": 400},
    }
    assert read_result_line(vllm_error) == ("c", None, "HTTP 400: bad schema")
    expired = {"custom_id": "d", "response": None, "error": {"code": "batch_expired"}}
    assert read_result_line(expired) == ("d", None, "batch_expired")
    assert read_result_line({"custom_id": "e", "response": None, "error": "boom"})[2] == "boom"


# ------------------------------------------------------------------------------ command line


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="ragframe")
    add_batch_parser(parser.add_subparsers(dest="command", required=True))
    return cmd_batch(parser.parse_args(list(argv)))


def test_cli_run_status_collect(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    source, out, manifest = tmp_path / "in.parquet", tmp_path / "out.parquet", tmp_path / "m.json"
    frame(5).write_parquet(source)
    judge_args = ["--model", "fake-judge", "--base-url", server.base_url]
    cache = ["--cache", str(tmp_path / "c.sqlite3")]
    rc = cli(
        "batch", "run", str(source), "-o", str(out), "--manifest", str(manifest),
        "--metrics", "faithfulness,context_recall", *judge_args, *cache,
        "--poll-interval", "0.05", "--wait", "60",
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0 and out.exists() and "stage 2: submitted" in printed and "wrote" in printed
    assert pl.read_parquet(out)["faithfulness"].null_count() == 0
    assert cli("batch", "status", "--manifest", str(manifest), "--base-url", server.base_url) == 0
    status = capsys.readouterr().out
    assert "state done" in status and status.count("completed") == 2
    with pytest.raises(ConfigError, match="exists"):
        cli("batch", "collect", "--manifest", str(manifest), "-o", str(out), *judge_args)
    assert cli(
        "batch", "collect", "--manifest", str(manifest), "-o", str(out), "--overwrite",
        "--base-url", server.base_url,
    ) == 0  # fmt: skip
    assert "done after 2 stage(s)" in capsys.readouterr().out
    assert KEY not in manifest.read_text()
    with pytest.raises(ConfigError, match="no manifest"):
        cli("batch", "collect", "--manifest", str(tmp_path / "none.json"), *judge_args)


def test_cli_export_and_import(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    source = tmp_path / "in.parquet"
    frame(3).write_parquet(source)
    opts = ["--model", "fake-judge", "--base-url", server.base_url, "--metrics", "context_recall"]
    cache = ["--cache", str(tmp_path / "c.sqlite3")]
    requests = tmp_path / "requests.jsonl"
    assert cli("batch", "export", str(source), "--jsonl", str(requests), *opts, *cache) == 0
    assert "vllm run-batch -i" in capsys.readouterr().out
    manifest = Path(f"{requests}.manifest.json")
    assert manifest.exists() and len(requests.read_text().splitlines()) == 3
    vllm_answers(requests, tmp_path / "results.jsonl")
    assert cli("batch", "import", "--manifest", str(manifest), str(tmp_path / "results.jsonl"),
               "--base-url", server.base_url) == 0  # fmt: skip
    assert "3 answers stored" in capsys.readouterr().out
    out = tmp_path / "out.parquet"
    assert cli("batch", "collect", "--manifest", str(manifest), "-o", str(out),
               "--base-url", server.base_url) == 0  # fmt: skip
    assert pl.read_parquet(out)["context_recall"].null_count() == 0


# ------------------------------------------------------------------ the job's identity, errors


def test_job_identity_includes_every_setting(server, make_judge, tmp_path):
    """A job started with Faithfulness(batch_size=5) refuses batch_size=1 (its verification
    prompts would differ from the ones paid for), at submit, export and collect alike."""
    data = frame(3)
    manifest = tmp_path / "job.json"
    job = BatchJob(manifest, make_judge(cache=True))
    job.submit(data, [Faithfulness(batch_size=5), "context_recall"])
    other = BatchJob(manifest, make_judge(cache=True))
    for attempt in (
        lambda: other.submit(data, [Faithfulness(batch_size=1), "context_recall"]),
        lambda: other.export_jsonl(
            data, [Faithfulness(batch_size=1), "context_recall"], tmp_path / "r.jsonl"
        ),
        lambda: other.collect(metrics=[Faithfulness(batch_size=1), "context_recall"]),
    ):
        with pytest.raises(ConfigError, match=r"faithfulness batch_size=5, not 1"):
            attempt()
    assert len(batch_inputs(server)) == 1
    same = BatchJob(manifest, make_judge(cache=True)).submit(
        data, [Faithfulness(batch_size=5), "context_recall"]
    )
    assert same.submitted == []  # the same job: nothing submitted twice


def test_generated_steps_are_not_part_of_the_identity(server, make_judge, tmp_path):
    """G-Eval writes its steps during the job: the instance that has them is the same job."""
    data = frame(2)
    metric = GEval(criteria="Be correct.")
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    job.submit(data, [metric])
    settle(job)
    assert job.collect(metrics=[metric]).state == "submitted" and metric.steps
    again = BatchJob(tmp_path / "job.json", make_judge(cache=True)).submit(data, [metric])
    assert again.submitted == []
    with pytest.raises(ConfigError, match="score_range"):
        BatchJob(tmp_path / "job.json", make_judge(cache=True)).submit(
            data, [GEval(criteria="Be correct.", score_range=(1, 10))]
        )


def test_submit_without_an_embedding_model_sends_nothing(server, make_judge, tmp_path, monkeypatch):
    monkeypatch.delenv("RAGFRAME_EMBEDDING_MODEL", raising=False)
    # With the local embedder installed it would serve; here it is not.
    monkeypatch.setattr("ragframe.judge.capabilities._local_embedder_installed", lambda: False)
    manifest = tmp_path / "job.json"
    job = BatchJob(manifest, make_judge(cache=True, embedding_model=None))
    with pytest.raises(ConfigError, match="answer_relevancy needs an embedding model"):
        job.submit(frame(3), ["faithfulness", "answer_relevancy"])
    with pytest.raises(ConfigError, match="answer_relevancy needs an embedding model"):
        job.export_jsonl(frame(3), ["faithfulness", "answer_relevancy"], tmp_path / "r.jsonl")
    assert server.count("") == 0 and not manifest.exists()


def test_batch_error_lines_never_leak_the_key(server, tmp_path, monkeypatch, capsys):
    """Error lines that echo the key, whole or in part, are scrubbed before they reach the
    manifest, the rows' errors, the output's metadata and the console."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    echo = f"key {KEY} refused (also known as {KEY[:8]}...{KEY[-6:]})"

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) == "context_recall_attribute":
            return Reply(status=400, content=echo)
        return auto_answer(body)

    server.handler = handler
    source, out, manifest = tmp_path / "in.parquet", tmp_path / "out.parquet", tmp_path / "m.json"
    frame(3).write_parquet(source)
    rc = cli(
        "batch", "run", str(source), "-o", str(out), "--manifest", str(manifest),
        "--metrics", "context_recall", "--model", "fake-judge", "--base-url", server.base_url,
        "--cache", str(tmp_path / "c.sqlite3"), "--max-attempts", "2",
        "--poll-interval", "0.02", "--wait", "60",
    )  # fmt: skip
    printed = capsys.readouterr()
    assert rc == 4  # context_recall failed on every row; the output is written all the same
    scored = pl.read_parquet(out)
    errors = scored["context_recall_detail"].struct.field("error").to_list()
    assert all("refused" in e and "***" in e for e in errors)
    everywhere = [
        manifest.read_text(),
        json.dumps(ragframe.read_metadata(out)),
        str(scored.to_dicts()),
        printed.out,
        printed.err,
    ]
    for text in everywhere:
        assert KEY not in text and KEY[:8] not in text and KEY[-6:] not in text
    assert "context_recall failed on every row" in printed.err


def test_batch_answers_pass_task_finish_before_they_are_stored(server, make_judge, tmp_path):
    """An answer that parses but fails its task's consistency check is a failed attempt with
    its reason, repaired in the next batch, not stored and then rejected at every pass."""
    metric = YesMetric()

    def handler(body: dict[str, Any]) -> Any:
        repaired = len(body["messages"]) == 4
        return reply({"verdict": "yes" if repaired else "no"})

    server.handler = handler
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    job.submit(frame(2), [metric])
    done = drive(job)
    assert done.state == "done" and done.given_up == 0 and done.stage == 2
    assert done.result.frame["yes_check"].to_list() == [1.0, 1.0]
    _, (_, retried) = batch_inputs(server)
    assert all("the verdict must be yes" in x["body"]["messages"][3]["content"] for x in retried)


YES = Task(
    name="yes_check.verdict",
    system="Say yes.",
    schema={
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["verdict"],
    },
    check=lambda value: None if value["verdict"] == "yes" else "the verdict must be yes",
)


class YesMetric(Metric):
    """A one-request metric whose task has a consistency check (1.0 when it passes)."""

    name = "yes_check"
    requires = ("question",)
    info = MetricInfo(formula="1", requests_per_row="1", empty_input="null", source="test")

    def tasks(self) -> list[Task]:
        return [YES]

    async def compute(self, rows: pl.DataFrame, ctx: Context) -> pl.DataFrame:
        asked = await ctx.ask(YES, rows.select(ROW_ID, pl.col("question").alias("prompt")))
        return asked.select(
            ROW_ID,
            "error",
            pl.when(pl.col("answer").struct.field("verdict") == "yes").then(1.0).alias("score"),
        )


class _RefusingFiles:
    """An OpenAI client whose Files API refuses the key with `error` (which echoes it)."""

    def __init__(self, real: openai.OpenAI, error: Exception) -> None:
        self.batches = real.batches

        class Files:
            def create(self, **_: Any) -> Any:
                raise error

        self.files = Files()


def test_a_refused_key_stops_the_job_on_one_line(server, make_judge, tmp_path):
    server.handler = lambda body: Reply(status=401, content=f"Incorrect API key: {KEY}")
    with pytest.raises(openai.AuthenticationError) as refused:  # a real one, from the server
        api(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    server.reset()
    job = BatchJob(tmp_path / "job.json", make_judge(cache=True))
    job._client = _RefusingFiles(api(server), refused.value)
    with pytest.raises(EndpointError) as caught:
        job.submit(frame(2), ["context_recall"])
    message = str(caught.value)
    assert "\n" not in message and KEY not in message and KEY[:8] not in message
    assert server.base_url in message and "'fake-judge'" in message and "API key" in message
    assert batch_inputs(server) == []
