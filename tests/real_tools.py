"""The real tools the trace readers are tested against, as users install them today.

* **Phoenix** (`arize-phoenix`, a dev dependency): `PhoenixServer` runs Phoenix's own server on
  127.0.0.1 with a throwaway SQLite working directory; the tests talk to it with Phoenix's
  own client (`phoenix.client.Client`).
* **ragas** and **deepeval** pin their own `openai` / `langchain` / `pydantic`, so each lives in
  a virtual environment of its own, made by `bash bench/peers/setup.sh` (the README's test
  command runs it). `run_peer("ragas", script, *args)` runs a Python script there: the tests
  write their datasets with the tool's own save methods, in the tool's own process.

No test here needs the network: everything listens on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "bench" / "peers"
#: Environment variables that keep the tools quiet and offline.
QUIET = {
    "RAGAS_DO_NOT_TRACK": "true",
    "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
    "DEEPEVAL_UPDATE_WARNING_OPT_OUT": "YES",
    "DEEPEVAL_GRPC_LOGGING": "NO",
    "ERROR_REPORTING": "NO",
    "LANGSMITH_TRACING": "false",
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

__all__ = ["PhoenixServer", "free_port", "peer_python", "run_peer"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peer_python(tool: str) -> Path:
    """The Python of `tool`'s own environment (`PEERS_RAGAS_VENV` / `PEERS_DEEPEVAL_VENV`
    override where it is); a failure, not a skip, when it was never made."""
    folder = Path(os.environ.get(f"PEERS_{tool.upper()}_VENV", PEERS / f".venv-{tool}"))
    python = folder / "bin" / "python"
    if not python.exists():
        pytest.fail(
            f"{tool}'s environment {folder} does not exist: run `bash bench/peers/setup.sh` "
            "(the README's test command does)"
        )
    return python


def run_peer(tool: str, script: str, *args: str, timeout: float = 300) -> str:
    """Run `script` (Python source) with `args` in `tool`'s environment; its stdout. A failure
    shows the script's stderr."""
    done = subprocess.run(
        [str(peer_python(tool)), "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **QUIET},
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{tool} script failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


class PhoenixServer:
    """Phoenix's own server on 127.0.0.1 (a free HTTP and gRPC port, SQLite in `workdir`),
    started on enter and stopped on exit; `url` is its base URL, `client()` Phoenix's client."""

    def __init__(self, workdir: Path, *, start_timeout: float = 120) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "phoenix.log"

    def __enter__(self) -> PhoenixServer:
        env = {
            **os.environ,
            **QUIET,
            "PHOENIX_WORKING_DIR": str(self.workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
        }
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "phoenix.server.main", "serve"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.25)
        self.__exit__()
        pytest.fail(f"Phoenix did not start on {self.url}:\n{self.log.read_text()[-3000:]}")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self) -> Any:
        from phoenix.client import Client

        return Client(base_url=self.url)
