"""The run summary's lines about a jury (`ragframe.engine.jury`): its judges and how much they
agree per metric. Apart from the jury itself, so the summary can print them without importing
the run."""

from __future__ import annotations

from typing import Any

from ragframe.stats.alpha import MIN_UNITS


def format_jury(jury: dict[str, Any]) -> list[str]:
    """The summary's lines about the jury: its judges and their agreement per metric."""
    lines = [f"jury of {len(jury['judges'])}: {', '.join(jury['judges'])}"]
    for metric, line in jury["metrics"].items():
        parts = [_alpha_text("rows", line["rows"])]
        if "items" in line:
            parts.append(_alpha_text(line.get("unit", "items"), line["items"]))
        split = ", ".join(f"row {s['row']} ({s['spread']:.2f})" for s in line["split_rows"][:3])
        lines.append(f"  {metric}: agreement {'; '.join(parts)}; split most: {split or '-'}")
    return lines


def _alpha_text(unit: str, figure: dict[str, Any]) -> str:
    """alpha with its interval and n; without an interval where none covers, and why."""
    if figure["alpha"] is None:
        return f"alpha over {unit} - (n={figure['n']}: {figure['note']})"
    if figure["ci_low"] is None or figure["ci_high"] is None:
        return f"alpha over {unit} {figure['alpha']:.3f} (n={figure['n']}; {_why_none(figure)})"
    return (
        f"alpha over {unit} {figure['alpha']:.3f} [{figure['ci_low']:.3f}, "
        f"{figure['ci_high']:.3f}] (n={figure['n']})"
    )


def _why_none(figure: dict[str, Any]) -> str:
    """Why an alpha has no interval: the figure's note, else the rule that withheld it
    (`ragframe.stats.alpha`: too few units, or on votes a value too rare)."""
    if figure.get("note"):
        return f"no interval: {figure['note']}"
    if figure["n"] < MIN_UNITS:
        return f"no interval below {MIN_UNITS} units"
    return "no interval: one verdict too rare to resample"
