"""Trace reading at scale: a 1,000,000-span OpenInference export, made from real instrumented
spans (the RAG pipeline of tests/test_traces_real.py, traced by OpenInference's OpenAI
instrumentor and written by the SDK's exporter), multiplied with fresh trace and span ids;
then read into rows in a fresh process, measuring wall time and peak RSS.

    python bench/bench_traces.py make --spans 1000000 --out /tmp/spans.jsonl
    python bench/bench_traces.py read /tmp/spans.jsonl               # buckets from file size
    python bench/bench_traces.py read /tmp/spans.jsonl --buckets 1   # the single pass
    python bench/bench_traces.py read /tmp/spans.jsonl --to /tmp/rows.parquet  # to disk
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
    args = parser.parse_args()
    make(args.spans, args.out) if args.cmd == "make" else read(args.path, args.buckets, args.to)


if __name__ == "__main__":
    main()
