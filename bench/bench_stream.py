"""Streaming at scale: rows per second and peak memory of `ragframe score` on large logs.

For each size, a synthetic log is drawn from real ExpertQA rows (realistic text lengths, every
row made distinct by a tag), and `ragframe score` scores it with the four core metrics in a
child process against an instant fake judge (another child process, latency 0), with a fresh
cache. Reported per size: wall seconds, rows per second, requests per row, the scoring
process's peak RSS (from wait4) and its RSS over time; then the same command again on the
now-warm cache (a resumed run: every answer from the cache, no request).

The logs are built in a separate process (`common.in_child`): a child inherits the high-water
RSS of the process that starts it, so a benchmark holding a 200,000-row log would see its own
memory in every wait4 peak. Each run records that high-water mark (`parent_hwm_mib`); the wait4
peak is the scoring process's own only when above it.

The peak RSS must not grow with the row count (within 20%). A size that cannot finish within
`--max-seconds` is stopped (SIGINT) and reported as such: how far it got and at what rate.

    python bench/bench_stream.py                       # 20,000 and 200,000 rows
    python bench/bench_stream.py --rows 20000 200000 --max-seconds 3000 900 --json out.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CORE,
    ROOT,
    FakeServerProcess,
    child_env,
    emit,
    in_child,
    machine,
    ragframe_score,
    run_measured,
    write_synthetic_log,
)


class RssSampler:
    """Samples a process's resident memory every `every` seconds from /proc (Linux)."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid = pid
        self.every = every
        self.samples: list[tuple[float, float]] = []
        #: When the kernel's high-water mark (VmHWM) first passed each new 100 MiB step: a
        #: spike shorter than the sampling interval still shows here.
        self.hwm_steps: list[tuple[float, float]] = []
        #: The last VmHWM read, at most `every` seconds before the process ended.
        self.hwm_last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                with open(f"/proc/{self.pid}/status") as handle:
                    fields = dict(line.split(":", 1) for line in handle if ":" in line)
            except (FileNotFoundError, ProcessLookupError):
                return
            if "VmRSS" not in fields:  # a zombie: the process has ended
                return
            now = time.perf_counter() - self._t0
            self.samples.append((now, int(fields["VmRSS"].split()[0]) / 1024))
            hwm = int(fields["VmHWM"].split()[0]) / 1024
            self.hwm_last = hwm
            if not self.hwm_steps or hwm >= self.hwm_steps[-1][1] + 100:
                self.hwm_steps.append((now, hwm))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def quartiles(self) -> dict[str, float]:
        """RSS (MiB) at a quarter, half, three quarters and the end of the run; the highest
        sample and when it was taken."""
        if not self.samples:
            return {}
        n = len(self.samples)
        marks = {
            f"{q}%": round(self.samples[min(n - 1, n * q // 100)][1], 1) for q in (25, 50, 75, 100)
        }
        top = max(self.samples, key=lambda s: s[1])
        steps = [(round(t, 1), round(m)) for t, m in self.hwm_steps]
        return marks | {
            "max": round(top[1], 1),
            "max_at_s": round(top[0], 1),
            "hwm_steps": steps,
            "hwm_last": round(self.hwm_last, 1),
        }


def score_once(args: list[str], max_seconds: float, server: FakeServerProcess) -> dict[str, Any]:
    """Run `ragframe score`, stopping it (SIGINT) past `max_seconds`; measure it."""
    run = run_measured(args, env=child_env(), interrupt_after=max_seconds, watch=RssSampler)
    code = run.returncode
    stats = server.stats()
    return {
        "returncode": code,
        "finished": code == 0,
        "wall_s": round(run.wall, 2),
        "peak_rss_mib": round(run.peak_rss_mib, 1),
        # wait4's peak is the child's own only above this (see common.in_child).
        "parent_hwm_mib": round(run.parent_hwm_mib, 1),
        "cpu_s": round(run.cpu_seconds, 1),
        "rss_over_time_mib": run.watcher.quartiles(),
        "server_chat_requests": stats["requests"].get("/v1/chat/completions", 0),
        "server_embedding_requests": stats["requests"].get("/v1/embeddings", 0),
        "stdout_tail": run.stdout[-700:],
        "stderr_tail": run.stderr[-500:] if code != 0 else "",
    }


def bench_size(rows: int, work: Path, max_seconds: float, chunk_rows: int) -> dict[str, Any]:
    """Score a fresh log of `rows` rows with a fresh cache, then again on the warm cache."""
    source = work / f"log_{rows}.parquet"
    lengths = in_child(write_synthetic_log, rows, rows, source)  # keeps this process small
    result: dict[str, Any] = {
        "rows": rows,
        "input_mib": round(source.stat().st_size / 2**20, 1),
        "text_chars_per_row": lengths,
    }
    output = work / f"scored_{rows}.parquet"
    cache = work / f"cache_{rows}.sqlite3"
    with FakeServerProcess(latency=0.0) as server:
        command = ragframe_score(
            source, output, server.url, CORE, cache=cache, chunk_rows=chunk_rows
        )
        result["command"] = " ".join(command).replace(server.url, "$URL")
        first = score_once(command, max_seconds, server)
        requests = first["server_chat_requests"] + first["server_embedding_requests"]
        if first["finished"]:
            first["rows_per_s"] = round(rows / first["wall_s"], 1)
            first["requests_per_row"] = round(requests / rows, 2)
            first["cpu_ms_per_row"] = round(1000 * first["cpu_s"] / rows, 2)
            server.reset()
            resumed = score_once(command, max_seconds, server)
            resumed["us_per_row"] = round(1e6 * resumed["wall_s"] / rows, 1)
            result["resumed_from_cache"] = resumed
        else:
            first["requests_per_s"] = round(requests / first["wall_s"], 1)
    result["first"] = first
    result["server_cpu_s"] = round(server.cpu_seconds, 1)  # both runs, known once it stopped
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--chunk-rows", type=int, default=2000)
    parser.add_argument(
        "--max-seconds", type=float, nargs="+", default=[3600.0], help="per size (last repeats)"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    help_text = subprocess.run(
        [sys.executable, "-m", "ragframe.cli", "score", "--help"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    if "--chunk-rows" not in help_text:
        sys.exit("ragframe score has no --chunk-rows: it does not stream yet (see stream.py)")
    out: dict[str, Any] = {"machine": machine(), "metrics": CORE, "sizes": []}
    with tempfile.TemporaryDirectory(prefix="ragframe-bench-") as tmp:
        for i, rows in enumerate(args.rows):
            limit = args.max_seconds[min(i, len(args.max_seconds) - 1)]
            out["sizes"].append(bench_size(rows, Path(tmp), limit, args.chunk_rows))
            print(f"{rows} rows done", file=sys.stderr, flush=True)
    peaks = [s["first"]["peak_rss_mib"] for s in out["sizes"]]
    out["peak_rss_ratio_largest_to_smallest"] = round(peaks[-1] / peaks[0], 3)
    out["peaks_are_the_scoring_processes_own"] = all(
        run["peak_rss_mib"] > run["parent_hwm_mib"]
        for size in out["sizes"]
        for run in (size["first"], size.get("resumed_from_cache") or size["first"])
    )
    out["machine"]["load_1min_end"] = machine()["load_1min"]
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
