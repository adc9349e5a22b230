"""Real traces from real instrumentation: a small RAG pipeline (a retriever over a handful of
documents, then an answer from the `openai` client against ragframe's fake server), traced by
OpenInference's OpenAI instrumentor and a tracer, exported through `opentelemetry-sdk`'s own
exporters; the readers must give back exactly what the pipeline saw."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import polars as pl
import pytest
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from polars.testing import assert_frame_equal

from ragframe import Judge, evaluate
from ragframe.export import export_scores
from ragframe.inputs.traces import SKIP_SCHEMA, read_traces, read_traces_report, write_traces
from ragframe.testing.server import FakeServer

os.environ.setdefault("LANGSMITH_TRACING", "false")

DOCUMENTS = {
    "doc-paris": "Paris is the capital of France and sits on the Seine.",
    "doc-berlin": "Berlin is the capital of Germany.",
    "doc-rome": "Rome is the capital of Italy, founded on seven hills.",
    "doc-seine": "The Seine flows through Paris into the English Channel.",
    "doc-alps": "The Alps stretch across France, Italy, Switzerland and Austria.",
}
QUESTIONS = [
    "What is the capital of France?",
    "Which river flows through Paris?",
    "What is the capital of Italy?",
]


def retrieve(question: str, k: int = 2) -> list[tuple[str, str, float]]:
    """Top-k documents by word overlap (id, text, score), best first."""
    words = set(question.lower().strip("?").split())
    scored = [
        (doc_id, text, len(words & set(text.lower().strip(".").split())) / len(words))
        for doc_id, text in DOCUMENTS.items()
    ]
    return sorted(scored, key=lambda d: -d[2])[:k]


def answer_from_context(body: dict[str, Any]) -> str:
    """The fake LLM: answers with the first context line of the prompt."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return "Answer: " + user.split("\n")[1]


def run_pipeline(tracer_provider: TracerProvider, base_url: str) -> list[dict[str, Any]]:
    """Run the RAG pipeline over QUESTIONS; return what it saw, per question."""
    tracer = tracer_provider.get_tracer("rag-pipeline")
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key")
    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    seen = []
    for question in QUESTIONS:
        with tracer.start_as_current_span(
            "rag", attributes={kind: OpenInferenceSpanKindValues.CHAIN.value}
        ) as chain:
            chain.set_attribute(SpanAttributes.INPUT_VALUE, question)
            with tracer.start_as_current_span(
                "retrieve", attributes={kind: OpenInferenceSpanKindValues.RETRIEVER.value}
            ) as retriever:
                retriever.set_attribute(SpanAttributes.INPUT_VALUE, question)
                docs = retrieve(question)
                for i, (doc_id, text, score) in enumerate(docs):
                    prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, text)
                    retriever.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, score)
            prompt = "Context:\n" + "\n".join(t for _, t, _ in docs) + f"\nQuestion: {question}"
            reply = client.chat.completions.create(
                model="fake-rag-model",
                messages=[
                    {"role": "system", "content": "Answer from the context."},
                    {"role": "user", "content": prompt},
                ],
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
                    "context_scores": [s for _, _, s in docs],
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "prompt": prompt,
                }
            )
    return seen


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The pipeline run once under instrumentation: the spans in memory, the same spans in a
    JSON Lines file written by the SDK's ConsoleSpanExporter, in OTLP JSON files written by
    OpenTelemetry's file exporter (a span a line; batches of 4, split mid-trace; every span
    on one line), and what the pipeline saw."""
    folder = tmp_path_factory.mktemp("traces")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    otlp = {
        "each": folder / "each.otlp.jsonl",
        "batched": folder / "batched.otlp.jsonl",
        "one_line": folder / "one_line.otlp.jsonl",
    }
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(otlp["each"])))
    for name, size in (("batched", 4), ("one_line", 512)):
        exporter = FileSpanExporter(otlp[name])
        # exported on flush only (no timer), so the lines hold `size` spans whatever the load
        batches = BatchSpanProcessor(
            exporter, max_export_batch_size=size, schedule_delay_millis=600_000
        )
        provider.add_span_processor(batches)
    path = folder / "spans.jsonl"
    with path.open("w", encoding="utf-8") as out:
        provider.add_span_processor(
            SimpleSpanProcessor(
                ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
            )
        )
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            with FakeServer(handler=answer_from_context) as fake:
                seen = run_pipeline(provider, fake.base_url)
        finally:
            instrumentor.uninstrument()
        provider.shutdown()  # flushes every processor and closes the exporters' files
    spans = list(memory.get_finished_spans())
    yield {"spans": spans, "path": path, "seen": seen, "otlp": otlp}


def test_pipeline_really_traced_the_openai_call(traced: dict[str, Any]) -> None:
    kinds = [s.attributes.get(SpanAttributes.OPENINFERENCE_SPAN_KIND) for s in traced["spans"]]
    assert kinds.count("LLM") == len(QUESTIONS)  # spans from the instrumentor, not from us
    assert kinds.count("RETRIEVER") == kinds.count("CHAIN") == len(QUESTIONS)


def test_openinference_jsonl_rows_equal_what_the_pipeline_saw(traced: dict[str, Any]) -> None:
    read = read_traces_report(traced["path"])  # format detected
    assert read.skipped.height == 0
    rows = read.rows
    assert rows.height == len(QUESTIONS)
    for row, seen in zip(rows.iter_rows(named=True), traced["seen"], strict=True):
        for key in ("question", "answer", "contexts", "context_document_ids", "trace_id"):
            assert row[key] == seen[key], key
        assert row["context_scores"] == pytest.approx(seen["context_scores"])
        assert row["span_id"] == seen["span_id"]  # the CHAIN span the answer came from
        assert row["model_name"] == "fake-rag-model"
        assert row["prompt_tokens"] is not None and row["total_tokens"] >= row["prompt_tokens"]
        assert row["latency_ms"] > 0
        assert row["retrievals"] == 1 and row.get("note") is None


def test_phoenix_span_frame_from_the_same_spans(traced: dict[str, Any], tmp_path: Path) -> None:
    """The SDK spans flattened as Phoenix's get_spans_dataframe() lays them out."""
    frame = phoenix_frame(traced["spans"])
    frame.write_parquet(tmp_path / "spans.parquet")
    rows = read_traces(tmp_path / "spans.parquet", on_skip="raise").collect()
    assert rows["question"].to_list() == [s["question"] for s in traced["seen"]]
    assert rows["contexts"].to_list() == [s["contexts"] for s in traced["seen"]]
    assert rows["span_id"].to_list() == [s["span_id"] for s in traced["seen"]]


def phoenix_frame(spans: list[ReadableSpan]) -> pl.DataFrame:
    """Phoenix's span frame shape: `context.*`, `span_kind`, `attributes.<key>` columns, and
    `attributes.retrieval.documents` / `attributes.llm.*_messages` as lists of objects."""
    records = []
    for span in spans:
        attrs = dict(span.attributes or {})
        record: dict[str, Any] = {
            "name": span.name,
            "span_kind": attrs.get(SpanAttributes.OPENINFERENCE_SPAN_KIND),
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "start_time": span.start_time,
            "end_time": span.end_time,
            "context.span_id": f"{span.context.span_id:016x}",
            "context.trace_id": f"{span.context.trace_id:032x}",
        }
        lists: dict[str, dict[int, dict[str, Any]]] = {}
        for key, value in attrs.items():
            for group in (
                SpanAttributes.RETRIEVAL_DOCUMENTS,
                SpanAttributes.LLM_INPUT_MESSAGES,
                SpanAttributes.LLM_OUTPUT_MESSAGES,
            ):
                if key.startswith(group + "."):
                    index, _, rest = key[len(group) + 1 :].partition(".")
                    lists.setdefault(group, {}).setdefault(int(index), {})[rest] = value
                    break
            else:
                record[f"attributes.{key}"] = value
        for group, items in lists.items():
            record[f"attributes.{group}"] = [items[i] for i in sorted(items)]
        records.append(record)
    frame = pl.DataFrame(records, infer_schema_length=None)
    return frame.with_columns(
        pl.from_epoch(pl.col("start_time"), "ns").dt.replace_time_zone("UTC"),
        pl.from_epoch(pl.col("end_time"), "ns").dt.replace_time_zone("UTC"),
    )


def test_round_trip_read_score_export_ids_match(
    traced: dict[str, Any], judge: Judge, tmp_path: Path
) -> None:
    """read traces → score with ragframe.evaluate (fake judge) → export → the ids are the
    input's: Phoenix span ids, LangSmith run ids and OTel span ids all name the CHAIN spans."""
    rows = read_traces(traced["path"], on_skip="raise")
    scored = evaluate(rows, ["faithfulness"], judge=judge, thresholds={"faithfulness": 0.5})
    scored.write_parquet(tmp_path / "scored.parquet")
    chain_ids = {f"{s.context.span_id:016x}" for s in traced["spans"] if s.parent is None}
    trace_ids = {f"{s.context.trace_id:032x}" for s in traced["spans"]}

    phoenix = export_scores(tmp_path / "scored.parquet", "phoenix", tmp_path / "evals.parquet")
    evals = pl.read_parquet(phoenix.path)
    assert set(evals["span_id"]) == chain_ids and set(evals["trace_id"]) == trace_ids
    assert evals["score"].to_list() == scored["faithfulness"].to_list()
    assert evals["label"].to_list() == [
        "pass" if p else "fail" for p in scored["faithfulness_pass"].to_list()
    ]
    assert all(e for e in evals["explanation"].to_list())  # the verdicts' reasons

    export_scores(tmp_path / "scored.parquet", "langsmith", tmp_path / "feedback.jsonl")
    feedback = pl.read_ndjson(tmp_path / "feedback.jsonl")
    assert set(feedback["run_id"]) == chain_ids and set(feedback["key"]) == {"faithfulness"}

    export_scores(tmp_path / "scored.parquet", "otel", tmp_path / "evals.otlp.json")
    lines = (tmp_path / "evals.otlp.json").read_text().splitlines()
    records = [
        r
        for line in lines
        for rl in json.loads(line)["resourceLogs"]
        for sl in rl["scopeLogs"]
        for r in sl["logRecords"]
    ]
    assert {r["spanId"] for r in records} == chain_ids
    assert {r["eventName"] for r in records} == {"gen_ai.evaluation.result"}


def test_otlp_json_file_rows_equal_what_the_pipeline_saw(traced: dict[str, Any]) -> None:
    """OTLP JSON as OpenTelemetry's file exporter writes it, export requests of 4 spans (so a
    trace's spans are split across lines)."""
    path = traced["otlp"]["batched"]
    lines = path.read_text().splitlines()
    requests = [json.loads(line)["resourceSpans"] for line in lines]
    sizes = [sum(len(ss["spans"]) for rs in r for ss in rs["scopeSpans"]) for r in requests]
    assert len(lines) >= 3 and max(sizes) <= 4 and sum(sizes) == len(traced["spans"])
    read = read_traces_report(path)  # detected as otel
    assert read.skipped.height == 0
    rows = read.rows
    for row, seen in zip(rows.iter_rows(named=True), traced["seen"], strict=True):
        for key in (
            "question",
            "answer",
            "contexts",
            "context_document_ids",
            "trace_id",
            "span_id",
        ):
            assert row[key] == seen[key], key
        assert row["model_name"] == "fake-rag-model" and row["prompt_tokens"] > 0


def test_the_command_line_scores_traces_and_sends_the_scores_back(
    traced: dict[str, Any], server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragframe score spans.jsonl --from openinference` (and `--from auto`) scores one row per
    trace, every option as for any log; `ragframe export` writes evaluations on the same span
    ids the traces carry."""
    from ragframe.cli import main

    out = tmp_path / "scored.parquet"
    base = ["score", str(traced["path"]), "-o", str(out), "--metrics", "faithfulness"]
    base += ["--model", "fake-judge", "--base-url", server.base_url, "--no-cache", "--no-progress"]
    assert main([*base, "--from", "openinference", "--threshold", "faithfulness=0.5"]) == 0
    scored = pl.read_parquet(out)
    seen = traced["seen"]
    assert scored["question"].to_list() == [s["question"] for s in seen]
    assert scored["span_id"].to_list() == [s["span_id"] for s in seen]
    assert scored["faithfulness"].null_count() == 0 and "faithfulness_pass" in scored.columns
    assert main([*base, "--from", "auto", "--overwrite"]) == 0
    assert pl.read_parquet(out)["trace_id"].to_list() == scored["trace_id"].to_list()
    capsys.readouterr()
    evals = tmp_path / "evals.parquet"
    assert main(["export", str(out), "--to", "phoenix", "-o", str(evals)]) == 0
    assert set(pl.read_parquet(evals)["span_id"]) == {s["span_id"] for s in seen}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(traced["path"].read_text().splitlines()[0][:40] + "\n")
    assert main(["score", str(bad), *base[2:], "--from", "openinference", "--overwrite"]) == 2
    assert "skipped" in capsys.readouterr().err


def test_real_spans_read_in_buckets_equal_one_pass(traced: dict[str, Any], tmp_path: Path) -> None:
    """The SDK's JSON Lines and the same spans as OTLP JSON (a span a line, batches of 4, and
    every span on one line, so that every trace starts on the same line), each read in 3
    buckets and written to disk: the rows of the single pass, in its order."""
    otlp = traced["otlp"]
    assert len(otlp["each"].read_text().splitlines()) == len(traced["spans"])
    assert len(otlp["one_line"].read_text().splitlines()) == 1
    for path in (traced["path"], otlp["each"], otlp["batched"], otlp["one_line"]):
        one = read_traces_report(path, buckets=1)
        assert one.rows.height == len(QUESTIONS)
        assert_frame_equal(read_traces_report(path, buckets=3).rows, one.rows)
        assert_frame_equal(read_traces_report(path, buckets=3).skipped, one.skipped)
        out = tmp_path / f"{path.stem}.rows.parquet"
        assert write_traces(path, out, buckets=3).rows == one.rows.height
        assert_frame_equal(pl.read_parquet(out), one.rows)


def test_ragframe_import_writes_the_rows_for_any_later_run(
    traced: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragframe import` writes the rows `score --from` would score (and the skipped list);
    `score --from ... --ray` points to it."""
    from ragframe.cli import main

    rows, skipped = tmp_path / "rows.parquet", tmp_path / "skipped.parquet"
    spans = traced["path"]
    assert main(["import", str(spans), "-o", str(rows), "--skipped", str(skipped)]) == 0
    assert f"wrote {len(QUESTIONS)} rows" in capsys.readouterr().err
    assert_frame_equal(pl.read_parquet(rows), read_traces_report(spans).rows)
    assert pl.read_parquet(skipped).schema == pl.Schema(SKIP_SCHEMA)
    assert main(["import", str(spans), "-o", str(rows)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["import", str(spans), "-o", str(tmp_path / "rows.csv")]) == 2
    orphan = tmp_path / "orphan.jsonl"
    orphan.write_text(spans.read_text().splitlines()[0] + "\n")  # a span with no answer trace
    gone = tmp_path / "o.parquet"
    args = ["import", str(orphan), "--from", "openinference", "-o", str(gone)]
    assert main([*args, "--skipped", str(skipped), "--overwrite"]) == 2
    assert "no RAG turn" in capsys.readouterr().err and not gone.exists()
    assert pl.read_parquet(skipped)["reason"].str.contains("no answer").all()  # the why, kept
    assert main(["score", str(spans), "--from", "auto", "--ray", "1", "-o", str(rows)]) == 2
    assert "ragframe import" in capsys.readouterr().err


def genai_messages(role: str, text: str) -> str:
    """A GenAI messages attribute: one message with one text part, as JSON."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def run_genai_pipeline(
    provider: TracerProvider, base_url: str, *, capture_content: bool
) -> list[dict[str, Any]]:
    """The same RAG pipeline traced with OpenTelemetry's GenAI conventions only (attribute names
    from `opentelemetry-semantic-conventions`): an invoke_workflow span, a retrieval span with
    `gen_ai.retrieval.documents`, and a chat span around the real `openai` call with the
    reply's model and token usage. Without content capture, documents keep ids and scores."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G

    tracer = provider.get_tracer("genai-rag")
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key")
    seen = []
    for question in QUESTIONS:
        with tracer.start_as_current_span("invoke_workflow rag") as workflow:
            workflow.set_attribute(G.GEN_AI_OPERATION_NAME, "invoke_workflow")
            workflow.set_attribute(G.GEN_AI_INPUT_MESSAGES, genai_messages("user", question))
            with tracer.start_as_current_span("retrieval kb") as retrieval:
                docs = retrieve(question)
                records = [
                    {"id": d, "score": s, **({"content": t} if capture_content else {})}
                    for d, t, s in docs
                ]
                retrieval.set_attribute(G.GEN_AI_OPERATION_NAME, "retrieval")
                retrieval.set_attribute(G.GEN_AI_DATA_SOURCE_ID, "kb")
                retrieval.set_attribute(G.GEN_AI_RETRIEVAL_QUERY_TEXT, question)
                retrieval.set_attribute(G.GEN_AI_RETRIEVAL_DOCUMENTS, json.dumps(records))
            prompt = "Context:\n" + "\n".join(t for _, t, _ in docs) + f"\nQuestion: {question}"
            with tracer.start_as_current_span("chat fake-rag-model") as chat:
                chat.set_attribute(G.GEN_AI_OPERATION_NAME, "chat")
                chat.set_attribute(G.GEN_AI_REQUEST_MODEL, "fake-rag-model")
                reply = client.chat.completions.create(
                    model="fake-rag-model", messages=[{"role": "user", "content": prompt}]
                )
                answer = reply.choices[0].message.content
                chat.set_attribute(G.GEN_AI_RESPONSE_MODEL, reply.model)
                chat.set_attribute(G.GEN_AI_USAGE_INPUT_TOKENS, reply.usage.prompt_tokens)
                chat.set_attribute(G.GEN_AI_USAGE_OUTPUT_TOKENS, reply.usage.completion_tokens)
                chat.set_attribute(G.GEN_AI_INPUT_MESSAGES, genai_messages("user", prompt))
                chat.set_attribute(G.GEN_AI_OUTPUT_MESSAGES, genai_messages("assistant", answer))
            workflow.set_attribute(G.GEN_AI_OUTPUT_MESSAGES, genai_messages("assistant", answer))
            context = workflow.get_span_context()
            seen.append(
                {
                    "question": question,
                    "answer": answer,
                    "contexts": [t for _, t, _ in docs] if capture_content else [],
                    "context_document_ids": [d for d, _, _ in docs] if capture_content else [],
                    "context_scores": [s for _, _, s in docs] if capture_content else [],
                    "span_id": f"{context.span_id:016x}",
                    "model_name": reply.model,
                    "prompt_tokens": reply.usage.prompt_tokens,
                    "completion_tokens": reply.usage.completion_tokens,
                }
            )
    return seen


@pytest.mark.parametrize("capture_content", [True, False])
def test_genai_conventions_only_otlp_file(tmp_path: Path, capture_content: bool) -> None:
    """Spans with OpenTelemetry GenAI attributes only (no OpenInference), written by the file
    exporter: the workflow span's messages are the question and answer, the retrieval span's
    documents the contexts (or, without content capture, none, and a note says why), the chat
    span the model and tokens."""
    path = tmp_path / "genai.otlp.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    with FakeServer(handler=answer_from_context) as fake:
        seen = run_genai_pipeline(provider, fake.base_url, capture_content=capture_content)
    provider.shutdown()
    read = read_traces_report(path)  # detected as otel
    assert read.skipped.height == 0 and read.rows.height == len(QUESTIONS)
    for row, expected in zip(read.rows.iter_rows(named=True), seen, strict=True):
        for key, value in expected.items():
            # a column no row has a value for is left out: read it as empty
            assert row.get(key, [] if isinstance(value, list) else None) == value, key
        note = row.get("note") or ""
        assert ("recorded no document content" in note) is (not capture_content)


def test_the_genai_attributes_read_are_the_conventions_names() -> None:
    """Every GenAI attribute the OTLP reader looks up is named as in
    `opentelemetry-semantic-conventions` (a typo would read nothing, silently)."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G

    from ragframe.inputs.traces import otel

    names = {v for k, v in vars(G).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
    attributes = {k: v for k, v in otel.GENAI.items() if not k.endswith("_event")}
    assert set(attributes.values()) <= names, set(attributes.values()) - names
    operations = {v.value for v in G.GenAiOperationNameValues}
    assert set(otel.GENAI_KINDS) <= operations


def reshaped_spans(path: Path) -> list[dict[str, Any]]:
    """The SDK's span lines with attributes in the shapes OTel allows and writers produce: the
    retriever's `input.value` a list of strings, each CHAIN span's `input.value` an object (no
    mime type), its `metadata` an object and `session.id` / `user.id` / `tag.tags` set."""
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    for span in spans:
        attributes = span["attributes"]
        kind = attributes[SpanAttributes.OPENINFERENCE_SPAN_KIND]
        if kind == "RETRIEVER":
            attributes[SpanAttributes.INPUT_VALUE] = [attributes[SpanAttributes.INPUT_VALUE], "x"]
        if kind == "CHAIN":
            question = attributes[SpanAttributes.INPUT_VALUE]
            attributes[SpanAttributes.INPUT_VALUE] = {"question": question, "k": 2}
            attributes[SpanAttributes.METADATA] = {"turn": question, "n": [1, 2]}
            attributes[SpanAttributes.SESSION_ID] = "session-1"
            attributes[SpanAttributes.USER_ID] = "user-1"
            attributes[SpanAttributes.TAG_TAGS] = ["rag", "prod"]
    return spans


@pytest.mark.parametrize("bad_line", [None, 4])
def test_lists_and_objects_as_attribute_values_never_stop_the_file(
    traced: dict[str, Any], tmp_path: Path, bad_line: int | None
) -> None:
    """A span whose `input.value` is a list or an object (valid in OTel) is read (the object's
    question field, the list as JSON text); with a truncated line too, that line is listed as
    skipped with its number and the rest read; no traceback, no Polars error."""
    lines = [json.dumps(span) for span in reshaped_spans(traced["path"])]
    if bad_line is not None:
        lines.insert(bad_line - 1, lines[0][:60])
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = read_traces_report(path)
    expected = [] if bad_line is None else [bad_line]
    assert read.skipped["line"].to_list() == expected
    assert read.rows.height == len(QUESTIONS)
    for row, seen in zip(read.rows.iter_rows(named=True), traced["seen"], strict=True):
        for key in ("question", "answer", "contexts", "context_document_ids", "span_id"):
            assert row[key] == seen[key], key
        assert json.loads(row["metadata"]) == {"turn": seen["question"], "n": [1, 2]}
        assert (row["session_id"], row["user_id"], row["tags"]) == (
            "session-1",
            "user-1",
            ["rag", "prod"],
        )


def test_a_line_holding_an_array_of_spans(traced: dict[str, Any], tmp_path: Path) -> None:
    """Spans saved as one JSON array (`json.dump(spans, f)`): read as if a span a line."""
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(reshaped_spans(traced["path"])) + "\n")
    read = read_traces_report(path, format="openinference")
    assert read.skipped.height == 0
    assert read.rows["question"].to_list() == [s["question"] for s in traced["seen"]]
    assert read.rows["contexts"].to_list() == [s["contexts"] for s in traced["seen"]]


def test_the_fields_read_are_the_fields_the_sdk_writes(traced: dict[str, Any]) -> None:
    """The canary for SDK span lines (`ReadableSpan.to_json()` with the OpenAI instrumentor's
    attributes): every key, context key and attribute is one `openinference.KNOWN_FIELDS`
    lists (read or left on purpose), so a field a new SDK or instrumentor writes fails here."""
    from test_real_phoenix import assert_item_fields_known

    from ragframe.inputs.traces import openinference

    known = openinference.KNOWN_FIELDS
    spans = [json.loads(line) for line in traced["path"].read_text().splitlines()]
    assert {k for s in spans for k in s} <= known["sdk_span"]
    assert {k for s in spans for k in s["context"]} <= known["context"]
    attributes = {k for s in spans for k in s["attributes"]}
    families = {openinference.attribute_family(k) for k in attributes}
    assert families <= known["attribute"], families - known["attribute"]
    assert_item_fields_known(attributes)


def test_a_span_frame_whose_input_values_are_objects(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    """A span frame whose `attributes.input.value` column holds objects (a struct column, as
    Polars or Parquet keeps them) with no JSON mime type: the object's question field is the
    question, as for a JSON value."""
    frame = phoenix_frame(traced["spans"]).with_columns(
        pl.struct(pl.col("attributes.input.value").alias("question"), pl.lit(2).alias("k")).alias(
            "attributes.input.value"
        ),
        pl.lit(None, pl.String).alias("attributes.input.mime_type"),
    )
    frame.write_parquet(tmp_path / "spans.parquet")
    for source in (frame, tmp_path / "spans.parquet"):
        rows = read_traces(source, on_skip="raise").collect()
        assert rows["question"].to_list() == [s["question"] for s in traced["seen"]]
