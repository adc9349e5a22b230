"""The report's figures as Vega-Lite specs, built with Altair from the pre-computed aggregates
(never from rows). Every figure says its n in its title or labels."""

from __future__ import annotations

from typing import Any

import polars as pl

from ragframe.report._deps import need

#: Pixels: a figure's plotting width, and its height per row of a dot-and-interval chart.
WIDTH = 380
ROW_HEIGHT = 22
#: Up to this many groups, a histogram draws one line per group; beyond, the whole log only.
MAX_LINES = 8


def _altair() -> Any:
    return need("altair")


def _spec(chart: Any) -> dict[str, Any]:
    """The chart's Vega-Lite spec; `$schema` is dropped so no URL sits in the page (the
    embedding names the mode)."""
    spec = chart.to_dict()
    spec.pop("$schema", None)
    return dict(spec)


def _count(n: int) -> str:
    return f"{n:,}"


def histogram(
    metric: str,
    bins: pl.DataFrame,
    *,
    direction: str,
    scored: int,
    failed: int,
    threshold: float | None,
) -> dict[str, Any]:
    """The distribution of one metric's scores: bars of rows per bin for the whole log, or,
    for 2..MAX_LINES groups, one line per group of the share of its scored rows."""
    alt = _altair()
    groups = bins["group"].unique().to_list()
    x_title = f"{metric} ({direction} is better)"
    title = alt.TitleParams(
        f"{metric}: distribution of scores",
        subtitle=f"n = {_count(scored)} scored rows ({_count(failed)} failed to score)",
    )
    if len(groups) > 1:
        sizes = bins.group_by("group").agg(pl.col("rows").sum().alias("n"))
        named = bins.join(sizes, on="group").with_columns(
            pl.format("{} (n={})", pl.col("group"), pl.col("n")).alias("group")
        )
        base = alt.Chart(alt.Data(values=_records(named, "start", "end", "rows", "share", "group")))
        mid = alt.X("mid:Q", title=x_title, scale=alt.Scale(domain=[0, 1]))
        layer = (
            base.transform_calculate(mid="(datum.start + datum.end) / 2")
            .mark_line(point=True)
            .encode(
                x=mid,
                y=alt.Y(
                    "share:Q", title="share of the group's scored rows", axis=alt.Axis(format="%")
                ),
                color=alt.Color(
                    "group:N", title=None, legend=alt.Legend(orient="bottom", columns=2)
                ),
                tooltip=_bin_tooltip(alt, group=True),
            )
        )
    else:
        base = alt.Chart(alt.Data(values=_records(bins, "start", "end", "rows", "share")))
        layer = base.mark_bar(binSpacing=1).encode(
            x=alt.X(
                "start:Q",
                bin=alt.Bin(binned=True, step=0.05),
                title=x_title,
                scale=alt.Scale(domain=[0, 1]),
            ),
            x2="end:Q",
            y=alt.Y("rows:Q", title="rows", axis=alt.Axis(tickMinStep=1, format=",d")),
            tooltip=_bin_tooltip(alt, group=False),
        )
    if threshold is not None:
        rule = alt.Chart(alt.Data(values=[{"t": threshold, "label": f"threshold {threshold:g}"}]))
        layer = layer + rule.mark_rule(color="#c0392b", strokeDash=[4, 3]).encode(
            x="t:Q", tooltip=alt.Tooltip("label:N", title="pass threshold")
        )
    return _spec(alt.layer(layer).properties(title=title, width=WIDTH, height=200))


def _bin_tooltip(alt: Any, *, group: bool) -> list[Any]:
    tips = [
        alt.Tooltip("start:Q", title="from", format=".2f"),
        alt.Tooltip("end:Q", title="to", format=".2f"),
        alt.Tooltip("rows:Q", title="rows", format=","),
        alt.Tooltip("share:Q", title="share", format=".1%"),
    ]
    return [alt.Tooltip("group:N", title="group"), *tips] if group else tips


def _records(frame: pl.DataFrame, *columns: str) -> list[dict[str, Any]]:
    return frame.select(columns).to_dicts()


def labelled(
    frame: pl.DataFrame, name: str | pl.Expr, n: str | None, value: str, *tips: str
) -> pl.DataFrame:
    """The rows `intervals` draws: a `label` ("name (n=N)", or the name alone when `n` is
    None), the value, its interval, and the `tips` columns (tooltips)."""
    label = pl.col(name) if isinstance(name, str) else name
    if n:
        label = pl.format("{} (n={})", label, pl.col(n))
    return frame.select(label.alias("label"), value, "ci_low", "ci_high", *tips)


def intervals(
    rows: pl.DataFrame,
    *,
    value: str,
    title: str,
    subtitle: str,
    x_title: str,
    domain: tuple[float, float] | None = (0.0, 1.0),
    zero: bool = False,
) -> dict[str, Any]:
    """Dots with interval bars, one row per `label` (which carries the row's n). `rows`:
    label, `value`, ci_low, ci_high (null: no interval), n; `tip` columns become tooltips."""
    alt = _altair()
    data = rows.with_columns(
        pl.col("ci_low").fill_null(pl.col(value)), pl.col("ci_high").fill_null(pl.col(value))
    )
    tips = [c for c in data.columns if c not in ("label",)]
    base = alt.Chart(alt.Data(values=data.to_dicts())).encode(
        y=alt.Y("label:N", sort=None, title=None, axis=alt.Axis(labelLimit=320))
    )
    scale = alt.Scale(domain=list(domain)) if domain else alt.Scale(zero=False)
    bars = base.mark_rule(strokeWidth=2, color="#4c78a8").encode(
        x=alt.X("ci_low:Q", title=x_title, scale=scale), x2="ci_high:Q"
    )
    dots = base.mark_point(filled=True, size=70, color="#1f3b57").encode(
        x=alt.X(f"{value}:Q"),
        tooltip=[alt.Tooltip(f"{c}:{'Q' if data[c].dtype.is_numeric() else 'N'}") for c in tips],
    )
    layers = [bars, dots]
    if zero:
        layers.insert(
            0, alt.Chart(alt.Data(values=[{"z": 0}])).mark_rule(color="#888").encode(x="z:Q")
        )
    chart = alt.layer(*layers).properties(
        title=alt.TitleParams(title, subtitle=subtitle),
        width=WIDTH,
        height=max(ROW_HEIGHT * rows.height, 40),
    )
    return _spec(chart)
