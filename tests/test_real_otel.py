"""OpenTelemetry as its own writers write it: a real RAG pipeline (OpenInference's OpenAI
instrumentor around the `openai` client, against ragframe's fake server) traced by
`opentelemetry-sdk`, its spans written by the JSON file exporter, by OpenTelemetry's OTLP JSON
encoder, and by protobuf's own JSON mapping of the request `encode_spans` builds (ids in
base64, camelCase or proto names); each must read to the rows the pipeline saw, with the hex
ids Phoenix shows. Then the evaluation events `ragframe export --to otel` writes, decoded by
protobuf's parser into OpenTelemetry's proto classes and by OpenTelemetry's OTLP JSON decoder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import polars as pl
import pytest
from google.protobuf import json_format
from openinference.instrumentation import using_attributes
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as json_encode
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.proto_json.collector.logs.v1 import logs_service as otlp_json_logs
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G
from polars.testing import assert_frame_equal
from test_traces_real import QUESTIONS, answer_from_context, retrieve

from ragframe import Judge, evaluate
from ragframe.export import export_scores
from ragframe.inputs.traces import openinference, otel, read_traces, read_traces_report
from ragframe.inputs.traces.assemble import assemble
from ragframe.testing.server import FakeServer

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
#: What each turn carries for the trace-level fields (set the way OpenInference users set them).
SESSION = "session-{i}"
USER = "user-7"
TAGS = ["prod", "rag-v2"]
#: The writers of OTLP JSON Lines (a request a line).
LINES = ["file_exporter", "otlp_json_encoder", "message_to_json", "message_to_dict_proto_names"]


def run_pipeline(provider: TracerProvider, base_url: str) -> list[dict[str, Any]]:
    """The RAG pipeline, each turn inside OpenInference's `using_attributes` (session, user,
    metadata, tags: the instrumented LLM span carries them); what it saw, per question."""
    tracer = provider.get_tracer("rag-pipeline")
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key")
    seen = []
    for i, question in enumerate(QUESTIONS):
        metadata = {"turn": i, "app": "kb"}
        with (
            using_attributes(
                session_id=SESSION.format(i=i), user_id=USER, metadata=metadata, tags=TAGS
            ),
            tracer.start_as_current_span(
                "rag", attributes={KIND: OpenInferenceSpanKindValues.CHAIN.value}
            ) as chain,
        ):
            chain.set_attribute(SpanAttributes.INPUT_VALUE, question)
            with tracer.start_as_current_span(
                "retrieve", attributes={KIND: OpenInferenceSpanKindValues.RETRIEVER.value}
            ) as retriever:
                docs = retrieve(question)
                for d, (doc_id, text, score) in enumerate(docs):
                    prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{d}.document."
                    retriever.set_attribute(prefix + "id", doc_id)
                    retriever.set_attribute(prefix + "content", text)
                    retriever.set_attribute(prefix + "score", score)
            prompt = "Context:\n" + "\n".join(t for _, t, _ in docs) + f"\nQuestion: {question}"
            reply = client.chat.completions.create(
                model="fake-rag-model", messages=[{"role": "user", "content": prompt}]
            )
            answer = reply.choices[0].message.content
            chain.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
            context = chain.get_span_context()
            seen.append(
                {
                    "question": question,
                    "answer": answer,
                    "contexts": [t for _, t, _ in docs],
                    "context_document_ids": [d for d, _, _ in docs],
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "session_id": SESSION.format(i=i),
                    "user_id": USER,
                    "tags": TAGS,
                    "metadata": metadata,
                }
            )
    return seen


def lines_of(requests: list[str]) -> str:
    return "".join(r + "\n" for r in requests)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The pipeline run once; its spans written each way OpenTelemetry writes OTLP JSON."""
    folder = tmp_path_factory.mktemp("otel")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    files = {"file_exporter": folder / "file_exporter.jsonl"}
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(files["file_exporter"])))
    files["console_default"] = folder / "console.txt"
    console = files["console_default"].open("w", encoding="utf-8")
    # the console exporter as is (an indented JSON document per span), stdout saved to a file
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=console)))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with FakeServer(handler=answer_from_context) as fake:
            seen = run_pipeline(provider, fake.base_url)
    finally:
        instrumentor.uninstrument()
    provider.shutdown()
    console.close()
    spans: list[ReadableSpan] = list(memory.get_finished_spans())
    # One request per trace's worth of spans, as an exporter's batches would be.
    batches = [spans[i : i + 3] for i in range(0, len(spans), 3)]
    writers = {
        "otlp_json_encoder": lambda b: json_encode(b).to_json(),
        "message_to_json": lambda b: json_format.MessageToJson(encode_spans(b), indent=None),
        "message_to_dict_proto_names": lambda b: json.dumps(
            json_format.MessageToDict(encode_spans(b), preserving_proto_field_name=True)
        ),
    }
    for name, write in writers.items():
        files[name] = folder / f"{name}.jsonl"
        files[name].write_text(lines_of([write(b) for b in batches]))
    files["message_to_json_indented"] = folder / "request.json"  # MessageToJson's default
    files["message_to_json_indented"].write_text(json_format.MessageToJson(encode_spans(spans)))
    yield {"spans": spans, "seen": seen, "files": files}


def test_the_writers_really_differ(traced: dict[str, Any]) -> None:
    """The files are what each writer makes: hex ids, base64 ids, proto names."""
    first = {k: json.loads(traced["files"][k].read_text().splitlines()[0]) for k in LINES}
    span = first["message_to_json"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"].endswith("==") and len(span["traceId"]) == 24  # base64
    snake = first["message_to_dict_proto_names"]["resource_spans"][0]["scope_spans"][0]
    assert "trace_id" in snake["spans"][0]
    hexed = first["otlp_json_encoder"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(hexed["traceId"]) == 32


@pytest.mark.parametrize("writer", LINES)
def test_rows_equal_what_the_pipeline_saw(traced: dict[str, Any], writer: str) -> None:
    read = read_traces_report(traced["files"][writer])  # detected as otel
    assert read.skipped.height == 0, read.skipped
    assert read.rows.height == len(QUESTIONS)
    for row, seen in zip(read.rows.iter_rows(named=True), traced["seen"], strict=True):
        for key in (
            "question",
            "answer",
            "contexts",
            "context_document_ids",
            "trace_id",
            "span_id",
            "session_id",
            "user_id",
            "tags",
        ):
            assert row[key] == seen[key], (writer, key)
        assert json.loads(row["metadata"]) == seen["metadata"]
        assert row["model_name"] == "fake-rag-model" and row["prompt_tokens"] > 0


def assert_rows_are_what_was_seen(rows: pl.DataFrame, seen: list[dict[str, Any]]) -> None:
    assert rows.height == len(seen)
    for row, expected in zip(rows.iter_rows(named=True), seen, strict=True):
        for key in ("question", "answer", "contexts", "trace_id", "span_id", "session_id"):
            assert row[key] == expected[key], key


def test_indented_documents_read_through_json_documents(traced: dict[str, Any]) -> None:
    """protobuf's MessageToJson as it writes by default (one indented request) and the SDK
    console exporter's default output (an indented span after span) are not JSON Lines:
    `otel.json_documents` gives the readers one document a line, with its first line."""
    files = traced["files"]
    request = otel.json_documents(files["message_to_json_indented"])
    assert request.collect()["n"].to_list() == [1]
    rows, skipped = assemble(otel.scan_otlp(request))
    assert skipped.collect().height == 0
    assert_rows_are_what_was_seen(rows.collect(), traced["seen"])
    console = otel.json_documents(files["console_default"])
    assert console.collect().height == len(traced["spans"])
    rows, skipped = assemble(openinference.scan_jsonl(console, pl.col("n")))
    assert skipped.collect().height == 0
    assert_rows_are_what_was_seen(rows.collect(), traced["seen"])


def test_json_documents_keep_lines_and_list_what_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "mixed.json"
    path.write_text('{"a":\n 1}\nnot json here\n[{"b": 2}, {"c": 3}]\n\n  {"d": 4}')
    frame = otel.json_documents(path).collect()
    assert frame["n"].to_list() == [1, 3, 4, 4, 6]
    assert frame["line"].to_list()[1] == "not json here"
    assert json.loads(frame["line"][4]) == {"d": 4}


def test_indented_documents_read_by_read_traces(traced: dict[str, Any]) -> None:
    """The same files given to read_traces: detected, and read through json_documents."""
    for name in ("message_to_json_indented", "console_default"):
        read = read_traces_report(traced["files"][name])
        assert read.skipped.height == 0
        assert_rows_are_what_was_seen(read.rows, traced["seen"])


def otlp_line(spans: list[dict[str, Any]]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})


def span(trace: str, span_id: str, kind: str, attributes: Any, parent: str = "") -> dict:
    return {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": kind.lower(),
        "startTimeUnixNano": 1_700_000_000_000_000_000,  # a number, as some writers write it
        "endTimeUnixNano": "1700000000500000000",
        "attributes": [{"key": KIND, "value": {"stringValue": kind}}, *attributes],
    }


def attr(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


@pytest.mark.parametrize(
    ("value", "question"),
    [
        ({"stringValue": "plain"}, "plain"),
        ({"intValue": "42"}, "42"),
        ({"intValue": 42}, "42"),
        ({"doubleValue": 0.5}, "0.5"),
        ({"boolValue": True}, "true"),
        ({"bytesValue": "aGk="}, "aGk="),
        ({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}}, '["a",1]'),
        ({"kvlistValue": {"values": [{"key": "q", "value": {"stringValue": "x"}}]}}, '{"q":"x"}'),
        # shapes the fast path's schema has not: read line by line, as JSON text
        ({"arrayValue": {"values": [{"arrayValue": {"values": [{"intValue": "1"}]}}]}}, "[[1]]"),
        ("bare string", "bare string"),
        (["a", "b"], '["a","b"]'),
    ],
)
def test_every_anyvalue_shape_reads_as_text(tmp_path: Path, value: Any, question: str) -> None:
    trace = "ab" * 16
    line = otlp_line(
        [
            span(
                trace,
                "01" * 8,
                "CHAIN",
                [attr("input.value", value), attr("output.value", {"stringValue": "A"})],
            ),
        ]
    )
    path = tmp_path / "spans.jsonl"
    path.write_text(line + "\n")
    read = read_traces_report(path, "otel")
    assert read.skipped.height == 0
    assert read.rows["question"].to_list() == [question]


def test_odd_spans_and_bad_lines_never_cost_the_file(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    """Real lines, then: a line that is not JSON, a span that is not an object, attributes as an
    object map, an attribute value that is a bare string, a span whose attributes are a
    number; the real traces all read, the odd ones are read as text or listed with their line,
    and no exception escapes."""
    real = traced["files"]["file_exporter"].read_text().splitlines()
    odd_trace, odd_span = "cd" * 16, "02" * 8
    map_attrs = span("ef" * 16, "03" * 8, "CHAIN", [])
    map_attrs["attributes"] = {KIND: "CHAIN", "input.value": "q map", "output.value": "a map"}
    bare = span(
        "12" * 16,
        "04" * 8,
        "CHAIN",
        [attr("input.value", "q bare"), attr("output.value", "a bare")],
    )
    numbered = span(odd_trace, odd_span, "CHAIN", [])
    numbered["attributes"] = 7
    extra = [
        "{not json",
        otlp_line([42]),  # a span that is not an object
        otlp_line([map_attrs]),
        otlp_line([bare, numbered]),
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text(lines_of([*real, *extra]))
    read = read_traces_report(path, "otel")
    n = len(real)
    assert read.rows["question"].to_list() == [*QUESTIONS, "q map", "q bare"]
    assert read.rows["span_id"].to_list()[: len(QUESTIONS)] == [
        s["span_id"] for s in traced["seen"]
    ]
    skipped = {line: reason for reason, _, _, line in read.skipped.iter_rows()}
    assert set(skipped) == {n + 1, n + 2, n + 4}
    assert "not JSON" in skipped[n + 1]
    assert read.skipped.filter(pl.col("line") == n + 4)["span_id"].to_list() == [odd_span]


def test_the_polars_only_path_reads_the_same_and_refuses_odd_shapes(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    """`scan_otlp(tolerant=False)` (Polars alone) gives the tolerant path's rows on what the
    writers write, and fails on a value of no AnyValue shape, which the tolerant path reads."""
    for name in LINES:
        lines = pl.scan_lines(traced["files"][name], name="line", row_index_name="n")
        fast, _ = assemble(otel.scan_otlp(lines, tolerant=False))
        tolerant, _ = assemble(otel.scan_otlp(lines))
        assert_frame_equal(fast.collect(), tolerant.collect())
    odd = span(
        "ab" * 16, "01" * 8, "CHAIN", [attr("input.value", "bare"), attr("output.value", "A")]
    )
    path = tmp_path / "odd.jsonl"
    path.write_text(otlp_line([odd]) + "\n")
    lines = pl.scan_lines(path, name="line", row_index_name="n")
    with pytest.raises(pl.exceptions.ComputeError):
        assemble(otel.scan_otlp(lines, tolerant=False))[0].collect()
    assert assemble(otel.scan_otlp(lines))[0].collect()["question"].to_list() == ["bare"]


def keys_at(requests: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The keys met in each place the reader reads from, over OTLP JSON requests."""
    seen: dict[str, set[str]] = {place: set() for place in otel.KNOWN_FIELDS}

    def values(kvs: list[dict[str, Any]]) -> None:
        for kv in kvs:
            seen["key_value"] |= set(kv)
            seen["any_value"] |= set(kv["value"])
            inner = kv["value"].get("arrayValue") or kv["value"].get("kvlistValue") or {}
            for item in inner.get("values", []):
                if "key" in item:
                    values([item])
                else:
                    seen["any_value"] |= set(item)

    for request in requests:
        seen["request"] |= set(request)
        for rs in request["resourceSpans"]:
            seen["resource_spans"] |= set(rs)
            for ss in rs["scopeSpans"]:
                seen["scope_spans"] |= set(ss)
                for s in ss["spans"]:
                    seen["span"] |= set(s)
                    values(s.get("attributes", []))
                    for event in s.get("events", []):
                        seen["event"] |= set(event)
                        values(event.get("attributes", []))
    return seen


def test_unknown_field_canary(traced: dict[str, Any]) -> None:
    """Fails when OpenTelemetry's writers write, or its proto messages define, a field the
    reader does not know in a place it reads from (read, or deliberately left)."""
    requests = [
        json.loads(line)
        for name in ("file_exporter", "otlp_json_encoder", "message_to_json")
        for line in traced["files"][name].read_text().splitlines()
    ]
    for place, keys in keys_at(requests).items():
        assert keys <= otel.KNOWN_FIELDS[place], (place, keys - otel.KNOWN_FIELDS[place])
    messages = {
        "request": ExportTraceServiceRequest,
        "resource_spans": ResourceSpans,
        "scope_spans": ScopeSpans,
        "span": Span,
        "event": Span.Event,
        "key_value": KeyValue,
        "any_value": AnyValue,
    }
    for place, message in messages.items():
        fields = {f.json_name for f in message.DESCRIPTOR.fields}
        assert fields <= otel.KNOWN_FIELDS[place], (place, fields - otel.KNOWN_FIELDS[place])
    snake = {f.name for m in messages.values() for f in m.DESCRIPTOR.fields if "_" in f.name}
    read = {"resource_spans", "scope_spans", "trace_id", "span_id", "parent_span_id"}
    read |= {"start_time_unix_nano", "end_time_unix_nano", "string_value", "int_value"}
    read |= {"double_value", "bool_value", "bytes_value", "array_value", "kvlist_value"}
    assert read <= snake and read <= set(otel.SNAKE_CASE)


def decoded_records(path: Path) -> list[tuple[Any, Any]]:
    """Each evaluation event as (protobuf's LogRecord, OpenTelemetry's OTLP JSON LogRecord)."""
    out = []
    for line in path.read_text().splitlines():
        strict = json_format.Parse(line, ExportLogsServiceRequest(), ignore_unknown_fields=False)
        otlp = otlp_json_logs.ExportLogsServiceRequest.from_json(line)
        pairs = zip(
            [r for rl in strict.resource_logs for sl in rl.scope_logs for r in sl.log_records],
            [r for rl in otlp.resource_logs for sl in rl.scope_logs for r in sl.log_records],
            strict=True,
        )
        out.extend(pairs)
    return out


def test_evaluation_events_round_trip_through_opentelemetry_decoders(
    traced: dict[str, Any], judge: Judge, tmp_path: Path
) -> None:
    """real spans → read → score against ragframe.testing → `export --to otel` → every line
    parses with protobuf's strict parser into OpenTelemetry's ExportLogsServiceRequest, and
    OpenTelemetry's OTLP JSON decoder gives the rows' trace and span ids (hex, as OTLP JSON
    writes them) and scores, under the GenAI evaluation convention's names."""
    rows = read_traces(traced["files"]["message_to_json"], on_skip="raise")
    scored = evaluate(rows, ["faithfulness"], judge=judge, thresholds={"faithfulness": 0.5})
    assert scored["faithfulness"].null_count() == 0
    scored.write_parquet(tmp_path / "scored.parquet")
    out = tmp_path / "evals.otlp.jsonl"
    result = export_scores(tmp_path / "scored.parquet", "otel", out)
    assert result.records == scored.height
    records = decoded_records(out)
    assert len(records) == scored.height
    got = []
    for strict, otlp in records:
        attrs = {kv.key: kv.value for kv in strict.attributes}
        assert strict.event_name == otlp.event_name == "gen_ai.evaluation.result"
        assert set(attrs) <= {
            G.GEN_AI_EVALUATION_NAME,
            G.GEN_AI_EVALUATION_SCORE_VALUE,
            G.GEN_AI_EVALUATION_SCORE_LABEL,
            G.GEN_AI_EVALUATION_EXPLANATION,
        }
        assert attrs[G.GEN_AI_EVALUATION_SCORE_VALUE].WhichOneof("value") == "double_value"
        got.append(
            (
                otlp.trace_id.hex(),
                otlp.span_id.hex(),
                attrs[G.GEN_AI_EVALUATION_NAME].string_value,
                attrs[G.GEN_AI_EVALUATION_SCORE_VALUE].double_value,
                attrs[G.GEN_AI_EVALUATION_SCORE_LABEL].string_value,
            )
        )
    expected = [
        (
            r["trace_id"],
            r["span_id"],
            "faithfulness",
            r["faithfulness"],
            "pass" if r["faithfulness_pass"] else "fail",
        )
        for r in scored.iter_rows(named=True)
    ]
    assert got == expected
    assert [g[1] for g in got] == [s["span_id"] for s in traced["seen"]]
