"""The worked example of "Writing a metric" (tests/example_metric.py), run through the whole
engine against the scripted server: its requests, its scores, its details, and a score that
always equals what its detail says. The README's code block is checked against the file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import fenced, task_name
from example_metric import TASK, ContextUse
from test_docs import expand_snippets

import ragframe
from ragframe.testing.server import auto_answer, schema_of

ROOT = Path(__file__).resolve().parent.parent

PARIS = "Paris is the capital of France."
BERLIN = "Berlin is the capital of Germany."


def frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "answer": ["Paris is the capital.", "Paris.", None, "Berlin and Paris.", "Rome."],
            "contexts": [[PARIS, "  ", BERLIN], ["", " "], [PARIS], [BERLIN, PARIS], [PARIS]],
        }
    )


def judged_by_keyword(body: dict[str, Any]) -> str:
    """A context is used when its first word is in the answer; verdicts written in reverse
    order, so only their `index` ties them to their contexts."""
    if task_name(body) != "context_use_verdicts":
        return auto_answer(body)
    answer = fenced(body, "answer")[0]
    verdicts = [
        {
            "index": i,
            "reason": f"checked {context.split()[0]}",
            "used": context.split()[0] in answer,
        }
        for i, context in enumerate(fenced(body, "context"), 1)
    ]
    return json.dumps({"verdicts": verdicts[::-1]})


def test_example_runs_through_the_engine(server, judge):
    server.handler = judged_by_keyword
    out = ragframe.run(frame(), [ContextUse()], judge=judge).frame
    assert out["context_use"].to_list() == [0.5, None, None, 1.0, 0.0]
    detail = out["context_use_detail"].to_list()
    # Blank contexts are not judged; context_index is the position in the input list.
    assert [(c["context_index"], c["used"]) for c in detail[0]["contexts"]] == [
        (1, True),
        (3, False),
    ]
    assert detail[0]["contexts"][1]["reason"] == "checked Berlin"
    assert detail[0]["error"] is None and detail[0]["prompt_tokens"] > 0
    # Missing input: null, the reason, and no request.
    assert detail[1]["contexts"] is None and "contexts" in detail[1]["error"]
    assert "answer" in detail[2]["error"]
    requests = server.chat_requests
    assert len(requests) == 3
    # The schema pins one verdict per judged context and bounds each index. Requests run
    # concurrently, so find row 0's by its judged contexts, not by its place in the log.
    (row_0,) = [r for r in requests if fenced(r, "context") == [PARIS, BERLIN]]
    pinned = schema_of(row_0)["properties"]["verdicts"]
    assert (pinned["minItems"], pinned["maxItems"]) == (2, 2)
    assert pinned["items"]["properties"]["index"] == {"type": "integer", "minimum": 1, "maximum": 2}


def test_example_detail_is_typed():
    detail = ContextUse().detail_fields["contexts"]
    assert detail == pl.List(
        pl.Struct({"context_index": pl.Int32, "used": pl.Boolean, "reason": pl.String})
    )
    assert TASK.schema["properties"]["verdicts"]["items"]["required"] == ["index", "reason", "used"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_example_score_matches_detail(server, judge, seed):
    """Recomputed from the detail alone, every row's score is the one reported."""
    server.handler = lambda body: auto_answer(body, seed)
    out = ragframe.run(frame(), [ContextUse()], judge=judge).frame
    for score, detail in zip(out["context_use"], out["context_use_detail"], strict=True):
        if detail["error"] is not None:
            assert score is None
            continue
        flags = [c["used"] for c in detail["contexts"]]
        assert math.isclose(score, sum(flags) / len(flags))


def test_example_unusable_answer_is_the_rows_error(server, judge):
    """A verdict naming the wrong context is re-asked once, then is the row's error."""

    def wrong_index(body: dict[str, Any]) -> str:
        n = len(fenced(body, "context"))
        return json.dumps({"verdicts": [{"index": 1, "reason": "r", "used": True}] * n})

    server.handler = wrong_index
    out = ragframe.run(frame().head(1), [ContextUse()], judge=judge).frame
    assert out["context_use"].to_list() == [None]
    assert "index" in out["context_use_detail"][0]["error"]


#: Where the "Writing a metric" section may live: the README today, the docs site or
#: CONTRIBUTING.md once the README is slimmed.
HEADING = re.compile(r"^(#{1,6}) Writing a metric[ \t]*$", re.M)


def section_files() -> list[Path]:
    """The Markdown files that may hold the section: README.md, CONTRIBUTING.md, docs/**/*.md."""
    candidates = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(ROOT.glob("docs/**/*.md"))]
    return [p for p in candidates if p.is_file()]


def section_of(text: str) -> str | None:
    """The "Writing a metric" section of a Markdown text (any heading level), up to the next
    heading of the same or a higher level outside a code fence; None when there is none."""
    lines = text.splitlines(keepends=True)
    start = next((k for k, line in enumerate(lines) if HEADING.match(line)), None)
    if start is None:
        return None
    level = len(HEADING.match(lines[start]).group(1))  # type: ignore[union-attr]
    fenced_code = False
    for k in range(start + 1, len(lines)):
        if lines[k].startswith("```"):
            fenced_code = not fenced_code
        elif not fenced_code and re.match(rf"#{{1,{level}}} ", lines[k]):
            return "".join(lines[start + 1 : k])
    return "".join(lines[start + 1 :])


def section_blocks() -> dict[Path, str | None]:
    """Per file holding the section, the first Python block of that section, or None."""
    found: dict[Path, str | None] = {}
    for path in section_files():
        body = section_of(path.read_text())
        if body is not None:
            block = re.search(r"```python\n(.*?)```", body, re.S)
            found[path] = expand_snippets(block.group(1)) if block else None
    return found


def test_the_section_is_found_in_its_own_text() -> None:
    """The finder itself: a section ends at the next heading of its level, not at a deeper
    one nor at a comment inside a code block."""
    text = (
        "# A\n## Writing a metric\nintro\n### Detail\n```python\n# a comment\nx = 1\n```\n"
        "## Next\nafter\n"
    )
    body = section_of(text)
    assert body is not None and "x = 1" in body and "### Detail" in body and "after" not in body
    assert section_of("## Writing a metrics guide\n") is None
    assert section_of("# Writing a metric\nall of it\n") == "all of it\n"


def test_readme_block_is_the_example():
    blocks = section_blocks()
    # The section is the project's own documentation: its absence is a failure, not a skip.
    assert blocks, (
        "no 'Writing a metric' section in README.md, CONTRIBUTING.md or docs/**/*.md: "
        "the worked example (tests/example_metric.py) must be documented somewhere"
    )
    source = (ROOT / "tests" / "example_metric.py").read_text()
    body = source.split('"""', 2)[2].lstrip("\n")
    shown = {path: block for path, block in blocks.items() if block is not None}
    # At least one section shows the example (another may point to it, as CONTRIBUTING.md
    # points to the docs page), and every one that shows code shows the example itself.
    assert shown, f"no 'Writing a metric' section shows the example: {sorted(map(str, blocks))}"
    for path, block in shown.items():
        where = path.relative_to(ROOT)
        # The block is the example file after its docstring, then a line or two that use it.
        assert block.startswith(body), (
            f"{where}: the 'Writing a metric' block differs from the example"
        )
