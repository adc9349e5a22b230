"""`ragframe.summarize` over a large scored log: 1,000,000 rows, 4 metrics, 20 groups.

The log is synthetic and seeded: four score columns as ragframe writes them (Float64 with a
`{name}_detail` struct beside it), two of them verdict fractions (few distinct values), two
continuous, about 3 % null (failed rows), and a group column of 20 experiments. It is written
to Parquet with ragframe's metadata (directions, the metrics), then summarized three ways,
each timed (best of `--repeat`):

- `file`: `summarize(path, by="experiment")`, reading the file (only the needed columns);
- `frame`: the same on the frame already in memory;
- `bootstrap`: a worst case for the intervals, groups just under the bootstrap's limit
  (20 groups x BOOTSTRAP_MAX_N rows, continuous scores), so every cell is bootstrapped.

    python bench/bench_summarize.py
    python bench/bench_summarize.py --rows 200000 --groups 50 --json out.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ragframe.decide.summarize import summarize
from ragframe.inputs.io import write_parquet
from ragframe.stats import BOOTSTRAP_MAX_N

METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")


def synthetic_scored(
    rows: int, groups: int, seed: int, *, continuous: bool = False
) -> pl.DataFrame:
    """A scored log: per metric a Float64 score (3 % null) and its `_detail` struct."""
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {"experiment": rng.integers(0, groups, rows).astype(np.int32)}
    for i, name in enumerate(METRICS):
        # Even metrics: a fraction of verdicts (few distinct values), as faithfulness gives.
        fraction = not continuous and i % 2 == 0
        scores = rng.integers(0, 5, rows) / 4 if fraction else rng.beta(2 + i, 2, rows)
        columns[name] = np.where(rng.random(rows) < 0.03, np.nan, scores)
    frame = pl.DataFrame(columns).with_columns(
        pl.col("experiment").cast(pl.String).str.pad_start(2, "0").alias("experiment"),
        *(pl.col(m).fill_nan(None) for m in METRICS),
    )
    return frame.with_columns(
        pl.struct(error=pl.lit(None, pl.String)).alias(f"{m}_detail") for m in METRICS
    )


def best_of(repeat: int, fn: Any) -> tuple[float, Any]:
    """The fastest of `repeat` calls, in seconds, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    frame = synthetic_scored(args.rows, args.groups, args.seed)
    metadata = {"metrics": {m: {"direction": "higher"} for m in METRICS}}
    result: dict[str, Any] = {
        "rows": args.rows,
        "groups": args.groups,
        "metrics": len(METRICS),
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "polars": pl.__version__,
            "numpy": np.__version__,
            "load_1min": round(os.getloadavg()[0], 2),
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scored.parquet"
        write_parquet(frame, path, metadata)
        seconds, table = best_of(args.repeat, lambda: summarize(path, by="experiment"))
        result["file_seconds"] = round(seconds, 3)
        result["cells"] = table.height
        result["methods"] = table["method"].value_counts().sort("method").rows()
    seconds, _ = best_of(args.repeat, lambda: summarize(frame, by="experiment"))
    result["frame_seconds"] = round(seconds, 3)

    worst = synthetic_scored(args.groups * BOOTSTRAP_MAX_N, args.groups, args.seed, continuous=True)
    seconds, table = best_of(args.repeat, lambda: summarize(worst, by="experiment"))
    result["bootstrap_worst_case"] = {
        "rows": worst.height,
        "seconds": round(seconds, 3),
        "methods": table["method"].value_counts().sort("method").rows(),
    }
    import json

    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
