"""`ragframe.report`: one self-contained HTML file to look at a scored log and send around.

Score distributions, means per group with their intervals, pass rates against thresholds,
the comparison with another log, the worst rows with every verdict and reason, the failures
by reason, and the run's metadata (judge, prompt hashes, requests, tokens, cost). Figures are
Vega-Lite specs built with Altair and drawn by Vega, whose script (from vl-convert-python,
about 0.9 MB) is inlined once: the file opens with no network. Only aggregates (20-bin
histograms, per-group means) and the worst rows are embedded, so its size depends on the
metrics, the groups and `worst`, not on the number of rows.

`show` draws a few rows as the report's cards in a notebook or a terminal (no extra needed).

Needs the `report` extra: `pip install 'ragframe[report]'` (altair, vl-convert-python).

Layer: above `decide`; imports `decide`, `engine`, `metrics`, `inputs`, `stats`, the ground.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import ConfigError
from ragframe.report import _bundle, _charts, _comparison, _data, _page, _people, _shell
from ragframe.report._deps import need
from ragframe.report._source import Source, check_output, direction, group_columns, load, pass_rules
from ragframe.report.show import Cards, show

__all__ = ["Cards", "report", "show"]


def report(
    scored: Any,
    *,
    by: str | Sequence[str] | None = None,
    against: Any = None,
    on: str | Sequence[str] | None = None,
    output: str | Path | None = None,
    worst: int = 20,
    level: float = 0.95,
    title: str | None = None,
    calibration: Any = None,
    labels: Any = None,
    label: str = "faithful",
    label_on: str = "id",
    label_score: str | Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """The HTML report of a scored log; written to `output` too when given.

    `scored`: the path (or URL) of a scored Parquet file, a polars DataFrame / LazyFrame, a
    pandas DataFrame (a named index, such as the id `set_index` made, kept as columns), or the
    result of `ragframe.run` (a file or a run brings its metadata). `by`: group columns
    (means with intervals and histograms per group). `against`: another scored log to compare
    with (the baseline, a; this log is b), paired on the `on` columns (None: unpaired).
    `worst`: rows shown per metric (lowest scores; highest for a lower-is-better metric).
    `level`: the intervals' confidence level. `calibration`: a `Calibration`, its file, or a
    list of them: each gets its reliability diagram (fitted curve, binned observed rates with
    intervals) and held-out Brier score and ECE. `labels`: a labelled sample (a filled label
    sheet, a frame or a file with the `label_on` key and the `label` column): the human rate
    of the whole log per `label_score` metric (default: the metrics the file scored), PPI++
    beside the judge's and the labels' own, each with n labelled and N scored. A jury's run
    shows the judges' agreement. `storage_options`: Polars' options for reading a URL
    (`s3://...`: endpoint, keys, region), for `scored` and `against` where each is a path.
    """
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise ConfigError(f"worst must be a non-negative integer (rows per metric), not {worst!r}")
    if on is not None and against is None:
        raise ConfigError("on= names the columns that pair rows with `against`; pass against= too")
    need("altair")
    need("vl_convert")
    paths = [x for x in (scored, against) if isinstance(x, str | Path)]
    if storage_options is not None and not paths:
        raise ConfigError(
            f"storage_options applies to a path (s3://..., gs://...), but scored is a "
            f"{type(scored).__name__}: drop storage_options, or pass the path"
        )

    def options(data: Any) -> Mapping[str, Any] | None:
        return storage_options if isinstance(data, str | Path) else None

    source = load(scored, storage_options=options(scored))
    baseline = (
        load(against, "against", storage_options=options(against)) if against is not None else None
    )
    out = check_output(output, source, *([baseline] if baseline else []))
    figs = _page.Figures()
    sections, nav, lines = _sections(figs, source, baseline, by, on, worst, level)
    people = {"calibration": calibration, "labels": labels, "label": label, "on": label_on}
    extra, links = _people_sections(figs, source, people, label_score, level)
    sections[1:1], nav[1:1] = extra, links
    name = title or f"ragframe report: {source.label}"
    document = _shell.page(name, lines, nav, sections, figs.specs, _bundle.vega_bundle())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(document, encoding="utf-8")
    return document


def _sections(
    figs: _page.Figures,
    source: Source,
    baseline: Source | None,
    by: str | Sequence[str] | None,
    on: str | Sequence[str] | None,
    worst: int,
    level: float,
) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """Every section in page order, the navigation links, and the header's lines."""
    from ragframe.decide.summarize import summarize

    schema = source.lazy.collect_schema()
    groups = group_columns(by, schema, source.label)
    meta = source.meta
    overall = summarize(source.data, level=level, sample=_sample(meta))
    metrics = overall["metric"].to_list()
    directions = {
        m: direction(m, meta, d) for m, d in zip(metrics, overall["direction"], strict=True)
    }
    overall = overall.with_columns(pl.Series("direction", [directions[m] for m in metrics]))
    rules = pass_rules(metrics, directions, schema, meta)
    light = _data.light_frame(source, metrics, groups, rules)
    passes = _data.pass_table(light.whole(), rules, level)
    sections = [_page.summary_section(figs, overall, passes, rules, level)]
    nav = [("summary", "Summary")]
    sections.append(
        _page.distributions_section(
            figs, _data.histograms(light, metrics, _charts.MAX_LINES), overall, rules, light
        )
    )
    nav.append(("distributions", "Distributions"))
    if groups:
        means = _data.group_means(light, metrics, directions, level)
        sections.append(_page.groups_section(figs, means, light, level, _data.group_order(light)))
        nav.append(("groups", "Groups"))
    if rules:
        table = _data.pass_table(light.grouped(), rules, level) if groups else passes
        sections.append(_page.pass_section(figs, table, rules, level, bool(groups)))
        nav.append(("pass", "Pass rates"))
    if baseline is not None:
        result = _comparison.run_compare(
            baseline, source, on=on, by=groups, metrics=metrics, level=level, changed=min(worst, 10)
        )
        sections.append(
            _comparison.comparison_section(figs, result, source, baseline, groups, level)
        )
        nav.append(("comparison", "Comparison"))
    sections.append(_worst(source, light, overall, directions, groups, worst))
    sections.append(_page.failures_section(_data.failure_causes(source, metrics), meta))
    sections.append(_page.run_section("run", "Run metadata", meta))
    nav += [("worst", "Worst rows"), ("failures", "Failures"), ("run", "Run metadata")]
    if baseline is not None:
        sections.append(
            _page.run_section("run-against", f"Run metadata of a ({baseline.label})", baseline.meta)
        )
    return sections, nav, _header(source, baseline, overall, light, meta)


def _people_sections(
    figs: _page.Figures,
    source: Source,
    people: dict[str, Any],
    label_score: str | Sequence[str] | None,
    level: float,
) -> tuple[list[str], list[tuple[str, str]]]:
    """The sections on what people would say and on a jury, where the run has them."""
    from ragframe.metrics.calibration import Calibration

    sections, nav = [], []
    given = people["calibration"]
    if given is not None:
        items = given if isinstance(given, list | tuple) else [given]
        calibrations = [c if isinstance(c, Calibration) else Calibration.load(c) for c in items]
        for cal in calibrations:
            cal.check_provenance(source.meta, source.label)
        sections.append(_people.calibration_section(figs, calibrations))
        nav.append(("calibration", "Calibration"))
    if people["labels"] is not None:
        columns = source.lazy.collect_schema().names()
        scores = [label_score] if isinstance(label_score, str) else list(label_score or [])
        scores = scores or _people.labelled_scores(source.meta, columns)
        sections.append(
            _people.human_section(
                source.data, people["labels"], scores, people["label"], people["on"], level
            )
        )
        nav.append(("people", "What people would say"))
    jury = (source.meta.get("summary") or {}).get("jury")
    if jury:
        sections.append(_people.jury_section(jury))
        nav.append(("jury", "Jury"))
    return sections, nav


def _worst(
    source: Source,
    light: _data.Light,
    overall: pl.DataFrame,
    directions: dict[str, str],
    groups: list[str],
    worst: int,
) -> str:
    """The worst rows' section: positions from the light frame, the rows read afterwards."""
    metrics = overall["metric"].to_list()
    schema = source.lazy.collect_schema()
    positions = _data.worst_rows(light, metrics, directions, worst)
    shown = _data.display_columns(schema, groups)
    details = [f"{m}_detail" for m in metrics if f"{m}_detail" in schema]
    wanted = [i for rows in positions.values() for i in rows]
    rows = _data.gather(source, wanted, [*shown, *metrics, *details])
    return _page.worst_section(positions, rows, overall, shown)


def _sample(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The sample a run scored (recorded in the summary), so no figure hides it."""
    drawn = meta.get("sample") or (meta.get("summary") or {}).get("sample")
    return drawn if isinstance(drawn, dict) and drawn.get("rows") is not None else None


def _header(
    source: Source,
    baseline: Source | None,
    overall: pl.DataFrame,
    light: _data.Light,
    meta: dict[str, Any],
) -> list[str]:
    rows = int(overall["n"][0]) if overall.height else 0
    judge = meta.get("judge") or {}
    lines = [
        f"{rows:,} rows · {overall.height} metrics ({', '.join(overall['metric'])})"
        + (f" · judge {judge.get('model')}" if judge.get("model") else "")
        + (f" at {judge['endpoint_host']}" if judge.get("endpoint_host") else "")
        + (f" · scored {meta['created']}" if meta.get("created") else ""),
    ]
    drawn = _sample(meta)
    if drawn:
        lines.append(
            f"A uniform random sample of {drawn.get('rows'):,} of the log's {drawn.get('of'):,} "
            "rows: the intervals are for the whole log's means."
        )
    if light.groups:
        lines.append(f"Grouped by {', '.join(light.groups)}: {light.groups_total:,} groups.")
    if baseline is not None:
        lines.append(f"Compared against {baseline.label} (a, the baseline); this log is b.")
    from ragframe._version import __version__

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(f"Report by ragframe {__version__}, {now}.")
    return lines
