"""`ragframe judge-bench --model M`: how well each metric agrees with people, on your judge.

Scores the human-labelled sets shipped with ragframe (`ragframe.decide.judge_bench`) and prints, per
set and metric, the agreement figures with their intervals (`ragframe.agreement`), and the
requests, tokens and cost the run took.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ragframe.cli import common
from ragframe.errors import RagframeError
from ragframe.judge.cache import default_cache_path

EXIT_STATUSES = (
    "exit status: 0 done; 2 a configuration or endpoint error (one line says what to fix); "
    "130 interrupted (rerun to resume from the cache)"
)
SETS_HELP = "expertqa,begin,halueval,ragchecker"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `judge-bench` to the `ragframe` parser's subparsers."""
    bench = subparsers.add_parser(
        "judge-bench",
        help="measure how well each metric agrees with human labels, on your judge",
        description=__doc__,
        epilog=EXIT_STATUSES,
    )
    bench.set_defaults(handler=cmd_judge_bench)
    bench.add_argument(
        "--model",
        help="judge model (default $RAGFRAME_MODEL, else gpt-4o-mini when $OPENAI_API_KEY is set; "
        "with neither, the embedded local judge, whose figures are near chance)",
    )
    bench.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    bench.add_argument(
        "--embedding-model",
        help="embedding model for answer_correctness (default as for `ragframe score`)",
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
    bench.add_argument("-o", "--output", help="write the agreement table to this Parquet file")
    bench.add_argument("--overwrite", action="store_true", help="replace an existing output")
    bench.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the run would send and cost, then stop (nothing is sent)",
    )
    bench.add_argument(
        "--seed",
        type=common.non_negative_int,
        default=0,
        help="cross-validation folds and bootstrap (default: 0)",
    )
    bench.add_argument(
        "--folds",
        type=common.int_at_least(2),
        default=5,
        help="cross-validation folds (default: 5)",
    )
    bench.add_argument(
        "--level", type=common.confidence_level, default=0.95, help="interval level (default: 0.95)"
    )
    bench.add_argument(
        "--concurrency",
        type=common.positive_int,
        default=16,
        help="HTTP requests in flight (default: 16)",
    )
    bench.add_argument(
        "--timeout",
        type=common.positive_float,
        default=120.0,
        help="seconds per request (default: 120)",
    )
    bench.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    bench.add_argument("--cache", help=f"cache file (default: {default_cache_path()})")
    bench.add_argument("--no-reasons", action="store_true", help="no reason per verdict")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    bench.add_argument(
        "--price", help="prompt,completion dollars per million tokens (default: ragframe.pricing)"
    )
    bench.add_argument(
        "--max-cost",
        type=common.non_negative_float,
        help="dollars: refuse a run whose estimate exceeds it, and stop one that spends it",
    )
    return bench


def _price(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    try:
        prompt_price, completion_price = (float(x) for x in text.split(","))
    except ValueError:
        raise RagframeError(f"--price expects two numbers like 0.15,0.60, got {text!r}") from None
    if not all(math.isfinite(x) and x >= 0 for x in (prompt_price, completion_price)):
        raise RagframeError(
            f"--price expects two finite dollar amounts 0 or more, like 0.15,0.60, got {text!r}"
        )
    return prompt_price, completion_price


def _judge(args: argparse.Namespace) -> Any:
    from ragframe.judge import Judge

    return Judge(
        args.model,
        base_url=args.base_url,
        embedding_model=args.embedding_model,
        concurrency=args.concurrency,
        timeout=args.timeout,
        cache=False if args.no_cache else (args.cache or True),
        progress=not args.no_progress,
        price=_price(args.price),
        max_cost=args.max_cost,
        reasons=False if args.no_reasons else None,
    )


def cmd_judge_bench(args: argparse.Namespace) -> int:
    """`ragframe judge-bench`; stops with the endpoint named when the judge cannot serve it."""
    from pathlib import Path

    from ragframe.decide import judge_bench as jb

    if args.limit is not None and args.limit < 1:
        raise RagframeError(f"--limit must be at least 1, got {args.limit}")
    if args.output:
        common.refuse_non_parquet_output(args.output)
        if Path(args.output).exists() and not args.overwrite:
            raise RagframeError(f"output {args.output!r} exists; add --overwrite to replace it")
    sets, metrics = common.parse_metrics(args.sets), None
    if args.metrics:
        metrics = common.parse_metrics(args.metrics)
    jb.plan(sets, metrics)  # unknown names are refused before a judge is made
    judge = _judge(args)
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
