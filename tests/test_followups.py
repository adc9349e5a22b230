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
