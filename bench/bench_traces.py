"""Trace reading at scale: a 1,000,000-span OpenInference export, made from real instrumented
spans (the RAG pipeline of tests/test_traces_real.py, traced by OpenInference's OpenAI
instrumentor and written by the SDK's exporter), multiplied with fresh trace and span ids;
then read into rows in a fresh process, measuring wall time and peak RSS.

    python bench/bench_traces.py make --spans 1000000 --out /tmp/spans.jsonl
    python bench/bench_traces.py read /tmp/spans.jsonl               # buckets from file size
    python bench/bench_traces.py read /tmp/spans.jsonl --buckets 1   # the single pass
    python bench/bench_traces.py read /tmp/spans.jsonl --to /tmp/rows.parquet  # to disk
    python bench/bench_traces.py score /tmp/spans.jsonl   # `ragframe score --from`, fake judge
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make(spans: int, out: Path) -> None:
    """Write `spans` spans: the real pipeline's lines, copied with new ids per copy."""
    sys.path.insert(0, str(ROOT / "tests"))
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_traces_real import answer_from_context, run_pipeline

    from ragframe.testing.server import FakeServer

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with FakeServer(handler=answer_from_context) as fake:
            run_pipeline(provider, fake.base_url)
    finally:
        instrumentor.uninstrument()
    lines = [s.to_json(indent=None) for s in memory.get_finished_spans()]
    ids = sorted({json.loads(x)["context"]["trace_id"] for x in lines})
    span_ids = sorted(
        {json.loads(x)["context"]["span_id"] for x in lines}
        | {json.loads(x)["parent_id"] for x in lines if json.loads(x)["parent_id"]}
    )
    copies = -(-spans // len(lines))
    written = 0
    with out.open("w", encoding="utf-8") as handle:
        for copy in range(copies):
            for line in lines:
                if written == spans:
                    break
                text = line
                for i, trace in enumerate(ids):
                    text = text.replace(trace, f"0x{copy:024x}{i:08x}")
                for i, span in enumerate(span_ids):
                    text = text.replace(span, f"0x{copy:012x}{i:04x}")
                handle.write(text + "\n")
                written += 1
    print(f"wrote {written} spans ({copies} copies of {len(lines)} real spans) to {out}")


def read(path: Path, buckets: int | None, to: Path | None) -> None:
    """Read the export into rows (read_traces_report: a frame in memory; with `to`,
    write_traces: a Parquet file, the rows never in memory together) and report time and
    peak RSS."""
    import polars as pl

    from ragframe.inputs.traces import read_traces_report, write_traces
    from ragframe.inputs.traces.buckets import buckets_for

    start = time.perf_counter()
    if to is None:
        result = read_traces_report(path, "openinference", buckets=buckets)
        rows, skipped = result.rows.height, result.skipped.height
        in_memory = round(result.rows.estimated_size("mb"), 1)
    else:
        wrote = write_traces(path, to, "openinference", overwrite=True, buckets=buckets)
        rows, skipped, in_memory = wrote.rows, wrote.skipped.height, 0.0
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {
        "spans_file_bytes": path.stat().st_size,
        "buckets": buckets_for(path, buckets),
        "to": str(to) if to else None,
        "rows": rows,
        "skipped": skipped,
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak_mib, 1),
        "rows_in_memory_mib": in_memory,
    }
    if to is not None:
        record["rows_file_bytes"] = to.stat().st_size
        record["rows_check"] = pl.scan_parquet(to).select(pl.len()).collect().item()
    print(json.dumps(record))


def score(path: Path, metrics: list[str], chunk_rows: int) -> None:
    """`ragframe score SPANS --from openinference` end to end against the fake judge (in a
    process of its own): the export read to rows on disk, then scored chunk by chunk. Peak RSS
    is the command's own (wait4), not the judge's."""
    import tempfile

    import polars as pl

    sys.path.insert(0, str(ROOT / "bench"))
    from common import FakeServerProcess, ragframe_score, run_measured

    with tempfile.TemporaryDirectory(prefix="bench-traces-") as tmp:
        out, cache = Path(tmp) / "scored.parquet", Path(tmp) / "cache"
        with FakeServerProcess(latency=0.0) as server:
            args = ragframe_score(
                path, out, server.url, metrics, cache=cache, chunk_rows=chunk_rows
            )
            measured = run_measured([*args, "--from", "openinference"])
            requests = server.chat_requests()
        if measured.returncode != 0:
            raise SystemExit(f"ragframe score failed ({measured.returncode}): {measured.stderr}")
        scored = pl.scan_parquet(out).select(pl.len(), *(pl.col(m).null_count() for m in metrics))
        counts = scored.collect().row(0)
    print(
        json.dumps(
            {
                "spans_file_bytes": path.stat().st_size,
                "metrics": metrics,
                "rows_scored": counts[0],
                "null_scores": dict(zip(metrics, counts[1:], strict=True)),
                "chat_requests": requests,
                "seconds": round(measured.wall, 2),
                "cpu_seconds": round(measured.cpu_seconds, 2),
                "peak_rss_mib": round(measured.peak_rss_mib, 1),
                "stderr_first_line": measured.stderr.splitlines()[0] if measured.stderr else "",
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--spans", type=int, default=1_000_000)
    m.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("read")
    r.add_argument("path", type=Path)
    r.add_argument("--buckets", type=int, default=None, help="default: from the file size")
    r.add_argument("--to", type=Path, default=None, help="write the rows here (write_traces)")
    s = sub.add_parser("score")
    s.add_argument("path", type=Path)
    s.add_argument("--metrics", default="faithfulness,answer_relevancy")
    s.add_argument("--chunk-rows", type=int, default=2000)
    args = parser.parse_args()
    if args.cmd == "make":
        make(args.spans, args.out)
    elif args.cmd == "read":
        read(args.path, args.buckets, args.to)
    else:
        score(args.path, args.metrics.split(","), args.chunk_rows)


if __name__ == "__main__":
    main()
