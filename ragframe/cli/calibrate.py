"""`ragframe calibrate labelled.parquet --score faithfulness --label faithful -o
faithfulness.calib.json`: fit the map from a score to the probability a person labels the row
true, print its held-out quality, and save it for `ragframe score --calibration`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ragframe.cli import common, options
from ragframe.decide.calibration import calibrate

EXIT_STATUSES = (
    "exit status: 0 fitted and saved; 2 a configuration or input error (a column the file "
    "lacks, a label that is not 0 / 1, too few labels; one line says what to fix). Nothing is "
    "ever sent to a judge"
)
HELP = (
    "fit a score-to-probability map on labelled rows (isotonic, cross-fitted) and save it as JSON"
)

__all__ = ["add_parser", "cmd_calibrate"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `calibrate` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "calibrate", cmd_calibrate, HELP, EXIT_STATUSES)
    parser.add_argument("labelled", help="a scored file holding the score (and the label)")
    parser.add_argument(
        "--score", default="faithfulness", help="the score column (default: faithfulness)"
    )
    parser.add_argument("--label", default="faithful", help="the 0 / 1 label (default: faithful)")
    parser.add_argument(
        "--labels", help="labels in another file (a filled label sheet), joined on --on"
    )
    parser.add_argument("--on", default="id", help="the row key for --labels (default: id)")
    options.add_output(parser, "where to write the JSON file", overwrite=None)
    parser.add_argument(
        "--folds", type=common.int_at_least(2), default=5, help="cross-fitting folds (default: 5)"
    )
    parser.add_argument(
        "--method",
        choices=("auto", "isotonic", "logistic"),
        default="auto",
        help="the fit (default: auto: isotonic from 100 labels with 20 of each class)",
    )
    options.add_level(parser)
    options.add_seed(parser, "folds and bootstrap seed")
    return parser


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit, print the held-out quality, write the file."""
    given = options.pick(args, "labels", "on", "folds", "seed", "level", "method")
    cal = calibrate(args.labelled, args.score, args.label, **given)
    path = cal.save(args.output)
    q = f"{cal.level:.0%}"
    lines = [
        f"{cal.method} map from {cal.metric} to P({cal.label}), fitted on {cal.n} labelled "
        f"rows ({cal.n_positive} true)"
        + (f"; {cal.n_dropped} rows with a null score or label left out" if cal.n_dropped else ""),
        f"held out ({cal.folds}-fold cross-fitting, n = {cal.n}):",
        f"  Brier {cal.brier:.4f} [{cal.brier_ci[0]:.4f}, {cal.brier_ci[1]:.4f}] ({q}; "
        f"always the base rate: {cal.brier_base:.4f})",
        f"  ECE   {cal.ece:.4f} [{cal.ece_ci[0]:.4f}, {cal.ece_ci[1]:.4f}] ({q})",
        f"judge: {cal.judge if cal.judge is not None else 'not recorded (a plain frame)'}",
        f"wrote {path}: apply with `ragframe score ... --calibration {path}` (adds {cal.column})",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return common.EXIT_OK
