"""Credentials never leave the process: a password in the base URL, a secret query parameter
and the API key reach no message, log line, output, metadata, cache, manifest or report, on
success or on failure, through every subcommand.

`Judge` takes no custom headers, so there is no header secret to test: a header value can
reach ragframe only through the URL or the key, both covered here.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.errors import ConfigError
from ragframe.judge import Judge
from ragframe.judge.cache import AnswerCache, SharedAnswerCache
from ragframe.judge.config import public_url
from ragframe.testing.server import FakeServer, Reply

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
