"""`ragframe label-sheet scored.parquet -n 200 -o to_label.csv`: draw the rows a person should
label (uniform, or `--stratify` by score with the weights recorded) and write a sheet to fill
in; the filled sheet is read back by `ragframe human-estimate --labels to_label.csv`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ragframe.cli import common, options
from ragframe.decide.label_sheet import label_sheet, write_sheet

EXIT_STATUSES = (
    "exit status: 0 written; 2 a configuration or input error (more rows asked for than the "
    "file has, a column it lacks, an existing sheet; one line says what to fix)"
)
HELP = "draw rows to label and write a sheet a person fills in (CSV)"

__all__ = ["add_parser", "cmd_label_sheet"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `label-sheet` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "label-sheet", cmd_label_sheet, HELP, EXIT_STATUSES)
    parser.add_argument("scored", help=options.SCORED_HELP)
    parser.add_argument(
        "-n", type=common.positive_int, required=True, help="how many rows to label"
    )
    options.add_output(parser, "the sheet to write (.csv)", overwrite="replace an existing sheet")
    parser.add_argument(
        "--score",
        help="the score column: rows with a null score are not drawn; --stratify cuts by it",
    )
    parser.add_argument(
        "--stratify",
        action="store_true",
        help="draw evenly across score strata (equal-width bins of the score), recording "
        "sample_weight",
    )
    parser.add_argument(
        "--strata", type=common.positive_int, default=4, help="score strata (default: 4)"
    )
    options.add_seed(parser, "the draw's seed (default: 0)")
    parser.add_argument(
        "--on", default="id", help="the row key (default: id; row_index when the file has none)"
    )
    parser.add_argument(
        "--label-column", default="faithful", help="the empty column to fill (default: faithful)"
    )
    return parser


def cmd_label_sheet(args: argparse.Namespace) -> int:
    """Draw, write, and say how the sheet is read back."""
    score = args.score
    if args.stratify and score is None:
        score = "faithfulness"
    sheet, info = label_sheet(
        args.scored,
        args.n,
        score=score,
        stratify=args.stratify,
        strata=args.strata,
        seed=args.seed,
        on=args.on,
        label=args.label_column,
    )
    path = write_sheet(sheet, args.output, overwrite=args.overwrite)
    skipped = info["null_scores"]
    lines = [
        f"wrote {path}: {info['rows']} of {info['of']} rows, a {info['draw']} draw "
        f"(seed {info['seed']})"
        + (f"; {skipped} rows with a null score not drawn" if skipped else "")
    ]
    for s in info.get("strata", []):
        lines.append(
            f"  stratum {s['stratum']}: scores {s['score_from']:.3f}..{s['score_to']:.3f}, "
            f"{s['drawn']} of {s['rows']} rows"
        )
    lines.append(
        f"fill in {args.label_column!r} with 1 / 0 (or yes / no), then: ragframe human-estimate "
        f"{args.scored} --labels {path} --label-column {args.label_column} --on {info['key']}"
        + (f" --score {score}" if score else "")
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return common.EXIT_OK
