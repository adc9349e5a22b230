"""What the three runners (run_ragframe.py, run_ragas.py, run_deepeval.py) share: their common
command line, the rows, the timed call that records a failure before re-raising it, and the
result file compare.py reads.

Standard library only: each runner imports it from its own environment.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parse_args(doc: str | None) -> argparse.Namespace:
    """`--rows --base-url --metrics --out [--model]`, the same for every framework."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--metrics", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="gpt-4o-mini")
    return parser.parse_args()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The benchmark rows (JSON lines: question, answer, contexts, ground_truth)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def timed_call(
    out: dict[str, Any],
    path: Path,
    call: Callable[[], Any],
    on_error: Callable[[], dict[str, Any]] = dict,
) -> Any:
    """Run the framework's scoring call and put its wall time in `out`; if it raises, write
    `out` with the exception (and `on_error()`'s entries) to `path` first: compare.py then
    counts every row as failed, and the reason is on disk."""
    t0 = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        out.update(wall_s=round(time.monotonic() - t0, 2), exception=repr(exc)[:2000])
        out.update(on_error())
        path.write_text(json.dumps(out, indent=2))
        raise
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return result


def write_result(
    out: dict[str, Any], path: Path, scores: dict[str, list[float | None]], errors: Any
) -> None:
    """Scores per metric (None where the row failed), failures counted, errors as given."""
    out["scores"] = scores
    out["failed"] = {m: sum(v is None for v in s) for m, s in scores.items()}
    out["errors"] = errors
    path.write_text(json.dumps(out, indent=2, default=str))


#: The packages whose versions a ragas run records.
RAGAS_PACKAGES = ("ragas", "openai", "langchain-openai", "langchain-core", "langchain-community")


def versions(packages: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each package (in the runner's own environment)."""
    return {name: md.version(name) for name in packages}


class Collect(logging.Handler):
    """Counts the warnings and errors a framework logs (ragas logs a failed job and goes on,
    keeping no other record of it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "Job[" in msg:  # "Exception raised in Job[12]: ...": drop the number to group them
            msg = msg.split("]", 1)[-1]
        self.counts[f"{record.levelname} {record.name}: {msg[:300]}"] += 1
