"""Traces in, ragframe's frame out: one row per RAG turn (trace), with `question`, `answer`,
`contexts` and the ids, times, model and token counts that let scores join back.

    rows = read_traces("spans.jsonl", format="openinference")      # a LazyFrame
    read = read_traces_report("spans.jsonl")                         # rows + skipped, eager
    wrote = write_traces("spans.jsonl", "rows.parquet")             # bounded memory, to disk

Formats: `openinference` (SDK span JSON Lines, Phoenix span frames as Parquet / JSON Lines /
DataFrame), `otel` (OTLP JSON, the Collector's file exporter), `langsmith` (run JSON Lines),
`ragas` and `deepeval` (datasets as their save methods write them: `datasets`). The rules that
turn spans into rows are in `ragframe.inputs.traces.assemble`; every entry point but the lazy
`scan_traces` leaves out the row columns no row has a value for (`assemble.drop_empty`).
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from ragframe.errors import InputError
from ragframe.inputs.traces import datasets, langsmith, openinference, otel
from ragframe.inputs.traces.assemble import ALWAYS, ROW_SCHEMA, SKIP_SCHEMA, assemble, drop_empty
from ragframe.inputs.traces.buckets import buckets_for, collect_assembled, sink_assembled

FORMATS = ("openinference", "otel", "langsmith", "ragas", "deepeval")
#: The row columns a dataset's rows always have (it has no trace or span ids); a trace
#: export's rows always have `ALWAYS`.
DATASET_ALWAYS = ("question", "answer", "contexts")
Format = Literal["openinference", "otel", "langsmith", "ragas", "deepeval"]
OnSkip = Literal["warn", "raise", "ignore"]
#: JSON Lines (`n`, `line`) to the span frame.
SpanReader = Callable[[pl.LazyFrame], pl.LazyFrame]

__all__ = [
    "FORMATS",
    "ROW_SCHEMA",
    "SKIP_SCHEMA",
    "TraceRead",
    "TraceWrite",
    "detect_format",
    "read_traces",
    "read_traces_report",
    "scan_traces",
    "write_traces",
]


def summarize_skipped(skipped: pl.DataFrame, limit: int = 5) -> str:
    """One line per reason with its count, then the first few places (line, trace)."""
    if skipped.height == 0:
        return "nothing skipped"
    counts = skipped.group_by("reason", maintain_order=True).len()
    parts = [f"{n} × {reason}" for reason, n in counts.iter_rows()]
    where = [
        f"line {line} (trace {trace})" if trace else f"line {line}"
        for _, trace, _, line in skipped.head(limit).iter_rows()
    ]
    return f"skipped {skipped.height}: " + "; ".join(parts) + " — first at " + ", ".join(where)


@dataclass
class TraceRead:
    """What a read gave: the rows to score and the spans or lines that formed no row."""

    rows: pl.DataFrame
    skipped: pl.DataFrame

    def skipped_summary(self, limit: int = 5) -> str:
        return summarize_skipped(self.skipped, limit)


def _peek(path: Path) -> Any:
    """The first JSON value of a file: a JSON Lines file's first line, else the first JSON
    document of a file of indented documents (the first item of an array), read in chunks
    (None when it is no JSON)."""
    first = openinference.first_record(path)
    if first is not None:
        return first
    return _first_document(path)


def _first_document(path: Path) -> Any:
    """The first document `otel.json_documents` would give (only as much of the file read as
    it takes), parsed; None when the file starts with text that is no JSON."""
    for _, text in otel._documents_of(path):  # a generator: reads only the first chunks
        try:
            return json.loads(text)
        except ValueError:
            return None
    return None


def _documents_file(path: Path) -> bool:
    """A file of JSON documents that are not one a line (protobuf's `MessageToJson` indented
    by default, the SDK console exporter's spans, a JSON array of requests): its first line
    is no JSON object, but the file starts with a JSON object or an array of them."""
    if path.suffix.lower() == ".parquet" or openinference.first_record(path) is not None:
        return False
    return isinstance(_first_document(path), dict)


def _dataset_format(names: Any) -> Format | None:
    """ragas or deepeval from a record's or table's column names, None when neither: ragas
    names its question `user_input`; deepeval its answer `actual_output` (a golden may leave
    it out, then `input` beside `expected_output` or `retrieval_context`)."""
    if "user_input" in names:
        return "ragas"
    if any(k in names for k in ("actual_output", "test_cases", "testCases", "goldens")):
        return "deepeval"
    if "input" in names and ("expected_output" in names or "retrieval_context" in names):
        return "deepeval"
    return None


def _hint(names: Any = ()) -> str:
    """What to do about a file whose format was not told: name it with `--from`, or, when it
    has ragframe's own columns already, score it as it is."""
    if "question" in names and "answer" in names:
        return (
            "it has ragframe's own question and answer columns: score it without --from "
            f"(or pass format= / --from one of {', '.join(FORMATS)})"
        )
    return f"pass format= (--from) one of {', '.join(FORMATS)}"


def _csv_header(path: Path) -> list[str]:
    """The column names on a CSV file's first line (a byte-order mark left out)."""
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return next(csv.reader(handle), [])


def detect_format(source: str | Path | Any) -> Format:
    """The format of a trace export or dataset, where it is unambiguous; else an InputError
    that says which `format=` / `--from` values exist.

    Parquet: a Phoenix span frame (`context.span_id`), LangSmith runs (`run_type`), a ragas
    or deepeval dataset (by its column names); CSV: a ragas or deepeval dataset; JSON Lines or
    one JSON document (an object or a list of objects): told from the first record's keys."""
    if isinstance(source, (pl.DataFrame, pl.LazyFrame)) or type(source).__name__ == "DataFrame":
        return "openinference"
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        names = set(pl.read_parquet_schema(path))
        if "context.span_id" in names:
            return "openinference"
        if "run_type" in names:
            return "langsmith"
        found = _dataset_format(names)
        if found is not None:
            return found
        raise InputError(
            f"{path}: a Parquet file that is no span frame, run export or ragas / deepeval "
            f"dataset (columns {sorted(names)[:8]}); {_hint(names)}"
        )
    if suffix == ".csv":
        header = _csv_header(path)
        found = _dataset_format(header)
        if found is not None:
            return found
        raise InputError(
            f"{path}: a CSV file with neither ragas' user_input nor deepeval's input / "
            f"actual_output column (columns {header[:8]}); {_hint(header)}"
        )
    value = _peek(path)
    if isinstance(value, list):
        value = value[0] if value and isinstance(value[0], dict) else {}
    if not isinstance(value, dict):
        raise InputError(f"{path}: line 1 is not a JSON object; {_hint()}")
    if "resourceSpans" in value or "resource_spans" in value:
        return "otel"
    if openinference.is_sdk_json(value) or openinference.is_phoenix_record(value):
        return "openinference"
    if "run_type" in value:
        return "langsmith"
    found = _dataset_format(value)
    inner = next(iter(value.values()), None)
    if found is None and isinstance(inner, dict):  # pandas' to_json(orient="index")
        found = _dataset_format(inner)
    if found is not None:
        return found
    raise InputError(
        f"{path}: cannot tell the format from line 1's keys {sorted(value)[:8]}; {_hint(value)}"
    )


NOT_UTF8 = "line is not UTF-8 text"


def _blanked(path: Path, numbers: set[int], folder: Path) -> Path:
    """A copy of `path` in `folder` with the lines `numbers` emptied (every other line, and so
    every line number, as it was): what Polars can read when a line is not UTF-8."""
    copy = folder / path.name
    with path.open("rb") as source, copy.open("wb") as target:
        for number, raw in enumerate(source, start=1):
            target.write(b"\n" if number in numbers else raw)
    return copy


def _bad_json_lines(path: Path, *, require: str | None = None) -> list[tuple[int, str]]:
    """(line, reason) of every non-empty line that is not a JSON object: one streaming Python
    pass, run only after Polars refused the file."""
    bad = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except UnicodeDecodeError as exc:
                bad.append((number, f"{NOT_UTF8} (byte {exc.start + 1})"))
                continue
            except ValueError as exc:
                bad.append((number, f"line is not JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(value, dict):
                bad.append((number, "line is not a JSON object"))
            elif require is not None and require not in value:
                bad.append((number, f"line has no {require!r} key"))
    return bad


def _lines(path: Path) -> pl.LazyFrame:
    """A JSON Lines file as (`n`: 1-based line number, `line`: text), empty lines left out;
    a file of indented JSON documents as one document a row (`n`: the line it starts on)."""
    if _documents_file(path):
        return otel.json_documents(path)
    return pl.scan_lines(path, name="line", row_index_name="n", row_index_offset=1).filter(
        pl.col("line").str.strip_chars() != ""
    )


def _bad_documents(
    lines: pl.LazyFrame, require: str | None
) -> tuple[list[tuple[int, str]], pl.LazyFrame]:
    """(line, reason) of every document that is not a JSON object (or lacks `require`), and
    the frame without them: a file of documents is held as compact text anyway (small
    debugging exports), so each is checked in Python."""
    frame = lines.collect().with_row_index("i")
    bad, dropped = [], []
    for i, number, text in frame.iter_rows():
        try:
            value = json.loads(text)
        except ValueError as exc:
            reason = f"line is not JSON ({exc.msg} at column {exc.colno})"
        else:
            if not isinstance(value, dict):
                reason = "line is not a JSON object"
            elif require is not None and require not in value:
                reason = f"line has no {require!r} key"
            else:
                continue
        bad.append((number, reason))
        dropped.append(i)
    return bad, frame.filter(~pl.col("i").is_in(dropped)).drop("i").lazy()


def _with_bad_lines(
    path: Path, run: Callable[[pl.LazyFrame], pl.DataFrame], *, require: str | None = None
) -> pl.DataFrame:
    """The skipped list of `run(lines)`, which reads the rows and keeps them where it keeps
    them; when Polars refuses a line, the lines that are not JSON objects are found, listed as
    skipped and left out, and the rest read again."""
    lines = _lines(path)
    try:
        return run(lines)
    except (pl.exceptions.ComputeError, pl.exceptions.InvalidOperationError) as exc:
        if _documents_file(path):
            bad, rest = _bad_documents(lines, require)
        else:
            bad = _bad_json_lines(path, require=require)
            rest = lines.filter(~pl.col("n").is_in([n for n, _ in bad]))
        if not bad:
            raise InputError(f"{path}: could not be read as {require or 'spans'}: {exc}") from exc
    numbers = [n for n, _ in bad]
    with tempfile.TemporaryDirectory(prefix="ragframe-lines-") as folder:
        not_text = {n for n, reason in bad if reason.startswith(NOT_UTF8)}
        if not_text:  # Polars reads no file with a byte that is not UTF-8: blank those lines
            rest = _lines(_blanked(path, not_text, Path(folder))).filter(
                ~pl.col("n").is_in(numbers)
            )
        skipped = run(rest)
    listed = pl.DataFrame(
        {
            "reason": [r for _, r in bad],
            "trace_id": [None] * len(bad),
            "span_id": [None] * len(bad),
            "line": numbers,
        },
        schema=SKIP_SCHEMA,
    )
    return pl.concat([listed, skipped])


def scan_traces(
    source: str | Path | Any, format: Format | None = None
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(rows, skipped), both lazy: the single pass (one `group_by` over every span) as query
    plans to compose with others. Collected, they hold the whole export: for a large one use
    `write_traces` (bounded memory) or `read_traces_report` (buckets). Malformed lines make
    the query fail; `read_traces_report` and `write_traces` list them instead. A plan's
    columns are fixed before it runs, so these rows have every `ROW_SCHEMA` column, those no
    row has a value for as nulls; the other entry points leave those out."""
    fmt = _format(source, format)
    if not isinstance(source, (str, Path)):
        return assemble(_frame_spans(source, fmt))
    path = _existing(source)
    if fmt in ("ragas", "deepeval"):
        return datasets.read(path, fmt)
    spans_of, _ = _span_reader(path, fmt)
    if spans_of is None:
        return assemble(_phoenix_spans(path))
    if _is_run_table(path, fmt):
        return assemble(spans_of(_run_lines(path)))
    return assemble(spans_of(_lines(path)))


def _phoenix_spans(path: Path) -> pl.LazyFrame:
    return openinference.from_frame(openinference.read_phoenix_file(path))


def _over_spans(
    path: Path, fmt: Format, run: Callable[[pl.LazyFrame], pl.DataFrame]
) -> pl.DataFrame:
    """`run(span frame)` (it keeps the rows, returns the skipped list) over a span file, its
    malformed lines listed as skipped."""
    spans_of, require = _span_reader(path, fmt)
    if spans_of is None:
        return run(_phoenix_spans(path))
    if _is_run_table(path, fmt):
        return run(spans_of(_run_lines(path)))
    if fmt == "otel":
        try:  # Polars alone: faster and lighter, but one odd value refuses the whole file
            return run(otel.scan_otlp(_lines(path), tolerant=False))
        except pl.exceptions.PolarsError:
            pass  # read again by the tolerant decoder, which lists what it cannot read
    return _with_bad_lines(path, lambda lines: run(spans_of(lines)), require=require)


def _is_run_table(path: Path, fmt: Format) -> bool:
    """LangSmith runs saved as Parquet (a column a field), not as JSON Lines."""
    return fmt == "langsmith" and path.suffix.lower() == ".parquet"


def _run_lines(path: Path) -> pl.LazyFrame:
    """A Parquet file of LangSmith runs as the JSON Lines frame `scan_runs` reads."""
    return langsmith.runs_as_lines(pl.scan_parquet(path))


def _format(source: str | Path | Any, format: Format | None) -> Format:
    fmt = format or detect_format(source)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r}; use one of {', '.join(FORMATS)}")
    return fmt


def _existing(source: str | Path) -> Path:
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    return path


def _is_span_file(source: str | Path | Any, fmt: Format) -> bool:
    """A span export on disk (read in buckets), not a frame in memory or a dataset."""
    return isinstance(source, (str, Path)) and fmt not in ("ragas", "deepeval")


def _always(fmt: Format) -> tuple[str, ...]:
    """The row columns kept even when no row has a value for them."""
    return DATASET_ALWAYS if fmt in ("ragas", "deepeval") else ALWAYS


def _collect(
    source: str | Path | Any, format: Format | None, buckets: int | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows in source order, without the columns no row has a value for; skipped in any
    order), collected."""
    fmt = _format(source, format)
    if not _is_span_file(source, fmt):
        rows, skipped = pl.collect_all(list(scan_traces(source, fmt)))
        return drop_empty(rows, _always(fmt)), skipped
    path = _existing(source)
    k = buckets_for(path, buckets)
    collected: list[pl.DataFrame] = []

    def run(spans: pl.LazyFrame) -> pl.DataFrame:
        rows, skipped = collect_assembled(spans, k)
        collected[:] = [rows]
        return skipped

    skipped = _over_spans(path, fmt, run)
    return collected[0], skipped


def _sink(
    source: str | Path | Any, format: Format | None, out: Path, buckets: int | None
) -> pl.DataFrame:
    """Write the rows to `out` (Parquet, source order) in bounded memory, without the columns
    no row has a value for; the skipped list. A frame in memory or a dataset is collected
    (it is in memory already, or small) to see which columns have values."""
    fmt = _format(source, format)
    if not _is_span_file(source, fmt):
        rows, skipped = pl.collect_all(list(scan_traces(source, fmt)))
        drop_empty(rows, _always(fmt)).write_parquet(out)
        return skipped
    path = _existing(source)
    k = buckets_for(path, buckets)
    return _over_spans(path, fmt, lambda spans: sink_assembled(spans, k, out))


def _frame_spans(source: Any, fmt: Format) -> pl.LazyFrame:
    """The span frame of a Phoenix span frame given in memory (Polars or pandas)."""
    if fmt != "openinference":
        raise InputError(f"a frame is read as a Phoenix span frame only, not as {fmt!r}")
    if isinstance(source, (pl.DataFrame, pl.LazyFrame)):
        return openinference.from_frame(source.lazy())
    # Phoenix's client keeps the span id as the index and, in recent versions, as a column too.
    named = source.index.name
    frame = source.reset_index() if named and named not in source.columns else source
    # from_pandas, not pl.from_pandas: a column mixing lists and text (valid attributes) is
    # read with the lists as JSON text, where Arrow would refuse the frame.
    return openinference.from_frame(openinference.from_pandas(frame).lazy())


def _span_reader(path: Path, fmt: Format) -> tuple[SpanReader | None, str | None]:
    """How a JSON Lines export's lines become the span frame, and the key every line must
    have (for the malformed-line report); None for a Phoenix span file, read by Polars whole."""
    if fmt == "otel":
        return otel.scan_otlp, "resourceSpans"
    if fmt == "langsmith":
        return langsmith.scan_runs, "id"
    first = _peek(path) if path.suffix.lower() != ".parquet" else None
    if path.suffix.lower() == ".parquet" or (
        isinstance(first, dict) and openinference.is_phoenix_record(first)
    ):
        return None, None
    return (lambda lines: openinference.scan_jsonl(lines, pl.col("n"))), None


def _sorted_skips(skipped: pl.DataFrame) -> pl.DataFrame:
    return skipped.sort(["line", "trace_id", "span_id", "reason"], nulls_last=True)


def read_traces_report(
    source: str | Path | Any, format: Format | None = None, *, buckets: int | None = None
) -> TraceRead:
    """Read an export: the rows (in source order: `question`, `answer`, `contexts`,
    `trace_id`, `span_id`, then the other `ROW_SCHEMA` columns some row has a value for) and
    every span, line or trace that formed none (SKIP_SCHEMA: reason, trace_id, span_id, line;
    in line order).

    buckets : how many parts a span file is assembled in, its traces split by a hash of the
        trace id, so that memory stays bounded however large the file (`buckets.BUCKET_BYTES`
        of file per part when None; 1: one pass). The result is the same either way.
    """
    rows, skipped = _collect(source, format, buckets)
    return TraceRead(rows, _sorted_skips(skipped))


@dataclass
class TraceWrite:
    """What `write_traces` wrote: the rows' file and count, and what formed no row."""

    path: Path
    rows: int
    skipped: pl.DataFrame

    def skipped_summary(self, limit: int = 5) -> str:
        return summarize_skipped(self.skipped, limit)


def write_traces(
    source: str | Path | Any,
    out: str | Path,
    format: Format | None = None,
    *,
    overwrite: bool = False,
    buckets: int | None = None,
) -> TraceWrite:
    """Write the rows of an export to the Parquet file `out`, in source order, in memory
    bounded by the buckets' size rather than the file's (the rows never held together): the
    way to convert exports of millions of spans. The file appears whole or not at all.

    overwrite : replace `out` if it exists (else an InputError).
    buckets : as in `read_traces_report`.
    """
    target = Path(out)
    if target.exists() and not overwrite:
        raise InputError(
            f"output {str(target)!r} exists; pass overwrite=True (--overwrite) to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        skipped = _sink(source, format, partial, buckets)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    rows = pl.scan_parquet(target).select(pl.len()).collect().item()
    return TraceWrite(target, rows, _sorted_skips(skipped))


def read_traces(
    source: str | Path | Any,
    format: Format | None = None,
    *,
    on_skip: OnSkip = "warn",
    buckets: int | None = None,
) -> pl.LazyFrame:
    """The rows of a trace export or dataset, as a LazyFrame ragframe scores as is.

    on_skip : what to do when spans, lines or traces formed no row: "warn" (a warning with the
        counts by reason and where the first are), "raise" (an InputError saying the same),
        "ignore". `read_traces_report` returns them as a frame.
    buckets : as in `read_traces_report`.
    """
    read = read_traces_report(source, format, buckets=buckets)
    if read.skipped.height and on_skip != "ignore":
        message = f"{source}: {read.skipped_summary()}"
        if on_skip == "raise":
            raise InputError(message + " (pass on_skip='warn' to read the rest)")
        warnings.warn(message, stacklevel=2)
    return read.rows.lazy()
