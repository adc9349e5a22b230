"""How close ragframe gets to the endpoint's limit, against a bare openai loop.

A fake judge in its own process answers every request after a fixed latency (200 ms) with a
fixed number of slots (32), so the best any client can do is `requests x latency / capacity`
(ideal). Each round starts a fresh server; on it, ragframe scores `--rows` ExpertQA rows
(300 by default, drawn from the 331 with contexts, each made distinct by a row tag; the log
is written to Parquet once and read by the child) with judge concurrency 32 and a fresh
cache, and a bare loop (`openai.AsyncOpenAI`, `max_retries=0`, an asyncio semaphore of 32,
`chat.completions.create`) sends as many chat requests, with prompts of the same mean size.
Each runs in a fresh child process (this script, `child ragframe|bare`), so each pays its
own interpreter start and imports, and the order alternates from round to round.

Reported per contender, as medians over `--repeat` rounds: the wall seconds of the scoring
part, the child's whole CPU (rusage user+sys, imports included), its CPU after imports (both
children import openai before the clock; ragframe's also polars, ragframe and the log), and
the CPU of the scoring part; and the medians of the per-round ratios ragframe / bare (the
issue's targets: wall <= 1.05, whole CPU <= 1.0). `--baseline TREE` also runs ragframe from
another source tree (a checkout of the commit before a change) in every round: before and
after, side by side on the same servers. This replaced the former in-process mode (ragframe
and the bare loop in one process, one after the other), whose bare loop ran in a process
already warmed by ragframe.

    python bench/bench_limit.py --rows 300 --repeat 5 --json out.json
    git worktree add /tmp/before <commit>
    python bench/bench_limit.py --rows 300 --repeat 5 --baseline /tmp/before
    python bench/bench_limit.py --rows 300 --repeat 1 --profile DIR   # cProfile in the child
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    import polars as pl

# Polars, ragframe and the helpers are imported where they are used: the bare loop's child
# process imports openai alone, so its CPU is the client's, not a data library's start-up.

STEPS = [
    "Check whether the answer addresses the question directly.",
    "Check whether every statement in the answer is specific and verifiable.",
    "Penalise padding, repetition and hedging that adds no information.",
]


def every_metric() -> list[Any]:
    """All registered metrics, with their defaults, plus a GEval whose steps are given."""
    import ragframe
    from ragframe import GEval

    return [
        *ragframe.REGISTRY,
        GEval(name="g_eval", criteria="Is the answer useful?", evaluation_steps=STEPS),
    ]


def bench_log(rows: int) -> pl.DataFrame:
    """ExpertQA rows with contexts, plus the inputs the non-LLM metrics read.

    ExpertQA has no gold passages or ids: the first two retrieved passages stand in as the
    reference (`reference_contexts`, `reference_context_ids`); they cost no request.
    """
    import polars as pl
    from common import synthetic_log

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


def _child_ready() -> dict[str, float]:
    """This child's CPU so far (imports and loading the input) and the wall clock now."""
    return {"cpu_ready_s": time.process_time(), "t_ready": time.perf_counter()}


def child_ragframe(args: argparse.Namespace) -> dict[str, Any]:
    """One ragframe run in this (fresh) process: the log read from Parquet, a fresh cache."""
    import openai  # noqa: F401  (ragframe imports it on first use: before the clock, as bare)
    import polars as pl
    from common import CORE, fake_judge, profile_top

    import ragframe

    log = pl.read_parquet(args.log)
    metrics = CORE if args.suite == "core" else every_metric()
    judge = fake_judge(args.url, args.cache, concurrency=args.concurrency)
    ready = _child_ready()
    profiler = cProfile.Profile() if args.profile_out else None
    if profiler is not None:
        profiler.enable()
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = ragframe.run(log, metrics, judge=judge)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if profiler is not None:
        profiler.disable()
        text = profile_top(profiler, 40, "tottime") + profile_top(profiler, 40, "cumulative")
        Path(args.profile_out).write_text(text)
        profiler.dump_stats(Path(args.profile_out).with_suffix(".prof"))  # for pstats callers
    stats = result.stats
    assert not stats.failures and not stats.retries, (stats.failures, stats.retries)
    chat = stats.requests - stats.embedding_requests
    return {
        **ready,
        "wall_s": wall,
        "cpu_s": cpu,
        "requests": stats.requests,
        "embedding_requests": stats.embedding_requests,
        "requests_by_task": dict(stats.by_task),
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "prompt_chars": 4 * stats.prompt_tokens // max(1, chat),
    }


def child_bare(args: argparse.Namespace) -> dict[str, Any]:
    """The bare openai loop in this (fresh) process; openai imported before the clock."""
    import openai  # noqa: F401  (imported here, as ragframe's child imports it)

    ready = _child_ready()
    t0, cpu0 = time.perf_counter(), time.process_time()
    wall = asyncio.run(
        bare_loop(args.url, args.requests, args.prompt_chars, args.concurrency, raw=args.raw)
    )
    return {
        **ready,
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu0,
        "loop_s": time.perf_counter() - t0,
    }


def run_child(argv: list[str], tree: Path | None = None) -> dict[str, Any]:
    """Run this script as `child ...` in a fresh interpreter: its JSON line plus its whole
    CPU (rusage user+sys of the child: interpreter start and imports included) and wall.
    `tree`: import ragframe from that source tree (PYTHONPATH) instead of the installed one."""
    import os

    from common import run_measured

    env = None
    if tree is not None:
        env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    script = str(Path(__file__).resolve())
    measured = run_measured([sys.executable, script, "child", *argv], env=env)
    if measured.returncode != 0:
        raise RuntimeError(f"child {argv[:1]} failed:\n{measured.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(measured.stdout.strip().splitlines()[-1])
    out["cpu_total_s"] = measured.cpu_seconds
    out["cpu_after_imports_s"] = measured.cpu_seconds - out["cpu_ready_s"]
    out["process_wall_s"] = measured.wall
    return out


def median(values: list[float]) -> float:
    return float(statistics.median(values))


#: The figures compared, per contender and as ratios to the bare loop.
FIELDS = {
    "wall": "wall_s",
    "cpu_total": "cpu_total_s",
    "cpu_after_imports": "cpu_after_imports_s",
    "cpu_scoring": "cpu_s",
}


def bench_suite(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """`--repeat` rounds, each on a fresh server (in its own process): ragframe (and the
    `--baseline` tree's ragframe) and the bare loop, each in a fresh child, the order
    rotating from round to round. The first round starts with ragframe, which gives the
    request count and mean prompt length the bare loop then sends in every round."""
    from common import FakeServerProcess

    log_path = work / "log.parquet"
    bench_log(args.rows).write_parquet(log_path)
    common = ["--concurrency", str(args.concurrency)]
    names = ["ragframe", *(["baseline"] if args.baseline else []), "bare"]
    rounds: list[dict[str, Any]] = []
    shape: dict[str, Any] = {}  # requests and prompt length: the same every round
    for i in range(args.repeat):
        order = names[i % len(names) :] + names[: i % len(names)]
        if not shape:  # the bare loop needs ragframe's figures first
            order = ["ragframe", *(n for n in order if n != "ragframe")]
        results: dict[str, dict[str, Any]] = {}
        with FakeServerProcess(latency=args.latency, capacity=args.capacity) as server:
            for who in order:
                server.reset()
                if who == "bare":
                    argv = ["bare", "--url", server.url, *common]
                    argv += ["--requests", str(shape["requests"])]
                    out = run_child([*argv, "--prompt-chars", str(shape["prompt_chars"])])
                    out["requests"] = shape["requests"]
                else:
                    cache = work / f"cache_{name}_{who}_{i}.sqlite3"
                    argv = ["ragframe", "--url", server.url, "--log", str(log_path), *common]
                    argv += ["--suite", name, "--cache", str(cache)]
                    if args.profile_dir:
                        profile = args.profile_dir / f"profile_{name}_{who}_{i}.txt"
                        argv += ["--profile-out", str(profile)]
                    out = run_child(argv, args.baseline if who == "baseline" else None)
                    sent = sum(
                        v for k, v in server.stats()["requests"].items() if k.startswith("/v1/")
                    )
                    assert sent == out["requests"], (sent, out["requests"])
                    if not shape:
                        shape = {"requests": out["requests"], "prompt_chars": out["prompt_chars"]}
                    assert out["requests"] == shape["requests"], (who, out["requests"], shape)
                out["server_max_in_flight"] = server.stats()["max_in_flight"]
                results[who] = out
        rounds.append({"order": order, **results})
        print(
            f"{name} round {i + 1}: "
            + "; ".join(
                f"{who} wall {r['wall_s']:.2f} s cpu {r['cpu_total_s']:.2f} s"
                f" ({r['cpu_after_imports_s']:.2f} after imports)"
                for who, r in results.items()
            ),
            file=sys.stderr,
        )
    requests = shape["requests"]
    ideal = requests * args.latency / args.capacity

    def med(who: str, field: str) -> float:
        return median([r[who][field] for r in rounds])

    summary: dict[str, Any] = {"ideal_s": round(ideal, 2)}
    for who in names:
        summary[who] = {
            "wall_s": round(med(who, "wall_s"), 3),
            "cpu_total_s": round(med(who, "cpu_total_s"), 3),
            "cpu_after_imports_s": round(med(who, "cpu_after_imports_s"), 3),
            "cpu_scoring_s": round(med(who, "cpu_s"), 3),
            "cpu_total_ms_per_request": round(1000 * med(who, "cpu_total_s") / requests, 3),
            "cpu_after_imports_ms_per_request": round(
                1000 * med(who, "cpu_after_imports_s") / requests, 3
            ),
        }

    def ratios(top: str, bottom: str) -> dict[str, float]:
        """Medians over the rounds of `top`'s figure over `bottom`'s in the same round."""
        return {
            label: round(median([r[top][field] / r[bottom][field] for r in rounds]), 3)
            for label, field in FIELDS.items()
        }

    compared = {"ragframe / bare": ratios("ragframe", "bare")}
    if args.baseline:
        compared["baseline / bare"] = ratios("baseline", "bare")
        compared["ragframe / baseline"] = ratios("ragframe", "baseline")
    first = rounds[0]["ragframe"]
    rows = args.rows
    return {
        "suite": name,
        "rows": rows,
        "requests": requests,
        "embedding_requests": first["embedding_requests"],
        "requests_by_task": first["requests_by_task"],
        "prompt_tokens_per_row": round(first["prompt_tokens"] / rows, 1),
        "completion_tokens_per_row": round(first["completion_tokens"] / rows, 1),
        "bare_prompt_chars": shape["prompt_chars"],
        "medians": summary,
        "ratio_medians (per round, same server)": compared,
        "rounds": [
            {
                "order": r["order"],
                **{
                    f"{who}_{k}": round(r[who][k], 3)
                    for who in names
                    for k in ("wall_s", "cpu_total_s", "cpu_after_imports_s", "cpu_ready_s")
                },
                **{f"{who}_max_in_flight": r[who]["server_max_in_flight"] for who in names},
            }
            for r in rounds
        ],
    }


def child_main(argv: list[str]) -> int:
    """`bench_limit.py child ragframe|bare ...`: one measured run; prints one JSON line."""
    parser = argparse.ArgumentParser(prog="bench_limit.py child")
    parser.add_argument("who", choices=["ragframe", "bare"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--suite", default="core", choices=["core", "all"])
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--profile-out", type=Path)
    parser.add_argument("--requests", type=int)
    parser.add_argument("--prompt-chars", type=int)
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args(argv)
    out = child_ragframe(args) if args.who == "ragframe" else child_bare(args)
    print(json.dumps(out))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (ragframe and bare each)")
    parser.add_argument("--suites", nargs="+", default=["core"], choices=["core", "all"])
    parser.add_argument(
        "--profile",
        type=Path,
        dest="profile_dir",
        metavar="DIR",
        help="cProfile ragframe's scoring in each child; the top entries go to DIR",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="TREE",
        help="also run ragframe from this source tree (a checkout of the commit before a "
        "change: `git worktree add /tmp/before <commit>`) in every round, for before/after",
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    from common import emit, machine

    if args.profile_dir:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "machine": machine(),
        "latency_s": args.latency,
        "capacity": args.capacity,
        "concurrency": args.concurrency,
        "repeat": args.repeat,
        "suites": [],
    }
    with tempfile.TemporaryDirectory(prefix="ragframe-bench-") as tmp:
        for name in args.suites:
            out["suites"].append(bench_suite(name, args, Path(tmp)))
    out["machine"]["load_1min_end"] = machine()["load_1min"]
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
