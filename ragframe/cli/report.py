"""`ragframe report SCORED.parquet -o report.html`: one self-contained HTML report of a scored
file (and its comparison with another), readable offline."""

from __future__ import annotations

import argparse
from typing import Any

from ragframe.cli import common, labels, options

EXIT_STATUSES = (
    "exit status: 0 written; 2 a configuration or input error (one line says what to fix: "
    "a missing column, a file that is not a scored Parquet file, an existing -o without "
    "--overwrite, the report extra not installed)"
)
HELP = "write one self-contained HTML report of a scored Parquet file (opens offline)"


def _columns(text: str | None) -> list[str] | None:
    """`experiment, retriever` -> ["experiment", "retriever"]; None when not given."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    return names or None


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `report` to the `ragframe` parser's subparsers."""
    report = options.subcommand(subparsers, "report", cmd_report, HELP, EXIT_STATUSES)
    report.add_argument("scored", help="scored Parquet file (from `ragframe score`)")
    options.add_output(report, "the HTML file to write", overwrite="replace an existing report")
    report.add_argument(
        "--by", help="group columns, comma-separated: means with intervals per group"
    )
    report.add_argument(
        "--against",
        help="another scored Parquet file to compare with (the baseline, a; this file is b)",
    )
    report.add_argument(
        "--on",
        help="columns that pair the rows of both files, comma-separated (e.g. id); "
        "without it the comparison is unpaired",
    )
    options.add_shown(
        report, "--worst", 20, "worst rows shown per metric, with their verdicts (default: 20)"
    )
    options.add_level(report, "confidence level of the intervals (default: 0.95)")
    report.add_argument(
        "--calibration",
        action="append",
        metavar="FILE",
        help="a calibration file (ragframe calibrate): its reliability diagram and held-out "
        "Brier score and ECE (repeat for several)",
    )
    labels.add_label_options(report)
    report.add_argument(
        "--label-on", default="id", help="with --labels: the row key both files hold (default: id)"
    )
    return report


def cmd_report(args: argparse.Namespace) -> int:
    """`ragframe report`: write the report, say where and how large (a warning on the way,
    such as a kept Vega script that was not used, as one line of its own)."""
    import sys
    import warnings
    from pathlib import Path

    from ragframe.report import report

    common.refuse_existing_output(args.overwrite, args.output)  # before reading anything
    with warnings.catch_warnings(record=True) as said:  # the filters in force decide
        try:
            report(
                args.scored,
                by=_columns(args.by),
                against=args.against,
                on=_columns(args.on),
                output=args.output,
                worst=args.worst,
                level=args.level,
                label=args.label_column,
                **options.pick(args, "calibration", "labels", "label_on", "label_score"),
            )
        finally:
            for warning in said:
                print(
                    f"ragframe: warning: {common.one_line(str(warning.message))}", file=sys.stderr
                )
    size = Path(args.output).stat().st_size
    print(f"wrote {args.output} ({size / 1e6:.1f} MB)")
    return common.EXIT_OK
