"""The judge's transport: an endpoint that cannot serve the run, structured-output refusals,
429 storms, secrets in odd replies, embedding batches with one bad text, cache reads.

Most tests ask the judge directly (`JudgeSession.ask` with a one-field task) so that what is
checked is the transport, whatever the metrics do; counts are taken at the scripted server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import DATA, judge_for, task_name, user_text

import ragframe
from ragframe import Judge
from ragframe.errors import EndpointError, JudgeError, RagframeError
from ragframe.judge.cache import AnswerCache
from ragframe.judge.client import Answer, RunStats
from ragframe.judge.task import Task
from ragframe.testing.server import (
    FakeServer,
    Reply,
    _Out,
    auto_answer,
    error_body,
    messages_hash,
)

TASK = Task(
    name="probe.verdict",
    system="Judge the text.",
    schema={
        "type": "object",
        "properties": {"verdict": {"type": "string"}},
        "required": ["verdict"],
        "additionalProperties": False,
    },
)


def prompts(n: int, tag: str = "P") -> list[str]:
    return [f"<text>{tag}{i:04d}</text>" for i in range(n)]


def ask(
    judge: Judge, texts: Sequence[str], task: Task = TASK
) -> tuple[list[Answer] | None, RunStats, RagframeError | None]:
    """Ask `texts` in one session: (answers or None, the session's stats, the error raised)."""

    async def go() -> tuple[list[Answer] | None, RunStats, RagframeError | None]:
        async with judge.session() as session:
            try:
                return await session.ask(task, texts), session.stats, None
            except RagframeError as err:
                return None, session.stats, err

    return asyncio.run(go())


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------- an endpoint that cannot serve the run


def test_a_refused_port_stops_the_run_at_once(tmp_path: Path) -> None:
    """Nothing listens: the run stops with EndpointError after the first wave of attempts,
    not after every request's retries, naming the endpoint, the model and the fix."""
    port = closed_port()
    judge = Judge(
        "judge-model",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="sk-test",
        cache=False,
        progress=False,
        concurrency=4,
    )
    t0 = time.monotonic()
    _, stats, error = ask(judge, prompts(100))
    seconds = time.monotonic() - t0
    assert isinstance(error, EndpointError), error
    message = str(error)
    assert f"127.0.0.1:{port}" in message and "'judge-model'" in message
    assert "check --base-url" in message and "\n" not in message
    assert stats.requests <= judge.concurrency + 1  # the first wave, then nothing
    assert seconds < 5  # before: 6 attempts per request, about 15 s


def test_connection_errors_after_a_success_are_ordinary_faults(tmp_path: Path) -> None:
    """Once a request of the session has been answered, refused connections are retried
    like any transient fault and fail only their rows: the endpoint did serve this run."""
    server = FakeServer().start()
    judge = judge_for(server, tmp_path, max_attempts=2, concurrency=2)

    async def go() -> tuple[list[Answer], list[Answer]]:
        async with judge.session() as session:
            first = await session.ask(TASK, prompts(3, "A"))
            server.stop()  # from now on every connection is refused
            later = await session.ask(TASK, prompts(3, "B"))
            return first, later

    first, later = asyncio.run(go())
    assert all(a.error is None for a in first)
    for answer in later:
        assert answer.error is not None and "gave up after 2 attempts" in answer.error


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "check OPENAI_API_KEY"),
        (403, "check OPENAI_API_KEY"),
        (404, "check --model"),
    ],
)
def test_a_rejected_key_or_unknown_model_stops_the_run_without_retries(
    tmp_path: Path, status: int, words: str
) -> None:
    """401/403 (the key) and 404 (the model) are never retried: the run stops with one line
    naming the endpoint, the model and the fix, whatever fail_fast says, and the server sees
    at most the requests that were already in flight."""
    with FakeServer(lambda body: Reply(status=status, content="no.")) as server:
        judge = judge_for(server, tmp_path, concurrency=4, fail_fast=False)
        _, stats, error = ask(judge, prompts(50))
        sent = server.count()
        bodies = [messages_hash(r.body["messages"]) for r in server.requests if r.body]
    assert isinstance(error, EndpointError), error
    message = str(error)
    assert words in message and server.base_url.split("/")[2] in message
    assert "'fake-judge'" in message and "\n" not in message
    # No request was sent twice. (A request still in flight when the run stops may end in a
    # connection error as the client closes; it is not sent again.)
    assert sent <= judge.concurrency and len(set(bodies)) == len(bodies) == sent
    assert not [cause for cause in stats.retries if cause != "connection"]
    if status == 404:
        assert f"GET {server.base_url}/models" in message


def test_a_403_after_answers_fails_only_its_own_request(tmp_path: Path) -> None:
    """Once the endpoint has answered, a 403 is about that one request (OpenRouter refuses a
    moderation-flagged input so): its row fails with the server's words, sent once, and the
    run goes on; before, the run stopped, blaming the API key."""
    refusal = "Your chosen model requires moderation and your input was flagged"

    def handler(body: dict[str, Any]) -> Any:
        if "FLAG" in user_text(body):
            return Reply(status=403, content=refusal)
        return auto_answer(body)

    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path, concurrency=2)

        async def go() -> list[Answer]:
            async with judge.session() as session:
                await session.ask(TASK, prompts(3, "A"))
                return await session.ask(TASK, ["<text>FLAG</text>", *prompts(20, "B")])

        answers = asyncio.run(go())
        flagged = [r for r in server.requests if r.body and "FLAG" in user_text(r.body)]
    assert answers[0].error is not None and "flagged" in answers[0].error
    assert "OPENAI_API_KEY" not in answers[0].error
    assert all(a.error is None for a in answers[1:])
    assert len(flagged) == 1  # not retried


def test_an_invalid_key_after_answers_still_stops_the_run(tmp_path: Path) -> None:
    """A 401 `invalid_api_key` (a key revoked mid-run) fails every request alike: it stops
    the run even after answers."""
    body = error_body(401, "Incorrect API key provided", code="invalid_api_key")

    def handler(request: dict[str, Any]) -> Any:
        return Reply(status=401, content=body) if "B" in user_text(request) else None

    with FakeServer(lambda b: handler(b) or auto_answer(b)) as server:
        judge = judge_for(server, tmp_path, concurrency=1, fail_fast=False)

        async def go() -> RagframeError | None:
            async with judge.session() as session:
                await session.ask(TASK, prompts(2, "A"))
                try:
                    await session.ask(TASK, prompts(20, "B"))
                except RagframeError as err:
                    return err
            return None

        error = asyncio.run(go())
        later = [r for r in server.requests if r.body and "B" in user_text(r.body)]
    assert isinstance(error, EndpointError) and "check OPENAI_API_KEY" in str(error)
    assert len(later) == 1


def test_an_exhausted_quota_stops_the_run(tmp_path: Path) -> None:
    """OpenAI's 429 `insufficient_quota` is not a rate limit to wait out: it stops the run."""
    body = error_body(429, "You exceeded your current quota", code="insufficient_quota")
    with FakeServer(lambda _: Reply(status=429, content=body)) as server:
        judge = judge_for(server, tmp_path, concurrency=2)
        _, _, error = ask(judge, prompts(20))
        sent = server.count()
    assert isinstance(error, EndpointError) and "quota" in str(error)
    assert sent <= judge.concurrency


class EmbeddingsServer(FakeServer):
    """A fake server whose embeddings route can refuse: any input containing POISON gets a
    400 naming it (as OpenAI does for an input it cannot take), and `embeddings_status`
    answers every embeddings request with that status. Records each request's inputs."""

    def __init__(self, *args: Any, embeddings_status: int = 200, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.embeddings_status = embeddings_status
        self.inputs: list[list[str]] = []

    def _embeddings(self, body: dict[str, Any], fault: str | None) -> tuple[str | None, _Out]:
        texts = body.get("input")
        self.inputs.append(list(texts) if isinstance(texts, list) else [texts])
        if self.embeddings_status != 200:
            return None, _Out(self.embeddings_status, error_body(self.embeddings_status, "no."))
        bad = [t for t in self.inputs[-1] if "POISON" in t]
        if bad:
            return None, _Out(400, error_body(400, f"'$.input' is invalid: {bad[0]!r}"))
        return super()._embeddings(body, fault)


def embed(judge: Judge, texts: Sequence[str]) -> tuple[np.ndarray | None, dict[str, str], Any]:
    async def go() -> tuple[np.ndarray | None, dict[str, str], Any]:
        async with judge.session() as session:
            try:
                return await session.embed(texts), session.embedding_errors, session.stats
            except RagframeError as err:
                return None, session.embedding_errors, err

    return asyncio.run(go())


def test_an_unknown_embedding_model_stops_the_run(tmp_path: Path) -> None:
    with EmbeddingsServer(embeddings_status=404) as server:
        judge = judge_for(server, tmp_path, embedding_model="no-such-embedder")
        vectors, _, error = embed(judge, [f"text {i}" for i in range(300)])
    assert vectors is None and isinstance(error, EndpointError)
    assert "'no-such-embedder'" in str(error) and "check --model" in str(error)
    assert len(server.inputs) <= 3  # one per chunk of 128 texts, none retried


def test_cli_exits_2_at_once_on_a_refused_port(tmp_path: Path) -> None:
    """The issue's command: `ragframe score data/sample.parquet --base-url
    http://127.0.0.1:PORT/v1` against nothing: exit status 2, one line, no output file."""
    target = tmp_path / "out.parquet"
    command = [
        sys.executable, "-m", "ragframe.cli", "score", str(DATA / "sample.parquet"),
        "-o", str(target), "--model", "m", "--metrics", "context_precision", "--no-cache",
        "--no-progress",
        "--base-url", f"http://127.0.0.1:{closed_port()}/v1",
    ]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test"}
    t0 = time.monotonic()
    child = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    seconds = time.monotonic() - t0
    assert child.returncode == 2, child.stderr
    assert len(child.stderr.strip().splitlines()) == 1 and "check --base-url" in child.stderr
    assert not target.exists()
    assert seconds < 30  # start-up included; before: 15 s of retries, then exit 0


# ------------------------------------------------------------------ structured output


def test_a_400_that_mentions_a_format_falls_back_for_that_request_only(tmp_path: Path) -> None:
    """A 400 that only mentions a "format" (here, of a message) is not a refusal of
    response_format: that one request is tried once in the next weaker mode, then fails
    alone; the run keeps json_schema for every other request."""
    refusal = "Invalid 'messages[1].content': unsupported format"

    def handler(body: dict[str, Any]) -> Any:
        if "BAD" in user_text(body):
            return Reply(status=400, content=refusal)
        return auto_answer(body)

    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path, concurrency=1)
        answers, stats, error = ask(judge, ["<text>BAD</text>", *prompts(5)])
        bodies = server.chat_attempts
    assert error is None and answers is not None
    assert answers[0].error is not None and "unsupported format" in answers[0].error
    assert all(a.error is None for a in answers[1:])
    bad = [b for b in bodies if "BAD" in user_text(b)]
    assert [b["response_format"]["type"] for b in bad] == ["json_schema", "json_object"]
    others = [b for b in bodies if "BAD" not in user_text(b)]
    assert {b["response_format"]["type"] for b in others} == {"json_schema"}
    assert stats.structured_mode == "json_schema" and stats.downgrades == []
    assert stats.retries["structured_fallback"] == 1


def test_a_schema_the_server_cannot_compile_is_answered_in_a_weaker_mode(tmp_path: Path) -> None:
    """vLLM refuses one schema it cannot compile; that request is answered in json_object
    mode, and the run stays in json_schema for the schemas the server does take."""
    message = "The provided JSON schema contains features not supported by xgrammar."

    def handler(body: dict[str, Any]) -> Any:
        kind = body.get("response_format", {}).get("type")
        if "HARD" in user_text(body) and kind == "json_schema":
            return Reply(status=400, content=message)
        return auto_answer(body)

    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path, concurrency=1)
        answers, stats, _ = ask(judge, ["<text>HARD</text>", *prompts(3)])
        later = [task_name(b) for b in server.chat_requests[1:]]
    assert answers is not None and all(a.error is None for a in answers)
    assert stats.structured_mode == "json_schema" and stats.downgrades == []
    assert later == ["probe_verdict"] * 3  # json_schema requests, by name


def test_one_requests_fallback_refused_does_not_downgrade_the_run(tmp_path: Path) -> None:
    """A schema the server cannot compile sends its request to json_object, which this
    server refuses as a parameter: that request steps down to prompt alone; the run keeps
    json_schema (every other task is served in it) and records no downgrade."""
    hard = Task(name="hard.task", system="Judge hard.", schema=TASK.schema)
    refusal = "Invalid schema for response_format 'hard_task': too many nested levels"

    def handler(body: dict[str, Any]) -> Any:
        kind = body.get("response_format", {}).get("type")
        if kind == "json_schema" and task_name(body) == "hard_task":
            return Reply(status=400, content=refusal)
        return auto_answer(body)

    with FakeServer(handler, reject_json_object=True) as server:
        judge = judge_for(server, tmp_path, concurrency=1)

        async def go() -> tuple[list[Answer], RunStats]:
            async with judge.session() as session:
                await session.ask(hard, ["<text>H</text>"])
                return await session.ask(TASK, prompts(3)), session.stats

        answers, stats = asyncio.run(go())
        bodies = server.chat_attempts
    kinds = [(b.get("response_format") or {}).get("type", "prompt") for b in bodies]
    hard_kinds = [k for b, k in zip(bodies, kinds, strict=True) if "<text>H<" in user_text(b)]
    assert hard_kinds[:3] == ["json_schema", "json_object", "prompt"]
    assert kinds[len(hard_kinds) :] == ["json_schema"] * 3  # the other task, after it
    assert all(a.error is None for a in answers)
    assert stats.structured_mode == "json_schema" and stats.downgrades == []


REFUSALS = {
    "openai": (
        400,
        "Invalid parameter: 'response_format' of type 'json_schema' is not supported with "
        "this model. Learn more about supported models at the Structured Outputs guide",
        None,
    ),
    "llama.cpp": (
        400,
        'response_format type must be one of "text" or "json_object", but got: json_schema',
        None,
    ),
    "llama.cpp-500": (
        500,
        'response_format type must be one of "text" or "json_object", but got: json_schema',
        None,
    ),
    "gateway": (
        400,
        "The parameter `response_format.type` specified in the request are not valid: invalid "
        "value: `json_schema`, supported values are: `json_object` and `text`.",
        "response_format.type",
    ),
    "ollama": (400, 'invalid format: expected "json" or a JSON schema', None),
    "plain": (422, "json_schema is not supported by this backend", None),
}


@pytest.mark.parametrize("server_kind", sorted(REFUSALS))
def test_a_refusal_of_response_format_downgrades_the_run_and_says_why(
    tmp_path: Path, server_kind: str
) -> None:
    """Servers that refuse json_schema itself, as they word it: the run moves to json_object
    (every row answered), and the summary records from, to and the server's reason."""
    status, message, param = REFUSALS[server_kind]

    def handler(body: dict[str, Any]) -> Any:
        if body.get("response_format", {}).get("type") == "json_schema":
            return Reply(status=status, content=error_body(status, message, param=param))
        return auto_answer(body)

    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path, concurrency=2)
        answers, stats, _ = ask(judge, prompts(12))
        kinds = [b["response_format"]["type"] for b in server.chat_attempts]
    assert answers is not None and all(a.error is None for a in answers)
    assert stats.structured_mode == "json_object"
    [downgrade] = stats.downgrades
    assert downgrade["from"] == "json_schema" and downgrade["to"] == "json_object"
    assert message[:40] in downgrade["reason"]
    assert stats.as_dict()["structured_downgrades"] == [downgrade]
    assert kinds.count("json_schema") <= judge.concurrency  # those in flight, then none


# ---------------------------------------------------------------------------- 429 storms


def throttle_once(marker: str, *, retry_after: str) -> Any:
    """A handler that answers the first request holding `marker` with a 429 carrying
    `Retry-After`, and every other request (that one's retry included) with a valid answer."""
    seen: set[str] = set()

    def handler(body: dict[str, Any]) -> Any:
        text = user_text(body)
        if marker in text and text not in seen:
            seen.add(text)
            return Reply(status=429, headers={"Retry-After": retry_after}, content="slow down")
        return auto_answer(body)

    return handler


def test_a_429_pauses_the_whole_pool(tmp_path: Path) -> None:
    """One 429 with Retry-After: 1 stops every slot, not just the request that got it: in
    the second that follows, the server sees no request but those already in flight."""
    with FakeServer(throttle_once("P0010", retry_after="1"), latency=0.05) as server:
        judge = judge_for(server, tmp_path, concurrency=4)
        answers, stats, _ = ask(judge, prompts(40))
        records = list(server.requests)
    assert answers is not None and all(a.error is None for a in answers)
    [throttled] = [r for r in records if r.status == 429]
    assert throttled.ended is not None
    during = [r for r in records if throttled.ended < r.started < throttled.ended + 0.9]
    # Without the pause, the other three slots would have sent about 50 requests meanwhile.
    assert len(during) <= judge.concurrency - 1
    assert stats.rate_limit_pauses == 1 and stats.retries["429"] == 1


def test_a_long_retry_after_pauses_the_pool_no_longer_than_rate_limit_wait(
    tmp_path: Path,
) -> None:
    """A 429 asking for 30 s while rate_limit_wait is 1 s: the pool pauses 1 s, not 30,
    and every request that waited the pause out is then sent and answered; before, the run
    idled 30 s and then failed the requests that had waited."""
    with FakeServer(throttle_once("P0000", retry_after="30"), latency=0.05) as server:
        judge = judge_for(server, tmp_path, concurrency=4, rate_limit_wait=1)
        t0 = time.monotonic()
        answers, stats, error = ask(judge, prompts(20))
        seconds = time.monotonic() - t0
        records = list(server.requests)
    assert error is None and answers is not None
    assert [a.error for a in answers if a.error] == []
    assert len(records) == 21  # each prompt answered once, P0000 after its 429
    [throttled] = [r for r in records if r.status == 429]
    assert throttled.ended is not None
    during = [r for r in records if throttled.ended < r.started < throttled.ended + 0.8]
    assert len(during) <= judge.concurrency - 1  # the pool did pause
    assert stats.rate_limit_pauses == 1 and stats.rate_limit_paused_s <= 1.0 + 1e-6
    assert seconds < 15  # generous: about 1.5 s; before, 30 s


def test_a_pause_beyond_the_requests_budget_fails_it_before_sleeping(tmp_path: Path) -> None:
    """A request that already waited its rate_limit_wait and is throttled again fails at
    once, saying Retry-After and rate_limit_wait; the requests after it wait the pause out
    and are answered."""
    throttles: dict[str, int] = {}

    def handler(body: dict[str, Any]) -> Any:
        text = user_text(body)
        if "P0000" in text:
            throttles[text] = throttles.get(text, 0) + 1
            return Reply(status=429, headers={"Retry-After": "30"}, content="slow down")
        return auto_answer(body)

    with FakeServer(handler) as server:
        judge = judge_for(server, tmp_path, concurrency=1, rate_limit_wait=0.5)
        answers, _, error = ask(judge, prompts(4))
    assert error is None and answers is not None
    reason = answers[0].error
    assert reason is not None and "Retry-After" in reason and "rate_limit_wait=0.5" in reason
    assert sum(throttles.values()) == 2  # one pause waited out, then refused before the next
    assert all(a.error is None for a in answers[1:])


STORM_SECONDS = 60.0


def test_a_minute_of_429s_loses_no_row(tmp_path: Path) -> None:
    """From the 40th request on, the endpoint answers 429 (no Retry-After) to everything
    for a minute, then serves again. Every row scores; the pool waits the storm out with
    one probe at a time (the server counts a few requests in that minute, not a hammering);
    the 429s do not use up max_attempts."""
    storm: dict[str, float] = {}
    arrivals = itertools.count(1)

    def handler(body: dict[str, Any]) -> Any:
        now = time.monotonic()
        if next(arrivals) == 40:
            storm["start"] = now
        if "start" in storm and now - storm["start"] < STORM_SECONDS:
            return Reply(status=429, content="Rate limit reached, retry later")
        return auto_answer(body)

    frame = pl.DataFrame(
        {
            "question": [f"Question {i}?" for i in range(120)],
            "answer": [f"Answer {i}." for i in range(120)],
            "contexts": [[f"Context {i}a.", f"Context {i}b."] for i in range(120)],
            "ground_truth": [f"Truth {i}." for i in range(120)],
        }
    )
    with FakeServer(handler, latency=0.02) as server:
        judge = judge_for(server, tmp_path, concurrency=8, backoff_base=0.5, backoff_max=8.0)
        t0 = time.monotonic()
        result = ragframe.run(frame, ["context_precision"], judge=judge)
        seconds = time.monotonic() - t0
        records = list(server.requests)
    scores = result.frame.get_column("context_precision")
    assert scores.null_count() == 0  # no row lost
    throttled = sorted(r.started for r in records if r.status == 429)
    assert throttled and throttled[-1] - throttled[0] > STORM_SECONDS - 10  # the storm lasted
    # The first 429s come back to the requests already in flight; after that the pool sends
    # one probe per pause, pauses doubling from 0.25-0.5 s up to 4-8 s.
    settled = [t for t in throttled if t > throttled[0] + 2.0]
    assert len(throttled) <= judge.concurrency + 25
    assert all(b - a > 0.2 for a, b in itertools.pairwise(settled))
    assert result.stats.retries["429"] == len(throttled)
    assert result.stats.rate_limit_pauses >= 5
    print(f"\nSTORM {len(throttled)} 429s in {STORM_SECONDS:g} s; run took {seconds:.1f} s")


# ----------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("where", ["early", "across_the_cut"])
def test_a_key_echoed_in_an_html_reply_never_leaks(tmp_path: Path, where: str) -> None:
    """A 200 whose body is a proxy's HTML page echoing the API key: the row error, the stats
    and the fail_fast exception quote the page without the key, whole or in part (also
    when the key straddles the 200 characters quoted)."""
    key = "sk-test-SECRET-" + "0123456789abcdef" * 2
    pad = "x" * (170 if where == "across_the_cut" else 10)  # the key starts at 185
    page = f"<html>{pad} Bad key {key} from proxy</html>".encode()
    with FakeServer(lambda body: Reply(raw_body=page)) as server:
        judge = judge_for(server, tmp_path, api_key=key, max_attempts=2)
        answers, stats, _ = ask(judge, prompts(2))
        judge = judge_for(server, tmp_path, api_key=key, max_attempts=1, fail_fast=True)
        _, _, error = ask(judge, prompts(1))
    assert answers is not None
    for answer in answers:
        assert answer.error is not None and "not a chat completion" in answer.error
    assert isinstance(error, JudgeError)
    texts = [a.error or "" for a in answers]
    texts += [json.dumps(stats.as_dict()), str(error), repr(error)]
    texts.append("".join(traceback.format_exception(error)))
    for text in texts:
        assert key not in text and key[:12] not in text and key[-10:] not in text, text


# -------------------------------------------------------------------------- embeddings


def test_one_bad_text_fails_only_its_own_row(tmp_path: Path) -> None:
    """Of 40 texts in one batch, the endpoint refuses one: the batch is split until that
    text is alone, and only it gets no vector, with the server's reason. Blank texts are
    not sent (their reason says so), and a text past the input limit goes cut to it."""
    good = [f"text number {i}" for i in range(40)]
    long = "L" * 500
    texts = [*good[:20], "POISON here", *good[20:], "   ", "", long]
    with EmbeddingsServer() as server:
        judge = judge_for(server, tmp_path, embedding_max_tokens=50)  # 100 characters
        vectors, errors, stats = embed(judge, texts)
        sent = list(server.inputs)
    assert vectors is not None and vectors.shape[0] == len(texts)
    bad = {texts.index("POISON here"), texts.index("   "), texts.index("")}
    for i, row in enumerate(vectors):
        assert np.isnan(row).all() == (i in bad), i
        if i not in bad:
            assert math.isclose(float(np.linalg.norm(row)), 1.0, rel_tol=1e-5)
    assert "'$.input' is invalid" in errors["POISON here"]
    assert "blank" in errors["   "] and "blank" in errors[""]
    assert set(errors) == {"POISON here", "   ", ""}
    flat = [t for batch in sent for t in batch]
    assert not any(not t.strip() for t in flat)  # blank texts never sent
    assert max(len(t) for t in flat) == 100 and "L" * 100 in flat  # cut to the limit
    assert stats.embedding_texts_cut == 1
    # Split in halves: at most two requests per level of a 42-text batch (6 levels).
    assert len(sent) <= 1 + 2 * math.ceil(math.log2(42))


def test_a_refusal_of_the_whole_batch_is_not_split_text_by_text(tmp_path: Path) -> None:
    """Every embeddings request gets the same 400 (the model does not embed, say): the
    halves repeat their parent's refusal, so the chunk fails with it after O(log n)
    requests, not 2n-1 = 255 for 128 texts."""
    texts = [f"text number {i}" for i in range(128)]
    with EmbeddingsServer(embeddings_status=400) as server:
        judge = judge_for(server, tmp_path)
        vectors, errors, _ = embed(judge, texts)
        sent = len(server.inputs)
    assert vectors is not None and np.isnan(vectors).all()
    assert set(errors) == set(texts)
    assert all("HTTP 400" in reason and "no." in reason for reason in errors.values())
    assert sent <= 2 * math.log2(len(texts)) + 2, sent


# ------------------------------------------------------------------------------- cache


def test_cache_reads_stay_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session reads answers and vectors through the cache's async reads, never its
    blocking ones on the event loop (a slow disk or a locked file would stall every
    request in flight)."""
    on_loop: list[str] = []

    def guarded(real: Any) -> Any:
        def read(self: AnswerCache, keys: Sequence[str]) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop.append(real.__name__)
            except RuntimeError:
                pass  # a worker thread: fine
            return real(self, keys)

        return read

    def threaded(real: Any) -> Any:
        async def aread(self: AnswerCache, keys: Sequence[str]) -> Any:
            return await asyncio.to_thread(real, self, keys)

        return aread

    for name in ("get_many", "get_vectors"):
        real = getattr(AnswerCache, name)
        monkeypatch.setattr(AnswerCache, name, guarded(real))
        monkeypatch.setattr(AnswerCache, f"a{name}", threaded(real))

    async def go(judge: Judge) -> list[Answer]:
        async with judge.session() as session:
            await session.embed(["one", "two"])
            return await session.ask(TASK, prompts(3))

    with FakeServer() as server:
        for _ in range(2):  # the second run is served from the cache
            answers = asyncio.run(go(judge_for(server, tmp_path, cache=True)))
            assert all(a.error is None for a in answers)
        assert all(a.cached for a in answers)
    assert on_loop == []
