"""Large exports in bounded memory: spans partitioned by trace, then assembled bucket by bucket.

Grouping a whole export by trace id holds every span's extracted columns at once (1.3 GiB for
a million spans). Here a first streaming pass (Polars' streaming engine, one `sink_parquet`
partitioned by key) writes only the span frame's columns (`SPAN_SCHEMA`) into K Parquet bucket
files in a temporary directory, the bucket being a hash of the trace id, so that all of a
trace's spans land in the same bucket. Each bucket is then assembled on its own with the same
rules (`assemble`), and the rows are put in source order at the end, exactly as one pass
would give them. Peak memory is then one bucket's working set plus the rows read so far.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.traces.assemble import (
    SPAN_SCHEMA,
    assemble,
    assemble_unordered,
    in_source_order,
)

#: File bytes per bucket: about 90,000 spans of an SDK export of a small RAG pipeline
#: (1.4 KB a span), a working set of about 250 MiB.
BUCKET_BYTES = 128 * 1024 * 1024
#: Rows per Parquet row group in a bucket file: the partitioned sink buffers a row group per
#: open bucket, which at Polars' default held the whole file (1.2 GiB for a million spans).
ROW_GROUP = 10_000
#: Fixed so that a run is reproducible; which bucket a trace lands in never shows in the result.
SEED = 22

__all__ = ["BUCKET_BYTES", "assemble_in_buckets", "buckets_for", "collect_assembled"]


def buckets_for(path: Path, buckets: int | None) -> int:
    """K for a file: the caller's when given, else one bucket per `BUCKET_BYTES` of file (one
    bucket, i.e. the single pass, for anything smaller, so small reads get no slower)."""
    if buckets is None:
        return max(1, -(-path.stat().st_size // BUCKET_BYTES))
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise InputError(f"buckets must be a whole number ≥ 1, not {buckets!r}")
    return buckets


def collect_assembled(spans: pl.LazyFrame, buckets: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows, skipped) of a span frame: one pass when `buckets` is 1, else bucket by bucket."""
    if buckets <= 1:
        rows, skipped = pl.collect_all(list(assemble(spans)))
        return rows, skipped
    return assemble_in_buckets(spans, buckets)


def assemble_in_buckets(spans: pl.LazyFrame, buckets: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows, skipped) assembled bucket by bucket; the rows in the single pass's order, the
    skipped list in bucket order (the caller sorts it by line)."""
    columns = [pl.col(c).cast(t) for c, t in SPAN_SCHEMA.items()]
    bucket = (pl.col("trace_id").hash(seed=SEED) % buckets).alias("bucket")
    rows: list[pl.DataFrame] = []
    skipped: list[pl.DataFrame] = []
    with tempfile.TemporaryDirectory(prefix="ragframe-traces-") as tmp:
        spans.select(*columns, bucket).sink_parquet(
            pl.PartitionBy(tmp, key="bucket", include_key=False),
            mkdir=True,
            row_group_size=ROW_GROUP,
        )
        for directory in sorted(Path(tmp).iterdir()):
            part = pl.scan_parquet(directory / "*.parquet", hive_partitioning=False)
            found, skips = pl.collect_all(list(assemble_unordered(part)))
            rows.append(found)
            skipped.append(skips)
    if not rows:
        return collect_assembled(pl.LazyFrame(schema=SPAN_SCHEMA), 1)
    ordered = in_source_order(pl.concat(rows, rechunk=False).lazy()).collect()
    return ordered, pl.concat(skipped)
