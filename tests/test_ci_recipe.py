"""Issue 28: the CI job of docs/ci.md (and the two commands of docs/configuration.md) run as
written, with the page's own ragframe.toml, against the local fake judge: score with a G-Eval
metric and gates, gate again, fail on a regression against main. The job holds no line of
Python: every command is `ragframe ...`."""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest
from conftest import reply, router

from ragframe.cli import main
from ragframe.testing.server import auto_answer

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(
    r"^(?:<!-- no-run: (?P<why>[^\n]+?) -->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.S | re.M,
)
#: The marker a page's command block carries when this file runs it.
RUN_HERE = "tests/test_ci_recipe.py runs these lines"


def recipe(page: str) -> tuple[str, list[list[str]]]:
    """The page's ragframe.toml (its ```toml block) and the commands of the block this file
    runs (each a `ragframe ...` line, split as a shell would)."""
    text = (ROOT / page).read_text()
    found = list(FENCE.finditer(text))
    tomls = [m["body"] for m in found if m["lang"] == "toml"]
    runs = [m["body"] for m in found if m["lang"] == "bash" and RUN_HERE in (m["why"] or "")]
    assert len(tomls) == 1 and len(runs) == 1, page
    lines = [shlex.split(line) for line in runs[0].splitlines() if line.strip()]
    return tomls[0], lines


def log(path: Path, n: int = 12, answer: str = "Thing {i} works by turning. It is blue.") -> None:
    pl.DataFrame(
        {
            "id": [f"row-{i}" for i in range(n)],
            "question": [f"How does thing {i} work?" for i in range(n)],
            "answer": [answer.format(i=i) for i in range(n)],
            "contexts": [[f"Thing {i} turns. Thing {i} is blue."] for i in range(n)],
            "ground_truth": [f"Thing {i} turns." for i in range(n)],
        }
    ).write_parquet(path)


def judge(g_eval: int, level: int = 5):
    """Answers: every claim supported, G-Eval's score `g_eval`, the rubric's level `level`."""

    def supported(body):
        answer = json.loads(auto_answer(body))
        for verdict in answer["verdicts"]:
            verdict["supported"] = True
        return json.dumps(answer)

    return router(
        faithfulness_verify=supported,
        g_eval_score=reply({"reason": "scripted", "score": g_eval}),
        rubric_score_score=reply({"reason": "scripted", "level": level}),
    )


@pytest.fixture
def job(server, tmp_path, monkeypatch):
    """A CI job's working directory: the secret and the endpoint in the environment, as a CI
    sets them, and nothing else."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ci-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.delenv("RAGFRAME_MODEL", raising=False)
    monkeypatch.setenv("RAGFRAME_EMBEDDING_MODEL", "fake-embedding")
    return tmp_path


def run(lines: list[list[str]]) -> list[int]:
    assert all(line[0] == "ragframe" for line in lines)  # no line of Python in the job
    return [main(line[1:]) for line in lines]


def test_the_ci_page_job_passes_then_fails_on_a_regression(server, job, capsys):
    toml, lines = recipe("docs/ci.md")
    (job / "ragframe.toml").write_text(toml)
    log(job / "log.parquet")
    # main's run: a helpful answer everywhere; its scored file is the baseline.
    server.handler = judge(g_eval=5)
    assert main(["score", "log.parquet", "-o", "main.parquet"]) == 0
    # The same answers on this branch: every step passes.
    assert run(lines) == [0, 0, 0]
    assert "| helpfulness" in (job / "gates.md").read_text()
    suite = ET.parse(job / "gates.xml").getroot()
    assert list(suite.iter("testcase")) and not list(suite.iter("failure"))
    # This branch's system answers otherwise, and less helpfully (G-Eval 2 of 5 = 0.25): the
    # gates fail (score and gate exit 1, gates.xml lists the failure) and compare sees the
    # regression. (New answers: the cache the job keeps has none of them.)
    server.handler = judge(g_eval=2)
    log(job / "log.parquet", answer="Thing {i}? It is blue, it turns.")
    for name in ("out.parquet", "gates.md", "gates.xml", "compare.xml"):
        (job / name).unlink()
    assert run(lines) == [1, 1, 1]
    failures = list(ET.parse(job / "gates.xml").getroot().iter("failure"))
    assert failures and any("helpfulness" in f.get("message", "") for f in failures)
    compared = ET.parse(job / "compare.xml").getroot()
    assert any("helpfulness" in (c.get("name") or "") for c in compared.iter("testcase"))
    scored = pl.read_parquet(job / "out.parquet")
    assert scored["helpfulness"].to_list() == [0.25] * 12
    assert "using ragframe.toml" in capsys.readouterr().err


def test_the_configuration_page_example_scores_and_gates(server, job):
    toml, lines = recipe("docs/configuration.md")
    (job / "ragframe.toml").write_text(toml)
    log(job / "logs.parquet")
    server.handler = judge(g_eval=5, level=5)
    assert run(lines) == [0, 0]
    scored = pl.read_parquet(job / "scored.parquet")
    assert {"faithfulness", "context_recall", "helpfulness", "correctness"} <= set(scored.columns)
    assert scored["correctness"].to_list() == [1.0] * 12
    assert (job / "gates.xml").exists()
    # The file's secret is the environment's: the key reached the server, the file has none.
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer sk-ci-secret"}
    assert "sk-" not in toml
