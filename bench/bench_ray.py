"""Rows per second on Ray Data (`ragframe.ray.evaluate`) with 1, 2 and 4 actors, beside one
process (`ragframe.run`), against the fake judge in its own process.

Two judges: an endpoint-bound one (fixed latency, a capacity of concurrent slots: throughput
is capped by the endpoint, whatever the number of actors), and an instant one (latency 0, no
capacity: one process is CPU-bound near 800 requests/s, and actors lift that ceiling, up to
the machine's cores). The cluster's concurrency is the same for every run (`--concurrency`,
shared among the actors). A fresh cache directory per run (no answer is reused), the four core
metrics, `synthetic_log` rows. Wall time includes starting the actors (`startup_s`: the time
until the first batch came back, as measured from the driver) and Ray's local cluster is
started once, before any timing. The 1-minute load average is recorded beside each figure:
the machine may be shared.

    python bench/bench_ray.py --rows 300 --json bench/out/ray.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORE, FakeServerProcess, emit, fake_judge, machine, synthetic_log


def load() -> float:
    return round(os.getloadavg()[0], 2)


def one_process(log: Any, url: str, cache: Path, concurrency: int) -> dict[str, Any]:
    import ragframe

    judge = fake_judge(url, cache, concurrency=concurrency)
    before, t0 = load(), time.perf_counter()
    result = ragframe.run(log, CORE, judge=judge)
    wall = time.perf_counter() - t0
    return figure("one process", log.height, wall, result.stats.requests, before)


def on_ray(log: Any, url: str, cache: Path, concurrency: int, actors: int) -> dict[str, Any]:
    import ray

    from ragframe.ray import evaluate

    judge = fake_judge(url, cache / "unused.sqlite3", concurrency=concurrency)
    blocks = [log.slice(i, 50).to_arrow() for i in range(0, log.height, 50)]
    ds = ray.data.from_arrow(blocks)
    before, t0 = load(), time.perf_counter()
    out = evaluate(ds, CORE, judge, actors=actors, num_cpus=0.5, cache_dir=cache)
    rows, first = 0, None
    for batch in out.iter_batches(batch_format="pyarrow", batch_size=None):
        first = first if first is not None else time.perf_counter() - t0
        rows += batch.num_rows
    wall = time.perf_counter() - t0
    assert rows == log.height, (rows, log.height)
    row = figure(f"ray, {actors} actors", rows, wall, None, before)
    row["startup_s"] = round(first or 0.0, 2)
    return row


def figure(
    label: str, rows: int, wall: float, requests: int | None, before: float
) -> dict[str, Any]:
    return {
        "run": label,
        "rows": rows,
        "wall_s": round(wall, 2),
        "rows_per_s": round(rows / wall, 1),
        "requests": requests,
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
        out["runs"].append(one_process(log, server.url, work / "single.sqlite3", args.concurrency))
        out["runs"][-1]["server_requests"] = server.chat_requests()
        for actors in args.actors:
            server.reset()
            run = on_ray(log, server.url, work / f"ray{actors}", args.concurrency, actors)
            run["server_requests"] = server.chat_requests()
            out["runs"].append(run)
            print(run, flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--suites", nargs="+", default=["endpoint", "instant"])
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
    ray.shutdown()
    result["machine"]["load_1min_end"] = load()
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
