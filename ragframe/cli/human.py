"""`ragframe human-estimate scored.parquet --labels to_label.csv --label-column faithful --on id`:
the mean human label over the whole log (PPI++), beside the judge's mean and the labels' own,
with n labelled, N scored and the method, then how many labels a target width needs."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_human_estimate"]

import argparse
import sys
from typing import Any

from ragframe.cli import common, labels, options
from ragframe.cli.labels import format_table, power_line
from ragframe.decide.calibration import Calibration
from ragframe.decide.human import human_estimate, labelled_scores, labels_needed

EXIT_STATUSES = (
    "exit status: 0 estimated; 2 a configuration or input error (a column a file lacks, a label "
    "that is not 0 / 1, a labelled key not in the scored log; one line says what to fix). "
    "Nothing is ever sent to a judge"
)
HELP = (
    "the mean human label over every scored row (PPI++: the judge's scores plus a sample of "
    "labels), with its interval"
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `human-estimate` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(
        subparsers, "human-estimate", cmd_human_estimate, HELP, EXIT_STATUSES
    )
    parser.add_argument("scored", help=options.SCORED_HELP)
    labels.add_label_options(parser, required=True)
    parser.add_argument(
        "--score", default="faithfulness", help="the judge's score column (default: faithfulness)"
    )
    parser.add_argument("--on", default="id", help="the row key in both files (default: id)")
    parser.add_argument("--by", help="group column(s), comma-separated")
    options.add_level(parser)
    parser.add_argument(
        "--weight-column",
        default="auto",
        help="the labels' 1 / inclusion-probability column of a stratified draw (default: "
        "sample_weight when the labels have it; 'none' for a uniform draw)",
    )
    parser.add_argument(
        "--calibration", help="a calibration file (ragframe calibrate) applied to the score first"
    )
    parser.add_argument(
        "--width",
        type=common.positive_float,
        default=0.1,
        help="target interval width for the labels-needed line (default: 0.1, i.e. +-0.05)",
    )
    options.add_format(parser, json="print the table as JSON (rows)", csv="print the table as CSV")
    return parser


def cmd_human_estimate(args: argparse.Namespace) -> int:
    """Estimate and print: a terminal table (with the labels-needed line), JSON rows or CSV."""
    calibration = Calibration.load(args.calibration) if args.calibration else None
    weight = None if args.weight_column.lower() == "none" else args.weight_column
    table = human_estimate(
        args.scored,
        args.labels,
        score=args.score,
        label=args.label_column,
        on=args.on,
        by=common.parse_metrics(args.by) if args.by else None,
        level=args.level,
        weight=weight,
        calibration=calibration,
    )
    if args.json:
        sys.stdout.write(table.write_json() + "\n")
        return common.EXIT_OK
    if args.csv:
        sys.stdout.write(table.write_csv())
        return common.EXIT_OK
    groups = common.parse_metrics(args.by) if args.by else []
    print(format_table(table, groups))
    y, f, big_n = labelled_scores(
        args.scored,
        args.labels,
        score=args.score,
        label=args.label_column,
        on=args.on,
        calibration=calibration,
    )
    if y.size >= 3:
        print(power_line(labels_needed(args.width, y, f, n_scored=big_n, level=args.level)))
    return common.EXIT_OK
