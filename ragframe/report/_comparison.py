"""The comparison view: `ragframe.compare` of the log against another (a = the other log, the
baseline; b = this log; differences are b - a), its warnings, the unmatched rows, and the rows
that changed most with both verdict lists side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from ragframe.decide.compare import TABLE_COLUMNS, format_p
from ragframe.errors import ConfigError
from ragframe.report import _charts
from ragframe.report._html import Safe, clip, detail, esc, number, table
from ragframe.report._page import Figures, grid, para, section
from ragframe.report._source import Source

#: Columns of `Comparison.table` shown first, in this order (others follow as they come;
#: `level` is said once above the table).
FIRST = tuple(c for c in TABLE_COLUMNS if c != "level")


def run_compare(
    against: Source,
    scored: Source,
    *,
    on: str | Sequence[str] | None,
    by: Sequence[str],
    metrics: Sequence[str],
    level: float,
    changed: int,
) -> Any:
    """`ragframe.compare(a=against, b=scored)`, or a ConfigError naming what is missing."""
    try:
        from ragframe.decide.compare import compare
    except ImportError as exc:
        raise ConfigError(
            "the comparison view needs ragframe.compare, which this install lacks"
        ) from exc
    return compare(
        against.data,
        scored.data,
        on=on,
        by=list(by) or None,
        metrics=list(metrics),
        level=level,
        changed=changed,
    )


def comparison_section(
    figs: Figures, result: Any, scored: Source, against: Source, groups: Sequence[str], level: float
) -> Safe:
    """Paired (or two-sample) differences with intervals, W/T/L, warnings and changed rows."""
    frame: pl.DataFrame = result.table
    paired = bool(getattr(result, "paired", True))
    keys = ", ".join(getattr(result, "on", None) or []) or "the key columns"
    design = f"paired on {keys}" if paired else "unpaired (two samples)"
    parts = [
        para(
            f"a = {against.label} (the baseline), b = {scored.label} (this report); each "
            f"difference is b − a, {design}, with its {level:.0%} interval."
        )
    ]
    warnings = list(getattr(result, "warnings", None) or [])
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        parts.append(Safe(f"<div class='warning'><strong>Warnings</strong><ul>{items}</ul></div>"))
    parts.append(_unmatched(getattr(result, "unmatched", None)))
    parts.append(grid(_diff_figures(figs, frame, groups, level)))
    first = [c for c in FIRST if c in frame.columns]
    rest = [c for c in frame.columns if c not in first and c not in groups and c != "level"]
    columns = [*groups, *first, *rest]
    parts.append(table(columns, [_cells(r, columns) for r in frame.iter_rows(named=True)]))
    changed = getattr(result, "changed", None)
    if isinstance(changed, dict) and any(f.height for f in changed.values()):
        parts.append(_changed(changed))
    return section("comparison", "Comparison", *parts)


def _cells(row: dict[str, Any], columns: Sequence[str]) -> list[Any]:
    return [
        Safe(esc(format_p(row[c]))) if c == "p_value" and isinstance(row[c], float) else row[c]
        for c in columns
    ]


def _diff_figures(
    figs: Figures, frame: pl.DataFrame, groups: Sequence[str], level: float
) -> list[str]:
    """One figure per metric: each group's difference with its interval, around zero."""
    items = []
    n_col = "n" if "n" in frame.columns else None
    for (m,), part in frame.group_by("metric", maintain_order=True):
        name = (
            pl.concat_str(
                [pl.col(g).cast(pl.String).fill_null("(null)") for g in groups], separator=" · "
            )
            if groups
            else pl.lit(str(m))
        )
        tips = [
            c
            for c in ("n", "mean_a", "mean_b", "p_value", "wins", "ties", "losses", "better")
            if c in part.columns
        ]
        rows = _charts.labelled(part, name, n_col, "diff", *tips)
        text = {"title": f"{m}: b − a", "x_title": f"difference in mean {m}"}
        text["subtitle"] = f"with its {level:.0%} interval; n = rows compared"
        spec = _charts.intervals(rows, value="diff", domain=None, zero=True, **text)
        items.append(figs.add(spec, f"{m}: difference b − a; n in the labels"))
    return items


def _unmatched(unmatched: Any) -> Safe:
    """Keys found in one log only: counted per side, and the first listed."""
    if not isinstance(unmatched, pl.DataFrame):
        return Safe("")
    if unmatched.height == 0:
        return para("Every row found its partner in the other log.")
    sides = unmatched["side"].value_counts() if "side" in unmatched.columns else None
    counts = (
        ", ".join(f"{n:,} only in {side}" for side, n in sides.sort("side").iter_rows())
        if sides is not None
        else ""
    )
    head = unmatched.head(20)
    rows = [[clip(v, 200) if isinstance(v, str) else v for v in r] for r in head.rows()]
    return Safe(
        para(
            f"{unmatched.height:,} rows without a partner in the other log ({counts}); left "
            "out of the paired figures. The first 20:"
        )
        + table(head.columns, rows)
    )


def _changed(changed: dict[str, pl.DataFrame]) -> Safe:
    """Per metric, the pairs whose score moved most (as `compare` ordered them), a's and b's
    verdicts side by side."""
    parts = [Safe("<h3>Rows that changed most</h3>")]
    for m, rows in changed.items():
        if f"{m}_a" not in rows.columns or f"{m}_b" not in rows.columns:
            continue
        keys = [c for c in rows.columns if not c.startswith(f"{m}_") and c not in ("diff",)]
        blocks = [_changed_row(m, r, keys) for r in rows.iter_rows(named=True)]
        parts.append(Safe(f"<h4>{esc(m)}</h4>{''.join(blocks) or para('no row changed')}"))
    return Safe("".join(parts))


def _changed_row(metric: str, row: dict[str, Any], keys: Sequence[str]) -> str:
    a, b = row.get(f"{metric}_a"), row.get(f"{metric}_b")
    ids = " · ".join(f"{k} {row[k]}" for k in keys if k != "question" and row[k] is not None)
    gist = clip(row["question"], 140) if isinstance(row.get("question"), str) else ""
    summary = (
        f"<span class='score'>{esc(number(a))} → {esc(number(b))}</span>{esc(ids)}"
        f"<span class='gist'>{gist}</span>"
    )
    sides = "".join(
        f"<div><h5>{side}: {esc(number(row.get(f'{metric}_{side}')))}</h5>"
        f"{detail(row.get(f'{metric}_detail_{side}'))}</div>"
        for side in ("a", "b")
    )
    return (
        f"<details class='row'><summary>{summary}</summary>"
        f"<div class='body'><div class='pair'>{sides}</div></div></details>"
    )
