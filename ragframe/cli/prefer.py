"""`ragframe prefer A.parquet B.parquet --on id --criteria faithfulness -o pairs.parquet`: which
of two runs answered each question better, judged pair by pair in both orders.

The two logs are joined on `--on`; the question, contexts and ground truth come from A (B's
are checked against them, and rows where they differ are reported), each log's `answer`
becomes answer_a / answer_b. Writes the per-pair verdicts (`ragframe.metrics.pairwise`) and
prints the summary (`ragframe.decide.pairwise`): B's win rate, the position consistency and
the first-position preference, each with its interval and n.
"""

from __future__ import annotations

import argparse
from typing import Any

import polars as pl

from ragframe.cli import common, options
from ragframe.errors import InputError

EXIT_STATUSES = (
    "exit status: 0 judged; 2 a configuration, input or endpoint error (one line says what to "
    "fix; nothing is sent when it can be known before the first request); 130 interrupted "
    "(rerun to resume from the cache: both orders of every judged pair are kept there)"
)
HELP = "judge two runs' answers pair by pair (both orders) and report B's win rate"
#: Inputs taken from A (and checked against B) when the criteria read them.
SHARED = ("question", "contexts", "ground_truth")

__all__ = ["add_parser", "cmd_prefer", "join_runs"]


#: The judge options of `ragframe score` that a pairwise run honours, under the same names.
PREFER_JUDGE_OPTIONS = (
    "model",
    "base-url",
    "concurrency",
    "timeout",
    "cache",
    "no-cache",
    "no-reasons",
    "no-progress",
    "fail-fast",
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `prefer` to the `ragframe` parser's subparsers."""
    parser = options.subcommand(
        subparsers, "prefer", cmd_prefer, HELP, EXIT_STATUSES, description=__doc__
    )
    parser.add_argument("a", help="run A's log (Parquet, JSON Lines or CSV)")
    parser.add_argument("b", help="run B's log, with the same questions")
    parser.add_argument(
        "--on", required=True, help="key column(s) joining A and B, comma-separated"
    )
    parser.add_argument(
        "--criteria",
        default="answer_correctness",
        help="faithfulness, answer_relevancy, answer_correctness (default), or your own text",
    )
    parser.add_argument(
        "--inputs",
        help="with your own criteria: what the judge sees besides the answers, comma-separated "
        "(question, contexts, ground_truth; default: question)",
    )
    parser.add_argument("--name", help="the score column (default: pairwise_CRITERIA)")
    options.add_output(parser, "output Parquet file of pairs")
    options.add_level(parser, "interval level (0.95)")
    options.add_seed(parser, "bootstrap seed (default: 0)")
    options.add_judge_options(parser.add_argument_group("the judge"), PREFER_JUDGE_OPTIONS)
    return parser


def _read(path: str) -> pl.DataFrame:
    """A log with its inputs under canonical names (ragas / deepeval aliases accepted)."""
    from ragframe.inputs.columns import canonical_names, load_frame

    frame = load_frame(path)
    mapping = canonical_names(frame.columns)
    return frame.rename({src: name for name, src in mapping.items() if src != name})


def join_runs(
    a: pl.DataFrame, b: pl.DataFrame, on: list[str], inputs: tuple[str, ...]
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """One row per key found in both runs: the key, A's `inputs`, answer_a and answer_b; and
    what the join left out or found different (`only_a`, `only_b`, `mismatched`: per input,
    the keys whose value in B differs from A's)."""
    for side, frame, wanted in (("A", a, (*on, "answer", *inputs)), ("B", b, (*on, "answer"))):
        need = [c for c in wanted if c not in frame.columns]
        if need:
            raise InputError(f"run {side} has no column {need}; its columns: {frame.columns}")
        repeated = frame.select(on).is_duplicated().sum()
        if repeated:
            raise InputError(
                f"run {side}: {repeated} rows share a key {on}; --on must name each question once"
            )
    shared = [c for c in inputs if c in b.columns]
    left = a.select(*on, *inputs, pl.col("answer").alias("answer_a"))
    right = b.select(
        *on, *(pl.col(c).alias(f"{c}__b") for c in shared), pl.col("answer").alias("answer_b")
    )
    joined = left.join(right, on=on, how="inner", maintain_order="left")
    report: dict[str, Any] = {
        "only_a": a.height - joined.height,
        "only_b": b.height - joined.height,
        "mismatched": {},
    }
    for c in shared:
        differs = joined.filter(pl.col(c).ne_missing(pl.col(f"{c}__b")))
        if differs.height:
            report["mismatched"][c] = differs.select(on).rows()
    return joined.drop([f"{c}__b" for c in shared]), report


def cmd_prefer(args: argparse.Namespace) -> int:
    """Join, judge both orders of every pair, write the pairs, print the summary. The
    options and the judge are checked before either run is read: a refusal reads nothing."""
    common.refuse_existing_output(args.overwrite, args.output)
    common.refuse_input_as_output(args.a, args.output)
    common.refuse_input_as_output(args.b, args.output)
    common.refuse_non_parquet_output(args.output)
    from ragframe.metrics.pairwise import Pairwise

    inputs = common.parse_metrics(args.inputs) if args.inputs else None
    metric = Pairwise(args.criteria, inputs=inputs, name=args.name)
    on = common.parse_metrics(args.on)
    judge = options.judge_from_args(args)
    pairs, report = join_runs(_read(args.a), _read(args.b), on, metric.inputs)
    for line in _join_lines(report, on):
        print(line)
    if pairs.height == 0:
        raise InputError(f"no key {on} is in both runs: nothing to judge")
    with common.endpoint_named(judge):
        return _prefer(args, judge, metric, pairs)


def _prefer(args: argparse.Namespace, judge: Any, metric: Any, pairs: pl.DataFrame) -> int:
    import datetime as dt

    from ragframe._version import __version__
    from ragframe.decide.pairwise import format_pairs, summarize_pairs
    from ragframe.inputs.io import write_parquet
    from ragframe.metrics.pairwise import run_pairs

    out, stats = run_pairs(pairs, metric, judge=judge)
    table = summarize_pairs(out, metric.name, level=args.level, seed=args.seed)
    metadata = {
        "ragframe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "judge": judge.describe(),
        "pairwise": {
            "a": str(args.a),
            "b": str(args.b),
            "on": args.on,
            "metric": metric.name,
            "config": metric.config(),
            "prompt_hash": metric.task.prompt_hash,
            "summary": table.to_dicts(),
        },
    }
    write_parquet(out, args.output, metadata, overwrite=args.overwrite)
    print(format_pairs(table))
    print(f"requests {stats.requests} (cache hits {stats.cache_hits}); wrote {args.output}")
    return common.EXIT_OK


def _join_lines(report: dict[str, Any], on: list[str]) -> list[str]:
    lines = []
    if report["only_a"] or report["only_b"]:
        lines.append(
            f"joined on {','.join(on)}: {report['only_a']} rows only in A and "
            f"{report['only_b']} only in B are left out"
        )
    for column, keys in report["mismatched"].items():
        shown = ", ".join(str(k[0] if len(k) == 1 else k) for k in keys[:5])
        more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        lines.append(
            f"warning: {column} differs between A and B for {len(keys)} pairs ({shown}{more}); "
            "A's is shown to the judge"
        )
    return lines
