"""The rows a trace export becomes, whatever entry point reads it: no column that no row has a
value for, duplicate span ids and two candidate answers resolved by the documented rule and
said on the row, the dropped copies listed as skipped; and the formats `detect_format` tells
from the files today's tools write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from openinference.semconv.trace import SpanAttributes
from polars.testing import assert_frame_equal
from test_traces import docs, span, write_jsonl

from ragframe.errors import InputError
from ragframe.inputs.traces import (
    detect_format,
    read_traces,
    read_traces_report,
    scan_traces,
    write_traces,
)
from ragframe.inputs.traces.assemble import ALWAYS, ROW_SCHEMA

IV, OV = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE


def rag_trace(trace: str, n: int, **root_attrs: Any) -> list[dict[str, Any]]:
    """A CHAIN root (question Qn, answer An) with one RETRIEVER child of one document whose
    score is not recorded, and no LLM span (so no model and no token counts)."""
    root = f"{n:02d}01"
    retriever = span(trace, f"{n:02d}02", "RETRIEVER", 1, parent=root, **docs(f"c{n}"))
    del retriever["attributes"][f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.0.document.score"]
    return [span(trace, root, "CHAIN", 0, **{IV: f"Q{n}", OV: f"A{n}", **root_attrs}), retriever]


def every_read(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[pl.DataFrame]:
    """The rows of `path` by every entry point: read_traces, read_traces_report in one pass
    and in buckets, write_traces in one pass and in buckets (partitioned in several levels),
    `ragframe import`."""
    from ragframe.cli import main
    from ragframe.inputs.traces import buckets

    monkeypatch.setattr(buckets, "FANOUT", 2)
    frames = [
        read_traces(path, on_skip="ignore").collect(),
        read_traces_report(path, buckets=1).rows,
        read_traces_report(path, buckets=4).rows,
    ]
    for k in (1, 5):
        out = tmp_path / f"rows{k}.parquet"
        write_traces(path, out, buckets=k, overwrite=True)
        frames.append(pl.read_parquet(out))
    imported = tmp_path / "imported.parquet"
    assert main(["import", str(path), "-o", str(imported), "--overwrite"]) == 0
    frames.append(pl.read_parquet(imported))
    return frames


def test_no_column_is_added_that_no_row_has_a_value_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export with no ground truth, no LLM span (model, tokens), no trace-level fields and
    no document scores gives rows without those columns, by every entry point; a field one
    row of many has keeps its column (null on the others)."""
    traces = [f"{i:032x}" for i in range(1, 7)]
    records = [r for n, t in enumerate(traces) for r in rag_trace(t, n)]
    plain = write_jsonl(tmp_path / "plain.jsonl", records)
    expected = [
        "question",
        "answer",
        "contexts",
        "trace_id",
        "span_id",
        "context_document_ids",
        "retrievals",
        "start_time",
        "end_time",
        "latency_ms",
    ]
    for rows in every_read(plain, tmp_path, monkeypatch):
        assert rows.columns == expected
        assert rows["question"].to_list() == [f"Q{n}" for n in range(6)]
        assert rows["contexts"].to_list() == [[f"c{n}"] for n in range(6)]

    # The lazy plan fixes its columns in advance: all of them, as documented.
    assert scan_traces(plain)[0].collect_schema().names() == list(ROW_SCHEMA)

    # One trace of six with a session id and a note (its retriever recorded no content):
    # both columns there, in ROW_SCHEMA's order, null on the rows that lack them.
    records = [r for n, t in enumerate(traces) for r in rag_trace(t, n)]
    records[4]["attributes"]["session.id"] = "s-2"
    records[7]["attributes"] = {
        k: v for k, v in records[7]["attributes"].items() if "document.content" not in k
    }
    some = write_jsonl(tmp_path / "some.jsonl", records)
    for rows in every_read(some, tmp_path, monkeypatch):
        assert rows.columns == [*expected, "session_id", "note"]
        assert rows["session_id"].to_list() == [None, None, "s-2", None, None, None]
        assert rows["note"].to_list()[3] == "retriever span(s) recorded no document content"
        assert rows["note"].null_count() == 5


def test_the_always_there_columns_stay_when_empty(tmp_path: Path) -> None:
    """`question`, `answer`, `contexts`, `trace_id`, `span_id` are there whatever the rows
    hold, even when the export forms no row at all."""
    orphan = [span("e" * 32, "e1", "RETRIEVER", 0, **docs("orphan"))]
    read = read_traces_report(write_jsonl(tmp_path / "o.jsonl", orphan))
    assert read.rows.height == 0 and read.rows.columns == list(ALWAYS)
    wrote = write_traces(tmp_path / "o.jsonl", tmp_path / "o.parquet")
    assert wrote.rows == 0 and pl.read_parquet(wrote.path).columns == list(ALWAYS)


def test_a_phoenix_frame_in_memory_adds_no_empty_column(tmp_path: Path) -> None:
    """The frame path (a pandas span frame as Phoenix's client returns it) follows the rule
    too, in memory and written to disk."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "context.span_id": ["s1"],
            "context.trace_id": ["t1"],
            "parent_id": [None],
            "span_kind": ["CHAIN"],
            "start_time": pd.to_datetime(["2024-05-01T10:00:00Z"], format="ISO8601"),
            "end_time": pd.to_datetime(["2024-05-01T10:00:02Z"], format="ISO8601"),
            "attributes.input.value": ["Q"],
            "attributes.output.value": ["A"],
        }
    ).set_index("context.span_id", drop=False)
    rows = read_traces(frame, on_skip="raise").collect()
    kept = [*ALWAYS, "retrievals", "start_time", "end_time", "latency_ms", "note"]
    assert rows.columns == kept
    write_traces(frame, tmp_path / "f.parquet")
    assert pl.read_parquet(tmp_path / "f.parquet").columns == kept


def test_a_dataset_adds_no_trace_column(tmp_path: Path) -> None:
    """A ragas dataset has no trace: no row column of nulls (trace ids, times, tokens...)
    comes with it; question, answer and contexts are always there."""
    records = [
        {"user_input": "Q1", "response": "A1", "retrieved_contexts": ["c1"]},
        {"user_input": "Q2", "response": "A2", "retrieved_contexts": ["c2"]},
    ]
    path = write_jsonl(tmp_path / "ragas.jsonl", records)
    rows = read_traces(path, "ragas", on_skip="raise").collect()
    write_traces(path, tmp_path / "r.parquet", "ragas")
    for frame in (rows, pl.read_parquet(tmp_path / "r.parquet")):
        assert frame.columns[:3] == ["question", "answer", "contexts"]
        empty = [c for c in frame.columns if c in ROW_SCHEMA and frame[c].null_count() == 2]
        assert empty == [], empty


def test_a_span_exported_twice_the_later_copy_is_used_and_the_other_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trace id and span id twice: the copy latest in the source is used (its
    output, its documents once, not twice), the row says so, and the earlier copy is listed
    as skipped with its line; the same in one pass and in buckets."""
    a, b = "a" * 32, "b" * 32
    root_old = span(a, "a1", "CHAIN", 0, **{IV: "Q1", OV: "A1 (partial)"})
    retriever = span(a, "a2", "RETRIEVER", 1, parent="a1", **docs("c1", "c2"))
    root_new = span(a, "a1", "CHAIN", 0, **{IV: "Q1", OV: "A1"})
    other = [span(b, "b1", "CHAIN", 0, **{IV: "Q2", OV: "A2"})]
    records = [root_old, retriever, *other, retriever, root_new]
    path = write_jsonl(tmp_path / "dup.jsonl", records)
    reads = every_read(path, tmp_path, monkeypatch)
    for rows in reads:
        assert_frame_equal(rows, reads[0])
    rows = reads[0]
    assert rows["answer"].to_list() == ["A1", "A2"]
    assert rows["contexts"].to_list() == [["c1", "c2"], []]
    assert rows["note"][0] == (
        "2 span ids exported more than once (first: a1): the copies latest in the source used"
    )
    for k in (1, 4):
        skipped = read_traces_report(path, buckets=k).skipped
        assert skipped.rows() == [
            ("span exported 2 times: this copy dropped, the one on line 5 used", a, "a1", 1),
            ("span exported 2 times: this copy dropped, the one on line 4 used", a, "a2", 2),
        ]
    wrote = write_traces(path, tmp_path / "w.parquet", buckets=3)
    assert wrote.skipped["line"].to_list() == [1, 2]

    # One span copied three times: its note names it and the count.
    path = write_jsonl(tmp_path / "three.jsonl", [root_old, root_old, root_new])
    read = read_traces_report(path)
    assert read.rows["note"][0] == (
        "no retriever span; span a1 exported 3 times: the copy latest in the source used"
    )
    assert read.skipped["line"].to_list() == [1, 2]
    with pytest.warns(UserWarning, match="span exported 3 times"):
        read_traces(path)


def test_two_root_answers_the_first_to_start_answers_and_the_row_says_so(
    tmp_path: Path,
) -> None:
    a = "a" * 32
    records = [
        span(a, "r2", "AGENT", 3, **{IV: "Q later", OV: "A later"}),
        span(a, "r1", "CHAIN", 1, **{IV: "Q", OV: "A"}),
        span(a, "x", "RETRIEVER", 2, parent="r1", **docs("c")),
    ]
    rows = read_traces(write_jsonl(tmp_path / "two.jsonl", records), on_skip="raise").collect()
    assert rows.select("question", "answer", "span_id").row(0) == ("Q", "A", "r1")
    assert rows["note"][0] == (
        "2 root CHAIN/AGENT spans with an output: answer from the first to start (r1)"
    )


def ragas_rows() -> list[dict[str, Any]]:
    return [
        {
            "user_input": "Q1",
            "retrieved_contexts": ["c1", "c2"],
            "response": "A1",
            "reference": "G1",
        }
    ]


def deepeval_goldens() -> list[dict[str, Any]]:
    """deepeval 4's Golden as `save_as` lays it out (the keys of its JSON and CSV writers)."""
    return [
        {
            "input": "Q1",
            "actual_output": None,
            "expected_output": "G1",
            "retrieval_context": None,
            "context": ["c1"],
            "name": None,
            "comments": None,
            "source_file": None,
            "tools_called": None,
            "expected_tools": None,
            "token_cost": None,
            "input_token_count": None,
            "output_token_count": None,
            "additional_metadata": None,
            "custom_column_key_values": None,
            "expectations": None,
        }
    ]


def test_detect_format_knows_the_datasets_as_the_tools_write_them(tmp_path: Path) -> None:
    """ragas: Parquet, CSV (pandas' to_csv), JSON Lines, a JSON list and pandas' column
    JSON; deepeval: JSON, JSON Lines, CSV (its own header), and a golden without an answer."""
    pd = pytest.importorskip("pandas")
    ragas = pd.DataFrame(ragas_rows())
    ragas.to_parquet(tmp_path / "ragas.parquet")
    ragas.to_csv(tmp_path / "ragas.csv", index=False)
    ragas.to_csv(tmp_path / "ragas_index.csv")
    ragas.to_json(tmp_path / "ragas_columns.json")
    ragas.to_json(tmp_path / "ragas_records.json", orient="records")
    ragas.to_json(tmp_path / "ragas_index.json", orient="index")
    ragas.to_json(tmp_path / "ragas_lines.json", orient="records", lines=True)
    ragas.to_parquet(tmp_path / "RAGAS.PARQUET")
    write_jsonl(tmp_path / "ragas.jsonl", ragas_rows())
    goldens = deepeval_goldens()
    (tmp_path / "deepeval.json").write_text(json.dumps(goldens, indent=4))
    write_jsonl(tmp_path / "deepeval.jsonl", goldens)
    pd.DataFrame(goldens).to_csv(tmp_path / "deepeval.csv", index=False)
    no_answer = [{k: v for k, v in goldens[0].items() if k != "actual_output"}]
    (tmp_path / "golden.json").write_text(json.dumps(no_answer))
    (tmp_path / "goldens.json").write_text(json.dumps({"goldens": no_answer}))
    pd.DataFrame(goldens).to_parquet(tmp_path / "deepeval.parquet")
    for name in (
        "ragas.parquet",
        "ragas.csv",
        "ragas_index.csv",
        "ragas_columns.json",
        "ragas_records.json",
        "ragas_index.json",
        "ragas_lines.json",
        "RAGAS.PARQUET",
        "ragas.jsonl",
    ):
        assert detect_format(tmp_path / name) == "ragas", name
    for name in ("deepeval.json", "deepeval.jsonl", "deepeval.csv", "golden.json", "goldens.json"):
        assert detect_format(tmp_path / name) == "deepeval", name
    assert detect_format(tmp_path / "deepeval.parquet") == "deepeval"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("log.csv", "question,answer,contexts\nQ,A,[]\n"),
        ("log.jsonl", '{"question": "Q", "answer": "A"}\n'),
        ("log.json", '[{"question": "Q"}]'),
    ],
)
def test_an_undetectable_file_names_from(tmp_path: Path, name: str, text: str) -> None:
    """One line naming `--from` and its values, and what was seen."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        detect_format(path)
    message = str(caught.value)
    assert "--from" in message and "ragas, deepeval" in message and "question" in message
    assert "\n" not in message
    # ragframe's own columns: the way out is to score the file as it is.
    assert ("score it without --from" in message) is ("answer" in text)
    pl.DataFrame({"question": ["Q"]}).write_parquet(tmp_path / "log.parquet")
    with pytest.raises(InputError, match=r"'question'.*\(--from\)"):
        detect_format(tmp_path / "log.parquet")


def test_two_copies_on_one_line_the_one_that_ends_last_is_used(tmp_path: Path) -> None:
    """An OTLP line holds many spans, so two copies of a span can share a line: the copy that
    ends last is used, in one pass and in buckets alike."""
    from datetime import UTC, datetime

    from ragframe.inputs.traces.buckets import collect_assembled

    def at(second: int) -> datetime:
        return datetime(2024, 5, 1, 10, 0, second, tzinfo=UTC)

    spans = pl.LazyFrame(
        {
            "line": [1, 1, 1],
            "trace_id": ["t", "t", "t"],
            "span_id": ["s", "s", "u"],
            "kind": ["CHAIN", "CHAIN", "CHAIN"],
            "start_time": [at(0), at(0), at(5)],
            "end_time": [at(2), at(4), at(6)],
            "input": ["Q", "Q", "inner"],
            "output": ["A draft", "A final", "inner out"],
            "parent_id": [None, None, "s"],
            "has_attributes": [True, True, True],
        }
    )
    for k in (1, 3):
        rows, skipped = collect_assembled(spans, k)
        assert rows["answer"].to_list() == ["A final"], k
        assert skipped.select("span_id", "line").rows() == [("s", 1)], k


def test_score_from_keeps_the_rule(tmp_path: Path, server: Any) -> None:
    """`ragframe score --from` scores the imported rows: the scored file has no row column
    that no row had a value for (no ground truth, model or tokens here), and the scores."""
    from ragframe.cli import main

    traces = [f"{i:032x}" for i in range(1, 4)]
    path = write_jsonl(
        tmp_path / "s.jsonl", [r for n, t in enumerate(traces) for r in rag_trace(t, n)]
    )
    out = tmp_path / "scored.parquet"
    judge = ["--model", "fake-judge", "--base-url", server.base_url, "--no-progress"]
    command = ["score", str(path), "--from", "openinference", "-o", str(out)]
    assert main([*command, "--metrics", "faithfulness", "--no-cache", *judge]) == 0
    scored = pl.read_parquet(out)
    assert scored.height == 3 and scored["faithfulness"].null_count() == 0
    row_columns = [c for c in scored.columns if c in ROW_SCHEMA]
    assert row_columns[:5] == list(ALWAYS)
    absent = {"ground_truth", "model_name", "prompt_tokens", "session_id", "note"}
    assert absent.isdisjoint(scored.columns)


def test_a_file_of_indented_documents_is_read_and_a_bad_one_listed(tmp_path: Path) -> None:
    """Not JSON Lines: spans written one indented document after another (the SDK console
    exporter's way) and an indented OTLP request (protobuf's MessageToJson default) are read
    by every entry point; text between them that is no JSON is listed with its line."""
    a, b = "a" * 32, "b" * 32
    records = [*rag_trace(a, 0), *rag_trace(b, 1)]
    texts = [json.dumps(r, indent=4) for r in records]
    console = tmp_path / "console.txt"
    console.write_text("\n".join([*texts[:2], "Traceback: not json", *texts[2:]]) + "\n")
    assert detect_format(console) == "openinference"
    bad_line = texts[0].count("\n") + texts[1].count("\n") + 3
    read = read_traces_report(console)
    assert read.rows["question"].to_list() == ["Q0", "Q1"]
    assert read.rows["contexts"].to_list() == [["c0"], ["c1"]]
    assert read.skipped.select("line", "reason").rows() == [
        (bad_line, "line is not JSON (Expecting value at column 1)")
    ]
    wrote = write_traces(console, tmp_path / "c.parquet", buckets=3)
    assert_frame_equal(pl.read_parquet(wrote.path), read.rows)
    assert_frame_equal(wrote.skipped, read.skipped)

    def otlp_span(trace: str, span_id: str, kind: str, **attributes: Any) -> dict[str, Any]:
        values = [{"key": KIND_KEY, "value": {"stringValue": kind}}]
        values += [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]
        return {
            "traceId": trace,
            "spanId": span_id,
            "name": kind.lower(),
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000500000000",
            "attributes": values,
        }

    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {"spans": [otlp_span(a, "0" * 15 + "1", "CHAIN", **{IV: "Q", OV: "A"})]}
                ]
            }
        ]
    }
    indented = tmp_path / "request.json"
    indented.write_text(json.dumps(request, indent=2))
    assert detect_format(indented) == "otel"
    rows = read_traces(indented, on_skip="raise").collect()
    assert rows.select("question", "answer", "trace_id").row(0) == ("Q", "A", a)


KIND_KEY = SpanAttributes.OPENINFERENCE_SPAN_KIND


def test_langsmith_runs_saved_as_parquet_read_as_the_json_lines(tmp_path: Path) -> None:
    """Runs saved as Parquet (a column a field, nested fields as JSON text) are detected and
    read through `langsmith.runs_as_lines`: the same rows as the runs as JSON Lines."""
    from datetime import UTC, datetime

    def at(second: int) -> datetime:
        return datetime(2024, 5, 1, 10, 0, second, tzinfo=UTC)

    trace = "0190a1b2-0000-7000-8000-000000000001"
    docs_out = {"documents": [{"page_content": "X is Y.", "metadata": {"id": "k1"}}]}
    runs = {
        "id": [trace, "0190a1b2-0000-7000-8000-000000000002"],
        "trace_id": [trace, trace],
        "parent_run_id": [None, trace],
        "run_type": ["chain", "retriever"],
        "name": ["rag", "retrieve"],
        "inputs": [json.dumps({"question": "What is X?"}), json.dumps({"query": "X"})],
        "outputs": [json.dumps({"answer": "X is Y."}), json.dumps(docs_out)],
        "start_time": [at(0), at(1)],
        "end_time": [at(3), at(2)],
    }
    table = pl.DataFrame(runs)
    table.write_parquet(tmp_path / "runs.parquet")
    records = [
        {
            **row,
            "inputs": json.loads(row["inputs"]),
            "outputs": json.loads(row["outputs"]),
            "start_time": row["start_time"].isoformat(),
            "end_time": row["end_time"].isoformat(),
        }
        for row in table.iter_rows(named=True)
    ]
    write_jsonl(tmp_path / "runs.jsonl", records)
    assert detect_format(tmp_path / "runs.parquet") == "langsmith"
    as_lines = read_traces_report(tmp_path / "runs.jsonl", "langsmith")
    assert as_lines.rows.select("question", "answer", "contexts").row(0) == (
        "What is X?",
        "X is Y.",
        ["X is Y."],
    )
    read = read_traces_report(tmp_path / "runs.parquet")
    assert read.skipped.height == 0
    assert_frame_equal(read.rows, as_lines.rows)
    assert_frame_equal(read_traces(tmp_path / "runs.parquet").collect(), as_lines.rows)
    wrote = write_traces(tmp_path / "runs.parquet", tmp_path / "rows.parquet")
    assert_frame_equal(pl.read_parquet(wrote.path), as_lines.rows)


def test_otlp_is_read_by_polars_alone_first_and_tolerantly_when_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`otel.scan_otlp(tolerant=False)` (faster, lighter) reads a file first; when Polars
    refuses it, the tolerant decoder reads it again and the rows are the same."""
    from ragframe.inputs.traces import otel

    values = [{"key": KIND_KEY, "value": {"stringValue": "CHAIN"}}]
    values += [{"key": k, "value": {"stringValue": v}} for k, v in ((IV, "Q"), (OV, "A"))]
    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "a" * 32,
                                "spanId": "b" * 16,
                                "name": "chain",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000500000000",
                                "attributes": values,
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = write_jsonl(tmp_path / "otlp.jsonl", [request])
    calls: list[bool] = []
    real = otel.scan_otlp

    def spy(lines: pl.LazyFrame, *, tolerant: bool = True) -> pl.LazyFrame:
        calls.append(tolerant)
        return real(lines, tolerant=tolerant)

    monkeypatch.setattr(otel, "scan_otlp", spy)
    fast = read_traces_report(path)
    assert calls == [False] and fast.rows["answer"].to_list() == ["A"]

    def refuse(lines: pl.LazyFrame, *, tolerant: bool = True) -> pl.LazyFrame:
        calls.append(tolerant)
        if not tolerant:
            return lines.select(pl.col("line").str.to_integer().cast(pl.String).alias("trace_id"))
        return real(lines, tolerant=tolerant)

    calls.clear()
    monkeypatch.setattr(otel, "scan_otlp", refuse)
    again = read_traces_report(path)
    assert calls == [False, True]
    assert_frame_equal(again.rows, fast.rows)
    assert again.skipped.height == 0


def test_a_line_that_is_not_utf8_is_listed_and_the_rest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polars reads no file holding a byte that is not UTF-8; that line is listed (with its
    number and why) and every other line read, by every entry point."""
    good = rag_trace("a" * 32, 1) + rag_trace("b" * 32, 2)
    path = tmp_path / "spans.jsonl"
    lines = [json.dumps(r).encode() for r in good]
    lines.insert(2, b'{"name": "\xff\xfe cut"}')
    path.write_bytes(b"\n".join(lines) + b"\n")
    for rows in every_read(path, tmp_path, monkeypatch):
        assert rows["question"].to_list() == ["Q1", "Q2"]
    read = read_traces_report(path)
    assert read.skipped.rows() == [("line is not UTF-8 text (byte 11)", None, None, 3)]


def test_a_pandas_frame_mixing_lists_and_text_in_a_column_is_read() -> None:
    """A Phoenix frame (pandas) whose `attributes.input.value` holds a list in one span and
    text in the others (valid in OpenTelemetry) is read through `read_traces` itself, the list
    as JSON text, where Arrow refuses the frame."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "context.span_id": ["s1", "s2", "s3"],
            "context.trace_id": ["t1", "t1", "t2"],
            "parent_id": [None, "s1", None],
            "span_kind": ["CHAIN", "RETRIEVER", "CHAIN"],
            "attributes.input.value": ["What is X?", ["What is X?", "x"], "What is Y?"],
            "attributes.output.value": ["X is 1.", None, "Y is 2."],
        }
    )
    rows = read_traces(frame, on_skip="raise").collect()
    assert rows["question"].to_list() == ["What is X?", "What is Y?"]
    assert rows["answer"].to_list() == ["X is 1.", "Y is 2."]
