"""ragframe.show: rows of a scored log as the report's cards, HTML for a notebook and text for
a terminal, every metric family's verdicts with their marks and reasons, on the right row.

The log is scored for real against the fake server: every metric of the catalogue (the
non-LLM ones included), a G-Eval and a rubric metric, one row without contexts (it fails to
score those metrics) and one question that is markup."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ragframe import REGISTRY, GEval, Judge, RubricScore, run
from ragframe.errors import ConfigError, InputError
from ragframe.report._cards import STYLE
from ragframe.report.show import show
from ragframe.testing.server import FakeServer

DATA = Path(__file__).resolve().parent.parent / "data"
PAYLOAD = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
ROWS = 6
FAILED = 3  # the row without contexts
#: Items of a verdict list a card shows.
SHOWN = 30
#: How each verdict field's value is marked: True is good, except where it is bad.
GOOD = {True: "✓ yes", False: "✗ no"}
BAD = {True: "✗ yes", False: "✓ no"}
WORDS = {"yes": "✓ yes", "no": "✗ no", "idk": "? idk", "TP": "✓ TP", "FP": "✗ FP", "FN": "✗ FN"}


def log_rows() -> pl.DataFrame:
    frame = pl.read_parquet(DATA / "sample.parquet").head(ROWS).drop("faithful", "human_label")
    at = pl.int_range(pl.len())
    return frame.with_columns(
        pl.when(at == 1).then(pl.lit(PAYLOAD)).otherwise(pl.col("question")).alias("question"),
        pl.when(at == FAILED)
        .then(pl.lit([], pl.List(pl.String)))
        .otherwise(pl.col("contexts"))
        .alias("contexts"),
        pl.col("contexts").list.reverse().list.head(2).alias("reference_contexts"),
        pl.concat_list(pl.format("doc-{}", at), pl.lit("doc-x")).alias("retrieved_context_ids"),
        pl.concat_list(pl.format("doc-{}", at), pl.lit("doc-y")).alias("reference_context_ids"),
    )


@pytest.fixture(scope="module")
def scored() -> Iterator[pl.DataFrame]:
    """Every metric family scored on the same rows, joined into one frame."""
    with FakeServer() as server:
        judge = Judge(
            "fake-judge",
            base_url=server.base_url,
            api_key="sk-test-not-a-real-key",
            embedding_model="fake-embedding",
            cache=False,
            progress=False,
        )
        rows = log_rows()
        every = run(rows, "all", judge=judge).frame
        custom = [GEval(criteria="Does the answer address the question?"), RubricScore()]
        more = run(rows, custom, judge=judge).frame.drop(rows.columns, "rubric_score_detail")
        yield pl.concat([every, more.drop("rubric_score")], how="horizontal")


# ------------------------------------------------------------------------------ HTML


class CardParser(HTMLParser):
    """Per card (<details>): its summary text, and per section (an <h4>, "{metric} verdicts")
    the text of every table row (the innermost table's row for a nested one) and the
    paragraphs; also every tag seen and the <style> text."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: list[dict[str, Any]] = []
        self.tags: list[str] = []
        self.style = ""
        self._stack: list[str] = []
        self._rows: list[list[str]] = []
        self._cells: list[list[str]] = []
        self._text: list[str] | None = None

    def _section(self) -> dict[str, Any]:
        return self.cards[-1]["sections"][self.cards[-1]["current"]]

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)
        self._stack.append(tag)
        if tag == "details":
            self.cards.append({"summary": "", "sections": {"": {"rows": [], "paras": []}}})
            self.cards[-1]["current"] = ""
        elif tag in ("summary", "h4", "p", "style"):
            self._text = []
        elif tag == "tr":
            self._rows.append([])
        elif tag in ("td", "th"):
            self._cells.append([])

    def handle_endtag(self, tag: str) -> None:
        self._stack.pop()
        text = "".join(self._text or []).strip()
        if tag == "summary":
            self.cards[-1]["summary"] = text
        elif tag == "h4" and self.cards:
            self.cards[-1]["current"] = text
            self.cards[-1]["sections"][text] = {"rows": [], "paras": []}
        elif tag == "p" and self.cards:
            self._section()["paras"].append(text)
        elif tag == "style":
            self.style = text
        elif tag in ("td", "th"):
            cell = "".join(self._cells.pop()).strip()
            if self._rows:
                self._rows[-1].append(cell)
            if self._cells:  # a nested table's text is its outer cell's too
                self._cells[-1].append(cell)
        elif tag == "tr":
            row = self._rows.pop()
            if self.cards:
                self._section()["rows"].append(row)
        if tag in ("summary", "h4", "p", "style"):
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
        if self._cells:
            self._cells[-1].append(data)


def parse(html: str) -> CardParser:
    parser = CardParser()
    parser.feed(html)
    return parser


def number(value: float) -> str:
    return f"{value:.3f}"


def expected_rows(metric: str, found: dict[str, Any]) -> list[list[str]]:
    """The table rows a metric's verdicts must show: each item's text, mark and reason
    (the first SHOWN of a list; a note says how many more)."""
    if metric == "faithfulness":
        return [[c["claim"], GOOD[c["supported"]], c["reason"]] for c in found["claims"][:SHOWN]]
    if metric in ("context_precision", "context_precision_without_reference"):
        return [
            [str(v["context_index"]), GOOD[v["relevant"]], v["reason"]]
            for v in found["verdicts"][:SHOWN]
        ]
    if metric == "context_recall":
        return [
            [f["fact"], GOOD[f["covered"]], str(f["source_context"] or "-"), f["reason"]]
            for f in found["facts"][:SHOWN]
        ]
    if metric == "contextual_relevancy":
        return [
            [s["statement"], GOOD[s["relevant"]], s["reason"]]
            for c in found["contexts"][:SHOWN]
            for s in c["statements"][:SHOWN]
        ]
    if metric == "answer_relevancy":
        return [[q["question"], number(q["similarity"])] for q in found["questions"][:SHOWN]]
    if metric == "answer_relevancy_llm":
        return [
            [s["statement"], WORDS[s["verdict"]], s["reason"]] for s in found["statements"][:SHOWN]
        ]
    if metric == "hallucination":
        return [
            [str(c["context_index"]), BAD[c["contradicted"]], c["reason"]]
            for c in found["contexts"][:SHOWN]
        ]
    if metric == "answer_correctness":
        return [
            [s["statement"], WORDS[s["verdict"]], s["reason"]]
            for s in found["answer_statements"][:SHOWN]
        ] + [
            [s["statement"], GOOD[s["covered"]], s["reason"]]
            for s in found["ground_truth_statements"][:SHOWN]
        ]
    if metric in ("answer_accuracy", "context_relevance", "response_groundedness"):
        return [["rating_1", str(found["rating_1"])], ["rating_2", str(found["rating_2"])]]
    if metric == "g_eval":
        return [["reason", found["reason"]], ["integer_score", str(found["integer_score"])]]
    if metric == "rubric_score":
        return [["level", str(found["level"])], ["reason", found["reason"]]]
    if metric == "context_precision_nonllm":
        return [
            [str(v["context_index"]), number(v["best_similarity"])]
            for v in found["contexts"][:SHOWN]
        ]
    if metric in ("context_precision_ids", "context_recall_ids"):
        key = "relevant" if metric == "context_precision_ids" else "retrieved"
        return [[i["id"], GOOD[i[key]]] for i in next(v for v in found.values() if v)[:SHOWN]]
    return []


def test_every_metric_family_is_tested(scored: pl.DataFrame) -> None:
    metrics = [c for c in scored.columns if f"{c}_detail" in scored.columns]
    untested = [m for m in metrics if not expected_rows(m, scored[f"{m}_detail"][0])]
    assert untested == ["context_recall_nonllm"], untested  # its matches are checked below
    assert set(metrics) == {*REGISTRY, "g_eval"}


@pytest.mark.parametrize("position", [0, 2, FAILED])
def test_html_cards_show_each_verdict_on_its_row(scored: pl.DataFrame, position: int) -> None:
    metrics = [c for c in scored.columns if f"{c}_detail" in scored.columns]
    cards = show(scored, row=position)
    parsed = parse(cards._repr_html_())
    assert len(parsed.cards) == 1
    card = parsed.cards[0]
    row = scored.row(position, named=True)
    assert f"row {position}" in card["summary"] and row["id"] in card["summary"]
    assert list(card["sections"]) == ["", *(f"{m} verdicts" for m in metrics)]
    for m in metrics:
        found = row[f"{m}_detail"]
        section = card["sections"][f"{m} verdicts"]
        if found["error"]:
            assert f"error: {found['error']}" in section["paras"], m
            continue
        for want in expected_rows(m, found):
            assert any(
                r[: len(want)] == want or r[-len(want) :] == want for r in section["rows"]
            ), (
                m,
                want,
                section["rows"],
            )
    assert "inputs_cut" not in cards._repr_html_()  # empty for every row here: says nothing
    # Every score in the card's first table.
    scores = {r[0]: r[1] for r in card["sections"][""]["rows"] if len(r) == 2}
    for m in metrics:
        assert scores[m] == ("-" if row[m] is None else number(row[m]))


def test_the_failed_row_says_why(scored: pl.DataFrame) -> None:
    row = scored.row(FAILED, named=True)
    assert row["faithfulness"] is None and row["faithfulness_detail"]["error"]
    text = str(show(scored, row=FAILED, metric="faithfulness"))
    assert f"error: {row['faithfulness_detail']['error']}" in text
    assert "contexts (0):" in text


def test_text_cards_show_each_verdict_with_its_mark_and_reason(scored: pl.DataFrame) -> None:
    position = 2
    row = scored.row(position, named=True)
    chosen = ["faithfulness", "hallucination", "answer_relevancy_llm", "contextual_relevancy"]
    text = str(show(scored, row=position, metric=[*chosen, "g_eval"]))
    lines = [line.strip() for line in text.splitlines()]
    assert lines[2].startswith(f"── faithfulness {number(row['faithfulness'])} · row 2 · id ")
    sections = re.split(r"^(\w+) verdicts:$", text, flags=re.M)
    by_metric = dict(zip(sections[1::2], sections[2::2], strict=True))
    assert list(by_metric) == [*chosen, "g_eval"]

    def item(section: str, head: str, reason: str) -> None:
        lines = [line.strip() for line in by_metric[section].splitlines()]
        at = [i for i, line in enumerate(lines) if line == head]
        assert at, (head, lines)
        assert any(lines[i + 1] == reason for i in at), (head, reason)

    for c in row["faithfulness_detail"]["claims"]:
        mark = "✓" if c["supported"] else "✗"
        word = "yes" if c["supported"] else "no"
        item("faithfulness", f"{mark} {c['claim']}  [supported: {word}]", c["reason"])
    for c in row["hallucination_detail"]["contexts"]:
        mark, word = ("✗", "yes") if c["contradicted"] else ("✓", "no")
        head = f"{mark} context {c['context_index']}  [contradicted: {word}]"
        item("hallucination", head, c["reason"])
    for s in row["answer_relevancy_llm_detail"]["statements"]:
        mark = WORDS[s["verdict"]].split()[0]
        head = f"{mark} {s['statement']}  [verdict: {s['verdict']}]"
        item("answer_relevancy_llm", head, s["reason"])
    for c in row["contextual_relevancy_detail"]["contexts"]:
        for s in c["statements"]:
            mark, word = ("✓", "yes") if s["relevant"] else ("✗", "no")
            item(
                "contextual_relevancy", f"{mark} {s['statement']}  [relevant: {word}]", s["reason"]
            )
    assert f"reason: {row['g_eval_detail']['reason']}" in by_metric["g_eval"]
    scores = [c for c in scored.columns if f"{c}_detail" in scored.columns]
    for m in scores:  # a name and its score never wrapped apart
        value = "-" if row[m] is None else number(row[m])
        assert f"{m} {value}" in text, m
    assert "inputs_cut" not in text  # empty: says nothing
    assert max(len(line) for line in text.splitlines()) <= 100


def test_context_recall_nonllm_matches(scored: pl.DataFrame) -> None:
    row = scored.row(0, named=True)
    found = row["context_recall_nonllm_detail"]
    text = str(show(scored, row=0, metric="context_recall_nonllm"))
    matches = next(v for v in found.values() if isinstance(v, list) and v)
    for m in matches:
        mark, word = ("✓", "yes") if m["matched"] else ("✗", "no")
        assert f"{mark} reference {m['reference_index']}  [matched: {word} ·" in text


# ------------------------------------------------------------------------------ which rows


def test_worst_rows_by_the_first_metric_and_their_direction(scored: pl.DataFrame) -> None:
    indexed = scored.with_row_index("at").filter(pl.col("faithfulness").is_not_null())
    lowest = indexed.sort("faithfulness", "at")["at"].head(2).to_list()
    cards = show(scored, limit=2)
    assert cards.positions == lowest
    assert cards.note.startswith(
        f"The 2 rows lowest-scored by faithfulness (higher is better) of {indexed.height} scored"
    )
    worst = scored.with_row_index("at").filter(pl.col("hallucination").is_not_null())
    highest = worst.sort("hallucination", "at", descending=[True, False])["at"].head(3)
    cards = show(scored, metric="hallucination", limit=3)
    assert cards.positions == highest.to_list()
    assert "highest-scored by hallucination (lower is better)" in str(cards)


def test_rows_by_position_and_by_a_filter(scored: pl.DataFrame) -> None:
    assert show(scored, row=[4, 0, 4, -1]).positions == [4, 0, ROWS - 1]
    wanted = scored["id"][2]
    cards = show(scored, where=pl.col("id") == wanted)
    assert cards.positions == [2] and "1 row of the 1 matching where=" in cards.note
    cards = show(scored, where=pl.col("faithfulness") >= 0, limit=2)
    assert len(cards) == 2 and "limit=2 shown" in cards.note
    assert len(show(scored, where=pl.col("id") == "nope")) == 0


def test_every_input_kind(scored: pl.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "scored.parquet"
    scored.write_parquet(path)

    def cards(source: Any) -> str:
        """The cards' HTML past the note (which names the source)."""
        return show(source, row=2, metric="faithfulness")._repr_html_().split("</p>", 1)[1]

    html = cards(scored)
    assert "faithfulness verdicts" in html
    for source in (path, scored.lazy(), scored.to_pandas()):
        assert cards(source) == html
    assert "Row 2 of scored.parquet (6 rows)." in str(show(path, row=2))


def test_a_run_result(tmp_path: Path) -> None:
    with FakeServer() as server:
        judge = Judge(
            "fake-judge", base_url=server.base_url, api_key="sk-x", cache=False, progress=False
        )
        result = run(log_rows().head(2), ["faithfulness"], judge=judge)
    cards = show(result, row=1)
    claims = result.frame["faithfulness_detail"][1]["claims"]
    assert all(c["claim"] in str(cards) for c in claims[:SHOWN])
    if len(claims) > SHOWN:
        assert f"… {len(claims) - SHOWN} more not shown (of {len(claims)})" in str(cards)
    assert "Row 1 of this run (2 rows)." in str(cards)


def test_a_pandas_frame_keeps_its_named_index(scored: pl.DataFrame) -> None:
    """`set_index("id")` makes the id the index: it is still the row's id on the card, and
    `where=` finds the row by it (an unnamed index, positions, adds no column)."""
    pandas = scored.to_pandas().set_index("id")
    wanted = scored["id"][2]
    cards = show(pandas, where=pl.col("id") == wanted, metric="faithfulness")
    assert cards.positions == [2] and f"id {wanted}" in str(cards)
    plain = show(scored.to_pandas(), row=2, metric="faithfulness")._repr_html_()
    assert plain == show(scored, row=2, metric="faithfulness")._repr_html_()
    with pytest.raises(ConfigError, match=r"where= names 'ids', which the scored frame") as caught:
        show(pandas, where=pl.col("ids") == wanted)
    assert "__ragframe" not in str(caught.value) and "'id'" in str(caught.value)


def test_rows_as_numpy_integers_arrays_and_series(scored: pl.DataFrame) -> None:
    """What numpy, pandas and polars hand back for positions: `argmin`'s np.int64,
    `np.where(...)[0]`, `arg_sort()`, a pandas Series, a range."""
    import numpy as np

    faithfulness = scored["faithfulness"].fill_null(2.0)
    low = np.where(faithfulness.to_numpy() < 0.5)[0]
    assert low.size
    assert show(scored, row=np.int64(2)).positions == [2]
    assert show(scored, row=np.uint8(1)).positions == [1]
    assert show(scored, row=low).positions == low.tolist()
    assert show(scored, row=faithfulness.arg_sort().head(2)).positions == (
        faithfulness.arg_sort().head(2).to_list()
    )
    assert show(scored, row=scored.to_pandas().index[[3, 0]].to_series()).positions == [3, 0]
    assert show(scored, row=range(1, 3)).positions == [1, 2]
    with pytest.raises(ConfigError, match=r"row=np.int64\(6\)|row=6 is out of range"):
        show(scored, row=np.array([0, 6]))
    for bad in (True, 1.0, np.float64(1), [np.True_]):
        with pytest.raises(ConfigError, match="is not a row position"):
            show(scored, row=bad)  # type: ignore[arg-type]


def test_rows_that_failed_to_score_are_counted_and_found(scored: pl.DataFrame) -> None:
    """The worst rows leave out those that failed: the note says how many and which where=
    shows them, and that where= does (their cards say why)."""
    assert scored["faithfulness"][FAILED] is None
    failed = scored["faithfulness"].null_count()
    cards = show(scored, metric="faithfulness")
    said = f"{failed} row{'s' if failed > 1 else ''} failed to score by faithfulness: "
    assert said + "where=pl.col('faithfulness').is_null() shows" in cards.note
    them = show(scored, where=pl.col("faithfulness").is_null(), metric="faithfulness")
    assert FAILED in them.positions and len(them) == failed
    by_pattern = pl.any_horizontal(pl.col("^faithfulness$").is_null())  # names no column as such
    assert show(scored, where=by_pattern, metric="faithfulness").positions == them.positions
    everyone = scored.with_columns(pl.lit(None, pl.Float64).alias("faithfulness"))
    note = show(everyone, metric="faithfulness").note
    assert note.startswith(f"No row of the scored frame ({ROWS} rows) has a faithfulness score.")
    assert f"{ROWS} rows failed to score by faithfulness" in note
    nan = scored.with_columns(pl.col("faithfulness").fill_null(float("nan")))
    note = show(nan, metric="faithfulness").note
    assert "where=pl.col('faithfulness').fill_nan(None).is_null()" in note
    assert "failed" not in show(scored.drop_nulls("faithfulness"), metric="faithfulness").note


# ------------------------------------------------------------------------------ errors


def test_errors_say_what_to_fix(scored: pl.DataFrame) -> None:
    with pytest.raises(ConfigError, match=r"row=6 is out of range: the log has 6 rows"):
        show(scored, row=6)
    with pytest.raises(ConfigError, match=r"row=-7 is out of range"):
        show(scored, row=[0, -7])
    with pytest.raises(ConfigError, match=r"pass where=pl.col\('id'\) == 'q-1'"):
        show(scored, row="q-1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"metric='faithfulnes' is not a metric of this log; "):
        show(scored, metric=["faithfulness", "faithfulnes"])
    with pytest.raises(ConfigError, match="not both"):
        show(scored, row=0, where=pl.col("id") == "x")
    with pytest.raises(ConfigError, match="limit must be a positive integer"):
        show(scored, limit=0)
    with pytest.raises(ConfigError, match="where= takes a polars expression"):
        show(scored, where="id == 'x'")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"where= names 'arm', which the scored frame lacks"):
        show(scored, where=pl.col("arm") == "a")
    with pytest.raises(ConfigError, match="where= cannot be applied to the log: "):
        show(scored, where=pl.col("id").str.contains("q") > pl.col("faithfulness_detail"))
    with pytest.raises(InputError, match=r"has no score columns .* score it first"):
        show(log_rows())
    with pytest.raises(InputError, match="cannot show a list"):
        show([1, 2])
    for call in (lambda: show(scored, row=6), lambda: show(log_rows())):
        with pytest.raises((ConfigError, InputError)) as caught:
            call()
        assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------ the page


def test_html_is_escaped_scoped_and_has_no_script(scored: pl.DataFrame) -> None:
    html = show(scored, row=1)._repr_html_()
    assert PAYLOAD not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    parsed = parse(html)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert parsed.cards[0]["summary"].endswith(PAYLOAD)  # the text, as text
    # Every style rule is scoped under the cards' class: the notebook's own styling stays.
    selectors = [
        s.strip() for rule in re.findall(r"([^{}]+)\{", parsed.style) for s in rule.split(",")
    ]
    assert selectors and all(s.startswith(".rf-cards") for s in selectors), selectors
    assert html.startswith("<div class='rf-cards'>") and html.endswith("</div>")


def test_the_report_draws_the_same_card(scored: pl.DataFrame) -> None:
    """One code path: the report's worst rows are show's cards (closed there)."""
    pytest.importorskip("altair", reason="the report extra is not installed")
    pytest.importorskip("vl_convert", reason="the report extra is not installed")
    from ragframe.report import report

    columns = ["id", "question", "answer", "contexts", "ground_truth"]
    columns += ["faithfulness", "faithfulness_detail", "hallucination", "hallucination_detail"]
    subset = scored.select(columns)
    worst = re.search(r"<section id='worst'>(.*?)</section>", report(subset, worst=ROWS), re.S)
    assert worst
    blocks = re.findall(r"<details class='row'>.*?</details>", worst.group(1), re.S)
    for metric, start in (("faithfulness", 0), ("hallucination", ROWS - 1)):
        cards = show(subset, metric=metric, limit=ROWS)._repr_html_()
        drawn = re.findall(r"<details class='row' open>.*?</details>", cards, re.S)
        assert len(drawn) == ROWS - 1  # the row that failed to score is not among the worst
        assert [d.replace(" open>", ">", 1) for d in drawn] == blocks[start : start + ROWS - 1]
    # ... with the same styles: the section is the cards' element, holding their style.
    assert worst.group(1).startswith(f"<h2>Worst rows</h2><div class='rf-cards'><style>{STYLE}")
    # A context that contradicts the answer is marked bad, whatever its True.
    found = [c for d in scored["hallucination_detail"] for c in d["contexts"] or []]
    assert {c["contradicted"] for c in found} == {True, False}
    assert "<span class='no'>✗ yes</span>" in worst.group(1)
    assert "<span class='yes'>✓ no</span>" in worst.group(1)


#: A page's own styles, as a notebook's: every cell yellow, and rules of JupyterLab's
#: rendered-HTML styles (tables centred and right-aligned without borders).
JUPYTER = """td { background: #ff0; } p { font-family: serif; }
.jp-RenderedHTMLCommon table { border: none; border-collapse: collapse; table-layout: fixed;
  margin-left: auto; margin-right: auto; font-size: 12px; }
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th { text-align: right; border: none;
  padding: 0.5em; vertical-align: middle; }
.jp-RenderedHTMLCommon tbody tr:nth-child(odd) { background: #f5f5f5; }"""
#: Computed styles read in the page: inside the cards and outside them.
PROBE = """<script>
var q = function (s) { return document.querySelector(s); };
var style = function (s, p) { return getComputedStyle(q(s)).getPropertyValue(p); };
document.getElementById('probe').textContent = JSON.stringify({
  yes: style('.rf-cards span.yes', 'color'), no: style('.rf-cards span.no', 'color'),
  card_cell: style('.rf-cards td', 'background-color'),
  card_align: style('.rf-cards td', 'text-align'),
  card_border: style('.rf-cards td', 'border-top-width'),
  card_table: style('.rf-cards table', 'margin-left'),
  page_cell: style('#page td', 'background-color'),
  page_text: style('#page p', 'font-family'),
  card_text: style('.rf-cards p', 'font-family') === style('.rf-cards', 'font-family'),
  open: document.querySelectorAll('.rf-cards details[open]').length,
});
</script>"""


def test_drawn_in_chromium_scoped(scored: pl.DataFrame, tmp_path: Path) -> None:
    """The cards in a page whose own styles paint every table cell and centre, right-align
    and unborder tables, as JupyterLab's do: inside the cards their scoped styles win (green
    ✓, red ✗, white bordered left-aligned cells); outside, the page's styles are untouched."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed")
    cards = show(scored, row=[2, 0], metric="faithfulness")
    page = tmp_path / "show.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{JUPYTER}</style></head>"
        "<body><div id='page'><p>a notebook cell</p><table><tr><td>1</td></tr></table></div>"
        f"<div class='jp-RenderedHTMLCommon'>{cards._repr_html_()}</div>"
        f"<pre id='probe'></pre>{PROBE}</body></html>",
        encoding="utf-8",
    )
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    command += [f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    command += ["--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", done.stdout, re.S)
    assert found, done.stdout[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe == {
        "yes": "rgb(30, 123, 52)",
        "no": "rgb(176, 58, 46)",
        "card_cell": "rgb(255, 255, 255)",
        "card_align": "left",
        "card_border": "1px",
        "card_table": "0px",
        "page_cell": "rgb(255, 255, 0)",
        "page_text": "serif",
        "card_text": True,
        "open": 2,
    }


def test_a_metric_without_detail_and_one_with_none_to_show() -> None:
    frame = pl.DataFrame(
        {
            "id": ["a", "b"],
            "question": ["q1", None],
            "faithfulness": [0.2, None],  # a known metric's name, no detail column
            "context_recall_ids": [1.0, 0.5],
            "context_recall_ids_detail": [
                {"reference": [{"id": "d1", "retrieved": True}], "error": None},
                {"reference": [], "error": None},
            ],
        }
    )
    text = str(show(frame, row=[0, 1]))
    first, second = text.split("── ")[1:]
    assert "faithfulness verdicts:\n  no detail recorded" in first
    assert "✓ d1  [retrieved: yes]" in first
    assert "question:\n  (null)" in second and "reference (0):\n    (empty)" in second
    parsed = parse(show(frame, row=1)._repr_html_())
    assert "no detail recorded" in parsed.cards[0]["sections"]["faithfulness verdicts"]["paras"]


def test_in_a_jupyter_kernel(scored: pl.DataFrame, tmp_path: Path) -> None:
    """A real kernel displays the cards as HTML, with the text beside it."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is in the dev extra")
    import nbformat

    scored.write_parquet(tmp_path / "scored.parquet")
    code = (
        "from ragframe.report.show import show\n"
        "show('scored.parquet', row=2, metric='faithfulness')"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    (output,) = notebook.cells[0].outputs
    shown = parse(output["data"]["text/html"])
    claims = scored["faithfulness_detail"][2]["claims"]
    rows = shown.cards[0]["sections"]["faithfulness verdicts"]["rows"]
    assert [claims[0]["claim"], GOOD[claims[0]["supported"]], claims[0]["reason"]] in rows
    assert output["data"]["text/plain"].startswith("Row 2 of scored.parquet (6 rows).")
