"""The report's sections on what people would say and on judges that check each other: the
reliability diagram of a calibration (its fitted curve, the binned observed rates with their
intervals, its held-out Brier score and ECE with n), the human estimate of the whole log from
a labelled sample (PPI++ beside the judge alone and the labels alone), and a jury's agreement
(Krippendorff's alpha per metric, with n and interval, and the rows the judges split on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragframe.decide.human import human_estimate
from ragframe.metrics.calibration import Calibration
from ragframe.report._charts import WIDTH, _altair, _spec
from ragframe.report._html import table
from ragframe.report._page import Figures, interval_text, level_text, para, section
from ragframe.stats import format_mean


def reliability_spec(cal: Calibration) -> dict[str, Any]:
    """The fitted map as a line and each score bin's observed rate as a dot with its bar."""
    alt = _altair()
    curve = cal.curve().to_dicts()
    bins = cal.reliability_table().select("score_mean", "observed", "ci_low", "ci_high", "n")
    points = alt.Chart(alt.Data(values=bins.to_dicts()))
    x = alt.X("score_mean:Q", title=f"{cal.metric} score", scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("observed:Q", title=f"share labelled {cal.label}", scale=alt.Scale(domain=[0, 1]))
    layers = [
        alt.Chart(alt.Data(values=[{"a": 0, "b": 0}, {"a": 1, "b": 1}]))
        .mark_line(color="#bbb", strokeDash=[4, 4])
        .encode(x="a:Q", y="b:Q"),
        alt.Chart(alt.Data(values=curve))
        .mark_line(color="#4c78a8")
        .encode(x=alt.X("score:Q"), y=alt.Y("p_human:Q")),
        points.mark_rule(color="#1f3b57").encode(x=x, y="ci_low:Q", y2="ci_high:Q"),
        points.mark_point(filled=True, size=60, color="#1f3b57").encode(
            x=x, y=y, tooltip=["score_mean:Q", "observed:Q", "ci_low:Q", "ci_high:Q", "n:Q"]
        ),
    ]
    chart = alt.layer(*layers).properties(
        title=alt.TitleParams(
            f"Reliability of {cal.metric} ({cal.method}, n={cal.n} labels)",
            subtitle="line: the fitted map; dots: observed rate per score bin, with interval",
        ),
        width=WIDTH,
        height=WIDTH,
    )
    return _spec(chart)


def calibration_section(figs: Figures, calibrations: list[Calibration]) -> str:
    """One reliability diagram and quality table per calibration."""
    parts: list[str] = []
    for cal in calibrations:
        quality = cal.quality()
        rows = [
            [r["figure"], format_mean(r["value"]), interval_text(r["ci_low"], r["ci_high"]), r["n"]]
            for r in quality.iter_rows(named=True)
        ]
        caption = f"{cal.metric}: {cal.n} labelled rows ({cal.n_positive} labelled {cal.label})"
        parts += [
            figs.add(reliability_spec(cal), caption),
            table(["held-out figure", "value", level_text(cal.level), "n"], rows),
            para(
                f"Cross-fitted over {cal.folds} folds: no figure is judged on the rows it was "
                f"fitted on. Base-rate Brier {format_mean(cal.brier_base)}: the figure a useful "
                "map beats."
            ),
        ]
    return section("calibration", "Calibration: scores as probabilities", *parts)


def human_section(
    scored: Any, labels: Any, scores: list[str], label: str, on: str, level: float
) -> str:
    """The human-label rate of the whole log per labelled metric: PPI++ beside the judge's
    mean and the labels alone, each with n labelled, N scored and the method."""
    rows = []
    for score in scores:
        estimate = human_estimate(scored, labels, score=score, label=label, on=on, level=level)
        for r in estimate.iter_rows(named=True):
            rows.append(
                [
                    score,
                    r["method"],
                    format_mean(r["estimate"]),
                    interval_text(r["ci_low"], r["ci_high"]),
                    r["n_labelled"],
                    r["n_scored"],
                    r.get("note") or "",
                ]
            )
    headers = ["score", "method", f"share labelled {label}", level_text(level)]
    headers += ["n labelled", "N scored", "note"]
    return section(
        "people",
        "What people would say",
        para(
            "ppi++: the judge's scores on every row, corrected by the labelled rows (valid "
            "whatever the judge's bias); judge_only: the judge's mean (its bias is not "
            "corrected); labels_only: the labelled rows alone."
        ),
        table(headers, rows),
    )


def jury_section(jury: Mapping[str, Any]) -> str:
    """A jury's judges and, per metric, how much they agree."""
    rows = []
    for metric, line in jury["metrics"].items():
        for unit, key in (("rows", "rows"), (line.get("unit", "items"), "items")):
            if key in line:
                figure = line[key]
                rows.append(
                    [
                        metric,
                        unit,
                        "-" if figure["alpha"] is None else format_mean(figure["alpha"]),
                        interval_text(figure["ci_low"], figure["ci_high"]),
                        figure["n"],
                        figure.get("note") or "",
                    ]
                )
    split = [
        [m, ", ".join(f"row {s['row']} ({s['spread']:.2f})" for s in line["split_rows"])]
        for m, line in jury["metrics"].items()
    ]
    return section(
        "jury",
        f"Jury of {len(jury['judges'])}: {', '.join(jury['judges'])}",
        para("Krippendorff's alpha: 1 the judges agree, 0 no better than chance."),
        table(["metric", "over", "alpha", "interval", "n", "note"], rows),
        table(["metric", "rows the judges split on most (spread of scores)"], split),
    )


def labelled_scores(meta: Mapping[str, Any], frame_columns: list[str]) -> list[str]:
    """The metrics a label sheet speaks to by default: those the file scored."""
    names = list((meta.get("metrics") or {}).keys())
    return [m for m in names if m in frame_columns] or [
        c for c in frame_columns if c + "_detail" in frame_columns
    ][:1]
