"""Issue 28: `ragframe score LOG -o s3://...` is refused before the log is read or a request
sent (exit 2, one line): ragframe writes its output locally and atomically. It used to be
refused only when the writer opened, after the log was read (and, streamed, after scoring
began). The store here is a listener on 127.0.0.1 that counts connections: no S3 server is
needed, since nothing may reach it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe.cli import main


@dataclass
class Listener:
    """A TCP port that accepts and counts connections (and closes them at once)."""

    sock: socket.socket
    connections: list[tuple[str, int]] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.connections.append(peer)
            conn.close()


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """The AWS_* environment pointing at a counting listener, as a CI job's would at S3."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    listener = Listener(sock)
    thread = threading.Thread(target=listener.serve, daemon=True)
    thread.start()
    for key, value in {
        "AWS_ENDPOINT_URL": listener.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(key, value)
    try:
        yield listener
    finally:
        sock.close()
        thread.join(timeout=5)


@pytest.fixture
def local_log(tmp_path: Path) -> Path:
    path = tmp_path / "log.parquet"
    pl.DataFrame(
        {
            "question": ["q?", "r?"],
            "answer": ["a.", "b."],
            "contexts": [["c."], ["d."]],
        }
    ).write_parquet(path)
    return path


#: (how the run is asked for, beyond INPUT -o URL): each path ragframe score takes.
PATHS = {
    "streamed": [],
    "in memory": ["--sample", "1"],
    "named metrics": ["--metrics", "faithfulness"],
    "ray": ["--ray"],
    "dry run": ["--dry-run"],  # writes nothing, but says now what the run would refuse
}


@pytest.mark.parametrize("extra", list(PATHS.values()), ids=list(PATHS))
@pytest.mark.parametrize("remote_input", [True, False], ids=["s3 log", "local log"])
def test_a_remote_output_is_refused_before_the_log_is_read(
    store: Listener,
    server: Any,
    local_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    remote_input: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    source = "s3://ragframe-logs/log.parquet" if remote_input else str(local_log)
    url = "s3://ragframe-logs/scored/out.parquet"
    judge = ["--base-url", server.base_url, "--model", "m"]
    status = main(["score", source, "-o", url, "--no-progress", *judge, *extra])
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot write the output to {url!r}" in err and "write it locally" in err, err
    assert store.connections == []  # the log was not read
    assert server.requests == []  # nothing was sent to the judge
    assert not (tmp_path / "s3:").exists()  # no local folder named after the URL
