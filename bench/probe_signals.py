"""Stop signals mid-run: how `ragframe score` ends when Ctrl-C (or SIGTERM) arrives, once or
twice in a row, while requests are in flight.

    python -m ragframe.testing.server --port 8765 --latency 0.3 &
    python bench/probe_signals.py http://127.0.0.1:8765/v1 20 SIGINT,SIGINT
    python bench/probe_signals.py http://127.0.0.1:8765/v1 3 SIGTERM

Each run scores `data/sample.parquet` with a fresh cache, waits until the cache file exists and
then a random 0.3-1.3 s, and sends the signals with a random gap (0 to 0.1 s) between them. A run
is good when it exits 130 or 143 with one line on stderr and leaves no `.tmp` file. Set CODE to
another checkout to run its `ragframe` instead (a before/after pair, side by side).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    url, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    code = os.environ.get("CODE", str(ROOT))
    env = {**os.environ, "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": url, "RAGFRAME_MODEL": "m"}
    bad = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            out, cache = Path(folder) / "out.parquet", Path(folder) / "cache.sqlite3"
            command = [
                sys.executable, "-m", "ragframe.cli", "score", str(ROOT / "data/sample.parquet"),
                "-o", str(out), "--cache", str(cache), "--metrics",
                "faithfulness,context_precision", "--concurrency", "4", "--no-progress",
            ]  # fmt: skip
            proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=code)
            start = time.monotonic()
            while not cache.exists() and time.monotonic() - start < 30:
                time.sleep(0.05)
            time.sleep(0.3 + random.random())
            gap = random.choice([0, 0.001, 0.003, 0.01, 0.03, 0.1])
            for k, name in enumerate(names):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(getattr(signal, name))
                if k < len(names) - 1:
                    time.sleep(gap)
            _, err = proc.communicate(timeout=60)
            left = [f.name for f in Path(folder).iterdir() if f.name.endswith(".tmp")]
            lines = len(err.strip().splitlines())
            good = proc.returncode in (130, 143) and lines == 1 and not left
            bad += not good
            print(f"gap={gap} status={proc.returncode} lines={lines} tmp={left}")
    print(f"bad {bad} of {runs}")


if __name__ == "__main__":
    main()
