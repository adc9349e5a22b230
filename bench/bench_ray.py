"""Ray Data (`ragframe.ray.evaluate`) against the fake judge: throughput with 1, 2 and 4 actors
beside one process, and the two ways the cluster shares a rate limit.

Suites (`--suites`):

- endpoint: the fake judge in its own process with a fixed latency (200 ms) and a capacity of
  concurrent slots: throughput is capped by the endpoint, whatever the number of actors.
- instant: latency 0, no capacity: one process is CPU-bound, actors lift that ceiling up to
  the machine's cores.
- limits: an in-process server that enforces a capacity and a requests-per-minute limit with
  429s (a bucket of one second's worth, as providers enforce per-minute limits over short
  windows); `limits="divided"` (each actor keeps rate / N) against `limits="actor"` (one
  limiter actor holds the cluster's bucket): requests/s reached against the limit, 429s,
  calls to the limiter.

Each Ray run reports `startup_s` (from the call to the server's first request: the actors
started and their judge sessions opened) apart from `steady_rows_per_s` (the rows over the
time after that). The cluster's concurrency is the same for
every run (`--concurrency`, shared among the actors); a fresh cache directory per run (no
answer reused); `synthetic_log` rows (every prompt distinct). Ray's local cluster is started
once, before any timing. The 1-minute load average is recorded beside each figure: the
machine may be shared.

    python bench/bench_ray.py --rows 600 --json bench/out/ray.json
    python bench/bench_ray.py --suites limits --rows 160 --json bench/out/ray-limits.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORE, FakeServerProcess, emit, fake_judge, machine, synthetic_log

#: The limits suite's metrics: chat requests only (the server's limits count chat requests).
CHAT_ONLY = ["faithfulness", "context_precision", "context_recall"]


def load() -> float:
    return round(os.getloadavg()[0], 2)


def one_process(log: Any, url: str, cache: Path, concurrency: int) -> dict[str, Any]:
    import ragframe

    judge = fake_judge(url, cache, concurrency=concurrency)
    before, t0 = load(), time.perf_counter()
    result = ragframe.run(log, CORE, judge=judge)
    wall = time.perf_counter() - t0
    return {**figure("one process", log.height, wall, before), "requests": result.stats.requests}


class FirstRequest:
    """The moment the server saw its first chat request, polled every 20 ms from a thread
    (`count()` reads the server's count): when the first actor had started and sent."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count, self.at = count, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self.count() > 0:
                self.at = time.perf_counter()
                return
            time.sleep(0.02)

    def __enter__(self) -> FirstRequest:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def on_ray(
    log: Any,
    judge: Any,
    cache: Path,
    actors: int,
    metrics: list[str],
    count: Callable[[], int],
    limits: str = "actor",
) -> dict[str, Any]:
    """One `evaluate` run: rows/s overall; `startup_s`, from the call to the server's first
    request (actors started, sessions open); `steady_rows_per_s`, the rows over the rest."""
    import ray

    from ragframe.ray import batch_rows, evaluate

    blocks = [log.slice(i, 50).to_arrow() for i in range(0, log.height, 50)]
    ds = ray.data.from_arrow(blocks)
    before, t0 = load(), time.perf_counter()
    out = evaluate(ds, metrics, judge, actors=actors, num_cpus=0.5, cache_dir=cache, limits=limits)  # type: ignore[arg-type]
    rows = 0
    with FirstRequest(count) as first:
        for batch in out.iter_batches(batch_format="pyarrow", batch_size=None):
            rows += batch.num_rows
    wall = time.perf_counter() - t0
    assert rows == log.height, (rows, log.height)
    row = figure(f"ray, {actors} actors", rows, wall, before)
    row["batch_rows"] = batch_rows(judge.concurrency, actors, log.height)
    row["startup_s"] = round(first.at - t0, 2)
    row["steady_rows_per_s"] = round(rows / (wall - (first.at - t0)), 1)
    return row


def figure(label: str, rows: int, wall: float, before: float) -> dict[str, Any]:
    return {
        "run": label,
        "rows": rows,
        "wall_s": round(wall, 2),
        "rows_per_s": round(rows / wall, 1),
        "load_start": before,
        "load_end": load(),
    }


def suite(
    label: str, log: Any, args: argparse.Namespace, latency: float, capacity: int | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"judge": label, "latency_s": latency, "capacity": capacity, "runs": []}
    with (
        FakeServerProcess(latency=latency, capacity=capacity) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        work = Path(tmp)
        for repeat in range(args.repeats):
            server.reset()
            run = one_process(log, server.url, work / f"single{repeat}.sqlite3", args.concurrency)
            run["server_requests"] = server.chat_requests()
            out["runs"].append(run)
            print(run, flush=True)
            for actors in args.actors:
                server.reset()
                unused = work / "unused.sqlite3"
                judge = fake_judge(server.url, unused, concurrency=args.concurrency)
                cache = work / f"ray{actors}-{repeat}"
                run = on_ray(log, judge, cache, actors, CORE, server.chat_requests)
                run["server_requests"] = server.chat_requests()
                out["runs"].append(run)
                print(run, flush=True)
    return out


class LimitedEndpoint:
    """A chat handler for the in-process fake server that enforces an endpoint's limits: at
    most `capacity` requests at once and `rpm` a minute, as a bucket of one second's worth
    (rpm / 60, full at the start); a request over either gets a 429 at once (no Retry-After),
    one within both is answered after `latency` seconds."""

    def __init__(self, capacity: int, rpm: float, latency: float) -> None:
        self.capacity, self.rate, self.latency = capacity, rpm / 60, latency
        self.level, self.stamp = self.rate, time.monotonic()
        self.in_flight = self.peak = 0
        self.accepted: list[float] = []
        self.over_rate = self.over_capacity = 0

    async def __call__(self, body: dict[str, Any]) -> Any:
        import asyncio

        from ragframe.testing.server import Reply, auto_answer

        now = time.monotonic()
        self.level = min(self.rate, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.in_flight >= self.capacity:
            self.over_capacity += 1
            return Reply(status=429)
        if self.level < 1:
            self.over_rate += 1
            return Reply(status=429)
        self.level -= 1
        self.accepted.append(now)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return auto_answer(body)

    def count(self) -> int:
        return len(self.accepted) + self.over_rate + self.over_capacity

    def figures(self) -> dict[str, Any]:
        span = self.accepted[-1] - self.accepted[0] if len(self.accepted) > 1 else 0.0
        return {
            "answered": len(self.accepted),
            "answered_per_s": round((len(self.accepted) - 1) / span, 2) if span else None,
            "limit_per_s": round(self.rate, 2),
            "capacity": self.capacity,
            "peak_in_flight": self.peak,
            "429_over_rate": self.over_rate,
            "429_over_capacity": self.over_capacity,
        }


def limits_suite(log: Any, args: argparse.Namespace) -> dict[str, Any]:
    """`limits="divided"` against `limits="actor"` on an endpoint whose rate limit binds."""
    from ragframe.ray import limiter_counts
    from ragframe.testing.server import FakeServer

    capacity, rpm = args.limit_capacity, args.limit_rpm
    out: dict[str, Any] = {"capacity": capacity, "rpm": rpm, "latency_s": args.latency, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for actors in [a for a in args.actors if a > 1]:
                for mode in ("divided", "actor"):
                    endpoint = LimitedEndpoint(capacity, rpm, args.latency)
                    with FakeServer(endpoint) as server:
                        judge = fake_judge(
                            server.base_url, Path(tmp) / "unused.sqlite3", concurrency=capacity,
                            requests_per_minute=rpm,
                        )  # fmt: skip
                        cache = Path(tmp) / f"{mode}{actors}-{repeat}"
                        run = on_ray(
                            log, judge, cache, actors, CHAT_ONLY, endpoint.count, limits=mode
                        )
                    run["limits"] = mode
                    run.update(endpoint.figures())
                    run["limiter"] = limiter_counts() if mode == "actor" else None
                    out["runs"].append(run)
                    print(run, flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--suites", nargs="+", default=["endpoint", "instant"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--limit-capacity", type=int, default=8)
    parser.add_argument("--limit-rpm", type=float, default=1200.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import ray

    ray.init(
        num_cpus=2, include_dashboard=False, logging_level="ERROR", _node_ip_address="127.0.0.1"
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    log = synthetic_log(args.rows)
    result: dict[str, Any] = {"machine": machine(), "concurrency": args.concurrency, "suites": []}
    if "endpoint" in args.suites:
        result["suites"].append(suite("endpoint-bound", log, args, args.latency, args.capacity))
    if "instant" in args.suites:
        result["suites"].append(suite("instant", log, args, 0.0, None))
    if "limits" in args.suites:
        result["suites"].append({"judge": "limits", **limits_suite(log, args)})
    ray.shutdown()
    result["machine"]["load_1min_end"] = load()
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
