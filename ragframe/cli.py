"""Command line: `ragframe score IN.parquet -o OUT.parquet --metrics ...`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ragframe.errors import RagframeError

LOCAL_WARNING = (
    "note: scored by the embedded local judge (SmolLM2-135M): fine for trying ragframe out, "
    "not for trustworthy scores. Point --base-url/--model at a real judge for that."
)


def _parse_columns(text: str | None) -> dict[str, str] | None:
    """`question=prompt,answer=output` -> {"question": "prompt", "answer": "output"}."""
    if not text:
        return None
    mapping: dict[str, str] = {}
    for part in text.split(","):
        canonical, sep, source = part.partition("=")
        if not sep or not canonical.strip() or not source.strip():
            raise RagframeError(
                f"--columns expects canonical=source pairs like question=prompt, got {part!r}"
            )
        mapping[canonical.strip()] = source.strip()
    return mapping


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragframe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    score = sub.add_parser("score", help="score a Parquet log and write the scored Parquet file")
    score.add_argument("input", help="input Parquet file")
    score.add_argument("-o", "--output", required=True, help="output Parquet file")
    score.add_argument(
        "--metrics",
        default="faithfulness,answer_relevancy,context_precision,context_recall",
        help="comma-separated metric names (default: the four core metrics)",
    )
    score.add_argument("--model", help="judge model (default $RAGFRAME_MODEL)")
    score.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    score.add_argument("--embedding-model", help="embedding model for answer_relevancy")
    score.add_argument("--columns", help="rename inputs: question=my_prompt,answer=my_output")
    score.add_argument("--concurrency", type=int, default=16, help="HTTP requests in flight")
    score.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    score.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    score.add_argument("--cache", help="cache file (default $RAGFRAME_CACHE or ~/.cache/ragframe)")
    score.add_argument("--overwrite", action="store_true", help="replace an existing output")
    score.add_argument("--fail-fast", action="store_true", help="stop at the first failed request")
    score.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    score.add_argument(
        "--chunk-rows",
        type=int,
        default=2000,
        help="rows read, scored and written at a time (memory is bounded by this, not the file)",
    )
    score.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate requests, tokens and cost without sending anything, then stop",
    )
    score.add_argument(
        "--max-cost",
        type=float,
        help="dollars: refuse a run whose estimate exceeds it, and stop one that spends it",
    )
    score.add_argument(
        "--price",
        help="prompt,completion dollars per million tokens (default: ragframe.pricing)",
    )
    from ragframe.cli_batch import add_batch_parser

    add_batch_parser(sub)
    return parser


def _judge(args: argparse.Namespace) -> Any:
    from ragframe.judge import Judge

    cache: Any = False if args.no_cache else (args.cache or True)
    price = None
    if args.price:
        try:
            prompt_price, completion_price = (float(x) for x in args.price.split(","))
        except ValueError:
            raise RagframeError(
                f"--price expects two numbers like 0.15,0.60, got {args.price!r}"
            ) from None
        price = (prompt_price, completion_price)
    return Judge(
        args.model,
        base_url=args.base_url,
        embedding_model=args.embedding_model,
        concurrency=args.concurrency,
        timeout=args.timeout,
        cache=cache,
        fail_fast=args.fail_fast,
        progress=not args.no_progress,
        price=price,
        max_cost=args.max_cost,
    )


def format_summary(summary: dict[str, Any], local: bool) -> str:
    """A plain-text table: one line per metric, then the run's requests and tokens."""
    lines = [f"{'metric':<38} {'mean':>7} {'scored':>7} {'failed':>7}"]
    for name, m in summary["metrics"].items():
        mean = "-" if m["mean"] is None else f"{m['mean']:.4f}"
        arrow = "(lower is better)" if m["direction"] == "lower" else ""
        lines.append(f"{name:<38} {mean:>7} {m['scored']:>7} {m['failed']:>7} {arrow}".rstrip())
    lines.append("")
    lines.append(
        f"rows {summary['rows']}  |  requests {summary['requests']} "
        f"(cache hits {summary['cache_hits']}, deduplicated {summary['deduplicated']})  |  "
        f"tokens {summary['prompt_tokens']} prompt + {summary['completion_tokens']} completion"
        f"  |  {summary['seconds']:.1f} s"
    )
    if summary.get("cost_usd") is not None:
        lines.append(f"cost ${summary['cost_usd']:.4f} (requests sent in this run)")
    if summary["retries"]:
        lines.append(
            "retries by cause: " + ", ".join(f"{k} {v}" for k, v in summary["retries"].items())
        )
    if summary["failures"]:
        lines.append(
            "failed requests by cause: "
            + ", ".join(f"{k} {v}" for k, v in summary["failures"].items())
        )
    if local:
        lines.append(LOCAL_WARNING)
    return "\n".join(lines)


def cmd_score(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ragframe.metrics import resolve
    from ragframe.stream import score_file

    if Path(args.output).exists() and not args.overwrite:
        raise RagframeError(f"output {args.output!r} exists; add --overwrite to replace it")
    if Path(args.output).resolve() == Path(args.input).resolve():
        raise RagframeError("the output must not be the input file; the input is never written")
    metrics = resolve([m for m in args.metrics.split(",") if m.strip()])
    judge = _judge(args)
    columns = _parse_columns(args.columns)
    if args.chunk_rows < 1:
        raise RagframeError(f"--chunk-rows must be at least 1, got {args.chunk_rows}")
    if args.dry_run or args.max_cost is not None:
        from ragframe.evaluate import estimate

        guess = estimate(
            args.input, metrics, judge=judge, columns=columns, chunk_rows=args.chunk_rows
        )
        dollars = "unknown price" if guess["cost_usd"] is None else f"${guess['cost_usd']:.4f}"
        print(
            f"estimate: {guess['requests']} requests, {guess['prompt_tokens']} prompt + "
            f"{guess['completion_tokens']} completion tokens, {dollars} for {guess['rows']} rows "
            f"on {guess['model']} (cached answers are free and not counted)"
        )
        if args.dry_run:
            return 0
        if guess["cost_usd"] is not None and guess["cost_usd"] > args.max_cost:
            raise RagframeError(
                f"the estimate ${guess['cost_usd']:.4f} exceeds --max-cost ${args.max_cost:.4f}; "
                "nothing was sent"
            )
    result = score_file(
        args.input,
        args.output,
        metrics,
        judge=judge,
        columns=columns,
        chunk_rows=args.chunk_rows,
        overwrite=args.overwrite,
    )
    print(format_summary(result.summary(), result.judge.local))
    print(f"wrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "score":
            return cmd_score(args)
        if args.command == "batch":
            from ragframe.cli_batch import cmd_batch

            return cmd_batch(args)
    except RagframeError as err:
        print(f"ragframe: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "ragframe: interrupted. Answers received so far are in the cache; run the same "
            "command again to resume without paying for them twice.",
            file=sys.stderr,
        )
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
