"""The progress bar knows the run's total from the start, never lowers it while the run
goes, and ends full.

`JudgeSession.plan` announces, by task name, how many prompts each stage will ask; the bar's
total is their sum from before the first request, raised only by a stage that asks more than
planned. Every prompt asked is a tick: answered from the cache, a duplicate, or sent and
answered; the postfix says which. A run that ends normally closes the bar at what it asked,
full. Most tests record the bar through a stand-in for tqdm; `test_a_real_run_in_a_terminal`
reads tqdm's own text bar, and the last test uses tqdm in a simulated Jupyter kernel without
ipywidgets (the widget itself: tests/test_progress_notebook.py).
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import re
import sys
import types
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe.judge import backends
from ragframe.judge.backends import Progress
from ragframe.judge.client import JudgeSession
from ragframe.judge.task import Task
from ragframe.metrics import CORE, resolve
from ragframe.testing.server import FakeServer, Reply, auto_answer

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
ONE = Task(name="stage.one", system="Answer ok.", schema=SCHEMA)
TWO = Task(name="stage.two", system="Answer ok again.", schema=SCHEMA)


class Recorded:
    """A stand-in for tqdm that records (n, total) at every draw, and the postfix shown."""

    bars: ClassVar[list[Recorded]] = []

    def __init__(self, total: int, **options: Any) -> None:
        self.total = total
        self.desc: str = options["desc"]
        self.n = 0
        self.postfix: str | None = None
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


def check_honest(bar: Recorded, server: FakeServer, asked: int) -> None:
    """The total is never below the count done and never drops while the run goes; the bar
    ends full, at the prompts asked; the postfix's "requests" are those the server got."""
    assert all(total >= n for n, total in bar.seen), bar.seen
    totals = [total for _, total in bar.seen[:-1]]  # the last draw: the run's end
    assert totals == sorted(totals), bar.seen
    assert bar.closed and bar.n == bar.total == asked, bar.seen
    sent = server.count()
    said = f"{sent} request{'s' if sent > 1 else ''}" if sent else "no requests"
    assert (bar.postfix or "").startswith(said), bar.postfix


def test_plan_sets_the_total_before_any_request(server, tmp_path, bars) -> None:
    seen: list[tuple[int, int, int]] = []

    async def body(session: JudgeSession) -> None:
        seen.append((bars[0].total, bars[0].n, server.count()))
        await session.ask(ONE, prompts(4))
        await session.ask(TWO, prompts(4))

    run_session(server, tmp_path, body, plan={"stage.one": 4, "stage.two": 4})
    assert seen == [(8, 0, 0)]
    assert bars[0].totals() == [8]  # an exact plan never moves
    check_honest(bars[0], server, asked=8)
    assert bars[0].postfix == "8 requests"


def test_a_stage_asking_more_than_planned_raises_the_total(server, tmp_path, bars) -> None:
    """Stage one asks 5 prompts, one a repeat (4 sent, 1 duplicate), against a plan of 5;
    stage two asks 6 against a plan of 3. The total goes 8 -> 11 and never down."""

    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, [*prompts(4), "prompt 0"])
        await session.ask(TWO, prompts(6))

    run_session(server, tmp_path, body, plan={"stage.one": 5, "stage.two": 3})
    assert bars[0].totals() == [8, 11]
    check_honest(bars[0], server, asked=11)
    assert bars[0].postfix == "10 requests, 1 duplicate"


def test_stages_asking_at_once_never_lower_the_total(server, tmp_path, bars) -> None:
    """The terminal bar's total flickered 0/100 -> 0/40 -> ... -> 0/100 at the start: each
    stage's plan left the total as it asked, before its requests were added. Two stages
    asking at once, with a repeat each: the total is 10 from the first draw to the last."""

    async def body(session: JudgeSession) -> None:
        await asyncio.gather(
            session.ask(ONE, [*prompts(4), "prompt 0"]),
            session.ask(TWO, [*prompts(4), "prompt 1"]),
        )

    run_session(server, tmp_path, body, plan={"stage.one": 5, "stage.two": 5})
    assert bars[0].totals() == [10]
    check_honest(bars[0], server, asked=10)
    assert bars[0].postfix == "8 requests, 2 duplicates"


def test_cached_prompts_count_as_done_and_keep_the_total(server, tmp_path, bars) -> None:
    """A streamed file asks a stage once per chunk. A chunk the cache answers sends nothing:
    its prompts are done at once, called cached, and the total stays the plan's 6."""
    warm = prompts(2, start=2)

    async def prefill(session: JudgeSession) -> None:
        await session.ask(ONE, warm)

    run_session(server, tmp_path, prefill, cache=True, progress=False)
    server.requests.clear()

    async def body(session: JudgeSession) -> None:
        for chunk in (prompts(2), warm, prompts(2, start=4)):
            await session.ask(ONE, chunk)

    session = run_session(server, tmp_path, body, plan={"stage.one": 6}, cache=True)
    assert session.stats.cache_hits == 2 and server.count() == 4
    assert bars[-1].totals() == [6]
    assert (2, 6) in bars[-1].seen  # the cached chunk's 2 prompts done at once, after 2 sent
    check_honest(bars[-1], server, asked=6)
    assert bars[-1].postfix == "4 requests, 2 cached"


def test_a_rerun_the_cache_answers_whole_is_a_full_bar(server, tmp_path, bars) -> None:
    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, prompts(3))
        await session.ask(TWO, prompts(3))

    plan = {"stage.one": 3, "stage.two": 3}
    run_session(server, tmp_path, body, plan=plan, cache=True)
    sent = server.count()
    run_session(server, tmp_path, body, plan=plan, cache=True)
    assert server.count() == sent == 6
    bar = bars[-1]
    assert bar.totals() == [6] and (bar.n, bar.total) == (6, 6) and bar.closed
    assert bar.postfix == "no requests, 6 cached"


def test_an_estimate_too_high_is_dropped_when_the_run_ends(server, tmp_path, bars) -> None:
    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, prompts(3))
        assert bars[-1].total == 10  # 3 asked, 7 of the plan still ahead

    run_session(server, tmp_path, body, plan={"stage.one": 10})
    check_honest(bars[-1], server, asked=3)

    async def interrupted(session: JudgeSession) -> None:
        await session.ask(ONE, prompts(3, start=10))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(server, tmp_path, interrupted, plan={"stage.one": 10})
    assert bars[-1].closed and (bars[-1].n, bars[-1].total) == (3, 10)  # how far it got


def test_a_request_joined_in_flight_is_sent_once_and_both_prompts_are_done(
    server, tmp_path, bars
) -> None:
    """Two stages asking the same request at once send it once: one sent, one duplicate."""

    async def body(session: JudgeSession) -> None:
        await asyncio.gather(session.ask(ONE, prompts(1)), session.ask(ONE, prompts(1)))

    run_session(server, tmp_path, body)
    assert server.count() == 1
    check_honest(bars[0], server, asked=2)
    assert bars[0].postfix == "1 request, 1 duplicate"


def faulty(body: dict[str, Any]) -> Any:
    """The fake judge, except for prompts saying "bad" (500 on every try), "garbled" (never
    JSON, repair included) and "long" (cut off at max_tokens: a failure the cache keeps)."""
    text = " ".join(str(m["content"]) for m in body["messages"])
    if "bad" in text:
        return Reply(status=500)
    if "garbled" in text:
        return "not json"
    if "long" in text:
        return Reply(content='{"ok": tr', finish_reason="length")
    return auto_answer(body)


def test_requests_that_fail_for_good_are_counted(server, tmp_path, bars) -> None:
    """A request that fails for good (a 500 on every try, an answer that never fits its
    schema) is done, so the bar ends full; the postfix says how many failed. It ended as
    "4 requests", the look of a clean run, while 2 rows had no answer."""
    server.handler = faulty

    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, ["prompt 0", "bad 1", "garbled 2", "prompt 3"])

    session = run_session(server, tmp_path, body, plan={"stage.one": 4}, max_attempts=2)
    assert session.stats.failures == {"500": 1, "invalid_no_json": 1}, session.stats
    bar = bars[0]
    assert bar.closed and (bar.n, bar.total) == (4, 4)
    assert bar.postfix == "4 requests, 2 failed"


def test_a_failure_the_cache_remembers_is_counted_on_the_rerun(server, tmp_path, bars) -> None:
    """An answer cut off at max_tokens at temperature 0 is remembered: the rerun sends
    nothing, and its bar still says the failure ("no requests, 3 cached, 1 failed")."""
    server.handler = faulty

    async def body(session: JudgeSession) -> None:
        await session.ask(ONE, ["prompt 0", "long 1", "prompt 2"])

    run_session(server, tmp_path, body, cache=True)
    assert bars[0].postfix == "3 requests, 1 failed"
    sent = server.count()
    session = run_session(server, tmp_path, body, cache=True)
    assert server.count() == sent and session.stats.remembered_failures == 1
    assert bars[1].postfix == "no requests, 3 cached, 1 failed"


def test_each_judge_of_a_jury_names_its_bar(server, tmp_path, bars, sample) -> None:
    """A jury's judges run at once, a bar each: each bar names its judge as the jury's
    columns do (`context_recall@judge-a`, `#2` for a model seated twice), so the bars are
    told apart; they were all "ragframe". A run with one judge keeps "ragframe"."""
    seats = [("judge-a", 0), ("judge-b", 0), ("judge-a", 1)]
    judges = [judge_for(server, tmp_path, m, progress=True, seed=s) for m, s in seats]
    scored = ragframe.evaluate(sample.head(3), ["context_recall"], judges=judges)
    names = ["judge-a", "judge-b", "judge-a#2"]
    assert {f"context_recall@{n}" for n in names} <= set(scored.columns)
    assert sorted(bar.desc for bar in bars) == sorted(f"ragframe@{n}" for n in names)
    ragframe.evaluate(sample.head(3), ["context_recall"], judge=judges[1])
    assert bars[-1].desc == "ragframe"


def test_a_dry_session_shows_no_bar(server, tmp_path, bars) -> None:
    """A dry run or a deferred (Batch API) one sends nothing: no bar to sit at 0."""
    judge = judge_for(server, tmp_path, progress=True)

    async def main() -> None:
        async with judge.session(backend="dry") as session:
            await session.ask(ONE, prompts(2))

    asyncio.run(main())
    assert bars == [] and server.count() == 0


# ---------------------------------------------------------------- tqdm's own text bar
def text_bar(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """tqdm's terminal bar, drawn at every update into a buffer."""
    from tqdm.std import tqdm

    out = io.StringIO()
    monkeypatch.setattr(
        backends, "_bar_class", lambda: functools.partial(tqdm, file=out, mininterval=0)
    )
    return out


def frames(out: io.StringIO) -> list[tuple[int, int, str]]:
    """Every frame the bar drew: (n, total, the text after the rate)."""
    drawn = []
    for line in re.split(r"[\r\n]", out.getvalue()):
        found = re.search(r"(\d+)/(\d+) \[[^,\]]*,[^,\]]*(?:, (.*))?\]", line)
        if found:
            drawn.append((int(found[1]), int(found[2]), found[3] or ""))
    return drawn


def test_a_real_run_in_a_terminal(server, tmp_path, monkeypatch, sample) -> None:
    """The default metrics over 12 rows, 4 of them repeats; then 16 rows whose first 12 the
    cache holds; then the same again, all cached. Each run's text bar shows one total from
    the first frame to the last, the run's prompts (rows x stages), and ends at 100% saying
    how many prompts took a request, came from the cache or were duplicates; the rerun sends
    nothing and reuses every metric's columns, full."""
    out = text_bar(monkeypatch)
    judge = judge_for(server, tmp_path, progress=True, cache=True)
    rows = sample.head(8)
    runs = [pl.concat([rows, rows.head(4)]), sample.head(16), sample.head(16)]
    stages = sum(len(m.tasks()) for m in resolve(CORE))
    shown = []
    for frame in runs:
        out.seek(0)
        out.truncate()
        before = server.count()
        ragframe.evaluate(frame, judge=judge)
        drawn = frames(out)
        assert {total for _, total, _ in drawn} == {frame.height * stages}, drawn
        assert [n for n, _, _ in drawn] == sorted(n for n, _, _ in drawn)
        n, total, postfix = drawn[-1]
        assert n == total and re.search(rf"100%\|#+\| {n}/{n} ", out.getvalue().split("\r")[-1])
        sent = server.count() - before
        assert postfix.startswith(f"{sent} requests" if sent else "no requests"), postfix
        shown.append(postfix)
    assert shown[0] == f"{8 * stages} requests, {4 * stages} duplicates"  # 4 rows repeated
    assert re.fullmatch(r"\d+ requests, \d+ cached(, \d+ duplicates?)?", shown[1]), shown[1]
    # The same 16 rows again: each metric's columns are reused whole (engine.reuse).
    assert shown[2] == f"no requests, {16 * stages} reused", shown[2]
    # No request, no rate: cached prompts and duplicates are not counted as speed.
    assert re.search(r", \?req/s, no requests, ", out.getvalue().split("\r")[-1])


def test_a_real_run_with_failures_in_a_terminal(server, tmp_path, monkeypatch, sample) -> None:
    """The default metrics over 6 rows, every request about 2 of them failing with a 500:
    tqdm's text bar ends full (each prompt was done, with an answer or its failure) and
    its postfix says how many requests failed for good, as the run's stats count them."""
    out = text_bar(monkeypatch)
    frame = sample.head(6)
    broken = frame["question"].head(2).to_list()

    def handler(body: dict[str, Any]) -> Any:
        text = " ".join(str(m["content"]) for m in body["messages"])
        return Reply(status=500) if any(q in text for q in broken) else auto_answer(body)

    server.handler = handler
    judge = judge_for(server, tmp_path, progress=True, max_attempts=2)
    with warnings.catch_warnings(record=True):  # the run's warning of failed rows: not ours
        result = ragframe.run(frame, judge=judge)
    failed = sum(result.stats.failures.values())
    assert failed > 0 and result.frame["faithfulness"].null_count() == 2
    n, total, postfix = frames(out)[-1]
    assert n == total and postfix.endswith(f" requests, {failed} failed"), postfix


def test_the_plan_of_a_frame_leaves_out_rows_missing_an_input(
    server, tmp_path, bars, sample
) -> None:
    """6 rows, 2 without a reference (null, blank), read under its ragas name: context_recall
    never asks those 2, so its plan is 4 rows; faithfulness asks all 6, twice (claims, then
    verification). Scored as `ragframe.run` scores a frame, the bar's total is 16 from its
    first draw to its last (counting every row, it was 18 and fell to 16 at the end)."""
    from ragframe.engine.prepare import score_frame, work_plan

    references = ["a", None, " ", "b", "c", "d"]
    frame = sample.head(6).with_columns(pl.Series("reference", references))
    frame = frame.drop("ground_truth")
    metrics = resolve(["faithfulness", "context_recall"])
    plan = work_plan(metrics, frame)
    recall = metrics[1].tasks()[0].name
    assert plan[recall] == 4 and sum(plan.values()) == 16
    assert work_plan(metrics, 6)[recall] == 6  # a number of rows: every row counts
    judge = judge_for(server, tmp_path, progress=True)

    async def main() -> None:
        session = judge.session()
        session.plan(plan)
        async with session:
            await score_frame(frame, metrics, session)

    asyncio.run(main())
    assert bars[0].totals() == [16]
    check_honest(bars[0], server, asked=16)


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
