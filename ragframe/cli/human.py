"""`ragframe human-estimate scored.parquet --labels to_label.csv --label-column faithful --on id`:
the mean human label over the whole log (PPI++), beside the judge's mean and the labels' own,
with n labelled, N scored and the method, then how many labels a target width needs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import polars as pl

from ragframe.cli import common, options
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

__all__ = ["add_parser", "cmd_human_estimate", "format_table"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `human-estimate` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(
        subparsers, "human-estimate", cmd_human_estimate, HELP, EXIT_STATUSES
    )
    parser.add_argument("scored", help=options.SCORED_HELP)
    add_label_options(parser, required=True)
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


def add_label_options(parser: Any, *, required: bool = False) -> None:
    """`--labels FILE` and `--label-column NAME`: the human labels, here and beside the
    judge's figures in `summarize` and `compare`."""
    parser.add_argument(
        "--labels",
        required=required,
        metavar="FILE",
        help="the labels: a filled label sheet (CSV) or a Parquet / JSON Lines file",
    )
    parser.add_argument(
        "--label-column", default="faithful", help="the label column, 0 / 1 (default: faithful)"
    )


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
        args.scored, args.labels, args.score, args.label_column, args.on, calibration=calibration
    )
    if y.size >= 3:
        print(power_line(labels_needed(args.width, y, f, n_scored=big_n, level=args.level)))
    return common.EXIT_OK


def power_line(plan: dict[str, Any]) -> str:
    """The labels-needed figure as one sentence, with what it rests on."""
    width = plan["width"]
    rests = (
        f"from the judge's correlation with the labels, {plan['correlation']:.2f} on "
        f"{plan['n_batch']} labelled rows"
    )
    if plan["n_needed"] is None:
        return (
            f"labels for a {plan['level']:.0%} interval of width {width:g}: out of reach with "
            f"N = {plan['n_scored']} scored rows ({rests})"
        )
    return (
        f"labels for a {plan['level']:.0%} interval of width {width:g} (+-{width / 2:g}): about "
        f"{plan['n_needed']} with the judge's scores, {plan['n_labels_only']} from labels alone "
        f"({rests}; a planning figure)"
    )


def format_table(table: pl.DataFrame, groups: list[str] | None = None) -> str:
    """The estimates for a terminal: one line per (group and) method, then what they rest on."""
    groups = list(groups or [])
    level = table["level"][0] if table.height else 0.95
    headers = [*groups, "method", "estimate", f"{level:.0%} interval", "n labelled", "N scored"]
    rows = []
    for r in table.iter_rows(named=True):
        interval = "-" if r["ci_low"] is None else f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        rows.append(
            [
                *("(null)" if r[g] is None else str(r[g]) for g in groups),
                r["method"],
                "-" if r["estimate"] is None else f"{r['estimate']:.3f}",
                interval,
                str(r["n_labelled"]),
                str(r["n_scored"]),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        for cells in [headers, ["-" * w for w in widths], *rows]
    ]
    for r in table.iter_rows(named=True):
        where = " ".join(str(r[g]) for g in groups)
        prefix = f"{where}: " if where else ""
        if r["method"] == "ppi++" and r["effective_n"] is not None:
            out.append(
                f"{prefix}ppi++ (lam {r['lam']:.2f}): the judge's scores are worth "
                f"{r['effective_n']:.0f} labels for {r['n_labelled']} labelled"
            )
        if r["method"] == "judge_only" and r["bias"] is not None:
            out.append(
                f"{prefix}judge bias on the labelled rows: {r['bias']:+.3f} "
                f"[{r['bias_ci_low']:+.3f}, {r['bias_ci_high']:+.3f}] (judge - label)"
            )
    notes = sorted({n for n in table["note"].to_list() if n})
    out.extend(f"note: {n}" for n in notes)
    out.append(
        f"metric {table['metric'][0]}, label {table['label'][0]}; quote ppi++ (see "
        "ragframe.decide.human)"
        if table.height
        else "no rows"
    )
    return "\n".join(out)
