"""The page's sections and their figures (Vega's script is `_bundle`'s, the page's frame
`_shell`'s).
Nothing in it is loaded from a URL: one file that opens offline and can be sent around."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ragframe.report import _charts
from ragframe.report._cards import card, card_html, styled
from ragframe.report._data import Light
from ragframe.report._html import (
    Safe,
    clip,
    esc,
    key_values,
    percent,
    table,
)
from ragframe.report._source import PassRule
from ragframe.stats import format_interval


class Figures:
    """The page's figures: each added spec gets a placeholder that the page's script fills."""

    def __init__(self) -> None:
        self.specs: list[dict[str, Any]] = []

    def add(self, spec: dict[str, Any], caption: str) -> Safe:
        index = len(self.specs)
        self.specs.append(spec)
        return Safe(
            f"<figure class='rf-figure'><div class='rf-chart' id='rf-chart-{index}' "
            f"data-index='{index}'></div><figcaption>{esc(caption)}</figcaption></figure>"
        )


def section(anchor: str, title: str, *parts: str) -> Safe:
    return Safe(f"<section id='{esc(anchor)}'><h2>{esc(title)}</h2>{''.join(parts)}</section>")


def para(text: str, cls: str = "note") -> Safe:
    return Safe(f"<p class='{esc(cls)}'>{esc(text)}</p>")


def grid(items: Sequence[str]) -> Safe:
    return Safe(f"<div class='figures'>{''.join(items)}</div>")


def level_text(level: float) -> str:
    return f"{level:.0%} interval"


def interval_text(low: Any, high: Any) -> str:
    return format_interval(low, high)


def _mean_cells(r: Mapping[str, Any]) -> list[Any]:
    """A mean's table cells: rows, scored, failed, mean, its interval and how it was got."""
    ci = interval_text(r["ci_low"], r["ci_high"])
    return [r["n"], r["scored"], r["failed"], r["mean"], ci, r["method"]]


def summary_section(
    figs: Figures,
    overall: pl.DataFrame,
    passes: pl.DataFrame,
    rules: Mapping[str, PassRule],
    level: float,
) -> Safe:
    """The whole log: one line per metric (n, mean, interval, pass rate) and one figure."""
    rates = {r["metric"]: r for r in passes.iter_rows(named=True)} if passes.height else {}
    rows = []
    for r in overall.iter_rows(named=True):
        rule, rate = rules.get(r["metric"]), rates.get(r["metric"])
        rows.append(
            [
                r["metric"],
                f"{r['direction']} is better",
                *_mean_cells(r),
                rule.describe() if rule else "-",
                percent(rate["rate"]) if rate else "-",
            ]
        )
    headers = ["metric", "direction", "rows", "scored", "failed", "mean", level_text(level)]
    headers += ["interval method", "pass rule", "pass rate"]
    if not rules:  # no pass rule known: no empty columns
        headers, rows = headers[:-2], [row[:-2] for row in rows]
    chart_rows = _charts.labelled(
        overall, "metric", "scored", "mean", "scored", "failed", "direction"
    )
    spec = _charts.intervals(
        chart_rows,
        value="mean",
        title="Mean score per metric",
        subtitle=f"with its {level_text(level)}; n = scored rows",
        x_title="mean score",
    )
    caption = "Means of the whole log; " + ", ".join(
        f"{r['metric']}: n = {r['scored']:,} scored of {r['n']:,}"
        for r in overall.iter_rows(named=True)
    )
    return section("summary", "Summary", table(headers, rows), grid([figs.add(spec, caption)]))


def distributions_section(
    figs: Figures,
    bins: pl.DataFrame,
    overall: pl.DataFrame,
    rules: Mapping[str, PassRule],
    light: Light,
) -> Safe:
    """One histogram per metric (pre-binned: 20 bins whatever the log's size)."""
    items = []
    for r in overall.iter_rows(named=True):
        m = r["metric"]
        part = bins.filter(pl.col("metric") == m)
        rule = rules.get(m)
        scored = int(part["rows"].sum())
        spec = _charts.histogram(
            m,
            part,
            direction=r["direction"],
            scored=scored,
            failed=int(light.frame[m].null_count()),
            threshold=rule.threshold if rule and not rule.strict else None,
        )
        caption = f"{m}: n = {scored:,} scored rows in 20 bins of 0.05"
        items.append(figs.add(spec, caption))
    notes = []
    if light.groups_total > _charts.MAX_LINES:
        notes.append(para(f"{light.groups_total:,} groups: the histograms show all rows together."))
    return section("distributions", "Score distributions", *notes, grid(items))


def groups_section(
    figs: Figures, means: pl.DataFrame, light: Light, level: float, order: Sequence[str]
) -> Safe:
    """Per metric, each group's mean with its interval; then the table of every cell."""
    rank = {g: i for i, g in enumerate(order)}
    means = means.with_columns(
        pl.col("group").replace_strict(rank, default=len(rank), return_dtype=pl.Int64).alias("rank")
    ).sort("rank", maintain_order=True)
    items = []
    for (m,), part in means.group_by("metric", maintain_order=True):
        rows = _charts.labelled(part, "group", "scored", "mean", "n", "scored", "failed")
        spec = _charts.intervals(
            rows,
            value="mean",
            title=f"{m}: mean per group",
            subtitle=f"with its {level_text(level)}; n = scored rows per group; axis zoomed",
            x_title=f"mean {m}",
            domain=None,
        )
        items.append(figs.add(spec, f"{m} by {', '.join(light.groups)}: n per group in the labels"))
    notes = []
    if light.groups_total > light.groups_shown:
        notes.append(
            para(
                f"{light.groups_total:,} groups: the {light.groups_shown} largest are shown "
                f"({light.grouped().height:,} of {light.frame.height:,} rows); group by a column "
                "with fewer values to see all."
            )
        )
    rows = [[r["group"], r["metric"], *_mean_cells(r)] for r in means.iter_rows(named=True)]
    headers = ["group", "metric", "rows", "scored", "failed", "mean", level_text(level), "method"]
    title = f"By {', '.join(light.groups)}"
    return section("groups", title, *notes, grid(items), table(headers, rows))


def pass_section(
    figs: Figures, passes: pl.DataFrame, rules: Mapping[str, PassRule], level: float, grouped: bool
) -> Safe:
    """Pass rates against each metric's rule: a row that failed to score does not pass."""
    items = []
    for (m,), part in passes.group_by("metric", maintain_order=True):
        name = "group" if grouped else "metric"
        rows = _charts.labelled(part, name, "n", "rate", "n", "passed", "scored")
        spec = _charts.intervals(
            rows,
            value="rate",
            title=f"{m}: pass rate ({rules[str(m)].describe()})",
            subtitle=f"with its {level_text(level)}; n = rows (failed to score = not passed)",
            x_title="share of rows that pass",
        )
        items.append(
            figs.add(spec, f"{m}: passed of n rows; the rule is {rules[str(m)].describe()}")
        )
    rows = [
        [
            r["group"],
            r["metric"],
            rules[r["metric"]].describe(),
            r["n"],
            r["scored"],
            r["passed"],
            percent(r["rate"]),
            interval_text(r["ci_low"], r["ci_high"]),
            percent(r["rate_of_scored"]),
        ]
        for r in passes.iter_rows(named=True)
    ]
    headers = [
        "group",
        "metric",
        "rule",
        "rows",
        "scored",
        "passed",
        "pass rate",
        level_text(level),
        "pass rate of scored",
    ]
    note = para(
        "The pass rate counts every row: a row that failed to score does not pass (the "
        "last column leaves those rows out). The rule comes from the file's `_pass` column "
        "when there is one, else from the threshold its metadata records."
    )
    return section("pass", "Pass rates", note, grid(items), table(headers, rows))


def worst_section(
    worst: Mapping[str, list[int]],
    rows: Mapping[int, dict[str, Any]],
    overall: pl.DataFrame,
    shown: Sequence[str],
) -> Safe:
    """Per metric, its worst rows, each expandable to the inputs and every verdict: the
    cards `ragframe.show` draws, with the same styles."""
    metrics = overall["metric"].to_list()
    parts = [
        Safe(
            "<p class='note'>Each row opens to its inputs and the judge's verdicts with their "
            "reasons. <button type='button' data-open='1'>open all</button> "
            "<button type='button' data-open='0'>close all</button></p>"
        )
    ]
    for r in overall.iter_rows(named=True):
        m = r["metric"]
        which = "highest" if r["direction"] == "lower" else "lowest"
        head = (
            f"{m}: the {len(worst[m]):,} {which}-scored of {r['scored']:,} scored rows "
            f"({r['direction']} is better)"
        )
        blocks = [
            card_html(card(rows[i], position=i, shown=shown, metrics=metrics, focus=[m]))
            for i in worst[m]
        ]
        empty = para("no scored rows" if not r["scored"] else "none shown (worst=0)")
        parts.append(Safe(f"<h3>{esc(head)}</h3>{''.join(blocks) or empty}"))
    return section("worst", "Worst rows", styled(*parts))


def failures_section(causes: Mapping[str, pl.DataFrame], meta: Mapping[str, Any]) -> Safe:
    """Rows that failed to score, per metric and reason; then failed requests by cause."""
    parts = []
    for m, frame in causes.items():
        failed = int(frame["failed"][0]) if frame.height else 0
        rows = [
            [clip(r["error"], 600), r["rows"], ", ".join(f"{i:,}" for i in r["examples"])]
            for r in frame.iter_rows(named=True)
        ]
        parts.append(Safe(f"<h3>{esc(m)}: {failed:,} rows failed to score</h3>"))
        parts.append(table(["reason (_detail.error)", "rows", "first rows"], rows))
    if not causes:
        parts.append(para("Every row scored on every metric."))
    summary = meta.get("summary") or {}
    for key, title in (("failures", "Failed requests by cause"), ("retries", "Retries by cause")):
        counts = summary.get(key)
        if isinstance(counts, dict):
            parts.append(Safe(f"<h3>{esc(title)}</h3>"))
            parts.append(table(["cause", "requests"], counts.items()) if counts else para("none"))
    return section("failures", "Failures", *parts)


def run_section(anchor: str, title: str, meta: Mapping[str, Any]) -> Safe:
    """The run's metadata: judge, metrics with their prompt hashes, requests, tokens, cost."""
    if not meta:
        return section(
            anchor,
            title,
            para(
                "No metadata: a frame carries none. A scored Parquet file "
                "written by ragframe records the judge, prompts and usage."
            ),
        )
    summary = dict(meta.get("summary") or {})
    run = [("ragframe version", meta.get("ragframe_version")), ("created", meta.get("created"))]
    run += [(k, summary.pop(k)) for k in ("rows", "seconds", "sample") if k in summary]
    metrics = [
        [
            name,
            m.get("class"),
            m.get("direction"),
            Safe(f"<code>{clip(_json(m.get('config')), 600)}</code>"),
            Safe(
                "<br>".join(
                    f"{esc(t)}: <code>{esc(h)}</code>"
                    for t, h in (m.get("prompt_hashes") or {}).items()
                )
                or "-"
            ),
        ]
        for name, m in (meta.get("metrics") or {}).items()
    ]
    summary.pop("metrics", None)
    cost = summary.pop("cost_usd", None)
    usage = [("cost (USD)", "unknown price" if cost is None else f"${cost:.4f}")]
    tables = {
        k: summary.pop(k)
        for k in ("requests_by_task", "failures", "retries")
        if isinstance(summary.get(k), dict)
    }
    usage += list(summary.items())
    parts = [
        Safe("<h3>Run</h3>"),
        key_values(run),
        Safe("<h3>Judge</h3>"),
        key_values((meta.get("judge") or {}).items()),
        Safe("<h3>Metrics and prompts</h3>"),
        table(["metric", "class", "direction", "config", "prompt hashes"], metrics),
        Safe("<h3>Requests, tokens, cost</h3>"),
        key_values(usage),
    ]
    for key, counts in tables.items():
        parts.append(Safe(f"<h3>{esc(key.replace('_', ' '))}</h3>"))
        parts.append(table(["", "requests"], counts.items()) if counts else para("none"))
    return section(anchor, title, *parts)


def _json(value: Any) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)
