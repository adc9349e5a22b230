"""`ragframe.compare` over two large scored logs: 1,000,000 pairs, 4 metrics.

Two synthetic, seeded logs as ragframe writes them (bench_summarize's: four Float64 score
columns with a `{name}_detail` struct beside each, two verdict fractions taking few distinct
values and two continuous, about 3 % null, a group column of 20 experiments) paired by an
`id` column; b is drawn with another seed, so the differences are real and every path of the
comparison does its full work. Each case is timed (best of `--repeat`, the same seed each time):

- `paired`: `compare(a, b, on="id")` on frames in memory;
- `paired_by_groups`: the same with `by="experiment"` (20 groups, 80 cells);
- `unpaired`: `compare(a, b)`, the two logs as independent samples;
- `paired_files`: `compare(path_a, path_b, on="id")` from Parquet files with ragframe's
  metadata (directions, metrics), reading included;
- `small_continuous`: 5,000 continuous pairs x 4 metrics, where the sign-flip permutation test
  and the bootstrap run (the slow path per pair).

    python bench/bench_compare.py
    python bench/bench_compare.py --rows 200000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_summarize import METRICS, synthetic_scored
from common import best_of, frame_machine

from ragframe.decide.compare import compare
from ragframe.inputs.io import write_parquet


def paired_logs(
    rows: int, groups: int, seed: int, *, continuous: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Logs a and b of `rows` rows each, keyed by `id`; b's scores drawn with seed + 1."""
    ids = pl.int_range(rows, eager=True).alias("id")
    a = synthetic_scored(rows, groups, seed, continuous=continuous).with_columns(ids)
    b = synthetic_scored(rows, groups, seed + 1, continuous=continuous).with_columns(ids)
    return a, b.drop("experiment")  # paired groups are read from a


def timed(repeat: int, fn: Any) -> dict[str, Any]:
    seconds, result = best_of(repeat, fn)
    table = result.table
    return {
        **seconds,
        "cells": table.height,
        "n_summed_over_cells": int(table["n"].sum()),
        "tests": dict(table["test"].value_counts().sort("test").rows()),
        "intervals": dict(table["method"].value_counts().sort("method").rows()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--small", type=int, default=5_000, help="pairs in the small case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    result: dict[str, Any] = {
        "rows": args.rows,
        "groups": args.groups,
        "metrics": len(METRICS),
        "machine": frame_machine(),
    }
    a, b = paired_logs(args.rows, args.groups, args.seed)
    result["paired"] = timed(args.repeat, lambda: compare(a, b, on="id", seed=args.seed))
    result["paired_by_groups"] = timed(
        args.repeat, lambda: compare(a, b, on="id", by="experiment", seed=args.seed)
    )
    result["unpaired"] = timed(args.repeat, lambda: compare(a, b, seed=args.seed))
    metadata = {"metrics": {m: {"direction": "higher"} for m in METRICS}}
    with tempfile.TemporaryDirectory() as folder:
        path_a, path_b = Path(folder) / "a.parquet", Path(folder) / "b.parquet"
        write_parquet(a, path_a, metadata)
        write_parquet(b, path_b, metadata)
        result["paired_files"] = timed(
            args.repeat, lambda: compare(path_a, path_b, on="id", seed=args.seed)
        )
    small_a, small_b = paired_logs(args.small, 1, args.seed, continuous=True)
    result["small_continuous"] = {
        "pairs": args.small,
        **timed(args.repeat, lambda: compare(small_a, small_b, on="id", seed=args.seed)),
    }
    result["machine"]["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
