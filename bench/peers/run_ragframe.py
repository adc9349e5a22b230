"""Score the benchmark rows with ragframe against an OpenAI-compatible endpoint.

One of three runners with the same command line (``--rows --base-url --metrics --out``), so
that compare.py can run each framework in its own environment and read the same JSON back.
Run from the repository's venv. The answer cache is off: every answer must be paid for, as
in the peers' runs.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import math
import time
from pathlib import Path
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=Path, required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="gpt-4o-mini")
    args = p.parse_args()
    t_import = time.monotonic()
    import openai  # noqa: F401 -- ragframe imports it lazily inside the run; the peers'
    import polars as pl  # own imports happen before their timed call too, so import it here

    import ragframe
    from ragframe import Judge

    import_s = time.monotonic() - t_import
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line]
    metrics = args.metrics.split(",")
    frame = pl.DataFrame(rows)
    judge = Judge(
        args.model,
        base_url=args.base_url,
        api_key="sk-fake-local",
        embedding_model="text-embedding-3-small",
        cache=False,
        progress=False,
    )
    out: dict[str, Any] = {
        "framework": "ragframe",
        "versions": {k: md.version(k) for k in ("ragframe", "openai", "polars")},
        "config": {"concurrency": judge.concurrency, "max_attempts": judge.max_attempts},
        "import_s": round(import_s, 2),
        "rows": len(rows),
    }
    t0 = time.monotonic()
    try:
        result = ragframe.run(frame, metrics, judge=judge)
    except Exception as exc:  # report, never hide: compare.py counts every row as failed
        out.update(wall_s=round(time.monotonic() - t0, 2), exception=repr(exc)[:2000])
        args.out.write_text(json.dumps(out, indent=2))
        raise
    out["wall_s"] = round(time.monotonic() - t0, 2)
    scores: dict[str, list[float | None]] = {}
    errors: dict[str, dict[str, int]] = {}
    for m in metrics:
        col = result.frame.get_column(m).to_list()
        scores[m] = [None if v is None or math.isnan(v) else float(v) for v in col]
        errs = result.frame.get_column(f"{m}_detail").struct.field("error").drop_nulls()
        errors[m] = {str(k): int(v) for k, v in errs.value_counts().iter_rows()}
    out["scores"] = scores
    out["failed"] = {m: sum(v is None for v in s) for m, s in scores.items()}
    out["errors"] = errors
    out["own_stats"] = result.stats.as_dict()
    args.out.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
