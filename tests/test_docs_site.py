"""The documentation site builds with `mkdocs build --strict`, and its generated pages (one per
metric, from the registry; the command-line reference, from the argument parser) say what the
code says."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ragframe
from ragframe.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def text(page: Path) -> str:
    """A built page's visible text, roughly: tags dropped, entities decoded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())


def plain(markdown: str) -> str:
    """What a one-line Markdown text reads as once rendered: no backticks, one space."""
    return " ".join(markdown.replace("`", "").split())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_metric_has_its_page(site):
    catalogue = ragframe.catalog()
    assert set(ragframe.REGISTRY) <= set(catalogue["name"])
    overview = text(site / "metrics" / "index.html")
    for row in catalogue.iter_rows(named=True):
        page = text(site / "metrics" / row["name"] / "index.html")
        assert row["name"] in page
        for field in ("formula", "requests_per_row", "empty_input", "source"):
            assert plain(row[field]) in page, (row["name"], field)
        assert plain(row["formula"]) in overview


def test_a_lower_is_better_metric_says_so(site):
    page = text(site / "metrics" / "hallucination" / "index.html")
    assert re.search(r"better\s*\|?\s*lower", page)


def test_the_cli_reference_has_every_subcommand_and_option(site):
    page = text(site / "cli" / "index.html")
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subparsers.choices.items():
        assert f"ragframe {name}" in page
        for action in sub._actions:
            for option in action.option_strings:
                assert option in page, (name, option)
    # The exit statuses come from the parsers' epilogs.
    assert "exit status" in page


def test_the_api_reference_renders_the_public_api(site):
    page = (site / "api" / "index.html").read_text()
    for name in ("run", "Judge", "summarize", "compare", "agreement", "report", "catalog"):
        assert f'id="ragframe.{name}"' in page, name
    assert 'id="ragframe.evaluate"' in page
    assert 'id="ragframe.testing.FakeServer"' in page


def test_writing_a_metric_shows_the_example_file(site):
    page = text(site / "writing-a-metric" / "index.html")
    assert "class ContextUse(Metric):" in page
    assert "--8<--" not in page


def test_contributing_page_is_the_file(site):
    page = text(site / "contributing" / "index.html")
    assert "How a row flows" in page and "The map of the packages" in page


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
