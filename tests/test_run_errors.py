"""Errors a run can know of before its first request, and what the command line exits with.

A judge that cannot serve a metric (no embedding model, no logprobs) stops the run before any
request; an endpoint that refuses the run is one line naming the endpoint, the model and the
fix (status 2); a run in which some metric failed on every row it could score exits 4, with
the output written all the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for, reply, task_name

import ragframe
from ragframe import ConfigError, Judge
from ragframe.cli import endpoint_error, main
from ragframe.engine.prepare import EXIT_METRIC_FAILED
from ragframe.errors import EndpointError
from ragframe.judge import capabilities
from ragframe.judge.capabilities import missing_capabilities, unserved
from ragframe.metrics import AnswerCorrectness, GEval
from ragframe.testing.server import FakeServer, Reply, auto_answer

KEY = "sk-test-not-a-real-key"


def rows(n: int = 4) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What is topic {i}?" for i in range(n)],
            "answer": [f"Topic {i} is a thing. It is blue." for i in range(n)],
            "contexts": [[f"Topic {i} is a blue thing."] for i in range(n)],
            "ground_truth": [f"Topic {i} is blue." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def score_argv(server: FakeServer, tmp_path: Path, metrics: str, *extra: str) -> list[str]:
    source = tmp_path / "in.parquet"
    if not source.exists():
        rows().write_parquet(source)
    return [
        "score", str(source), "-o", str(tmp_path / "out.parquet"), "--metrics", metrics,
        "--model", "fake-judge", "--base-url", server.base_url, "--no-cache", "--no-progress",
        *extra,
    ]  # fmt: skip


# --------------------------------------------------------------- capabilities, before requests


def test_no_embedding_model_stops_before_any_request(server, tmp_path, clean_env, capsys):
    """A custom endpoint with no embedding model: answer_relevancy (and answer_correctness with
    its embedding weight) is refused by run, estimate and the command line, dry run or not,
    and the server sees nothing, not even the chat requests of the other metrics. (With the
    local embedder installed it would serve; here it is not.)"""
    clean_env.setattr(capabilities, "_local_embedder_installed", lambda: False)
    judge = judge_for(server, tmp_path, embedding_model=None)
    metrics = ["faithfulness", "answer_relevancy"]
    with pytest.raises(ConfigError, match="answer_relevancy needs an embedding model"):
        ragframe.run(rows(), metrics, judge=judge)
    with pytest.raises(ConfigError, match="answer_correctness needs an embedding model"):
        ragframe.run(rows(), [AnswerCorrectness()], judge=judge)
    with pytest.raises(ConfigError, match="--embedding-model"):
        ragframe.estimate(rows(), metrics, judge=judge)
    clean_env.setenv("OPENAI_API_KEY", KEY)
    for extra in ((), ("--dry-run",)):
        assert main(score_argv(server, tmp_path, "faithfulness,answer_relevancy", *extra)) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "answer_relevancy needs an embedding" in err
        assert "Nothing was sent" in err
    batch = [
        "batch", "submit", str(tmp_path / "in.parquet"), "--manifest", str(tmp_path / "m.json"),
        "--metrics", "faithfulness,answer_relevancy", "--model", "fake-judge",
        "--base-url", server.base_url, "--cache", str(tmp_path / "c.sqlite3"),
    ]  # fmt: skip
    assert main(batch) == 2 and "answer_relevancy needs an embedding" in capsys.readouterr().err
    # The streamed file scorer, called from Python, checks the judge before reading a row.
    from ragframe.engine.stream import score_file

    with pytest.raises(ConfigError, match="answer_relevancy needs an embedding model"):
        score_file(tmp_path / "in.parquet", tmp_path / "out.parquet", metrics, judge=judge)
    assert server.count("") == 0 and not (tmp_path / "out.parquet").exists()


def test_a_metric_that_needs_no_embeddings_runs_without_them(server, tmp_path, clean_env):
    """AnswerCorrectness with weights (1, 0) declares no embedding need, so it runs."""
    judge = judge_for(server, tmp_path, embedding_model=None)
    scored = ragframe.run(rows(2), [AnswerCorrectness(weights=(1.0, 0.0))], judge=judge).frame
    assert scored["answer_correctness"].null_count() == 0
    assert server.count("/embeddings") == 0 and server.count() > 0


class DeclaredNeeds(GEval):
    """A metric that declares its needs itself, through `needs()`."""

    def needs(self) -> set[str]:
        return {capabilities.CHAT, capabilities.LOGPROBS}


def test_logprobs_needed_but_not_served_stops_before_any_request(server, tmp_path, clean_env):
    metric = GEval(criteria="Be correct.")
    metric.needs_logprobs = True  # what GEval(require_logprobs=True) sets
    judge = judge_for(server, tmp_path, logprobs=False)  # a judge known to give none
    with pytest.raises(ConfigError, match="g_eval needs logprobs"):
        ragframe.run(rows(), [metric], judge=judge)
    with pytest.raises(ConfigError, match="g_eval needs logprobs"):
        ragframe.estimate(rows(), [metric], judge=judge)
    assert server.count("") == 0
    # An endpoint known to ignore logprobs; a G-Eval that falls back to integers is fine there.
    anthropic = Judge("m", base_url="https://api.anthropic.com/v1", api_key=KEY, cache=False)
    assert "ignores logprobs" in " ".join(missing_capabilities(anthropic, [metric]))
    assert missing_capabilities(anthropic, [GEval(criteria="Be correct.")]) == []
    assert "g_eval needs logprobs" in " ".join(
        missing_capabilities(anthropic, [DeclaredNeeds(criteria="Be correct.")])
    )


def test_local_judge_embeddings_follow_the_local_embedder(clean_env):
    """The embedded judge embeds with the local MiniLM when it is installed, else it has none."""
    clean_env.setattr("ragframe.judge.local.local_judge_available", lambda: True)
    judge = Judge(cache=False)
    assert judge.local
    clean_env.setattr(capabilities, "_local_embedder_installed", lambda: True)
    assert capabilities.EMBEDDINGS not in unserved(judge)
    clean_env.setattr(capabilities, "_local_embedder_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'ragframe\[local\]'"):
        ragframe.estimate(rows(), ["answer_relevancy"], judge=judge)
    clean_env.setattr("ragframe.judge.local.local_judge_available", lambda: False)
    assert "not installed" in unserved(judge)[capabilities.CHAT]


# -------------------------------------------------------------------------- the endpoint refuses


@pytest.mark.parametrize(
    ("status", "fix"),
    [(401, "API key"), (404, "--model")],
)
def test_a_refusing_endpoint_is_one_line_with_endpoint_model_and_fix(
    server, tmp_path, clean_env, capsys, status, fix
):
    clean_env.setenv("OPENAI_API_KEY", KEY)
    server.handler = lambda body: Reply(status=status, content=f"refused for key {KEY}")
    assert main(score_argv(server, tmp_path, "context_recall")) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    host = server.base_url.split("//")[1].split("/")[0]
    assert host in lines[0] and "fake-judge" in lines[0] and fix in lines[0]
    assert KEY not in err and KEY[:8] not in err
    assert server.count() <= 4  # no retries of a refused key or model: at most one per row


def test_endpoint_error_line_names_what_the_message_lacks():
    judge = Judge("fake-judge", base_url="http://127.0.0.1:9/v1", api_key=KEY, cache=False)
    line = str(endpoint_error(EndpointError("connection refused\n(every first attempt)"), judge))
    assert "\n" not in line and "http://127.0.0.1:9/v1" in line and "'fake-judge'" in line
    assert "check --base-url" in line
    said = "127.0.0.1:9 refused model fake-judge; fix: start the server"
    assert str(endpoint_error(EndpointError(said), judge)) == said  # nothing to add


# --------------------------------------------------------------------- every row of a metric failed


def test_a_metric_failed_on_every_row_exits_4_and_writes_the_output(
    server, tmp_path, clean_env, capsys
):
    """context_recall fails on every row that had a ground truth (a 400 for each); the row
    without one is missing input and does not count; faithfulness scores. Exit 4, output
    written, the failed metric and its first error on stderr."""
    clean_env.setenv("OPENAI_API_KEY", KEY)

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) == "context_recall_attribute":
            return Reply(status=400, content="prompt is too long for this model")
        return auto_answer(body)

    server.handler = handler
    data = rows(4).with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(None)
        .otherwise("ground_truth")
        .alias("ground_truth")
    )
    data.write_parquet(tmp_path / "in.parquet")
    rc = main(score_argv(server, tmp_path, "faithfulness,context_recall"))
    err = capsys.readouterr().err
    assert rc == EXIT_METRIC_FAILED == 4
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert out["faithfulness"].null_count() == 0 and out["context_recall"].null_count() == 4
    assert "context_recall failed on every row" in err and "prompt is too long" in err
    assert "faithfulness failed" not in err and "was written" in err


def test_missing_inputs_and_answers_with_nothing_to_score_are_not_failures(
    server, tmp_path, clean_env, capsys
):
    """Every faithfulness row is null, but for reasons of the data: missing answers, and
    answers in which the judge found no claim, with no failed request. Exit 0."""
    clean_env.setenv("OPENAI_API_KEY", KEY)

    def handler(body: dict[str, Any]) -> Any:
        if task_name(body) == "answer_claims":
            return reply({"claims": []})
        return auto_answer(body)

    server.handler = handler
    data = rows(4).with_columns(
        pl.when(pl.int_range(pl.len()) < 2).then(None).otherwise("answer").alias("answer")
    )
    data.write_parquet(tmp_path / "in.parquet")
    assert main(score_argv(server, tmp_path, "faithfulness")) == 0
    assert pl.read_parquet(tmp_path / "out.parquet")["faithfulness"].null_count() == 4
    assert "failed on every row" not in capsys.readouterr().err


def test_summary_shows_downgrades_rate_limit_pauses_and_cut_texts():
    from ragframe.cli import format_summary

    summary = {
        "metrics": {"faithfulness": {"mean": 0.5, "scored": 2, "failed": 0, "direction": "higher"}},
        "rows": 2,
        "requests": 5,
        "cache_hits": 0,
        "deduplicated": 0,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "seconds": 1.0,
        "retries": {"429": 3},
        "failures": {},
        "structured_downgrades": [
            {"from": "json_schema", "to": "json_object", "reason": "HTTP 400: response_format\nno"}
        ],
        "rate_limit_pauses": 3,
        "rate_limit_paused_s": 4.25,
        "embedding_texts_cut": 2,
    }
    text = format_summary(summary, local=False)
    assert "json_schema -> json_object (HTTP 400: response_format no)" in text
    assert "paused 3 times, 4.2 s in all" in text
    assert "cut to the embedding model's limit: 2" in text
    quiet = {
        **summary,
        "structured_downgrades": [],
        "rate_limit_pauses": 0,
        "embedding_texts_cut": 0,
    }
    assert "downgraded" not in format_summary(quiet, local=False)
    assert "paused" not in format_summary(quiet, local=False)


def test_credentials_in_the_base_url_never_reach_metadata_or_errors(tmp_path, clean_env, capsys):
    """user:password@ in --base-url (a proxy's basic auth) is a credential like the API key:
    the host goes into metadata and messages, the credential never does."""
    with FakeServer() as server:
        host = server.base_url.split("/")[2]
        url = server.base_url.replace("//", "//proxyuser:s3cret-pass@")
        judge = Judge("fake-judge", base_url=url, api_key=KEY, cache=False, progress=False)
        assert judge.endpoint_host == host and "s3cret" not in repr(judge)
        assert judge.public_base_url == server.base_url
        result = ragframe.run(rows(2), ["context_precision"], judge=judge)
        assert "s3cret" not in json.dumps(result.metadata(), default=str)
    # A dead endpoint with credentials in its URL: the one-line error names the host only.
    dead = "http://proxyuser:s3cret-pass@127.0.0.1:9/v1"
    argv = ["score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet")]
    rows(2).write_parquet(argv[1])
    argv += ["--metrics", "context_precision", "--model", "m", "--base-url", dead]
    clean_env.setenv("OPENAI_API_KEY", KEY)
    assert main([*argv, "--no-cache", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "s3cret" not in err and "proxyuser" not in err
    # An unknown model: the hint names the models route, without the credentials.
    with FakeServer(lambda body: Reply(status=404, content="no such model")) as missing:
        url = missing.base_url.replace("//", "//proxyuser:s3cret-pass@")
        judge = Judge("nope", base_url=url, api_key=KEY, cache=False, progress=False)
        with pytest.raises(EndpointError) as caught:
            ragframe.run(rows(1), ["context_precision"], judge=judge)
    assert f"GET {missing.base_url}/models" in str(caught.value)
    assert "s3cret" not in str(caught.value)
