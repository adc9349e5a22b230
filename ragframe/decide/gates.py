"""Gates for CI: may this build ship? Checks a scored log against minimum means and pass rates,
with no request sent, and says what fell short and why (the worst rows with their reasons).

Two gates per metric, each optional:

- `fail_under={"faithfulness": 0.8}`: the metric's **mean** must meet the value. For a
  higher-is-better metric the mean must be >= the value (it fails under it); for a
  lower-is-better one (hallucination) the mean must be <= the value (it fails *above* it):
  the value is always the worst mean the gate accepts.
- `min_pass_rate={"faithfulness": 0.9}`: the share of rows that **pass** (each row judged by the
  metric's threshold and strict mode, `ragframe.metrics.thresholds.Threshold`) must be >= the value.
  The threshold, first found: `thresholds=` / `strict=` given here, the threshold the file's
  metadata records, the file's own Boolean `{metric}_pass` column (used as written), and
  DEFAULT_THRESHOLD (0.5).

A gate never passes by accident:

- A row that failed to score (null score, the reason in its `_detail.error`) counts against
  the gate: as a failing row in the pass rate (the rate is passed / all rows), and as the worst
  score in the mean (0, or 1 for a lower-is-better metric). `ignore_failed=True` leaves such
  rows out of both instead (the rate is passed / scored rows, the mean over scored rows); the
  table shows how many there were either way.
- A gate on a metric with no scored row fails ("no row scored"), whatever `ignore_failed`.
- A gate on a metric the log does not have is a ConfigError naming the log's metrics.

Means and rates are compared after rounding to 9 decimals, so 4 of 5 rows (0.8 up to float
rounding) meet a 0.8 gate. The mean's interval (`ragframe.stats.mean_interval`) is over the
same values the gate judges (failed rows as the worst score unless ignored); it is shown so a
reader sees how far from the line the mean could be, and does not change the verdict.
"""

from __future__ import annotations

import ast
import html
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from ragframe.decide.ci_files import Case, CiFiles, markdown_cell, markdown_table
from ragframe.decide.summarize import (
    PassRule,
    checked_scores,
    direction_of,
    first_non_number,
    load_scored,
    pass_rules,
    score_columns,
    score_values,
)
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import StorageOptions
from ragframe.metrics.thresholds import Threshold, check_threshold
from ragframe.stats import DECIMALS, format_interval, mean_interval

#: Exit status of `ragframe gate` (and `ragframe score` with gates) when a gate failed.
EXIT_GATE_FAILED = 1

#: Verdict strings that count against a score (answer_relevancy_llm's "no", correctness' "FP").
NEGATIVE_VERDICTS = frozenset({"no", "false", "fp", "fn", "unsupported", "irrelevant"})
#: Characters of one row's reasons in the table (the full detail stays in the file).
REASON_CHARS = 300
_DECIMALS = 9
_ROW = "\0row"

__all__ = ["EXIT_GATE_FAILED", "GateResult", "assert_scores", "check_gates", "row_reasons"]


@dataclass(frozen=True)
class GateResult(CiFiles):
    """What the gates found. `table`: one row per gate (metric, gate "mean" | "pass rate",
    direction, value, required, n, scored, failed, ci_low / ci_high for a mean, threshold /
    strict / rule / passed for a pass rate, ok, note). `worst`: per failing gate, its worst
    rows (row position, `id`, score, pass, and `why`: the detail's error or the reasons of
    its negative verdicts). `seconds`: how long the check took.

    For CI: `write(junit=, json=, markdown=)` writes the JUnit XML (a test case per gate),
    the JSON (`to_dict`) and the Markdown summary (`to_markdown`), passed or not."""

    table: pl.DataFrame
    worst: pl.DataFrame
    source: str
    level: float
    ignore_failed: bool
    id_column: str | None = None
    seconds: float = 0.0
    suite = "ragframe gates"

    @property
    def passed(self) -> bool:
        """True when every gate passed."""
        return bool(self.table["ok"].all())

    @property
    def failed(self) -> int:
        """How many gates failed."""
        return int((~self.table["ok"]).sum())

    def __str__(self) -> str:
        lines = [f"gates on {self.source}:"]
        for row in self.table.iter_rows(named=True):
            lines.append(_gate_line(row, self.level, self.ignore_failed))
            if not row["ok"]:
                lines += self._worst_lines(row["metric"], row["gate"])
        total = self.table.height
        if self.passed:
            lines.append(f"gates passed ({total} of {total})")
        else:
            lines.append(f"{self.failed} gate{'s' if self.failed != 1 else ''} failed (of {total})")
        return "\n".join(lines)

    def _worst_lines(self, metric: str, gate: str) -> list[str]:
        rows = self.worst.filter((pl.col("metric") == metric) & (pl.col("gate") == gate))
        if rows.is_empty():
            return []
        out = ["    worst rows:"]
        for r in rows.iter_rows(named=True):
            key = f" ({self.id_column} {r['id']})" if self.id_column and r["id"] is not None else ""
            score = "no score" if r["score"] is None else f"{r['score']:.3f}"
            why = f" - {r['why']}" if r["why"] else ""
            out.append(f"      row {r['row']}{key}: {score}{why}")
        return out

    def _worst_of(self, metric: str, gate: str) -> list[dict[str, Any]]:
        rows = self.worst.filter((pl.col("metric") == metric) & (pl.col("gate") == gate))
        return rows.drop("metric", "gate").to_dicts()

    def cases(self) -> list[Case]:
        """One JUnit test case per gate ("faithfulness mean >= 0.8"); a failed one carries
        its line (the figure, n, the interval) and its worst rows (id, score, reason)."""
        out = []
        for row in self.table.iter_rows(named=True):
            head, notes = _gate_parts(row, self.level, self.ignore_failed)
            message = f"{head[2:]} ({notes})"  # without the mark
            text = "\n".join([message, *self._worst_lines(row["metric"], row["gate"])])
            out.append(
                Case(
                    classname=f"ragframe.gate.{row['metric']}",
                    name=_gate_name(row),
                    ok=bool(row["ok"]),
                    message=message,
                    text=text + "\n",
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`ragframe gate --json FILE`): `passed`, `gates` / `failed` (counts),
        `source` (the path as given, or "the frame"), `level`, `ignore_failed`, `id_column`,
        and `results`: each gate's row of `table` (its keys as documented there, plus `name`;
        the table's `passed`, a count of rows, as `passing_rows`, so it is never read as the
        top-level Boolean `passed`) with its `worst` rows (row, id, score, pass, why; empty
        for a gate that passed)."""
        results = [
            {
                "name": _gate_name(row),
                **{("passing_rows" if k == "passed" else k): v for k, v in row.items()},
                "worst": self._worst_of(row["metric"], row["gate"]) if not row["ok"] else [],
            }
            for row in self.table.iter_rows(named=True)
        ]
        return {
            "version": 1,
            "passed": self.passed,
            "gates": self.table.height,
            "failed": self.failed,
            "source": plain_source(self.source),
            "level": self.level,
            "ignore_failed": self.ignore_failed,
            "id_column": self.id_column,
            "results": results,
        }

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown summary (for `$GITHUB_STEP_SUMMARY`): one row per gate
        with ✅ / ❌, the figure, what it required and the interval; then the worst rows of each
        failing gate. Every cell escaped, so a reason with `|` or a newline never breaks it."""
        total = self.table.height
        verdict = (
            f"✅ {total} of {total} gates passed"
            if self.passed
            else f"❌ {self.failed} of {total} gates failed"
        )
        lines = [f"### ragframe gates: {verdict}", "", f"On {markdown_cell(self.source)}.", ""]
        rows = []
        for row in self.table.iter_rows(named=True):
            rate = row["gate"] == "pass rate"
            higher = rate or row["direction"] == "higher"
            value, required = row["value"], row["required"]
            shown = "-" if value is None else _number(value, required, rate)
            needed = _number(required, required if value is None else value, rate)
            interval = format_interval(row["ci_low"], row["ci_high"]) if not rate else "-"
            said = _gate_parts(row, self.level, self.ignore_failed)[1].split("; ")
            notes = "; ".join(p for p in said if not p.startswith("n=") and "interval" not in p)
            mark = "✅" if row["ok"] else "❌"
            needed = ("≥ " if higher else "≤ ") + needed
            rows.append(
                [mark, row["metric"], row["gate"], shown, needed, interval, row["n"], notes]
            )
        header = ["", "metric", "gate", "value", "required", f"{self.level:.0%} interval"]
        lines += markdown_table([*header, "n", "notes"], rows)
        key = self.id_column or "id"
        for row in self.table.filter(~pl.col("ok")).iter_rows(named=True):
            worst = self._worst_of(row["metric"], row["gate"])
            if not worst:
                continue
            lines += ["", f"#### ❌ {_gate_name(row)}: worst rows", ""]
            lines += markdown_table(
                ["row", key, "score", "why"],
                [
                    [
                        w["row"],
                        "-" if w["id"] is None else w["id"],
                        "no score" if w["score"] is None else f"{w['score']:.3f}",
                        w["why"] or "",
                    ]
                    for w in worst
                ],
            )
        return "\n".join(lines) + "\n"

    def _seconds(self) -> float:
        return self.seconds

    def _properties(self) -> dict[str, Any]:
        return {
            "source": plain_source(self.source),
            "level": self.level,
            "ignore_failed": self.ignore_failed,
        }

    def _repr_html_(self) -> str:
        head = "".join(
            f"<th>{h}</th>" for h in ("", "metric", "gate", "value", "required", "n", "detail")
        )
        body = []
        for row in self.table.iter_rows(named=True):
            detail = html.escape(_gate_parts(row, self.level, self.ignore_failed)[1])
            value = "-" if row["value"] is None else f"{row['value']:.3f}"
            cells = [
                "✅" if row["ok"] else "❌",
                html.escape(row["metric"]),
                row["gate"],
                value,
                f"{row['required']:g}",
                str(row["n"]),
                detail,
            ]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            worst = self._worst_lines(row["metric"], row["gate"]) if not row["ok"] else []
            if worst:
                items = "".join(f"<li>{html.escape(w.strip())}</li>" for w in worst[1:])
                body.append(
                    f'<tr><td></td><td colspan="6"><details><summary>worst rows</summary>'
                    f"<ul>{items}</ul></details></td></tr>"
                )
        verdict = (
            "gates passed" if self.passed else f"{self.failed} of {self.table.height} gates failed"
        )
        return (
            f"<div><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"<p><b>{verdict}</b> ({html.escape(self.source)})</p></div>"
        )


def check_gates(
    scored: Any,
    *,
    fail_under: Mapping[str, float] | None = None,
    min_pass_rate: Mapping[str, float] | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] | None = None,
    ignore_failed: bool = False,
    worst: int = 5,
    level: float = 0.95,
    storage_options: StorageOptions | None = None,
) -> GateResult:
    """Check a scored log against its gates (module docstring: the rules); nothing is sent.

    `scored`: a polars DataFrame or LazyFrame, a pandas DataFrame (a named index, such as the
    row id, kept as columns), `ragframe.run`'s result, or the path of a scored Parquet file
    (only the gated columns are read, and the details of the worst rows), local or a URL
    (`s3://...`) read with `storage_options` (Polars' options for the store; else its
    environment variables).
    `worst`: rows listed per failing gate. Raises ConfigError for no gate, a bad value, or a
    metric the log lacks.
    """
    started = time.perf_counter()
    gates = _gates(fail_under, min_pass_rate)
    _check_options(worst, level)
    lazy, meta, where = load_scored(scored, storage_options=storage_options)
    try:
        schema = lazy.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc
    strict_names = [strict] if isinstance(strict, str) else list(strict or ())
    _check_metrics(
        [m for m, _, _ in gates], [*(thresholds or {}), *strict_names], lazy, schema, meta, where
    )
    rated = list(dict.fromkeys(m for m, kind, _ in gates if kind == "pass rate"))
    rules = pass_rules(
        rated,
        schema,
        meta,
        thresholds={m: v for m, v in (thresholds or {}).items() if m in rated},
        strict=[m for m in strict_names if m in rated],
        default=True,
    )
    id_column = next((c for c in ("id", "row_index") if c in schema and _key_like(schema[c])), None)
    gated = list(dict.fromkeys(m for m, _, _ in gates))
    frame = _gated_frame(lazy, gated, rules, id_column, where)
    directions = {m: direction_of(m, meta) for m in gated}
    rows = [
        _mean_gate(frame[m], required, directions[m], ignore_failed, level)
        if kind == "mean"
        else _rate_gate(frame, rules[m], required, ignore_failed)
        for m, kind, required in gates
    ]
    table = pl.DataFrame(rows, schema=TABLE_SCHEMA)
    failing = {(r["metric"], r["gate"]): r["required"] for r in rows if not r["ok"]}
    found = _worst_rows(lazy, schema, frame, failing, directions, ignore_failed, worst)
    seconds = time.perf_counter() - started
    return GateResult(table, found, where, level, ignore_failed, id_column, seconds)


def assert_scores(
    scored: Any,
    *,
    min_pass_rate: Mapping[str, float] | None = None,
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] | None = None,
    ignore_failed: bool = False,
    storage_options: StorageOptions | None = None,
    **fail_under: float,
) -> GateResult:
    """For pytest: `assert_scores(scored, faithfulness=0.8)` gates each named metric's mean
    (`fail_under`), `min_pass_rate=` its pass rate; raises AssertionError whose message is the
    gate table (with the worst rows) when a gate fails, returns the GateResult otherwise.
    `scored` and `storage_options` as for `check_gates`."""
    result = check_gates(
        scored,
        fail_under=fail_under,
        min_pass_rate=min_pass_rate,
        thresholds=thresholds,
        strict=strict,
        ignore_failed=ignore_failed,
        storage_options=storage_options,
    )
    if not result.passed:
        raise AssertionError(str(result))
    return result


# ------------------------------------------------------------------------------ the gates

TABLE_SCHEMA: dict[str, Any] = {
    "metric": pl.String,
    "gate": pl.String,
    "direction": pl.String,
    "value": pl.Float64,
    "required": pl.Float64,
    "n": pl.Int64,
    "scored": pl.Int64,
    "failed": pl.Int64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "threshold": pl.Float64,
    "strict": pl.Boolean,
    "rule": pl.String,
    "passed": pl.Int64,
    "ok": pl.Boolean,
    "note": pl.String,
}


def plain_source(source: str) -> str:
    """The source as a file would name it: a path that messages quote (`'out.parquet'`,
    Python's repr, as `load_scored` says it) unquoted; "the frame" as it is."""
    if len(source) >= 2 and source[0] == source[-1] and source[0] in "'\"":
        try:
            value = ast.literal_eval(source)
        except (ValueError, SyntaxError):
            return source
        return value if isinstance(value, str) else source
    return source


def _check_options(worst: int, level: float) -> None:
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise ConfigError(f"worst must be a non-negative number of rows, not {worst!r}")
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ConfigError(f"level must be between 0 and 1 (e.g. 0.95), not {level!r}")


def _gated_frame(
    lazy: pl.LazyFrame,
    gated: list[str],
    rules: Mapping[str, PassRule],
    id_column: str | None,
    where: str,
) -> pl.DataFrame:
    """The gated scores as floats, each pass rule's verdict and the row ids, read at once; a
    value that is no score (7.5, "high") is refused, never gated."""
    exprs = [
        *(score_values(m) for m in gated),
        *(rule.expr().alias(f"{m}\0pass") for m, rule in rules.items()),
        *([pl.col(id_column).cast(pl.String).alias("\0id")] if id_column else []),
    ]
    return checked_scores(lazy, exprs, gated, where)


def _gates(
    fail_under: Mapping[str, float] | None, min_pass_rate: Mapping[str, float] | None
) -> list[tuple[str, str, float]]:
    """(metric, "mean" | "pass rate", required) for every gate asked, values checked."""
    gates = [
        (m, "mean", check_threshold(v, f"fail_under {m!r}")) for m, v in (fail_under or {}).items()
    ]
    gates += [
        (m, "pass rate", check_threshold(v, f"min_pass_rate {m!r}"))
        for m, v in (min_pass_rate or {}).items()
    ]
    if not gates:
        raise ConfigError(
            "no gate given: name at least one, e.g. fail_under={'faithfulness': 0.8} or "
            "min_pass_rate={'faithfulness': 0.9} (CLI: --fail-under faithfulness=0.8)"
        )
    return gates


def _check_metrics(
    gated: list[str],
    named: list[str],
    lazy: pl.LazyFrame,
    schema: pl.Schema,
    meta: Mapping[str, Any],
    where: str,
) -> None:
    """Every gated metric, and every metric a threshold names, is a score column of the log."""
    metrics = score_columns(schema, meta)
    for name in dict.fromkeys([*gated, *named]):
        if name not in schema:
            raise ConfigError(
                f"a gate or threshold names {name!r}, which {where} does not have; its metrics "
                f"are {metrics} (score the metric first, or fix the name)"
            )
        if not schema[name].is_numeric():
            text = first_non_number(lazy, name)
            raise ConfigError(
                f"{name!r} in {where} is {schema[name]}, not scores{text}; its metrics are "
                f"{metrics}"
            )


def _key_like(dtype: pl.DataType) -> bool:
    """A column that can name a row in the table (text or integers, not lists)."""
    return dtype == pl.String or dtype.is_integer()


def _base_row(
    metric: str, gate: str, direction: str, required: float, score: pl.Series
) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(TABLE_SCHEMA)
    scored = int(score.count())
    row.update(
        metric=metric,
        gate=gate,
        direction=direction,
        required=required,
        n=score.len(),
        scored=scored,
        failed=score.len() - scored,
    )
    return row


def _mean_gate(
    score: pl.Series, required: float, direction: str, ignore_failed: bool, level: float
) -> dict[str, Any]:
    """The mean gate: failed rows as the worst score unless ignored."""
    row = _base_row(score.name, "mean", direction, required, score)
    if row["scored"] == 0:
        return {**row, "ok": False, "note": "no row scored"}
    values = score if ignore_failed else score.fill_null(0.0 if direction == "higher" else 1.0)
    interval = mean_interval(values, level, bounds=(0.0, 1.0))  # _gated_frame refused the rest
    assert interval.mean is not None
    rule = Threshold(required, False, direction)  # type: ignore[arg-type]
    ok = bool(rule.mean_passes(round(interval.mean, _DECIMALS)))
    return {
        **row,
        "value": interval.mean,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "ok": ok,
    }


def _rate_gate(
    frame: pl.DataFrame, rule: PassRule, required: float, ignore_failed: bool
) -> dict[str, Any]:
    """The pass-rate gate: passed / all rows (failed rows fail), or / rows with a verdict."""
    m = rule.metric
    row = _base_row(m, "pass rate", rule.direction, required, frame[m])
    passes = frame[f"{m}\0pass"]
    passed = int(passes.sum())
    row.update(
        threshold=rule.threshold.value if rule.threshold else None,
        strict=rule.threshold.strict if rule.threshold else None,
        rule=rule.describe(),
        passed=passed,
    )
    denominator = int(passes.count()) if ignore_failed else passes.len()
    if row["scored"] == 0 or denominator == 0:
        return {**row, "ok": False, "note": "no row scored"}
    rate = passed / denominator
    ok = bool(Threshold(required).mean_passes(round(rate, _DECIMALS)))
    return {**row, "value": rate, "ok": ok}


# ------------------------------------------------------------------------------ worst rows

WORST_SCHEMA: dict[str, Any] = {
    "metric": pl.String,
    "gate": pl.String,
    "row": pl.Int64,
    "id": pl.String,
    "score": pl.Float64,
    "pass": pl.Boolean,
    "why": pl.String,
}


def _worst_rows(
    lazy: pl.LazyFrame,
    schema: pl.Schema,
    frame: pl.DataFrame,
    required: Mapping[tuple[str, str], float],
    directions: Mapping[str, str],
    ignore_failed: bool,
    k: int,
) -> pl.DataFrame:
    """Per failing gate (its required value) its k worst rows, worst first: rows that do not
    pass (a pass-rate gate) or score worse than the required mean (a mean gate); a row that
    failed to score first, as it counts as the worst score, unless ignored. With why, from
    the detail column."""
    if not required or k == 0:
        return pl.DataFrame(schema=WORST_SCHEMA)
    indexed = frame.with_row_index(_ROW)
    has_id = "\0id" in frame.columns
    picked = []
    for metric, gate in required:
        higher = directions[metric] == "higher"
        rows = indexed
        badness = pl.col(metric).fill_null(0.0 if higher else 1.0)
        if gate == "pass rate":
            rows = rows.filter(~pl.col(f"{metric}\0pass").fill_null(False))
        else:  # the rows below the line the mean had to reach
            line = required[(metric, gate)]
            rows = rows.filter(badness < line if higher else badness > line)
        if ignore_failed:
            rows = rows.filter(pl.col(metric).is_not_null())
        # the k worst without sorting every row: failed rows, then ascending badness
        # (descending for a lower-is-better metric), ties in row order
        order = [pl.col(metric).is_not_null(), badness if higher else -badness, pl.col(_ROW)]
        rows = rows.bottom_k(k, by=order).sort(order)
        picked.append(
            rows.select(
                pl.lit(metric).alias("metric"),
                pl.lit(gate).alias("gate"),
                pl.col(_ROW).cast(pl.Int64).alias("row"),
                (pl.col("\0id") if has_id else pl.lit(None, pl.String)).alias("id"),
                pl.col(metric).alias("score"),
                (
                    pl.col(f"{metric}\0pass") if gate == "pass rate" else pl.lit(None, pl.Boolean)
                ).alias("pass"),
            )
        )
    found = pl.concat(picked, how="vertical")
    why = _reasons_for(lazy, schema, found, directions)
    return found.with_columns(pl.Series("why", why, pl.String)).select(list(WORST_SCHEMA))


def _reasons_for(
    lazy: pl.LazyFrame, schema: pl.Schema, found: pl.DataFrame, directions: Mapping[str, str]
) -> list[str | None]:
    """The `why` of each listed row, read from the detail columns for those rows only."""
    details = [
        m
        for m in found["metric"].unique(maintain_order=True)
        if isinstance(schema.get(f"{m}_detail"), pl.Struct)
    ]
    if not details:
        return [None] * found.height
    positions = found["row"].unique().to_list()
    try:
        read = (
            lazy.with_row_index(_ROW)
            .filter(pl.col(_ROW).is_in(positions))
            .select(pl.col(_ROW).cast(pl.Int64), *(f"{m}_detail" for m in details))
            .collect()
        )
    except (pl.exceptions.PolarsError, OSError):
        return [None] * found.height  # the verdicts are a help, never a reason to fail
    by_row = {r[_ROW]: r for r in read.iter_rows(named=True)}
    return [
        row_reasons((by_row.get(row) or {}).get(f"{metric}_detail"), directions[metric]) or None
        for metric, row in zip(found["metric"], found["row"], strict=True)
    ]


def row_reasons(detail: Mapping[str, Any] | None, direction: str = "higher") -> str:
    """Why a row scored as it did, from its `_detail` struct, generically: the `error` when it
    failed to score; else its own `reason` field (G-Eval, rubrics) and the reasons of its
    negative verdicts: items of any list-of-struct field that carry a `reason`, negative when
    their Boolean (supported, relevant, covered...) counts against the score (False for a
    higher-is-better metric, True for a lower-is-better one: hallucination's contradicted),
    or their `verdict` string is one of NEGATIVE_VERDICTS. Cut to REASON_CHARS."""
    if not detail:
        return ""
    if detail.get("error"):
        return f"failed to score: {detail['error']}"
    found: list[str] = []
    own = detail.get("reason")
    if isinstance(own, str) and own.strip():
        found.append(own.strip())
    for value in detail.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if isinstance(item, dict) and "reason" in item and _negative(item, direction):
                found.append(_verdict_text(item))
    text = "; ".join(found)
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _negative(item: Mapping[str, Any], direction: str) -> bool:
    for key, value in item.items():
        if isinstance(value, bool):
            return value if direction == "lower" else not value
        if key == "verdict" and isinstance(value, str):
            return value.strip().lower() in NEGATIVE_VERDICTS
    return False


def _verdict_text(item: Mapping[str, Any]) -> str:
    """'"the claim": the reason', or the claim alone when the run kept no reasons."""
    subject = next(
        (v for k, v in item.items() if k != "reason" and isinstance(v, str) and v.strip()), None
    )
    reason = item.get("reason") if isinstance(item.get("reason"), str) else None
    if subject and reason:
        return f'"{_cut(subject, 80)}": {reason.strip()}'
    return reason.strip() if reason else f'"{_cut(subject or "?", 80)}" (no reason recorded)'


def _cut(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


# ------------------------------------------------------------------------------ text


def _number(value: float, other: float, percent: bool) -> str:
    """`value` with enough decimals to differ visibly from `other` when they differ."""
    # Means as every summary prints them (DECIMALS), rates as percentages with one decimal;
    # more only where the figure and its threshold would otherwise read alike.
    for decimals in range(2 if percent else DECIMALS, 8):
        a = f"{value * 100:.{decimals - 1}f}%" if percent else f"{value:.{decimals}f}"
        b = f"{other * 100:.{decimals - 1}f}%" if percent else f"{other:.{decimals}f}"
        if a != b or round(value, _DECIMALS) == round(other, _DECIMALS):
            return a
    return a


def _gate_name(row: Mapping[str, Any]) -> str:
    """The gate as a test's name: 'faithfulness mean >= 0.8', 'hallucination mean <= 0.3'."""
    higher = row["gate"] == "pass rate" or row["direction"] == "higher"
    return f"{row['metric']} {row['gate']} {'>=' if higher else '<='} {row['required']:g}"


def _gate_line(row: Mapping[str, Any], level: float, ignore_failed: bool) -> str:
    """'❌ faithfulness mean 0.62 < 0.80 (n=200; 95% interval [0.57, 0.67]; ...)'."""
    head, notes = _gate_parts(row, level, ignore_failed)
    return f"{head} ({notes})"


def _gate_parts(row: Mapping[str, Any], level: float, ignore_failed: bool) -> tuple[str, str]:
    """The verdict ('❌ faithfulness mean 0.62 < 0.80') and what it rests on."""
    mark = "✅" if row["ok"] else "❌"
    metric, gate, failed = row["metric"], row["gate"], row["failed"]
    rate = gate == "pass rate"
    failed_rows = f"{failed} row{'s' if failed != 1 else ''} failed to score"
    if row["value"] is None:
        return f"{mark} {metric} {gate}: no row scored", f"n={row['n']}; {failed_rows}"
    higher = rate or row["direction"] == "higher"
    sign = ("≥" if higher else "≤") if row["ok"] else ("<" if higher else ">")
    value, required = row["value"], row["required"]
    head = f"{mark} {metric} {gate} {_number(value, required, rate)} {sign} "
    head += _number(required, value, rate)
    notes = [] if higher or rate else ["lower is better"]
    if rate:
        of = row["scored"] if ignore_failed else row["n"]
        notes.append(f"{row['passed']} of {of} rows pass {row['rule']}")
    else:
        notes.append(f"n={row['n']}")
        if row["ci_low"] is not None:
            notes.append(f"{level:.0%} interval {format_interval(row['ci_low'], row['ci_high'])}")
    if failed:
        counted = "as failing" if rate else f"as {0 if higher else 1}"
        notes.append(f"{failed_rows}, {'left out' if ignore_failed else 'counted ' + counted}")
    return head, "; ".join(notes)
