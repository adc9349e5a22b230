"""Parquet in and out: nested columns stay nested, run facts go into the file metadata, and
files are written atomically (a temporary file, then a rename)."""

from __future__ import annotations

import glob
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ragframe.errors import ConfigError, InputError

METADATA_KEY = b"ragframe"


class AtomicParquetWriter:
    """Writes row groups to a temporary file beside the target and renames it on close.

    A crash leaves the old output (or none) in place, never a half-written file. The temporary
    file gets the user's default permissions (umask), like any file the user creates.
    """

    def __init__(
        self, path: str | Path, schema: pa.Schema, metadata: dict[str, Any], *, overwrite: bool
    ) -> None:
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise ConfigError(
                f"output {str(self.path)!r} exists; pass overwrite=True (--overwrite) to replace it"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(self.path)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.{os.getpid()}.", suffix=".tmp", dir=self.path.parent
        )
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        self._tmp = Path(tmp)
        self._schema = schema.with_metadata(
            {**(schema.metadata or {}), METADATA_KEY: json.dumps(metadata, default=str).encode()}
        )
        self._writer = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")

    def write(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        self._writer.write_table(table.cast(self._schema.remove_metadata()))

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Metadata known only at the end (the run's totals) replaces what was given at start."""
        self._writer.add_key_value_metadata(
            {METADATA_KEY.decode(): json.dumps(metadata, default=str)}
        )

    def close(self) -> None:
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)


def input_path(path: str | Path) -> Path:
    """`path` as a Path, or an InputError saying that it does not exist or is a directory."""
    source = Path(path)
    if not source.exists():
        raise InputError(f"input file {str(source)!r} does not exist")
    if source.is_dir():
        raise InputError(f"input {str(source)!r} is a directory; pass a Parquet file")
    return source


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """Open a Parquet file to be read in chunks of rows, or say why it cannot be."""
    source = input_path(path)
    try:
        # Buffered column-chunk reads: otherwise pyarrow reads a whole row group's column chunk
        # at once (a row group may hold hundreds of thousands of rows), and memory grows with it.
        return pq.ParquetFile(source, buffer_size=1 << 20, pre_buffer=False)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"cannot read {str(source)!r} as Parquet: {exc}") from exc


def empty_frame(parquet: pq.ParquetFile) -> pl.DataFrame:
    """The file's columns and types with no rows: enough to validate a run before reading."""
    return pl.DataFrame(pl.from_arrow(parquet.schema_arrow.empty_table()))


def read_chunks(parquet: pq.ParquetFile, chunk_rows: int) -> Iterator[pl.DataFrame]:
    """The file's rows in order, `chunk_rows` at a time, as Polars frames.

    Decoded on the calling thread: pyarrow's decoding threads buy nothing at a few thousand
    rows per chunk, and each keeps buffers of its own (peak memory then grows with the file).
    """
    for batch in parquet.iter_batches(batch_size=chunk_rows, use_threads=False):
        yield pl.DataFrame(pl.from_arrow(batch))


def _remove_stale_temporaries(path: Path) -> None:
    """Delete temporary files that earlier writers of `path` left when they were killed
    (SIGKILL gives no chance to clean up): those whose writing process no longer exists."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = stale.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.unlink(missing_ok=True)
        except PermissionError:
            pass  # another user's live process


def _unwritable(dtype: pl.DataType) -> str | None:
    """Why Parquet (through pyarrow) cannot hold a column of this type, or None if it can."""
    if isinstance(dtype, pl.Object):
        return "it holds Python objects; convert them, e.g. to pl.String"
    if dtype in {getattr(pl, "Int128", None), getattr(pl, "UInt128", None)} - {None}:
        return "pyarrow has no 128-bit integers; cast it to pl.Decimal(38, 0) or pl.String"
    if isinstance(dtype, pl.Struct):
        if not dtype.fields:
            return "a struct with no fields has no Parquet type; drop it"
        return next((w for w in (_unwritable(f.dtype) for f in dtype.fields) if w), None)
    if isinstance(dtype, pl.List | pl.Array):
        return _unwritable(dtype.inner)
    return None


def check_writable(schema: pl.Schema) -> None:
    """Refuse, naming the column and the fix, a frame that Parquet cannot hold.

    Called before writing (and by callers before scoring, when they can): without it an
    Object column is silently stored as 8-byte pointers, and Int128 fails deep in pyarrow.
    """
    problems = [
        f"{name!r} ({dtype}): {why}"
        for name, dtype in schema.items()
        if (why := _unwritable(dtype))
    ]
    if problems:
        raise InputError("cannot write these columns to Parquet: " + "; ".join(problems))


def write_parquet(
    frame: pl.DataFrame, path: str | Path, metadata: dict[str, Any], *, overwrite: bool = True
) -> None:
    """Write `frame` with ragframe's metadata, atomically."""
    check_writable(frame.schema)
    writer = AtomicParquetWriter(path, frame.to_arrow().schema, metadata, overwrite=overwrite)
    try:
        writer.write(frame)
    except BaseException:
        writer.abort()
        raise
    writer.close()


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata ragframe recorded in a scored Parquet file ({} if none)."""
    # The file's key-value metadata: a streamed write replaces the start-of-run entry with the
    # final one at close (the Arrow schema keeps the first).
    raw = pq.read_metadata(path).metadata or {}
    blob = raw.get(METADATA_KEY)
    return json.loads(blob) if blob else {}
