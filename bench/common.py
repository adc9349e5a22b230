"""Shared helpers for the benchmarks: synthetic logs from real text, a fake judge in its own
process, running `ragframe score` as a measured child process, and a description of the machine.

Every benchmark talks to the judge over real HTTP to a `FakeServer` in a separate process, so
the scoring process pays for exactly what it would pay against a real endpoint (the openai
client, JSON, the cache) and the server's own work is not charged to it.

`python bench/common.py serve --latency 0.2 --capacity 32` runs the fake judge in the
foreground (what `FakeServerProcess` starts): the same server as `python -m
ragframe.testing.server`, but keeping only the last few request records, so that a run of a
million requests does not grow the server to gigabytes.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import io
import json
import multiprocessing
import os
import platform
import pstats
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
EXPERTQA = ROOT.parent / "shared" / "data" / "expertqa_rag.parquet"
CORE = ["faithfulness", "answer_relevancy", "context_precision", "context_recall"]
INPUTS = ["question", "answer", "contexts", "ground_truth"]


# ----------------------------------------------------------------------------- data


def expertqa_rows() -> pl.DataFrame:
    """The ExpertQA rows that have retrieved contexts (331 of 479), canonical columns only."""
    frame = pl.read_parquet(EXPERTQA).select("id", *INPUTS)
    has_text = pl.col("contexts").list.eval(pl.element().str.len_chars()).list.sum() > 0
    return frame.filter(has_text).with_columns(
        # Some experts left the revision empty: fall back to the answer, as the guide allows.
        pl.when(pl.col("ground_truth").str.strip_chars().str.len_chars() > 0)
        .then("ground_truth")
        .otherwise("answer")
        .alias("ground_truth")
    )


def synthetic_log(rows: int, *, seed: int = 0) -> pl.DataFrame:
    """`rows` rows drawn with replacement from ExpertQA, each made distinct by a row tag.

    The tag goes into question, answer and ground truth, so every prompt of every metric is
    distinct (no deduplication or cache hit flatters the figures); the contexts keep their
    real text and lengths (4.6 passages, 3.8 k characters per row on average).
    """
    base = expertqa_rows()
    picked = base.sample(rows, with_replacement=True, seed=seed)
    tag = pl.format("[row {}] ", pl.int_range(pl.len()))
    return picked.select(
        pl.format("{}-{}", "id", pl.int_range(pl.len())).alias("id"),
        pl.concat_str(tag, "question").alias("question"),
        pl.concat_str(tag, "answer").alias("answer"),
        "contexts",
        pl.concat_str(tag, "ground_truth").alias("ground_truth"),
    )


def write_synthetic_log(rows: int, seed: int, path: Path) -> dict[str, float]:
    """Write `synthetic_log(rows, seed=seed)` to `path`; return its text lengths. Meant for
    `in_child`: building a large log grows the process for good."""
    log = synthetic_log(rows, seed=seed)
    log.write_parquet(path)
    return text_lengths(log)


def text_lengths(frame: pl.DataFrame) -> dict[str, float]:
    """Mean characters per row of each input, for the results file."""
    row = frame.select(
        pl.col("question").str.len_chars().mean().alias("question"),
        pl.col("answer").str.len_chars().mean().alias("answer"),
        pl.col("contexts").list.len().mean().alias("contexts_per_row"),
        pl.col("contexts")
        .list.eval(pl.element().str.len_chars())
        .list.sum()
        .mean()
        .alias("context_chars"),
        pl.col("ground_truth").str.len_chars().mean().alias("ground_truth"),
    ).row(0, named=True)
    return {k: round(float(v), 1) for k, v in row.items()}


# --------------------------------------------------------------------- fake judge


def _serve(argv: Sequence[str]) -> int:
    """Foreground fake judge with a bounded request log (see the module docstring)."""
    from ragframe.testing.server import FakeServer

    parser = argparse.ArgumentParser(prog="python bench/common.py serve")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--capacity", type=int, default=None)
    args = parser.parse_args(argv)
    server = FakeServer(latency=args.latency, capacity=args.capacity)
    server.requests = deque(maxlen=1000)  # type: ignore[assignment]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(f"READY {server.base_url}", flush=True)
    stop.wait()
    server.stop()
    return 0


class FakeServerProcess:
    """A fake judge in a child process: `with FakeServerProcess(latency=0.2) as server:`,
    then `server.url`; its CPU seconds are in `cpu_seconds` once it has stopped."""

    def __init__(self, latency: float = 0.0, capacity: int | None = None) -> None:
        self.args = [sys.executable, str(Path(__file__).resolve()), "serve"]
        self.args += ["--latency", str(latency)]
        if capacity is not None:
            self.args += ["--capacity", str(capacity)]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.cpu_seconds = 0.0

    def __enter__(self) -> FakeServerProcess:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.url = line.split()[1]
        return self

    def stats(self) -> dict[str, Any]:
        """The server's counters (GET /stats): requests by path, chat answered, peaks."""
        root = self.url.removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/stats", timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def reset(self) -> None:
        root = self.url.removesuffix("/v1")
        request = urllib.request.Request(f"{root}/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def chat_requests(self) -> int:
        return int(self.stats()["requests"].get("/v1/chat/completions", 0))

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        _, _, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = 0
        self.cpu_seconds = usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------- measured child process


def vm_hwm_mib(pid: int | str = "self") -> float | None:
    """A process's high-water resident memory (VmHWM, Linux) in MiB; None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def in_child(fn: Any, *args: Any) -> Any:
    """Run `fn(*args)` in a fresh Python process and return its result.

    Why: on Linux a child inherits the high-water RSS of the process that starts it (exec
    copies the old address space's high-water mark into the child's `ru_maxrss`), so once a
    benchmark has built a large log in its own process, every wait4 peak it measures after
    that reports the benchmark's memory, not the child's. Heavy preparation runs here instead,
    and the measuring process stays small; each measurement records it (`parent_hwm_mib`).
    """
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


@dataclass
class Measured:
    """One child process: exit status, wall seconds, peak RSS and CPU seconds, its output."""

    returncode: int
    wall: float
    peak_rss_mib: float
    cpu_seconds: float
    stdout: str
    stderr: str
    #: The measuring process's own high-water RSS when it started the child: wait4's peak is
    #: the child's own only when it is above this (see `in_child`).
    parent_hwm_mib: float
    #: What `watch` returned, when given.
    watcher: Any = None


def run_measured(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    interrupt_after: float | None = None,
    watch: Callable[[int], Any] | None = None,
) -> Measured:
    """Run a command from the repository root; its own peak RSS comes from wait4 (not the
    maximum over all children, which would include the fake judge).

    `interrupt_after`: send SIGINT after that many seconds (a run too long for the time
    available). `watch`: called with the child's pid, it returns a context manager held while
    the child runs (an RSS sampler, say); it is returned in `Measured.watcher`.
    """
    parent_hwm = vm_hwm_mib() or 0.0
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    timer = None
    if interrupt_after is not None:
        timer = threading.Timer(interrupt_after, proc.send_signal, (signal.SIGINT,))
        timer.start()
    watcher = watch(proc.pid) if watch is not None else contextlib.nullcontext()
    out_chunks: list[str] = []
    err_chunks: list[str] = []
    threads = [
        threading.Thread(target=lambda: out_chunks.append(proc.stdout.read())),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err_chunks.append(proc.stderr.read())),  # type: ignore[union-attr]
    ]
    with watcher:
        for thread in threads:
            thread.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        for thread in threads:
            thread.join()
    if timer is not None:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(
        proc.returncode,
        wall,
        usage.ru_maxrss / 1024,  # kilobytes on Linux
        usage.ru_utime + usage.ru_stime,
        "".join(out_chunks),
        "".join(err_chunks),
        parent_hwm,
        watcher if watch is not None else None,
    )


def ragframe_score(
    source: Path,
    output: Path,
    url: str,
    metrics: Sequence[str],
    *,
    cache: Path | None,
    chunk_rows: int,
    concurrency: int = 16,
) -> list[str]:
    """The `ragframe score` command line for the fake judge (run through this interpreter)."""
    args = [sys.executable, "-m", "ragframe.cli", "score", str(source), "-o", str(output)]
    args += ["--metrics", ",".join(metrics), "--model", "fake-judge", "--base-url", url]
    args += ["--embedding-model", "fake-embedding", "--concurrency", str(concurrency)]
    args += ["--chunk-rows", str(chunk_rows), "--overwrite", "--no-progress"]
    args += ["--no-cache"] if cache is None else ["--cache", str(cache)]
    return args


def fake_judge(url: str, cache: Path, **options: Any) -> Any:
    """The `ragframe.Judge` every in-process benchmark points at the fake judge: its model and
    embedding model, a dummy key, no progress bar; `options` go to `Judge` as they are."""
    from ragframe import Judge

    return Judge(
        "fake-judge",
        base_url=url,
        api_key="sk-bench-not-a-real-key",
        embedding_model="fake-embedding",
        cache=cache,
        progress=False,
        **options,
    )


def child_env() -> dict[str, str]:
    """The environment for `ragframe score`: a dummy key, nothing from the user's setup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}
    env["OPENAI_API_KEY"] = "sk-bench-not-a-real-key"
    return env


# ------------------------------------------------------------------------- reporting


def machine() -> dict[str, Any]:
    """Where a figure was measured: date, CPU, cores, memory, Python and library versions."""
    import openai
    import pyarrow

    cpu = "unknown"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as handle:
        mem_kib = int(handle.readline().split()[1])
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "load_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "polars": pl.__version__,
        "pyarrow": pyarrow.__version__,
        "openai": openai.__version__,
    }


def profile_top(profiler: cProfile.Profile, n: int = 25, sort: str = "cumulative") -> str:
    """The top `n` functions of a profile, as pstats prints them."""
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.strip_dirs().sort_stats(sort).print_stats(n)
    return buffer.getvalue()


def emit(result: dict[str, Any], path: Path | None) -> None:
    """Print the result as JSON, and write it to `path` when given."""
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(_serve(sys.argv[2:]))
    sys.exit("usage: python bench/common.py serve [--latency S] [--capacity N]")


def best_of(repeat: int, fn: Any) -> tuple[dict[str, float], Any]:
    """The fastest of `repeat` calls: its wall seconds and the CPU seconds this process spent
    in it (all threads; less sensitive than wall time to other programs on the cores), and
    the last result."""
    best: dict[str, float] = {}
    out = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if not best or wall < best["seconds"]:
            best = {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 3)}
    return best, out


def frame_machine() -> dict[str, Any]:
    """What a frame benchmark ran on: cores, Python, Polars, numpy, ragframe, load at start."""
    import numpy as np

    import ragframe

    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "polars": pl.__version__,
        "numpy": np.__version__,
        "ragframe": ragframe.__version__,
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
    }
