"""Human estimates on real labels: score a bundled set, keep n of its human labels and hide the
rest, estimate the set's human rate from the judge's scores plus those n labels (PPI++), and
report coverage and interval width over repeated random splits, beside labels-only and the
judge-only mean.

    python bench/bench_human_estimate.py --set expertqa --rows 40            # embedded judge
    python bench/bench_human_estimate.py --set halueval --rows 300 --base-url URL --model M
    python bench/bench_human_estimate.py --scored bench/out/human/expertqa.parquet  # no scoring
    python bench/bench_human_estimate.py --simulate     # the tests' simulation, as a table

The target is the human rate of all the scored rows (every label is known to the bench, hidden
from the estimator but n); coverage is the share of splits whose interval holds it. The splits
share one scoring run, so they are not independent draws of a log: read the coverage as how
the interval behaves on this set's scores, with its n splits and N rows beside it. Labels:
`faithful` (ExpertQA: the experts' claim-level support, all claims supported; HaluEval: how the
answer was built). The score is faithfulness.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ragframe.decide.ppi import human_intervals


def score_set(name: str, rows: int, base_url: str | None, model: str | None) -> pl.DataFrame:
    import ragframe
    from ragframe import Judge
    from ragframe.decide.judge_bench import load_set
    from ragframe.judge.local import LOCAL_DEFAULTS, LOCAL_MODEL, start_local_judge

    frame = load_set(name, rows).select("id", "question", "answer", "contexts", "faithful")
    local = base_url is None
    if local:
        base_url, model = start_local_judge(), model or LOCAL_MODEL
    options: dict[str, Any] = dict(LOCAL_DEFAULTS) if local else {}
    judge = Judge(model, base_url=base_url, api_key="sk-local", progress=False, **options)
    result = ragframe.run(frame, ["faithfulness"], judge=judge)
    return result.frame.select("id", "faithful", "faithfulness")


def splits(frame: pl.DataFrame, n: int, repeats: int, seed: int, level: float) -> dict[str, Any]:
    scored = frame.filter(pl.col("faithfulness").is_not_null() & pl.col("faithful").is_not_null())
    y_all = scored["faithful"].cast(pl.Float64).to_numpy()
    f_all = scored["faithfulness"].to_numpy()
    big_n = y_all.size
    truth = float(y_all.mean())
    rng = np.random.default_rng(seed)
    idx = np.argsort(rng.random((repeats, big_n)), axis=1)[:, :n]
    y, f = y_all[idx], f_all[idx]
    out: dict[str, Any] = {"n": n, "N": big_n, "splits": repeats, "truth": truth}
    both = human_intervals(y, f, np.broadcast_to(f_all, (repeats, big_n)), level=level)
    for name, r in (("ppi++", both.ppi), ("labels_only", both.labels_only)):
        out[name] = {
            "coverage": float(((r.low <= truth) & (truth <= r.high)).mean()),
            "mean_width": float((r.high - r.low).mean()),
        }
    out["judge_only"] = {"estimate": float(f_all.mean()), "bias": float(f_all.mean() - truth)}
    return out


def simulate(seed: int = 20, sims: int = 500, big_n: int = 10_000) -> list[dict[str, Any]]:
    """The simulation of tests/test_human_estimate.py: three judges, n = 50 / 150 / 500."""
    rng = np.random.default_rng(seed)
    x = rng.random((sims, big_n))
    q = np.where(x < 0.3, 0.1, np.where(x < 0.7, 0.5, 0.8))
    y = (rng.random((sims, big_n)) < q).astype(float)
    truth = y.mean(axis=1)
    noise = 0.4 + 0.2 * rng.random((sims, big_n))  # independent of the labels
    judges = {"unbiased": q, "lenient +0.15": q + 0.15, "uninformative": noise}
    order = np.argsort(rng.random((sims, big_n)), axis=1)
    rows = []
    for name, f in judges.items():
        se = f.std(1, ddof=1) / np.sqrt(big_n)
        judge = (np.abs(f.mean(1) - truth) <= 1.959963984540054 * se).mean()
        for n in (50, 150, 500):
            idx = order[:, :n]
            yl, fl = np.take_along_axis(y, idx, 1), np.take_along_axis(f, idx, 1)
            row: dict[str, Any] = {"judge": name, "n": n, "N": big_n, "sims": sims}
            both = human_intervals(yl, fl, f)
            for method, r in (("ppi++", both.ppi), ("labels_only", both.labels_only)):
                row[f"{method}_coverage"] = float(((r.low <= truth) & (truth <= r.high)).mean())
                row[f"{method}_width"] = float((r.high - r.low).mean())
            row["judge_only_coverage"] = float(judge)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="expertqa", choices=("expertqa", "halueval"))
    parser.add_argument("--rows", type=int, default=40, help="rows to score (a prefix)")
    parser.add_argument("--scored", type=Path, help="a scored file from an earlier run")
    parser.add_argument("--labels", default="10,20", help="n labels kept, comma-separated")
    parser.add_argument("--splits", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--out", type=Path, default=Path("bench/out/human"))
    parser.add_argument("--simulate", action="store_true", help="the simulation table only")
    args = parser.parse_args()
    if args.simulate:
        print(pl.DataFrame(simulate()))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if args.scored:
        frame = pl.read_parquet(args.scored)
    else:
        frame = score_set(args.set, args.rows, args.base_url, args.model)
        frame.write_parquet(args.out / f"{args.set}.parquet")
    wall = round(time.monotonic() - t0, 1)
    results = [
        splits(frame, int(n), args.splits, args.seed, args.level) for n in args.labels.split(",")
    ]
    report = {"set": args.set, "rows": frame.height, "scoring_wall_s": wall, "results": results}
    print(json.dumps(report, indent=2))
    (args.out / f"{args.set}.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
