"""`ragframe jury combine A.parquet B.parquet C.parquet -o jury.parquet`: a jury of runs scored
apart, one judge each (the Batch API, Ray, another day), combined as `ragframe score --jury`
combines the judges of one run; `ragframe jury claims A.parquet -o shared.parquet`: the lead's
inputs with its extracted claims, the input of the other judges so that the jury votes on
each claim (`ragframe.decide.jury_of_runs`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ragframe.cli import common, options
from ragframe.metrics.thresholds import parse_metric_values

__all__ = ["add_parser", "cmd_jury"]

HELP = "combine runs scored apart, one judge each, into a jury (or give the others its claims)"
#: The runs must hold the same rows in the same order, or nothing is written.
EXIT_STATUSES = "exit status: 0 written; 2 a configuration or input error, on one line"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `jury` and its subcommands to the `ragframe` parser's subparsers."""
    parser = options.subcommand(
        subparsers, "jury", cmd_jury, HELP, EXIT_STATUSES, description=__doc__
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="{combine,claims}")
    combine = steps.add_parser(
        "combine",
        help="the jury of scored runs (the lead first)",
        epilog=EXIT_STATUSES,
    )
    combine.add_argument(
        "runs", nargs="+", metavar="RUN", help="scored Parquet files, one per judge"
    )
    combine.add_argument(
        "--names", help="the judges' names, comma-separated (default: each file's model)"
    )
    combine.add_argument(
        "--aggregate",
        choices=("mean", "median"),
        default="mean",
        help="how the jury combines scores where the judges do not vote on shared items "
        "(default: mean)",
    )
    combine.add_argument(
        "--threshold",
        metavar="METRIC=VALUE,...",
        help="pass thresholds for the jury's score (default: those the lead's file records)",
    )
    combine.add_argument("--strict", metavar="METRIC,...", help="strict mode for these metrics")
    options.add_output(combine, "output Parquet file of the jury")
    claims = steps.add_parser(
        "claims",
        help="the lead's inputs with its faithfulness claims, for the other judges",
        epilog=EXIT_STATUSES,
    )
    claims.add_argument("lead", help="the lead judge's scored Parquet file (with faithfulness)")
    options.add_output(claims, "output Parquet file: the other judges' input")
    return parser


def cmd_jury(args: argparse.Namespace) -> int:
    """Write the jury (and print its summary), or the other judges' input."""
    from ragframe.decide.jury_of_runs import claims_for_others, combine_runs
    from ragframe.inputs.io import write_parquet

    common.refuse_non_parquet_output(args.output)
    if args.step == "claims":
        common.refuse_input_as_output(args.lead, args.output)
        shared = claims_for_others(args.lead)
        write_parquet(
            shared, args.output, {"jury_claims_of": str(args.lead)}, overwrite=args.overwrite
        )
        with_claims = shared.get_column("claims").is_not_null().sum()
        print(
            f"wrote {args.output}: {shared.height} rows, {with_claims} with the lead's claims "
            "(the others extract their own where the lead has none)"
        )
        return common.EXIT_OK
    for run in args.runs:
        common.refuse_input_as_output(run, args.output)
    jury = combine_runs(
        args.runs,
        names=common.parse_metrics(args.names) if args.names else None,
        aggregate=args.aggregate,
        thresholds=parse_metric_values(args.threshold, "--threshold"),
        strict=common.parse_metrics(args.strict) if args.strict else None,
    )
    jury.write_parquet(args.output, overwrite=args.overwrite)
    print(common.format_summary(jury.summary, False))
    if jury.summary.get("runs_without_totals"):
        print(
            f"{jury.summary['runs_without_totals']} of the runs record no totals: their "
            "requests and cost are not counted above"
        )
    print(f"wrote {args.output}")
    return common.EXIT_OK
