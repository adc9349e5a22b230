"""The run summary, in words: per metric its mean with an interval and the rows it rests on.

One table serves the command line (`ragframe score` prints it), `str(result)` and Jupyter
(`result._repr_html_()`), so a number never appears without its n and its interval. The
summary itself is a plain dict (`RunResult.summary()`), written into the output's metadata.
"""

from __future__ import annotations

import html
import math
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ragframe.errors import InputError
from ragframe.metrics.thresholds import Threshold
from ragframe.stats import (
    BOOTSTRAP_MAX_N,
    SCORE_SLACK,
    ExactSum,
    Interval,
    Moments,
    format_interval,
    format_mean,
    interval_from_moments,
    mean_interval,
)

LEVEL = 0.95
LOCAL_WARNING = (
    "note: scored by the embedded local judge (SmolLM2-135M): fine for trying ragframe out, "
    "not for trustworthy scores. Point --base-url/--model at a real judge for that."
)


def metric_summary(
    scores: pl.Series, direction: str, *, rule: Threshold | None = None, level: float = LEVEL
) -> dict[str, Any]:
    """One metric's line: mean, its interval (`ragframe.stats.mean_interval`), rows scored
    and failed (null or NaN scores), direction; with a pass rule, its pass rate too."""
    values = scores.drop_nulls().to_numpy().astype(np.float64, copy=False)
    values = values[~np.isnan(values)]
    interval = mean_interval(values, level)
    line = _line(interval, level, int(values.size), scores.len() - int(values.size), direction)
    if rule is not None:
        line.update(pass_line(rule, interval.mean, count_passing(rule, values), int(values.size)))
    return line


def _line(
    interval: Interval, level: float, scored: int, failed: int, direction: str
) -> dict[str, Any]:
    """A metric's summary line without its pass figures: the mean, its interval, the rows."""
    return {
        "mean": interval.mean,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "level": level,
        "interval_method": interval.method,
        "scored": scored,
        "failed": failed,
        "direction": direction,
    }


def count_passing(rule: Threshold, values: np.ndarray) -> int:
    """How many of the scores (no nulls) pass the rule."""
    return int(pl.DataFrame({"s": values}).select(rule.passes(pl.col("s")).sum()).item())


def pass_line(rule: Threshold, mean: float | None, passed: int, scored: int) -> dict[str, Any]:
    """The pass figures of a metric with a threshold: `status`, deepeval's ✅ / ❌, is whether
    the mean meets the threshold (shown beside the mean by `mean_mark`, never beside the pass
    rate); the pass rate is over the rows scored (rows that failed to score are counted apart,
    in `failed`) and gets no mark."""
    meets = rule.mean_passes(mean)
    return {
        "threshold": rule.value,
        "strict": rule.strict,
        "passed": passed,
        "pass_rate": passed / scored if scored else None,
        "status": None if meets is None else ("✅" if meets else "❌"),
    }


#: Kept for callers that named it; a streamed run keeps no scores (see `Tally`).
KEPT_SCORES = BOOTSTRAP_MAX_N


@dataclass
class Tally:
    """One metric's scores, folded chunk by chunk in bounded memory (a streamed run): their
    count, exact sum and sum of squares (`ragframe.stats.ExactSum`), minimum and maximum, which
    is all `ragframe.stats.interval_from_moments` reads. The summary is therefore the one
    `metric_summary` gives for the same scores in memory, bit for bit, at any n and however
    the scores were chunked or ordered. `kept` stays empty (no scores are kept)."""

    direction: str
    rule: Threshold | None = None
    scored: int = 0
    passed: int = 0
    failed: int = 0
    total: ExactSum = field(default_factory=ExactSum)
    squares: ExactSum = field(default_factory=ExactSum)
    minimum: float = math.inf
    maximum: float = -math.inf
    kept: list[np.ndarray] = field(default_factory=list)

    def add(self, scores: pl.Series) -> None:
        # A Float64 score column reads nulls as NaN, dropped below with no Polars query.
        kept = scores if scores.dtype == pl.Float64 else scores.drop_nulls()
        values = kept.to_numpy().astype(np.float64, copy=False)
        values = values[~np.isnan(values)]
        # As mean_interval reads them: NaN dropped, rounding past a bound clipped, -0.0 is 0.0,
        # and a score further outside [0, 1] refused (never clipped into a mean it is not).
        outside = int(np.count_nonzero((values < -SCORE_SLACK) | (values > 1.0 + SCORE_SLACK)))
        if outside:
            raise InputError(
                f"{outside} of {values.size} scores lie outside [0, 1]; a metric's score must "
                "lie in [0, 1] (the engine leaves such a score null with the reason)"
            )
        values = np.clip(values, 0.0, 1.0) + 0.0
        self.failed += scores.len() - int(values.size)
        if not values.size:
            return
        self.scored += int(values.size)
        if self.rule is not None:
            self.passed += count_passing(self.rule, values)
        self.total.add(values)
        self.squares.add(np.square(values))
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))

    def merge(self, other: Tally) -> None:
        """Fold another tally of the same metric into this one (a partition's into a run's)."""
        self.scored += other.scored
        self.passed += other.passed
        self.failed += other.failed
        self.total += other.total
        self.squares += other.squares
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)

    def summary(self, level: float = LEVEL) -> dict[str, Any]:
        moments = Moments(
            self.scored, float(self.total), float(self.squares), self.minimum, self.maximum
        )
        interval = interval_from_moments(moments, level=level)
        line = _line(interval, level, self.scored, self.failed, self.direction)
        if self.rule is not None:
            line.update(pass_line(self.rule, interval.mean, self.passed, self.scored))
        return line


def cut_rows(frame: pl.DataFrame, details: list[str]) -> dict[str, Any]:
    """The rows whose texts were cut to `Judge.max_text_chars` before judging, read from the
    details' `inputs_cut` (`ragframe.engine.prepare.CUT_FIELD`): {"rows": n, "by_input":
    {input: rows}}; {} when no text was cut."""
    from ragframe.engine.prepare import CUT_FIELD

    present = [
        d
        for d in details
        if isinstance(frame.schema.get(d), pl.Struct)
        and CUT_FIELD in {f.name for f in frame.schema[d].fields}  # type: ignore[union-attr]
    ]
    if not present:
        return {}
    cut = pl.concat_list([pl.col(d).struct.field(CUT_FIELD) for d in present]).list.unique()
    lists = frame.select(cut.alias("cut")).get_column("cut")
    rows = int((lists.list.len() > 0).sum())
    if not rows:
        return {}
    counts = lists.explode().drop_nulls().value_counts()
    by_input = {str(name): int(n) for name, n in sorted(counts.iter_rows())}
    return {"rows": rows, "by_input": by_input}


def add_cut(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two `cut_rows` counts of distinct rows (chunks, partitions) added up."""
    if not more:
        return total
    if not total:
        return {"rows": more["rows"], "by_input": dict(more["by_input"])}
    by_input = dict(total["by_input"])
    for name, n in more["by_input"].items():
        by_input[name] = by_input.get(name, 0) + n
    return {"rows": total["rows"] + more["rows"], "by_input": dict(sorted(by_input.items()))}


def cut_line(summary: dict[str, Any]) -> str | None:
    """The summary's line (also printed on stderr) when texts were cut before judging."""
    cut = summary.get("inputs_cut")
    if not cut:
        return None
    which = ", ".join(f"{name} {n}" for name, n in cut["by_input"].items())
    rows = f"{cut['rows']} row{'' if cut['rows'] == 1 else 's'}"
    return (
        f"texts cut before judging: {rows} ({which}) had a text longer than "
        f"{cut['max_text_chars']:,} characters, judged on its first {cut['max_text_chars']:,} "
        "only ({metric}_detail.inputs_cut names them); raise --max-text-chars "
        "(Judge(max_text_chars=)) to judge them whole"
    )


#: What a summary's marks judge, said under every table that shows them: the mark sits in its
#: own column, beside the mean it judges, never beside the pass rate (which has no target here).
MARK_LEGEND = (
    "mean vs threshold: ✅ the mean meets the metric's threshold, ❌ it does not. pass rate: "
    "the share of scored rows that meet it on their own; no mark (a gate sets it a target)"
)


def mean_mark(
    status: str | None, threshold: float | None, strict: bool | None, direction: str | None
) -> str:
    """'✅ ≥ 0.7', '❌ < 0.7', '✅ ≤ 0.3', '❌ > 0.3', '✅ = 1 (strict)', '❌ < 1 (strict)':
    a summary's mark (`status`, the mean against the threshold) with the comparison it made,
    so it cannot be read as the pass rate's; '-' without a threshold or a mean."""
    if status not in ("✅", "❌") or threshold is None:
        return "-"
    ok = status == "✅"
    lower = direction == "lower"
    if strict:
        relation = "=" if ok else (">" if lower else "<")
        return f"{status} {relation} {0 if lower else 1} (strict)"
    relation = ("≤" if ok else ">") if lower else ("≥" if ok else "<")
    return f"{status} {relation} {threshold:g}"


def pass_rate_cell(rate: float | None, passed: int | None, scored: int | None) -> str:
    """'47.4% (65 of 137)': the share of scored rows that pass, and the counts it rests on;
    '-' without a rate."""
    if rate is None or (isinstance(rate, float) and math.isnan(rate)):
        return "-"
    if passed is None or scored is None:
        return f"{rate:.1%}"
    return f"{rate:.1%} ({passed} of {scored})"


def better_cell(direction: str | None) -> str:
    """'↑ higher', '↓ lower', or '?' when the direction is unknown."""
    return {"higher": "↑ higher", "lower": "↓ lower"}.get(direction or "", "?")


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide characters (✅, ❌, CJK) take two, so a column of
    marks stays aligned with one of dashes."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def text_table(headers: list[str], rows: list[list[str]], right: set[str]) -> list[str]:
    """Aligned lines: the header, a rule, a line per row; columns named in `right` (numbers)
    right-aligned, by display width (`display_width`)."""
    widths = [
        max([display_width(h), *(display_width(r[i]) for r in rows)]) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        padded = []
        for cell, width, header in zip(cells, widths, headers, strict=True):
            pad = " " * (width - display_width(cell))
            padded.append(pad + cell if header in right else cell + pad)
        return "  ".join(padded).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def html_table(headers: list[str], rows: list[list[str]], right: set[str]) -> str:
    """The same table as `text_table`, as an HTML <table>: cells escaped, numbers
    right-aligned in tabular figures, no cell wrapped (a mean never splits from its interval).
    Inline styles only, so it reads the same in Jupyter, VS Code and a saved page."""

    def cell(tag: str, text: str, header: str) -> str:
        align = "right" if header in right else "left"
        rule = "border-bottom:1px solid currentColor;" if tag == "th" else ""
        style = f"text-align:{align};padding:2px 10px;white-space:nowrap;{rule}"
        return f"<{tag} style='{style}'>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", h, h) for h in headers)
    body = "".join(
        "<tr>" + "".join(cell("td", c, h) for c, h in zip(r, headers, strict=True)) + "</tr>"
        for r in rows
    )
    style = "border-collapse:collapse;font-variant-numeric:tabular-nums"
    return f"<table style='{style}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_notes(notes: list[str], *, muted: int = 0) -> str:
    """Lines under a table as compact paragraphs; the last `muted` ones dimmed."""
    out = []
    for i, note in enumerate(notes):
        dim = "opacity:0.7;" if i >= len(notes) - muted else ""
        out.append(f"<p style='margin:4px 0;{dim}'>{html.escape(note)}</p>")
    return "".join(out)


def _number(value: float | None) -> str:
    return format_mean(value)


def _interval(m: dict[str, Any]) -> str:
    return format_interval(m.get("ci_low"), m.get("ci_high"))


def _level(summary: dict[str, Any]) -> float:
    levels = [m.get("level") for m in summary["metrics"].values() if m.get("level")]
    return float(levels[0]) if levels else LEVEL


def sample_line(summary: dict[str, Any]) -> str | None:
    """ "from a sample of N of M rows", when the run scored a sample of a log."""
    sample = summary.get("sample")
    if not sample:
        return None
    if sample["rows"] >= sample["of"]:
        return f"every row of the log ({sample['of']} rows): sample size >= the log's rows"
    return (
        f"from a uniform random sample of {sample['rows']} of the log's {sample['of']} rows "
        f"(seed {sample['seed']}); the intervals are for the whole log's means"
    )


def _metric_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The run summary's table, as both renderings show it: per metric its direction, rows
    scored and failed, the mean and its interval, then (when some metric has a threshold) the
    mark of that mean against the threshold beside it, and the pass rate with its counts."""
    metrics = summary["metrics"]
    rates = any(m.get("threshold") is not None for m in metrics.values())
    pct = f"{_level(summary):.0%} interval"
    headers = ["metric", "better", "scored", "failed", "mean", pct]
    if rates:
        headers += ["mean vs threshold", "pass rate"]
    rows = []
    for name, m in metrics.items():
        cells = [
            name,
            better_cell(m.get("direction")),
            str(m["scored"]),
            str(m["failed"]),
            _number(m["mean"]),
            _interval(m),
        ]
        if rates:
            cells += [
                mean_mark(m.get("status"), m.get("threshold"), m.get("strict"), m["direction"]),
                pass_rate_cell(m.get("pass_rate"), m.get("passed"), m["scored"]),
            ]
        rows.append(cells)
    return headers, rows


#: The run summary's columns that hold numbers (right-aligned).
_NUMBERS = {"scored", "failed", "mean", "pass rate"}


def _reused_part(summary: dict[str, Any]) -> str:
    """The metric rows whose columns came whole from an earlier run (`engine.reuse`), if any."""
    reused = summary.get("reused") or 0
    return f", {reused} metric rows reused as scored before" if reused else ""


def _footer(summary: dict[str, Any], local: bool, sep: str) -> list[str]:
    """The lines under both tables: the sample, the run's rows, requests, tokens and time
    (joined by `sep`), what went wrong or cost something, and the local judge's warning."""
    sampled = sample_line(summary)
    totals = sep.join(
        (
            f"rows {summary['rows']}",
            f"requests {summary['requests']} (cache hits {summary['cache_hits']}, "
            f"deduplicated {summary['deduplicated']}{_reused_part(summary)})",
            f"tokens {summary['prompt_tokens']} prompt + {summary['completion_tokens']} completion"
            + _cached_part(summary),
            f"{summary['seconds']:.1f} s",
        )
    )
    answered = judge_line(summary)
    return [
        *([sampled] if sampled else []),
        *([answered] if answered else []),
        totals,
        *run_notes(summary),
        *([LOCAL_WARNING] if local else []),
    ]


def _cached_part(summary: dict[str, Any]) -> str:
    """ ", 1024 of the prompt cached by the provider": the prompt tokens the provider reported
    taking from its prompt cache (billed at a discount), when there are any."""
    cached = summary.get("cached_prompt_tokens") or 0
    return f", {cached} of the prompt cached by the provider" if cached else ""


def _cost_line(summary: dict[str, Any]) -> str:
    """The cost, and what the provider's prompt cache did to it: the saving at its cached
    rate, or that cached tokens were billed at the full prompt rate (no cached rate known)."""
    line = f"cost ${summary['cost_usd']:.4f} (requests sent in this run"
    cached = summary.get("cached_prompt_tokens") or 0
    saving = summary.get("cached_saving_usd")
    if cached and saving is not None:
        line += f"; {cached} cached prompt tokens at the cached rate saved ${saving:.4f}"
    elif cached:
        line += (
            f"; {cached} cached prompt tokens billed at the full prompt rate: no cached rate "
            "is known for this price, so the saving is not counted"
        )
    return line + ")"


def judge_line(summary: dict[str, Any]) -> str | None:
    """ "judge MODEL at HOST": the judge that answered (a jury names its judges itself)."""
    judge = summary.get("judge")
    if not judge or summary.get("jury"):
        return None
    where = "this machine (the embedded judge)" if judge["endpoint_host"] == "local" else None
    return f"judge {judge['model']} at {where or judge['endpoint_host']}"


def format_summary(summary: dict[str, Any], local: bool) -> str:
    """A plain-text table: one line per metric (the mark of its mean against its threshold
    beside the mean, and what the mark judges said under the table), then the run's requests
    and tokens."""
    headers, rows = _metric_table(summary)
    lines = text_table(headers, rows, _NUMBERS)
    if "pass rate" in headers:
        lines.append(MARK_LEGEND)
    lines.append("")
    lines.extend(_footer(summary, local, "  |  "))
    return "\n".join(lines)


def run_notes(summary: dict[str, Any]) -> list[str]:
    """The summary's lines about what went wrong or cost something; none for a clean run."""
    lines = []
    if summary.get("repeats"):
        from ragframe.engine.repeats import format_repeats

        lines.extend(format_repeats(summary["repeats"]))
    if summary.get("jury"):
        from ragframe.engine.jury_text import format_jury

        lines.extend(format_jury(summary["jury"]))
    cut = cut_line(summary)
    if cut:
        lines.append(cut)
    if summary.get("skipped_metrics"):
        from ragframe.metrics.catalog import left_out_line

        lines.append(left_out_line(summary["skipped_metrics"], "skipped"))
    if summary.get("cost_usd") is not None:
        lines.append(_cost_line(summary))
    if summary.get("retries"):
        lines.append(f"retries by cause: {_by_cause(summary['retries'])}")
    if summary.get("remembered_failures"):
        lines.append(
            f"remembered failures (not sent again; --retry-failed sends them): "
            f"{summary['remembered_failures']}"
        )
    if summary.get("failures"):
        lines.append(f"failed requests by cause: {_by_cause(summary['failures'])}")
    if summary.get("kept_failures"):
        lines.append(
            f"failed requests a plain rerun will not send again: {summary['kept_failures']} "
            "(answers cut off at max_tokens, remembered; --retry-failed sends them)"
        )
    for change in summary.get("structured_downgrades") or []:
        reason = " ".join(str(change["reason"]).split())[:160]
        lines.append(
            f"structured output downgraded for the run: {change['from']} -> {change['to']} "
            f"({reason})"
        )
    if summary.get("rate_limit_pauses"):
        lines.append(
            f"rate limited: the pool paused {summary['rate_limit_pauses']} times, "
            f"{summary['rate_limit_paused_s']:.1f} s in all"
        )
    if summary.get("embedding_texts_cut"):
        lines.append(
            f"embedding texts cut to the embedding model's limit: {summary['embedding_texts_cut']}"
        )
    return lines


def _by_cause(counts: dict[str, int]) -> str:
    """`429 2, timeout 1`: counts by cause, in the summary's order."""
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def summary_html(summary: dict[str, Any], local: bool) -> str:
    """The same table as `format_summary`, as HTML for Jupyter."""
    headers, rows = _metric_table(summary)
    notes = [MARK_LEGEND] if "pass rate" in headers else []
    notes += [n for n in _footer(summary, local, " · ") if n]
    table = html_table(headers, rows, _NUMBERS)
    return f"<div class='ragframe-summary'>{table}{html_notes(notes)}</div>"
