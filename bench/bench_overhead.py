"""The engine's own overhead: a warm-cache rerun of 100,000 rows, where nothing is sent.

Every answer is already in the cache, so what the rerun costs is ragframe alone: reading the
Parquet file, building the prompts in Polars, hashing each request into its cache key, reading
and validating the cached answers, assembling the scores and details, writing the output.
Target: under 100 microseconds per row.

Steps: draw a log from real ExpertQA rows (every row distinct); fill the cache; start an
instant fake judge in a child process and rerun `ragframe score` on the warm cache against it,
checking that it receives no request; report wall / rows and the peak RSS. Then the same
rerun in this process under cProfile, for where the time goes (top 25 by cumulative and by
own time).

The metrics default to two cheap ones, context_precision and context_recall (one request per
row each); `--metrics` takes any. The cache is filled either over HTTP by `ragframe score`
against the fake judge (`--fill http`, what a real first run does) or, much faster, in a Python
process of its own with the judge's HTTP call replaced by the fake judge's own answer function
(`--fill direct`, the default): same prompts, same keys, same cached answers, no sockets. The
rerun that is measured is the same either way. The log, too, is built in a child process, so
that this one stays small and the reruns' wait4 peaks are their own (`common.in_child`).

    python bench/bench_overhead.py
    python bench/bench_overhead.py --rows 20000 --fill http --json out.json
    python bench/bench_overhead.py --rerun-chunk-rows 500 2000 10000    # memory vs chunk size
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    FakeServerProcess,
    child_env,
    emit,
    fake_judge,
    in_child,
    machine,
    profile_top,
    ragframe_score,
    run_measured,
    write_synthetic_log,
)

from ragframe.engine.stream import score_file
from ragframe.judge.transport import Transport
from ragframe.testing.server import auto_answer

CHEAP = ["context_precision", "context_recall"]


def fill_direct(source: Path, output: Path, metrics: list[str], cache: Path, url: str) -> float:
    """Fill the cache without HTTP: `Transport.chat` answers with the fake judge's function.

    Everything else (prompts, keys, validation, the cache write) is the engine's own code.
    """
    params = list(inspect.signature(Transport.chat).parameters)
    if params != ["self", "task", "messages", "schema"]:
        sys.exit(f"Transport.chat changed ({params}); fill the cache with --fill http")

    async def answer(
        self: Transport, task: Any, messages: list[dict[str, Any]], schema: dict[str, Any]
    ) -> tuple[str, None, tuple[int, int], str]:
        fmt = {"type": "json_schema", "json_schema": {"name": task.name, "schema": schema}}
        body = {"messages": messages, "response_format": fmt}
        content = auto_answer(body)
        tokens = (sum(len(m["content"]) for m in messages) // 4, len(content) // 4 + 1)
        self.stats.prompt_tokens += tokens[0]
        self.stats.completion_tokens += tokens[1]
        return content, None, tokens, "stop"

    original = Transport.chat
    Transport.chat = answer  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        score_file(source, output, metrics, judge=fake_judge(url, cache), overwrite=True)
        return time.perf_counter() - t0
    finally:
        Transport.chat = original  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--metrics", default=",".join(CHEAP))
    parser.add_argument(
        "--rerun-chunk-rows",
        type=int,
        nargs="*",
        default=[],
        help="also rerun the CLI with these --chunk-rows values (time and peak RSS)",
    )
    parser.add_argument("--chunk-rows", type=int, default=2000)
    parser.add_argument("--fill", choices=["direct", "http"], default="direct")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--profile-out", type=Path, help="write the in-process cProfile stats here")
    args = parser.parse_args()
    metrics = [m for m in args.metrics.split(",") if m]
    out: dict[str, Any] = {"machine": machine(), "rows": args.rows, "metrics": metrics}
    with tempfile.TemporaryDirectory(prefix="ragframe-bench-") as tmp:
        work = Path(tmp)
        source, output, cache = work / "log.parquet", work / "scored.parquet", work / "cache.db"
        # Built and filled in child processes: a child inherits the high-water RSS of the
        # process that starts it, and the reruns' peaks must be their own (common.in_child).
        in_child(write_synthetic_log, args.rows, 11, source)
        with FakeServerProcess(latency=0.0) as server:
            command = ragframe_score(
                source, output, server.url, metrics, cache=cache, chunk_rows=args.chunk_rows
            )
            if args.fill == "http":
                filled = run_measured(command, env=child_env())
                assert filled.returncode == 0, filled.stderr[-2000:]
                fill_s = filled.wall
            else:
                fill_s = in_child(fill_direct, source, output, metrics, cache, server.url)
            out["fill"] = {"how": args.fill, "wall_s": round(fill_s, 1)}
            server.reset()

            startup = run_measured(
                [sys.executable, "-c", "import ragframe.cli, ragframe.stream, openai"]
            )
            rerun = run_measured(command, env=child_env())
            assert rerun.returncode == 0, rerun.stderr[-2000:]
            sent = server.stats()["requests"]
            assert not sent.get("/v1/chat/completions") and not sent.get("/v1/embeddings"), sent
            out["command"] = " ".join(command).replace(server.url, "$URL")
            out["cli_rerun"] = {
                "requests_seen_by_server": sent,
                "wall_s": round(rerun.wall, 2),
                "us_per_row": round(1e6 * rerun.wall / args.rows, 1),
                "startup_s": round(startup.wall, 2),
                "us_per_row_without_startup": round(
                    1e6 * (rerun.wall - startup.wall) / args.rows, 1
                ),
                "cpu_s": round(rerun.cpu_seconds, 2),
                "peak_rss_mib": round(rerun.peak_rss_mib, 1),
                "parent_hwm_mib": round(rerun.parent_hwm_mib, 1),
                "summary_line": next(
                    (line for line in rerun.stdout.splitlines() if line.startswith("rows ")), ""
                ),
            }

            out["cli_rerun_by_chunk_rows"] = {}
            for chunk_rows in args.rerun_chunk_rows:
                other = ragframe_score(
                    source, output, server.url, metrics, cache=cache, chunk_rows=chunk_rows
                )
                again = run_measured(other, env=child_env())
                assert again.returncode == 0, again.stderr[-2000:]
                out["cli_rerun_by_chunk_rows"][chunk_rows] = {
                    "wall_s": round(again.wall, 2),
                    "us_per_row": round(1e6 * again.wall / args.rows, 1),
                    "peak_rss_mib": round(again.peak_rss_mib, 1),
                    "parent_hwm_mib": round(again.parent_hwm_mib, 1),
                }

            judge = fake_judge(server.url, cache)
            t0 = time.perf_counter()
            score_file(source, output, metrics, judge=judge, chunk_rows=args.chunk_rows,
                       overwrite=True)  # fmt: skip
            plain = time.perf_counter() - t0
            profiler = cProfile.Profile()
            judge = fake_judge(server.url, cache)
            t0 = time.perf_counter()
            profiler.enable()
            score_file(source, output, metrics, judge=judge, chunk_rows=args.chunk_rows,
                       overwrite=True)  # fmt: skip
            profiler.disable()
            profiled = time.perf_counter() - t0
            if args.profile_out:
                profiler.dump_stats(args.profile_out)
            sent = server.stats()["requests"]
            assert not sent.get("/v1/chat/completions") and not sent.get("/v1/embeddings"), sent
        out["in_process_rerun"] = {
            "wall_s": round(plain, 2),
            "us_per_row": round(1e6 * plain / args.rows, 1),
            "profiled_wall_s": round(profiled, 2),
            "profile_cumulative": profile_top(profiler, 25, "cumulative"),
            "profile_tottime": profile_top(profiler, 25, "tottime"),
        }
    out["machine"]["load_1min_end"] = machine()["load_1min"]
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
