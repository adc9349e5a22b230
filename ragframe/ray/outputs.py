"""A partitioned run's outputs: each partition's file written as its scored rows come back
from Ray, in order (`PartitionOutput`, fed by `route`), and the run's result
(`PartitionsResult`), whose summary folds every scored partition's together."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from ragframe.engine.arrow import to_frame
from ragframe.engine.stream import StreamResult
from ragframe.engine.summary import Tally
from ragframe.errors import RagframeError
from ragframe.inputs.io import AtomicParquetWriter
from ragframe.judge.client import Judge, RunStats
from ragframe.judge.pricing import with_cached_rate
from ragframe.metrics import Metric, RagasScore
from ragframe.ray.actors import STATS_COLUMN, add_counts
from ragframe.ray.partitions import PART_COLUMN, ROW_COLUMN, Partition


class PartitionOutput:
    """One partition's output being written: rows arrive in order; the file is put in place
    (atomically, with its metadata and summary) when the last one is written."""

    @classmethod
    def start(
        cls,
        part: Partition,
        template: pl.DataFrame,
        metrics: list[Metric | RagasScore],
        judge: Judge,
        started: str,
        ray_info: Mapping[str, Any],
        identity: Mapping[str, Any],
        run: dict[str, Any],
    ) -> PartitionOutput:
        """The output of `part`: a streamed run's result (its metadata), plus the input's
        fingerprint and the run's settings, which a rerun compares to skip it."""
        stats = RunStats(price=with_cached_rate(judge.price, judge.model))
        extra = {"ray": {**ray_info, "partition": part.index}}
        result = StreamResult(
            template, metrics, judge, stats, 0.0, started, extra=extra, run=run, output=part.target
        )
        source = {"path": str(part.source), "fingerprint": part.fingerprint, "rows": part.rows}
        return cls(part, result, {"input": source, "settings": identity["settings"]})

    def __init__(self, part: Partition, result: StreamResult, metadata: dict[str, Any]) -> None:
        self.part = part
        self.result = result
        self.metadata = metadata
        self.written = 0
        self.started = time.monotonic()
        self._writer: AtomicParquetWriter | None = None

    def write(self, scored: pl.DataFrame) -> None:
        if self._writer is None:
            schema = self.result.frame.to_arrow().schema
            self._writer = AtomicParquetWriter(
                self.part.target, schema, {**self.metadata, "summary": None}, overwrite=True
            )
        if scored.height:
            self._writer.write(scored)
            self.result.add_chunk(scored)
        self.written += scored.height

    def finish(self) -> None:
        if self._writer is None:  # a partition without rows: its schema and metadata alone
            self.write(self.result.frame)
        assert self._writer is not None
        self.result.seconds = time.monotonic() - self.started
        self._writer.update_metadata({**self.result.metadata(), **_extra_keys(self.metadata)})
        self._writer.close()

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()


def _extra_keys(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: metadata[k] for k in ("input", "settings") if k in metadata}


@dataclass
class PartitionsResult:
    """What a partitioned run did: the partitions it scored (with their results) and those it
    skipped as already scored; `stats` adds up the requests of every scored partition."""

    scored: list[StreamResult]
    skipped: list[Partition]
    partitions: list[Partition]
    metrics: list[Metric | RagasScore]
    judge: Judge
    stats: RunStats
    seconds: float

    def summary(self) -> dict[str, Any]:
        """The run's summary: every scored partition's scores folded together."""
        total = StreamResult(
            pl.DataFrame(), self.metrics, self.judge, self.stats, self.seconds, "", extra={}
        )
        for result in self.scored:
            for name, tally in result.tallies.items():
                total.tallies.setdefault(name, Tally(tally.direction, tally.rule)).merge(tally)
            total.rows += result.rows
        total.extra = {
            "partitions": len(self.partitions),
            "partitions_scored": len(self.scored),
            "partitions_skipped": len(self.skipped),
        }
        return total.summary()


def route(table: pa.Table, outputs: dict[int, PartitionOutput], stats: RunStats) -> None:
    """Write a scored batch's rows to their partitions' outputs; finish the full ones."""
    frame = to_frame(table)
    counts = frame.get_column(STATS_COLUMN).drop_nulls()
    for cell in counts:  # a batch is one partition's slice (see `map_scores`)
        delta = json.loads(cell)
        add_counts(stats, delta)
        add_counts(outputs[int(frame.item(0, PART_COLUMN))].result.stats, delta)
    frame = frame.drop(STATS_COLUMN)
    for (index,), rows in frame.partition_by(
        PART_COLUMN, maintain_order=True, as_dict=True
    ).items():
        output = outputs[int(index)]  # type: ignore[call-overload]
        positions = rows.get_column(ROW_COLUMN)
        if positions[0] != output.written or positions[-1] != output.written + rows.height - 1:
            raise RagframeError(
                f"rows of {str(output.part.source)!r} came back out of order (row "
                f"{positions[0]} where {output.written} was due); nothing was written for it"
            )
        output.write(rows.drop(PART_COLUMN, ROW_COLUMN))
        if output.written == output.part.rows:
            output.finish()
