"""`Comparison`: what `compare` found, and how it shows as text and HTML."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ragframe.decide.compare._regression import (
    RegressionCheck,
    check_compared,
    check_table,
    format_p,
    group_value,
    warn_unknown,
)


@dataclass(frozen=True)
class Comparison:
    """What `compare` found.

    table : one row per group and metric: n (pairs; unpaired: both sides' scores), n_a / n_b
        (scores on each side), mean_a, mean_b, diff (b - a), ci_low / ci_high (its `level`
        interval, `method`), p_value (`test`), wins / ties / losses (b better / equal / worse,
        by the metric's direction; paired only), better ("b", "a", or null when the interval
        covers 0 or p >= 1 - level), and the rows left out: matched (keys on both sides),
        only_a / only_b (keys on one side; paired only), failed_a / failed_b (null scores).
    unmatched : the keys found on one side only, with `side` ("a" or "b") and the group
        columns; empty when unpaired.
    changed : per metric, the pairs whose score moved most (|b - a|, largest first), with the
        keys, both scores (`{metric}_a`, `{metric}_b`), `diff`, and both verdict structs
        (`{metric}_detail_a`, `{metric}_detail_b`) where the inputs have them.
    warnings : what may mislead: an unpaired design, differing judges or prompts, rows left
        out, unknown directions.
    seconds : how long the comparison took.

    `check_regression(["faithfulness"], margin=0.0)` says whether b is worse than a on those
    metrics (a `RegressionCheck` with `.passed`), what `ragframe compare --fail-if-worse`
    exits 1 on.
    """

    table: pl.DataFrame
    unmatched: pl.DataFrame
    changed: dict[str, pl.DataFrame]
    warnings: list[str]
    paired: bool
    on: list[str] = field(default_factory=list)
    by: list[str] = field(default_factory=list)
    level: float = 0.95
    seconds: float = 0.0
    #: (metrics, count b's failed rows as the worst) -> the regression check's figures, over
    #: all rows and per group; set by `compare`, which still holds the two sides.
    _regression: Callable[[list[str], bool], pl.DataFrame] | None = field(
        default=None, repr=False, compare=False
    )

    def check_regression(
        self,
        metrics: Sequence[str] | str,
        margin: float = 0.0,
        *,
        ignore_failed: bool = False,
        fail_if_unknown: bool = False,
    ) -> RegressionCheck:
        """Whether b is worse than a on `metrics` (each compared here), by at least `margin`:
        the interval of b - a wholly below -margin (above +margin for a lower-is-better
        metric) and p < 1 - level, over all rows or, with groups, in any group. b's rows that
        failed to score count as the worst score unless `ignore_failed`. A metric too thin to
        tell (no interval; too few rows for p to reach 1 - level) is a warning (a
        `RegressionUnknownWarning`), a failure only with `fail_if_unknown`. `.passed` is True
        when nothing failed."""
        check = self._regression_check(
            metrics, margin, ignore_failed=ignore_failed, fail_if_unknown=fail_if_unknown
        )
        warn_unknown(check)
        return check

    def _regression_check(
        self,
        metrics: Sequence[str] | str,
        margin: float = 0.0,
        *,
        ignore_failed: bool = False,
        fail_if_unknown: bool = False,
    ) -> RegressionCheck:
        """`check_regression` without its warning: for callers that say "cannot tell"
        themselves (the command line's ⚠️ line) or warn on their user's behalf."""
        names = check_compared(self.table, metrics)
        figures = self.table.with_columns(pl.lit(not self.by).alias("overall"))
        counted = ["failed_b"] if self.paired else ["failed_a", "failed_b"]
        named = figures.filter(pl.col("metric").is_in(names))
        failed = sum(named[c].fill_null(0).sum() for c in counted)
        same = not self.by and (ignore_failed or not failed)  # the table's own figures
        if self._regression is not None and not same:
            figures = self._regression(names, not ignore_failed)
        table = check_table(figures, names, margin, self.level, self.by, fail_if_unknown)
        return RegressionCheck(
            table,
            float(margin),
            self.level,
            self.paired,
            list(self.by),
            self.seconds,
            self,
            ignore_failed=ignore_failed,
            fail_if_unknown=fail_if_unknown,
        )

    def __str__(self) -> str:
        lines = [self._headline(), ""]
        lines += _text_table(self._display_rows(), left=len(self.by) + 1)
        if self.warnings:
            lines += ["", *(f"warning: {w}" for w in self.warnings)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The table for Jupyter: figures right-aligned, each metric's direction, the verdict
        coloured (and marked, for print), and the interval of b - a drawn against 0 on one
        scale for every row; then the warnings."""
        rows = self._display_rows()
        header, body = rows[0], rows[1:]
        left = len(self.by) + 1
        verdict_at = len(header) - 1
        scale = _scale(self.table)
        cells = [*header[:verdict_at], "b − a against 0", header[verdict_at]]
        head = "".join(
            f'<th style="{_TH}text-align:{"left" if i < left or i >= verdict_at else "right"}">'
            f"{html.escape(c)}</th>"
            for i, c in enumerate(cells)
        )
        lines = []
        for row, shown in zip(self.table.iter_rows(named=True), body, strict=True):
            tds = []
            for i, c in enumerate(shown[:verdict_at]):
                text = html.escape(c)
                if i == left - 1 and row["direction"]:
                    arrow = "↑" if row["direction"] == "higher" else "↓"
                    tip = f"{row['direction']} is better"
                    text += f' <span title="{tip}" style="color:#777">{arrow}</span>'
                align = "left" if i < left else "right"
                tds.append(f'<td style="{_TD}text-align:{align}">{text}</td>')
            tds.append(f'<td style="{_TD}">{_bar(row, scale)}</td>')
            colour = _COLOURS.get(row["better"] or "", "")
            tds.append(f'<td style="{_TD}{colour}">{html.escape(shown[verdict_at])}</td>')
            lines.append("<tr>" + "".join(tds) + "</tr>")
        warned = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        note = (
            "↑ / ↓: higher / lower is better; W/T/L: rows where b wins, ties, loses"
            if self.paired
            else "↑ / ↓: higher / lower is better; n: scores in a / in b"
        )
        return (
            f'<div class="ragframe-compare"><style>{_TABLE_CSS}</style>'
            f'<p style="margin:0 0 .4em 0"><b>{html.escape(self._headline())}</b></p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"
            f'<p style="margin:.3em 0;color:#666;font-size:85%">{note}</p>'
            + (
                '<p style="margin:.4em 0 0 0">Warnings:</p>'
                f'<ul style="margin:.2em 0;color:#8a5a00">{warned}</ul>'
                if warned
                else ""
            )
            + "</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain Python values (for `--json`)."""
        return {
            "paired": self.paired,
            "on": self.on,
            "by": self.by,
            "level": self.level,
            "table": self.table.to_dicts(),
            "warnings": self.warnings,
            "unmatched": self.unmatched.to_dicts(),
            "changed": {m: frame.to_dicts() for m, frame in self.changed.items()},
        }

    def _headline(self) -> str:
        level = f"{self.level:.0%} intervals"
        if not self.paired:
            return f"unpaired (two-sample) comparison of b against a, {level}"
        sides = self.unmatched.get_column("side")
        only_a, only_b = int((sides == "a").sum()), int((sides == "b").sum())
        matched = self._matched_total()
        return (
            f"paired on {', '.join(self.on)}: {matched} keys matched, {only_a} only in a, "
            f"{only_b} only in b; differences are b - a, {level}"
        )

    def _matched_total(self) -> int:
        if not self.table.height:
            return 0
        firsts = self.table.filter(pl.col("metric") == self.table["metric"][0])
        return int(firsts["matched"].sum())

    def _display_rows(self) -> list[list[str]]:
        """The table as text cells, header first (shared by `__str__` and `_repr_html_`)."""
        header = [*self.by, "metric", "n", "mean a", "mean b", "diff", "interval", "p"]
        header += ["W/T/L", "verdict"] if self.paired else ["verdict"]
        rows = [header]
        for row in self.table.iter_rows(named=True):
            n = str(row["n"]) if self.paired else f"{row['n_a']}/{row['n_b']}"
            cells = [*(group_value(row[g]) for g in self.by), row["metric"], n]
            cells += [_num(row["mean_a"]), _num(row["mean_b"]), _num(row["diff"], sign=True)]
            cells += [_interval(row["ci_low"], row["ci_high"]), format_p(row["p_value"])]
            if self.paired:
                cells.append(f"{row['wins']}/{row['ties']}/{row['losses']}")
            cells.append(_verdict(row["better"], row["direction"]))
            rows.append(cells)
        return rows


_TABLE_CSS = ".ragframe-compare table{border-collapse:collapse;font-variant-numeric:tabular-nums}"
_TH = "padding:2px 8px;border-bottom:1px solid #999;"
_TD = "padding:2px 8px;border-bottom:1px solid #e5e5e5;white-space:nowrap;"
_COLOURS = {
    "b": "background:#e6f4ea;color:#135c26;",
    "a": "background:#fce8e6;color:#8c1d18;",
    "": "color:#555;",
}
_BAR_WIDTH, _BAR_HALF = 140, 64


def _scale(table: pl.DataFrame) -> float:
    """The half-width of the bars' common axis: the largest |bound| or |diff|, at least 0.05."""
    ends = [
        abs(v)
        for c in ("ci_low", "ci_high", "diff")
        for v in table.get_column(c).to_list()
        if v is not None
    ]
    return max([0.05, *ends])


def _bar(row: dict[str, Any], scale: float) -> str:
    """The interval of b - a as a line, its mean as a dot, against a 0 mark (inline SVG)."""
    diff, low, high = row["diff"], row["ci_low"], row["ci_high"]
    if diff is None:
        return ""
    centre = _BAR_WIDTH / 2

    def x(v: float) -> float:
        return round(centre + v / scale * _BAR_HALF, 1)

    colour = {"b": "#1e8e3e", "a": "#d93025"}.get(row["better"] or "", "#777")
    interval = (
        f'<line x1="{x(low)}" x2="{x(high)}" y1="7" y2="7" stroke="{colour}" '
        'stroke-width="3" stroke-linecap="round"/>'
        if low is not None and high is not None
        else ""
    )
    label = f"b - a = {diff:+.3f}" + (
        f", interval [{low:+.3f}, {high:+.3f}]" if low is not None and high is not None else ""
    )
    return (
        f'<svg width="{_BAR_WIDTH}" height="14" role="img" aria-label="{label}">'
        f"<title>{label}</title>"
        f'<line x1="{centre}" x2="{centre}" y1="0" y2="14" stroke="#999" stroke-width="1"/>'
        f'{interval}<circle cx="{x(diff)}" cy="7" r="3" fill="{colour}"/></svg>'
    )


def _num(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{low:+.3f}, {high:+.3f}]"


def _verdict(better: str | None, direction: str | None) -> str:
    if better == "b":
        return "✅ b better" if direction else "✅ b higher"
    if better == "a":
        return "❌ b worse" if direction else "❌ b lower"
    return "~ no clear difference"


def _text_table(rows: list[list[str]], *, left: int) -> list[str]:
    """Columns aligned: the first `left` (groups, metric) and the verdict (last) to the
    left, the figures to the right."""
    last = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(last + 1)]
    return [
        "  ".join(
            c.ljust(widths[i]) if i < left or i == last else c.rjust(widths[i])
            for i, c in enumerate(row)
        ).rstrip()
        for row in rows
    ]
