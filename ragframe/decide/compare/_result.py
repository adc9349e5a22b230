"""`Comparison`: what `compare` found, and how it shows as text and HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ragframe.decide.compare._regression import RegressionCheck, check_table


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

    def check_regression(
        self, metrics: Sequence[str] | str, margin: float = 0.0
    ) -> RegressionCheck:
        """Whether b is worse than a on `metrics` (each compared here), by at least `margin`:
        the interval of b - a wholly below -margin (above +margin for a lower-is-better
        metric) and p < 1 - level; a metric with no interval fails too. With groups, any
        group worse fails. `.passed` is True when none is."""
        table = check_table(self.table, metrics, margin, self.level, self.by)
        return RegressionCheck(
            table, float(margin), self.level, self.paired, list(self.by), self.seconds, self
        )

    def __str__(self) -> str:
        lines = [self._headline(), ""]
        lines += _text_table(self._display_rows(), left=len(self.by) + 1)
        if self.warnings:
            lines += ["", *(f"warning: {w}" for w in self.warnings)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = self._display_rows()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in rows[1:]
        )
        warned = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        return (
            f"<div><p>{html.escape(self._headline())}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<p>Warnings:</p><ul>{warned}</ul>" if warned else "")
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
            cells = [*(str(row[g]) for g in self.by), row["metric"], n]
            cells += [_num(row["mean_a"]), _num(row["mean_b"]), _num(row["diff"], sign=True)]
            cells += [_interval(row["ci_low"], row["ci_high"]), _p(row["p_value"])]
            if self.paired:
                cells.append(f"{row['wins']}/{row['ties']}/{row['losses']}")
            cells.append(_verdict(row["better"], row["direction"]))
            rows.append(cells)
        return rows


def _num(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


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
