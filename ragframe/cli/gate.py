"""`ragframe gate scored.parquet --fail-under faithfulness=0.8`: CI gates on a scored file, with
no request sent; and the same options for `ragframe score` (`add_gate_options`, `gate_exit`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from ragframe.cli import common, options
from ragframe.decide.ci_files import STDOUT, CiFiles, check_paths
from ragframe.decide.gates import EXIT_GATE_FAILED, GateResult, check_gates
from ragframe.errors import ConfigError
from ragframe.metrics.thresholds import parse_metric_values

EXIT_STATUSES = (
    "exit status: 0 every gate passed; 1 a gate failed (the table says which, with the worst "
    "rows and their reasons); 2 a configuration or input error (no gate given, a metric the "
    "file does not have, a --junit / --json / --markdown file that cannot be written; one line "
    "says what to fix). The --junit / --json / --markdown files are written whether the gates "
    "pass or fail. Nothing is ever sent to a judge"
)
HELP = (
    "check a scored file against CI gates (minimum means, minimum pass rates); exit 1 when "
    "one fails"
)

__all__ = [
    "CI_FILES",
    "add_ci_file_options",
    "add_gate_options",
    "add_parser",
    "check_gate_options",
    "cmd_gate",
    "gate_exit",
    "write_ci_files",
]

#: The CI file options: argparse dest -> option (the dests a configuration file sets too).
CI_FILES = {"junit": "--junit", "json_out": "--json", "markdown": "--markdown"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `gate` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "gate", cmd_gate, HELP, EXIT_STATUSES)
    parser.add_argument("scored", help="a scored file (Parquet as `ragframe score` writes it)")
    add_gate_options(parser)
    return parser


def add_gate_options(parser: argparse.ArgumentParser, *, thresholds: bool = True) -> None:
    """Add --fail-under, --min-pass-rate, --ignore-failed, --worst (and --threshold, --strict
    unless `thresholds=False`, for a parser that has its own) to `parser`."""
    group = parser.add_argument_group("gates (exit status 1 when one fails)")
    group.add_argument(
        "--fail-under",
        metavar="METRIC=MEAN,...",
        help="fail when a metric's mean is worse than this: below it, or above it for a "
        "lower-is-better metric such as hallucination (e.g. faithfulness=0.8)",
    )
    group.add_argument(
        "--min-pass-rate",
        metavar="METRIC=RATE,...",
        help="fail when the share of rows passing the metric's threshold is below this "
        "(e.g. faithfulness=0.9)",
    )
    if thresholds:
        group.add_argument(
            "--threshold",
            metavar="METRIC=VALUE,...",
            help="the score a row must reach to pass, for --min-pass-rate (default: the "
            "threshold the file records, else its METRIC_pass column, else 0.5)",
        )
        group.add_argument(
            "--strict",
            metavar="METRIC,...",
            help="strict mode for these metrics: a row passes only with a perfect score "
            "(1, or 0 for a lower-is-better metric)",
        )
    group.add_argument(
        "--ignore-failed",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="leave rows that failed to score out of the gates (by default they count: as "
        "failing rows in a pass rate, as the worst score in a mean); --no-ignore-failed "
        "undoes a configuration file's ignore_failed = true",
    )
    options.add_shown(
        group, "--worst", 5, "worst rows listed per failing gate, with their reasons (default: 5)"
    )
    add_ci_file_options(group, "gate", json=True)


def add_ci_file_options(
    group: Any,
    what: str,
    *,
    json: bool,
    failure: str = "the figure, the interval and the worst rows",
    then: str = ", then the worst rows",
) -> None:
    """--junit FILE, --markdown FILE (and --json FILE when `json`): the results as CI files,
    written whether the checks pass or fail; `what` names a check ("gate"), `failure` what a
    failed one's JUnit failure lists, `then` what the Markdown adds after its table."""
    group.add_argument(
        "--junit",
        metavar="FILE",
        help=f"write the results as JUnit XML, one test case per {what} (a failure lists "
        f"{failure}), for a CI's test report; written whether they pass or fail",
    )
    if json:
        group.add_argument(
            "--json",
            dest="json_out",
            metavar="FILE",
            help=f"write the results as JSON: `passed`, and per {what} its figures and worst rows",
        )
    group.add_argument(
        "--markdown",
        metavar="FILE",
        help=f"write a GitHub-flavoured Markdown table, one row per {what} with ✅ / ❌{then} "
        "(e.g. for $GITHUB_STEP_SUMMARY); '-' prints it instead of the usual table (which "
        "then goes to stderr)",
    )


def ci_file_paths(args: argparse.Namespace) -> dict[str, str]:
    """The CI files asked for, by kind ("junit", "json", "markdown"), checked: no path twice."""
    given = {
        option.lstrip("-"): str(getattr(args, dest))
        for dest, option in CI_FILES.items()
        if getattr(args, dest, None)
    }
    check_paths(given)
    for name in ("scored", "input", "output", "a", "b"):  # the files a command reads or writes
        other = getattr(args, name, None)
        if isinstance(other, str) and other:
            taken = [p for p in given.values() if p != STDOUT]
            if any(Path(p).resolve() == Path(other).resolve() for p in taken):
                raise ConfigError(
                    f"--junit / --json / --markdown would overwrite {other!r}, a file this "
                    "command reads or writes: give the CI file its own path"
                )
    return given


def write_ci_files(args: argparse.Namespace, result: CiFiles) -> None:
    """Write the CI files asked for (nothing when none was); a printed one ('-') goes to
    stdout, so the caller prints its usual table to stderr."""
    given = ci_file_paths(args)
    if given:
        result.write(**given)


def show(args: argparse.Namespace, result: Any) -> None:
    """Print `result`'s table and write the CI files; the table to stderr when a CI file is
    printed ('-'), so stdout holds that file alone."""
    printed = STDOUT in ci_file_paths(args).values()
    if printed:
        with redirect_stdout(sys.stderr):
            print(result)
    else:
        print(result)
    write_ci_files(args, result)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The gate options given, parsed and checked (ConfigError on a malformed one)."""
    strict = getattr(args, "strict", None)
    if strict is not None and not isinstance(strict, str | list | tuple):
        raise ConfigError("--strict expects metric names, e.g. --strict faithfulness,hallucination")
    names = common.parse_metrics(strict) if isinstance(strict, str) else list(strict or [])
    threshold = getattr(args, "threshold", None)
    return {
        "fail_under": parse_metric_values(getattr(args, "fail_under", None), "--fail-under"),
        "min_pass_rate": parse_metric_values(
            getattr(args, "min_pass_rate", None), "--min-pass-rate"
        ),
        "thresholds": parse_metric_values(threshold, "--threshold")
        if isinstance(threshold, str)
        else dict(threshold or {}),
        "strict": names,
        "ignore_failed": bool(getattr(args, "ignore_failed", False)),
    }


def check_gate_options(args: argparse.Namespace, metrics: Iterable[str]) -> None:
    """Before a run: the gate options parse, and every metric they gate is one the run
    scores (so a typo is refused before anything is sent, not after paying for the run)."""
    options = _options(args)
    files = ci_file_paths(args)
    if files and not (options["fail_under"] or options["min_pass_rate"]):
        named = " / ".join(f"--{k}" for k in files)
        raise ConfigError(
            f"{named} writes the gates' results, but no gate is given: add --fail-under "
            "METRIC=MEAN and/or --min-pass-rate METRIC=RATE"
        )
    if STDOUT in files.values():
        raise ConfigError(
            "'-' (stdout) is for `ragframe gate`: `ragframe score` prints its summary there; "
            "give --junit / --json / --markdown a file"
        )
    wanted = list(metrics)
    gated = [*options["fail_under"], *options["min_pass_rate"]]
    unknown = [m for m in dict.fromkeys(gated) if m not in wanted]
    if unknown:
        raise ConfigError(
            f"--fail-under / --min-pass-rate name {unknown}, which this run does not score; "
            f"its metrics are {wanted}"
        )


def gate_exit(args: argparse.Namespace, scored: Any) -> int | None:
    """Apply the gate options to `scored` (a path or a frame) and print the table (--worst
    rows per failing gate); the exit status (0 passed, EXIT_GATE_FAILED), or None when no
    gate option was given."""
    options = _options(args)
    if not options["fail_under"] and not options["min_pass_rate"]:
        return None
    result = check_gates(scored, worst=getattr(args, "worst", 5), **options)
    show(args, result)
    return common.EXIT_OK if result.passed else EXIT_GATE_FAILED


def run_gates(args: argparse.Namespace) -> GateResult:
    """`ragframe gate`'s check: at least one gate, else a ConfigError."""
    options = _options(args)
    if not options["fail_under"] and not options["min_pass_rate"]:
        raise ConfigError(
            "no gate given: add --fail-under METRIC=MEAN and/or --min-pass-rate METRIC=RATE, "
            "e.g. --fail-under faithfulness=0.8"
        )
    return check_gates(args.scored, worst=args.worst, **options)


def cmd_gate(args: argparse.Namespace) -> int:
    """Check, print the table, exit 0 when every gate passed and 1 when one failed."""
    if args.worst < 0:
        raise ConfigError(f"--worst must be 0 or more, got {args.worst}")
    ci_file_paths(args)  # a bad path is refused before the file is read
    result = run_gates(args)
    show(args, result)
    return common.EXIT_OK if result.passed else EXIT_GATE_FAILED
