"""The README's Python examples and the notebook run as written (against the local server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


@pytest.fixture
def judge_env(server, monkeypatch, tmp_path):
    """Point the environment at the local server, as a user would point it at OpenAI."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
    monkeypatch.setenv("RAGFRAME_MODEL", "fake-judge")
    monkeypatch.setenv("RAGFRAME_EMBEDDING_MODEL", "fake-embedding")
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache.sqlite3"))
    return server


def test_readme_examples_run(judge_env):
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    scored = namespace["scored"]
    assert {"faithfulness", "faithfulness_detail", "context_recall"} <= set(scored.columns)
    assert judge_env.count() > 0
