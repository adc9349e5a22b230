"""A run's result: the scored frame with what the run cost, its summary and the metadata
its Parquet file records; the scored frame as pandas, for a pandas input (converted here, at
the edge: pandas is imported only when asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ragframe._version import __version__
from ragframe.errors import InputError
from ragframe.judge.client import Judge, RunStats
from ragframe.metrics import (
    Metric,
    RagasScore,
)
from ragframe.metrics.base import null_by_design

if TYPE_CHECKING:
    import pandas as pd


def is_pandas(data: Any) -> bool:
    """Whether `data` is a pandas object (told by its module: pandas is not imported)."""
    return type(data).__module__.startswith("pandas")


class RowsFailedWarning(RuntimeWarning):
    """Rows of a run failed to score (null, the reason in `{metric}_detail.error`): what
    `evaluate` and `run` warn of, in one line with the rows failed per metric and the first
    error. Rows null by design (a missing input; an answer with nothing to score, "no factual
    claims found in the answer") are not failures and are not warned of.
    `warnings.simplefilter("error", RowsFailedWarning)` makes it an error (in CI)."""


#: Characters of the first error quoted in a `RowsFailedWarning`.
FIRST_ERROR_CHARS = 200


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
    #: The pandas DataFrame the run scored, when it was one: `to_pandas` keeps its index and
    #: its columns as they were.
    source: Any = field(default=None, repr=False)

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

    def failed_line(self) -> str | None:
        """One line on the rows that failed to score: how many per metric and the first
        error (its metric and row position); None when none failed. A row null by design
        (`null_by_design`: a missing input, or nothing to score) is no failure, as for exit
        status 4; nor is an aggregate's null, which only follows its inputs'."""
        counts: list[str] = []
        first = ""
        for m in self.metrics:
            if not isinstance(m, Metric) or m.name not in self.frame.columns:
                continue
            failed = _failed_rows(self.frame, m.name)
            if not failed.len():
                continue
            counts.append(f"{m.name} {failed.len()}")
            if first or not _has_error(self.frame, m.name):
                continue
            errors = self.frame.get_column(f"{m.name}_detail").struct.field("error")
            found = [int(row) for row in failed if errors[int(row)] is not None]
            if found:
                text = " ".join(str(errors[found[0]]).split())
                if len(text) > FIRST_ERROR_CHARS:
                    text = text[: FIRST_ERROR_CHARS - 3] + "..."
                first = f"; the first error, {m.name} row {found[0]}: {text}"
        if not counts:
            return None
        return (
            f"rows failed to score, of {self.frame.height}: {', '.join(counts)} (their scores "
            f"are null){first}; each row's reason is in {{metric}}_detail.error"
        )

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

    def to_pandas(self) -> pd.DataFrame:
        """The scored frame as a pandas DataFrame (pandas must be installed).

        For a pandas input, its index and its columns come back as they were (a sample's
        rows keep their index labels, and gain `row_index`); the added columns are in pandas'
        Arrow-backed types (`pd.ArrowDtype`), so nulls stay nulls and a detail cell is a dict
        of Python values (`df["faithfulness_detail"].iloc[0]["claims"]` is a list), its
        fields reachable with `.struct.field("error")`. For any other input, the whole frame
        in those types.

        Returns:
            The scored frame in pandas.
        """
        return pandas_frame(self.frame, self.source, self.extra.get("sample"))

    def write_parquet(
        self,
        path: str | Path,
        *,
        frame: pl.DataFrame | pl.LazyFrame | pd.DataFrame | None = None,
        overwrite: bool = False,
    ) -> None:
        """Write the scored frame with the run's metadata (judge, prompt hashes, options,
        summary), atomically: `ragframe.read_metadata(path)` reads it back, and `compare`
        and `report` warn on a judge or prompt that differs, as for `ragframe score`'s
        output. For a pandas input, its named index (the row id, often) is written too, as
        its first columns, as `to_pandas` keeps it as the index.

        Args:
            path: The Parquet file to write.
            frame: Write this frame instead of `.frame`: the scored frame after your own
                steps (joined with experiment columns, say; Polars or pandas, whose index
                is written as columns when it is named). It must keep every score column
                of the run, which the metadata describes.
            overwrite: Replace an existing file; otherwise it is refused, as `ragframe score`
                refuses one without `--overwrite`.

        Raises:
            ConfigError: `path` exists and `overwrite` is False.
            InputError: `frame` lacks a score column of the run, or a column Parquet cannot
                hold.
        """
        from ragframe.inputs.io import write_parquet

        if frame is None:  # a pandas input's named index (its row id, often) is data too
            table = with_index(self.frame, self.source, self.extra.get("sample"))
        else:
            table = _polars(frame)
        missing = [m.name for m in self.metrics if m.name not in table.columns]
        if missing:
            raise InputError(
                f"the frame to write lacks the score column {missing[0]!r} of this run, whose "
                "metadata describes it; keep the run's score columns (or write result.frame)"
            )
        write_parquet(table, path, self.metadata(), overwrite=overwrite)

    def __str__(self) -> str:
        from ragframe.engine.summary import format_summary

        return format_summary(self.summary(), self.judge.local)

    def _repr_html_(self) -> str:
        from ragframe.engine.summary import summary_html

        return summary_html(self.summary(), self.judge.local)


def _has_error(frame: pl.DataFrame, name: str) -> bool:
    """Whether the metric's detail has the `error` field that says why a row is null."""
    detail = frame.schema.get(f"{name}_detail")
    return isinstance(detail, pl.Struct) and "error" in {f.name for f in detail.fields}


def _failed_rows(frame: pl.DataFrame, name: str) -> pl.Series:
    """Positions of the rows the metric failed to score: null (or NaN) and not null by
    design (a null score without a reason counts as failed)."""
    score = pl.col(name)
    missing = score.is_null()
    if frame.schema[name].is_float():
        missing = missing | score.is_nan().fill_null(True)
    if _has_error(frame, name):
        missing = missing & ~null_by_design(pl.col(f"{name}_detail").struct.field("error"))
    return frame.select(missing.alias("failed")).get_column("failed").arg_true()


def pandas_as_polars(frame: Any, what: str) -> pl.DataFrame:
    """A pandas frame as Polars, as a run's file keeps it (`with_index`: a named index, the
    row id often, is data, kept as the first columns), or one InputError saying what could
    not be done (`what`: "write this pandas frame", "read scores from the pandas frame") and
    which column Polars could not convert. Every reader and writer of pandas frames uses it."""
    try:
        table = pl.from_pandas(frame)
    except (ValueError, TypeError, pl.exceptions.PolarsError) as exc:
        raise InputError(
            f"cannot {what} ({' '.join(str(exc).split())}); convert the column it names "
            "(e.g. .astype(str)) or drop it"
        ) from exc
    return with_index(table, frame)


def _polars(frame: Any) -> pl.DataFrame:
    """A frame to write, as Polars: a pandas index that is named is data, kept as columns;
    an unnamed one (positions, or labels pandas made up) is not written."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pl.LazyFrame):
        return frame.collect()
    if is_pandas(frame):
        return pandas_as_polars(frame, "write this pandas frame")
    raise InputError(
        f"cannot write a {type(frame).__name__}: pass a Polars or pandas DataFrame (or none: "
        "the run's frame)"
    )


def index_columns(source: Any, existing: Sequence[str] = ()) -> pl.DataFrame | None:
    """A pandas frame's index as Polars columns, named as `reset_index` names them, when it
    is named (an unnamed one, positions or labels pandas made up, is not data); None when
    there is none to keep. A level named as an existing column is left out: the column holds
    it already."""
    if all(name is None for name in source.index.names):
        return None
    index = source.iloc[:, :0].reset_index()
    kept = [name for name in index.columns if str(name) not in existing]
    if not kept:
        return None
    try:
        return pl.from_pandas(index[kept])
    except (ValueError, TypeError, pl.exceptions.PolarsError) as exc:
        raise InputError(
            f"cannot write the pandas index {[str(n) for n in kept]} as columns "
            f"({' '.join(str(exc).split())}); give it one type (df.index = df.index.astype(str)), "
            "or unname it (df.rename_axis(None)) to leave it out"
        ) from exc


def with_index(
    frame: pl.DataFrame, source: Any, sample: dict[str, Any] | None = None
) -> pl.DataFrame:
    """`frame` with the named index of its pandas `source` first, as columns (for a `sample`,
    the index of the sampled rows): what `to_pandas` keeps as the index, a file keeps as
    data, so that `compare --on id` finds a row id that was the index."""
    if source is None or not is_pandas(source):
        return frame
    rows = source
    if sample is not None:
        rows = source.iloc[frame.get_column(sample["index_column"]).to_numpy()]
    index = index_columns(rows, frame.columns)
    return frame if index is None else pl.concat([index, frame], how="horizontal")


def pandas_frame(
    frame: pl.DataFrame, source: Any = None, sample: dict[str, Any] | None = None
) -> pd.DataFrame:
    """`frame` (scored) as pandas: the columns of a pandas `source` taken from it as they
    were, with its index (of the sampled rows, for a `sample`); the columns the run added
    converted with `pd.ArrowDtype`, so that nested details stay typed."""
    import pandas as pd

    if source is None:
        return frame.to_pandas(types_mapper=pd.ArrowDtype)
    rows = source
    if sample is not None:
        rows = source.iloc[frame.get_column(sample["index_column"]).to_numpy()]
    kept = {str(name): name for name in source.columns}
    added = frame.select([c for c in frame.columns if c not in kept])
    converted = added.to_pandas(types_mapper=pd.ArrowDtype)
    parts = {
        kept.get(name, name): (
            rows[kept[name]].reset_index(drop=True) if name in kept else converted[name]
        )
        for name in frame.columns
    }
    out = pd.DataFrame(parts)
    out.index = rows.index
    out.attrs = dict(source.attrs)
    return out
