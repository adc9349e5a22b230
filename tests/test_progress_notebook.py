"""The progress bar in Jupyter: tqdm.notebook's widget ends full, its label says where the
answers came from, and a rerun the cache answers whole is a full bar, not `0/0`.

tqdm.notebook sets its widget's `max` only when the bar is made: a total changed later left
the widget short (`value 128, max 250`, label `128/128`). The first test runs a notebook in a
real Jupyter kernel (nbclient) and reads the widgets' state it saved; the others drive
tqdm.notebook's bar in this process through a judge session.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import judge_for

from ragframe.judge import backends
from ragframe.judge.task import Task
from ragframe.testing.server import Reply, auto_answer

nbclient = pytest.importorskip("nbclient", reason="nbclient is in the dev extra")
pytest.importorskip("ipywidgets", reason="ipywidgets is in the dev extra")
import nbformat  # noqa: E402
from nbformat.v4 import new_code_cell, new_notebook  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample.parquet"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
ONE = Task(name="stage.one", system="Answer ok.", schema=SCHEMA)

NOTEBOOK = """\
import polars as pl
import ragframe
from ragframe.metrics import CORE, resolve
from ragframe.testing.server import FakeServer

server = FakeServer().start()
judge = ragframe.Judge(
    "fake-judge", base_url=server.base_url, api_key="sk-test-not-a-real-key",
    embedding_model="fake-embedding", cache={cache!r},
)
rows = pl.read_parquet({sample!r}).head(8)
frame = pl.concat([rows, rows.head(4)])  # 4 rows twice
print(frame.height * sum(len(m.tasks()) for m in resolve(CORE)))
---
scored = ragframe.evaluate(frame, judge=judge)
print(server.count())
---
again = ragframe.evaluate(frame, judge=judge)  # the cache answers every request
print(server.count())
server.stop()
"""


def bar_of(cell: nbformat.NotebookNode, state: dict[str, Any]) -> dict[str, Any]:
    """The one progress bar the cell displayed: its widget's max, value and style, and the
    texts left and right of it, from the widget state the kernel saved; and the output's
    plain text."""
    (data,) = [o["data"] for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
    view = data[WIDGET_VIEW]
    children = state[view["model_id"]]["state"]["children"]
    left, progress, right = (state[child.removeprefix("IPY_MODEL_")] for child in children)
    assert progress["model_name"].endswith("ProgressModel"), progress["model_name"]
    keep = ("max", "value", "bar_style")
    return {
        **{k: progress["state"][k] for k in keep},
        "left": left["state"]["value"].replace("\u2007", " "),
        "right": right["state"]["value"].replace("\u2007", " "),
        "text": data["text/plain"],  # what a viewer without the widget's state shows
    }


def printed(cell: nbformat.NotebookNode) -> int:
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
    return int(text.split()[-1])


def test_the_widget_ends_full_in_a_jupyter_kernel(tmp_path) -> None:
    """12 rows (4 repeated) x the default metrics' stages: the widget's max is the run's
    prompts from the start and its value reaches it, green ("success"); the label says how
    many prompts took a request and how many were duplicates. The rerun sends nothing and
    is just as full. The text a notebook keeps beside the widget (shown by viewers without
    its state) is the bar as it ended, not as it started (0%)."""
    source = NOTEBOOK.format(cache=str(tmp_path / "cache.sqlite3"), sample=str(SAMPLE))
    notebook = new_notebook(cells=[new_code_cell(c.strip()) for c in source.split("---")])
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    state = notebook.metadata["widgets"][WIDGET_STATE]["state"]
    setup, first, rerun = notebook.cells
    planned, sent = printed(setup), printed(first)
    assert printed(rerun) == sent  # nothing sent again
    bars = [bar_of(first, state), bar_of(rerun, state)]
    for bar, said in zip(bars, (f"{sent} requests", "no requests, "), strict=True):
        assert (bar["max"], bar["value"], bar["bar_style"]) == (planned, planned, "success")
        assert bar["left"].startswith("ragframe: 100%")
        assert re.match(rf" ?{planned}/{planned} \[", bar["right"]), bar["right"]
        assert f", {said}" in bar["right"], bar["right"]
        assert re.match(rf"ragframe: 100%\|.*\| {planned}/{planned} \[", bar["text"]), bar["text"]
    duplicates = planned - sent
    assert bars[0]["right"].endswith(f"{sent} requests, {duplicates} duplicates]"), bars[0]["right"]
    # The rerun takes every metric's columns whole (engine.reuse): each prompt they stand for
    # is done, unsent.
    assert bars[1]["right"].endswith(f"no requests, {planned} reused]"), bars[1]["right"]


@pytest.fixture
def notebook_bars(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """tqdm.notebook's bars, made in this process (IPython's display prints their repr)."""
    from tqdm.notebook import tqdm

    made: list[Any] = []

    def make(**options: Any) -> Any:
        made.append(tqdm(**options))
        return made[-1]

    monkeypatch.setattr(backends, "_bar_class", lambda: make)
    return made


def widget(bar: Any) -> tuple[float, float, str, str]:
    """tqdm.notebook's widget: (max, value, style, the text right of it)."""
    _, progress, right = bar.container.children
    return progress.max, progress.value, progress.bar_style, right.value.replace("\u2007", " ")


def run(
    server: Any, tmp_path: Path, plan: dict[str, int] | None, *asks: list[str], **options: Any
) -> None:
    judge = judge_for(server, tmp_path, **{"progress": True, **options})

    async def main() -> None:
        session = judge.session()
        if plan is not None:
            session.plan(plan)
        async with session:
            for prompts in asks:
                await session.ask(ONE, prompts)

    asyncio.run(main())


def test_a_bar_made_without_a_plan_fills_its_widget(server, tmp_path, notebook_bars) -> None:
    """With no plan the widget starts in tqdm's "unknown total" style (max 1); the stages'
    prompts raise its max with the total, and it ends full and green, not in that style."""
    run(server, tmp_path, None, ["a", "b", "a"], ["c"])
    assert widget(notebook_bars[0])[:3] == (4, 4, "success")
    assert widget(notebook_bars[0])[3].endswith("3 requests, 1 duplicate]")


def test_a_run_with_nothing_to_ask_is_a_full_widget(server, tmp_path, notebook_bars) -> None:
    """Planned, but no row had what the stage needs: nothing asked. A full bar, not an empty
    one; no request."""
    run(server, tmp_path, {"stage.one": 3})
    max_, value, style, _ = widget(notebook_bars[0])
    assert value == max_ > 0 and style == "success" and server.count() == 0


def test_a_run_with_failures_is_not_a_green_bar(server, tmp_path, notebook_bars) -> None:
    """Requests that failed for good (a 500 on every try) are done, so the widget ends full,
    but not green: "warning" when some prompts have an answer, "danger" when none has; its
    label counts them. Both ended "success", "3 requests", the look of a clean run."""

    def handler(body: dict[str, Any]) -> Any:
        text = " ".join(str(m["content"]) for m in body["messages"])
        return Reply(status=500) if "bad" in text else auto_answer(body)

    server.handler = handler
    run(server, tmp_path, None, ["a", "bad b", "c"], max_attempts=2)
    max_, value, style, right = widget(notebook_bars[0])
    assert (max_, value, style) == (3, 3, "warning") and right.endswith("3 requests, 1 failed]")
    run(server, tmp_path, None, ["bad x", "bad y"], max_attempts=2)
    max_, value, style, right = widget(notebook_bars[1])
    assert (max_, value, style) == (2, 2, "danger") and right.endswith("2 requests, 2 failed]")
