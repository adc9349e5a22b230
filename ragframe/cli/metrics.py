"""`ragframe metrics`: the catalogue of metrics, to choose from before a run, and the metrics
ragframe.toml defines (its `[metric.NAME]` tables), marked as the file's."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Mapping
from typing import Any

INDENT, HANG = " " * 4, " " * 6


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `metrics` to the `ragframe` parser's subparsers."""
    parser = subparsers.add_parser(
        "metrics",
        help="list every metric: what it measures, direction, inputs, requests per row, source "
        "(and the metrics ragframe.toml defines)",
        epilog="exit status: 0 listed; 2 a bad ragframe.toml (file, section and key named)",
    )
    parser.set_defaults(handler=cmd_metrics)
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    return parser


def cmd_metrics(args: argparse.Namespace) -> int:
    from ragframe.cli import config
    from ragframe.metrics.catalog import catalog

    table = catalog()
    catalogue = [{**e, "defined_in": None, "settings": None} for e in table.to_dicts()]
    own = [
        _file_entry(name, metric, config.metric_table(args, name), catalogue)
        for name, metric in config.config_metrics(args).items()
    ]
    if args.json:
        print(json.dumps([*catalogue, *own], indent=2, default=str))
        return 0
    for entry in catalogue:
        _print_entry(entry)
    if own:
        print(
            f"\nDefined in {args.config.shown} (`ragframe score` scores them with this file; "
            "--metrics may name them):"
        )
        for entry in own:
            _print_entry(entry)
    print("\n`ragframe score ... --metrics all` scores every metric whose inputs the log has.")
    return 0


def _print_entry(entry: Mapping[str, Any]) -> None:
    arrow = "lower is better" if entry["direction"] == "lower" else "higher is better"
    inputs = ", ".join(entry["required_inputs"]) or "other metrics' scores"
    print(f"{entry['name']}  ({arrow}; {entry['how']})")
    settings = entry["settings"] or {}
    threshold = settings.get("threshold")
    passes = None if threshold is None else f"{threshold:g}"
    if settings.get("strict"):
        passes = "strict (a perfect score only)"
    for label, text in (
        ("", entry["description"]),
        ("inputs: ", inputs),
        ("requests per row: ", entry["requests_per_row"]),
        ("passes at: ", passes),
        ("source: ", entry["source"]),
    ):
        if text is not None:
            print(textwrap.fill(label + text, 96, initial_indent=INDENT, subsequent_indent=HANG))


def _file_entry(
    name: str, metric: Any, table: str, catalogue: list[dict[str, Any]]
) -> dict[str, Any]:
    """A metric of the file as a catalogue entry: its class's entry with the file's name,
    inputs and settings, and `defined_in` naming the table that builds it."""
    kind = type(metric).__name__
    base = next((e for e in catalogue if e["class"] == kind), None) or {
        "description": "",
        "direction": metric.direction,
        "requests_per_row": "",
        "uses_llm": metric.uses_llm,
        "uses_embeddings": metric.uses_embeddings,
        "formula": "",
        "empty_input": "",
        "source": "",
    }
    settings = dict(metric.config())
    if metric.threshold is not None:
        settings["threshold"] = metric.threshold
    if metric.strict:
        settings["strict"] = True
    return {
        **base,
        "name": name,
        "class": kind,
        "description": _described(metric) or base["description"],
        "required_inputs": list(metric.requires),
        "by_name": True,
        "how": f"{kind}, {table}",
        "defined_in": table,
        "settings": settings,
    }


def _described(metric: Any) -> str | None:
    """What the file says the metric judges: G-Eval's criteria (or steps), a rubric's levels."""
    criteria = getattr(metric, "criteria", None)
    if criteria:
        return f"criteria: {criteria}"
    steps = getattr(metric, "evaluation_steps", None)
    if steps:
        return "evaluation steps: " + " ".join(steps)
    rubric = getattr(metric, "rubric", None)
    if isinstance(rubric, Mapping) and rubric:
        return "rubric: " + "; ".join(f"{level} = {text}" for level, text in rubric.items())
    return None
