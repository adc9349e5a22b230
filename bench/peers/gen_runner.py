"""What the three test-set generation drivers (gen_ragframe.py, gen_ragas.py, gen_deepeval.py)
share: their command line, the corpus, a logging handler that counts the errors a framework
logs, and the result file bench/bench_generate.py reads.

Standard library only: each driver imports it from its own environment.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parse_args(doc: str | None) -> argparse.Namespace:
    """`--corpus --n --base-url --out [--concurrency --model]`, the same for every framework."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="JSON lines: id, text")
    parser.add_argument("--n", type=int, required=True, help="rows asked for")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--embedding-model", default="text-embedding-3-small")
    return parser.parse_args()


def read_corpus(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def timed(out: dict[str, Any], path: Path, call: Callable[[], Any]) -> Any:
    """Run the generation call, put its wall seconds in `out`; on an exception write `out`
    with it to `path` first (the whole run then produced nothing), then re-raise."""
    t0 = time.monotonic()
    try:
        result = call()
    except BaseException as exc:
        out.update(wall_s=round(time.monotonic() - t0, 2), exception=repr(exc)[:2000])
        path.write_text(json.dumps(out, indent=2, default=str))
        raise
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return result


def write(out: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(out, indent=2, default=str))
