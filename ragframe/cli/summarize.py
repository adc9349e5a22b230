"""`ragframe summarize scored.parquet --by experiment`: per group and metric, n, the rows that
failed to score, the mean with its interval, and the pass rate where a threshold is known."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import polars as pl

from ragframe.cli import common, labels, options
from ragframe.decide.summarize import DISPLAY_NUMBERS, display_notes, display_table, summarize
from ragframe.engine.summary import text_table
from ragframe.errors import RagframeError
from ragframe.metrics.thresholds import parse_metric_values

EXIT_STATUSES = (
    "exit status: 0 summarized; 2 a configuration or input error (a column the file lacks, a "
    "bad --level, a labels file without the key or label column; one line says what to fix). "
    "Nothing is ever sent to a judge"
)
HELP = (
    "per group and metric: n, failed rows, the mean with its confidence interval, the pass "
    "rate against a threshold; with --labels, the human estimate beside the judge's"
)

__all__ = ["add_parser", "cmd_summarize", "format_table"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `summarize` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "summarize", cmd_summarize, HELP, EXIT_STATUSES)
    parser.add_argument("scored", help=options.SCORED_HELP)
    parser.add_argument(
        "--by",
        help="group column(s), comma-separated (e.g. experiment); not one of the table's own "
        "column names (method, level, n, ...): rename such a column first",
    )
    parser.add_argument(
        "--metrics", help="score columns, comma-separated (default: the file's metrics)"
    )
    options.add_level(parser)
    options.add_seed(
        parser,
        "bootstrap seed (default: 0); the default intervals draw nothing, so it changes only "
        "those of scores outside [0, 1]",
    )
    parser.add_argument(
        "--threshold",
        metavar="METRIC=VALUE,...",
        help="pass thresholds, e.g. faithfulness=0.8 (default: those the file records, or its "
        "METRIC_pass columns)",
    )
    parser.add_argument(
        "--strict",
        metavar="METRIC,...",
        help="strict mode for these metrics: a row passes only with a perfect score",
    )
    labels.add_label_options(parser)
    parser.add_argument(
        "--on", default="id", help="with --labels: the row key in both files (default: id)"
    )
    options.add_format(
        parser,
        json="print the table as JSON (rows); with --labels an object instead: the rows under "
        '"summary", the human estimate\'s rows under "human_estimate" and the labels-needed '
        'figures under "labels_needed"',
        csv="print the table as CSV; with --labels the labelled metric's rows gain the ppi++ "
        "estimate as columns human_estimate, human_ci_low, human_ci_high, human_n_labelled, "
        "human_n_scored, human_method",
    )
    return parser


def cmd_summarize(args: argparse.Namespace) -> int:
    """Summarize and print: a terminal table, JSON rows or CSV; with --labels, the human
    estimate beside the judge's."""
    groups = common.parse_metrics(args.by) if args.by else []
    table = summarize(
        args.scored,
        metrics=common.parse_metrics(args.metrics) if args.metrics else None,
        by=groups or None,
        level=args.level,
        seed=args.seed,
        thresholds=parse_metric_values(args.threshold, "--threshold"),
        strict=common.parse_metrics(args.strict) if args.strict else None,
    )
    if not args.labels:
        _print(args, table, groups)
        return common.EXIT_OK
    metrics = list(dict.fromkeys(table["metric"].to_list()))
    estimate, plan = labels.summary_estimate(args, metrics, groups)
    _print(args, table, groups, estimate, plan)
    return common.EXIT_OK


def _print(
    args: argparse.Namespace,
    table: pl.DataFrame,
    groups: list[str],
    estimate: pl.DataFrame | None = None,
    plan: dict[str, Any] | None = None,
) -> None:
    """The table as asked (terminal, JSON or CSV), the human estimate with it when given."""
    if args.json and estimate is None:
        sys.stdout.write(table.write_json() + "\n")
    elif args.json:
        rows = {
            "summary": json.loads(table.write_json()),
            "human_estimate": json.loads(estimate.write_json()),
            "labels_needed": plan,
        }
        print(json.dumps(rows, ensure_ascii=False))
    elif args.csv:
        both = table if estimate is None else labels.human_columns(table, estimate, groups)
        sys.stdout.write(both.write_csv())
    else:
        print(format_table(table, groups))
        for line in _jury_lines(args.scored):
            print(line)
        if estimate is not None:
            print(f"\nbeside the judge's figures, what people would say (--labels {args.labels}):")
            print(labels.format_table(estimate, groups))
            if plan is not None:
                print(labels.power_line(plan))


def _jury_lines(scored: str) -> list[str]:
    """A jury's file: its judges and their agreement (Krippendorff's alpha), as the run's
    summary printed them."""
    from ragframe.engine.jury_text import format_jury
    from ragframe.inputs.io import read_metadata

    try:
        jury = (read_metadata(scored).get("summary") or {}).get("jury")
    except (OSError, ValueError, RagframeError):  # not a Parquet file with metadata
        return []
    return ["", *format_jury(jury)] if jury else []


def format_table(table: pl.DataFrame, groups: list[str] | None = None) -> str:
    """`summarize`'s table for a terminal: the display `ragframe.summarize` gives in a notebook
    (the mark of each mean against its threshold beside the mean, what it judges said under
    the table), then what the figures rest on."""
    headers, rows = display_table(table, groups or [])
    return "\n".join([*text_table(headers, rows, DISPLAY_NUMBERS), *display_notes(table)])
