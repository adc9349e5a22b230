"""A run's result: the scored frame with what the run cost, its summary and the metadata
its Parquet file records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ragframe._version import __version__
from ragframe.judge.client import Judge, RunStats
from ragframe.metrics import (
    Metric,
    RagasScore,
)


@dataclass
class RunResult:
    """A scored frame with what the run cost and how it went."""

    frame: pl.DataFrame
    metrics: list[Metric | RagasScore]
    judge: Judge
    stats: RunStats
    seconds: float
    started: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: The run specification it executed (`RunSpec.metadata`), recorded as "run".
    run: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Per metric: mean with its interval, rows scored, rows failed; then requests and
        tokens (and, for a sample, how many of the log's rows it holds)."""
        from ragframe.engine.summary import cut_rows, metric_summary

        per_metric = {
            m.name: metric_summary(
                self.frame.get_column(m.name), m.direction, rule=getattr(m, "pass_rule", None)
            )
            for m in self.metrics
        }
        cut = cut_rows(self.frame, [f"{m.name}_detail" for m in self.metrics])
        return {
            "rows": self.frame.height,
            "seconds": round(self.seconds, 3),
            "metrics": per_metric,
            **self.stats.as_dict(),
            **self.extra,
            **self.cut_summary(cut),
            **self.judge_summary(),
        }

    def judge_summary(self) -> dict[str, Any]:
        """The summary's `judge` entry: the model that answered and where (`local` for the
        embedded judge), so that no figure is read as another judge's."""
        return {"judge": {"model": self.judge.model, "endpoint_host": self.judge.endpoint_host}}

    def cut_summary(self, cut: dict[str, Any]) -> dict[str, Any]:
        """The summary's `inputs_cut` entry (rows whose texts were cut before judging, by
        input, and the limit), absent when no text was cut."""
        if not cut:
            return {}
        return {"inputs_cut": {**cut, "max_text_chars": self.judge.max_text_chars}}

    def metadata(self) -> dict[str, Any]:
        """What the output Parquet file records: version, judge, prompts, time. No API key."""
        return {
            "ragframe_version": __version__,
            "created": self.started,
            "judge": self.judge.describe(),
            "metrics": {
                m.name: {
                    "class": type(m).__name__,
                    "direction": m.direction,
                    "config": m.config() if isinstance(m, Metric) else {"of": list(m.of)},
                    "prompt_hashes": (
                        {t.name: t.prompt_hash for t in m.tasks()} if isinstance(m, Metric) else {}
                    ),
                }
                for m in self.metrics
            },
            "summary": self.summary(),
            **({"run": self.run} if self.run else {}),
            # A sampled run says so at the top level too, where `summarize` and the report
            # look for it: {"rows": N, "of": total, "seed": S, "index_column": "row_index"}.
            **({"sample": self.extra["sample"]} if "sample" in self.extra else {}),
        }

    def write_parquet(self, path: str | Path, *, overwrite: bool = False) -> None:
        """Write the scored frame with its metadata, atomically. An existing file is refused
        unless `overwrite=True`: the same rule as `ragframe score` without `--overwrite`."""
        from ragframe.inputs.io import write_parquet

        write_parquet(self.frame, path, self.metadata(), overwrite=overwrite)

    def __str__(self) -> str:
        from ragframe.engine.summary import format_summary

        return format_summary(self.summary(), self.judge.local)

    def _repr_html_(self) -> str:
        from ragframe.engine.summary import summary_html

        return summary_html(self.summary(), self.judge.local)
