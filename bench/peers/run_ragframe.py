"""Score the benchmark rows with ragframe against an OpenAI-compatible endpoint.

One of three runners with the same command line (``--rows --base-url --metrics --out``), so
that compare.py can run each framework in its own environment and read the same JSON back.
Run from the repository's venv. The answer cache is off: every answer must be paid for, as
in the peers' runs.
"""

from __future__ import annotations

import importlib.metadata as md
import math
import time
from typing import Any

from runner import parse_args, read_rows, timed_call, write_result


def main() -> None:
    args = parse_args(__doc__)
    t_import = time.monotonic()
    import openai  # noqa: F401 -- ragframe imports it lazily inside the run; the peers'
    import polars as pl  # own imports happen before their timed call too, so import it here

    import ragframe
    from ragframe import Judge

    import_s = time.monotonic() - t_import
    rows = read_rows(args.rows)
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
    result = timed_call(out, args.out, lambda: ragframe.run(frame, metrics, judge=judge))
    scores: dict[str, list[float | None]] = {}
    errors: dict[str, dict[str, int]] = {}
    for m in metrics:
        col = result.frame.get_column(m).to_list()
        scores[m] = [None if v is None or math.isnan(v) else float(v) for v in col]
        errs = result.frame.get_column(f"{m}_detail").struct.field("error").drop_nulls()
        errors[m] = {str(k): int(v) for k, v in errs.value_counts().iter_rows()}
    out["own_stats"] = result.stats.as_dict()
    write_result(out, args.out, scores, errors)


if __name__ == "__main__":
    main()
