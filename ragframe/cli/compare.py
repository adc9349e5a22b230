"""`ragframe compare A.parquet B.parquet --on id`: is run b better than run a, metric by metric."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from contextlib import redirect_stdout
from typing import Any

from ragframe.cli import common, labels, options
from ragframe.cli import gate as gate_cli
from ragframe.decide.ci_files import STDOUT
from ragframe.decide.compare import (
    Comparison,
    RegressionCheck,
    RegressionUnknownWarning,
    check_regression,
    compare,
)
from ragframe.decide.gates import EXIT_GATE_FAILED
from ragframe.errors import ConfigError

EXIT_STATUSES = (
    "exit status: 0 compared (whatever the verdicts), and with --fail-if-worse no metric named "
    "is worse (one too thin to tell is a warning); 1 with --fail-if-worse, b is worse than a "
    "on a metric named, over all rows or in a --by group (with --fail-if-unknown, also one "
    "that cannot tell); 2 a configuration or input error (a column neither file has, a "
    "--fail-if-worse metric a file lacks, duplicate keys, a labels file without the key or "
    "label column; one line says what to fix)"
)
HELP = (
    "compare two scored files: per metric the difference b - a with its interval, a p-value, "
    "wins / ties / losses, and the rows that changed most"
)
MARGIN_RULE = "a score difference from 0 up to 1 (e.g. 0.05)"


def margin_type(text: str) -> float:
    """An argparse type: --margin, 0 <= margin < 1 (a difference of scores in [0, 1])."""
    value = common.non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be {MARGIN_RULE}, got {text!r}")
    return value


margin_type.rule = MARGIN_RULE  # type: ignore[attr-defined]
margin_type.rejects = ("-1", "1", "1.5", "nan", "inf")  # type: ignore[attr-defined]

#: Characters of a verdict struct shown per changed row in the terminal.
_DETAIL_CHARS = 160


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `compare` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "compare", cmd_compare, HELP, EXIT_STATUSES)
    parser.add_argument("a", help="the baseline's scored file (Parquet, or JSON Lines / CSV)")
    parser.add_argument("b", help="the candidate's scored file; differences are b - a")
    parser.add_argument(
        "--on",
        help="key column(s) pairing the rows, comma-separated (e.g. id or id,run): a paired "
        "comparison, stronger than the default two-sample one; with --labels, the one key the "
        "labels join on (default there: id)",
    )
    parser.add_argument("--by", help="group column(s), comma-separated: one comparison per group")
    parser.add_argument(
        "--metrics", help="score columns, comma-separated (default: every metric both have)"
    )
    options.add_level(parser)
    options.add_seed(parser, "bootstrap and permutation seed (default: 0)")
    options.add_shown(
        parser, "--changed", 3, "most-changed rows shown per metric (default: 3; --json carries 10)"
    )
    regression = parser.add_argument_group(
        "regression check (exit status 1 when b is worse than a on a metric named)"
    )
    regression.add_argument(
        "--fail-if-worse",
        metavar="METRIC,...",
        help="exit 1 when b is worse than a on one of these metrics: the interval of b - a "
        "wholly below -MARGIN (above +MARGIN for a lower-is-better metric such as "
        "hallucination) and p < 1 - level; one line per metric says which. Checked over all "
        "rows and, with --by, in each group: any worse fails. b's rows that failed to score "
        "count as the worst score (0; 1 when lower is better), as gates count them",
    )
    regression.add_argument(
        "--ignore-failed",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="leave b's rows that failed to score out of the check instead of counting them "
        "as the worst score (--no-ignore-failed undoes the configuration file's)",
    )
    regression.add_argument(
        "--fail-if-unknown",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="exit 1 also when the check cannot tell: no interval, or so few rows that p "
        "cannot reach 1 - level (5 pairs at 95%%); by default a warning "
        "(--no-fail-if-unknown undoes the configuration file's)",
    )
    regression.add_argument(
        "--margin",
        type=margin_type,
        default=0.0,
        help="fail only on a drop of at least this much (a score difference, e.g. 0.05; "
        "default: 0, any drop the interval shows)",
    )
    gate_cli.add_ci_file_options(
        regression,
        "metric named by --fail-if-worse (and group)",
        json=False,
        failure="the difference b - a, its interval and p",
        then="",
    )
    labels.add_label_options(parser, pair=True)
    parser.add_argument(
        "--pairs",
        metavar="FILE",
        help="the pairwise verdicts of the same two runs (`ragframe prefer A B -o FILE`): B's "
        "win rate, position consistency and first-position preference beside the scores'",
    )
    options.add_format(
        parser,
        json="print everything as JSON (with --labels, the paired human estimate's rows under "
        '"human_estimate"; with --fail-if-worse, the check under "regression")',
        csv="print the table as CSV (warnings, and with --labels the human estimate's line, go "
        "to stderr)",
    )
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare, print, exit 0 (a difference is a finding, not a failure); with --labels, the
    paired human estimate b - a (PPI++) after the table."""
    fail = common.parse_metrics(args.fail_if_worse) if args.fail_if_worse else []
    files = _regression_options(args, fail)
    settings: dict[str, Any] = {
        "on": common.parse_metrics(args.on) if args.on else None,
        "by": common.parse_metrics(args.by) if args.by else None,
        "level": args.level,
        "seed": args.seed,
        "changed": max(args.changed, 10) if args.json else args.changed,
    }
    metrics = common.parse_metrics(args.metrics) if args.metrics else None
    regression: RegressionCheck | None = None
    if fail:
        with warnings.catch_warnings():  # the check's own ⚠️ line says it, printed below
            warnings.simplefilter("ignore", RegressionUnknownWarning)
            regression = check_regression(
                args.a,
                args.b,
                fail,
                margin=args.margin,
                compared=metrics,
                ignore_failed=args.ignore_failed,
                fail_if_unknown=args.fail_if_unknown,
                **settings,
            )
        found = regression.comparison
    else:
        found = compare(args.a, args.b, metrics=metrics, **settings)
    if STDOUT in files.values():  # the Markdown on stdout, everything else on stderr
        with redirect_stdout(sys.stderr):
            _print(args, found, regression)
    else:
        _print(args, found, regression)
    if regression is not None:
        regression.write(**files)
        return common.EXIT_OK if regression.passed else EXIT_GATE_FAILED
    return common.EXIT_OK


def _regression_options(args: argparse.Namespace, fail: list[str]) -> dict[str, str]:
    """The CI files asked for, checked; the options that need --fail-if-worse refused
    without it."""
    files = gate_cli.ci_file_paths(args)
    if not fail:
        if args.margin:
            raise ConfigError("--margin applies to --fail-if-worse: name the metrics too")
        for flag in ("ignore_failed", "fail_if_unknown"):
            if getattr(args, flag):
                name = "--" + flag.replace("_", "-")
                raise ConfigError(f"{name} applies to --fail-if-worse: name the metrics too")
        if files:
            named = " / ".join(f"--{k}" for k in files)
            raise ConfigError(
                f"{named} writes the regression check's results: add --fail-if-worse METRIC"
            )
        return {}
    if STDOUT in files.values() and (args.json or args.csv):
        raise ConfigError("--markdown - and --json / --csv all print to stdout: choose one")
    return files


def _print(args: argparse.Namespace, found: Comparison, regression: RegressionCheck | None) -> None:
    """What `ragframe compare` prints: the comparison (table, JSON or CSV), then the
    regression check's lines."""
    human = None
    if args.labels:
        human = labels.pair_estimate(args, list(dict.fromkeys(found.table["metric"].to_list())))
    pairs = _pairs(args.pairs, args.level, args.seed) if args.pairs else None
    if args.json:
        out = found.to_dict()
        if regression is not None:
            out["regression"] = regression.to_dict()
        if human is not None:
            out["human_estimate"] = human.to_dicts()
        if pairs is not None:
            out["pairwise"] = pairs.to_dicts()
        print(json.dumps(out, default=str, ensure_ascii=False, indent=2))
    elif args.csv:
        sys.stdout.write(found.table.write_csv())
        for warning in found.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if human is not None:
            print(labels.difference_line(human), file=sys.stderr)
    else:
        print(found)
        print(changed_text(found, args.changed))
        if human is not None:
            print(f"\nbeside the judge's figures, what people would say (--labels {args.labels}):")
            print(labels.difference_line(human))
        if pairs is not None:
            from ragframe.decide.pairwise import format_pairs

            print(
                f"\nthe judge asked which answer is better, in both orders (--pairs {args.pairs}):"
            )
            print(format_pairs(pairs))
    if regression is None:
        return
    if args.json or args.csv:  # stdout holds the JSON or CSV (JSON: the check too)
        print(str(regression), file=sys.stderr)
    else:
        print(f"\nis b worse than a? (--fail-if-worse, {regression.level:.0%} intervals)")
        print(regression)


def _pairs(path: str, level: float, seed: int) -> Any:
    """The pairwise summary of `ragframe prefer`'s output file."""
    import polars as pl

    from ragframe.decide.pairwise import summarize_pairs

    return summarize_pairs(pl.read_parquet(path), level=level, seed=seed)


def changed_text(found: Comparison, limit: int) -> str:
    """The `limit` most-changed pairs per metric, one line each (keys, a -> b, the start of
    b's verdicts); the unmatched keys, a few."""
    lines: list[str] = []
    for metric, frame in found.changed.items():
        if not frame.height or limit <= 0:
            continue
        lines += ["", f"{metric}: rows that changed most (b - a)"]
        for row in frame.head(limit).iter_rows(named=True):
            key = ", ".join(f"{k}={row[k]!r}" for k in found.on)
            lines.append(
                f"  {key}: {row[f'{metric}_a']:.3f} -> {row[f'{metric}_b']:.3f} "
                f"({row['diff']:+.3f})"
            )
            detail = row.get(f"{metric}_detail_b")
            if detail is not None:
                text = json.dumps(detail, default=str, ensure_ascii=False)
                cut = text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."
                lines.append(f"    b: {cut}")
    if found.unmatched.height:
        shown = found.unmatched.head(10)
        lines += ["", f"unmatched keys ({found.unmatched.height}; first {shown.height}):"]
        lines += [
            f"  only in {row['side']}: " + ", ".join(f"{k}={row[k]!r}" for k in found.on)
            for row in shown.iter_rows(named=True)
        ]
    return "\n".join(lines)
