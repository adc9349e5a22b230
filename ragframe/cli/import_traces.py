"""`ragframe import spans.jsonl --from openinference -o rows.parquet`: a trace export or another
tool's dataset turned into a Parquet log of ragframe's rows, in bounded memory (the rows are
written bucket by bucket, never held together), for `score --ray`, for a look before scoring,
or to keep."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragframe.cli import common, options
from ragframe.errors import RagframeError
from ragframe.inputs.traces import FORMATS

EXIT_STATUSES = (
    "exit status: 0 written; 2 an input or configuration error (an unknown or undetectable "
    "format, a file with no RAG turn, an output that exists; one line says what to fix). "
    "What formed no row is counted and listed on stderr"
)
HELP = (
    "read a trace export (OpenInference, OTLP JSON, LangSmith) or a ragas / deepeval dataset "
    "into ragframe's rows, written to Parquet"
)

__all__ = ["add_parser", "cmd_import", "write_rows"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `import` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(subparsers, "import", cmd_import, HELP, EXIT_STATUSES)
    parser.add_argument("input", help="the export or dataset file")
    parser.add_argument(
        "--from",
        dest="from_format",
        choices=(*FORMATS, "auto"),
        default="auto",
        help="its format (default: auto, detected where unambiguous)",
    )
    options.add_output(parser, "output Parquet file: one row per RAG turn")
    parser.add_argument(
        "--skipped",
        help="also write what formed no row (reason, trace_id, span_id, line) to this Parquet file",
    )
    return parser


def cmd_import(args: argparse.Namespace) -> int:
    """Write the rows (and, if asked, the skipped list) and say how many."""
    common.refuse_input_as_output(args.input, args.output, args.skipped)
    common.refuse_non_parquet_output(args.output)
    common.refuse_non_parquet_output(args.skipped)
    common.refuse_existing_output(args.overwrite, args.output, args.skipped)
    wrote = write_rows(
        args.input,
        args.from_format,
        Path(args.output),
        overwrite=args.overwrite,
        skipped_to=args.skipped,
    )
    print(f"wrote {wrote.rows} rows to {args.output}", file=sys.stderr)
    return common.EXIT_OK


def write_rows(
    source: str,
    from_format: str,
    out: Path,
    *,
    overwrite: bool = False,
    skipped_to: str | None = None,
) -> Any:
    """The export's rows written to `out` (a `TraceWrite`), what was skipped said on stderr
    (and written to `skipped_to` when given). Refuses, leaving no rows file, when the export
    holds no row to score."""
    from ragframe.inputs.traces import write_traces

    form = None if from_format == "auto" else from_format
    wrote = write_traces(source, out, form, overwrite=overwrite)  # type: ignore[arg-type]
    if wrote.skipped.height:
        print(f"ragframe: {source}: {wrote.skipped_summary()}", file=sys.stderr)
    if skipped_to:
        wrote.skipped.write_parquet(skipped_to)
    if wrote.rows == 0:
        out.unlink(missing_ok=True)
        raise RagframeError(f"{source!r} holds no RAG turn to score; see the skipped list")
    return wrote
