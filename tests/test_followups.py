"""Follow-ups at the edges of issue 26: the Batch API scrubs every credential of the judge,
repeats refuse seeds past the bound, the embedded judge costs nothing, and the judge is
built (and may refuse) before any input is read or converted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import polars as pl
from conftest import reply, task_name, user_text
from test_batch import cli as batch_cli
from test_batch import frame

from ragframe.engine.batch import BatchJob
from ragframe.testing.server import FakeServer, Reply, auto_answer

KEY = "sk-test-not-a-real-key"
USER, SECRET = "alice", "hunter2-batch-pw"


def with_password(server: FakeServer) -> str:
    """The server's base URL with user:SECRET@ in it."""
    scheme, rest = server.base_url.split("://", 1)
    return f"{scheme}://{USER}:{SECRET}@{rest}"


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (the cache with its -wal, the manifest, the request files)."""
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def echoing(body: dict[str, Any]) -> Any:
    """context_recall answers whose reasons quote the URL password; topic 0's line is an error
    that quotes it (user:password, as a careless server says what it was sent)."""
    if "topic 0" in user_text(body).lower():
        return Reply(status=400, content=f"refused {USER}:{SECRET} for this request")
    if task_name(body) == "context_recall_attribute":
        value = json.loads(auto_answer(body))
        for fact in value["facts"]:
            fact["reason"] = f"the server was sent {SECRET}"
        return reply(value)
    return auto_answer(body)


def test_batch_api_scrubs_the_url_password_from_errors_and_answers(
    server, tmp_path, monkeypatch, capsys
):
    """A URL password echoed in Batch API error lines and in collected answers is nowhere:
    not in the output (values and metadata), the cache, the manifest or the console."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.handler = echoing
    work = tmp_path / "job"
    work.mkdir()
    source, out, manifest = tmp_path / "in.parquet", work / "out.parquet", work / "m.json"
    frame(3).write_parquet(source)
    rc = batch_cli(
        "batch", "run", str(source), "-o", str(out), "--manifest", str(manifest),
        "--metrics", "context_recall", "--model", "fake-judge",
        "--base-url", with_password(server), "--cache", str(work / "c.sqlite3"),
        "--max-attempts", "1", "--poll-interval", "0.02", "--wait", "60",
    )  # fmt: skip
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    scored = pl.read_parquet(out)
    details = scored["context_recall_detail"].to_list()
    errors = [d["error"] for d in details]
    assert errors[0] is not None and "refused" in errors[0] and "***" in errors[0]
    reasons = [f["reason"] for d in details[1:] for f in d["facts"] or []]
    assert reasons and all("***" in r for r in reasons)
    import ragframe

    texts = {
        "output": str(scored.to_dicts()),
        "metadata": json.dumps(ragframe.read_metadata(out)),
        "stdout": printed.out,
        "stderr": printed.err,
    }
    texts.update({k: v.decode("utf-8", "replace") for k, v in files_under(work).items()})
    assert any(str(manifest) == k for k in texts) and any("sqlite3" in k for k in texts)
    leaked = [where for where, text in texts.items() if SECRET in text]
    assert not leaked, f"{SECRET!r} in {leaked}"


class _Echoing:
    """An OpenAI client whose batches come back failed, their errors quoting `echo`
    (batches.retrieve), or whose batches.create refuses with a message quoting it."""

    def __init__(self, real: openai.OpenAI, echo: str, *, refuse: bool) -> None:
        self.files = real.files
        outer = self

        class Batches:
            def create(self, **kwargs: Any) -> Any:
                if refuse:
                    raise outer.refusal
                return real.batches.create(**kwargs)

            def retrieve(self, batch_id: str) -> Any:
                from openai.types import Batch, BatchError
                from openai.types.batch import Errors

                got: Batch = real.batches.retrieve(batch_id)
                return got.model_copy(
                    update={
                        "status": "failed",
                        "output_file_id": None,
                        "error_file_id": None,
                        "errors": Errors(data=[BatchError(code="bad", message=echo)]),
                    }
                )

            def list(self, **kwargs: Any) -> Any:
                return real.batches.list(**kwargs)

        self.batches = Batches()
        self.refusal: Exception | None = None


def _bad_request(server: FakeServer, echo: str) -> openai.BadRequestError:
    """A real BadRequestError from the server whose message quotes `echo`."""
    server.handler = lambda body: Reply(status=400, content=echo)
    client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    except openai.BadRequestError as err:
        server.reset()
        server.handler = None
        return err
    raise AssertionError("the server did not refuse")


def test_batch_level_errors_are_scrubbed_of_the_url_password(server, make_judge, tmp_path):
    """A failed batch's errors (polled) and a refused batch creation, both quoting the URL
    password, reach the manifest and the rows' errors scrubbed."""
    echo = f"batch refused for {USER}:{SECRET}"
    for refuse in (False, True):
        manifest = tmp_path / f"job-{refuse}.json"
        judge = make_judge(cache=tmp_path / f"c-{refuse}.sqlite3", base_url=with_password(server))
        job = BatchJob(manifest, judge, max_attempts=1)
        client = _Echoing(openai.OpenAI(base_url=server.base_url, api_key=KEY), echo, refuse=refuse)
        if refuse:
            client.refusal = _bad_request(server, echo)
        job._client = client
        job.submit(frame(2), ["context_recall"])
        progress = job.collect()
        assert progress.state == "done", progress.message()
        errors = progress.result.frame["context_recall_detail"].struct.field("error").to_list()
        assert all(e is not None and "***" in e for e in errors), errors
        assert SECRET not in manifest.read_text() and SECRET not in str(errors)


# ------------------------------------------------------------------ the command line


def no_judge_named(monkeypatch: Any, tmp_path: Path) -> None:
    """No judge in the environment (so --model with no key is refused), a private cache."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache.sqlite3"))


def test_a_dry_run_on_the_embedded_judge_says_it_costs_nothing(tmp_path, monkeypatch, capsys):
    """The embedded judge has no price because it runs here: a dry run says so, where a
    remote judge without a price says its price is unknown."""
    from ragframe.cli import main

    no_judge_named(monkeypatch, tmp_path)
    source = tmp_path / "in.parquet"
    frame(2).write_parquet(source)
    command = ["score", str(source), "-o", str(tmp_path / "out.parquet"), "--dry-run"]
    assert main([*command, "--metrics", "faithfulness"]) == 0
    printed = capsys.readouterr().out
    assert "no charge (the embedded judge runs here)" in printed and "unknown" not in printed
    server = FakeServer().start()
    try:
        remote = ["--model", "fake-judge", "--base-url", server.base_url]
        assert main([*command, "--metrics", "faithfulness", *remote]) == 0
    finally:
        server.stop()
    printed = capsys.readouterr().out
    assert "unknown price" in printed and "no charge" not in printed


def test_the_sample_cost_line_of_the_embedded_judge_says_no_charge():
    """`--sample`'s line (what the sample cost, what the whole log would) on the embedded
    judge: no charge for either; a remote judge's unknown price stays unknown."""
    from ragframe.cli.score import _sample_cost_line

    summary = {"requests": 4, "prompt_tokens": 40, "completion_tokens": 8}
    whole = {"rows": 9, "requests": 18, "prompt_tokens": 90, "completion_tokens": 18}
    local = _sample_cost_line(summary, {**whole, "cost_usd": None}, cached=True, local=True)
    assert local.count("no charge (the embedded judge runs here)") == 2
    assert "unknown" not in local
    remote = _sample_cost_line(summary, {**whole, "cost_usd": None}, cached=True)
    assert remote.count("unknown price") == 2


def ragas_rows(path: Path) -> Path:
    """A ragas EvaluationDataset in JSON Lines (a trace export `--from ragas` reads)."""
    rows = [
        {"user_input": f"What is {i}?", "response": f"It is {i}.", "retrieved_contexts": ["x"]}
        for i in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_score_from_a_trace_export_refuses_the_judge_before_converting(
    tmp_path, monkeypatch, capsys
):
    """A named model with no key and no URL is refused (exit 2) before the export is read or
    converted: no rows file is written, no output either."""
    from ragframe.cli import import_traces, main

    no_judge_named(monkeypatch, tmp_path)
    converted: list[Any] = []
    real = import_traces.write_rows
    monkeypatch.setattr(
        import_traces, "write_rows", lambda *a, **k: converted.append(a) or real(*a, **k)
    )
    source, out = ragas_rows(tmp_path / "ragas.jsonl"), tmp_path / "out.parquet"
    command = ["score", str(source), "--from", "ragas", "-o", str(out), "--metrics", "faithfulness"]
    assert main([*command, "--model", "gpt-4o-mini"]) == 2
    err = capsys.readouterr().err
    assert "gpt-4o-mini" in err and len(err.strip().splitlines()) == 1
    assert converted == [] and not out.exists()
    # The same command with a judge that can serve it converts (the spy sees it) and scores.
    server = FakeServer().start()
    try:
        remote = ["--model", "fake-judge", "--base-url", server.base_url, "--no-progress"]
        assert main([*command, *remote]) == 0
    finally:
        server.stop()
    assert len(converted) == 1 and pl.read_parquet(out).height == 2


def test_prefer_refuses_the_judge_before_reading_either_run(tmp_path, monkeypatch, capsys):
    """`ragframe prefer` with a named model and no key: exit 2 on one line, neither run read."""
    from ragframe.cli import main, prefer

    no_judge_named(monkeypatch, tmp_path)
    read: list[str] = []
    real = prefer._read
    monkeypatch.setattr(prefer, "_read", lambda path: read.append(path) or real(path))
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    frame(2).with_row_index("id").write_parquet(a)
    frame(2).with_row_index("id").write_parquet(b)
    out = tmp_path / "pairs.parquet"
    command = ["prefer", str(a), str(b), "--on", "id", "-o", str(out), "--model", "gpt-4o-mini"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "gpt-4o-mini" in err and len(err.strip().splitlines()) == 1
    assert read == [] and not out.exists()


def test_max_text_chars_is_a_judge_option_with_the_judges_default():
    """--max-text-chars comes with the shared judge options (so `ragframe score` and a jury's
    every judge get it), its default the Judge's own, its value passed as given."""
    import argparse
    import inspect

    from ragframe.cli import options
    from ragframe.judge.config import JudgeConfig

    default = inspect.signature(JudgeConfig.__init__).parameters["max_text_chars"].default
    assert default == options.MAX_TEXT_CHARS
    parser = argparse.ArgumentParser()
    options.add_judge_options(parser)
    given = ["--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--no-cache"]
    assert options.judge_from_args(parser.parse_args(given)).max_text_chars == default
    cut = parser.parse_args([*given, "--max-text-chars", "12"])
    assert options.judge_from_args(cut).max_text_chars == 12
