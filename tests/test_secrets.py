"""Credentials never leave the process: a password in the base URL, a secret query parameter
and the API key reach no message, log line, output, metadata, cache, manifest or report, on
success or on failure, through every subcommand.

`Judge` takes no custom headers, so there is no header secret to test: a header value can
reach ragframe only through the URL or the key, both covered here.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import user_text

import ragframe
from ragframe.cli import main
from ragframe.errors import ConfigError
from ragframe.judge import Judge
from ragframe.judge.cache import AnswerCache, SharedAnswerCache
from ragframe.judge.config import JudgeConfig, public_url
from ragframe.judge.results import Failure, RunStats
from ragframe.judge.transport import Secrets, Transport, scrub
from ragframe.testing.server import FakeServer, Reply, auto_answer

URL_SECRET = "S3CRET-URL-pw"
QUERY_SECRET = "S3CRET-QUERY-tok"
KEY_SECRET = "sk-S3CRET-KEY-7Qz9xWv2Kp4Lm8Rt"
SECRETS = (URL_SECRET, QUERY_SECRET, KEY_SECRET, KEY_SECRET[:8], KEY_SECRET[-6:])


def secret_url(base_url: str) -> str:
    """The fake server's URL with a user:password@ (the server ignores auth)."""
    scheme, _, rest = base_url.partition("://")
    return f"{scheme}://alice:{URL_SECRET}@{rest}"


def frame(n: int = 4) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(n)],
            "question": [f"What is topic {i}?" for i in range(n)],
            "answer": [f"Topic {i} is a thing. It is blue." for i in range(n)],
            "contexts": [[f"Topic {i} is a thing.", "Other text."] for i in range(n)],
            "ground_truth": [f"Topic {i} is a blue thing." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


class Leaks:
    """Runs commands and gathers everything they print or log, to scan at the end."""

    def __init__(self, capsys: Any, caplog: Any) -> None:
        self.capsys, self.caplog = capsys, caplog
        self.seen: list[tuple[str, str]] = []

    def run(self, *argv: str) -> int:
        try:
            rc = main(list(argv))
        except SystemExit as exit_:  # argparse errors
            rc = int(exit_.code or 0)
        out = self.capsys.readouterr()
        self.seen += [(f"{argv[:2]} stdout", out.out), (f"{argv[:2]} stderr", out.err)]
        return rc

    def scan(self, tmp_path: Path) -> None:
        self.seen.append(("logs", self.caplog.text))
        for path in sorted(tmp_path.rglob("*")):
            if path.is_file():
                self.seen.append((str(path), path.read_bytes().decode("utf-8", "replace")))
                if path.suffix == ".parquet":
                    meta = json.dumps(ragframe.read_metadata(path))
                    self.seen.append((f"{path} metadata", meta))
        found = [(where, s) for where, text in self.seen for s in SECRETS if s in text]
        assert not found, f"secrets found: {found}"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The key in the environment, the cache and every default path under tmp_path."""
    for name in ("OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY_SECRET)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache" / "answers.sqlite3"))
    work = tmp_path / "work"
    work.mkdir()
    frame().write_parquet(work / "in.parquet")
    return work


def test_public_url_removes_credentials() -> None:
    assert public_url(f"http://alice:{URL_SECRET}@h:1/v1") == "http://h:1/v1"
    shown = public_url(f"https://h/openai?api-version=1&api-key={QUERY_SECRET}&token=x")
    assert QUERY_SECRET not in shown and "api-version=1" in shown and "token=x" not in shown
    assert public_url(f"alice:{URL_SECRET}@h:1/v1") == "h:1/v1"  # no scheme
    assert public_url("http://h:1/v1") == "http://h:1/v1"


def test_no_model_error_names_the_endpoint_without_the_password() -> None:
    with pytest.raises(ConfigError, match="no judge model") as err:
        Judge(base_url=f"http://alice:{URL_SECRET}@127.0.0.1:1/v1", api_key=KEY_SECRET)
    assert URL_SECRET not in str(err.value) and "127.0.0.1:1" in str(err.value)


@pytest.fixture
def leaks(capsys: Any, caplog: Any) -> Leaks:
    caplog.set_level(logging.DEBUG)  # every library's log lines, httpx's URLs among them
    return Leaks(capsys, caplog)


#: A refused port, with a password and a secret query parameter.
REFUSED = f"http://alice:{URL_SECRET}@127.0.0.1:1/v1?token={QUERY_SECRET}"
METRICS = ("--metrics", "faithfulness,context_recall")


def judge_args(server: FakeServer) -> list[str]:
    # No secret query string here: the openai client appends its routes after one.
    return ["--model", "fake-judge", "--base-url", secret_url(server.base_url), "--no-progress"]


def test_score_keeps_the_secrets(server: FakeServer, env: Path, tmp_path: Path, leaks: Leaks):
    """Success, dry run, no model, a refused port, an endpoint that 404s every request."""
    w, judge = str(env), judge_args(server)
    assert leaks.run("score", f"{w}/in.parquet", "-o", f"{w}/a.parquet", *METRICS, *judge) == 0
    again = ("score", f"{w}/in.parquet", "-o", f"{w}/a.parquet", *METRICS, *judge, "--overwrite")
    assert leaks.run(*again, "--dry-run") == 0
    no_model = ("score", f"{w}/in.parquet", "-o", f"{w}/x.parquet", "--base-url", judge[3])
    assert leaks.run(*no_model) == 2
    down = ["--model", "fake-judge", "--base-url", REFUSED, "--no-progress", "--no-cache"]
    assert leaks.run("score", f"{w}/in.parquet", "-o", f"{w}/x.parquet", *down) == 2
    server.handler = lambda body: Reply(status=404, content="The model does not exist")
    assert leaks.run(*again, "--no-cache") == 2
    assert "127.0.0.1" in leaks.seen[-1][1]  # the endpoint is named, without its password
    bench = ("judge-bench", "--dry-run", "--limit", "3", "--model", "fake-judge")
    assert leaks.run(*bench, "--base-url", judge[3], "--no-progress") == 0
    assert (tmp_path / "cache" / "answers.sqlite3").exists()  # written, and scanned
    leaks.scan(tmp_path)


def test_batch_keeps_the_secrets(server: FakeServer, env: Path, tmp_path: Path, leaks: Leaks):
    """A whole run, status, collect, export; a submit to a refused port."""
    w, judge = str(env), judge_args(server)[:4]
    m = f"{w}/m.json"
    poll = ["--poll-interval", "0.05", "--wait", "60"]
    run = ("batch", "run", f"{w}/in.parquet", "-o", f"{w}/batch.parquet", "--manifest", m)
    assert leaks.run(*run, *METRICS, *judge, *poll) == 0
    assert leaks.run("batch", "status", "--manifest", m, *judge[2:]) == 0
    assert leaks.run("batch", "status", "--manifest", m, *judge[2:], "--json") == 0
    collect = ("batch", "collect", "--manifest", m, "-o", f"{w}/batch.parquet", "--overwrite")
    assert leaks.run(*collect, *judge[2:]) == 0
    export = ("batch", "export", f"{w}/in.parquet", "--jsonl", f"{w}/req.jsonl", *METRICS)
    assert leaks.run(*export, *judge) == 0
    submit = ("batch", "submit", f"{w}/in.parquet", "--manifest", f"{w}/m2.json", *METRICS)
    assert leaks.run(*submit, "--model", "fake-judge", "--base-url", REFUSED) == 2
    assert "127.0.0.1:1" in leaks.seen[-1][1]
    assert Path(m).exists() and Path(f"{w}/req.jsonl.manifest.json").exists()
    leaks.scan(tmp_path)


def test_file_subcommands_keep_the_secrets(
    server: FakeServer, env: Path, tmp_path: Path, leaks: Leaks
):
    """summarize, gate (pass and fail), compare, report and metrics on files scored with
    a password in the URL: nothing they print or write carries it."""
    w, judge = str(env), judge_args(server)
    for name in ("a", "b"):
        out = ("score", f"{w}/in.parquet", "-o", f"{w}/{name}.parquet", *METRICS, *judge)
        assert leaks.run(*out, "--seed", str(ord(name))) == 0
    a, b = f"{w}/a.parquet", f"{w}/b.parquet"
    assert leaks.run("summarize", a) == 0
    assert leaks.run("gate", a, "--fail-under", "faithfulness=0") == 0
    assert leaks.run("gate", a, "--fail-under", "faithfulness=1.0", "--min-pass-rate", "x") == 2
    assert leaks.run("compare", a, b, "--on", "id") == 0
    assert leaks.run("compare", a, f"{w}/missing.parquet") == 2
    assert leaks.run("report", a, "-o", f"{w}/report.html", "--against", b, "--on", "id") == 0
    assert leaks.run("metrics") == 0
    assert Path(f"{w}/report.html").exists()
    leaks.scan(tmp_path)


def test_cache_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """The cache holds every prompt: its directory 0700 and its files 0600, under umask 022."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "new" / "dir" / "answers.sqlite3"
        cache = AnswerCache(path)
        cache.put("k", "m", {"answer": 1})
        assert cache.get_many(["k"])  # written, so the -wal file exists too
        shard = SharedAnswerCache(tmp_path / "shards" / "x", "worker")
        shard.put("k", "m", {"answer": 1})
        assert shard.get_many(["k"])
    finally:
        os.umask(old)
    files = [*path.parent.iterdir(), *(tmp_path / "shards" / "x").iterdir()]
    assert any(f.name.endswith("-wal") for f in files), files
    for directory in (path.parent, path.parent.parent, tmp_path / "shards" / "x"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    cache.close()
    shard.close()


# ------------------------------------------------- an endpoint that echoes the credentials

#: A password that must be percent-encoded in a URL, and its user.
ECHO_USER, ECHO_PASSWORD = "alice-echo", "S3CRET/echo@pw"
QUOTE_SECRET = 'S3CRET q&t="x"'


def echoed_secrets(kind: str) -> list[str]:
    """Every form of the run's credential that must reach no file and no terminal."""
    if kind == "key":
        return [KEY_SECRET, KEY_SECRET[:8], KEY_SECRET[-6:]]
    token = base64.b64encode(f"{ECHO_USER}:{ECHO_PASSWORD}".encode()).decode()
    return [ECHO_USER, ECHO_PASSWORD, quote(ECHO_PASSWORD, safe=""), "S3CRET", token]


def echoing(secret: str) -> Callable[[dict[str, Any]], Any]:
    """A handler answering by the topic number a request judges: 0 a 400 (prompt too long),
    1 a 500, 2 a proxy's HTML page with status 200, 3 a valid answer whose reasons repeat
    `secret` (a proxy writing into the completion). With `echo_credentials` on, the server
    appends the request's credentials to the first three."""

    def handle(body: dict[str, Any]) -> Any:
        topic = int(re.findall(r"[Tt]opic (\d+)", user_text(body))[0])
        if topic % 4 == 0:
            return Reply(status=400, content="This model's maximum context length is 8192 tokens")
        if topic % 4 == 1:
            return Reply(status=500, content="upstream failed")
        if topic % 4 == 2:
            return Reply(raw_body=b"<html><body>Bad gateway</body></html>")
        answer = json.loads(auto_answer(body))
        for verdict in next(v for v in answer.values() if isinstance(v, list)):
            if isinstance(verdict, dict) and "reason" in verdict:
                verdict["reason"] += f" ({secret})"
        return json.dumps(answer)

    return handle


def every_text(tmp_path: Path) -> list[tuple[str, str]]:
    """Each file under tmp_path as text; a Parquet file also as its rows (all columns,
    decoded: its pages are compressed) and all its key-value metadata."""
    seen = []
    for path in sorted(tmp_path.rglob("*")):
        if not path.is_file():
            continue
        seen.append((str(path), path.read_bytes().decode("utf-8", "replace")))
        if path.suffix == ".parquet":
            seen.append((f"{path} rows", pl.read_parquet(path).write_ndjson()))
            meta = pq.read_metadata(path).metadata or {}
            seen.append((f"{path} metadata", repr(meta)))
    return seen


@pytest.mark.parametrize("kind", ["url", "key"])
def test_credentials_an_endpoint_echoes_reach_no_file_and_no_terminal(
    env: Path, tmp_path: Path, leaks: Leaks, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A server repeating the request's credentials (the Basic user:password of a URL with a
    percent-encoded password, or the Bearer API key) in a 400, a 500 and a 200 HTML page,
    and a completion carrying the password: none of it reaches the output Parquet (rows and
    metadata), the cache, stdout or stderr. The row errors still say what went wrong."""
    defaults = JudgeConfig.__init__.__kwdefaults__
    monkeypatch.setitem(defaults, "max_attempts", 2)  # the 500s and HTML pages give up soon
    monkeypatch.setitem(defaults, "backoff_base", 0.01)
    monkeypatch.setitem(defaults, "backoff_max", 0.02)
    secrets = echoed_secrets(kind)
    frame(8).write_parquet(env / "in.parquet")
    with FakeServer(echoing(secrets[1]), echo_credentials=True) as server:
        scheme, _, rest = server.base_url.partition("://")
        password = quote(ECHO_PASSWORD, safe="")
        url = f"{scheme}://{ECHO_USER}:{password}@{rest}" if kind == "url" else server.base_url
        out = env / "out.parquet"
        argv = ["score", str(env / "in.parquet"), "-o", str(out), *METRICS, "--model", "m"]
        assert leaks.run(*argv, "--base-url", url, "--no-progress") == 0
        sent = [r.headers.get("authorization", "") for r in server.requests]
    assert sent and all(secrets[-1 if kind == "url" else 0] in auth for auth in sent)
    details = pl.read_parquet(out)["context_recall_detail"].struct.field("error").to_list()
    assert "maximum context length" in details[0] and "***" in details[0]
    assert "HTTP 500" in details[1] and "not a chat completion" in details[2]
    assert details[3] is None
    leaks.seen += every_text(tmp_path)
    found = [(where, s) for where, text in leaks.seen for s in secrets if s in text]
    assert not found, f"secrets found: {found}"


def test_every_form_of_every_credential_is_scrubbed() -> None:
    """The user and password of each URL (as written, decoded, as the Basic token), a secret
    query value, the API key whole and in part: raw, percent-encoded, JSON-, repr- and
    HTML-escaped. Short values are left alone, and other text is kept."""
    key = "sk-proj-" + "k" * 20 + "END'9<x"
    urls = (
        f"http://{ECHO_USER}:{quote(ECHO_PASSWORD, safe='')}@h:1/v1",
        f"https://h2/v1?api-version=2024&api-key={quote(QUOTE_SECRET, safe='')}&x=ab",
    )
    secrets = Secrets(key, urls)
    token = base64.b64encode(f"{ECHO_USER}:{ECHO_PASSWORD}".encode()).decode()
    for value in (key, ECHO_USER, ECHO_PASSWORD, QUOTE_SECRET, token, key[:8], key[-6:]):
        for form in (value, quote(value, safe=""), json.dumps(value)[1:-1], repr(value)[1:-1]):
            assert secrets.scrub(f"before {form} after") == "before *** after", form
        assert secrets.scrub(html.escape(value)) == "***", value
    assert secrets.scrub("api-version=2024 x=ab") == "api-version=2024 x=ab"
    assert scrub(f"a {key}", Secrets(key)) == "a ***" and scrub("a", Secrets()) == "a"


def test_an_answer_loses_only_the_secret_like_credentials() -> None:
    """From an answer: the key (whole, its first 8 characters), a password and a secret query
    value of 8+ characters and the Basic token, in every echoed form but only in their own
    case (either case for a %xx escape's hex digits). Not a user name, not a short password
    or key part, not another case: those are words an answer may use."""
    key = "sk-proj-" + "k" * 20 + "END'9<x"
    urls = (
        f"http://{ECHO_USER}:{quote(ECHO_PASSWORD, safe='')}@h:1/v1",
        f"https://h2/v1?api-version=2024&api-key={quote(QUOTE_SECRET, safe='')}&x=ab",
        "http://admin:pass@h3/v1",
    )
    secrets = Secrets(key, urls)
    token = base64.b64encode(f"{ECHO_USER}:{ECHO_PASSWORD}".encode()).decode()
    for value in (key, ECHO_PASSWORD, QUOTE_SECRET, token, key[:8]):
        for form in (value, quote(value, safe=""), json.dumps(value)[1:-1], repr(value)[1:-1]):
            assert secrets.scrub_answer(f"before {form} after") == "before *** after", form
        assert secrets.scrub_answer(html.escape(value)) == "***", value
    assert secrets.scrub_answer(quote(ECHO_PASSWORD, safe="").replace("%2F", "%2f")) == "***"
    words = f"{ECHO_USER} {ECHO_PASSWORD.upper()} {key[-6:]} admin Admins pass passes Pass"
    assert secrets.scrub_answer(words) == words
    assert secrets.scrub(words).count("***") == 8  # an error text loses them all


def test_a_failure_leaving_the_transport_is_scrubbed_whoever_wrote_it() -> None:
    """The transport's exit is the one place a request's failure leaves the talk with the
    endpoint: a message carrying a credential, however it was written, is scrubbed there."""
    url = f"http://{ECHO_USER}:{quote(ECHO_PASSWORD, safe='')}@127.0.0.1:1/v1"
    judge = Judge("m", base_url=url, api_key=KEY_SECRET, cache=False, progress=False)

    async def fail() -> None:
        raise Failure("bad_request", f"echoed {ECHO_PASSWORD} and {KEY_SECRET}")

    async def go() -> Failure:
        transport = Transport(judge, RunStats())
        await transport.open()
        try:
            await transport.send(fail, 1, "probe")
        except Failure as failure:
            return failure
        finally:
            await transport.close()
        raise AssertionError("no failure")

    failure = asyncio.run(go())
    assert failure.message == str(failure) == "echoed *** and ***"


# ------------------------------------------- an answer's words are not taken for credentials

#: A user name equal to a JSON key of the answers, and a short password that is a word.
WORDY_USER, WORDY_PASSWORD = "reason", "pass"


def wordy(body: dict[str, Any]) -> str:
    """A valid answer whose reasons say the user name and words holding the password."""
    answer = json.loads(auto_answer(body))
    for verdict in next(v for v in answer.values() if isinstance(v, list)):
        if isinstance(verdict, dict) and "reason" in verdict:
            verdict["reason"] += " The User gave a Reason; it passes, Pass and PASSWORD too."
    return json.dumps(answer)


@pytest.mark.parametrize("command", ["score", "batch"])
def test_an_answer_is_the_same_whatever_the_url_credentials(
    env: Path, tmp_path: Path, command: str
) -> None:
    """A URL's user name and a short password are not taken out of an answer: the words
    they match ("reason", a JSON key; "passes") stay, and the scores and reasons are those
    of a run without credentials in the URL. (Error texts still lose them: see above.)"""
    frame(4).write_parquet(env / "in.parquet")
    outputs = []
    with FakeServer(wordy) as server:
        scheme, _, rest = server.base_url.partition("://")
        urls = [server.base_url, f"{scheme}://{WORDY_USER}:{WORDY_PASSWORD}@{rest}"]
        for i, url in enumerate(urls):
            out = env / f"out{i}.parquet"
            cache = ["--cache", str(tmp_path / f"cache{i}.sqlite3")]
            judge = [*METRICS, "--model", "m", "--base-url", url, *cache]
            if command == "score":
                argv = ["score", str(env / "in.parquet"), "-o", str(out), *judge, "--no-progress"]
            else:
                manifest = ["--manifest", str(env / f"m{i}.json"), "--poll-interval", "0.05"]
                argv = ["batch", "run", str(env / "in.parquet"), "-o", str(out), *manifest]
                argv += [*judge, "--wait", "60"]
            assert main(argv) == 0
            outputs.append(pl.read_parquet(out))
    assert "The User gave a Reason; it passes, Pass and PASSWORD" in outputs[1].write_ndjson()
    assert outputs[1].equals(outputs[0])


def test_an_unusable_answer_s_error_loses_every_credential(env: Path) -> None:
    """An answer keeps the URL's user name (it is no secret, and may be a word), but the
    error of an answer that does not fit its schema is an error text: quoting a value the
    user name was written into, it says *** (as a Batch API line's error does)."""
    frame(2).write_parquet(env / "in.parquet")

    def user_in_verdicts(body: dict[str, Any]) -> str:
        answer = json.loads(auto_answer(body))
        for verdict in next(v for v in answer.values() if isinstance(v, list)):
            if isinstance(verdict, dict):
                verdict.update({k: ECHO_USER for k, v in verdict.items() if isinstance(v, bool)})
        return json.dumps(answer)

    with FakeServer(user_in_verdicts) as server:
        scheme, _, rest = server.base_url.partition("://")
        url = f"{scheme}://{ECHO_USER}:{quote(ECHO_PASSWORD, safe='')}@{rest}"
        out = env / "out.parquet"
        argv = ["score", str(env / "in.parquet"), "-o", str(out), "--metrics", "context_recall"]
        assert main([*argv, "--model", "m", "--base-url", url, "--no-progress", "--no-cache"]) == 4
    errors = pl.read_parquet(out)["context_recall_detail"].struct.field("error").to_list()
    assert all("unusable answer (schema)" in e and "got '***'" in e for e in errors), errors
    assert not any(ECHO_USER in e for e in errors)
