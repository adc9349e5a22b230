"""A uniform random sample of a log's rows, reproducible for a seed, drawn without loading the
log: score a thousand rows of a million before paying for the million.

How the rows are chosen: row i of the log (its 0-based position) gets a key, a 64-bit hash of
(seed, i) (SplitMix64: the i-th output of a SplitMix64 generator seeded with `seed`), and the
sample is the n rows with the smallest keys (ties, which 64-bit keys make vanishingly rare,
go to the earlier row). Every subset of n rows is equally likely, and the sample depends only
on (seed, number of rows, n): not on the file's format, its row groups, or the chunk size it
is read in. The same log as Parquet, JSON Lines or CSV gives the same rows for a seed.

What is read: a Parquet file records its row count, so the n positions are chosen from the
metadata alone (keys hashed in blocks, no data read), and only the row groups holding chosen
rows are decoded. JSON Lines and CSV do not record it, so they are read once, a chunk at a
time, keeping a running top-n by key. Memory: n rows plus one chunk, whatever the log's size.

The sample keeps each row's identity: its position in the log, 0-based, in a UInt64 column
`row_index` placed first, so the sample (and its scores) can be joined back to the log, e.g.
`log.with_row_index("row_index").join(scored_sample, on="row_index")`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import (
    FORMATS_READ,
    InputFile,
    ParquetInput,
    RemoteParquetInput,
    StorageOptions,
    open_input,
)

#: The column holding each sampled row's 0-based position in the log.
INDEX_COLUMN = "row_index"
#: Positions hashed at once when choosing from a row count (8 MiB of keys per block).
_KEY_BLOCK = 1 << 20
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_KEY = "\0key"


#: A sample's description (`Sample.describe`): the key recorded -> the attribute it holds.
DESCRIBED = {
    "rows": "rows",
    "of": "rows_total",
    "seed": "seed",
    "index_column": "index_column",
    "requested": "n",
    "all_rows": "all_rows",
}


@dataclass(frozen=True)
class Sample:
    """The sampled rows (`frame`: `row_index` first, then the log's columns, in log order),
    how many rows the log has (`rows_total`), and what was asked (`n`, `seed`)."""

    frame: pl.DataFrame
    rows_total: int
    n: int
    seed: int
    index_column: str = INDEX_COLUMN

    @property
    def rows(self) -> int:
        """Rows in the sample: n, or every row of a log with fewer."""
        return self.frame.height

    @property
    def all_rows(self) -> bool:
        """True when the log has no more than n rows, so the "sample" is the whole log."""
        return self.rows == self.rows_total

    def describe(self) -> dict[str, Any]:
        """What a scored file's metadata and a run summary record about the sample: each key
        of DESCRIBED with the attribute it reads."""
        return {key: getattr(self, attribute) for key, attribute in DESCRIBED.items()}


def draw_sample(
    data: pl.DataFrame | pl.LazyFrame | InputFile | str | Path,
    n: int,
    *,
    seed: int = 0,
    columns: Mapping[str, str] | None = None,
    select: Sequence[str] | None = None,
    index_column: str = INDEX_COLUMN,
    chunk_rows: int = 1 << 16,
    storage_options: StorageOptions | None = None,
) -> Sample:
    """A uniform random sample of `n` rows of `data` (every row if it has no more than n).

    `data`: a Polars DataFrame or LazyFrame (or a pandas DataFrame), an opened `InputFile`,
    or the path of a log in Parquet, JSON Lines or CSV. `seed`: an integer from 0 to
    2**64 - 1; the same seed gives the same rows of the same log, in any of its formats.
    `columns`: the run's column mapping (it says which CSV columns hold JSON lists, as in
    `evaluate`). `select`: keep only these columns (a Parquet file then reads nothing else).
    `index_column`: the name of the position column, for a log that already has a
    `row_index`. `chunk_rows`: rows read at a time (memory depends on it, the rows do not).
    `storage_options`: for a URL (`s3://...`), Polars' storage options (else the store's
    environment variables). A remote Parquet file is counted from its footer and scanned once.
    """
    _check(n, seed, chunk_rows)
    if isinstance(data, str | Path):
        from ragframe.inputs.columns import list_columns

        lists = list_columns(columns)
        data = open_input(data, list_columns=lists, storage_options=storage_options)
    elif type(data).__module__.startswith("pandas"):
        from ragframe.inputs.columns import load_frame

        data = load_frame(data)  # already in memory: converted, then sampled as a frame
    ask = _Ask(n, seed, select, index_column, chunk_rows)
    if isinstance(data, pl.LazyFrame):
        return _sample_lazy(data, ask)
    if isinstance(data, RemoteParquetInput):
        return _sample_lazy(data.scan, ask, repr(str(data.path)), data)
    if isinstance(data, pl.DataFrame):
        ask.check_columns(data.columns, "the frame")
        frame = data.select(select) if select is not None else data
        chosen = choose_positions(frame.height, n, seed)
        rows = frame.select(pl.all().gather(chosen)) if frame.width else frame[chosen]
        return ask.finish(rows, chosen, frame.height)
    if isinstance(data, ParquetInput):
        return _sample_parquet(data, ask)
    if isinstance(data, InputFile):
        return _sample_stream(data, ask)
    raise InputError(
        f"cannot sample a {type(data).__name__}: pass a polars DataFrame or LazyFrame, "
        f"or the path of a file in {FORMATS_READ}"
    )


def _check(n: int, seed: int, chunk_rows: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ConfigError(
            f"the sample size must be a whole number of rows, at least 1 (e.g. --sample 1000 "
            f"or sample=1000), not {n!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**64:
        raise ConfigError(f"the seed must be an integer from 0 to 2**64 - 1, not {seed!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be a positive integer, not {chunk_rows!r}")


# ------------------------------------------------------------------------------ the keys


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, on uint64 arrays (overflow wraps, as the algorithm needs)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def row_keys(seed: int, start: int, count: int) -> np.ndarray:
    """The keys of rows start .. start + count - 1: the (i + 1)-th SplitMix64 output for a
    state seeded by `seed` (itself mixed, so that nearby seeds give unrelated samples)."""
    state = _mix(np.array([seed], dtype=np.uint64))[0]
    positions = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    return _mix(state + positions * _GOLDEN)


def _smallest(keys: np.ndarray, positions: np.ndarray, n: int) -> np.ndarray:
    """Indices (into the arrays) of the n smallest (key, position) pairs, exact at ties."""
    if keys.size <= n:
        return np.arange(keys.size)
    kth = np.partition(keys, n - 1)[n - 1]
    below = np.flatnonzero(keys < kth)
    equal = np.flatnonzero(keys == kth)
    equal = equal[np.argsort(positions[equal], kind="stable")][: n - below.size]
    return np.concatenate([below, equal])


def choose_positions(total: int, n: int, seed: int) -> np.ndarray:
    """The sorted 0-based positions (int64) of the n rows sampled from `total`, without any
    row: the keys are hashed _KEY_BLOCK positions at a time, keeping the n smallest."""
    if total <= n:
        return np.arange(total, dtype=np.int64)
    keys = np.empty(0, dtype=np.uint64)
    positions = np.empty(0, dtype=np.int64)
    for start in range(0, total, _KEY_BLOCK):
        count = min(_KEY_BLOCK, total - start)
        block = row_keys(seed, start, count)
        where = np.arange(start, start + count, dtype=np.int64)
        if keys.size == n:  # a later row must beat the current n-th key outright
            better = block < keys.max()
            block, where = block[better], where[better]
        keys, positions = np.concatenate([keys, block]), np.concatenate([positions, where])
        keep = _smallest(keys, positions, n)
        keys, positions = keys[keep], positions[keep]
    return np.sort(positions)


# ------------------------------------------------------------------------------ the sources


@dataclass(frozen=True)
class _Ask:
    """What `draw_sample` was asked for, as every source's sampler takes it."""

    n: int
    seed: int
    select: Sequence[str] | None
    index_column: str
    chunk_rows: int

    def finish(self, rows: pl.DataFrame, positions: np.ndarray, total: int) -> Sample:
        """Put the position column first (UInt64) and wrap the result."""
        frame = rows.select(
            pl.Series(self.index_column, positions, dtype=pl.UInt64),
            *rows.columns,
        )
        return Sample(frame, total, int(self.n), int(self.seed), self.index_column)

    def check_columns(self, present: Sequence[str], what: str) -> None:
        """Refuse a selection of absent columns, and a log that already has the index column."""
        select, index_column = self.select, self.index_column
        if select is not None:
            absent = [c for c in select if c not in present]
            if absent:
                raise InputError(
                    f"select= names {absent}, which {what} lacks; its columns are {list(present)}"
                )
        kept = present if select is None else select
        if index_column in kept:
            raise InputError(
                f"{what} already has a column {index_column!r}, where the sample puts each row's "
                f"position in the log; rename that column first (e.g. "
                f"df.rename({{{index_column!r}: 'original_{index_column}'}})), or pass "
                f"index_column='another_name' to draw_sample"
            )


def _sample_lazy(
    lazy: pl.LazyFrame, ask: _Ask, what: str = "the frame", source: InputFile | None = None
) -> Sample:
    """Count the rows (Polars answers a scan's count from metadata where it can), then keep
    the chosen positions in one streaming pass. `source`: the remote file scanned, whose
    reading errors it says in one line."""
    try:
        ask.check_columns(lazy.collect_schema().names(), what)
        if ask.select is not None:
            lazy = lazy.select(ask.select)
        total = int(lazy.select(pl.len()).collect().item())
        chosen = choose_positions(total, ask.n, ask.seed)
        rows = (
            lazy.with_row_index(_KEY)
            .filter(pl.col(_KEY).cast(pl.Int64).is_in(pl.Series(chosen).implode()))
            .drop(_KEY)
            .collect(engine="streaming")
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        if source is None:
            raise
        raise source._unreadable(exc) from exc
    return ask.finish(rows, chosen, total)


def _sample_parquet(source: ParquetInput, ask: _Ask) -> Sample:
    """Choose the positions from the row count in the metadata, then decode only the row
    groups that hold them, a batch at a time, taking the chosen rows from each batch."""
    parquet = source.parquet
    ask.check_columns(parquet.schema_arrow.names, str(source.path))
    meta = parquet.metadata
    sizes = np.array([meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1])
    chosen = choose_positions(total, ask.n, ask.seed)
    group_of = np.searchsorted(starts, chosen, side="right") - 1
    taken: list[pa.RecordBatch] = []
    try:
        for group in np.unique(group_of):
            local = chosen[group_of == group] - starts[group]
            taken.extend(_take_from_group(parquet, int(group), local, ask.select, ask.chunk_rows))
    except (pa.ArrowException, OSError) as exc:
        raise source._unreadable(exc) from exc
    schema = parquet.schema_arrow
    if ask.select is not None:
        schema = pa.schema([schema.field(c) for c in ask.select])
    table = pa.Table.from_batches(taken, schema=schema)
    rows = pl.DataFrame(pl.from_arrow(table))
    return ask.finish(rows, chosen, total)


def _take_from_group(
    parquet: Any, group: int, local: np.ndarray, select: Sequence[str] | None, chunk_rows: int
) -> Iterator[pa.RecordBatch]:
    """The rows at `local` (sorted, 0-based within the row group) of one row group; stops
    decoding once the last of them is passed."""
    offset = 0
    last = int(local[-1])
    batches = parquet.iter_batches(
        batch_size=chunk_rows,
        row_groups=[group],
        columns=list(select) if select is not None else None,
        use_threads=False,
    )
    for batch in batches:
        inside = local[(local >= offset) & (local < offset + batch.num_rows)] - offset
        if inside.size:
            yield batch.take(pa.array(inside))
        offset += batch.num_rows
        if offset > last:
            break


def _sample_stream(source: InputFile, ask: _Ask) -> Sample:
    """One pass over a log whose row count is unknown (JSON Lines, CSV): each chunk's keys
    are hashed at once, and only the rows that beat the current n-th key join the n held."""
    ask.check_columns(source.schema_frame().columns, str(source.path))
    held: pl.DataFrame | None = None
    total = 0
    for chunk in source.chunks(ask.chunk_rows):
        if ask.select is not None:
            chunk = chunk.select(ask.select)
        keys = row_keys(ask.seed, total, chunk.height)
        candidates = chunk.with_columns(
            pl.Series(_KEY, keys, dtype=pl.UInt64),
            pl.int_range(total, total + chunk.height, dtype=pl.Int64).alias(ask.index_column),
        )
        total += chunk.height
        if held is not None and held.height == ask.n:
            threshold = int(held.get_column(_KEY).max())  # type: ignore[arg-type]
            candidates = candidates.filter(pl.col(_KEY) < threshold)
            if candidates.is_empty():
                continue
        merged = candidates if held is None else pl.concat([held, candidates], how="vertical")
        keep = _smallest(
            merged.get_column(_KEY).to_numpy(),
            merged.get_column(ask.index_column).to_numpy(),
            ask.n,
        )
        held = merged[np.sort(keep)]
    if held is None:
        empty = source.schema_frame()
        frame = empty.select(ask.select) if ask.select is not None else empty
        return ask.finish(frame, np.empty(0, dtype=np.int64), 0)
    held = held.sort(ask.index_column)
    positions = held.get_column(ask.index_column).to_numpy()
    return ask.finish(held.drop(_KEY, ask.index_column), positions, total)
