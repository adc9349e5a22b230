"""The partitions of a command-line run (`ragframe score DIR -o OUT --ray`): the Parquet
files found, where each one's scored copy goes, whether it was scored already (its
fingerprint and the run's identity, read back from the output's metadata), and their rows as
a Ray Dataset, each row tagged with its partition and position."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data

from ragframe.engine.stream import StreamResult
from ragframe.errors import ConfigError, InputError
from ragframe.inputs.io import open_parquet, read_metadata
from ragframe.judge.client import Judge, RunStats
from ragframe.metrics import Metric, RagasScore

#: Pass-through columns of a CLI run: which partition a row came from, and its position.
PART_COLUMN = "__ragframe_partition__"
ROW_COLUMN = "__ragframe_row__"
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass
class Partition:
    """One input Parquet file and where its scored copy goes."""

    index: int
    source: Path
    target: Path
    rows: int
    fingerprint: str
    schema: pa.Schema
    #: Rows in each row group, in file order (the units Ray reads).
    groups: list[int] = field(default_factory=list)


def find_partitions(source: str | Path, out_dir: str | Path) -> list[Partition]:
    """The Parquet files of a directory (every `.parquet` / `.pq` below it), a glob, or one
    file, in path order, each with its output path: the same path relative to the directory
    (or to the glob's fixed prefix) under `out_dir`."""
    text = str(source)
    if any(ch in text for ch in "*?["):
        root = Path(text.split("*")[0].split("?")[0].split("[")[0])
        root = root if text.endswith(os.sep) or root.is_dir() else root.parent
        files = [Path(p) for p in glob.glob(text, recursive=True)]
    elif Path(text).is_dir():
        root = Path(text)
        files = [p for p in root.rglob("*") if p.suffix.lower() in PARQUET_SUFFIXES]
    elif Path(text).is_file():
        root, files = Path(text).parent, [Path(text)]
    else:
        raise InputError(f"{text!r} is neither a file, a directory nor a glob that matches")
    files = sorted(p for p in files if p.is_file() and not p.name.startswith((".", "_")))
    if not files:
        raise InputError(f"no Parquet files (.parquet, .pq) found in {text!r}")
    out = Path(out_dir)
    parts = []
    for index, path in enumerate(files):
        meta = open_parquet(path).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        target = out / path.relative_to(root)
        if target.resolve() == path.resolve():
            raise ConfigError(f"the output {str(target)!r} is its input; pass another -o")
        schema = meta.schema.to_arrow_schema().remove_metadata()
        parts.append(
            Partition(index, path, target, meta.num_rows, fingerprint(path), schema, groups)
        )
    return parts


def fingerprint(path: Path) -> str:
    """What identifies a Parquet file's content without reading its data: a hash of its size
    and its footer (every row group's row count, byte offsets, sizes and column statistics)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(0, size - 8))
        tail = handle.read(8)
        length = int.from_bytes(tail[:4], "little")
        handle.seek(max(0, size - 8 - length))
        footer = handle.read(length)
    return hashlib.sha256(size.to_bytes(8, "little") + footer).hexdigest()


def run_identity(
    metrics: list[Metric | RagasScore], judge: Judge, columns: Mapping[str, str] | None
) -> dict[str, Any]:
    """What an output's metadata must record for its partition to count as scored by this
    run: the metrics (classes, settings, prompt hashes), the judge, and the settings that
    change answers or columns (JSON-normalised, as read back from a file)."""
    block = StreamResult(pl.DataFrame(), metrics, judge, RunStats(), 0.0, "").metadata()["metrics"]
    rules = {m.name: getattr(m, "pass_rule", None) for m in metrics}
    settings = {
        "columns": dict(columns or {}),
        "thresholds": {k: [r.value, r.strict] for k, r in rules.items() if r is not None},
        "max_text_chars": judge.max_text_chars,
        "max_tokens": judge.max_tokens_cap,
        "structured": judge.structured,
        "output_bounds": judge.output_bounds,
        "repair_attempts": judge.repair_attempts,
        "embedding_max_tokens": judge.embedding_max_tokens,
        "retry_failed": judge.retry_failed,
    }
    identity = {"metrics": block, "judge": judge.describe(), "settings": settings}
    return json.loads(json.dumps(identity, default=str))  # type: ignore[no-any-return]


def scored_before(part: Partition, identity: Mapping[str, Any]) -> str | None:
    """None when `part.target` holds this partition scored with this identity (skip it);
    else what differs, for the error (or "" when there is no output yet)."""
    if not part.target.exists():
        return ""
    meta = read_metadata(part.target)
    recorded = (meta.get("input") or {}).get("fingerprint")
    if recorded != part.fingerprint:
        return f"it was scored from other input (or not by ragframe --ray): {part.source}"
    for key in ("metrics", "judge", "settings"):
        if meta.get(key) != identity[key]:
            return f"its {key} differ from this run's"
    return None


def read_slices(items: dict[str, Any], rows: int) -> Iterator[pa.Table]:
    """Read row groups (one per item: file, group, first row, partition) in slices of at
    most `rows` rows, each tagged with its partition and each row with its position."""
    for path, group, first, part in zip(
        items["path"], items["group"], items["first"], items["part"], strict=True
    ):
        parquet = pq.ParquetFile(str(path), buffer_size=1 << 20, pre_buffer=False)
        offset = int(first)
        for batch in parquet.iter_batches(
            batch_size=rows, row_groups=[int(group)], use_threads=False
        ):
            n = batch.num_rows
            table = pa.Table.from_batches([batch])
            table = table.append_column(PART_COLUMN, pa.array([int(part)] * n, pa.int32()))
            table = table.append_column(ROW_COLUMN, pa.array(range(offset, offset + n), pa.int64()))
            offset += n
            yield table


def partition_dataset(parts: list[Partition], rows: int) -> ray.data.Dataset:
    """The partitions' rows as a Ray Dataset, read by Ray tasks a row group at a time."""
    items = []
    for part in parts:
        first = 0
        for group, count in enumerate(part.groups):
            if count:
                items.append(
                    {"path": str(part.source), "group": group, "first": first, "part": part.index}
                )
            first += count
    ds = ray.data.from_items(items, override_num_blocks=max(1, len(items)))
    return ds.map_batches(
        read_slices, fn_kwargs={"rows": rows}, batch_size=1, batch_format="numpy", num_cpus=0
    )


def one_schema(parts: list[Partition]) -> pa.Schema:
    """The partitions' one schema, or an InputError naming the first that differs."""
    first = parts[0]
    for part in parts[1:]:
        if not part.schema.equals(first.schema):
            raise InputError(
                f"the partitions differ in columns or types: {str(part.source)!r} has "
                f"{part.schema.names}, {str(first.source)!r} has {first.schema.names}; score "
                "them in separate runs, or cast them to one schema"
            )
    for name in (PART_COLUMN, ROW_COLUMN):
        if name in first.schema.names:
            raise InputError(f"the input has a column {name!r}, which ragframe uses; rename it")
    return first.schema


def to_score(
    parts: list[Partition], identity: Mapping[str, Any], overwrite: bool
) -> list[Partition]:
    """The partitions to score: those without this run's output (all with `overwrite`)."""
    todo = []
    for part in parts:
        why = "" if overwrite else scored_before(part, identity)
        if why is None:
            continue
        if why:
            raise ConfigError(
                f"output {str(part.target)!r} exists and {why}; pass --overwrite "
                "(overwrite=True) to score it again, or another output directory"
            )
        todo.append(part)
    return todo
