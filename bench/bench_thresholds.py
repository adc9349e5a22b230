"""Thresholds and gates over a large scored log: 1,000,000 rows, 4 metrics, 20 groups.

The log is bench_summarize's (seeded; two verdict-fraction and two continuous score columns
with their `_detail` structs, about 3 % null, 20 experiments), with a pass threshold per
metric. Each case is timed (best of `--repeat`):

- `summarize_frame`: `summarize(frame, by="experiment", thresholds=...)` in memory: means,
  intervals, pass rates and ✅ / ❌ per group and metric;
- `summarize_file`: `summarize(path, by="experiment")` on a Parquet file whose metadata records
  the thresholds (as `ragframe score --threshold` writes them), reading included;
- `gates_pass`: `check_gates(path, fail_under=...)`: 4 mean gates that pass;
- `gates_fail`: `check_gates(path, fail_under=..., min_pass_rate=...)`: 8 gates that fail, so
  the worst rows of each are found and their details read.

    python bench/bench_thresholds.py
    python bench/bench_thresholds.py --rows 200000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_summarize import METRICS, synthetic_scored
from common import best_of, frame_machine

from ragframe.decide.gates import check_gates
from ragframe.decide.summarize import summarize
from ragframe.inputs.io import write_parquet

THRESHOLDS = {m: 0.5 for m in METRICS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    frame = synthetic_scored(args.rows, args.groups, args.seed)
    metadata = {
        "metrics": {
            m: {"direction": "higher", "config": {"threshold": t, "strict": False}}
            for m, t in THRESHOLDS.items()
        }
    }
    result: dict[str, Any] = {
        "rows": args.rows,
        "groups": args.groups,
        "metrics": len(METRICS),
        "thresholds": THRESHOLDS,
        "machine": frame_machine(),
    }
    seconds, table = best_of(
        args.repeat, lambda: summarize(frame, by="experiment", thresholds=THRESHOLDS)
    )
    result["summarize_frame"] = {
        **seconds,
        "cells": table.height,
        "with_pass_rate": int(table["pass_rate"].is_not_null().sum()),
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scored.parquet"
        write_parquet(frame, path, metadata)
        seconds, table = best_of(args.repeat, lambda: summarize(path, by="experiment"))
        result["summarize_file"] = {
            **seconds,
            "cells": table.height,
            "with_pass_rate": int(table["pass_rate"].is_not_null().sum()),
        }
        passing = {m: 0.1 for m in METRICS}
        seconds, gates = best_of(args.repeat, lambda: check_gates(path, fail_under=passing))
        result["gates_pass"] = {
            **seconds,
            "gates": gates.table.height,
            "failed": int((~gates.table["ok"]).sum()),
        }
        failing = {m: 0.99 for m in METRICS}
        seconds, gates = best_of(
            args.repeat,
            lambda: check_gates(path, fail_under=failing, min_pass_rate=failing),
        )
        result["gates_fail"] = {
            **seconds,
            "gates": gates.table.height,
            "failed": int((~gates.table["ok"]).sum()),
            "worst_rows": gates.worst.height,
        }
    result["machine"]["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
