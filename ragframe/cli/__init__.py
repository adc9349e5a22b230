"""The `ragframe` command line, one module per subcommand.

Each subcommand module has `add_parser(subparsers)`, which adds its arguments and sets the
`handler` that runs it (`args` in, exit status out). What several subcommands share (exit
statuses, the `--columns` and `--metrics` parsers, the run summary, the one-line endpoint error)
is in `ragframe.cli.common`; the options several subcommands declare (the judge's, with
`judge_from_args`; the opening of a subcommand; --level, --seed, --output, --json / --csv) in
`ragframe.cli.options`; the human labels beside the judge's figures (`--labels`) in
`ragframe.cli.labels`. A new subcommand is a new module listed in `SUBCOMMANDS`.

Layer: the top; it may import every layer (the package root `ragframe/__init__.py` imports
nothing of it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ragframe._version import __version__
from ragframe.cli import (
    batch,
    calibrate,
    compare,
    export,
    gate,
    human,
    import_traces,
    judge_bench,
    jury,
    label_sheet,
    metrics,
    prefer,
    report,
    score,
    summarize,
)
from ragframe.cli.batch import cmd_batch
from ragframe.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    endpoint_error,
    format_summary,
    one_line,
    report_failed_metrics,
)
from ragframe.cli.score import cmd_score
from ragframe.errors import RagframeError

__all__ = [
    "build_parser",
    "cmd_batch",
    "cmd_score",
    "endpoint_error",
    "format_summary",
    "main",
    "one_line",
    "report_failed_metrics",
]

DESCRIPTION = (
    "Score RAG logs with an LLM judge, then decide: `ragframe score IN -o OUT.parquet`, "
    "`ragframe summarize` / `gate` / `compare` / `report` on scored files."
)
SUBCOMMANDS = (
    score,
    batch,
    summarize,
    gate,
    compare,
    prefer,
    jury,
    report,
    import_traces,
    export,
    calibrate,
    human,
    label_sheet,
    judge_bench,
    metrics,
)


def build_parser() -> argparse.ArgumentParser:
    """The `ragframe` parser, with every subcommand's arguments."""
    parser = argparse.ArgumentParser(prog="ragframe", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ragframe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `ragframe` command; the exit status (errors are printed on one line)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # a bad option: argparse printed why; --help/--version exit 0
        if stop.code in (0, None):
            raise
        return stop.code if isinstance(stop.code, int) else EXIT_ERROR
    handler = getattr(args, "handler", None)
    if handler is None:
        return EXIT_ERROR
    try:
        return int(handler(args))
    except RagframeError as err:
        print(f"ragframe: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "ragframe: interrupted. Answers received so far are in the cache; run the same "
            "command again to resume without paying for them twice.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
