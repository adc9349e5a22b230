"""Is b worse than a? The check a CI job fails on (`ragframe compare A B --on id
--fail-if-worse faithfulness`), read off the comparison's figures of the metrics named.

A metric is **worse** when its interval of b - a lies wholly beyond the margin on the losing
side, in the metric's own direction, and the p-value agrees (p < 1 - level, the rule of the
comparison's verdict): for a higher-is-better metric the interval's high end is below
-margin; for a lower-is-better one (hallucination) its low end is above +margin. With margin 0
"worse" is exactly the comparison's "❌ b worse". A margin asks for a drop of at least that
much before failing: a drop whose interval reaches above -margin is not worse.

The figures are the check's own: a row of b that failed to score (a null score) counts as the
metric's worst score (0; 1 when lower is better), as a gate counts it, so a candidate that
breaks on most rows cannot pass by leaving them out (`ignore_failed=True` leaves them out).
Paired, a pair whose a failed is left out (a missing baseline is no regression of b);
unpaired, there is no pair to leave out, so a's failed rows count as the worst score too, and
rows neither run could score (a missing input) weigh the same on both sides.
The check is made over all rows and, with groups (`by=`), in every group too: any of them
worse fails (a drop spread thinly over the groups shows in the whole; one part of the traffic
worse is a regression the others can hide; each group is one more chance of a false alarm, at
95 % about 2.5 % a group when nothing changed).

"**cannot tell**": a metric (or group) with no interval (fewer than 2 pairs; unpaired, fewer
than 2 scores a side), or so few rows that no data could give p < 1 - level (the sign-flip
test's smallest p is 2 / 2**n: 5 pairs give at best 0.0625, so at 95 % they can never show a
difference; unpaired, 2 / C(n_a + n_b, n_a)). Nothing is shown either way: the check says so
on its own line and as a warning (a skipped JUnit case, ⚠️ in the Markdown; in Python a
`RegressionUnknownWarning`, since a check that passes is otherwise silent there) and does not
fail, unless `fail_if_unknown=True` (CLI `--fail-if-unknown`).
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ragframe.decide.ci_files import Case, CiFiles, markdown_table
from ragframe.decide.compare._stats import PERMUTATIONS
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
    "min_p",
    "failed_a",
    "failed_b",
    "overall",
    "margin",
    "status",
    "ok",
)
WORSE, NOT_WORSE, UNKNOWN = "worse", "not worse", "cannot tell"
#: How a null group value reads in every view (the table keeps the null; `overall` tells it
#: from the all-rows row).
NULL_GROUP = "(null)"


class RegressionUnknownWarning(RuntimeWarning):
    """The regression check passed but cannot tell about some metric (too few rows): what
    `check_regression` warns of in Python, where a passing check is otherwise silent.
    `warnings.simplefilter("error", RegressionUnknownWarning)` fails on it (or pass
    `fail_if_unknown=True`)."""


@dataclass(frozen=True)
class RegressionCheck(CiFiles):
    """Whether b is worse than a on the metrics named (module docstring: the rule).

    table : one row per metric named over all rows (`overall` True), then with `by=` per
        group and metric: the figures (n, n_a, n_b, mean_a, mean_b, diff = b - a, ci_low,
        ci_high, p_value; failed_a / failed_b: rows that failed to score, b's (unpaired, a's
        too) counted as the worst score unless `ignore_failed`), `min_p` (the smallest p that
        many rows can give; null for a t-test), the `margin`, `status` ("worse", "not worse"
        or "cannot tell") and `ok` (not "worse", nor "cannot tell" with `fail_if_unknown`).
    passed : True when no row failed. `worse` / `unknown` name the metrics worse / that
        cannot tell. `str()` says one line per row; `write(junit=, json=, markdown=)` writes
        the CI files (a JUnit test case per row, "cannot tell" as skipped).
    comparison : the `Comparison` the check was read from.
    """

    table: pl.DataFrame
    margin: float
    level: float
    paired: bool
    by: list[str]
    seconds: float = 0.0
    comparison: Any = field(default=None, repr=False, compare=False)
    ignore_failed: bool = False
    fail_if_unknown: bool = False
    suite = "ragframe compare"

    @property
    def passed(self) -> bool:
        """True when no named metric is worse (nor, with `fail_if_unknown`, cannot tell)."""
        return bool(self.table["ok"].all())

    @property
    def worse(self) -> list[str]:
        """The metrics worse in b (overall or in some group), in table order."""
        return self._metrics(WORSE)

    @property
    def unknown(self) -> list[str]:
        """The metrics the check cannot tell about (overall or in some group)."""
        return self._metrics(UNKNOWN)

    def _metrics(self, status: str) -> list[str]:
        found = self.table.filter(pl.col("status") == status)["metric"]
        return list(dict.fromkeys(found.to_list()))

    def __str__(self) -> str:
        lines = [_line(row, self) for row in self.table.iter_rows(named=True)]
        return "\n".join([*lines, self._verdict()])

    def _verdict(self) -> str:
        total, status = self.table.height, self.table["status"]
        worse, unknown = int((status == WORSE).sum()), int((status == UNKNOWN).sum())
        what = f"{self.level:.0%} intervals" + (f", margin {self.margin:g}" if self.margin else "")
        cannot = f"{unknown} of {total} cannot tell"
        if worse:
            said = f"{worse} of {total} worse" + (f", {cannot}" if unknown else "")
            return f"regression check failed: {said} ({what})"
        if unknown and self.fail_if_unknown:
            return f"regression check failed: {cannot} (fail if unknown; {what})"
        if unknown:
            return (
                f"regression check passed with a warning: no metric shown worse; {cannot} ({what})"
            )
        return f"regression check passed: b is not shown worse on any of {total} ({what})"

    def _repr_html_(self) -> str:
        items = "".join(
            f"<li>{html.escape(_line(row, self))}</li>" for row in self.table.iter_rows(named=True)
        )
        return f"<div><ul>{items}</ul><p><b>{html.escape(self._verdict())}</b></p></div>"

    def cases(self) -> list[Case]:
        """One JUnit test case per row: 'faithfulness not worse than a [by 0.05]'."""
        out = []
        for row in self.table.iter_rows(named=True):
            message = _line(row, self).split(" ", 1)[1]  # without the mark
            out.append(
                Case(
                    classname=f"ragframe.compare.{row['metric']}",
                    name=_name(row, self),
                    ok=bool(row["ok"]),
                    message=message,
                    text=message + "\n",
                    skipped=bool(row["ok"]) and row["status"] == UNKNOWN,
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: `passed`, `checks` / `failed` / `unknown` (counts), `margin`,
        `level`, `paired`, `by`, `ignore_failed`, `fail_if_unknown`, and `results`: the
        table's rows (with `name`, the JUnit test case's)."""
        rows = [{"name": _name(r, self), **r} for r in self.table.iter_rows(named=True)]
        return {
            "version": 1,
            "passed": self.passed,
            "checks": self.table.height,
            "failed": int((~self.table["ok"]).sum()),
            "unknown": int((self.table["status"] == UNKNOWN).sum()),
            "margin": self.margin,
            "level": self.level,
            "paired": self.paired,
            "by": self.by,
            "ignore_failed": self.ignore_failed,
            "fail_if_unknown": self.fail_if_unknown,
            "results": rows,
        }

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table: one row per metric (and group) with ✅ / ⚠️ / ❌;
        the headline says worse only when a row is worse."""
        if self.worse:
            head = "❌ b is worse"
        elif self.unknown:
            mark = "❌" if self.fail_if_unknown else "⚠️"
            head = f"{mark} cannot tell whether b is worse on {', '.join(self.unknown)}"
        else:
            head = "✅ b is not shown worse"
        lines = [f"### ragframe compare: {head}", "", self._verdict() + ".", ""]
        header = ["", *self.by, "metric", "diff (b - a)", f"{self.level:.0%} interval", "p"]
        rows = [
            [
                _mark(row),
                *(_group(row, g) for g in self.by),
                row["metric"],
                _signed(row["diff"]),
                _interval(row["ci_low"], row["ci_high"]),
                format_p(row["p_value"]),
                _n(row, self.paired) + "".join(f"; {f}" for f in _failed(row, self)),
                row["status"],
            ]
            for row in self.table.iter_rows(named=True)
        ]
        return "\n".join([*lines, *markdown_table([*header, "n", "verdict"], rows)]) + "\n"

    def _seconds(self) -> float:
        return self.seconds

    def _properties(self) -> dict[str, Any]:
        return {
            "margin": self.margin,
            "level": self.level,
            "paired": self.paired,
            "ignore_failed": self.ignore_failed,
            "fail_if_unknown": self.fail_if_unknown,
        }


def check_compared(table: pl.DataFrame, metrics: Sequence[str] | str) -> list[str]:
    """The metric names, each one the comparison's `table` compared."""
    names = check_metrics(metrics)
    compared = list(dict.fromkeys(table["metric"].to_list()))
    missing = [m for m in names if m not in compared]
    if missing:
        raise ConfigError(
            f"the regression check names {missing}, which were not compared (compared: "
            f"{compared}); compare them too (metrics=[...]) or fix the names"
        )
    return names


def check_table(
    figures: pl.DataFrame,
    metrics: Sequence[str],
    margin: float,
    level: float,
    by: list[str],
    fail_if_unknown: bool = False,
) -> pl.DataFrame:
    """The rows of `figures` (comparison rows with `overall`) for `metrics`, with `min_p`,
    `margin`, `status` and `ok`."""
    names = check_compared(figures, metrics)
    margin = check_margin(margin)
    alpha = round(1 - level, 12)
    rows = []
    for metric in names:  # in the order named: overall first, then each group in order
        for row in figures.filter(pl.col("metric") == metric).iter_rows(named=True):
            floor = min_p(row)
            status = _status(row, floor, margin, alpha)
            ok = status == NOT_WORSE or (status == UNKNOWN and not fail_if_unknown)
            rows.append({**row, "min_p": floor, "margin": margin, "status": status, "ok": ok})
    added = {"min_p": pl.Float64, "overall": pl.Boolean, "margin": pl.Float64}
    added.update(status=pl.String, ok=pl.Boolean)
    schema = {c: added.get(c) or figures.schema[c] for c in [*by, *COLUMNS]}
    return pl.DataFrame([{c: r[c] for c in schema} for r in rows], schema=schema)


def min_p(row: dict[str, Any]) -> float | None:
    """The smallest p-value the row's test can give with its n, whatever the scores: the
    exact sign flip 2 / 2**n; a random sign flip or relabelling no less than that (2 /
    C(n_a + n_b, n_a) unpaired, 1 / C(...) when the sides differ in size) nor than
    1 / (1 + PERMUTATIONS); None for a t-test (no floor)."""
    test = row.get("test") or ""
    if test.startswith("sign-flip"):
        floor = 2.0 / 2.0 ** min(row["n"], 1074)
    elif test == "label permutation":
        na, nb = row["n_a"], row["n_b"]
        floor = (2.0 if na == nb else 1.0) / math.comb(na + nb, na)
    else:
        return None
    return min(1.0, max(floor, 0.0 if test == "sign-flip exact" else 1 / (1 + PERMUTATIONS)))


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


def _status(row: dict[str, Any], floor: float | None, margin: float, alpha: float) -> str:
    low, high, p = row["ci_low"], row["ci_high"], row["p_value"]
    if low is None or high is None or p is None or (floor is not None and floor >= alpha):
        return UNKNOWN
    beyond = low > margin if row["direction"] == "lower" else high < -margin
    return WORSE if beyond and p < alpha else NOT_WORSE


# ------------------------------------------------------------------------------ text


def _groups(row: dict[str, Any], check: RegressionCheck) -> str:
    """' [topic=geo]', ' [all rows]' for the overall row of a check by group, '' without."""
    if not check.by:
        return ""
    if row["overall"]:
        return " [all rows]"
    return " [" + ", ".join(f"{g}={group_value(row[g])}" for g in check.by) + "]"


def _group(row: dict[str, Any], column: str) -> str:
    """A group column's cell in the Markdown table ("(all rows)" on the overall row)."""
    return "(all rows)" if row["overall"] else group_value(row[column])


def group_value(value: Any) -> str:
    """A group's value as every view shows it: a null group as "(null)", not "None" in one
    place and an empty cell in another."""
    return NULL_GROUP if value is None else str(value)


def _mark(row: dict[str, Any]) -> str:
    if row["status"] == UNKNOWN and row["ok"]:
        return "⚠️"
    return "✅" if row["ok"] else "❌"


def _label(row: dict[str, Any], check: RegressionCheck) -> str:
    return row["metric"] + _groups(row, check)


def _name(row: dict[str, Any], check: RegressionCheck) -> str:
    """'faithfulness not worse than a by 0.05 [topic=geo]'."""
    by = f" by {check.margin:g}" if check.margin else ""
    return f"{row['metric']} not worse than a{by}" + _groups(row, check)


def _line(row: dict[str, Any], check: RegressionCheck) -> str:
    """'❌ faithfulness: worse: b - a = -0.120, 95% interval [-0.180, -0.060] wholly below
    0 (n=40 pairs, p=0.001)'."""
    mark = _mark(row)
    label, level = _label(row, check), f"{check.level:.0%}"
    lower = row["direction"] == "lower"
    line = -check.margin if not lower else check.margin
    side = "above" if lower else "below"
    facts = [_n(row, check.paired)]
    if row["p_value"] is not None:
        shown = format_p(row["p_value"])
        facts.append(f"p{shown}" if shown.startswith("<") else f"p={shown}")
    if lower:
        facts.append("lower is better")
    facts += _failed(row, check)
    said = f"({'; '.join(facts)})"
    if row["status"] == UNKNOWN:
        return f"{mark} {label}: cannot tell: {_thin(row, check)} {said}"
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


def _failed(row: dict[str, Any], check: RegressionCheck) -> list[str]:
    """The rows that failed to score and how they were counted ('6 rows of b failed to
    score, counted as 0'), or nothing: said beside n wherever the figures are shown, since
    they can decide the verdict."""
    failed, failed_a = row["failed_b"] or 0, row["failed_a"] or 0
    both = not check.paired and failed_a and not check.ignore_failed
    rows = f"{_rows(failed_a)} of a and {failed} of b" if both else f"{_rows(failed)} of b"
    if failed and check.ignore_failed:
        return [f"{rows} failed to score, left out (ignore failed)"]
    if failed or both:
        return [f"{rows} failed to score, counted as {1 if row['direction'] == 'lower' else 0}"]
    return []


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def warn_unknown(check: RegressionCheck) -> None:
    """A `RegressionUnknownWarning` when the check passes while some metric cannot tell,
    pointing at the caller of the public function that calls this."""
    if not check.passed or not check.unknown:
        return
    rows = [r for r in check.table.iter_rows(named=True) if r["status"] == UNKNOWN]
    first = rows[0]
    more = f" (and {len(rows) - 1} more checks)" if len(rows) > 1 else ""
    warnings.warn(
        f"regression check: cannot tell whether b is worse on {_label(first, check)}{more}: "
        f"{_thin(first, check)}; it passed without showing anything either way: add rows, "
        "or pass fail_if_unknown=True to fail on it",
        RegressionUnknownWarning,
        stacklevel=3,
    )


def _thin(row: dict[str, Any], check: RegressionCheck) -> str:
    """Why a row cannot tell: no interval, or too few rows for p to reach 1 - level."""
    level = f"{check.level:.0%}"
    if row["ci_low"] is None or row["ci_high"] is None or row["p_value"] is None:
        need = "2 pairs" if check.paired else "2 scores on each side"
        return f"no interval (needs at least {need})"
    alpha = round(1 - check.level, 12)
    if check.paired:
        need = next(n for n in range(1, 1100) if 2.0 / 2.0**n < alpha)
        return (
            f"n={row['n']} pairs cannot show a difference at {level} (the smallest p "
            f"{row['n']} pairs can give is {format_p(row['min_p'])}; needs at least {need} pairs)"
        )
    return (
        f"n={row['n_a']}/{row['n_b']} scores cannot show a difference at {level} (the "
        f"smallest p they can give is {format_p(row['min_p'])}; needs more scores on each side)"
    )


def _n(row: dict[str, Any], paired: bool) -> str:
    return f"n={row['n']} pairs" if paired else f"n={row['n_a']}/{row['n_b']}"


def _bound(value: float) -> str:
    return "0" if value == 0 else f"{value:+.3f}".rstrip("0").rstrip(".")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:+.3f}, {high:+.3f}]"


def format_p(p: float | None) -> str:
    """A p-value as every view shows it: three decimals as every figure, "<0.001" below (the
    sign-flip test's smallest p, 1 / 10,001, is its resolution, not a measured 1.0e-04); "-"
    for none."""
    if p is None:
        return "-"
    return f"{p:.3f}" if round(p, 3) >= 0.001 else "<0.001"
