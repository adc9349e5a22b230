"""Is b worse than a? The check a CI job fails on (`ragframe compare A B --on id
--fail-if-worse faithfulness`), read off a comparison's table.

A metric (in a group, with `by=`) is **worse** when its interval of b - a lies wholly beyond the
margin on the losing side, in the metric's own direction, and the p-value agrees (p < 1 -
level, the rule of the comparison's verdict): for a higher-is-better metric the interval's high
end is below -margin; for a lower-is-better one (hallucination) its low end is above +margin.
With margin 0 "worse" is exactly the comparison's "❌ b worse". A margin asks for a drop of at
least that much before failing: a drop whose interval reaches above -margin is not worse.

A metric with no interval (fewer than 2 pairs, or 2 scores a side unpaired) cannot be shown
not worse, so it fails the check ("no interval"), as a gate on a metric with no scored row
fails. With groups (`by=`) every group is checked and any group worse fails the check: a
regression in one part of the traffic is a regression, even when the others hide it in the
overall mean (each group is one more chance of a false alarm: at 95 % about 2.5 % a group when
nothing changed).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ragframe.decide.ci_files import Case, CiFiles, markdown_table
from ragframe.errors import ConfigError

#: The columns of `RegressionCheck.table`, after the group columns.
COLUMNS = (
    "metric",
    "direction",
    "n",
    "n_a",
    "n_b",
    "mean_a",
    "mean_b",
    "diff",
    "ci_low",
    "ci_high",
    "p_value",
    "failed_a",
    "failed_b",
    "margin",
    "status",
    "ok",
)
WORSE, NOT_WORSE, NO_INTERVAL = "worse", "not worse", "no interval"


@dataclass(frozen=True)
class RegressionCheck(CiFiles):
    """Whether b is worse than a on the metrics named (module docstring: the rule).

    table : one row per group and metric named: the comparison's figures (n, n_a, n_b,
        mean_a, mean_b, diff = b - a, ci_low, ci_high, p_value, failed_a, failed_b), the
        `margin`, `status` ("worse", "not worse" or "no interval") and `ok` (not "worse" and
        not "no interval").
    passed : True when no metric is worse. `str()` says one line per row; `write(junit=,
    json=, markdown=)` writes the CI files (a JUnit test case per row).
    comparison : the `Comparison` the check was read from.
    """

    table: pl.DataFrame
    margin: float
    level: float
    paired: bool
    by: list[str]
    seconds: float = 0.0
    comparison: Any = field(default=None, repr=False, compare=False)
    suite = "ragframe compare"

    @property
    def passed(self) -> bool:
        """True when no named metric is worse (nor without an interval)."""
        return bool(self.table["ok"].all())

    @property
    def worse(self) -> list[str]:
        """The metrics worse in b (in some group), in table order."""
        failed = self.table.filter(~pl.col("ok"))["metric"]
        return list(dict.fromkeys(failed.to_list()))

    def __str__(self) -> str:
        lines = [_line(row, self) for row in self.table.iter_rows(named=True)]
        return "\n".join([*lines, self._verdict()])

    def _verdict(self) -> str:
        total, status = self.table.height, self.table["status"]
        worse, unknown = int((status == WORSE).sum()), int((status == NO_INTERVAL).sum())
        what = f"{self.level:.0%} intervals" + (f", margin {self.margin:g}" if self.margin else "")
        if not worse and not unknown:
            return f"regression check passed: b is not worse on any of {total} ({what})"
        said = [f"{worse} of {total} worse"] if worse else []
        said += [f"{unknown} of {total} without an interval"] if unknown else []
        return f"regression check failed: {', '.join(said)} ({what})"

    def _repr_html_(self) -> str:
        items = "".join(
            f"<li>{html.escape(_line(row, self))}</li>" for row in self.table.iter_rows(named=True)
        )
        return f"<div><ul>{items}</ul><p><b>{html.escape(self._verdict())}</b></p></div>"

    def cases(self) -> list[Case]:
        """One JUnit test case per row: 'faithfulness not worse than a [by 0.05]'."""
        out = []
        for row in self.table.iter_rows(named=True):
            message = _line(row, self)[2:]
            out.append(
                Case(
                    classname=f"ragframe.compare.{row['metric']}",
                    name=_name(row, self),
                    ok=bool(row["ok"]),
                    message=message,
                    text=message + "\n",
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: `passed`, `checks` / `failed` (counts), `margin`, `level`, `paired`,
        `by`, and `results`: the table's rows (with `name`, the JUnit test case's)."""
        rows = [{"name": _name(r, self), **r} for r in self.table.iter_rows(named=True)]
        return {
            "version": 1,
            "passed": self.passed,
            "checks": self.table.height,
            "failed": int((~self.table["ok"]).sum()),
            "margin": self.margin,
            "level": self.level,
            "paired": self.paired,
            "by": self.by,
            "results": rows,
        }

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table: one row per metric (and group) with ✅ / ❌."""
        head = "✅ b is not worse" if self.passed else "❌ b is worse"
        lines = [f"### ragframe compare: {head}", "", self._verdict() + ".", ""]
        header = ["", *self.by, "metric", "diff (b - a)", f"{self.level:.0%} interval", "p"]
        rows = [
            [
                "✅" if row["ok"] else "❌",
                *(row[g] for g in self.by),
                row["metric"],
                _signed(row["diff"]),
                _interval(row["ci_low"], row["ci_high"]),
                _p(row["p_value"]),
                _n(row, self.paired),
                row["status"],
            ]
            for row in self.table.iter_rows(named=True)
        ]
        return "\n".join([*lines, *markdown_table([*header, "n", "verdict"], rows)]) + "\n"

    def _seconds(self) -> float:
        return self.seconds

    def _properties(self) -> dict[str, Any]:
        return {"margin": self.margin, "level": self.level, "paired": self.paired}


def check_table(
    table: pl.DataFrame, metrics: Sequence[str], margin: float, level: float, by: list[str]
) -> pl.DataFrame:
    """The rows of the comparison's `table` for `metrics`, with `margin`, `status`, `ok`."""
    names = check_metrics(metrics)
    margin = check_margin(margin)
    compared = list(dict.fromkeys(table["metric"].to_list()))
    missing = [m for m in names if m not in compared]
    if missing:
        raise ConfigError(
            f"the regression check names {missing}, which were not compared (compared: "
            f"{compared}); compare them too (metrics=[...]) or fix the names"
        )
    alpha = round(1 - level, 12)
    rows = []
    for metric in names:  # in the order named, each metric's groups in the table's order
        for row in table.filter(pl.col("metric") == metric).iter_rows(named=True):
            status = _status(row, margin, alpha)
            rows.append({**row, "margin": margin, "status": status, "ok": status == NOT_WORSE})
    schema = {**{g: table.schema[g] for g in by}}
    schema.update({c: table.schema[c] for c in COLUMNS if c in table.schema})
    schema.update(margin=pl.Float64, status=pl.String, ok=pl.Boolean)
    return pl.DataFrame([{c: r[c] for c in schema} for r in rows], schema=schema)


def check_metrics(metrics: Sequence[str] | str) -> list[str]:
    """The metric names, at least one."""
    names = [metrics] if isinstance(metrics, str) else list(metrics or [])
    names = list(dict.fromkeys(n.strip() for n in names if isinstance(n, str) and n.strip()))
    if not names:
        raise ConfigError(
            "name the metrics b must not be worse on, e.g. ['faithfulness'] "
            "(CLI: --fail-if-worse faithfulness)"
        )
    return names


def check_margin(margin: float) -> float:
    """A margin from 0 to 1 (a score difference)."""
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < 1:
        raise ConfigError(
            f"margin must be a score difference from 0 to 1 (e.g. 0.05), not {margin!r}"
        )
    return float(margin)


def _status(row: dict[str, Any], margin: float, alpha: float) -> str:
    low, high, p = row["ci_low"], row["ci_high"], row["p_value"]
    if low is None or high is None or p is None:
        return NO_INTERVAL
    beyond = low > margin if row["direction"] == "lower" else high < -margin
    return WORSE if beyond and p < alpha else NOT_WORSE


# ------------------------------------------------------------------------------ text


def _label(row: dict[str, Any], check: RegressionCheck) -> str:
    groups = ", ".join(f"{g}={row[g]}" for g in check.by)
    return row["metric"] + (f" [{groups}]" if groups else "")


def _name(row: dict[str, Any], check: RegressionCheck) -> str:
    """'faithfulness not worse than a by 0.05 [topic=geo]'."""
    by = f" by {check.margin:g}" if check.margin else ""
    groups = ", ".join(f"{g}={row[g]}" for g in check.by)
    return f"{row['metric']} not worse than a{by}" + (f" [{groups}]" if groups else "")


def _line(row: dict[str, Any], check: RegressionCheck) -> str:
    """'❌ faithfulness: worse: b - a = -0.120, 95% interval [-0.180, -0.060] wholly below
    0 (n=40 pairs, p=0.001)'."""
    mark = "✅" if row["ok"] else "❌"
    label, level = _label(row, check), f"{check.level:.0%}"
    lower = row["direction"] == "lower"
    line = -check.margin if not lower else check.margin
    side = "above" if lower else "below"
    facts = [_n(row, check.paired)]
    if row["p_value"] is not None:
        shown = _p(row["p_value"])
        facts.append(f"p{shown}" if shown.startswith("<") else f"p={shown}")
    if lower:
        facts.append("lower is better")
    if (row["failed_b"] or 0) > 0:
        facts.append(f"{row['failed_b']} rows of b failed to score, left out")
    said = f"({'; '.join(facts)})"
    if row["status"] == NO_INTERVAL:
        need = "2 pairs" if check.paired else "2 scores on each side"
        return f"{mark} {label}: no interval, cannot tell (needs at least {need}) {said}"
    figures = (
        f"b - a = {_signed(row['diff'])}, {level} interval "
        f"{_interval(row['ci_low'], row['ci_high'])}"
    )
    if row["status"] == WORSE:
        return f"{mark} {label}: worse: {figures} wholly {side} {_bound(line)} {said}"
    beyond = row["ci_low"] > line if lower else row["ci_high"] < line
    why = (
        f"the interval is {side} {_bound(line)} but p is not below {1 - check.level:.2g}"
        if beyond
        else f"the interval is not wholly {side} {_bound(line)}"
    )
    return f"{mark} {label}: not worse: {figures}; {why} {said}"


def _n(row: dict[str, Any], paired: bool) -> str:
    return f"n={row['n']} pairs" if paired else f"n={row['n_a']}/{row['n_b']}"


def _bound(value: float) -> str:
    return "0" if value == 0 else f"{value:+.3f}".rstrip("0").rstrip(".")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float | None) -> str:
    """Three decimals as every figure, "<0.001" below: the sign-flip test's smallest p,
    1 / 10,001, is its resolution, not a measured 1.0e-04."""
    if p is None:
        return "-"
    return f"{p:.3f}" if round(p, 3) >= 0.001 else "<0.001"
