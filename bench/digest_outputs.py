"""One digest of everything ragframe outputs, to show a speed change changed no result.

Scores ExpertQA rows with every registered metric (plus a G-Eval with given steps) against the
scripted fake judge (in its own process, no latency), with a fresh cache, then prints one line:
the row count, the requests the server received by path, the judge's token totals and a
sha256 of every output column (scores and the detail structs, serialised row by row as
JSON). Run it before and after a change: the line must be identical.

`cd bench && python digest_outputs.py --warm` (`--rows 60` by default; `--warm` runs a second
time on the same cache, which must send nothing and give the same digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from bench_limit import bench_log, every_metric
from common import FakeServerProcess, fake_judge

import ragframe


def digest(frame: object, inputs: list[str]) -> str:
    """sha256 of the columns ragframe added, row by row, as JSON with sorted keys."""
    added = frame.drop(inputs)  # type: ignore[attr-defined]
    h = hashlib.sha256()
    h.update(json.dumps(added.schema, default=str).encode())
    for row in added.iter_rows(named=True):
        h.update(json.dumps(row, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--warm", action="store_true", help="rerun on the same cache too")
    args = parser.parse_args()
    log = bench_log(args.rows)
    with tempfile.TemporaryDirectory() as tmp, FakeServerProcess(latency=0.0) as server:
        runs = 2 if args.warm else 1
        for attempt in range(runs):
            server.reset()
            judge = fake_judge(server.url, Path(tmp) / "cache.sqlite3", concurrency=16)
            result = ragframe.run(log, every_metric(), judge=judge)
            seen = server.stats()["requests"]
            stats = result.stats
            requests = {k: v for k, v in sorted(seen.items()) if k.startswith("/v1/")}
            line = (
                f"rows={result.frame.height} requests={requests} "
                f"tokens={stats.prompt_tokens}/{stats.completion_tokens} "
                f"digest={digest(result.frame, log.columns)}"
            )
            print(("warm " if attempt else "") + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
