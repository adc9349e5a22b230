"""The progress bar knows the run's total from the start, and never lies about it.

`JudgeSession.plan` announces, by task name, how many prompts each stage will ask; the bar's
total is the sum from before the first request. As each stage asks, its real count of
requests sent (after dedup and the cache) replaces its share of the plan; the total is never
below the requests done, and a run that ends normally closes the bar at the requests it sent.
The bar is recorded through a stand-in for tqdm; the last test uses tqdm itself, in a
simulated Jupyter kernel without ipywidgets.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest
from conftest import judge_for

from ragframe.judge import backends
from ragframe.judge.backends import Progress
from ragframe.judge.client import JudgeSession
from ragframe.judge.task import Task
from ragframe.testing.server import FakeServer

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
ONE = Task(name="stage.one", system="Answer ok.", schema=SCHEMA)
TWO = Task(name="stage.two", system="Answer ok again.", schema=SCHEMA)


class Recorded:
    """A stand-in for tqdm that records (n, total) at every draw."""

    bars: ClassVar[list[Recorded]] = []

    def __init__(self, total: int, **options: Any) -> None:
        self.total = total
        self.n = 0
        self.seen: list[tuple[int, int]] = [(0, total)]
        self.closed = False
        Recorded.bars.append(self)

    def update(self, k: int) -> None:
        self.n += k
        self.seen.append((self.n, self.total))

    def refresh(self) -> None:
        self.seen.append((self.n, self.total))

    def close(self) -> None:
        self.closed = True

    def totals(self) -> list[int]:
        """The successive totals shown, repeats folded."""
        out: list[int] = []
        for _, total in self.seen:
            if not out or out[-1] != total:
                out.append(total)
        return out


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Recorded]:
    Recorded.bars = []
    monkeypatch.setattr(backends, "_bar_class", lambda: Recorded)
    return Recorded.bars


def run_session(
    server: FakeServer,
    tmp_path: Any,
    body: Callable[[JudgeSession], Awaitable[None]],
    plan: dict[str, int] | None = None,
    **options: Any,
) -> JudgeSession:
    """Open a session with a progress bar (and `plan`), run `body` in it, close it."""
    judge = judge_for(server, tmp_path, **{"progress": True, **options})

    async def main() -> JudgeSession:
        session = judge.session()
        if plan is not None:
            session.plan(plan)
        async with session:
            await body(session)
        return session

    return asyncio.run(main())


def prompts(n: int, start: int = 0) -> list[str]:
    return [f"prompt {i}" for i in range(start, start + n)]


def check_honest(bar: Recorded, server: FakeServer) -> None:
    """The total is never below the requests done; the bar ends at the requests sent."""
    assert all(total >= n for n, total in bar.seen), bar.seen
    assert bar.closed and bar.n == server.count() == bar.total


def test_plan_sets_the_total_before_any_request(server, tmp_path, bars) -> None:
    seen: list[tuple[int, int, int]] = []

    async def body(session: JudgeSession) -> None:
        seen.append((bars[0].total, bars[0].n, server.count()))
        await session.ask(ONE, prompts(4))
        await session.ask(TWO, prompts(4))

    run_session(server, tmp_path, body, plan={"stage.one": 4, "stage.two": 4})
    assert seen == [(8, 0, 0)]
    assert bars[0].totals() == [8]  # an exact plan never moves
    check_honest(bars[0], server)


def test_each_stage_refines_its_estimate_as_it_starts(server, tmp_path, bars) -> None:
    """Stage one asks 5 prompts, one a repeat (4 sent), against a plan of 5; stage two asks
    6 against a plan of 3. The total goes 8 -> 7 -> 10, the requests the run sent."""

    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, [*prompts(4), "prompt 0"])
        await session.ask(TWO, prompts(6))

    run_session(server, tmp_path, body, plan={"stage.one": 5, "stage.two": 3})
    assert bars[0].totals() == [8, 7, 10]
    check_honest(bars[0], server)


def test_a_stage_in_chunks_draws_its_plan_down_and_cache_hits_leave_it(
    server, tmp_path, bars
) -> None:
    """A streamed file asks a stage once per chunk: each chunk takes its prompts off the
    plan. A chunk the cache answers sends nothing and is not on the bar: the total drops."""
    warm = prompts(2, start=2)

    async def prefill(session: JudgeSession) -> None:
        await session.ask(ONE, warm)

    run_session(server, tmp_path, prefill, cache=True, progress=False)
    before = server.count()
    server.requests.clear()

    async def body(session: JudgeSession) -> None:
        for chunk in (prompts(2), warm, prompts(2, start=4)):
            await session.ask(ONE, chunk)

    session = run_session(server, tmp_path, body, plan={"stage.one": 6}, cache=True)
    assert before == 2 and session.stats.cache_hits == 2
    assert bars[-1].totals() == [6, 4]  # 2 sent + 4 ahead; 2 + 2 (cached); 4 + 0
    check_honest(bars[-1], server)


def test_an_estimate_too_high_is_dropped_when_the_run_ends(server, tmp_path, bars) -> None:
    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, prompts(3))
        assert bars[-1].total == 10  # 3 sent, 7 of the plan still ahead

    run_session(server, tmp_path, body, plan={"stage.one": 10})
    check_honest(bars[-1], server)

    async def interrupted(session: JudgeSession) -> None:
        await session.ask(ONE, prompts(3, start=10))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(server, tmp_path, interrupted, plan={"stage.one": 10})
    assert bars[-1].closed and (bars[-1].n, bars[-1].total) == (3, 10)  # how far it got


def test_a_request_joined_in_flight_is_counted_once(server, tmp_path, bars) -> None:
    """Two stages asking the same request at once send it once: the bar counts it once."""

    async def body(session: JudgeSession) -> None:
        await asyncio.gather(session.ask(ONE, prompts(1)), session.ask(ONE, prompts(1)))

    run_session(server, tmp_path, body)
    assert server.count() == 1
    check_honest(bars[0], server)


def test_no_iprogress_warning_in_jupyter_without_ipywidgets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a Jupyter kernel without ipywidgets, tqdm.auto warns "IProgress not found": the
    bar is tqdm's text bar, quietly."""
    from tqdm.std import tqdm as text_bar

    shell = type("ZMQInteractiveShell", (), {})()
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.ModuleType("ipykernel.zmqshell"))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets fails
    for name in ("tqdm.auto", "tqdm.autonotebook", "tqdm.notebook"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in [k for k in os.environ if k == "QT_API" or k.startswith("SPYDER")]:
        monkeypatch.delenv(name)
    progress = Progress()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progress.open()
        progress.close()
    assert not [w for w in caught if "IProgress" in str(w.message)], caught
    assert type(progress._bar) is text_bar
