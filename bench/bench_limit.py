"""How close ragframe gets to the endpoint's limit, against a bare openai loop.

A fake judge in a child process answers every request after a fixed latency (200 ms) with a
fixed number of slots (32), so the best any client can do is `requests x latency / capacity`
(ideal). ragframe scores 500 ExpertQA rows (drawn from the 331 with contexts, each made
distinct by a row tag) with judge concurrency 32 and a fresh cache, first with the four core
metrics, then with every metric (all of `ragframe.REGISTRY` plus a GEval with given steps).
In the same run, a bare loop (`openai.AsyncOpenAI`, `max_retries=0`, an asyncio semaphore of
32) sends the same number of chat requests, with prompts of the same mean size, to the same
server: what the client library alone costs; and once more posting the same bodies raw
(`client.post(..., cast_to=httpx.Response)`), which skips openai's request transform and
response models. Reported: requests, prompt and completion tokens
per row, wall seconds, wall / ideal, wall / bare (target: within 1.15x of bare), and the CPU
seconds this process spent (the client's own work).

    python bench/bench_limit.py
    python bench/bench_limit.py --profile --json out.json     # plus a cProfile of each run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CORE,
    FakeServerProcess,
    emit,
    fake_judge,
    machine,
    profile_top,
    synthetic_log,
)

import ragframe
from ragframe import GEval

STEPS = [
    "Check whether the answer addresses the question directly.",
    "Check whether every statement in the answer is specific and verifiable.",
    "Penalise padding, repetition and hedging that adds no information.",
]


def every_metric() -> list[Any]:
    """All registered metrics, with their defaults, plus a GEval whose steps are given."""
    return [
        *ragframe.REGISTRY,
        GEval(name="g_eval", criteria="Is the answer useful?", evaluation_steps=STEPS),
    ]


def bench_log(rows: int) -> pl.DataFrame:
    """ExpertQA rows with contexts, plus the inputs the non-LLM metrics read.

    ExpertQA has no gold passages or ids: the first two retrieved passages stand in as the
    reference (`reference_contexts`, `reference_context_ids`); they cost no request.
    """
    log = synthetic_log(rows, seed=7)
    return log.with_columns(
        pl.col("contexts").list.head(2).alias("reference_contexts"),
        pl.col("contexts")
        .list.eval(pl.format("doc-{}", pl.int_range(pl.len())))
        .alias("retrieved_context_ids"),
        pl.col("contexts")
        .list.head(2)
        .list.eval(pl.format("doc-{}", pl.int_range(pl.len())))
        .alias("reference_context_ids"),
    )


async def bare_loop(
    url: str, requests: int, prompt_chars: int, concurrency: int, *, raw: bool = False
) -> float:
    """Send `requests` chat requests through openai with a semaphore; return wall seconds.

    `raw` posts the same body with `client.post(..., cast_to=httpx.Response)` and reads the
    JSON itself: openai's connection, auth and error mapping, without its request transform
    and response models (what the judge could do to cut its own cost per request).
    """
    from openai import AsyncOpenAI

    try:  # the HTTP library openai is built on: httpx, renamed httpx2 in recent releases
        import httpx2 as httpx
    except ImportError:
        import httpx  # type: ignore[no-redef]

    client = AsyncOpenAI(base_url=url, api_key="sk-bench-not-a-real-key", max_retries=0)
    schema = {
        "type": "object",
        "properties": {"verdict": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["verdict", "reason"],
    }
    gate = asyncio.Semaphore(concurrency)
    filler = "lorem ipsum dolor sit amet " * (prompt_chars // 27 + 1)

    async def one(i: int) -> None:
        body: dict[str, Any] = {
            "model": "fake-judge",
            "messages": [
                {"role": "system", "content": "Judge the text."},
                {"role": "user", "content": f"{i} {filler[:prompt_chars]}"},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema},
            },
            "temperature": 0.0,
            "max_tokens": 512,
        }
        async with gate:
            if raw:
                reply = await client.post("/chat/completions", body=body, cast_to=httpx.Response)
                assert json.loads(reply.content)["choices"][0]["message"]["content"]
            else:
                response = await client.chat.completions.create(**body)
                assert response.choices[0].message.content

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.perf_counter() - t0
    await client.close()
    return wall


def bench_suite(
    name: str,
    metrics: list[Any],
    log: pl.DataFrame,
    args: argparse.Namespace,
    work: Path,
) -> dict[str, Any]:
    """ragframe on `metrics` (fresh server, fresh cache), then the bare loop on that server."""
    with FakeServerProcess(latency=args.latency, capacity=args.capacity) as server:
        judge = fake_judge(server.url, work / f"cache_{name}.sqlite3", concurrency=args.concurrency)
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = ragframe.run(log, metrics, judge=judge)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        stats = result.stats
        after = server.stats()
        seen = after["requests"]
        sent = seen.get("/v1/chat/completions", 0) + seen.get("/v1/embeddings", 0)
        assert sent == stats.requests, (sent, stats.requests)
        assert not stats.failures and not stats.retries, (stats.failures, stats.retries)
        rows = log.height
        ideal = stats.requests * args.latency / args.capacity
        prompt_chars = 4 * stats.prompt_tokens // max(1, stats.requests - stats.embedding_requests)
        bare: dict[str, tuple[float, float]] = {}
        for label, raw in (("openai", False), ("raw", True)):
            server.reset()
            cpu0 = time.process_time()
            seconds = asyncio.run(
                bare_loop(server.url, stats.requests, prompt_chars, args.concurrency, raw=raw)
            )
            bare[label] = (seconds, time.process_time() - cpu0)
        bare_in_flight = server.stats()["max_in_flight"]
        profile = None
        if args.profile:
            profiler = cProfile.Profile()
            again = fake_judge(
                server.url, work / f"cache_{name}_profiled.sqlite3", concurrency=args.concurrency
            )
            profiler.enable()
            ragframe.run(log, metrics, judge=again)
            profiler.disable()
            profile = {
                "tottime": profile_top(profiler, 25, "tottime"),
                "cumulative": profile_top(profiler, 25, "cumulative"),
            }
    return {
        "suite": name,
        "metrics": [m if isinstance(m, str) else m.name for m in metrics],
        "rows": rows,
        "requests": stats.requests,
        "embedding_requests": stats.embedding_requests,
        "requests_by_task": dict(stats.by_task),
        "requests_per_row": round(stats.requests / rows, 2),
        "prompt_tokens_per_row": round(stats.prompt_tokens / rows, 1),
        "completion_tokens_per_row": round(stats.completion_tokens / rows, 1),
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 3),
        "bare_wall_s": round(bare["openai"][0], 2),
        "bare_over_ideal": round(bare["openai"][0] / ideal, 3),
        "wall_over_bare": round(wall / bare["openai"][0], 3),
        "client_cpu_s": round(cpu, 2),
        "client_cpu_ms_per_request": round(1000 * cpu / stats.requests, 2),
        "bare_cpu_ms_per_request": round(1000 * bare["openai"][1] / stats.requests, 2),
        "bare_raw_wall_s": round(bare["raw"][0], 2),
        "bare_raw_cpu_ms_per_request": round(1000 * bare["raw"][1] / stats.requests, 2),
        "server_max_in_flight": after["max_in_flight"],
        "bare_server_max_in_flight": bare_in_flight,
        "profile": profile,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--suites", nargs="+", default=["core", "all"], choices=["core", "all"])
    parser.add_argument("--profile", action="store_true", help="rerun each suite under cProfile")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    log = bench_log(args.rows)
    out: dict[str, Any] = {
        "machine": machine(),
        "latency_s": args.latency,
        "capacity": args.capacity,
        "concurrency": args.concurrency,
        "suites": [],
    }
    suites = {"core": CORE, "all": every_metric()}
    with tempfile.TemporaryDirectory(prefix="ragframe-bench-") as tmp:
        for name in args.suites:
            out["suites"].append(bench_suite(name, suites[name], log, args, Path(tmp)))
    out["machine"]["load_1min_end"] = machine()["load_1min"]
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
