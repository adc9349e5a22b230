"""`ragframe judge-bench --model M`: how well each metric agrees with people, on your judge.

Scores the human-labelled sets shipped with ragframe (`ragframe.decide.judge_bench`) and prints, per
set and metric, the agreement figures with their intervals (`ragframe.agreement`), and the
requests, tokens and cost the run took.
"""

from __future__ import annotations

import argparse
from typing import Any

from ragframe.cli import common, options
from ragframe.errors import RagframeError

EXIT_STATUSES = (
    "exit status: 0 done; 2 a configuration or endpoint error (one line says what to fix); "
    "130 interrupted (rerun to resume from the cache)"
)
HELP = "measure how well each metric agrees with human labels, on your judge"
SETS_HELP = "expertqa,begin,halueval,ragchecker"


#: The judge options a bench run honours, and what they say of it.
BENCH_JUDGE_OPTIONS = (
    "model",
    "base-url",
    "embedding-model",
    "concurrency",
    "timeout",
    "no-cache",
    "cache",
    "no-reasons",
    "no-progress",
    "price",
    "max-cost",
)
_BENCH_HELPS = {
    "model": "judge model (default $RAGFRAME_MODEL, else gpt-4o-mini when $OPENAI_API_KEY is "
    "set; with neither, the embedded local judge, whose figures are near chance)",
    "embedding-model": "embedding model for answer_correctness (default as for `ragframe score`)",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `judge-bench` to the `ragframe` parser's subparsers."""
    bench = options.subcommand(
        subparsers, "judge-bench", cmd_judge_bench, HELP, EXIT_STATUSES, description=__doc__
    )
    bench.add_argument(
        "--sets", default=SETS_HELP, help=f"comma-separated sets (default: {SETS_HELP})"
    )
    bench.add_argument(
        "--metrics",
        help="comma-separated metrics (default: every metric each set tests; see the docs)",
    )
    bench.add_argument(
        "--limit",
        type=common.positive_int,
        metavar="N",
        help="the first N rows (pairs for ragchecker) of each set; the files are ordered so "
        "that a prefix is a fair sample (default: all, 146 to 300 per set)",
    )
    options.add_output(bench, "write the agreement table to this Parquet file", required=False)
    bench.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the run would send and cost, then stop (nothing is sent)",
    )
    options.add_seed(bench, "cross-validation folds and bootstrap (default: 0)")
    bench.add_argument(
        "--folds",
        type=common.int_at_least(2),
        default=5,
        help="cross-validation folds (default: 5)",
    )
    options.add_level(bench, "interval level (default: 0.95)")
    options.add_judge_options(
        bench.add_argument_group("the judge"), BENCH_JUDGE_OPTIONS, helps=_BENCH_HELPS
    )
    return bench


def cmd_judge_bench(args: argparse.Namespace) -> int:
    """`ragframe judge-bench`; stops with the endpoint named when the judge cannot serve it."""

    from ragframe.decide import judge_bench as jb

    if args.limit is not None and args.limit < 1:
        raise RagframeError(f"--limit must be at least 1, got {args.limit}")
    if args.output:
        common.refuse_non_parquet_output(args.output)
        common.refuse_existing_output(args.overwrite, args.output)
    sets, metrics = common.parse_metrics(args.sets), None
    if args.metrics:
        metrics = common.parse_metrics(args.metrics)
    jb.plan(sets, metrics)  # unknown names are refused before a judge is made
    judge = options.judge_from_args(args)
    with common.endpoint_named(judge):
        if args.dry_run or args.max_cost is not None:
            guess = jb.estimate_bench(judge, sets, metrics, args.limit)
            print(jb.format_estimate(guess, judge.model))
            if args.dry_run:
                return common.EXIT_OK
            _refuse_over_budget(guess, args.max_cost)
        result = jb.run_bench(
            judge, sets, metrics, args.limit, level=args.level, seed=args.seed, folds=args.folds
        )
    print(jb.format_bench(result, args.level))
    if result.local:
        print(common.LOCAL_WARNING)
    if args.output:
        jb.write_results(result, args.output, overwrite=args.overwrite)
        print(f"wrote {args.output}")
    return common.EXIT_OK


def _refuse_over_budget(guess: Any, max_cost: float) -> None:
    costs = guess.get_column("cost_usd")
    if costs.null_count() == 0 and float(costs.sum()) > max_cost:
        raise RagframeError(
            f"the estimate ${float(costs.sum()):.4f} exceeds --max-cost ${max_cost:.4f}; "
            "nothing was sent"
        )
