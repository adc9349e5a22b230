"""`ragframe export scored.parquet --to phoenix|langsmith|otel -o OUT`: a scored file's
metrics as evaluations on the spans (or runs) its rows were read from."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ragframe.cli import common, options
from ragframe.export import TARGETS, export_scores

EXIT_STATUSES = (
    "exit status: 0 written; 2 a configuration or input error (no span_id column, an unknown "
    "metric, an output that exists; one line says what to fix). Nothing is sent anywhere"
)
HELP = (
    "write scores as Phoenix span evaluations, LangSmith feedback or OTel GenAI evaluation "
    "events, on the trace ids the rows came from"
)

__all__ = ["add_parser", "cmd_export"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `export` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "export", cmd_export, HELP, EXIT_STATUSES)
    parser.add_argument("scored", help="a scored file (Parquet or JSON Lines) with span_id")
    parser.add_argument("--to", required=True, choices=TARGETS, help="where the scores go")
    options.add_output(
        parser,
        "output file: Parquet for phoenix, JSON Lines for langsmith, OTLP JSON for otel",
    )
    parser.add_argument(
        "--metrics", help="score columns, comma-separated (default: every metric in the file)"
    )
    return parser


def cmd_export(args: argparse.Namespace) -> int:
    """Export and say what was written."""
    result = export_scores(
        args.scored,
        args.to,
        args.output,
        metrics=common.parse_metrics(args.metrics) if args.metrics else None,
        overwrite=args.overwrite,
    )
    left = ""
    if result.unscored:
        why = "a null score" if args.to == "otel" else "a null or non-finite score (NaN, inf)"
        left += f"; {result.unscored} left out for {why}"
    if result.no_id:
        left += (
            f"; {result.no_id} scored left out for having no span_id (the first at row index "
            f"{result.first_no_id} of {args.scored}): no span or run to put them on"
        )
    print(
        f"wrote {result.records} evaluations ({', '.join(result.metrics)}) to {result.path} "
        f"for {args.to}{left}",
        file=sys.stderr,
    )
    return common.EXIT_OK
