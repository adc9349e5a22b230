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
row each); `--metrics` takes any, and `--metrics core` the core 4 (faithfulness,
answer_relevancy, context_precision, context_recall: issue 29's measure).

The floor (issue 29: a warm rerun against "a fresh process that reads the input and writes the
same scored file with Polars"): a fresh `python -c` that imports Polars, reads the input log,
reads the scored file the rerun wrote (the same columns ragframe would write) and writes it
with the settings ragframe's writer uses (zstd, row groups of 2,000 rows:
`inputs.io.AtomicParquetWriter`). The rerun and the floor alternate `--repeat` times; the
medians and their ratio are printed (`vs_floor`). Start-up is a large part of a small rerun:
`import_time` is a fresh `import ragframe.cli` (wall), and `imports_during_rerun` the top-level
packages the rerun's process imports by cumulative import time (`python -X importtime`).

The cache is filled either over HTTP by `ragframe score`
against the fake judge (`--fill http`, what a real first run does) or, much faster, in a Python
process of its own with the judge's HTTP call replaced by the fake judge's own answer function
(`--fill direct`, the default): same prompts, same keys, same cached answers, no sockets. The
rerun that is measured is the same either way. The log, too, is built in a child process, so
that this one stays small and the reruns' wait4 peaks are their own (`common.in_child`).

    python bench/bench_overhead.py
    python bench/bench_overhead.py --rows 20000 --fill http --json out.json
    python bench/bench_overhead.py --rerun-chunk-rows 500 2000 10000    # memory vs chunk size
    python bench/bench_overhead.py --rows 5000 --metrics core --repeat 3 --profile-out warm.prof
    git worktree add /tmp/before <commit>        # then, before and after in the same rounds:
    python bench/bench_overhead.py --rows 5000 --metrics core --repeat 3 --baseline /tmp/before
    python bench/bench_overhead.py --rows 5000 --metrics core --repeat 3 --without-reuse

A rerun reuses each metric's kept columns (`ragframe.engine.reuse`: the fill scored every chunk
whole); `--without-reuse` also times the rerun that looks every answer up (RAGFRAME_NO_REUSE=1).
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import statistics
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
#: `--metrics core`: the core 4, issue 29's warm-rerun measure.
CORE = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]
#: The floor's program: argv[1] the input log, argv[2] the scored file, argv[3] the copy.
FLOOR = (
    "import sys, polars as pl; pl.read_parquet(sys.argv[1]); "
    "pl.read_parquet(sys.argv[2]).write_parquet(sys.argv[3], compression='zstd', "
    "row_group_size=2000)"
)


def top_imports(stderr: str, n: int = 12) -> dict[str, float]:
    """Top-level packages by cumulative import time (ms), from `python -X importtime` output."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|", 2)
        if name.startswith("  "):  # imported by another module: counted in its parent
            continue
        top = name.strip().split(".")[0]
        totals[top] = totals.get(top, 0.0) + int(cumulative) / 1000
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:n]
    return {name: round(ms, 1) for name, ms in ranked}


def median_of(runs: list[Any], field: str, digits: int = 2) -> float:
    return round(statistics.median(getattr(run, field) for run in runs), digits)


def fill_direct(source: Path, output: Path, metrics: list[str], cache: Path, url: str) -> float:
    """Fill the cache without HTTP: `Transport.chat` answers with the fake judge's function.

    Everything else (prompts, keys, validation, the cache write) is the engine's own code.
    """
    params = list(inspect.signature(Transport.chat).parameters)
    if params[:4] != ["self", "task", "messages", "schema"]:
        sys.exit(f"Transport.chat changed ({params}); fill the cache with --fill http")

    async def answer(
        self: Transport,
        task: Any,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        again: bool = False,
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
    parser.add_argument(
        "--repeat", type=int, default=1, help="warm reruns and floors, alternating (median)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also rerun `ragframe score` from this source tree (a checkout of the commit "
        "before a change) in every round, on the same cache: before/after side by side",
    )
    parser.add_argument(
        "--without-reuse",
        action="store_true",
        help="also rerun with RAGFRAME_NO_REUSE=1 in every round: every answer looked up, "
        "as a cache without kept columns (an older ragframe's) is read",
    )
    args = parser.parse_args()
    metrics = CORE if args.metrics == "core" else [m for m in args.metrics.split(",") if m]
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
            imports = run_measured([sys.executable, "-c", "import ragframe.cli"])
            reruns, floors, baselines, lookups = [], [], [], []
            copy = work / "floor.parquet"
            # The baseline's ragframe from its tree: -P keeps the working directory (this
            # repository) off sys.path, so PYTHONPATH decides which ragframe runs.
            before = [sys.executable, "-P", *command[1:]]
            before_env = {**child_env(), "PYTHONPATH": str(args.baseline)}
            for _ in range(max(1, args.repeat)):
                rerun = run_measured(command, env=child_env())
                assert rerun.returncode == 0, rerun.stderr[-2000:]
                sent = server.stats()["requests"]
                assert not sent.get("/v1/chat/completions"), sent
                assert not sent.get("/v1/embeddings"), sent
                reruns.append(rerun)
                if args.baseline is not None:
                    # The same cache must answer it all: request keys did not change.
                    baseline = run_measured(before, env=before_env)
                    assert baseline.returncode == 0, baseline.stderr[-2000:]
                    sent = server.stats()["requests"]
                    assert not sent.get("/v1/chat/completions"), sent
                    assert not sent.get("/v1/embeddings"), sent
                    baselines.append(baseline)
                if args.without_reuse:
                    lookup = run_measured(command, env={**child_env(), "RAGFRAME_NO_REUSE": "1"})
                    assert lookup.returncode == 0, lookup.stderr[-2000:]
                    assert not server.stats()["requests"].get("/v1/chat/completions")
                    lookups.append(lookup)
                floor = run_measured(
                    [sys.executable, "-c", FLOOR, str(source), str(output), str(copy)]
                )
                assert floor.returncode == 0, floor.stderr[-2000:]
                floors.append(floor)
            timed = [sys.executable, "-X", "importtime", *command[1:]]
            traced = run_measured(timed, env=child_env())
            assert traced.returncode == 0, traced.stderr[-2000:]
            wall, cpu = median_of(reruns, "wall"), median_of(reruns, "cpu_seconds")
            floor_wall, floor_cpu = median_of(floors, "wall"), median_of(floors, "cpu_seconds")
            out["command"] = " ".join(command).replace(server.url, "$URL")
            out["cli_rerun"] = {
                "requests_seen_by_server": sent,
                "repeats": len(reruns),
                "wall_s": wall,
                "wall_s_each": [round(r.wall, 2) for r in reruns],
                "us_per_row": round(1e6 * wall / args.rows, 1),
                "startup_s": round(startup.wall, 2),
                "us_per_row_without_startup": round(1e6 * (wall - startup.wall) / args.rows, 1),
                "cpu_s": cpu,
                "peak_rss_mib": median_of(reruns, "peak_rss_mib", 1),
                "parent_hwm_mib": round(rerun.parent_hwm_mib, 1),
                "summary_line": next(
                    (line for line in rerun.stdout.splitlines() if line.startswith("rows ")), ""
                ),
            }
            out["floor"] = {
                "program": FLOOR,
                "wall_s": floor_wall,
                "wall_s_each": [round(f.wall, 2) for f in floors],
                "cpu_s": floor_cpu,
                "peak_rss_mib": median_of(floors, "peak_rss_mib", 1),
            }
            out["vs_floor"] = {
                "wall_ratio": round(wall / floor_wall, 2),
                "cpu_ratio": round(cpu / floor_cpu, 2),
            }

            def against_floor(runs: list[Any]) -> dict[str, Any]:
                return {
                    "wall_s": median_of(runs, "wall"),
                    "wall_s_each": [round(r.wall, 2) for r in runs],
                    "cpu_s": median_of(runs, "cpu_seconds"),
                    "peak_rss_mib": median_of(runs, "peak_rss_mib", 1),
                    "vs_floor_wall": round(median_of(runs, "wall") / floor_wall, 2),
                    "vs_floor_cpu": round(median_of(runs, "cpu_seconds") / floor_cpu, 2),
                }

            if baselines:
                out["baseline"] = {
                    "tree": str(args.baseline),
                    **against_floor(baselines),
                    "after_over_before_wall": round(wall / median_of(baselines, "wall"), 3),
                    "after_over_before_cpu": round(cpu / median_of(baselines, "cpu_seconds"), 3),
                }
            if lookups:
                out["without_reuse"] = against_floor(lookups)
            out["import_time"] = {
                "import_ragframe_cli_wall_s": round(imports.wall, 2),
                "import_ragframe_cli_cpu_s": round(imports.cpu_seconds, 2),
                "imports_during_rerun_ms": top_imports(traced.stderr),
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
