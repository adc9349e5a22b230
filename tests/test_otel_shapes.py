"""The OTLP reader on values of odd shapes, as OpenTelemetry's own SDK writes them: a GenAI
JSON attribute cut by the SDK's attribute length limit, documents and messages of shapes the
GenAI conventions do not have, a line of another signal in the same file, and indented
documents and arrays read in time and memory linear in their size."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import polars as pl
import pytest
from google.protobuf import json_format
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import MessageAttributes, MessageContentAttributes
from openinference.semconv.trace import SpanAttributes as S
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G

from ragframe.inputs.traces import openinference, otel, read_traces_report
from ragframe.testing.server import FakeServer

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


def test_the_cut_span_is_listed_with_the_readers_reason(tmp_path: Path) -> None:
    turns = [good_turn(0), {**good_turn(1), "documents": documents("word " * 60)}]
    path = tmp_path / "spans.jsonl"
    ids = trace_turns(path, turns, SpanLimits(max_span_attribute_length=LIMIT))
    read = read_traces_report(path, "otel")
    listed = read.skipped.filter(pl.col("span_id") == ids[1][2])
    assert "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in listed["reason"][0]
    # the trace's row says a span of it was skipped (its retriever: "no retriever span" alone
    # would mislead); the other trace's row does not
    notes = dict(zip(read.rows["trace_id"], read.rows["note"], strict=True))
    assert "1 span(s) of this trace skipped" in notes[listed["trace_id"][0]]
    assert all("skipped" not in (n or "") for t, n in notes.items() if t != listed["trace_id"][0])


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
        ("output", json.dumps({"role": "assistant", "parts": ["a", "b."]}), ("q?", "a\nb.", ["c"])),
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


def text_parts(*texts: str) -> list[dict[str, Any]]:
    """A message's content as the OpenAI API also takes it: a list of text parts."""
    return [{"type": "text", "text": t} for t in texts]


#: An image part (no text): the instrumentor writes its url, not a `message_content.text`.
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "search", "arguments": '{"q": "Seine"}'},
}
#: One `openai` call each: its messages, and its question (the last user message's text
#: parts joined by a newline; None: that message has no text).
PART_CALLS: list[tuple[list[dict[str, Any]], str | None]] = [
    (
        [
            {"role": "system", "content": text_parts("Answer from the context.")},
            {"role": "user", "content": text_parts("What is the capital of France?", "Be brief.")},
        ],
        "What is the capital of France?\nBe brief.",
    ),
    # a plain earlier question; the last one's parts around an image
    (
        [
            {"role": "user", "content": "an earlier question"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": [*text_parts("Which river?"), IMAGE, *text_parts("Paris")]},
        ],
        "Which river?\nParis",
    ),
    # after a tool call: an assistant message with tool calls only, the tool's parts
    (
        [
            {"role": "user", "content": text_parts("Where does the Seine flow?")},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": text_parts("found")},
        ],
        "Where does the Seine flow?",
    ),
    # twelve parts: in part order (10 after 9), not in the order of their keys' text
    (
        [{"role": "user", "content": text_parts(*(f"part {j}" for j in range(12)))}],
        "\n".join(f"part {j}" for j in range(12)),
    ),
    # the last user message is an image alone: no question from it, not the earlier one's
    (
        [
            {"role": "user", "content": text_parts("an earlier question")},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": [IMAGE]},
        ],
        None,
    ),
]


def answer_parts(body: dict[str, Any]) -> str:
    """The fake LLM: answers with the last user message's text parts."""
    content = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    texts = [content] if isinstance(content, str) else [p.get("text", "?") for p in content]
    return "Answer: " + " / ".join(texts)


@pytest.fixture(scope="module")
def part_calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """PART_CALLS made with the real `openai` client against the fake server, traced by
    OpenInference's OpenAI instrumentor, written by OpenTelemetry's JSON file exporter; each
    call's span is its own trace: (trace id, span id, question, answer) per call."""
    path = tmp_path_factory.mktemp("parts") / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with FakeServer(handler=answer_parts) as fake:
            client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test-not-a-real-key")
            answers = [
                client.chat.completions.create(model="fake-rag-model", messages=m)  # type: ignore[arg-type]
                .choices[0]
                .message.content
                for m, _ in PART_CALLS
            ]
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    spans = memory.get_finished_spans()
    assert len(spans) == len(PART_CALLS)  # one LLM span per call, in call order
    calls = [
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}", question, answer)
        for s, (_, question), answer in zip(spans, PART_CALLS, answers, strict=True)
    ]
    return {"path": path, "calls": calls}


def otlp_attribute_keys(path: Path) -> list[set[str]]:
    """The attribute keys of each span the file holds, in file order."""
    return [
        {a["key"] for a in span["attributes"]}
        for line in path.read_text().splitlines()
        for r in json.loads(line)["resourceSpans"]
        for s in r["scopeSpans"]
        for span in s["spans"]
    ]


def test_content_parts_are_what_the_instrumentor_wrote(part_calls: dict[str, Any]) -> None:
    """The shape under test is the real one: the first call's messages as `message.contents.M.
    message_content.text` and none with `message.content`; every message field and content
    part field the instrumentor wrote is one the reader knows (`openinference.KNOWN_FIELDS`,
    whose OpenInference names this reader shares; a part's object field such as
    `message_content.image` by its name: `message_content.image.image.url`)."""
    spans = otlp_attribute_keys(part_calls["path"])
    first = spans[0]
    user = f"{S.LLM_INPUT_MESSAGES}.1.{MessageAttributes.MESSAGE_CONTENTS}.1."
    assert user + MessageContentAttributes.MESSAGE_CONTENT_TEXT in first
    content = "." + MessageAttributes.MESSAGE_CONTENT
    assert not any(k.startswith(S.LLM_INPUT_MESSAGES) and k.endswith(content) for k in first)
    known = openinference.KNOWN_FIELDS
    item = re.compile(
        rf"^(?:{re.escape(S.LLM_INPUT_MESSAGES)}|{re.escape(S.LLM_OUTPUT_MESSAGES)})\.\d+\.(.+)$"
    )
    fields = {m.group(1) for k in set().union(*spans) if (m := item.match(k))}
    lists = [re.split(r"\.\d+\.", f, maxsplit=1) for f in fields]
    names = {f[0] for f in lists}
    assert names <= known["message"], names - known["message"]
    part_fields = {f[1] for f in lists if f[0] == MessageAttributes.MESSAGE_CONTENTS}
    assert MessageContentAttributes.MESSAGE_CONTENT_TEXT in part_fields
    unknown = {
        f
        for f in part_fields
        if not any(f == k or f.startswith(k + ".") for k in known["content_part"])
    }
    assert not unknown, unknown


def test_content_parts_give_the_question(part_calls: dict[str, Any]) -> None:
    """An LLM span alone, its user message's content a list of parts: the row's question is
    its text parts joined by a newline, in part order (not the request's JSON), as the
    OpenInference reader reads them."""
    read = read_traces_report(part_calls["path"], "otel")
    assert read.skipped.height == 0
    rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
    for trace_id, span_id, question, answer in part_calls["calls"]:
        row = rows[trace_id]
        assert (row["span_id"], row["answer"]) == (span_id, answer)
        if question is not None:
            assert row["question"] == question


@pytest.mark.parametrize("tolerant", [True, False])
def test_the_last_user_message_gives_the_text_or_null(
    part_calls: dict[str, Any], tolerant: bool
) -> None:
    """The span's user message is the last message with the user role: its parts' text, or
    null when it has none (an image alone), never an earlier user message's; by both
    decoders."""
    lines = pl.scan_lines(part_calls["path"], name="line", row_index_name="n")
    spans = otel.scan_otlp(lines, tolerant=tolerant).collect()
    found = dict(spans.select("span_id", "user_message").iter_rows())
    assert [found[span_id] for _, span_id, _, _ in part_calls["calls"]] == [
        question for _, _, question, _ in part_calls["calls"]
    ]
