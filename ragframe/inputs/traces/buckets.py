"""Large exports in bounded memory: spans partitioned by trace, assembled bucket by bucket, and
the rows merged back into source order on disk.

Grouping a whole export by trace id holds every span's extracted columns at once (1.3 GiB for
a million spans). Here a streaming pass (Polars' streaming engine, one `sink_parquet`
partitioned by key) writes only the span frame's columns (`SPAN_SCHEMA`) into Parquet bucket
files in a temporary directory, the bucket being a hash of the trace id, so that all of a
trace's spans land in the same bucket. Each bucket is then assembled on its own with the same
rules (`assemble`) and its rows, sorted, written to a file of their own; a streaming merge of
those sorted files gives the rows in the order one pass would give them.

What stays in memory, however large the file: the partitioned sink's buffers (at most
`FANOUT` buckets open at once, `BUFFERED_SPANS` spans between them; more buckets are made by
partitioning each part again), one bucket's working set (`BUCKET_BYTES` of file), and the
merge's buffers. The rows themselves are in memory only when the caller asks for a frame.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ragframe.errors import InputError
from ragframe.inputs.traces.assemble import (
    ALWAYS,
    ORDER_KEY,
    ROW_SCHEMA,
    SPAN_SCHEMA,
    assemble,
    assemble_unordered,
    conform,
    drop_empty,
    valued_columns,
)

#: File bytes per bucket: about 90,000 spans of an SDK export of a small RAG pipeline
#: (1.4 KB a span), a working set of about 250 MiB.
BUCKET_BYTES = 128 * 1024 * 1024
#: The most buckets one partitioned pass keeps open: each open bucket costs its own Parquet
#: writer (about 2 MiB measured) beside its buffered rows, so more buckets are made in levels.
FANOUT = 16
#: Spans the open buckets of a partitioned pass buffer between them (row groups are
#: `BUFFERED_SPANS // open buckets` rows): Polars' default row group per bucket held the whole
#: file (1.2 GiB for a million spans).
BUFFERED_SPANS = 50_000
#: Rows per row group of the output, and at most per group of the sorted parts (whose groups
#: are sized so that reading one range of source lines skips the groups outside it).
ROW_GROUP = 10_000
MIN_ROW_GROUP = 500
#: Fixed so that a run is reproducible; which bucket a trace lands in never shows in the result.
SEED = 22

__all__ = [
    "BUCKET_BYTES",
    "FANOUT",
    "buckets_for",
    "collect_assembled",
    "sink_assembled",
]


def buckets_for(path: Path, buckets: int | None) -> int:
    """K for a file: the caller's when given, else one bucket per `BUCKET_BYTES` of file (one
    bucket, i.e. the single pass, for anything smaller, so small reads get no slower)."""
    if buckets is None:
        return max(1, -(-path.stat().st_size // BUCKET_BYTES))
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise InputError(f"buckets must be a whole number ≥ 1, not {buckets!r}")
    return buckets


def collect_assembled(spans: pl.LazyFrame, buckets: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows in source order, without the columns no row has a value for, and skipped) of a
    span frame, collected: one pass when `buckets` is 1, else bucket by bucket through a
    temporary Parquet file of the rows."""
    if buckets <= 1:
        rows, skipped = pl.collect_all(list(assemble(spans)))
        return drop_empty(rows), skipped
    with tempfile.TemporaryDirectory(prefix="ragframe-traces-") as tmp:
        out = Path(tmp) / "rows.parquet"
        skipped = sink_assembled(spans, buckets, out)
        return pl.read_parquet(out), skipped


def sink_assembled(spans: pl.LazyFrame, buckets: int, out: Path) -> pl.DataFrame:
    """Write the rows of a span frame to the Parquet file `out`, in source order, assembled in
    `buckets` parts, without the columns no row has a value for (each part's rows are in
    memory once, so which columns have values is known, the union over the parts, before
    the merge writes `out`); return the skipped list (in bucket order: the caller sorts it)."""
    with tempfile.TemporaryDirectory(prefix="ragframe-traces-", dir=out.parent) as tmp:
        sorted_parts: list[Path] = []
        skipped: list[pl.DataFrame] = []
        valued: set[str] = set()
        for number, part in enumerate(_partitions(spans, buckets, Path(tmp), divisor=1)):
            rows, skips = pl.collect_all(list(assemble_unordered(part)))
            valued |= valued_columns(rows)
            path = Path(tmp) / f"rows-{number:05d}.parquet"
            rows = rows.with_columns(ORDER_KEY).sort("order")
            rows.write_parquet(path, row_group_size=_part_row_group(rows.height, buckets))
            sorted_parts.append(path)
            skipped.append(skips)
        if not sorted_parts:  # an empty span frame: no bucket file was written
            rows, skips = pl.collect_all(list(assemble(pl.LazyFrame(schema=SPAN_SCHEMA))))
            drop_empty(rows).write_parquet(out)
            return skips
        columns = [c for c in ROW_SCHEMA if c in ALWAYS or c in valued]
        _merge_sorted_parts(sorted_parts, out, ranges=max(buckets, 1), columns=columns)
    return pl.concat(skipped)


def _partitions(
    spans: pl.LazyFrame, buckets: int, folder: Path, *, divisor: int
) -> Iterator[pl.LazyFrame]:
    """The span frame split into `buckets` parts by a hash of the trace id, yielded one at a
    time (each part's files are deleted once the next is asked for). At most `FANOUT` parts
    are written at once; a part that must be split further is partitioned again, on the next
    digits (base FANOUT) of the same hash."""
    fanout = min(buckets, FANOUT)
    if fanout <= 1:
        yield spans
        return
    bucket = (pl.col("trace_id").hash(seed=SEED) // divisor % fanout).alias("bucket")
    conform(spans).with_columns(bucket).sink_parquet(
        pl.PartitionBy(folder, key="bucket", include_key=False),
        mkdir=True,
        row_group_size=max(1_000, BUFFERED_SPANS // fanout),
    )
    rest = -(-buckets // fanout)
    for directory in sorted(p for p in folder.iterdir() if p.is_dir()):
        part = pl.scan_parquet(directory / "*.parquet", hive_partitioning=False)
        yield from _partitions(part, rest, directory / "next", divisor=divisor * fanout)
        shutil.rmtree(directory)  # assembled: disk use stays near one copy of the spans


def _part_row_group(rows: int, ranges: int) -> int:
    """Row groups of a sorted part: each part spans the whole file's lines, so a group holds
    1 / (groups per part) of them; about two groups per range keep the merge's ranges fine."""
    return min(ROW_GROUP, max(MIN_ROW_GROUP, rows // (2 * max(ranges, 1))))


def _merge_sorted_parts(parts: list[Path], out: Path, ranges: int, columns: list[str]) -> None:
    """The sorted part files merged into `out` in `order`, one range of source lines at a
    time: each range's rows are read from every part (row groups outside it skipped by their
    statistics), sorted and appended; only `columns` are read and written. Polars' own
    streaming `merge_sorted` held 3x the rows."""
    scan = pl.scan_parquet(parts)
    schema = pl.DataFrame(schema={c: ROW_SCHEMA[c] for c in columns}).to_arrow().schema
    starts = _range_starts(parts, ranges)
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for start, end in zip(starts, [*starts[1:], None], strict=True):
            in_range = pl.col("first_line") >= start
            if end is not None:
                in_range &= pl.col("first_line") < end
            rows = scan.filter(in_range).sort("order").select(columns).collect()
            writer.write_table(rows.to_arrow().cast(schema), ROW_GROUP)


def _range_starts(parts: list[Path], ranges: int) -> list[int]:
    """Where each range of `first_line` starts, so that the ranges hold about the same number
    of rows however the rows spread over the file: read from the row groups' statistics
    (largest `first_line` and row count of each group), never from the rows."""
    groups: list[tuple[int, int]] = []
    for path in parts:
        meta = pq.ParquetFile(path).metadata
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            for j in range(group.num_columns):
                column = group.column(j)
                if column.path_in_schema == "first_line" and column.statistics is not None:
                    groups.append((int(column.statistics.max), group.num_rows))
    total = sum(n for _, n in groups)
    per_range = max(ROW_GROUP, -(-total // max(ranges, 1)))
    starts, filled = [0], 0
    for largest, n in sorted(groups):
        filled += n
        if filled >= per_range:
            starts.append(largest + 1)
            filled = 0
    return starts
