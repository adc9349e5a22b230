"""Trace readers: the assembly rules, LangSmith runs, ragas / deepeval datasets and malformed
exports (clear errors or counted skips, never a silent drop)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from openinference.semconv.trace import DocumentAttributes, SpanAttributes
from polars.testing import assert_frame_equal

from ragframe.errors import InputError
from ragframe.inputs.traces import detect_format, read_traces, read_traces_report, write_traces

os.environ["LANGSMITH_TRACING"] = "false"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND


def span(
    trace: str,
    span_id: str,
    kind: str | None,
    start: int,
    *,
    parent: str | None = None,
    **attrs: Any,
) -> dict[str, Any]:
    """One span as the SDK's to_json() lays it out (times in seconds past a fixed minute)."""
    attributes = dict(attrs)
    if kind:
        attributes[KIND] = kind
    return {
        "name": kind or "span",
        "context": {"trace_id": f"0x{trace}", "span_id": f"0x{span_id}"},
        "parent_id": f"0x{parent}" if parent else None,
        "start_time": f"2024-05-01T10:00:{start:02d}.000000Z",
        "end_time": f"2024-05-01T10:00:{start + 1:02d}.500000Z",
        "attributes": attributes,
    }


def docs(*texts: str, first: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, text in enumerate(texts):
        prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
        out[prefix + DocumentAttributes.DOCUMENT_CONTENT] = text
        out[prefix + DocumentAttributes.DOCUMENT_ID] = f"d{first + i}"
        out[prefix + DocumentAttributes.DOCUMENT_SCORE] = 0.5 + i / 10
    return out


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_rules_several_retrievals_no_retriever_and_llm_fallback(tmp_path: Path) -> None:
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    iv, ov = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE
    records = [
        # trace a: root chain, two retrievals (second listed first in the file), two LLM calls
        span(a, "a1", "CHAIN", 0, **{iv: "Q1", ov: "A1"}),
        span(a, "a3", "RETRIEVER", 5, parent="a1", **docs("late", first=2)),
        span(a, "a2", "RETRIEVER", 2, parent="a1", **docs("early0", "early1")),
        span(a, "a4", "LLM", 6, parent="a1", **{ov: "draft"}),
        span(a, "a5", "LLM", 8, parent="a1", **{ov: "final draft"}),
        # trace b: no retriever; a nested chain under the root
        span(
            b,
            "b1",
            "CHAIN",
            0,
            **{
                iv: json.dumps({"question": "Q2"}),
                ov: "A2",
                SpanAttributes.INPUT_MIME_TYPE: "application/json",
            },
        ),
        span(b, "b2", "CHAIN", 1, parent="b1", **{iv: "inner", ov: "inner out"}),
        # trace c: no chain: answer from the last LLM span's messages
        span(c, "c1", "RETRIEVER", 0, **docs("ctx")),
        span(
            c,
            "c2",
            "LLM",
            2,
            **{
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "sys",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": "Q3",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "A3",
                SpanAttributes.LLM_MODEL_NAME: "m",
                SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 7,
                SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: 3,
            },
        ),
    ]
    rows = read_traces(write_jsonl(tmp_path / "s.jsonl", records), on_skip="raise").collect()
    assert rows["question"].to_list() == ["Q1", "Q2", "Q3"]
    assert rows["answer"].to_list() == ["A1", "A2", "A3"]
    assert rows["span_id"].to_list() == ["a1", "b1", "c2"]
    assert rows["contexts"].to_list() == [["early0", "early1", "late"], [], ["ctx"]]
    assert rows["context_document_ids"].to_list()[0] == ["d0", "d1", "d2"]
    assert rows["retrievals"].to_list() == [2, 0, 1]
    notes = rows["note"].to_list()
    assert "2 retrievals" in notes[0] and "2 LLM calls" in notes[0]
    assert notes[1] == "no retriever span"
    assert "last LLM span" in notes[2]
    assert rows["prompt_tokens"].to_list()[2] == 7 and rows["model_name"].to_list()[2] == "m"
    # no total recorded: prompt + completion; no LLM span recording tokens: null, never 0
    assert rows["total_tokens"].to_list() == [None, None, 10]
    assert rows["latency_ms"].to_list() == [1500.0, 1500.0, 1500.0]


def test_malformed_lines_are_listed_and_nothing_scored_is_lost(tmp_path: Path) -> None:
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    iv, ov = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE
    good = [span(a, "a1", "CHAIN", 0, **{iv: "Q1", ov: "A1"})]
    lines = [json.dumps(good[0])]
    lines.append(json.dumps(span(b, "b1", "RETRIEVER", 0, **docs("orphan"))))  # no answer
    no_attrs = span(c, "c1", None, 0)
    no_attrs["attributes"] = {}
    lines.append(json.dumps(no_attrs))  # a span with no attributes
    lines.append('{"name": "x", "context": {"trace_id": "0x1')  # truncated last line
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = read_traces_report(path, "openinference")
    assert read.rows["question"].to_list() == ["Q1"]
    reasons = dict(
        zip(read.skipped["line"].to_list(), read.skipped["reason"].to_list(), strict=True)
    )
    assert set(reasons) == {2, 3, 4}
    assert "retriever span(s) but no answer" in reasons[2]
    assert reasons[3] == "span has no attributes"
    assert reasons[4].startswith("line is not JSON")
    assert read.skipped.filter(pl.col("line") == 2)["trace_id"].item() == b
    with pytest.warns(UserWarning, match="skipped 3"):
        read_traces(path, "openinference")
    with pytest.raises(InputError, match="line 2"):
        read_traces(path, "openinference", on_skip="raise")


def test_mixed_schema_versions_are_skipped_with_the_line(tmp_path: Path) -> None:
    """A Phoenix-record line among SDK spans has no `context` object: listed, not dropped."""
    a = "a" * 32
    records = [
        span(
            a,
            "a1",
            "CHAIN",
            0,
            **{SpanAttributes.INPUT_VALUE: "Q", SpanAttributes.OUTPUT_VALUE: "A"},
        ),
        {
            "context.span_id": "zz",
            "attributes.input.value": "old",
            "context": None,
            "attributes": {},
        },
    ]
    read = read_traces_report(write_jsonl(tmp_path / "m.jsonl", records), "openinference")
    assert read.rows.height == 1
    assert read.skipped["line"].to_list() == [2]
    assert read.skipped["reason"].item() == "span has no trace id"


def test_unknown_format_names_the_choices(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"foo": 1}])
    with pytest.raises(InputError, match="openinference, otel, langsmith"):
        detect_format(path)
    with pytest.raises(InputError, match="unknown trace format"):
        read_traces(path, "zipkin")  # type: ignore[arg-type]


def test_langsmith_runs_from_the_clients_run_schema(tmp_path: Path) -> None:
    from langsmith.run_trees import RunTree
    from langsmith.schemas import Run

    root = RunTree(name="rag", run_type="chain", inputs={"question": "What is X?"})
    retriever = root.create_child(name="retrieve", run_type="retriever", inputs={"query": "X"})
    retriever.end(
        outputs={
            "documents": [
                {
                    "page_content": "X is Y.",
                    "metadata": {"id": "k1", "score": 0.9},
                    "type": "Document",
                },
                {"page_content": "Y is Z.", "metadata": {"source": "k2"}, "type": "Document"},
            ]
        }
    )
    llm = root.create_child(
        name="llm", run_type="llm", inputs={"messages": [{"role": "user", "content": "What is X?"}]}
    )
    llm.end(outputs={"generations": [[{"text": "X is Y."}]]})
    root.end(outputs={"answer": "X is Y."})
    fields = set(Run.model_fields)
    lines = []
    for tree in (root, retriever, llm):
        data = {k: v for k, v in tree.model_dump().items() if k in fields and k != "child_runs"}
        data["trace_id"] = tree.trace_id
        lines.append(Run(**data).model_dump_json())
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert detect_format(path) == "langsmith"
    read = read_traces_report(path)
    assert read.skipped.height == 0
    row = read.rows.row(0, named=True)
    assert row["question"] == "What is X?" and row["answer"] == "X is Y."
    assert row["contexts"] == ["X is Y.", "Y is Z."]
    assert row["context_document_ids"] == ["k1", "k2"]
    assert row["span_id"] == str(root.id) and row["trace_id"] == str(root.trace_id)


def test_ragas_jsonl_and_csv_and_deepeval_json(tmp_path: Path) -> None:
    records = [
        {
            "user_input": "Q1",
            "response": "A1",
            "retrieved_contexts": ["c1", "c2"],
            "reference": "G1",
        },
        {"user_input": "Q2", "response": None, "retrieved_contexts": [], "reference": "G2"},
    ]
    ragas_jsonl = write_jsonl(tmp_path / "ragas.jsonl", records)
    csv = tmp_path / "ragas.csv"
    csv.write_text(
        "user_input,response,retrieved_contexts,reference\nQ1,A1,\"['c1', 'c2']\",G1\nQ2,,[],G2\n"
    )
    deepeval = tmp_path / "deepeval.json"
    deepeval.write_text(
        json.dumps(
            [
                {
                    "input": "Q1",
                    "actual_output": "A1",
                    "retrieval_context": ["c1", "c2"],
                    "expected_output": "G1",
                },
                {"input": "Q2", "expected_output": "G2", "context": []},
            ]
        )
    )
    for path, fmt in ((ragas_jsonl, "ragas"), (csv, "ragas"), (deepeval, "deepeval")):
        assert detect_format(path) == fmt
        rows = read_traces(path, on_skip="raise").collect()
        assert rows["question"].to_list() == ["Q1", "Q2"], path
        assert rows["answer"].to_list() == ["A1", None], path
        assert rows["contexts"].to_list() == [["c1", "c2"], []], path
        assert rows["ground_truth"].to_list() == ["G1", "G2"], path
        assert rows["note"].to_list() == [None, "no answer in the dataset"], path


def test_phoenix_pandas_frame_is_accepted(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "context.span_id": ["s1", "s2"],
            "context.trace_id": ["t1", "t1"],
            "parent_id": [None, "s1"],
            "span_kind": ["CHAIN", "RETRIEVER"],
            "start_time": pd.to_datetime(
                ["2024-05-01T10:00:00Z", "2024-05-01T10:00:01Z"], format="ISO8601"
            ),
            "end_time": pd.to_datetime(
                ["2024-05-01T10:00:02Z", "2024-05-01T10:00:01.5Z"], format="ISO8601"
            ),
            "attributes.input.value": ["Q", "Q"],
            "attributes.output.value": ["A", None],
            "attributes.retrieval.documents": [
                None,
                [{"document.content": "c0", "document.id": "i0", "document.score": 1.0}],
            ],
        }
    ).set_index("context.span_id")
    rows = read_traces(frame, on_skip="raise").collect()
    assert rows.select("question", "answer", "span_id", "contexts").row(0) == (
        "Q",
        "A",
        "s1",
        ["c0"],
    )


def test_buckets_give_exactly_the_single_pass_rows_and_skipped_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve traces with interleaved spans, an orphan retriever trace, a span with no
    attributes and a truncated line, read in 4 buckets: the same frames as one pass."""
    from ragframe.inputs.traces import buckets

    iv, ov = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE
    traces = [f"{i:032x}" for i in range(1, 13)]
    lines = []
    for step in range(3):  # every trace's root first, then retrievers, then LLM spans
        for i, trace in enumerate(traces):
            root = f"{i:02d}01"
            if step == 0:
                record = span(trace, root, "CHAIN", 30 - i, **{iv: f"Q{i}", ov: f"A{i}"})
            elif step == 1:
                record = span(trace, f"{i:02d}02", "RETRIEVER", 31 - i, parent=root, **docs("c"))
            else:
                record = span(trace, f"{i:02d}03", "LLM", 32 - i, parent=root, **{ov: "x"})
            lines.append(json.dumps(record))
    lines.insert(5, json.dumps(span("e" * 32, "e1", "RETRIEVER", 0, **docs("orphan"))))
    lines.insert(9, json.dumps({**span("f" * 32, "f1", None, 0), "attributes": {}}))
    lines.insert(14, '{"name": "x", "context": {"trace_id": "0x1')
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n")

    parts: list[int] = []
    assemble_part = buckets.assemble_unordered

    def counted(spans: pl.LazyFrame) -> Any:
        parts.append(1)
        return assemble_part(spans)

    monkeypatch.setattr(buckets, "assemble_unordered", counted)
    one = read_traces_report(path, "openinference", buckets=1)
    assert parts == []  # one pass: no bucket assembled
    four = read_traces_report(path, "openinference", buckets=4)
    assert len(parts) > 1  # the traces really were spread over several buckets
    assert one.rows["question"].to_list() == [f"Q{i}" for i in range(12)]  # source order
    assert_frame_equal(four.rows, one.rows)
    assert_frame_equal(four.skipped, one.skipped)
    assert four.skipped["line"].to_list() == [6, 10, 15]
    assert four.skipped["reason"][2].startswith("line is not JSON")
    with pytest.raises(InputError, match="buckets"):
        read_traces_report(path, "openinference", buckets=0)

    # To disk (the rows never in memory together): the same rows and skipped list, also when
    # buckets are made in several partitioning levels and the merge reads many small ranges.
    monkeypatch.setattr(buckets, "FANOUT", 2)
    monkeypatch.setattr(buckets, "ROW_GROUP", 2)
    for k in (1, 4, 7):
        out = tmp_path / f"rows{k}.parquet"
        wrote = write_traces(path, out, "openinference", buckets=k)
        assert wrote.rows == 12 and wrote.path == out
        assert_frame_equal(pl.read_parquet(out), one.rows)
        assert_frame_equal(wrote.skipped, one.skipped)
    assert not list(tmp_path.glob(".rows*")) and not list(tmp_path.glob("ragframe-traces-*"))


def test_write_traces_refuses_an_existing_output_and_leaves_nothing_on_failure(
    tmp_path: Path,
) -> None:
    """The rows file appears whole or not at all."""
    iv, ov = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE
    path = write_jsonl(
        tmp_path / "s.jsonl", [span("a" * 32, "a1", "CHAIN", 0, **{iv: "Q", ov: "A"})]
    )
    out = tmp_path / "rows.parquet"
    assert write_traces(path, out).rows == 1
    with pytest.raises(InputError, match="exists; pass overwrite=True"):
        write_traces(path, out)
    assert write_traces(path, out, overwrite=True).rows == 1
    assert pl.read_parquet(out)["question"].to_list() == ["Q"]
    missing = tmp_path / "none.parquet"
    with pytest.raises(InputError, match="no such file"):
        write_traces(tmp_path / "nothing.jsonl", missing, "openinference")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet", "s.jsonl"]


def test_times_with_an_offset_naive_or_space_separated() -> None:
    """Explicit formats (no inference: it made the streaming pass hold the whole file)."""
    from ragframe.inputs.traces.openinference import parse_time

    text = [
        "2024-05-01T10:00:00.123456Z",
        "2024-05-01T12:00:00+02:00",
        "2024-05-01 10:00:00",
        "2024-05-01T10:00:00.5",
        "not a time",
    ]
    times = pl.select(parse_time(pl.lit(pl.Series(text)))).to_series().to_list()
    assert [t and t.isoformat() for t in times] == [
        "2024-05-01T10:00:00.123456+00:00",
        "2024-05-01T10:00:00+00:00",
        "2024-05-01T10:00:00+00:00",
        "2024-05-01T10:00:00.500000+00:00",
        None,
    ]


def test_merge_ranges_hold_about_equal_rows_however_the_rows_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge reads one range of source lines at a time; the ranges are cut from the row
    groups' statistics so that each holds about total / ranges rows even when nearly every row
    sits in the last lines of the file (a range as wide as the file / ranges would hold them
    all at once)."""
    from ragframe.inputs.traces import buckets

    monkeypatch.setattr(buckets, "ROW_GROUP", 10)
    lines = [*range(1, 11), *range(9_000, 9_990)]  # 10 rows early, 990 at the very end
    parts = []
    for k in range(3):  # three sorted parts, as three buckets would write them
        part = pl.DataFrame({"first_line": sorted(lines[k::3])})
        parts.append(tmp_path / f"part{k}.parquet")
        part.write_parquet(parts[-1], row_group_size=10)
    starts = buckets._range_starts(parts, ranges=10)
    ends = [*starts[1:], None]
    every = pl.concat([pl.read_parquet(p) for p in parts])["first_line"]
    sizes = [
        int(((every >= s) & (every < e if e is not None else True)).sum())
        for s, e in zip(starts, ends, strict=True)
    ]
    assert sum(sizes) == len(lines) and len(starts) >= 9
    assert max(sizes) <= 2 * len(lines) // 10, sizes
