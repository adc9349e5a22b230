"""The OTLP reader on values of odd shapes, as OpenTelemetry's own SDK writes them: a GenAI
JSON attribute cut by the SDK's attribute length limit, documents and messages of shapes the
GenAI conventions do not have, a line of another signal in the same file, and indented
documents and arrays read in time and memory linear in their size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G

from ragframe.inputs.traces import otel, read_traces_report

#: The SDK's attribute length limit in these tests (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT).
LIMIT = 120
DOCUMENTS = "gen_ai.retrieval.documents"  # not yet in opentelemetry-semantic-conventions 0.x


def messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def documents(*texts: str) -> str:
    return json.dumps([{"id": f"d{i}", "score": 0.5, "content": t} for i, t in enumerate(texts)])


def trace_turns(path: Path, turns: list[dict[str, str]], limits: SpanLimits | None = None) -> list:
    """Each turn as an `invoke_agent` span (its messages) with a `retrieval` child (its
    documents), traced by the SDK and written by OpenTelemetry's JSON file exporter; the
    (trace id, agent span id, retrieval span id) of each turn."""
    provider = TracerProvider(span_limits=limits or SpanLimits())
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    tracer = provider.get_tracer("genai-app")
    ids = []
    for turn in turns:
        with tracer.start_as_current_span("invoke_agent rag") as agent:
            agent.set_attribute(G.GEN_AI_OPERATION_NAME, "invoke_agent")
            agent.set_attribute(G.GEN_AI_INPUT_MESSAGES, turn["input"])
            with tracer.start_as_current_span("retrieval kb") as retrieval:
                retrieval.set_attribute(G.GEN_AI_OPERATION_NAME, "retrieval")
                retrieval.set_attribute(DOCUMENTS, turn["documents"])
            agent.set_attribute(G.GEN_AI_OUTPUT_MESSAGES, turn["output"])
        ids.append(
            (
                f"{agent.get_span_context().trace_id:032x}",
                f"{agent.get_span_context().span_id:016x}",
                f"{retrieval.get_span_context().span_id:016x}",
            )
        )
    provider.shutdown()
    return ids


def line_of(path: Path, span_id: str) -> int:
    """The line of the request holding span `span_id` (not as a parent)."""
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        request = json.loads(text)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                if any(s["spanId"] == span_id for s in scope["spans"]):
                    return number
    raise AssertionError(span_id)


def good_turn(i: int) -> dict[str, str]:
    return {
        "input": messages("user", f"question {i}?"),
        "output": messages("assistant", f"answer {i}."),
        "documents": documents(f"context {i}"),
    }


@pytest.mark.parametrize("cut", ["documents", "input"])
def test_a_value_cut_by_the_sdk_attribute_limit_costs_its_span_only(
    tmp_path: Path, cut: str
) -> None:
    """The SDK's own attribute length limit cuts a long GenAI JSON value mid-text: the span
    holding it is not read (listed with its line and why, naming the limit); the other turns,
    in the same batch of lines, read exactly as before."""
    turns = [good_turn(0), good_turn(1), good_turn(2)]
    long = "word " * 60  # longer than LIMIT once in JSON
    turns[1] = {
        **turns[1],
        cut: documents(long) if cut == "documents" else messages("user", long),
    }
    assert len(turns[1][cut]) > LIMIT and len(turns[0][cut]) < LIMIT
    path = tmp_path / "spans.jsonl"
    ids = trace_turns(path, turns, SpanLimits(max_span_attribute_length=LIMIT))
    written = path.read_text()
    assert json.dumps(turns[1][cut][:LIMIT])[1:-1] in written  # the SDK really cut it
    read = read_traces_report(path, "otel")
    good = [0, 2] if cut == "input" else [0, 1, 2]
    assert read.rows["trace_id"].to_list() == [ids[i][0] for i in good]
    assert read.rows["question"].to_list() == [f"question {i}?" for i in good]
    assert read.rows["answer"].to_list() == [f"answer {i}." for i in good]
    expected = [[f"context {i}"] if i != 1 else [] for i in good]
    assert read.rows["contexts"].to_list() == expected
    span_id = ids[1][2] if cut == "documents" else ids[1][1]
    listed = read.skipped.filter(pl.col("span_id") == span_id)
    assert listed.select("trace_id", "line").rows() == [(ids[1][0], line_of(path, span_id))]
    # the reason the reader gives the span (`skip_reason`, which assemble lists)
    spans = otel.scan_otlp(pl.scan_lines(path, name="line", row_index_name="n")).collect()
    reasons = spans.filter(pl.col("skip_reason").is_not_null())
    assert reasons["span_id"].to_list() == [span_id]
    key = DOCUMENTS if cut == "documents" else G.GEN_AI_INPUT_MESSAGES
    assert reasons["skip_reason"][0].startswith(f"{key} is not JSON: it stops after {LIMIT} ")
    assert "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in reasons["skip_reason"][0]


@pytest.mark.xfail(
    strict=True, reason="needs assemble.py to list a span frame's `skip_reason` (SPAN_SCHEMA)"
)
def test_the_cut_span_is_listed_with_the_readers_reason(tmp_path: Path) -> None:
    turns = [good_turn(0), {**good_turn(1), "documents": documents("word " * 60)}]
    path = tmp_path / "spans.jsonl"
    ids = trace_turns(path, turns, SpanLimits(max_span_attribute_length=LIMIT))
    read = read_traces_report(path, "otel")
    listed = read.skipped.filter(pl.col("span_id") == ids[1][2])
    assert "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in listed["reason"][0]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        # documents as one object, not a list of them
        ("documents", json.dumps({"id": "d0", "content": "one doc"}), ("q?", "a.", ["one doc"])),
        # a document as a plain string: its content
        (
            "documents",
            json.dumps(["plain doc", {"content": "x"}]),
            ("q?", "a.", ["plain doc", "x"]),
        ),
        # a document's content as an object: JSON text
        ("documents", json.dumps([{"content": {"text": "X"}}]), ("q?", "a.", ['{"text":"X"}'])),
        # a part's content as a list: JSON text
        (
            "input",
            json.dumps([{"role": "user", "parts": [{"type": "text", "content": ["a", "b"]}]}]),
            ('["a","b"]', "a.", ["c"]),
        ),
        # one message, not a list; its parts as plain strings
        ("output", json.dumps({"role": "assistant", "parts": ["a", "b."]}), ("q?", "ab.", ["c"])),
    ],
)
def test_genai_values_of_odd_shapes_are_read_sensibly(
    tmp_path: Path, field: str, value: str, expected: tuple[str, str, list[str]]
) -> None:
    """Shapes the GenAI conventions do not have, set by an application on a real span: read
    (a single object as a list of one, a plain string as content, an object or list where
    text was expected as JSON text), the good turn beside it unchanged, nothing skipped."""
    odd = {
        "input": messages("user", "q?"),
        "output": messages("assistant", "a."),
        "documents": documents("c"),
    }
    odd[field] = value
    path = tmp_path / "spans.jsonl"
    ids = trace_turns(path, [good_turn(0), odd])
    read = read_traces_report(path, "otel")
    assert read.skipped.height == 0
    assert read.rows.select("question", "answer", "contexts").rows() == [
        ("question 0?", "answer 0.", ["context 0"]),
        expected,
    ]
    assert read.rows["trace_id"].to_list() == [i[0] for i in ids]


def logs_line() -> str:
    """A log request as protobuf's JSON mapping writes it (a Collector file exporter shared by
    a logs and a traces pipeline writes both to one file)."""
    record = LogRecord(time_unix_nano=1, body=AnyValue(string_value="hello"))
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    return json_format.MessageToJson(request, indent=None)


@pytest.mark.parametrize("tolerant", [True, False])
def test_a_line_without_resource_spans_is_listed(tmp_path: Path, tolerant: bool) -> None:
    """A line of another signal (`resourceLogs`) or with a misspelt key forms no span but is
    listed with its line, by both decoders; the trace lines around it read as before."""
    path = tmp_path / "spans.jsonl"
    ids = trace_turns(path, [good_turn(0), good_turn(1)])
    real = path.read_text().splitlines()
    lines = [real[0], logs_line(), '{"resource_spanz": []}', *real[1:]]
    path.write_text("".join(f"{line}\n" for line in lines))
    read = read_traces_report(path, "otel")
    assert read.rows["trace_id"].to_list() == [i[0] for i in ids]
    assert read.skipped.select("span_id", "line").rows() == [(None, 2), (None, 3)]
    frame = pl.scan_lines(path, name="line", row_index_name="n", row_index_offset=1)
    spans = otel.scan_otlp(frame, tolerant=tolerant).collect()
    reasons = spans.filter(pl.col("skip_reason").is_not_null()).select("line", "skip_reason")
    reasons = reasons.sort("line")  # the span frame is in no set order
    assert reasons["line"].to_list() == [2, 3]
    assert "first key is 'resourceLogs'" in reasons["skip_reason"][0]
    assert "first key is 'resource_spanz'" in reasons["skip_reason"][1]


def test_a_line_without_resource_spans_is_listed_by_the_line_by_line_decoder(
    tmp_path: Path,
) -> None:
    """In a batch Polars refuses (an odd value elsewhere), `canonical` keeps a line without
    resourceSpans without them, so that it is listed too."""
    path = tmp_path / "spans.jsonl"
    trace_turns(path, [good_turn(0)])
    odd = json.loads(path.read_text().splitlines()[0])
    odd["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"] = "bare"
    path.write_text(json.dumps(odd) + "\n" + logs_line() + "\n")
    frame = pl.scan_lines(path, name="line", row_index_name="n", row_index_offset=1)
    spans = otel.scan_otlp(frame).collect()
    assert spans.filter(pl.col("skip_reason").is_not_null())["line"].to_list() == [2]


class CountingDecoder(json.JSONDecoder):
    """Counts the characters `raw_decode` goes through (to the end of a value, or of the text
    when the value is not whole)."""

    parsed = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            value, end = super().raw_decode(s, idx)
        except ValueError:
            CountingDecoder.parsed += len(s) - idx
            raise
        CountingDecoder.parsed += end - idx
        return value, end


@pytest.mark.parametrize("shape", ["array", "one request", "documents"])
def test_indented_json_is_parsed_in_work_linear_in_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """A document larger than a read is parsed again after each read; the reads grow with
    the buffer, so the parses add up to a few times the file (under 5) (1 KiB reads of a 200 kB
    document were 100 parses of up to 200 kB). A top-level array is parsed item by item."""
    turn = {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x" * 100}] * 20}]}]}
    values: Any = {
        "array": [turn] * 60,
        "one request": {"resourceSpans": turn["resourceSpans"] * 60},
        "documents": None,
    }[shape]
    path = tmp_path / "big.json"
    if values is None:
        path.write_text("\n".join(json.dumps(turn, indent=2) for _ in range(60)))
    else:
        path.write_text(json.dumps(values, indent=2))
    monkeypatch.setattr(otel, "CHUNK", 1024)
    monkeypatch.setattr(otel.json, "JSONDecoder", CountingDecoder)
    CountingDecoder.parsed = 0
    documents = list(otel._documents_of(path))
    size = path.stat().st_size
    assert size > 150_000
    assert CountingDecoder.parsed < 5 * size
    texts = [json.loads(text) for _, text in documents]
    assert texts == (
        values if isinstance(values, list) else [values or turn] * (1 if values else 60)
    )


def test_array_items_carry_the_line_they_start_on(tmp_path: Path) -> None:
    """Each item of an indented array is listed at its own line; an array left open at the
    end of the file ends with a text the caller lists as not JSON."""
    path = tmp_path / "array.json"
    path.write_text('[\n  {"a": 1},\n  {"b":\n 2},\n  7\n')
    assert list(otel._documents_of(path)) == [(2, '{"a": 1}'), (3, '{"b": 2}'), (5, "7"), (1, "[")]
