"""`ragframe.report` on a large scored log: size (must stay under 5 MB) and time.

The log is synthetic and seeded: 200,000 rows drawn from ExpertQA (real questions, answers and
contexts: 4.6 passages, 3.8 k characters per row on average), an `experiment` column of 8
groups, and the four core metrics with detail structs shaped as ragframe writes them (claims,
questions, per-context verdicts, facts, each with its reasons drawn from real sentences; token
counts; 2 % of rows failed with an error). A second log (`b`) has the same rows scored with
other verdicts, for the comparison case. Both are written in a child process, so the measured
processes start small.

Each case runs `ragframe.report` in a fresh process (`measure`), timed from the command line
(interpreter, imports and the Vega bundle included) and inside (`report()` alone), with its
peak RSS from wait4:

- `plain`:   report(a)
- `by`:      report(a, by="experiment")
- `against`: report(b, by="experiment", against=a, on="id")

With `--draw` (default when `chromium` is on PATH) each report is also opened in headless
Chromium and the figures that drew are counted.

    python bench/bench_report.py
    python bench/bench_report.py --rows 20000 --cases plain --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import in_child, machine, run_measured, synthetic_log

METRICS = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")
ERRORS = (
    "request failed after 4 attempts: timeout (120 s)",
    "the judge's answer did not fit the schema after 2 repairs: claims[3].supported missing",
    "finish_reason=length: the answer was cut at max_tokens=2048",
)
LIMIT_BYTES = 5_000_000


def sentence_pool(frame: pl.DataFrame) -> np.ndarray:
    """Distinct real sentences (answers and contexts), 20 to 240 characters."""
    texts = pl.concat([frame["answer"], frame["contexts"].explode().drop_nulls()])
    sentences = texts.str.split(". ").explode().str.strip_chars().unique(maintain_order=True)
    sentences = sentences.filter(sentences.str.len_chars().is_between(20, 240))
    return sentences.to_numpy()


def verdicts(
    rng: np.random.Generator, counts: np.ndarray, pool: np.ndarray, quality: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per verdict: its row, a text, a yes / no drawn at the row's quality, a reason."""
    row = np.repeat(np.arange(counts.size), counts)
    text = pool[rng.integers(0, pool.size, row.size)]
    yes = rng.random(row.size) < quality[row]
    reason = pool[rng.integers(0, pool.size, row.size)]
    return row, text, yes, reason


def nested(row: np.ndarray, fields: dict[str, Any], name: str, rows: int) -> pl.Series:
    """The verdicts as one List(Struct) per row (every row has at least one)."""
    items = pl.DataFrame({"row": row, **fields})
    lists = items.group_by("row", maintain_order=True).agg(pl.struct(*fields).alias(name))
    assert lists.height == rows
    return lists[name]


def scored_log(rows: int, seed: int, verdict_seed: int) -> pl.DataFrame:
    """The synthetic scored log (module docstring): inputs from `seed`, verdicts from
    `verdict_seed` (the comparison's second log shares the inputs, not the verdicts)."""
    log = synthetic_log(rows, seed=seed)
    rng = np.random.default_rng(verdict_seed)
    pool = sentence_pool(log.head(5000))
    log = log.with_columns(
        pl.Series("experiment", rng.choice([f"exp-{i}" for i in range(8)], rows))
    )
    failed = rng.random((len(METRICS), rows)) < 0.02
    error = rng.choice(np.array(ERRORS), rows)
    columns: dict[str, pl.Series] = {}
    n_contexts = np.minimum(log["contexts"].list.len().to_numpy(), 10).clip(1)
    shapes = {
        "faithfulness": ("claims", "claim", "supported", rng.integers(3, 16, rows)),
        "context_precision": ("verdicts", None, "relevant", n_contexts),
        "context_recall": ("facts", "fact", "covered", rng.integers(2, 13, rows)),
    }
    for i, m in enumerate(METRICS):
        quality = rng.beta(4 + i, 2, rows)
        if m == "answer_relevancy":
            row, text, _, _ = verdicts(rng, np.full(rows, 3), pool, quality)
            similarity = np.clip(quality[row] + rng.normal(0, 0.1, row.size), -1, 1)
            fields: dict[str, Any] = {"question": text, "similarity": similarity}
            lists = nested(row, fields, "questions", rows)
            score = pl.Series(np.clip(similarity.reshape(rows, 3).mean(axis=1), 0, 1))
            extra = {"noncommittal": pl.Series(rng.random(rows) < 0.01)}
        else:
            name, text_field, flag, counts = shapes[m]
            row, text, yes, reason = verdicts(rng, counts, pool, quality)
            fields = {text_field: text} if text_field else {}
            if m == "context_precision":
                fields["context_index"] = (
                    np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts) + 1
                ).astype(np.int32)
            fields |= {flag: yes, "reason": reason}
            if m == "context_recall":
                fields["source_context"] = pl.select(
                    pl.when(pl.Series(yes)).then(pl.lit(1, pl.Int32))
                ).to_series()
            lists = nested(row, fields, name, rows)
            score = pl.Series(np.bincount(row, weights=yes, minlength=rows) / counts)
            extra = (
                {"truncated": pl.Series(np.zeros(rows, bool))} if m != "context_precision" else {}
            )
        mask = pl.Series(failed[i])
        columns[m] = pl.select(pl.when(mask).then(None).otherwise(score)).to_series().alias(m)
        lists = pl.select(pl.when(mask).then(None).otherwise(lists)).to_series().alias(lists.name)
        columns[f"{m}_detail"] = pl.DataFrame(
            {
                lists.name: lists,
                **extra,
                "error": pl.select(pl.when(mask).then(pl.Series(error))).to_series(),
                "prompt_tokens": rng.integers(300, 1500, rows),
                "completion_tokens": rng.integers(20, 700, rows),
            }
        ).to_struct(f"{m}_detail")
    return log.with_columns(**columns)


def metadata(frame: pl.DataFrame, model: str) -> dict[str, Any]:
    """Metadata as a run writes it (judge, metrics with prompt hashes, the run's summary)."""
    tokens = {
        k: int(
            frame.select(
                pl.sum_horizontal(pl.col(f"{m}_detail").struct.field(k).sum() for m in METRICS)
            ).item()
        )
        for k in ("prompt_tokens", "completion_tokens")
    }
    return {
        "ragframe_version": "0.1.0",
        "created": "2026-11-23T12:00:00+00:00",
        "judge": {"model": model, "endpoint_host": "api.openai.com", "temperature": 0.0},
        "metrics": {
            m: {
                "class": m.title().replace("_", ""),
                "direction": "higher",
                "config": {"reasons": True},
                "prompt_hashes": {f"{m}.verify": f"{i:016x}"},
            }
            for i, m in enumerate(METRICS)
        },
        "summary": {
            "rows": frame.height,
            "requests": frame.height * 5,
            **tokens,
            "cost_usd": round(
                tokens["prompt_tokens"] * 0.15e-6 + tokens["completion_tokens"] * 0.6e-6, 2
            ),
            "failures": {"timeout": 1200, "schema": 800},
            "retries": {"rate_limited": 5000},
        },
    }


def write_logs(rows: int, seed: int, a: str, b: str | None, row_group: int) -> dict[str, Any]:
    """Write the logs (run in a child process) in row groups of `row_group` rows, as `ragframe
    score --chunk-rows` writes them (0: one row group, as `RunResult.write_parquet` does)."""
    from ragframe.inputs.io import AtomicParquetWriter

    start = time.perf_counter()
    sizes = {}
    for path, verdict_seed in ((a, seed + 1), (b, seed + 2)):
        if path is None:
            continue
        frame = scored_log(rows, seed, verdict_seed)
        schema = frame.head(0).to_arrow().schema
        writer = AtomicParquetWriter(path, schema, metadata(frame, "gpt-4o-mini"), overwrite=True)
        for chunk in frame.iter_slices(row_group or frame.height):
            writer.write(chunk)
        writer.close()
        sizes[Path(path).name] = Path(path).stat().st_size
    return {"seconds": round(time.perf_counter() - start, 1), "bytes": sizes}


def measure(argv: list[str]) -> int:
    """`measure SCORED OUT [--by C] [--against P --on C]`: one report, timed inside."""
    parser = argparse.ArgumentParser(prog="bench_report.py measure")
    parser.add_argument("scored")
    parser.add_argument("output")
    parser.add_argument("--by")
    parser.add_argument("--against")
    parser.add_argument("--on")
    args = parser.parse_args(argv)
    from ragframe.report import _bundle, report

    start = time.perf_counter()
    _bundle.vega_bundle()
    bundle = time.perf_counter() - start
    start = time.perf_counter()
    report(args.scored, by=args.by, against=args.against, on=args.on, output=args.output)
    print(
        json.dumps(
            {"bundle_s": round(bundle, 2), "report_s": round(time.perf_counter() - start, 2)}
        )
    )
    return 0


def drawn(chromium: str, page: Path, profile: Path) -> dict[str, int]:
    """Figures in the page, and those Chromium drew (an SVG inside, data-drawn="1")."""
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=30000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    ).stdout
    figures = page.read_text(encoding="utf-8").count("class='rf-chart'")
    ok = len(re.findall(r'class="rf-chart[^"]*"[^>]*data-drawn="1"[^>]*><svg', dom))
    return {"figures": figures, "drawn": ok}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["measure"]:
        return measure(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", default="plain,by,against")
    parser.add_argument(
        "--row-group",
        type=int,
        default=2000,
        help="rows per row group (default 2000, as `ragframe score`; 0: one row group)",
    )
    parser.add_argument("--draw", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    chromium = shutil.which("chromium") if args.draw is not False else None
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        root = Path(tmp)
        a, b = root / "a.parquet", root / "b.parquet"
        built = in_child(
            write_logs,
            args.rows,
            args.seed,
            str(a),
            str(b) if "against" in cases else None,
            args.row_group,
        )
        result: dict[str, Any] = {
            "rows": args.rows,
            "row_group": args.row_group,
            "metrics": list(METRICS),
            "logs": built,
            "machine": machine(),
            "cases": {},
        }
        options = {
            "plain": [],
            "by": ["--by", "experiment"],
            "against": ["--by", "experiment", "--against", str(a), "--on", "id"],
        }
        for case in cases:
            scored = b if case == "against" else a
            out = root / f"{case}.html"
            command = [sys.executable, __file__, "measure", str(scored), str(out), *options[case]]
            run = run_measured(command)
            if run.returncode != 0:
                raise SystemExit(f"{case} failed: {run.stderr[-2000:]}")
            inside = json.loads(run.stdout.strip().splitlines()[-1])
            size = out.stat().st_size
            entry = {
                "bytes": size,
                "under_5_mb": size < LIMIT_BYTES,
                "wall_s": round(run.wall, 2),
                **inside,
                "peak_rss_mib": round(run.peak_rss_mib, 1),
                "cpu_s": round(run.cpu_seconds, 2),
            }
            if chromium:
                entry |= drawn(chromium, out, root / "profile")
            result["cases"][case] = entry
            print(case, json.dumps(entry), flush=True)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(c["under_5_mb"] for c in result["cases"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
