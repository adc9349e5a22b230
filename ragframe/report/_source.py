"""What a report reads: a scored log (frame, LazyFrame, Parquet path or a run's result) with its
metadata, the score columns, and each metric's pass rule (a `{metric}_pass` column, or a
threshold recorded in the metadata)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import ConfigError, InputError

#: A report draws at most this many groups (the largest, by rows); a note says how many more.
MAX_GROUPS = 40


@dataclass(frozen=True)
class Source:
    """A scored log as the report reads it. `data` is what `summarize` / `compare` take (the
    path of a file, so its metadata comes along, or the frame); `lazy` scans it."""

    data: Any
    lazy: pl.LazyFrame
    meta: dict[str, Any]
    label: str
    path: Path | None


@dataclass(frozen=True)
class PassRule:
    """How a metric's rows pass: the file's `{metric}_pass` column (`column` set), or the
    threshold the metadata records (`threshold`, `strict`), or both (the column decides)."""

    metric: str
    direction: str
    column: str | None
    threshold: float | None
    strict: bool

    def describe(self) -> str:
        """'score >= 0.8', 'score = 1 (strict)'; with a pass column, its name first."""
        if self.strict:
            rule = f"score = {0 if self.direction == 'lower' else 1} (strict)"
        elif self.threshold is not None:
            rule = f"score {'<=' if self.direction == 'lower' else '>='} {self.threshold:g}"
        else:
            return f"column {self.column}"
        return f"column {self.column} ({rule})" if self.column else rule

    def expr(self) -> pl.Expr:
        """Boolean per row: passed (null where the score is null); `ragframe.metrics.thresholds`'
        rule when the metadata's threshold decides."""
        from ragframe.metrics.thresholds import DEFAULT_THRESHOLD, Threshold

        if self.column is not None:
            return pl.col(self.column).cast(pl.Boolean)
        value = DEFAULT_THRESHOLD if self.threshold is None else self.threshold
        way = "lower" if self.direction == "lower" else "higher"
        return Threshold(value, self.strict, way).passes(pl.col(self.metric))


def load(
    scored: Any, what: str = "scored", *, storage_options: Mapping[str, Any] | None = None
) -> Source:
    """Accept a polars DataFrame or LazyFrame, a pandas DataFrame (a named index kept as
    columns, as `RunResult.write_parquet` writes it: it is usually the row id), a Parquet path
    or URL (read with Polars' `storage_options`), or `ragframe.run`'s result."""
    from ragframe.engine.result import is_pandas, pandas_as_polars
    from ragframe.inputs.io import input_path, read_metadata, remote_url

    if storage_options is not None and not isinstance(scored, str | Path):
        raise ConfigError(
            f"storage_options applies to a path (s3://..., gs://...), but {what} is a "
            f"{type(scored).__name__}: drop storage_options, or pass the path"
        )
    if hasattr(scored, "frame") and hasattr(scored, "metadata"):  # a RunResult
        frame = scored.frame
        return Source(frame, frame.lazy(), dict(scored.metadata()), "this run", None)
    if is_pandas(scored) and hasattr(scored, "columns"):
        converted = pandas_as_polars(scored, f"read the pandas {what} frame")
        return Source(converted, converted.lazy(), {}, f"the {what} frame", None)
    if isinstance(scored, pl.DataFrame):
        return Source(scored, scored.lazy(), {}, f"the {what} frame", None)
    if isinstance(scored, pl.LazyFrame):
        return Source(scored, scored, {}, f"the {what} frame", None)
    if isinstance(scored, str | Path):
        options = dict(storage_options) if storage_options else None
        path = input_path(scored, storage_options=options)
        if path.suffix.lower() != ".parquet":
            raise InputError(
                f"{what}={str(path)!r} is not a Parquet file; a report reads the scored Parquet "
                "file `ragframe score` writes (or pass a polars frame)"
            )
        if options is not None and remote_url(path) is not None:
            return _remote(path, options)
        try:
            return Source(path, pl.scan_parquet(path), read_metadata(path), path.name, path)
        except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
            raise InputError(f"cannot read {str(path)!r} as Parquet: {exc}") from exc
    raise InputError(
        f"cannot report on a {type(scored).__name__}: pass a polars or pandas DataFrame, a "
        "polars LazyFrame, the path of a scored Parquet file, or the result of ragframe.run"
    )


def _remote(url: Any, options: dict[str, Any]) -> Source:
    """A URL read with storage options: every read goes through Polars' scan with them (the
    path is not handed on: `summarize`, `compare` and the row reader would open it without),
    the metadata read from the footer with them too."""
    from ragframe.inputs.io import read_metadata, remote_failure

    meta = read_metadata(url, storage_options=options)
    try:
        lazy = pl.scan_parquet(url, storage_options=options)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise remote_failure(url, exc, "Parquet") from exc
    return Source(lazy, lazy, meta, url.name, None)


def group_columns(by: str | Sequence[str] | None, schema: pl.Schema, label: str) -> list[str]:
    """`by` as a list of columns, each checked against the log."""
    groups = [by] if isinstance(by, str) else list(by or [])
    missing = [g for g in groups if g not in schema]
    if missing:
        raise InputError(
            f"by= names {missing}, which {label} lacks; its columns are {schema.names()}"
        )
    return groups


def direction(metric: str, meta: Mapping[str, Any], fallback: str | None) -> str:
    recorded = ((meta.get("metrics") or {}).get(metric) or {}).get("direction")
    return str(recorded or fallback or "higher")


def pass_rules(
    metrics: Sequence[str],
    directions: Mapping[str, str],
    schema: pl.Schema,
    meta: Mapping[str, Any],
) -> dict[str, PassRule]:
    """The metrics whose pass rate the report can show: those with a Boolean `{m}_pass`
    column, or a numeric threshold (or strict mode) in the metadata's config."""
    rules: dict[str, PassRule] = {}
    for m in metrics:
        config = (((meta.get("metrics") or {}).get(m) or {}).get("config")) or {}
        threshold = config.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            threshold = None
        elif not 0 <= threshold <= 1:
            raise InputError(
                f"the metadata records threshold {threshold!r} for {m!r}, outside [0, 1]; "
                "fix the file's metadata or drop the threshold"
            )
        strict = bool(config.get("strict"))
        column = f"{m}_pass" if schema.get(f"{m}_pass") == pl.Boolean else None
        if column is None and threshold is None and not strict:
            continue
        rules[m] = PassRule(m, directions[m], column, threshold, strict)
    return rules


def check_output(output: str | Path | None, *sources: Source) -> Path | None:
    """The report never overwrites a log it reads."""
    if output is None:
        return None
    out = Path(output)
    for source in sources:
        if source.path is not None and out.resolve() == source.path.resolve():
            raise ConfigError(
                f"output {str(out)!r} is the scored file the report reads; name the report "
                f"{out.stem}.html"
            )
    if out.suffix.lower() == ".parquet":
        raise ConfigError(
            f"the report is HTML, but {str(out)!r} is named as Parquet; name it .html"
        )
    return out
