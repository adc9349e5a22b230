"""Shared fixtures: a scripted OpenAI-compatible server on 127.0.0.1 and judges pointed at it.

Every test that needs an LLM talks to this server through the real `openai` client; no test
needs the network or an API key.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe import Judge
from ragframe.testing.server import FakeServer


def pytest_configure(config: pytest.Config) -> None:
    """Give SIGINT back to Python's handler when the runner was started ignoring it.

    A shell script that starts a command in the background (`python -m pytest &`, as a CI
    wrapper may) starts it with SIGINT ignored, and every process it spawns inherits that: the
    Ctrl-C tests' `ragframe score` processes then never see their signal and the tests wait
    out their timeouts (or hang). A terminal's runner has Python's handler; so do these.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A fresh fake judge server; by default it answers every schema with valid JSON."""
    with FakeServer() as fake:
        yield fake


def judge_for(
    server: FakeServer, tmp_path: Path, model: str = "fake-judge", **overrides: Any
) -> Judge:
    """A Judge for a fake server under `model`: no cache unless asked (`cache=True`: a file
    under `tmp_path`), no progress bar, short backoff; `overrides` go to `Judge`."""
    options: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test-not-a-real-key",
        "embedding_model": "fake-embedding",
        "cache": False,
        "progress": False,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    }
    if overrides.get("cache") is True:
        overrides["cache"] = tmp_path / "cache.sqlite3"
    options.update(overrides)
    return Judge(model, **options)


@pytest.fixture
def make_judge(server: FakeServer, tmp_path: Path) -> Callable[..., Judge]:
    """Build a Judge for the `server` fixture (see `judge_for`)."""

    def build(**overrides: Any) -> Judge:
        return judge_for(server, tmp_path, **overrides)

    return build


@pytest.fixture
def judge(make_judge: Callable[..., Judge]) -> Judge:
    return make_judge()


def user_text(body: dict[str, Any]) -> str:
    """The user message of a chat request (where the fenced, judged texts are)."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def system_text(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"]


def fenced(body: dict[str, Any], tag: str) -> list[str]:
    """Texts fenced as <tag ...>...</tag> in the user message, in order."""
    return re.findall(rf"<{tag}(?: index=\"\d+\")?>\n(.*?)\n</{tag}>", user_text(body), re.S)


def task_name(body: dict[str, Any]) -> str:
    """Which task sent a request (json_schema name, dots as underscores)."""
    fmt = body.get("response_format") or {}
    return (fmt.get("json_schema") or {}).get("name", "")


def reply(obj: Any) -> str:
    return json.dumps(obj)


def router(**by_task: Any) -> Callable[[dict[str, Any]], Any]:
    """A server handler answering each task (by its json_schema name, dots as underscores)
    with a fixed reply or a function of the request body; other tasks get valid answers."""
    from ragframe.testing.server import auto_answer

    def handle(body: dict[str, Any]) -> Any:
        answer = by_task.get(task_name(body))
        if answer is None:
            return auto_answer(body)
        return answer(body) if callable(answer) else answer

    return handle


@pytest.fixture
def sample() -> pl.DataFrame:
    """The small real sample shipped in data/ (ExpertQA, MIT)."""
    return pl.read_parquet(DATA / "sample.parquet")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for one test module: 2 CPUs, no dashboard, loopback only; its GCS
    address. Started and stopped by the module that asks for it."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        _node_ip_address="127.0.0.1",  # loopback only
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll `condition` (an event or a count, never a time margin) until it holds or `seconds`
    pass; whether it held."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Phoenix's own server on 127.0.0.1, one per test session (each test logs to a project
    of its own name, so no test sees another's spans)."""
    from real_tools import PhoenixServer

    with PhoenixServer(tmp_path_factory.mktemp("phoenix")) as server:
        yield server
