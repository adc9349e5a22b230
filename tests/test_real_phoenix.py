"""Phoenix as users run it today: a real RAG pipeline (a retriever, an answer from the `openai`
client against ragframe's fake server, traced by OpenInference's OpenAI instrumentor and a
tracer) exported over OTLP HTTP into Phoenix's own server (fixture `phoenix`), pulled back with
Phoenix's current client, read by ragframe in every shape a user saves it in, scored, and the
scores logged back as span annotations with the same client and read back from the server.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pandas as pd
import polars as pl
import pytest
from openinference.instrumentation import get_attributes_from_context, using_attributes
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_traces_real import QUESTIONS, answer_from_context, retrieve

from ragframe import Judge, evaluate
from ragframe.export import export_scores
from ragframe.export import phoenix as phoenix_export
from ragframe.inputs.traces import openinference, read_traces_report
from ragframe.testing.server import FakeServer

PROJECT = "ragframe-test-real-phoenix"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
#: Spans per question: the CHAIN, the RETRIEVER and the instrumentor's LLM span.
SPANS_PER_QUESTION = 3


def run_pipeline(provider: TracerProvider, base_url: str) -> list[dict[str, Any]]:
    """The RAG pipeline over QUESTIONS, each turn under OpenInference's `using_attributes`
    (session, user, metadata, tags) as a team sets them; what it saw, per question. The
    retriever's `input.value` is a list of strings (valid OTel), as a multi-query retriever
    records it."""
    tracer = provider.get_tracer("rag-pipeline")
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key")
    seen = []
    for n, question in enumerate(QUESTIONS):
        metadata = {"turn": n, "channel": "web"}
        tags = ["rag", f"turn-{n}"]
        with (
            using_attributes(
                session_id=f"session-{n % 2}", user_id=f"user-{n}", metadata=metadata, tags=tags
            ),
            tracer.start_as_current_span(
                "rag", attributes={KIND: OpenInferenceSpanKindValues.CHAIN.value}
            ) as chain,
        ):
            chain.set_attributes(dict(get_attributes_from_context()))
            chain.set_attribute(SpanAttributes.INPUT_VALUE, question)
            with tracer.start_as_current_span(
                "retrieve", attributes={KIND: OpenInferenceSpanKindValues.RETRIEVER.value}
            ) as retriever:
                retriever.set_attribute(SpanAttributes.INPUT_VALUE, [question, question.lower()])
                docs = retrieve(question)
                for i, (doc_id, text, score) in enumerate(docs):
                    prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, text)
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, score)
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
                    "session_id": f"session-{n % 2}",
                    "user_id": f"user-{n}",
                    "metadata": metadata,
                    "tags": tags,
                    "context_scores": [s for _, _, s in docs],
                    "prompt_tokens": reply.usage.prompt_tokens,
                }
            )
    return seen


def wait_for_spans(fetch: Callable[[], Any], count: int, seconds: float = 60) -> Any:
    """Poll Phoenix until it returns `count` spans (OTLP ingestion is asynchronous)."""
    deadline = time.monotonic() + seconds
    while True:
        got = fetch()
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


@pytest.fixture(scope="module")
def traced(phoenix: Any) -> dict[str, Any]:
    """The pipeline traced into Phoenix over OTLP HTTP (project PROJECT), and what Phoenix's
    client gives back: the span frame and the REST span list."""
    resource = Resource({"openinference.project.name": PROJECT})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with FakeServer(handler=answer_from_context) as fake:
            seen = run_pipeline(provider, fake.base_url)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    client = phoenix.client()
    count = SPANS_PER_QUESTION * len(QUESTIONS)
    frame = wait_for_spans(
        lambda: client.spans.get_spans_dataframe(project_identifier=PROJECT), count
    )
    spans = wait_for_spans(lambda: client.spans.get_spans(project_identifier=PROJECT), count)
    assert len(frame) == len(spans) == count
    return {"seen": seen, "frame": frame, "spans": spans, "client": client}


def assert_rows_are_what_the_pipeline_saw(rows: pl.DataFrame, seen: list[dict[str, Any]]) -> None:
    """One row per turn (Phoenix lists the newest first: rows keep the source order, so they
    are matched by trace id), each field as the pipeline saw it."""
    assert rows.height == len(seen)
    by_trace = {row["trace_id"]: row for row in rows.iter_rows(named=True)}
    assert set(by_trace) == {s["trace_id"] for s in seen}
    for expected in seen:
        row = by_trace[expected["trace_id"]]
        for key in ("question", "answer", "contexts", "context_document_ids", "span_id"):
            assert row[key] == expected[key], key
        for key in ("session_id", "user_id", "tags"):
            assert row[key] == expected[key], key
        assert json.loads(row["metadata"]) == expected["metadata"]
        assert row["context_scores"] == pytest.approx(expected["context_scores"])
        assert row["prompt_tokens"] == expected["prompt_tokens"]
        assert row["model_name"] == "fake-rag-model"


def test_the_span_frame_as_returned(traced: dict[str, Any]) -> None:
    """`get_spans_dataframe()` as it comes: the span id is the index and a column too."""
    frame = traced["frame"]
    assert frame.index.name == "context.span_id" and "context.span_id" in frame.columns
    read = read_traces_report(frame)
    assert read.skipped.height == 0
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])


@pytest.mark.parametrize("save", ["parquet", "json"])
def test_the_span_frame_saved_by_pandas(traced: dict[str, Any], tmp_path: Path, save: str) -> None:
    """The frame saved with pandas' defaults: `to_parquet(p)` (the index kept as a column of
    its own) and `to_json(p)` (orient "columns": one object per column keyed by span id, times
    as epoch milliseconds)."""
    path = tmp_path / f"spans.{save}"
    with pytest.warns() if save == "json" else _nothing():  # pandas' future-format notice
        getattr(traced["frame"], f"to_{save}")(path)
    read = read_traces_report(path)  # format detected
    assert read.skipped.height == 0
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_the_rest_span_list_saved(traced: dict[str, Any], tmp_path: Path, layout: str) -> None:
    """`get_spans()` (Phoenix's REST span list: the kind in `span_kind`, flat attributes) saved
    as one JSON array (`json.dump`) and as JSON Lines."""
    path = tmp_path / f"spans.{layout}"
    with path.open("w", encoding="utf-8") as out:
        if layout == "json":
            json.dump(traced["spans"], out)
        else:
            out.writelines(json.dumps(span) + "\n" for span in traced["spans"])
    read = read_traces_report(path)
    assert read.skipped.height == 0
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])


def test_the_rest_span_list_with_a_bad_line(traced: dict[str, Any], tmp_path: Path) -> None:
    """A truncated line among the REST spans (whose retriever `input.value` is a list): that
    line is listed as skipped with its number, the rest read, no traceback."""
    lines = [json.dumps(span) for span in traced["spans"]]
    lines.insert(2, lines[0][:50])
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = read_traces_report(path, format="openinference")
    assert read.skipped["line"].to_list() == [3]
    assert "not JSON" in read.skipped["reason"][0]
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])


def test_the_fields_read_are_the_fields_phoenix_writes(traced: dict[str, Any]) -> None:
    """The canary: every key of Phoenix's REST spans and every column of its span frame that
    the reader reads from is one it knows (read or left on purpose). A new Phoenix field fails
    this test, to be mapped or listed in `openinference.KNOWN_FIELDS`."""
    known = openinference.KNOWN_FIELDS
    prefix = openinference.FRAME_ATTR
    spans, frame = traced["spans"], traced["frame"]
    assert {k for s in spans for k in s} <= known["rest_span"]
    assert {k for s in spans for k in s["context"]} <= known["context"]
    columns = {c for c in frame.columns if not c.startswith(prefix)}
    assert columns <= known["frame_column"], columns - known["frame_column"]
    attributes = {c[len(prefix) :] for c in frame.columns if c.startswith(prefix)}
    flat = {openinference.attribute_family(k) for s in spans for k in s["attributes"]}
    assert attributes | flat <= known["attribute"], (attributes | flat) - known["attribute"]
    assert_item_fields_known({k for s in spans for k in s["attributes"]})
    for family, place in (
        (SpanAttributes.RETRIEVAL_DOCUMENTS, "document"),
        (SpanAttributes.LLM_INPUT_MESSAGES, "message"),
        (SpanAttributes.LLM_OUTPUT_MESSAGES, "message"),
    ):
        column = frame.get(prefix + family)
        items = [item for cell in (column if column is not None else []) for item in cell or []]
        fields = {k for item in items for k in item}
        assert fields <= known[place], fields - known[place]


def assert_item_fields_known(keys: set[str]) -> None:
    """The fields of flat list attributes (`retrieval.documents.0.document.content`,
    `llm.input_messages.1.message.role`) are fields the reader knows in that place."""
    known = openinference.KNOWN_FIELDS
    for family, place in (
        (SpanAttributes.RETRIEVAL_DOCUMENTS, "document"),
        (SpanAttributes.LLM_INPUT_MESSAGES, "message"),
        (SpanAttributes.LLM_OUTPUT_MESSAGES, "message"),
    ):
        fields = {k[len(family) + 1 :].split(".", 1)[1] for k in keys if k.startswith(family + ".")}
        # a list inside an item (`message.contents.0.message_content.text`) by its own name,
        # and the fields of content parts, which the reader reads
        lists = {f: re.split(r"\.\d+\.", f, maxsplit=1) for f in fields}
        names = {parts[0] for parts in lists.values()}
        assert names <= known[place], names - known[place]
        part_fields = {
            parts[1] for parts in lists.values() if parts[0] == MessageAttributes.MESSAGE_CONTENTS
        }
        # a part's own nested fields (an image's `message_content.image.image.url`) count
        # as the known field they sit under
        unknown = {
            f
            for f in part_fields
            if not any(f == k or f.startswith(k + ".") for k in known["content_part"])
        }
        assert not unknown, unknown


def test_scores_logged_back_as_span_annotations(
    traced: dict[str, Any], judge: Judge, tmp_path: Path
) -> None:
    """read → score (fake judge) → `ragframe export --to phoenix` → the current client's
    `log_span_annotations_dataframe` (through `annotations_frame`) → read back with the client's
    own `get_span_annotations_dataframe` / `get_span_annotations`: the span ids, names, scores
    and labels match, and an empty label or explanation is stored as null, never "nan"."""
    rows = read_traces_report(traced["frame"]).rows
    scored = evaluate(rows, ["faithfulness"], judge=judge, thresholds={"faithfulness": 0.5})
    scored.write_parquet(tmp_path / "scored.parquet")
    evals_path = tmp_path / "evals.parquet"
    export_scores(tmp_path / "scored.parquet", "phoenix", evals_path)
    evals = pl.read_parquet(evals_path)
    # a second metric with no pass column and no reasons: its label and explanation are null
    bare = evals.with_columns(
        pl.lit("bare").alias("annotation_name"),
        pl.lit(None, pl.String).alias("label"),
        pl.lit(None, pl.String).alias("explanation"),
    )
    pl.concat([evals, bare]).write_parquet(evals_path)
    client = traced["client"]
    frame = phoenix_export.annotations_frame(evals_path)
    client.spans.log_span_annotations_dataframe(dataframe=frame, sync=True)

    span_ids = [s["span_id"] for s in traced["seen"]]
    back = client.spans.get_span_annotations_dataframe(
        span_ids=span_ids, project_identifier=PROJECT
    )
    listed = client.spans.get_span_annotations(span_ids=span_ids, project_identifier=PROJECT)
    assert len(back) == len(listed) == 2 * len(span_ids)
    want = {
        (r["span_id"], r["annotation_name"]): (r["score"], r["label"], r["explanation"])
        for r in pl.read_parquet(evals_path).iter_rows(named=True)
    }
    got_frame = {
        (span_id, r["annotation_name"]): (
            r["result.score"],
            r["result.label"],
            r["result.explanation"],
        )
        for span_id, r in zip(back.index, back.to_dict("records"), strict=True)
    }
    got_list = {
        (a["span_id"], a["name"]): (
            a["result"]["score"],
            a["result"]["label"],
            a["result"]["explanation"],
        )
        for a in listed
    }
    assert got_list == want
    assert set(got_frame) == set(want)
    for key, (score, label, explanation) in want.items():
        f_score, f_label, f_explanation = got_frame[key]
        assert f_score == pytest.approx(score)
        assert (None if pd.isna(f_label) else f_label) == label
        assert (None if pd.isna(f_explanation) else f_explanation) == explanation
    assert scored["faithfulness"].to_list() == [
        want[(s, "faithfulness")][0] for s in scored["span_id"].to_list()
    ]


def test_pandas_reads_the_export_with_nan_for_null_text(tmp_path: Path) -> None:
    """Why the helper exists: pandas 3 reads a Parquet text column as `str` whose missing
    value is NaN, and Phoenix's client turns a truthy NaN into the label "nan";
    `annotations_frame` hands it None instead (under pandas 2 as well)."""
    evals = pl.DataFrame(
        {
            "span_id": ["a", "b"],
            "annotation_name": ["m", "m"],
            "annotator_kind": ["LLM", "LLM"],
            "score": [1.0, 0.0],
            "label": ["pass", None],
            "explanation": [None, "why"],
            "trace_id": ["t", "t"],
        }
    )
    path = tmp_path / "evals.parquet"
    evals.write_parquet(path)
    frame = phoenix_export.annotations_frame(path)
    records = frame.to_dict("records")
    assert [r["label"] for r in records] == ["pass", None]
    assert [r["explanation"] for r in records] == [None, "why"]
    assert list(frame["span_id"]) == ["a", "b"] and list(frame["score"]) == [1.0, 0.0]
    assert_frame_equal_pl(phoenix_export.annotations_frame(evals), frame)


def assert_frame_equal_pl(left: pd.DataFrame, right: pd.DataFrame) -> None:
    assert left.to_dict("records") == right.to_dict("records")


def mixed_shapes(frame: pd.DataFrame) -> pd.DataFrame:
    """The span frame with attributes in both shapes OTel allows: the retrievers' `input.value`
    a list of strings beside the other spans' strings, and the LLM spans' `metadata` JSON text
    beside the CHAIN spans' objects (Arrow takes one type per column and refuses such a frame)."""
    changed = frame.copy()
    retrievers = changed["span_kind"] == "RETRIEVER"
    values = changed["attributes.input.value"].astype(object)
    values[retrievers] = pd.Series(
        [["capital", "k=2"]] * int(retrievers.sum()), index=values[retrievers].index, dtype=object
    )
    changed["attributes.input.value"] = values
    llm = changed["span_kind"] == "LLM"
    metadata = changed["attributes.metadata"].astype(object)
    metadata[llm] = [json.dumps(m) for m in metadata[llm]]
    changed["attributes.metadata"] = metadata
    return changed


def test_a_frame_mixing_lists_and_strings_in_a_column(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    """`openinference.from_pandas` takes a span frame whose object column mixes lists with
    strings (the lists kept as JSON text), and pandas' `to_json()` of it reads the same."""
    frame = mixed_shapes(traced["frame"])
    with pytest.raises((TypeError, ValueError)):
        pl.from_pandas(frame)  # what a plain conversion does with it
    spans = openinference.from_pandas(frame)
    retriever_inputs = spans.filter(pl.col("span_kind") == "RETRIEVER")["attributes.input.value"]
    assert retriever_inputs.to_list() == ['["capital", "k=2"]'] * len(QUESTIONS)
    chains = spans.filter(pl.col("span_kind") == "CHAIN")["attributes.metadata"]
    assert all(isinstance(json.loads(m), dict) for m in chains)
    read = read_traces_report(spans)
    assert read.skipped.height == 0
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])
    path = tmp_path / "spans.json"
    with pytest.warns():  # pandas' future-format notice
        frame.to_json(path)
    read = read_traces_report(path)
    assert read.skipped.height == 0
    assert_rows_are_what_the_pipeline_saw(read.rows, traced["seen"])


PARTS_PROJECT = "ragframe-test-real-phoenix-parts"


def text_parts(*texts: str) -> list[dict[str, str]]:
    """A message's content as the OpenAI API also takes it: a list of text parts."""
    return [{"type": "text", "text": t} for t in texts]


def answer_the_last_user_parts(body: dict[str, Any]) -> str:
    """The fake LLM for content parts: answers with the last user message's text parts."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    return "Answer: " + " / ".join(p["text"] for p in user)


def run_parts_pipeline(client: openai.OpenAI) -> list[dict[str, Any]]:
    """One `openai` call per question and no span of our own (the instrumentor's LLM span is
    the trace), every message's content a list of text parts, so that no message has a plain
    `message.content` (the instrumentor writes `message.contents`); every other call goes on
    after a tool call (an assistant message with only `tool_calls`, then the tool's parts).
    What each call saw: its question is the last user message's text parts, joined."""
    seen = []
    for n, question in enumerate(QUESTIONS):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": text_parts("Answer from the context.")},
            {"role": "user", "content": text_parts(question, f"Be brief ({n}).")},
        ]
        if n % 2:
            arguments = json.dumps({"q": question})
            call = {"id": f"call_{n}", "type": "function"}
            call["function"] = {"name": "search", "arguments": arguments}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{n}", "content": text_parts("found")}
            )
        reply = client.chat.completions.create(model="fake-rag-model", messages=messages)
        seen.append(
            {"question": f"{question}\nBe brief ({n}).", "answer": reply.choices[0].message.content}
        )
    return seen


@pytest.fixture(scope="module")
def parts(phoenix: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`run_parts_pipeline` traced by OpenInference's OpenAI instrumentor into Phoenix (project
    PARTS_PROJECT) and, the same spans, into JSON Lines by the SDK's console exporter; what
    Phoenix's client gives back (the span frame, the REST span list)."""
    path = tmp_path_factory.mktemp("parts") / "spans.jsonl"
    resource = Resource({"openinference.project.name": PARTS_PROJECT})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces"))
    )
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor = OpenAIInstrumentor()
    with path.open("w", encoding="utf-8") as out:
        provider.add_span_processor(
            SimpleSpanProcessor(
                ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
            )
        )
        instrumentor.instrument(tracer_provider=provider)
        try:
            with FakeServer(handler=answer_the_last_user_parts) as fake:
                client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test-not-a-real-key")
                seen = run_parts_pipeline(client)
        finally:
            instrumentor.uninstrument()
            provider.shutdown()
    spans = memory.get_finished_spans()
    assert len(spans) == len(seen)  # one LLM span per call, in call order
    for span, expected in zip(spans, seen, strict=True):
        expected["trace_id"] = f"{span.context.trace_id:032x}"
        expected["span_id"] = f"{span.context.span_id:016x}"
    phoenix_client = phoenix.client()
    frame = wait_for_spans(
        lambda: phoenix_client.spans.get_spans_dataframe(project_identifier=PARTS_PROJECT),
        len(seen),
    )
    rest = wait_for_spans(
        lambda: phoenix_client.spans.get_spans(project_identifier=PARTS_PROJECT), len(seen)
    )
    return {"seen": seen, "lines": path, "frame": frame, "rest": rest, "tmp": path.parent}


def test_content_parts_are_what_the_instrumentor_wrote(parts: dict[str, Any]) -> None:
    """The shape under test is the real one: the user messages as `message.contents` text
    parts and no message of the frame with a plain `message.content`."""
    messages = [m for cell in parts["frame"]["attributes.llm.input_messages"] for m in cell]
    assert messages and not any("message.content" in m for m in messages)
    users = [m for m in messages if m["message.role"] == "user"]
    assert all(p["message_content.type"] == "text" for m in users for p in m["message.contents"])
    assert any("message.tool_calls" in m for m in messages)


@pytest.mark.parametrize("shape", ["sdk_lines", "rest_list", "frame", "frame_parquet"])
def test_content_parts_give_the_question(parts: dict[str, Any], shape: str) -> None:
    """An LLM span alone, its user message's content a list of text parts: the row's
    question is those parts joined by a newline (not the request's JSON, not an error), from
    the SDK's span lines, Phoenix's REST span list, and its span frame as returned and as
    saved to Parquet."""
    source: Any
    if shape == "sdk_lines":
        source = parts["lines"]
    elif shape == "rest_list":
        source = parts["tmp"] / "rest.jsonl"
        source.write_text("".join(json.dumps(span) + "\n" for span in parts["rest"]))
    elif shape == "frame":
        source = parts["frame"]
    else:
        source = parts["tmp"] / "frame.parquet"
        parts["frame"].to_parquet(source)
    read = read_traces_report(source)
    assert read.skipped.height == 0
    rows = {row["trace_id"]: row for row in read.rows.iter_rows(named=True)}
    assert set(rows) == {s["trace_id"] for s in parts["seen"]}
    for expected in parts["seen"]:
        row = rows[expected["trace_id"]]
        for key in ("question", "answer", "span_id"):
            assert row[key] == expected[key], key


def test_the_fields_of_content_parts_are_known(parts: dict[str, Any]) -> None:
    """The canary over the content-part spans: the message fields (`message.contents`,
    `message.tool_calls`) and the content parts' fields in Phoenix's frame, its REST list and
    the SDK's lines are fields the reader knows."""
    known = openinference.KNOWN_FIELDS
    lines = [json.loads(line) for line in parts["lines"].read_text().splitlines()]
    for spans in (parts["rest"], lines):
        assert_item_fields_known({k for s in spans for k in s["attributes"]})
    column = parts["frame"][openinference.FRAME_ATTR + SpanAttributes.LLM_INPUT_MESSAGES]
    messages = [m for cell in column for m in cell]
    assert {k for m in messages for k in m} <= known["message"]
    content_parts = [p for m in messages for p in m.get(MessageAttributes.MESSAGE_CONTENTS, [])]
    assert content_parts and {k for p in content_parts for k in p} <= known["content_part"]
