"""Cached prompt tokens on the peers' benchmark rows (issue 29, first part): how many of
ragframe's prompt tokens a provider that caches prompt prefixes (OpenAI: 1,024 tokens and
more, in steps of 128) would bill at its cached rate, and what that does to the cost.

    python bench/bench_cached_tokens.py --rows 40 --out bench/out/cached_tokens.json

The rows, the judge's answers and the endpoint are those of `bench/peers/compare.py` (the
first N ExpertQA rows by id with contexts, an answer and a ground truth; its `Answerer` on a
`FakeServer` in this process), and ragframe runs as `bench/peers/run_ragframe.py` runs it
(answer cache off, default concurrency), scoring the four core metrics as gpt-4o-mini. Two
passes, each on a fresh stand-in: at the peers' endpoint (200 ms, 32 slots), where requests
in flight together cannot find each other's prefix, and one request at a time with no
latency, where every earlier prefix is known (what today's prompt order allows at most).
Costs are at gpt-4o-mini's listed rates, with and without the cached-prompt discount.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
from common import CORE, emit, machine

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from compare import Answerer, PeerServer, select_rows

import ragframe
from ragframe import Judge
from ragframe.judge.pricing import cost, price_of
from ragframe.testing.server import _prefix_digests

MODEL = "gpt-4o-mini"


def longest_shared(bodies: list[dict[str, Any]], keep_schema: bool) -> int:
    """The longest prefix (in the stand-in's 128-token steps) any request shares with one
    answered before it; `keep_schema=False` asks what it would be were the response schema
    not part of the prefix (it is at OpenAI: before the system message)."""
    seen: set[bytes] = set()
    longest = 0
    for body in bodies:
        digests = _prefix_digests(body if keep_schema else {**body, "response_format": None})
        hit = 0
        while hit < len(digests) and digests[hit] in seen:
            hit += 1
        longest = max(longest, hit * 128)
        seen.update(digests)
    return longest


def one_pass(rows: list[dict[str, Any]], latency: float, capacity: int, concurrency: int | None):
    """Score `rows` on a fresh stand-in; the run's and the server's token counts and costs."""
    server = PeerServer(Answerer(rows), latency=latency, capacity=capacity).start()
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
        t0 = time.monotonic()
        result = ragframe.run(pl.DataFrame(rows), CORE, judge=judge)
        seconds = time.monotonic() - t0
        served = server.stats()
        shared = {
            "with_schema": longest_shared(server.chat_requests, keep_schema=True),
            "schema_ignored": longest_shared(server.chat_requests, keep_schema=False),
        }
    finally:
        server.stop()
    s = result.stats
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
        "cached_share": round(s.cached_prompt_tokens / s.prompt_tokens, 4),
        "cost_usd_with_discount": round(s.cost or 0.0, 6),
        "cost_usd_without_discount": round(full or 0.0, 6),
        "saving_usd": round(s.cached_saving or 0.0, 6),
        "longest_shared_prefix_tokens": shared,
        "summary_line": str(result).splitlines()[-2:],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=40)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    rows = select_rows(args.rows)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": machine(),
        "rows": len(rows),
        "metrics": CORE,
        "model_priced_as": MODEL,
        "price": {"prompt": 0.15, "cached_prompt": 0.075, "completion": 0.60},
        "concurrent": one_pass(rows, 0.2, 32, None),
        "sequential": one_pass(rows, 0.0, 1, 1),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
