"""`ragframe metrics`: the catalogue of metrics, to choose from before a run."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

INDENT, HANG = " " * 4, " " * 6


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `metrics` to the `ragframe` parser's subparsers."""
    parser = subparsers.add_parser(
        "metrics",
        help="list every metric: what it measures, direction, inputs, requests per row, source",
        epilog="exit status: 0 listed",
    )
    parser.set_defaults(handler=cmd_metrics)
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    return parser


def cmd_metrics(args: argparse.Namespace) -> int:
    from ragframe.metrics.catalog import catalog

    table = catalog()
    if args.json:
        print(json.dumps(table.to_dicts(), indent=2))
        return 0
    for entry in table.iter_rows(named=True):
        arrow = "lower is better" if entry["direction"] == "lower" else "higher is better"
        inputs = ", ".join(entry["required_inputs"]) or "other metrics' scores"
        print(f"{entry['name']}  ({arrow}; {entry['how']})")
        for label, text in (
            ("", entry["description"]),
            ("inputs: ", inputs),
            ("requests per row: ", entry["requests_per_row"]),
            ("source: ", entry["source"]),
        ):
            print(textwrap.fill(label + text, 96, initial_indent=INDENT, subsequent_indent=HANG))
    print("\n`ragframe score ... --metrics all` scores every metric whose inputs the log has.")
    return 0
