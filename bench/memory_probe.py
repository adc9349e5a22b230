"""Where streaming memory goes: per-chunk RSS and Python object counts of an in-process run.

`ragframe score` on a large log keeps a flat Python heap if nothing leaks per row: this probe
streams a synthetic log (built in a child process, see `common.in_child`) through
`score_file` against an instant fake judge and, at every chunk boundary (when the session
forgets its in-memory answers), prints the process's RSS, the count of live Python objects
(`gc.get_objects()`), Python's allocated memory blocks and Arrow's pool. Rising RSS with flat
object counts points at native memory (allocators, libraries), not at ragframe's objects.

    python bench/memory_probe.py --rows 200000 --seconds 420
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORE, FakeServerProcess, fake_judge, in_child, machine, write_synthetic_log

from ragframe.engine.stream import score_file
from ragframe.judge.client import JudgeSession


class _Stop(Exception):
    """Raised from the probe to end the run after `--seconds`."""


def rss_mib() -> int:
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith("VmRSS:"))
    return int(line.split()[1]) // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=420.0)
    parser.add_argument("--chunk-rows", type=int, default=2000)
    args = parser.parse_args()
    print(machine(), flush=True)
    forget = JudgeSession.forget
    t0 = 0.0
    chunks = 0

    def probe(self: JudgeSession) -> None:
        nonlocal chunks
        forget(self)
        chunks += 1
        print(
            f"t={time.perf_counter() - t0:7.1f}s chunk={chunks:4d} rss={rss_mib()} MiB "
            f"python_objects={len(gc.get_objects())} python_blocks={sys.getallocatedblocks()} "
            f"arrow_pool={pa.total_allocated_bytes() >> 20} MiB queued={len(self.store.inflight)}",
            flush=True,
        )
        if time.perf_counter() - t0 > args.seconds:
            raise _Stop

    JudgeSession.forget = probe  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="ragframe-probe-") as tmp:
        work = Path(tmp)
        source = work / "log.parquet"
        in_child(write_synthetic_log, args.rows, args.rows, source)
        with FakeServerProcess(latency=0.0) as server:
            # Concurrency 16, as bench_stream.py's `ragframe score --concurrency 16`.
            judge = fake_judge(server.url, work / "cache.sqlite3", concurrency=16)
            t0 = time.perf_counter()
            try:
                score_file(source, work / "scored.parquet", CORE, judge=judge,
                           chunk_rows=args.chunk_rows)  # fmt: skip
            except _Stop:
                print(f"stopped after {args.seconds:g} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
