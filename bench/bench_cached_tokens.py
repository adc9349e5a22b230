"""Cached prompt tokens on the peers' benchmark rows (issue 29): how many of ragframe's
prompt tokens a provider that caches prompt prefixes (OpenAI: 1,024 tokens and more, in
steps of 128, the response schema at the start of the prefix) would bill at its cached rate,
stage by stage, and what that does to the cost.

    python bench/bench_cached_tokens.py --rows 40 --out bench/out/cached_tokens.json
    python bench/bench_cached_tokens.py --rows 40 --metrics all --batch-size 4 --repeats 2 \
        --out bench/out/cached_tokens_all.json

The rows, the judge's answers and the endpoint are those of `bench/peers/compare.py` (the
first N ExpertQA rows by id with contexts, an answer and a ground truth; its `Answerer` on a
`FakeServer` in this process), and ragframe runs as `bench/peers/run_ragframe.py` runs it
(answer cache off, default concurrency), priced as gpt-4o-mini. `--metrics`: `core` (the
four core metrics), `all` (every catalogue metric these rows have the inputs for), or names
separated by commas. `--batch-size k` verifies faithfulness's claims k to a request (several
requests per row, which share the row's contexts: the case where a row's requests share a
long prefix); `--repeats n` scores every row n times (the same prompts again, other seeds).
`pairwise` among the names compares each row's answer (as answer_a) with its ground truth
(as answer_b) on the faithfulness criterion: two requests per row (both orders) that share
the question and contexts.

Two passes, each on a fresh stand-in: `concurrent` at the peers' endpoint (200 ms, 32 slots),
where requests in flight together cannot find each other's prefix, and `sequential`, one
request at a time with no latency, where every earlier prefix is known (what the prompt
order allows at most). Per stage (the request's task, its json_schema name): requests,
prompt tokens, cached tokens as the stand-in reported them, and the longest prefix a request
of the stage shares with any earlier request (with the schema in the prefix, as OpenAI
keys it, and without it, which tells what a reorder could reach at most).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
from common import CORE, emit, machine

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from compare import Answerer, PeerServer, select_rows

import ragframe
from ragframe import Judge
from ragframe.judge.batch.jsonl import task_name
from ragframe.judge.pricing import cost, price_of
from ragframe.judge.results import RunStats
from ragframe.metrics import Faithfulness
from ragframe.metrics.catalog import all_metrics
from ragframe.metrics.pairwise import Pairwise, run_pairs
from ragframe.testing.server import Reply, _prefix_digests

MODEL = "gpt-4o-mini"
STEP = 128


class LedgerServer(PeerServer):
    """The peers' stand-in, also noting each answered chat request's stage, prompt tokens and
    cached tokens, in the order they were answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answered: list[tuple[str, int, int]] = []

    def _cache_prompt(
        self, body: dict[str, Any], usage: dict[str, Any], reply: Reply, seen: int | None
    ) -> None:
        super()._cache_prompt(body, usage, reply, seen)
        details = usage.get("prompt_tokens_details") or {}
        self.answered.append(
            (task_name(body) or "?", int(usage["prompt_tokens"]), int(details["cached_tokens"]))
        )


def shared_by_stage(bodies: list[dict[str, Any]], keep_schema: bool) -> dict[str, int]:
    """Per stage, the longest prefix (in the stand-in's 128-token steps) a request shares
    with any request sent before it; `keep_schema=False` asks what it would be were the
    response schema not part of the prefix (it is at OpenAI: before the system message)."""
    seen: set[bytes] = set()
    longest: dict[str, int] = defaultdict(int)
    for body in bodies:
        digests = _prefix_digests(body if keep_schema else {**body, "response_format": None})
        hit = 0
        while hit < len(digests) and digests[hit] in seen:
            hit += 1
        stage = task_name(body) or "?"
        longest[stage] = max(longest[stage], hit * STEP)
        seen.update(digests)
    return dict(longest)


def merged(stats: list[RunStats]) -> RunStats:
    """The token counts of several runs on one judge, added up."""
    out = RunStats(price=stats[0].price)
    for s in stats:
        out.requests += s.requests
        out.prompt_tokens += s.prompt_tokens
        out.completion_tokens += s.completion_tokens
        out.cached_prompt_tokens += s.cached_prompt_tokens
    return out


def pick_metrics(which: str, rows: list[dict[str, Any]], batch_size: int | None) -> list[Any]:
    """The metrics `--metrics` names, faithfulness with `batch_size` when one is given."""
    if which == "core":
        names: list[Any] = list(CORE)
    elif which == "all":
        names = [m.name for m in all_metrics(list(rows[0]))[0]]
    else:
        names = [x.strip() for x in which.split(",") if x.strip()]
    picked: list[Any] = []
    for name in names:
        if name == "faithfulness" and batch_size is not None:
            picked.append(Faithfulness(batch_size=batch_size))
        elif name == "pairwise":
            picked.append(Pairwise(criteria="faithfulness"))
        else:
            picked.append(name)
    return picked


def one_pass(
    rows: list[dict[str, Any]],
    metrics: list[Any],
    latency: float,
    capacity: int,
    concurrency: int | None,
    repeats: int,
) -> dict[str, Any]:
    """Score `rows` on a fresh stand-in; the run's and the server's token counts and costs,
    overall and per stage."""
    server = LedgerServer(Answerer(rows), latency=latency, capacity=capacity).start()
    try:
        options: dict[str, Any] = {} if concurrency is None else {"concurrency": concurrency}
        judge = Judge(
            MODEL,
            base_url=server.base_url,
            api_key="sk-fake-local",
            embedding_model="text-embedding-3-small",
            cache=False,
            progress=False,
            **options,
        )
        pairwise = [m for m in metrics if isinstance(m, Pairwise)]
        scored = [m for m in metrics if not isinstance(m, Pairwise)]
        t0 = time.monotonic()
        stats: list[RunStats] = []
        summary: list[str] = []
        if scored:
            result = ragframe.run(pl.DataFrame(rows), scored, judge=judge, repeats=repeats)
            stats.append(result.stats)
            summary = str(result).splitlines()[-2:]
        for metric in pairwise:  # pairwise runs on its own (`run_pairs`), not in `run`
            pairs = pl.DataFrame(rows).with_columns(
                pl.col("answer").alias("answer_a"), pl.col("ground_truth").alias("answer_b")
            )
            stats.append(run_pairs(pairs, metric, judge=judge)[1])
        seconds = time.monotonic() - t0
        served = server.stats()
        bodies = server.chat_requests
        with_schema = shared_by_stage(bodies, keep_schema=True)
        no_schema = shared_by_stage(bodies, keep_schema=False)
        answered = list(server.answered)
    finally:
        server.stop()
    stages: dict[str, dict[str, Any]] = {}
    for stage, prompt, cached in answered:
        entry = stages.setdefault(stage, {"requests": 0, "prompt_tokens": 0, "cached": 0})
        entry["requests"] += 1
        entry["prompt_tokens"] += prompt
        entry["cached"] += cached
    for stage, entry in stages.items():
        entry["cached_share"] = round(entry["cached"] / max(entry["prompt_tokens"], 1), 4)
        entry["mean_prompt_tokens"] = round(entry["prompt_tokens"] / entry["requests"])
        entry["longest_shared_prefix"] = with_schema.get(stage, 0)
        entry["longest_shared_prefix_schema_ignored"] = no_schema.get(stage, 0)
    s = merged(stats)
    full = cost(price_of(MODEL), s.prompt_tokens, s.completion_tokens)
    n = len(rows)
    return {
        "server": {"latency": latency, "capacity": capacity},
        "concurrency": judge.concurrency,
        "seconds": round(seconds, 2),
        "requests": s.requests,
        "requests_per_row": round(s.requests / n, 2),
        "prompt_tokens": s.prompt_tokens,
        "prompt_tokens_per_row": round(s.prompt_tokens / n),
        "completion_tokens": s.completion_tokens,
        "cached_prompt_tokens": s.cached_prompt_tokens,
        "cached_reported_by_server": served["cached_tokens"],
        "cached_share": round(s.cached_prompt_tokens / max(s.prompt_tokens, 1), 4),
        "cost_usd_with_discount": round(s.cost or 0.0, 6),
        "cost_usd_without_discount": round(full or 0.0, 6),
        "saving_usd": round(s.cached_saving or 0.0, 6),
        "longest_shared_prefix_tokens": {
            "with_schema": max(with_schema.values(), default=0),
            "schema_ignored": max(no_schema.values(), default=0),
        },
        "by_stage": dict(sorted(stages.items())),
        "summary_line": summary,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=40)
    p.add_argument("--metrics", default="core", help="core, all, or names separated by commas")
    p.add_argument("--batch-size", type=int, default=None, help="faithfulness's batch_size")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument(
        "--passes", default="concurrent,sequential", help="concurrent, sequential or both"
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    rows = select_rows(args.rows)
    metrics = pick_metrics(args.metrics, rows, args.batch_size)
    settings = {"concurrent": (0.2, 32, None), "sequential": (0.0, 1, 1)}
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "machine": machine(),
        "rows": len(rows),
        "metrics": [m if isinstance(m, str) else f"{m.name}({m.config()})" for m in metrics],
        "repeats": args.repeats,
        "model_priced_as": MODEL,
        "price": {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.60},
    }
    for name in args.passes.split(","):
        latency, capacity, concurrency = settings[name]
        result[name] = one_pass(rows, metrics, latency, capacity, concurrency, args.repeats)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
