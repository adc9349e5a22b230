"""ragframe.report: one self-contained HTML file, drawn in headless Chromium.

Chromium is Debian's `chromium` package: installed with apt by the fixture when missing, and
the rendering tests are skipped (with the reason) only where apt is unavailable or fails. It
runs with every network address unreachable, so a figure that needed a URL would not draw.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest

pytest.importorskip(
    "altair", reason="the report extra is not installed: pip install -e '.[report]'"
)
pytest.importorskip("vl_convert", reason="the report extra is not installed")

from ragframe import Judge, compare, run
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import read_metadata, write_parquet
from ragframe.report import report

DATA = Path(__file__).resolve().parent.parent / "data"
METRICS = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]
#: User text that would run or load something if it reached the page unescaped.
PAYLOAD = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"


# ------------------------------------------------------------------------------ Chromium


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of Debian's chromium, installed with apt when missing."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and apt-get is unavailable to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # the package lists may be missing or stale
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        pytest.skip(f"apt-get install chromium failed: {' '.join(tail) or done.returncode}")
    return found


def browse(chromium: str, page: Path, tmp: Path, *args: str) -> str:
    """Run headless Chromium on a local page once the scripts had 20 s of virtual time; no
    network: every host is unresolvable and every proxied request goes to a closed port."""
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000",
        *args,
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Charts(HTMLParser):
    """The figure elements of a DOM and, per figure, the size of its first <svg>."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if "rf-chart" in (a.get("class") or "").split():
            self.charts.append({"drawn": a.get("data-drawn"), "svg": None})
        elif tag == "svg" and self.charts and self.charts[-1]["svg"] is None:
            size = (float(a.get("width") or 0), float(a.get("height") or 0))
            self.charts[-1]["svg"] = size


def decode_png(data: bytes) -> np.ndarray:
    """An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) as an array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and color in (2, 6), (depth, color)
    bpp = 3 if color == 2 else 4
    raw, at = b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            raw += data[at + 8 : at + 8 + length]
        at += 12 + length
    flat = zlib.decompress(raw)
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        kind = flat[y * (stride + 1)]
        line = np.frombuffer(flat, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if kind == 1:  # Sub: a running sum per channel
            line = np.cumsum(line.reshape(width, bpp), axis=0).ravel() % 256
        elif kind == 2:
            line = (line + prev) % 256
        elif kind in (3, 4):
            line = _unfilter_slow(kind, line.tolist(), prev.tolist(), bpp)
        out[y] = line
        prev = out[y].astype(np.int64)
    return out.reshape(height, width, bpp)[:, :, :3]


def _unfilter_slow(kind: int, line: list[int], up: list[int], bpp: int) -> np.ndarray:
    """The Average and Paeth filters, which depend on the bytes just decoded."""
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        b, c = up[i], (up[i - bpp] if i >= bpp else 0)
        if kind == 3:
            line[i] = (line[i] + (a + b) // 2) % 256
            continue
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        line[i] = (line[i] + pred) % 256
    return np.array(line, dtype=np.int64)


def check_drawn(chromium: str, page: Path, tmp: Path) -> list[dict[str, Any]]:
    """Every figure of the page drew an SVG of non-zero size, and the screenshot is not
    blank: it has ink, and coloured marks (bars, dots, lines) besides the text."""
    expected = page.read_text(encoding="utf-8").count("class='rf-chart'")
    assert expected > 0
    parser = Charts()
    parser.feed(browse(chromium, page, tmp, "--dump-dom"))
    assert len(parser.charts) == expected
    failed = [c for c in parser.charts if c["drawn"] != "1" or not c["svg"] or min(c["svg"]) <= 0]
    assert not failed, failed
    shot = tmp / "screenshot.png"
    browse(
        chromium,
        page,
        tmp,
        f"--screenshot={shot}",
        "--window-size=1200,2000",
        "--force-device-scale-factor=0.5",
    )
    pixels = decode_png(shot.read_bytes()).astype(np.int64)
    ink = np.count_nonzero(pixels.min(axis=2) < 200)
    coloured = np.count_nonzero(pixels.max(axis=2) - pixels.min(axis=2) > 60)
    assert ink > 0.02 * pixels.shape[0] * pixels.shape[1], ink
    assert coloured > 2000, coloured
    return parser.charts


# ------------------------------------------------------------------------------ inputs


def sample_rows(n: int = 12) -> pl.DataFrame:
    """The shipped sample with an experiment column (one group named to break out of a
    script), a question that is markup, and a row without contexts (it fails to score)."""
    frame = pl.read_parquet(DATA / "sample.parquet").head(n)
    position = pl.int_range(pl.len())
    return frame.with_columns(
        pl.when(position % 2 == 0)
        .then(pl.lit("baseline"))
        .otherwise(pl.lit(PAYLOAD))
        .alias("experiment"),
        pl.when(position == 1)
        .then(pl.lit(PAYLOAD))
        .otherwise(pl.col("question"))
        .alias("question"),
        pl.when(position == 3)
        .then(pl.lit([], pl.List(pl.String)))
        .otherwise(pl.col("contexts"))
        .alias("contexts"),
    )


@pytest.fixture
def scored_file(judge: Judge, tmp_path: Path) -> Path:
    """A real scored file: the sample scored by the scripted server, written with metadata."""
    path = tmp_path / "scored.parquet"
    run(sample_rows(), METRICS, judge=judge).write_parquet(path)
    return path


def section(page: str, anchor: str) -> str:
    found = re.search(rf"<section id='{anchor}'>(.*?)</section>", page, re.S)
    assert found, f"no section {anchor}"
    return found.group(1)


class Cells(HTMLParser):
    """The text of every table cell, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def cells(fragment: str) -> list[list[str]]:
    parser = Cells()
    parser.feed(fragment)
    return parser.rows


def specs(page: str) -> list[dict[str, Any]]:
    found = re.search(r"<script type='application/json' id='rf-specs'>(.*?)</script>", page, re.S)
    assert found
    return list(json.loads(found.group(1)))


# ------------------------------------------------------------------------------ tests


def test_report_draws_every_figure_offline(
    chromium: str, scored_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    page = report(scored_file, by="experiment", output=out)
    assert out.read_text(encoding="utf-8") == page
    # summary, 4 histograms, 4 group means
    assert page.count("class='rf-chart'") == 9
    check_drawn(chromium, out, tmp_path)
    dom = browse(chromium, out, tmp_path, "--dump-dom")
    # The markup in the data stayed text: no element was injected, no script added.
    after, before = Charts(), Charts()
    after.feed(dom)
    before.feed(page)
    assert "img" not in after.tags
    assert after.tags.count("script") == before.tags.count("script") == 3
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom


def test_nothing_is_loaded_from_a_url(scored_file: Path) -> None:
    page = report(scored_file, by="experiment")
    lowered = page.lower()
    for pattern in (
        r"<script[^>]*\bsrc\s*=",
        r"<link\b",
        r"<iframe\b",
        r"@import",
        r"url\(\s*['\"]?\s*(https?:)?//",
    ):
        assert not re.search(pattern, lowered), pattern
    assert not re.search(r"(src|href)\s*=\s*['\"]?\s*(https?:)?//", lowered)
    # The plotting script is inlined once, whatever the number of figures.
    assert lowered.count("vegaembed=") <= 1
    assert page.count("window.vegaEmbed") == 1
    assert '"$schema"' not in page


def test_user_text_is_escaped(scored_file: Path) -> None:
    page = report(scored_file, by="experiment")
    assert PAYLOAD not in page
    parsed = Charts()
    parsed.feed(page)
    assert "img" not in parsed.tags and parsed.tags.count("script") == 3
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;/script&gt;" in page
    # In the figures' JSON, a '<' never appears raw (it could close the <script>).
    data = re.search(r"id='rf-specs'>(.*?)</script>", page, re.S)
    assert data and "<" not in data.group(1)
    labels = json.dumps(specs(page))
    assert "</script><script>alert(2)" in labels  # the group label itself, as data


def test_contents_of_a_real_run(scored_file: Path) -> None:
    meta = read_metadata(scored_file)
    frame = pl.read_parquet(scored_file)
    page = report(scored_file, by="experiment", worst=3)
    summary = cells(section(page, "summary"))
    by_metric = {row[0]: row for row in summary[1:]}
    assert list(by_metric) == METRICS
    for m in METRICS:
        scored = frame[m].drop_nulls()
        assert by_metric[m][2:5] == ["12", f"{scored.len()}", f"{12 - scored.len()}"]
        assert by_metric[m][5] == f"{scored.mean():.3f}"
    # Every histogram is pre-binned (20 bins per group line at most) and says its n.
    charts = specs(page)
    histograms = [c for c in charts if "distribution" in json.dumps(c.get("title"))]
    assert len(histograms) == 4
    for chart in histograms:
        text = json.dumps(chart)
        assert re.search(r"n = \d+ scored rows", text)
    # The worst rows: `worst` per metric, lowest first, each with its verdicts and reasons.
    worst = section(page, "worst")
    assert worst.count("<details class='row'>") == 3 * 4
    lowest = (
        frame.with_row_index()
        .filter(pl.col("faithfulness").is_not_null())
        .sort("faithfulness", "index")
    )
    first = lowest.row(0, named=True)
    assert f"row {first['index']:,}" in worst.split("answer_relevancy")[0]
    reason = first["faithfulness_detail"]["claims"][0]["reason"]
    assert reason in worst
    # Failures: the row without contexts, with its reason.
    failures = section(page, "failures")
    assert "missing input" in failures and "faithfulness: 1 rows failed to score" in failures
    # The run's metadata: judge, prompt hashes, requests, tokens.
    run_meta = section(page, "run")
    assert "fake-judge" in run_meta and meta["judge"]["endpoint_host"] in run_meta
    for recorded in meta["metrics"].values():
        for digest in recorded["prompt_hashes"].values():
            assert digest in run_meta
    usage = dict(row for row in cells(run_meta) if len(row) == 2)
    assert usage["requests"] == f"{meta['summary']['requests']:,}"
    assert usage["prompt_tokens"] == f"{meta['summary']['prompt_tokens']:,}"
    assert usage["cost (USD)"] == "unknown price"
    # Every figure says how many rows it rests on.
    for chart in charts:
        assert re.search(r"n = \d|\(n=\d", json.dumps(chart, ensure_ascii=False)), chart
    # Groups: each group's n in the figure labels, and every (group, metric) in the table.
    groups = section(page, "groups")
    assert len(cells(groups)) == 1 + 2 * 4
    assert "baseline (n=" in json.dumps(charts)
    assert "pass" not in dict(re.findall(r"<a href='#(\w+)'>(.*?)</a>", page))


def handmade(tmp_path: Path) -> Path:
    """A scored file written by hand: a `_pass` column on one metric, thresholds in the
    metadata on two others (one lower-is-better, one strict), a reason that is markup."""
    claims = pl.List(pl.Struct({"claim": pl.String, "supported": pl.Boolean, "reason": pl.String}))
    detail = pl.Struct({"claims": claims, "error": pl.String})
    frame = pl.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "question": ["q1", "q2", "q3", "q4", "q5"],
            "faithfulness": [0.9, 0.8, 0.2, None, 0.95],
            "faithfulness_detail": [
                {"claims": [{"claim": "c", "supported": True, "reason": "fine"}], "error": None},
                {"claims": [], "error": None},
                {"claims": [{"claim": "x", "supported": False, "reason": PAYLOAD}], "error": None},
                {"claims": None, "error": "timeout after 3 retries"},
                {"claims": [], "error": None},
            ],
            "faithfulness_pass": [True, False, False, None, True],
            "context_recall": [0.1, 0.5, 0.7, 0.9, None],
            "hallucination": [0.1, 0.3, 0.5, None, 0.0],
            "answer_relevancy": [1.0, 1.0, 0.5, 1.0, 1.0],
        },
        schema_overrides={"faithfulness_detail": detail},
    )
    meta = {
        "ragframe_version": "0.1.0",
        "judge": {"model": "hand-made"},
        "metrics": {
            "faithfulness": {"direction": "higher", "config": {"threshold": 0.5}},
            "context_recall": {"direction": "higher", "config": {"threshold": 0.7}},
            "hallucination": {"direction": "lower", "config": {"threshold": 0.3}},
            "answer_relevancy": {"direction": "higher", "config": {"strict": True}},
        },
        "summary": {"rows": 5, "requests": 9, "failures": {"timeout": 1}, "cost_usd": 0.0123},
    }
    path = tmp_path / "handmade.parquet"
    write_parquet(frame, path, meta)
    return path


def test_pass_rates_from_pass_columns_and_thresholds(tmp_path: Path) -> None:
    page = report(handmade(tmp_path))
    rows = {row[1]: row for row in cells(section(page, "pass"))[1:]}
    # group, metric, rule, rows, scored, passed, pass rate, interval, pass rate of scored
    # The _pass column decides (0.8 passes the threshold but the column says no).
    assert rows["faithfulness"][2:7] == [
        "column faithfulness_pass (score >= 0.5)",
        "5",
        "4",
        "2",
        "40.0%",
    ]
    assert rows["faithfulness"][8] == "50.0%"
    assert rows["context_recall"][2:7] == ["score >= 0.7", "5", "4", "2", "40.0%"]
    assert rows["context_recall"][8] == "50.0%"
    assert rows["hallucination"][2:7] == ["score <= 0.3", "5", "4", "3", "60.0%"]
    assert rows["answer_relevancy"][2:7] == ["score = 1 (strict)", "5", "5", "4", "80.0%"]
    # The summary shows the rule and the rate; histograms mark the threshold.
    summary = {row[0]: row for row in cells(section(page, "summary"))[1:]}
    assert summary["context_recall"][8:] == ["score >= 0.7", "40.0%"]
    rules = [c for c in specs(page) if '"pass threshold"' in json.dumps(c)]
    assert len(rules) == 3  # faithfulness, context_recall, hallucination; strict has no line
    assert PAYLOAD not in page and "&lt;/script&gt;&lt;script&gt;alert(2)" in page
    failures = section(page, "failures")
    assert "timeout after 3 retries" in failures and "<td>timeout</td>" in failures
    assert "$0.0123" in section(page, "run")
    assert "judge hand-made" in page and "at None" not in page  # no endpoint recorded


def test_pass_rates_drawn_per_group(chromium: str, tmp_path: Path) -> None:
    path = handmade(tmp_path)
    frame = pl.read_parquet(path).with_columns(pl.Series("arm", ["x", "y", "x", "y", "x"]))
    write_parquet(frame, path, read_metadata(path), overwrite=True)
    out = tmp_path / "pass.html"
    page = report(path, by="arm", output=out)
    rows = cells(section(page, "pass"))[1:]
    assert {(r[0], r[1]) for r in rows} == {
        (g, m)
        for g in "xy"
        for m in ("faithfulness", "context_recall", "hallucination", "answer_relevancy")
    }
    x = next(r for r in rows if r[:2] == ["x", "faithfulness"])
    assert x[3:7] == ["3", "3", "2", "66.7%"]
    check_drawn(chromium, out, tmp_path)


def test_size_is_bounded_by_aggregates_not_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 30_000
    frame = pl.DataFrame(
        {
            "id": [f"row-{i}" for i in range(n)],
            "question": [f"unique question marker {i:06d}" for i in range(n)],
            "experiment": rng.choice(["a", "b", "c"], n).tolist(),
            **{m: rng.beta(2, 2, n) for m in METRICS},
        }
    )
    page = report(frame, by="experiment", worst=5)
    markers = set(re.findall(r"unique question marker (\d{6})", page))
    assert 0 < len(markers) <= 5 * len(METRICS)
    small = report(frame.head(300), by="experiment", worst=5)
    # 100 times the rows, about the same page (figures' data are bins and group means).
    assert len(page) < len(small) * 1.05
    for chart in specs(page):
        for layer in chart.get("layer", [chart]):
            assert len((layer.get("data") or {}).get("values") or []) <= 20 * 3


def test_worst_rows_and_failures_from_a_file_of_many_row_groups(tmp_path: Path) -> None:
    """Rows are read from the row groups that hold them: each shown row is the right one."""
    import pyarrow.parquet as pq

    n = 50
    scores = [None if i % 9 == 4 else ((i * 37) % 50) / 49 for i in range(n)]
    claims = pl.List(pl.Struct({"claim": pl.String, "reason": pl.String}))
    frame = pl.DataFrame(
        {
            "id": [f"id-{i}" for i in range(n)],
            "question": [f"question of row {i}" for i in range(n)],
            "faithfulness": scores,
            "faithfulness_detail": [
                {
                    "claims": [{"claim": f"claim {i}", "reason": f"reason of row {i}"}],
                    "error": f"failure at row {i // 20}" if scores[i] is None else None,
                }
                for i in range(n)
            ],
        },
        schema_overrides={"faithfulness_detail": pl.Struct({"claims": claims, "error": pl.String})},
    )
    path = tmp_path / "groups.parquet"
    pq.write_table(frame.to_arrow(), path, row_group_size=7)
    assert pq.ParquetFile(path).num_row_groups == 8
    page = report(path, worst=4)
    worst = section(page, "worst")
    expected = (
        frame.with_row_index()
        .filter(pl.col("faithfulness").is_not_null())
        .sort("faithfulness", "index")
        .head(4)
    )
    blocks = worst.split("<details class='row'>")[1:]
    assert len(blocks) == 4
    for block, row in zip(blocks, expected.iter_rows(named=True), strict=True):
        i = row["index"]
        assert f"row {i:,} · id id-{i}" in block and f"reason of row {i}<" in block
        assert f"{row['faithfulness']:.3f}" in block
    failures = cells(section(page, "failures"))
    # failed rows: 4, 13, 22, 31, 40, 49 -> errors "failure at row 0/0/1/1/2/2"
    assert failures[1:] == [
        ["failure at row 0", "2", "4, 13"],
        ["failure at row 1", "2", "22, 31"],
        ["failure at row 2", "2", "40, 49"],
    ]


def test_many_groups_keep_the_largest(tmp_path: Path) -> None:
    n = 2_000
    groups = [i % 100 if i < 1000 else 0 for i in range(n)]
    scores = [0.0 if i == 999 else 0.5 + (i % 7) / 20 for i in range(n)]  # row 999: group 99
    frame = pl.DataFrame({"g": groups, "faithfulness": scores})
    page = report(frame, by="g", worst=1)
    view = section(page, "groups")
    assert "100 groups: the 40 largest are shown (1,400 of 2,000 rows)" in view
    assert cells(view)[1][0] == "0"  # group 0 holds 1,010 rows
    # The summary, the histograms and the worst rows still cover every row.
    assert cells(section(page, "summary"))[1][2] == "2,000"
    assert "row 999 · g 99" in section(page, "worst")
    assert "100 groups: the histograms show all rows together" in page


def test_ids_shown_as_they_are_and_no_rows_when_worst_is_zero() -> None:
    frame = pl.DataFrame({"id": [2024, 2025], "faithfulness": [0.1, 0.2]})
    worst = section(report(frame, worst=1), "worst")
    assert "<th>id</th><td>2024</td>" in worst and "row 0 · id 2024" in worst
    assert "none shown (worst=0)" in section(report(frame, worst=0), "worst")


def test_a_run_result_a_frame_and_a_lazy_frame(judge: Judge) -> None:
    result = run(sample_rows(4), ["faithfulness"], judge=judge)
    from_run = report(result)
    assert "fake-judge" in section(from_run, "run")
    frame = report(result.frame)
    assert "No metadata: a frame carries none" in section(frame, "run")
    assert report(result.frame.lazy()).count("class='rf-chart'") == 2


def test_errors_say_what_to_fix(scored_file: Path, tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(InputError, match=r"by= names \['arm'\]"):
        report(scored_file, by="arm")
    with pytest.raises(ConfigError, match="pass against= too"):
        report(scored_file, on="id")
    with pytest.raises(ConfigError, match="is the scored file the report reads"):
        report(scored_file, output=scored_file)
    with pytest.raises(ConfigError, match="worst must be"):
        report(scored_file, worst=-1)
    pl.read_parquet(scored_file).select("id", "faithfulness").write_csv(tmp_path / "scored.csv")
    with pytest.raises(InputError, match="not a Parquet file"):
        report(tmp_path / "scored.csv")
    monkeypatch.setitem(sys.modules, "vl_convert", None)
    with pytest.raises(ConfigError, match=r"pip install 'ragframe\[report\]'"):
        report(scored_file)


def cli(argv: list[str]) -> int:
    """The `report` subcommand on its own parser (as `ragframe` registers it)."""
    from ragframe.cli import report as subcommand

    parser = argparse.ArgumentParser(prog="ragframe")
    subcommand.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_cli_writes_the_report(scored_file: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "cli" / "report.html"
    status = cli(["report", str(scored_file), "--by", "experiment", "--worst", "2", "-o", str(out)])
    assert status == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert section(page, "worst").count("<details class='row'>") == 2 * 4
    assert "By experiment" in page
    # Through `ragframe` itself: an error is one line and exit status 2.
    from ragframe.cli import main

    assert main(["report", str(scored_file), "--by", "nope", "-o", str(out), "--overwrite"]) == 2
    assert "by= names ['nope']" in capsys.readouterr().err
    # An existing report is replaced only with --overwrite, as every writer does.
    out.write_text("kept", encoding="utf-8")
    assert main(["report", str(scored_file), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists; add --overwrite to replace it" in err
    assert out.read_text(encoding="utf-8") == "kept"
    assert main(["report", str(scored_file), "-o", str(out), "--overwrite"]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


# ------------------------------------------------------------------------------ comparison


def stand_in_comparison() -> SimpleNamespace:
    """A result shaped as `ragframe.decide.compare.Comparison` is, for the view's own test: a table
    per group and metric, the unmatched keys, the most-changed pairs per metric."""
    table = pl.DataFrame(
        {
            "metric": ["faithfulness"],
            "direction": ["higher"],
            "n": [3],
            "mean_a": [0.8],
            "mean_b": [0.5],
            "diff": [-0.3],
            "ci_low": [-0.5],
            "ci_high": [-0.1],
            "level": [0.95],
            "p_value": [0.004],
            "wins": [0],
            "ties": [1],
            "losses": [2],
            "better": ["a"],
        }
    )
    claims = [{"claim": "kept", "reason": "said so"}]
    changed = pl.DataFrame(
        {
            "id": ["a", "b"],
            "faithfulness_a": [0.9, 0.8],
            "faithfulness_b": [0.1, 0.7],
            "diff": [-0.8, -0.1],
            "faithfulness_detail_a": [{"claims": claims}] * 2,
            "faithfulness_detail_b": [{"claims": [{"claim": "lost", "reason": PAYLOAD}]}] * 2,
            "question": ["first question", "second question"],
        }
    )
    return SimpleNamespace(
        table=table,
        unmatched=pl.DataFrame({"id": ["d", "z"], "side": ["a", "b"]}),
        changed={"faithfulness": changed},
        warnings=[f"the judges differ: {PAYLOAD}"],
        paired=True,
    )


def test_comparison_view_on_the_contract(chromium: str, tmp_path: Path, monkeypatch: Any) -> None:
    from ragframe.report import _comparison

    a = pl.DataFrame({"id": list("abcd"), "faithfulness": [0.9, 0.8, 0.7, 0.4]})
    b = pl.DataFrame({"id": list("abcz"), "faithfulness": [0.1, 0.7, 0.7, 0.2]})
    seen: dict[str, Any] = {}

    def fake(against: Any, scored: Any, **kw: Any) -> SimpleNamespace:
        seen.update(kw, a=against.data, b=scored.data)
        return stand_in_comparison()

    monkeypatch.setattr(_comparison, "run_compare", fake)
    out = tmp_path / "compare.html"
    page = report(b, against=a, on="id", output=out)
    assert seen["a"] is a and seen["b"] is b and seen["on"] == "id"  # a: the baseline
    view = section(page, "comparison")
    rows = cells(view)
    header = next(r for r in rows if r and r[0] == "metric")
    values = dict(zip(header, rows[rows.index(header) + 1], strict=True))
    assert "level" not in values
    assert values == {
        "metric": "faithfulness",
        "direction": "higher",
        "n": "3",
        "mean_a": "0.800",
        "mean_b": "0.500",
        "diff": "-0.300",
        "ci_low": "-0.500",
        "ci_high": "-0.100",
        "p_value": "0.004",
        "wins": "0",
        "ties": "1",
        "losses": "2",
        "better": "a",
    }
    assert "2 rows without a partner in the other log (1 only in a, 1 only in b)" in view
    assert PAYLOAD not in page and "the judges differ: &lt;img" in view
    assert view.count("<div class='pair'>") == 2
    assert view.index("0.900 → 0.100") < view.index("0.800 → 0.700")
    assert "first question" in view and "said so" in view
    check_drawn(chromium, out, tmp_path)


def degrade(frame: pl.DataFrame) -> pl.DataFrame:
    """The same questions with every other answer replaced by an unrelated one."""
    position = pl.int_range(pl.len())
    return frame.with_columns(
        pl.when(position % 2 == 0)
        .then(pl.lit("I cannot say anything about that."))
        .otherwise(pl.col("answer"))
        .alias("answer")
    )


def test_report_against_another_run(
    chromium: str, make_judge: Callable[..., Judge], tmp_path: Path
) -> None:
    rows = pl.read_parquet(DATA / "sample.parquet").head(10)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    run(rows, ["faithfulness", "context_recall"], judge=make_judge()).write_parquet(a)
    run(degrade(rows), ["faithfulness", "context_recall"], judge=make_judge()).write_parquet(b)
    out = tmp_path / "against.html"
    page = report(b, against=a, on="id", output=out, worst=4)
    view = section(page, "comparison")
    table = cells(view)
    header = next(r for r in table if r and r[0] == "metric")
    body = table[table.index(header) + 1 : table.index(header) + 3]
    shown = {r[0]: dict(zip(header, r, strict=True)) for r in body}
    # The report shows compare's figures with a = the baseline (against), b = this file.
    expected = compare(a, b, on="id", level=0.95, changed=4)
    assert set(shown) == {"faithfulness", "context_recall"}
    for row in expected.table.iter_rows(named=True):
        cell = shown[row["metric"]]
        assert cell["n"] == f"{row['n']:,}" and cell["diff"] == f"{row['diff']:.3f}"
        assert [cell[k] for k in ("wins", "ties", "losses")] == [
            f"{row[k]:,}" for k in ("wins", "ties", "losses")
        ]
    moved = sum(frame.height for frame in expected.changed.values())
    assert 0 < view.count("<div class='pair'>") == moved
    assert "Run metadata of a (a.parquet)" in page
    check_drawn(chromium, out, tmp_path)


# ------------------------------------------------------------------------------ other sources


def test_a_pandas_frame_keeps_its_named_index(scored_file: Path) -> None:
    """`evaluate` on pandas returns pandas, often indexed by id: the report reads it (the
    named index kept as the id column), drawing the same page as the polars frame."""
    import pandas as pd

    frame = pl.read_parquet(scored_file)
    page = report(frame.to_pandas(types_mapper=pd.ArrowDtype).set_index("id"), worst=3)
    worst = section(page, "worst")
    assert worst == section(report(frame, worst=3), "worst")
    assert re.search(r"<th>id</th><td>[^<]+</td>", worst)
    assert section(page, "summary") == section(report(frame, worst=3), "summary")


@pytest.fixture(scope="module")
def s3_store() -> Any:
    """moto's S3 server on 127.0.0.1 with a bucket, and the storage options that reach it
    (the environment holds no AWS_* settings: only the options do)."""
    from s3_stand_in import s3_bucket

    with s3_bucket("ragframe-report") as bucket:
        yield bucket


def test_a_url_read_with_storage_options(
    s3_store: Any, scored_file: Path, monkeypatch: Any
) -> None:
    """report(url, storage_options=...) and show(url, storage_options=...) read the scored file
    from the store with those options alone: the same page and cards as the local file."""
    from ragframe.report.show import show

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    s3_store.client.put_object(
        Bucket="ragframe-report", Key="scored.parquet", Body=scored_file.read_bytes()
    )
    url, options = "s3://ragframe-report/scored.parquet", s3_store.options
    local, remote = report(scored_file, worst=3), report(url, storage_options=options, worst=3)
    for anchor in ("summary", "worst", "failures", "run"):
        assert section(remote, anchor) == section(local, anchor), anchor
    against = report(url, against=scored_file, on="id", storage_options=options)
    assert "Compared against scored.parquet" in against
    cards = show(url, row=[2, 0], storage_options=options)
    assert cards._repr_html_() == show(scored_file, row=[2, 0])._repr_html_()
    with pytest.raises(ConfigError, match="storage_options applies to a path"):
        report(pl.read_parquet(scored_file), storage_options=options)
    with pytest.raises(ConfigError, match="storage_options applies to a path"):
        show(pl.read_parquet(scored_file), storage_options=options)
