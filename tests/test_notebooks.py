"""Both notebooks run top to bottom in a real Jupyter kernel (nbclient), against the scripted
server the notebooks start themselves when no endpoint is configured."""

from __future__ import annotations

from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="nbclient is in the dev extra")
import nbformat  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def executed(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> nbformat.NotebookNode:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache.sqlite3"))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        f"{name} is committed with outputs; clear them"
    )
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    return notebook


def text_of(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        data = output.get("data", {})
        parts.append(data.get("text/html", "") + data.get("text/plain", ""))
    return "".join(parts)


def test_quickstart_runs_top_to_bottom(monkeypatch, tmp_path):
    cells = [c for c in executed("quickstart.ipynb", monkeypatch, tmp_path).cells]
    shown = "".join(text_of(c) for c in cells)
    assert "95% interval" in shown  # the run's summary table
    assert "faithfulness_pass" not in shown or "pass rate" in shown
    assert "human_label" in shown  # summarize by a metadata column


def test_compare_runs_ends_with_a_decision_from_the_numbers(monkeypatch, tmp_path):
    cells = executed("compare_runs.ipynb", monkeypatch, tmp_path).cells
    report = next(c for c in cells if c.cell_type == "code" and "ragframe.report" in c.source)
    assert "<svg" in text_of(report) or "vega" in text_of(report).lower()
    decision = text_of(cells[-1])
    assert "Faithfulness, B - A = " in decision and "Decision: " in decision
    assert "n = 20 paired questions" in decision
