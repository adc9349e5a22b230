"""Both notebooks run top to bottom in a real Jupyter kernel (nbclient), against the scripted
server the notebooks start themselves when no endpoint is configured. Their outputs are parsed,
not searched for a word: the run's summary and the summarize table must agree, and the report
shown inline must draw every one of its figures (Debian's headless Chromium, network off)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

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


class Tables(HTMLParser):
    """Every <table> of an HTML text as rows of cell texts (header rows included)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None and self.tables:
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None


def html_of(cell: nbformat.NotebookNode) -> str:
    """The HTML the cell displayed (its result's rich output), exactly one."""
    shown = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    assert len(shown) == 1, f"expected one HTML output from {cell.source[:60]!r}"
    return shown[0]


def code_cell(cells: list[nbformat.NotebookNode], call: str) -> nbformat.NotebookNode:
    (found,) = [c for c in cells if c.cell_type == "code" and call in c.source]
    return found


def test_quickstart_runs_top_to_bottom(monkeypatch, tmp_path):
    cells = executed("quickstart.ipynb", monkeypatch, tmp_path).cells
    # The run's summary: per metric its mean and 95% interval, and a pass rate exactly for the
    # two metrics given a threshold, with that threshold.
    parser = Tables()
    parser.feed(html_of(code_cell(cells, "ragframe.run(")))
    (summary,) = [t for t in parser.tables if t and "95% interval" in t[0]]
    head = summary[0]
    rows = {r[head.index("metric")]: dict(zip(head, r, strict=True)) for r in summary[1:]}
    assert set(rows) == {"faithfulness", "context_precision", "context_recall"}
    for row in rows.values():
        low, high = (float(x) for x in re.findall(r"[-\d.]+", row["95% interval"]))
        assert low <= float(row["mean"]) <= high and int(row["scored"]) == 20, row
    assert rows["context_precision"]["mean vs threshold"] == "-"
    assert rows["context_precision"]["pass rate"] == "-"
    rates = {}
    for metric, threshold in (("faithfulness", 0.7), ("context_recall", 0.5)):
        # the mark judges the mean, beside it; the pass rate stands apart, with its counts
        meets = float(rows[metric]["mean"]) >= threshold
        assert rows[metric]["mean vs threshold"] == f"{'✅ ≥' if meets else '❌ <'} {threshold}"
        shown = re.fullmatch(r"([\d.]+)% \((\d+) of 20\)", rows[metric]["pass rate"])
        assert shown, rows[metric]["pass rate"]
        rates[metric] = float(shown.group(1)) / 100
    # summarize by a metadata column: one row per human_label and metric, whose passed rows add
    # up to the run's pass rate.
    parser = Tables()
    parser.feed(html_of(code_cell(cells, "ragframe.summarize(")))
    (table,) = parser.tables
    head, body = table[0], table[1:]
    groups = [dict(zip(head, r, strict=True)) for r in body]
    labels = {g["human_label"] for g in groups}
    assert labels == {"Useful", "Partially useful"}
    assert len(groups) == 3 * len(labels)
    for metric, rate in rates.items():
        mine = [g for g in groups if g["metric"] == metric]
        counts = [re.fullmatch(r"[\d.]+% \((\d+) of (\d+)\)", g["pass rate"]) for g in mine]
        assert all(counts), [g["pass rate"] for g in mine]
        passed = sum(int(c.group(1)) for c in counts if c)
        assert sum(int(g["scored"]) for g in mine) == 20
        assert passed / 20 == pytest.approx(rate, abs=5e-4), (metric, mine)
    # ragframe.show: the card of row 0, whose claims' marks give the score its heading shows
    # (supported / claims), in the HTML Jupyter renders and the text a terminal prints.
    card = code_cell(cells, "ragframe.show(scored, row=0")
    (shown,) = [o["data"] for o in card.outputs if "text/html" in o.get("data", {})]
    score = float(re.search(r"── faithfulness ([\d.]+) · row 0", shown["text/plain"])[1])
    claims = shown["text/html"].split("<h5>claims", 1)[1]
    yes, no = claims.count("✓ yes"), claims.count("✗ no")
    assert yes + no > 0 and round(yes / (yes + no), 3) == score, (yes, no, score)
    # the run written with its provenance: the judge that scored it read back from the file
    meta = text_of(code_cell(cells, "result.write_parquet(path)"))
    assert "'model': 'fake-judge'" in meta, meta


def data_rows(spec: Any) -> int:
    """The rows of inline data a Vega-Lite spec carries: `data.values` at any depth (a layer's
    own data included) and named `datasets`."""
    if isinstance(spec, list):
        return sum(data_rows(x) for x in spec)
    if not isinstance(spec, dict):
        return 0
    rows = sum(len(v) for v in spec.get("datasets", {}).values())
    data = spec.get("data")
    if isinstance(data, dict) and isinstance(data.get("values"), list):
        rows += len(data["values"])
    return rows + sum(data_rows(v) for k, v in spec.items() if k not in ("data", "datasets"))


class Charts(HTMLParser):
    """The report's figure elements and, per figure, whether it drew and its first <svg>."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "rf-chart" in (a.get("class") or "").split():
            self.charts.append({"drawn": a.get("data-drawn"), "svg": None})
        elif tag == "svg" and self.charts and self.charts[-1]["svg"] is None:
            self.charts[-1]["svg"] = (float(a.get("width") or 0), float(a.get("height") or 0))


def drawn_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of a local page after 20 s of virtual time in headless Chromium, no network."""
    chromium = shutil.which("chromium")
    if chromium is None:  # a system browser, not part of the project (test_report installs it)
        pytest.skip("chromium is not installed: the figures cannot be drawn here")
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_compare_runs_ends_with_a_decision_from_the_numbers(monkeypatch, tmp_path):
    cells = executed("compare_runs.ipynb", monkeypatch, tmp_path).cells
    decision = text_of(cells[-1])
    assert "Faithfulness, B - A = " in decision and "Decision: " in decision
    assert "n = 20 paired questions" in decision
    # the CI check in Python displays its finding (worse or not) for faithfulness
    check = html_of(code_cell(cells, "comparison.check_regression("))
    assert "faithfulness" in check, check[:300]
    # The report shown inline: one Vega-Lite spec per figure, each with data to draw ...
    page = html_of(code_cell(cells, "ragframe.report("))
    specs = json.loads(
        re.search(r"<script type='application/json' id='rf-specs'>(.*?)</script>", page, re.S)[1]
    )
    expected = page.count("class='rf-chart'")
    assert expected > 0 and len(specs) == expected
    assert all(data_rows(spec) > 0 for spec in specs), [data_rows(s) for s in specs]
    # ... and every figure drew an SVG of non-zero size in a browser.
    out = tmp_path / "report.html"
    out.write_text(page, encoding="utf-8")
    parser = Charts()
    parser.feed(drawn_dom(out, tmp_path))
    assert len(parser.charts) == expected
    failed = [c for c in parser.charts if c["drawn"] != "1" or not c["svg"] or min(c["svg"]) <= 0]
    assert not failed, failed


def polars_table(cell: nbformat.NotebookNode) -> list[dict[str, str]]:
    """The Polars frame a cell displayed, as rows of {column: cell text} (its dtype row and
    Polars' quotes around strings dropped)."""
    parser = Tables()
    parser.feed(html_of(cell))
    (table,) = parser.tables
    head, _dtypes, *body = table
    return [{k: v.strip('"') for k, v in zip(head, row, strict=True)} for row in body]


def result_of(cell: nbformat.NotebookNode) -> str:
    """The value a cell ended with, as text (not what it printed or its progress bars)."""
    (shown,) = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
    return shown["data"]["text/plain"]


def test_test_sets_goes_from_documents_to_a_comparison(monkeypatch, tmp_path):
    cells = executed("test_sets.ipynb", monkeypatch, tmp_path).cells
    # the shipped corpus read and split, every chunk an exact span of its document
    documents = sorted((NOTEBOOKS.parent / "data" / "corpus" / "harrow").glob("*.md"))
    shown_docs = polars_table(code_cell(cells, "docs = read_corpus("))
    assert [r["doc_id"] for r in shown_docs] == [p.name for p in documents]
    assert result_of(code_cell(cells, "spans_exact = all(")) == "True"
    # the run's summary: kept and rejected counts that the frames shown agree with
    summary = text_of(code_cell(cells, "ragframe.generate_run("))
    found = re.search(r"generated (\d+) of 10 rows asked for, .*?\((\d+) rejected", summary)
    assert found, summary
    kept, rejected = int(found[1]), int(found[2])
    assert kept >= 1 and rejected >= 1, summary
    assert "rejected by check: " in summary and "requests: " in summary
    rows = polars_table(code_cell(cells, "testset = result.frame"))
    assert len(rows) == kept
    assert all(r["question"] and r["reference_context_ids"].startswith("[") for r in rows)
    # rejected rows: each with the check that failed and a reason
    shown = polars_table(code_cell(cells, 'result.rejected.select("question_type"'))
    checks = {"generation", "grounded", "check", "self_contained", "answerable", "duplicate"}
    assert shown and all(r["rejected_by"] in checks and r["reason"] for r in shown), shown
    counts = polars_table(code_cell(cells, "result.rejected.group_by("))
    assert sum(int(r["len"]) for r in counts) == rejected
    # the same seed, the same rows
    assert result_of(code_cell(cells, "reproduced = again.equals(")) == "True"
    # every question answered, no error
    answered = polars_table(code_cell(cells, "top3 = ragframe.answer("))
    assert len(answered) == kept and all(r["answer_error"] == "null" for r in answered)
    # scores present for every kept row and metric, each in [0, 1]
    metrics = ("faithfulness", "context_recall", "context_recall_ids")
    scored = polars_table(code_cell(cells, "ragframe.evaluate(top3"))
    assert len(scored) == kept
    for metric in metrics:
        values = [r[metric] for r in scored if r[metric] != "null"]
        assert values and all(0 <= float(v) <= 1 for v in values), (metric, values)
    # the comparison: one row per metric, paired on every kept question
    page = html_of(code_cell(cells, "ragframe.compare("))
    parser = Tables()
    parser.feed(page)
    (table,) = parser.tables
    head, body = table[0], table[1:]
    assert [r[0].split()[0] for r in body] == list(metrics)
    assert all(int(r[head.index("n")]) == kept for r in body), body
    # The notebook's HTML outputs, drawn offline in a browser: every table, the comparison's
    # interval marks included.
    outputs = [
        o["data"]["text/html"]
        for c in cells
        if c.cell_type == "code"
        for o in c.outputs
        if "text/html" in o.get("data", {})
    ]
    out = tmp_path / "test_sets.html"
    out.write_text("<!doctype html><meta charset='utf-8'>" + "".join(outputs), encoding="utf-8")
    dom = drawn_dom(out, tmp_path)
    drawn = Tables()
    drawn.feed(dom)
    assert len(drawn.tables) == sum(o.count("<table") for o in outputs)
    assert dom.count("<svg") == page.count("<svg") == len(metrics)
