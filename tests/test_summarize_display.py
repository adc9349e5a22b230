"""`summarize()` displays as the table a person reads, in Jupyter (its HTML, parsed here) and in
a terminal (its text), while staying a Polars frame; and every summary's ✅ / ❌ (summarize,
`ragframe summarize`, the run summary of `ragframe score` / `RunResult`) sits beside the mean
it judges, with the comparison it made, never beside the pass rate (issue 28)."""

from __future__ import annotations

import pickle
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from ragframe.cli import main
from ragframe.decide.summarize import DISPLAY_ROWS, Summary, summarize
from ragframe.engine.summary import format_summary, mean_mark, metric_summary, summary_html
from ragframe.inputs.io import write_parquet
from ragframe.metrics.thresholds import Threshold

LONG = "context_relevancy_judged_against_the_reference_answer_with_a_long_name"


class Tables(HTMLParser):
    """Every <table> of an HTML text as rows of cell texts (the header row first), and the
    text outside the tables."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None
        self.outside: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
            self.depth += 1
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "table":
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        elif not self.depth:
            self.outside.append(data)


def parsed(html: str) -> tuple[list[dict[str, str]], str]:
    """The one table's rows as {header: cell}, and the text around it."""
    reader = Tables()
    reader.feed(html)
    (table,) = reader.tables
    head, *body = table
    return [dict(zip(head, row, strict=True)) for row in body], " ".join(reader.outside)


def text_rows(text: str) -> tuple[list[str], list[list[str]], list[str]]:
    """A text table's headers, its rows' cells (split on runs of 2+ spaces) and the lines
    under it."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line.replace(" ", "")) == {"-"})
    end = next((i for i in range(rule + 1, len(lines)) if "  " not in lines[i]), len(lines))
    split = [re.split(r" {2,}", line.strip()) for line in lines[rule + 1 : end]]
    return re.split(r" {2,}", lines[rule - 1].strip()), split, lines[end:]


def scored_file(path: Path, metrics: dict[str, np.ndarray], thresholds: dict[str, float]) -> Path:
    frame = pl.DataFrame(
        {"experiment": np.resize(["baseline", "candidate"], len(next(iter(metrics.values()))))}
    ).with_columns(
        *(pl.Series(name, values, pl.Float64) for name, values in metrics.items()),
        *(pl.struct(error=pl.lit(None, pl.String)).alias(f"{m}_detail") for m in metrics),
    )
    meta = {
        "metrics": {
            m: {"direction": "higher", "config": {"threshold": thresholds[m]}} for m in metrics
        }
    }
    write_parquet(frame, path, meta)
    return path


def mean_passes_rate_low() -> dict[str, np.ndarray]:
    """Two metrics at threshold 0.5. `mean_ok`: mean 0.56 meets it, but 2 rows of 10 pass;
    `rate_ok`: mean 0.44 misses it, though 8 rows of 10 pass."""
    return {
        "mean_ok": np.array([0.45] * 8 + [1.0] * 2),
        "rate_ok": np.array([0.55] * 8 + [0.0] * 2),
    }


# ------------------------------------------------------------------------------ summarize()


def test_every_mean_and_interval_shows_in_full(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    metrics = {m: rng.random(60) for m in ("faithfulness", "answer_relevancy", LONG)}
    path = scored_file(tmp_path / "s.parquet", metrics, dict.fromkeys(metrics, 0.5))
    table = summarize(path, by="experiment")
    assert table.width >= 11 and max(len(m) for m in table["metric"]) > 60
    rows, around = parsed(table._repr_html_())
    text = str(table)
    assert repr(table) == text
    headers, cells, notes = text_rows(text)
    assert "…" not in table._repr_html_() and "…" not in text
    assert len(rows) == len(cells) == table.height == 6
    for want, html_row, text_row in zip(table.iter_rows(named=True), rows, cells, strict=True):
        mean = f"{want['mean']:.3f}"
        interval = f"[{want['ci_low']:.3f}, {want['ci_high']:.3f}]"
        shown = dict(zip(headers, text_row, strict=True))
        for row in (html_row, shown):
            assert (row["experiment"], row["metric"]) == (want["experiment"], want["metric"])
            assert (row["n"], row["mean"], row["95% interval"]) == (str(want["n"]), mean, interval)
            assert row["pass rate"] == f"{want['pass_rate']:.1%} ({want['passed']} of 30)"
    # Under the table: what the mark judges, and that this is a frame with all its columns.
    for said in (around, "\n".join(notes)):
        assert "mean vs threshold: ✅ the mean meets the metric's threshold" in said
        assert f"{table.height} rows × {table.width} columns" in said
        assert ", ".join(table.columns) in " ".join(said.split())


def test_the_mark_judges_the_mean_and_sits_beside_it(tmp_path: Path) -> None:
    path = scored_file(
        tmp_path / "s.parquet", mean_passes_rate_low(), {"mean_ok": 0.5, "rate_ok": 0.5}
    )
    table = summarize(path)
    frame = {r["metric"]: r for r in table.iter_rows(named=True)}
    assert frame["mean_ok"]["status"] == "✅" and frame["mean_ok"]["pass_rate"] == 0.2
    assert frame["rate_ok"]["status"] == "❌" and frame["rate_ok"]["pass_rate"] == 0.8
    rows, _ = parsed(table._repr_html_())
    headers, cells, _ = text_rows(str(table))
    shown = {r["metric"]: r for r in rows}
    for row in ({c[0]: dict(zip(headers, c, strict=True)) for c in cells}, shown):
        assert row["mean_ok"]["mean vs threshold"] == "✅ ≥ 0.5"
        assert row["rate_ok"]["mean vs threshold"] == "❌ < 0.5"
        assert row["mean_ok"]["pass rate"] == "20.0% (2 of 10)"
        assert row["rate_ok"]["pass rate"] == "80.0% (8 of 10)"
    # The mark's column follows the mean and its interval; no mark beside the pass rate.
    order = list(rows[0])
    assert order.index("mean vs threshold") == order.index("mean") + 2
    assert not any(mark in r["pass rate"] for r in rows for mark in "✅❌")


def test_the_cli_table_marks_the_mean_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scored_file(
        tmp_path / "s.parquet", mean_passes_rate_low(), {"mean_ok": 0.5, "rate_ok": 0.5}
    )
    assert main(["summarize", str(path)]) == 0
    headers, cells, notes = text_rows(capsys.readouterr().out)
    rows = {c[0]: dict(zip(headers, c, strict=True)) for c in cells}
    assert headers[-2:] == ["mean vs threshold", "pass rate"]
    assert (rows["mean_ok"]["mean vs threshold"], rows["mean_ok"]["pass rate"]) == (
        "✅ ≥ 0.5",
        "20.0% (2 of 10)",
    )
    assert (rows["rate_ok"]["mean vs threshold"], rows["rate_ok"]["pass rate"]) == (
        "❌ < 0.5",
        "80.0% (8 of 10)",
    )
    assert any(line.startswith("mean vs threshold: ✅ the mean meets") for line in notes)


def test_marks_in_each_direction_and_strict_mode() -> None:
    assert mean_mark("✅", 0.3, False, "lower") == "✅ ≤ 0.3"
    assert mean_mark("❌", 0.3, False, "lower") == "❌ > 0.3"
    assert mean_mark("✅", 0.7, True, "higher") == "✅ = 1 (strict)"
    assert mean_mark("❌", 0.7, True, "higher") == "❌ < 1 (strict)"
    assert mean_mark("❌", 0.7, True, "lower") == "❌ > 0 (strict)"
    assert mean_mark(None, 0.7, False, "higher") == mean_mark("✅", None, None, None) == "-"


def test_a_pass_column_rule_says_so_and_gets_no_mark() -> None:
    frame = pl.DataFrame(
        {
            "faithfulness": [0.9, 0.2, 0.8, 0.7],
            "faithfulness_pass": [True, False, True, False],
            "faithfulness_detail": [{"error": None}] * 4,
        }
    )
    rows, _ = parsed(summarize(frame)._repr_html_())
    assert rows[0]["mean vs threshold"] == "-"
    assert rows[0]["pass rate"] == "50.0% by faithfulness_pass"


# ------------------------------------------------------------------------------ still a frame


def test_the_result_is_a_polars_frame_whose_display_survives_row_operations(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    metrics = {"faithfulness": rng.random(40), "answer_relevancy": rng.random(40)}
    table = summarize(scored_file(tmp_path / "s.parquet", metrics, dict.fromkeys(metrics, 0.5)))
    plain = pl.DataFrame(table)
    assert isinstance(table, pl.DataFrame) and type(plain) is pl.DataFrame
    assert table.equals(plain) and table.schema == plain.schema
    assert table.columns == [
        "metric", "direction", "n", "scored", "failed", "mean", "ci_low", "ci_high", "level",
        "method", "threshold", "strict", "passed", "pass_rate", "status",
    ]  # fmt: skip
    assert str(plain).startswith("shape:")  # Polars' own display, for the plain frame
    kept = (
        table.sort("mean"),
        table.filter(pl.col("metric") == "faithfulness"),
        table.head(1),
        table.with_columns(pl.col("mean").round(1).alias("rounded")),
        table.join(pl.DataFrame({"metric": ["faithfulness"], "team": ["a"]}), on="metric"),
        pickle.loads(pickle.dumps(table)),
    )
    for frame in kept:
        assert isinstance(frame, Summary)
        assert "mean vs threshold" in str(frame).splitlines()[0], str(frame)
    added = parsed(kept[3]._repr_html_())[0]
    assert [r["rounded"] for r in added] == [str(round(m, 1)) for m in table["mean"]]
    # Without the columns it reads, it displays as Polars does.
    for frame in (table.select("metric", "mean"), table[["metric", "n"]]):
        assert str(frame).startswith("shape:") and "<table" in frame._repr_html_()


def test_a_summary_a_filter_or_join_changed_still_displays(tmp_path: Path) -> None:
    """No rows left (a filter, `head(0)`), rows a right / full join added with null counts
    and no level, a column cast to text: every display reads, in a terminal and in HTML."""
    metrics = mean_passes_rate_low()
    table = summarize(scored_file(tmp_path / "s.parquet", metrics, dict.fromkeys(metrics, 0.5)))
    for empty in (table.filter(pl.col("metric") == "nope"), table.head(0)):
        assert isinstance(empty, Summary)
        headers, rows, notes = text_rows(str(empty))
        assert headers[:3] == ["metric", "better", "n"] and rows == []
        assert "no rows (a filter or a join left none)" in notes
        html_rows, around = parsed(empty._repr_html_())
        assert html_rows == [] and "no rows" in around
    targets = pl.DataFrame({"metric": ["context_recall", "mean_ok"], "target": [0.7, 0.8]})
    for how in ("right", "full"):
        joined = table.join(targets, on="metric", how=how, coalesce=True)
        # a right join's first row is the join's own: its null level must not break the rest
        assert isinstance(joined, Summary) and joined["n"].null_count() == 1
        _, rows, _ = text_rows(str(joined))
        added = next(r for r in rows if r[0] == "context_recall")
        assert added[:6] == ["context_recall", "?", "-", "-", "-", "-"] and added[-1] == "0.7"
        html_rows, _ = parsed(joined._repr_html_())
        cells = next(r for r in html_rows if r["metric"] == "context_recall")
        assert cells["n"] == cells["scored"] == cells["pass rate"] == "-"
        assert "95% interval" in cells and cells["target"] == "0.7"
        kept = next(r for r in html_rows if r["metric"] == "mean_ok")
        assert kept["n"] == "10" and kept["pass rate"] == "20.0% (2 of 10)"
    as_text = table.with_columns(pl.col("mean").cast(pl.String))
    assert str(as_text).startswith("shape:") and "<table" in as_text._repr_html_()


def test_a_long_summary_says_how_many_rows_it_leaves_out() -> None:
    frame = pl.DataFrame(
        {
            "question": [f"q{i:03}" for i in range(DISPLAY_ROWS + 5) for _ in range(2)],
            "faithfulness": np.linspace(0, 1, 2 * (DISPLAY_ROWS + 5)),
            "faithfulness_detail": [{"error": None}] * (2 * (DISPLAY_ROWS + 5)),
        }
    )
    table = summarize(frame, by="question")
    rows, around = parsed(table._repr_html_())
    assert len(rows) == DISPLAY_ROWS
    assert f"showing the first {DISPLAY_ROWS} of {DISPLAY_ROWS + 5} rows" in around


# ------------------------------------------------------------------------------ run summary

RUN: dict[str, Any] = {
    "rows": 10,
    "requests": 0,
    "cache_hits": 0,
    "deduplicated": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "seconds": 0.0,
}


def test_the_run_summary_marks_the_mean_beside_it() -> None:
    metrics = {
        name: metric_summary(pl.Series(values), "higher", rule=Threshold(0.5))
        for name, values in mean_passes_rate_low().items()
    }
    metrics["plain"] = metric_summary(pl.Series([0.1, 0.2, 0.3]), "lower")
    summary = {**RUN, "metrics": metrics}
    headers, cells, notes = text_rows(format_summary(summary, local=False))
    text = {c[0]: dict(zip(headers, c, strict=True)) for c in cells}
    html = {r["metric"]: r for r in parsed(summary_html(summary, local=False))[0]}
    for rows in (text, html):
        assert list(rows["mean_ok"])[4:] == [
            "mean",
            "95% interval",
            "mean vs threshold",
            "pass rate",
        ]
        assert rows["mean_ok"]["mean vs threshold"] == "✅ ≥ 0.5"
        assert rows["mean_ok"]["pass rate"] == "20.0% (2 of 10)"
        assert rows["rate_ok"]["mean vs threshold"] == "❌ < 0.5"
        assert rows["rate_ok"]["pass rate"] == "80.0% (8 of 10)"
        assert rows["plain"]["better"] == "↓ lower"
        assert (rows["plain"]["mean vs threshold"], rows["plain"]["pass rate"]) == ("-", "-")
    assert notes[0].startswith("mean vs threshold: ✅ the mean meets the metric's threshold")
