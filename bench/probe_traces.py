"""Where a trace read's memory goes: one phase of `write_traces` at a time, each in a process
of its own, with the anonymous and file-backed resident memory sampled from
`/proc/self/status` (RssAnon, RssFile) beside the high-water mark (ru_maxrss).

    python bench/probe_traces.py lines /tmp/spans.jsonl            # the streaming scan alone
    python bench/probe_traces.py sink /tmp/spans.jsonl --buckets 31 --row-group 10000
    python bench/probe_traces.py parts /tmp/spans1m.jsonl --out /tmp/parts --buckets 11
    python bench/probe_traces.py merge /tmp/parts --method range   # or merge_sorted, read

`sink` is the partitioned sink in one level (every bucket open at once), as the first version
wrote it; `parts` writes the sorted bucket rows `write_traces` merges (unmeasured preparation);
`merge` measures one way of merging them.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path

import polars as pl


class Sampler:
    """The highest RssAnon and RssFile seen, sampled every 5 ms on a thread of its own."""

    def __init__(self) -> None:
        self.peak = {"RssAnon": 0, "RssFile": 0}
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            with open("/proc/self/status") as status:
                for line in status:
                    key = line.split(":")[0]
                    if key in self.peak:
                        self.peak[key] = max(self.peak[key], int(line.split()[1]) // 1024)
            time.sleep(0.005)


def spans_of(path: Path) -> pl.LazyFrame:
    from ragframe.inputs.traces import _lines, openinference

    return openinference.scan_jsonl(_lines(path), pl.col("n"))


def lines(path: Path) -> dict[str, object]:
    from ragframe.inputs.traces import _lines

    return {"lines": _lines(path).select(pl.len()).collect(engine="streaming").item()}


def sink(path: Path, buckets: int, row_group: int) -> dict[str, object]:
    from ragframe.inputs.traces.assemble import SPAN_SCHEMA
    from ragframe.inputs.traces.buckets import SEED

    columns = [pl.col(c).cast(t) for c, t in SPAN_SCHEMA.items()]
    bucket = (pl.col("trace_id").hash(seed=SEED) % buckets).alias("bucket")
    with tempfile.TemporaryDirectory() as tmp:
        spans_of(path).select(*columns, bucket).sink_parquet(
            pl.PartitionBy(tmp, key="bucket", include_key=False),
            mkdir=True,
            row_group_size=row_group,
        )
        files = len(list(Path(tmp).rglob("*.parquet")))
    return {"buckets": buckets, "row_group": row_group, "files": files}


def parts(path: Path, out: Path, buckets: int) -> dict[str, object]:
    """The sorted parts, written by `sink_assembled` itself (its merge step replaced by a copy)."""
    import shutil

    from ragframe.inputs.traces import buckets as module

    out.mkdir(parents=True, exist_ok=True)

    def keep(sorted_parts: list[Path], target: Path, ranges: int, columns: list[str]) -> None:
        for part in sorted_parts:
            shutil.copy(part, out / part.name)

    module._merge_sorted_parts = keep  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        module.sink_assembled(spans_of(path), buckets, Path(tmp) / "rows.parquet")
    return {"parts": len(list(out.glob("*.parquet")))}


def merge(folder: Path, method: str) -> dict[str, object]:
    from ragframe.inputs.traces import buckets as module
    from ragframe.inputs.traces.assemble import ROW_SCHEMA

    files = sorted(folder.glob("*.parquet"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.parquet"
        if method == "range":
            module._merge_sorted_parts(files, out, ranges=len(files), columns=list(ROW_SCHEMA))
        elif method == "merge_sorted":
            frames = [pl.scan_parquet(f) for f in files]
            while len(frames) > 1:  # a balanced tree of Polars' streaming merge_sorted
                pairs = [
                    frames[i].merge_sorted(frames[i + 1], "order")
                    for i in range(0, len(frames) - 1, 2)
                ]
                frames = pairs + ([frames[-1]] if len(frames) % 2 else [])
            frames[0].drop("order", "first_line").sink_parquet(out)
        else:  # read every part at once, for scale
            pl.concat([pl.scan_parquet(f) for f in files]).collect()
            return {"method": method, "files": len(files)}
        rows = pl.scan_parquet(out).select(pl.len()).collect().item()
    return {"method": method, "files": len(files), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("lines", "sink", "parts"):
        p = sub.add_parser(name)
        p.add_argument("path", type=Path)
        p.add_argument("--buckets", type=int, default=11)
        p.add_argument("--row-group", type=int, default=10_000)
        p.add_argument("--out", type=Path)
    m = sub.add_parser("merge")
    m.add_argument("folder", type=Path)
    m.add_argument("--method", choices=("range", "merge_sorted", "read"), default="range")
    args = parser.parse_args()
    sampler = Sampler()
    time.sleep(0.05)
    start = time.perf_counter()
    if args.cmd == "lines":
        result = lines(args.path)
    elif args.cmd == "sink":
        result = sink(args.path, args.buckets, args.row_group)
    elif args.cmd == "parts":
        result = parts(args.path, args.out, args.buckets)
    else:
        result = merge(args.folder, args.method)
    result |= {
        "seconds": round(time.perf_counter() - start, 2),
        "rss_anon_peak_mib": sampler.peak["RssAnon"],
        "rss_file_peak_mib": sampler.peak["RssFile"],
        "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
