"""LangSmith runs as today's `langsmith` writes them: a small RAG pipeline of `@traceable`
functions of every run type (and one built by hand with `RunTree`) traced by the real client
into a capture server on 127.0.0.1, listed back with the real `Client.list_runs` and dumped a
`Run` a line, the way a user exports runs. The rows must equal what the pipeline saw; scores
exported with `ragframe export --to langsmith` must load through the real
`Client.create_feedback` with no warning, on the right runs, traces and projects."""

from __future__ import annotations

import json
import os
import threading
import uuid
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import polars as pl
import pytest
from real_tools import run_peer

os.environ.setdefault("LANGSMITH_TRACING", "false")

import langsmith
from langsmith import Client, traceable, tracing_context
from langsmith.run_trees import RunTree

from ragframe.inputs.traces import detect_format, read_traces_report
from ragframe.inputs.traces.langsmith import ENV_METADATA_PREFIXES, KNOWN_FIELDS

PROJECT = "rag-prod"
DOCUMENTS = {
    "doc-paris": "Paris is the capital of France and sits on the Seine.",
    "doc-berlin": "Berlin is the capital of Germany.",
    "doc-rome": "Rome is the capital of Italy, founded on seven hills.",
    "doc-seine": "The Seine flows through Paris into the English Channel.",
    "doc-alps": "The Alps stretch across France, Italy, Switzerland and Austria.",
}
#: Each question's retriever returns its documents in one of the shapes users' code returns.
QUESTIONS = {
    "What is the capital of France?": "documents",
    "Which river flows through Paris?": "strings",
    "What is the capital of Italy?": "one document",
    "Where are the Alps?": "source object",
}
MODEL = "gpt-4o-mini"


class CaptureServer:
    """LangSmith's API as far as the client uses it here, on 127.0.0.1: runs created
    (`POST /runs`) and updated (`PATCH /runs/{id}`), stored as the service stores them (the
    project's id as `session_id`); `POST /runs/query` lists them (what `Client.list_runs`
    reads); `POST /feedback` is recorded."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.feedback: list[dict[str, Any]] = []
        self.projects: dict[str, str] = {}
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def project_id(self, name: str) -> str:
        return self.projects.setdefault(name, str(uuid.uuid5(uuid.NAMESPACE_URL, name)))

    def project(self, name: str) -> dict[str, Any]:
        """A project as the service describes it (`TracerSessionResult`)."""
        tenant = str(uuid.uuid5(uuid.NAMESPACE_URL, "tenant"))
        return {
            "id": self.project_id(name),
            "name": name,
            "tenant_id": tenant,
            "reference_dataset_id": None,
        }

    def _store(self, run: dict[str, Any]) -> None:
        with self.lock:
            stored = self.runs.setdefault(run["id"], {})
            stored.update({k: v for k, v in run.items() if v is not None or k not in stored})
            stored.pop("attachments", None)  # the service lists them as `s3_urls`
            name = stored.pop("session_name", None)
            if name is not None:
                stored["session_id"] = self.project_id(name)
            stored["status"] = "success" if stored.get("end_time") else "pending"

    def _query(self, body: dict[str, Any]) -> dict[str, Any]:
        sessions = set(body.get("session") or [])
        with self.lock:
            runs = [r for r in self.runs.values() if not sessions or r["session_id"] in sessions]
        return {"runs": runs, "cursors": {"next": None}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _body(self) -> Any:
                size = int(self.headers.get("content-length") or 0)
                return json.loads(self.rfile.read(size) or b"null")

            def _reply(self, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                names = parse_qs(url.query).get("name")
                if url.path == "/sessions" and names:  # `read_project(project_name=...)`
                    self._reply([server.project(names[0])])
                    return
                self._reply({})

            def do_POST(self) -> None:
                body = self._body()
                if self.path == "/runs":
                    server._store(body)
                elif self.path == "/runs/query":
                    self._reply(server._query(body))
                    return
                elif self.path == "/feedback":
                    with server.lock:
                        server.feedback.append(body)
                self._reply({})

            def do_PATCH(self) -> None:
                server._store(self._body())
                self._reply({})

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> CaptureServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def overlap(question: str, k: int = 2) -> list[tuple[str, str, float]]:
    """Top-k documents by word overlap (id, text, score), best first."""
    words = set(question.lower().strip("?").split())
    scored = [
        (doc_id, text, len(words & set(text.lower().strip(".").split())) / len(words))
        for doc_id, text in DOCUMENTS.items()
    ]
    return sorted(scored, key=lambda d: -d[2])[:k]


@traceable(run_type="embedding")
def embed(text: str) -> list[float]:
    return [float(len(text)), float(text.count(" "))]


@traceable(run_type="retriever")
def search(query: str, shape: str) -> Any:
    embed(query)
    found = overlap(query)
    if shape == "strings":
        return [text for _, text, _ in found]
    docs = [
        {"page_content": text, "type": "Document", "metadata": {"id": i, "score": s}}
        for i, text, s in found
    ]
    if shape == "one document":
        return docs[0]  # a dict: `@traceable` stores it as the outputs themselves
    if shape == "source object":
        for doc in docs:
            doc["metadata"] = {"source": {"path": doc["metadata"]["id"], "page": 3}}
    return docs


@traceable(run_type="tool")
def today() -> str:
    return "2026-11-26"


@traceable(run_type="prompt")
def build_prompt(question: str, contexts: list[str]) -> list[dict[str, str]]:
    context = "\n".join(contexts)
    return [
        {"role": "system", "content": f"Answer from the context. Today is {today()}."},
        {"role": "user", "content": f"{question}\n{context}"},
    ]


@traceable(run_type="llm", metadata={"ls_provider": "openai", "ls_model_name": MODEL})
def generate(messages: list[dict[str, str]]) -> dict[str, Any]:
    user = messages[-1]["content"]
    answer = "Answer: " + user.split("\n")[1]
    usage = {"input_tokens": len(user.split()), "output_tokens": len(answer.split())}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return {
        "choices": [{"message": {"role": "assistant", "content": answer}}],
        "usage_metadata": usage,
    }


@traceable(run_type="parser")
def parse(reply: dict[str, Any]) -> str:
    return str(reply["choices"][0]["message"]["content"])


def compact(value: Any) -> str:
    """JSON text as ragframe writes an object id (and Polars any JSON value): no spaces."""
    return json.dumps(value, separators=(",", ":"))


def contexts_of(found: Any) -> tuple[list[str], list[str | None]]:
    """What the pipeline retrieved, as texts and ids (an object id as its JSON text)."""
    docs = found if isinstance(found, list) else [found]
    texts = [d if isinstance(d, str) else d["page_content"] for d in docs]
    ids: list[str | None] = []
    for d in docs:
        meta = {} if isinstance(d, str) else d["metadata"]
        ident = meta.get("id", meta.get("source"))
        ids.append(ident if ident is None or isinstance(ident, str) else compact(ident))
    return texts, ids


def traced_rag(question: str, shape: str, seen: dict[str, Any]) -> str:
    @traceable(run_type="chain", name="rag")
    def rag(question: str) -> str:
        run = langsmith.get_current_run_tree()
        assert run is not None
        seen["span_id"] = seen["trace_id"] = str(run.id)
        found = search(question, shape)
        seen["contexts"], seen["context_document_ids"] = contexts_of(found)
        reply = generate(build_prompt(question, seen["contexts"]))
        seen["prompt_tokens"] = reply["usage_metadata"]["input_tokens"]
        seen["completion_tokens"] = reply["usage_metadata"]["output_tokens"]
        return parse(reply)

    thread = f"thread-{shape.replace(' ', '-')}"
    extra = {"metadata": {"thread_id": thread, "user_id": "u-7"}, "tags": ["prod", shape]}
    seen["session_id"], seen["user_id"], seen["tags"] = thread, "u-7", ["prod", shape]
    return rag(question, langsmith_extra=extra)


def hand_built_rag(client: Client, question: str, seen: dict[str, Any]) -> None:
    """The same pipeline traced with `RunTree` by hand, documents under `documents`, the LLM's
    answer as generations."""
    root = RunTree(
        name="rag",
        run_type="chain",
        inputs={"question": question},
        client=client,
        project_name=PROJECT,
        extra={"metadata": {"session_id": "hand-1"}},
    )
    root.post()
    retriever = root.create_child(name="search", run_type="retriever", inputs={"query": question})
    retriever.post()
    found = overlap(question)
    docs = [
        {"page_content": t, "metadata": {"source": i, "score": s}, "type": "Document"}
        for i, t, s in found
    ]
    retriever.end(outputs={"documents": docs})
    retriever.patch()
    llm = root.create_child(
        name="llm",
        run_type="llm",
        inputs={"messages": [{"role": "user", "content": question}]},
        extra={"metadata": {"ls_model_name": MODEL}},
    )
    llm.post()
    answer = "Answer: " + found[0][1]
    llm.end(outputs={"generations": [[{"text": answer}]], "llm_output": {"token_usage": {}}})
    llm.patch()
    root.end(outputs={"answer": answer})
    root.patch()
    seen.update(
        question=question,
        answer=answer,
        span_id=str(root.id),
        trace_id=str(root.trace_id),
        contexts=[t for _, t, _ in found],
        context_document_ids=[i for i, _, _ in found],
        session_id="hand-1",
    )


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture(scope="module")
def exported(capture: CaptureServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the pipeline, traced by the real client into the capture server; export the runs
    with `Client.list_runs` a `Run.model_dump_json()` a line."""
    client = Client(api_url=capture.url, api_key="test", auto_batch_tracing=False)
    seen: list[dict[str, Any]] = []
    with tracing_context(enabled=True, client=client, project_name=PROJECT):
        for question, shape in QUESTIONS.items():
            row: dict[str, Any] = {"question": question}
            row["answer"] = traced_rag(question, shape, row)
            seen.append(row)
    hand: dict[str, Any] = {}
    hand_built_rag(client, "Which city is the capital of Germany?", hand)
    seen.append(hand)
    client.flush()
    project = capture.project_id(PROJECT)
    with warnings.catch_warnings():
        # deprecated for `client.runs.query_v2` (a service >= 0.16), working until 2027
        warnings.simplefilter("ignore", DeprecationWarning)
        runs = list(client.list_runs(project_id=project))
    path = tmp_path_factory.mktemp("langsmith") / "runs.jsonl"
    path.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    return {"path": path, "seen": seen, "runs": runs, "project": project, "client": client}


def test_runs_as_the_client_writes_them_read_as_the_pipeline_saw(exported: dict[str, Any]) -> None:
    """Every run type, retriever documents as `@traceable` stores them (`outputs.output`, a
    list of dicts or of strings, one dict as the outputs, `metadata.source` an object) and as
    `RunTree` users write them (`outputs.documents`): one row per question, exactly."""
    runs = exported["runs"]
    assert {r.run_type for r in runs} == {
        "chain",
        "retriever",
        "embedding",
        "tool",
        "prompt",
        "llm",
        "parser",
    }
    path = exported["path"]
    assert detect_format(path) == "langsmith"
    read = read_traces_report(path)
    assert read.skipped.height == 0, read.skipped
    rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
    assert len(rows) == len(exported["seen"])
    for seen in exported["seen"]:
        row = rows[seen["trace_id"]]
        first = ["question", "answer", "contexts", "context_document_ids", "span_id"]
        for key in [*first, *(k for k in seen if k not in first)]:
            assert row.get(key) == seen[key], (key, seen["question"])
        assert row["project_id"] == exported["project"]
        assert row["model_name"] == MODEL
        assert "no document content" not in (row.get("note") or "")
        assert row["retrievals"] == 1


def test_token_counts_from_usage_metadata(exported: dict[str, Any]) -> None:
    """`@traceable` LLM runs carry their tokens in `usage_metadata` only (the run's own
    `prompt_tokens` are the service's to fill): the rows have them."""
    read = read_traces_report(exported["path"])
    rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
    traced = [s for s in exported["seen"] if "prompt_tokens" in s]
    assert traced
    for seen in traced:
        row = rows[seen["trace_id"]]
        assert row["total_tokens"] == seen["prompt_tokens"] + seen["completion_tokens"]
    metadata = json.loads(rows[traced[0]["trace_id"]]["metadata"])
    assert metadata["thread_id"] == traced[0]["session_id"] and metadata["user_id"] == "u-7"


def test_no_field_the_reader_does_not_know(exported: dict[str, Any]) -> None:
    """The canary: every field today's client writes in the places the reader reads from is in
    `KNOWN_FIELDS` (mapped or deliberately left); a new one fails here until it is placed."""
    user_metadata = {"thread_id", "user_id", "session_id"}
    unknown: dict[str, set[str]] = {}

    def check(place: str, value: Any, allowed: frozenset[str] | set[str] = frozenset()) -> None:
        if isinstance(value, dict):
            extra = set(value) - KNOWN_FIELDS[place] - set(allowed)
            if extra:
                unknown.setdefault(place, set()).update(extra)

    for line in exported["path"].read_text().splitlines():
        run = json.loads(line)
        check("run", run)
        extra = run.get("extra") or {}
        check("extra", extra)
        metadata = extra.get("metadata") or {}
        env = {k for k in metadata if k.startswith(ENV_METADATA_PREFIXES)}
        check("extra.metadata", metadata, user_metadata | env)
        for usage in (metadata.get("usage_metadata"), (run["outputs"] or {}).get("usage_metadata")):
            check("usage_metadata", usage)
        if run["run_type"] == "retriever":
            outputs = run["outputs"] or {}
            docs = outputs.get("documents", outputs.get("output", outputs))
            for doc in docs if isinstance(docs, list) else [docs]:
                check("document", doc)
                if isinstance(doc, dict):
                    check("document.metadata", doc.get("metadata"))
    assert not unknown, f"fields the LangSmith reader does not know: {unknown}"


def _edited(run: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of `run` with top-level `fields` replaced."""
    return {**json.loads(json.dumps(run)), **fields}


def test_a_run_of_any_odd_shape_never_stops_the_file(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    """Runs of the real export edited into shapes other writers and versions give: each is
    read sensibly (lists and objects as JSON text, a plain-string or single document as
    content, numbers as text) and the rest of the file reads as before."""
    runs = [json.loads(line) for line in exported["path"].read_text().splitlines()]
    first = exported["seen"][0]
    trace = [r for r in runs if r["trace_id"] == first["trace_id"]]
    others = [r for r in runs if r["trace_id"] != first["trace_id"]]
    retriever = next(r for r in trace if r["run_type"] == "retriever")
    root = next(r for r in trace if r["parent_run_id"] is None)
    llm = next(r for r in trace if r["run_type"] == "llm")
    odd = {
        # documents: strings, one dict (not a list), metadata as text, ids as numbers / objects
        "strings": _edited(retriever, outputs={"documents": ["one", "two"]}),
        "single": _edited(retriever, outputs={"documents": {"page_content": "one"}}),
        "content": _edited(
            retriever,
            outputs={
                "documents": [
                    {"content": "one", "metadata": {"id": 7, "score": "0.5"}},
                    {"page_content": "two", "metadata": "not a dict"},
                    {"page_content": {"text": "three"}, "metadata": {"source": ["a", 1]}},
                    None,
                ]
            },
        ),
        "scalar": _edited(retriever, outputs={"output": 42}),
        "question list": _edited(root, inputs={"question": ["a", "b"]}),
        "tags": _edited(root, tags=["x", {"k": 1}, 3]),
        "metadata list": _edited(root, extra={"metadata": [1, 2]}),
        "start number": _edited(root, start_time=1700000000),
        "run type": _edited(retriever, run_type=5),
        "tokens as text": _edited(llm, prompt_tokens="12", total_tokens={"n": 1}),
        "outputs null": _edited(llm, outputs=None),
    }
    expected = {
        "strings": (["one", "two"], [None, None]),
        "single": (["one"], [None]),
        "content": (["one", "two", '{"text":"three"}'], ["7", None, '["a",1]']),
        "scalar": (["42"], [None]),
    }
    for name, run in odd.items():
        name_tag = name.replace(" ", "-")
        path = tmp_path / f"{name_tag}.jsonl"
        target = run["id"]
        lines = [run if r["id"] == target else r for r in trace] + others
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        read = read_traces_report(path, "langsmith")
        rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
        for seen in exported["seen"][1:]:  # the other traces read as before
            assert rows[seen["trace_id"]]["contexts"] == seen["contexts"], name
        row = rows.get(first["trace_id"])
        listed = read.skipped.filter(pl.col("trace_id") == first["trace_id"])
        assert row is not None or listed.height, name  # read, or skipped and listed
        if name in expected:
            assert row is not None
            assert (row["contexts"], row["context_document_ids"]) == expected[name], name
            assert "no document content" not in (row.get("note") or "")
    read = read_traces_report(tmp_path / "question-list.jsonl", "langsmith")
    assert read.rows["question"][0] == '["a","b"]'
    read = read_traces_report(tmp_path / "tags.jsonl", "langsmith")
    assert read.rows["tags"][0].to_list() == ["x", '{"k":1}', "3"]


def test_an_llm_only_trace_question_answer_and_tokens_in_each_shape(tmp_path: Path) -> None:
    """A trace that is one LLM run: its question is the last user message however the
    messages are written (OpenAI's dicts with content parts, LangChain's serialised messages
    in a list of lists), its answer the generation or the chat choice, its tokens the older
    `token_usage` / `usage` fields or the run's own counts."""
    from langsmith.schemas import Run

    human = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
        "kwargs": {"content": "Q2?", "type": "human"},
    }
    shapes = [
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "Q1?"}]}]},
            {"choices": [{"message": {"content": "A1."}}], "usage": {"prompt_tokens": 3}},
            {"invocation_params": {"model": "m1"}},
            ("Q1?", "A1.", "m1", 3),
        ),
        (
            {"messages": [[{"lc": 1, "kwargs": {"content": "sys", "type": "system"}}, human]]},
            {
                "generations": [[{"text": "A2."}]],
                "llm_output": {"token_usage": {"prompt_tokens": 5, "total_tokens": 7}},
            },
            {"invocation_params": {"model_name": "m2"}},
            ("Q2?", "A2.", "m2", 5),
        ),
    ]
    lines = []
    for inputs, outputs, extra, _ in shapes:
        run_id = uuid.uuid4()
        run = Run(
            id=run_id,
            trace_id=run_id,
            name="chat",
            run_type="llm",
            start_time="2026-11-26T10:00:00Z",
            end_time="2026-11-26T10:00:01Z",
            inputs=inputs,
            outputs=outputs,
            extra=extra,
        )
        lines.append(run.model_dump_json())
    path = tmp_path / "llm.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = read_traces_report(path)
    assert read.skipped.height == 0
    got = [
        (r["question"], r["answer"], r["model_name"], r["prompt_tokens"])
        for r in read.rows.iter_rows(named=True)
    ]
    assert got == [s[3] for s in shapes]


def test_feedback_lines_are_create_feedbacks_arguments() -> None:
    """Every key of a feedback line is a parameter of the current `Client.create_feedback`
    (an unknown one warns), `session_id` is the row's project."""
    import inspect

    from ragframe.export.langsmith import frame

    evaluations = pl.DataFrame(
        {
            "span_id": ["r1", "r2"],
            "trace_id": ["t1", "t2"],
            "name": ["faithfulness"] * 2,
            "score": [0.5, None],
            "label": ["pass", None],
            "explanation": ["why", None],
            "project_id": ["p1", None],
        }
    )
    lines = frame(evaluations)
    assert set(lines.columns) <= set(inspect.signature(Client.create_feedback).parameters)
    assert lines["session_id"].to_list() == ["p1", None]
    assert lines["run_id"].to_list() == ["r1", "r2"] and lines["key"][0] == "faithfulness"
    assert frame(evaluations.drop("project_id"))["session_id"].to_list() == [None, None]


def test_feedback_round_trip_through_the_real_client(
    exported: dict[str, Any],
    capture: CaptureServer,
    server: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`ragframe score --from langsmith` (fake judge) → `ragframe export --to langsmith` →
    every line into the real `Client.create_feedback`, warnings as errors (a missing
    `session_id` or an argument the client no longer takes warns): the feedback that reached
    the service names the answer runs, their traces and their project, with the scores."""
    from ragframe.cli import main

    scored_path = tmp_path / "scored.parquet"
    argv = ["score", str(exported["path"]), "--from", "langsmith", "-o", str(scored_path)]
    argv += ["--metrics", "faithfulness", "--threshold", "faithfulness=0.5", "--model"]
    argv += ["fake-judge", "--base-url", server.base_url, "--no-cache", "--no-progress"]
    assert main(argv) == 0
    feedback_path = tmp_path / "feedback.jsonl"
    assert main(["export", str(scored_path), "--to", "langsmith", "-o", str(feedback_path)]) == 0
    capsys.readouterr()
    scored = pl.read_parquet(scored_path)
    lines = [json.loads(line) for line in feedback_path.read_text().splitlines()]
    assert len(lines) == scored.height == len(exported["seen"])

    client = Client(api_url=capture.url, api_key="test")
    before = len(capture.feedback)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for line in lines:
            client.create_feedback(**line)
    client.flush()
    sent = capture.feedback[before:]
    got = {(f["run_id"], f["trace_id"], f["session_id"], f["key"], f["score"]) for f in sent}
    score_of = dict(zip(scored["trace_id"], scored["faithfulness"], strict=True))
    expected = {  # the client rounds a score to 4 decimals
        (s["span_id"], s["trace_id"], exported["project"], "faithfulness", round(score, 4))
        for s in exported["seen"]
        if (score := score_of[s["trace_id"]]) is not None
    }
    assert len(expected) == len(exported["seen"])
    assert got == expected
    passed = dict(zip(scored["span_id"], scored["faithfulness_pass"], strict=True))
    assert {f["run_id"]: f["value"] for f in sent} == {
        run: "pass" if ok else "fail" for run, ok in passed.items()
    }


def _docs_blocks(monkeypatch: pytest.MonkeyPatch, server: Any | None, work: Path) -> list[Any]:
    """docs/traces/langsmith.md's blocks for LangSmith's service and its `ragframe` commands,
    in order, with the environment a user has: the client's pointed at the capture server,
    the judge's at the fake one, in a fresh directory."""
    from test_docs import ROOT, blocks

    if server is not None:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
        monkeypatch.setenv("RAGFRAME_MODEL", "fake-judge")
        monkeypatch.setenv("RAGFRAME_CACHE", str(work / "cache.sqlite3"))
    work.mkdir()
    monkeypatch.chdir(work)
    page = (ROOT / "docs" / "traces" / "langsmith.md").read_text()
    chosen = [
        b
        for b in blocks(page)
        if (b.lang == "python" and b.no_run and "LangSmith's service" in b.no_run)
        or (b.lang == "bash" and b.no_run is None)
    ]
    assert [b.lang for b in chosen] == ["python", "bash", "bash", "bash", "python"]
    return chosen


def _run_block(block: Any, namespace: dict[str, Any]) -> None:
    from test_docs import commands, run_command

    if block.lang == "python":
        exec(compile(block.body, f"langsmith.md block {block.number}", "exec"), namespace)
    else:
        for line in commands(block.body):
            run_command(line, f"langsmith.md block {block.number}")


def test_the_docs_export_block_against_the_service(
    exported: dict[str, Any],
    capture: CaptureServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The page's export block, run as written with `Client()` pointed at the capture server
    (LANGSMITH_ENDPOINT): its runs.jsonl reads back as the pipeline saw it."""
    monkeypatch.setenv("LANGSMITH_ENDPOINT", capture.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    export_block = _docs_blocks(monkeypatch, None, tmp_path / "work")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run_block(export_block, {})
    read = read_traces_report("runs.jsonl", "langsmith")
    assert read.skipped.height == 0
    rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
    for seen in exported["seen"]:
        row = rows[seen["trace_id"]]
        assert (row["question"], row["answer"], row["contexts"], row["span_id"]) == (
            seen["question"],
            seen["answer"],
            seen["contexts"],
            seen["span_id"],
        )
        assert row["project_id"] == exported["project"]


def test_the_docs_page_end_to_end_against_the_service(
    exported: dict[str, Any],
    capture: CaptureServer,
    server: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Every block of the page a user runs against LangSmith, in order: export the runs,
    score, import, export the feedback, load it with `create_feedback` (warnings as errors):
    the feedback reaching the service is on the answer runs, their traces and project."""
    monkeypatch.setenv("LANGSMITH_ENDPOINT", capture.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    before = len(capture.feedback)
    namespace: dict[str, Any] = {}
    for block in _docs_blocks(monkeypatch, server, tmp_path / "work"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _run_block(block, namespace)
    sent = capture.feedback[before:]
    assert {(f["run_id"], f["trace_id"], f["session_id"], f["key"]) for f in sent} == {
        (s["span_id"], s["trace_id"], exported["project"], "faithfulness") for s in exported["seen"]
    }


def test_the_usual_shapes_are_decoded_by_polars_as_python_reads_them(
    exported: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of the usual shapes (documents as dicts with text ids, OpenAI-style messages,
    tags of text) are decoded by Polars a batch at a time, never per run in Python, into what
    the per-run reading gives; a batch with one odd run is read per run (the test above)."""
    from ragframe.inputs.traces import langsmith

    usual = {
        s["trace_id"]
        for s in exported["seen"]
        if s.get("tags", ["", "documents"])[1] in ("documents",)
    }
    lines = [
        line
        for line in exported["path"].read_text().splitlines()
        if json.loads(line)["trace_id"] in usual
    ]
    outputs = [
        json.dumps(run["outputs"])
        for run in map(json.loads, lines)
        if run["run_type"] == "retriever"
    ]
    fast = langsmith._documents_fast(pl.Series(outputs))
    assert fast is not None
    assert fast.to_list() == [langsmith.documents_of(o) for o in outputs]

    def per_run(_: str) -> Any:
        raise AssertionError("a usual run was read per run in Python")

    for name in ("documents_of", "last_user_message", "tags_of"):
        monkeypatch.setattr(langsmith, name, per_run)
    path = tmp_path / "usual.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = read_traces_report(path, "langsmith")
    assert read.skipped.height == 0 and read.rows.height == len(usual) == 2
    for row in read.rows.iter_rows(named=True):
        seen = next(s for s in exported["seen"] if s["trace_id"] == row["trace_id"])
        assert (row["question"], row["answer"], row["contexts"], row["context_document_ids"]) == (
            seen["question"],
            seen["answer"],
            seen["contexts"],
            seen["context_document_ids"],
        )


def test_runs_of_the_newer_query_api_keep_their_project_and_thread(
    exported: dict[str, Any], capture: CaptureServer, tmp_path: Path
) -> None:
    """`client.runs.query_v2` yields `langsmith.types.run.Run`: run types in capitals, the
    project as `project_id` and the thread as `thread_id` (no `session_id`): the rows are
    the same and carry both, so the feedback export has its `session_id`."""
    from langsmith.types.run import Run as RunV2

    fields = set(RunV2.model_fields)
    lines = []
    for stored in capture.runs.values():
        metadata = (stored.get("extra") or {}).get("metadata") or {}
        run = {k: v for k, v in stored.items() if k in fields}
        run.update(
            project_id=stored["session_id"],
            thread_id=metadata.get("thread_id"),
            metadata=metadata,
            status="SUCCESS",
            run_type=stored["run_type"].upper(),  # the newer API's run types
        )
        lines.append(RunV2(**run).model_dump_json())
    path = tmp_path / "runs_v2.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert not {k for line in lines for k in json.loads(line)} - KNOWN_FIELDS["run"]
    read = read_traces_report(path, "langsmith")
    assert read.skipped.height == 0
    rows = {r["trace_id"]: r for r in read.rows.iter_rows(named=True)}
    for seen in exported["seen"]:
        row = rows[seen["trace_id"]]
        assert (row["question"], row["answer"], row["contexts"], row["span_id"]) == (
            seen["question"],
            seen["answer"],
            seen["contexts"],
            seen["span_id"],
        )
        assert row["project_id"] == exported["project"]
        assert row["session_id"] == seen["session_id"]


def test_a_frame_of_runs_reads_as_its_json_lines(exported: dict[str, Any], tmp_path: Path) -> None:
    """Runs held a column a field (a Parquet export: `inputs`, `outputs`, `extra`, `tags`...
    as JSON text, times as datetimes): `runs_as_lines` gives `scan_runs` the same rows as the
    JSON Lines."""
    from ragframe.inputs.traces.assemble import assemble
    from ragframe.inputs.traces.langsmith import runs_as_lines, scan_runs

    runs = [json.loads(line) for line in exported["path"].read_text().splitlines()]
    as_text = pl.DataFrame(
        [
            {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in run.items()}
            for run in runs
        ],
        infer_schema_length=None,
    ).with_columns(pl.col("start_time", "end_time").str.to_datetime(time_zone="UTC"))
    as_text.write_parquet(tmp_path / "runs.parquet")
    expected = read_traces_report(exported["path"], "langsmith").rows
    rows, skipped = assemble(scan_runs(runs_as_lines(pl.scan_parquet(tmp_path / "runs.parquet"))))
    got = rows.collect()
    assert skipped.collect().height == 0
    for column in ("question", "answer", "contexts", "context_document_ids", "span_id"):
        assert got[column].to_list() == expected[column].to_list(), column
    for column in ("project_id", "session_id", "model_name", "total_tokens", "tags"):
        assert got[column].to_list() == expected[column].to_list(), column


def _export_project(capture: CaptureServer, project: str, path: Path, pipeline: Any) -> Path:
    """Trace `pipeline()` with the real client into `project` and export its runs with
    `Client.list_runs`, a `Run.model_dump_json()` a line."""
    client = Client(api_url=capture.url, api_key="test", auto_batch_tracing=False)
    with tracing_context(enabled=True, client=client, project_name=project):
        pipeline()
    client.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        runs = list(client.list_runs(project_id=capture.project_id(project)))
    path.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    return path


def _human(content: str) -> dict[str, Any]:
    """A user message as LangChain serialises it in an LLM run's inputs."""
    return {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
        "kwargs": {"content": content, "type": "human"},
    }


@traceable(run_type="llm", name="ChatOpenAI")
def stuffed_chat(messages: list[list[dict[str, Any]]]) -> dict[str, Any]:
    prompt = messages[-1][-1]["kwargs"]["content"]
    return {"generations": [[{"text": "Answer: " + prompt.split("\n")[1]}]]}


def test_langchain_shaped_chains_question_and_answer_keys(
    capture: CaptureServer, tmp_path: Path
) -> None:
    """LangChain's `RetrievalQA` records `inputs.query` / `outputs.result`, LlamaIndex-like
    chains `query_str` / `response`: the row's question and answer are the chain's, not the
    LLM run's stuffed prompt (the keys are OpenInference's `INPUT_KEYS` / `OUTPUT_KEYS`)."""
    seen: list[dict[str, Any]] = []

    def stuff(question: str) -> tuple[list[str], str]:
        contexts = [t for _, t, _ in overlap(question)]
        found = search(question, "documents")
        assert [d["page_content"] for d in found] == contexts
        prompt = "Use the following pieces of context.\n" + "\n".join(contexts)
        reply = stuffed_chat([[_human(f"{prompt}\nQuestion: {question}")]])
        return contexts, str(reply["generations"][0][0]["text"])

    @traceable(run_type="chain", name="RetrievalQA")
    def retrieval_qa(query: str) -> dict[str, str]:
        contexts, answer = stuff(query)
        seen.append({"question": query, "answer": answer, "contexts": contexts})
        return {"result": answer}

    @traceable(run_type="chain", name="QueryEngine")
    def query_engine(query_str: str) -> dict[str, str]:
        contexts, answer = stuff(query_str)
        seen.append({"question": query_str, "answer": answer, "contexts": contexts})
        return {"response": answer}

    def pipeline() -> None:
        retrieval_qa("What is the capital of France?")
        query_engine("What is the capital of Italy?")

    path = _export_project(capture, "langchain-shaped", tmp_path / "runs.jsonl", pipeline)
    read = read_traces_report(path, "langsmith")
    assert read.skipped.height == 0, read.skipped
    got = sorted(read.rows.select("question", "answer", "contexts").to_dicts(), key=str)
    assert got == sorted(seen, key=str)


#: A `RetrievalQA`-shaped chain built of langchain-core's own runnables (`inputs.query`,
#: `outputs.result`; a fake chat model), traced by LangChain's own `LangChainTracer` into the
#: capture server: langchain-core lives in ragas's environment, not in ragframe's.
LANGCHAIN_PIPELINE = r"""
import json, sys
from operator import itemgetter
from langsmith import Client
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tracers import LangChainTracer

url, project = sys.argv[1], sys.argv[2]
questions, documents = json.loads(sys.argv[3]), json.loads(sys.argv[4])


class Retriever(BaseRetriever):
    def _get_relevant_documents(self, query, *, run_manager):
        words = set(query.lower().strip("?").split())
        overlap = lambda d: -len(words & set(d[1].lower().strip(".").split()))
        ranked = sorted(documents.items(), key=overlap)
        return [Document(page_content=t, metadata={"id": i}) for i, t in ranked[:2]]


prompt = ChatPromptTemplate.from_messages(
    [("system", "Use the context."), ("human", "{context}\nQuestion: {query}")]
)
llm = FakeListChatModel(responses=[f"Answer {n}." for n in range(len(questions))])
stuff = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
chain = (
    RunnablePassthrough.assign(docs=itemgetter("query") | Retriever())
    | RunnablePassthrough.assign(context=itemgetter("docs") | stuff)
    | RunnablePassthrough.assign(result=prompt | llm | StrOutputParser())
    | RunnableLambda(lambda x: {"result": x["result"]})
).with_config(run_name="RetrievalQA")
client = Client(api_url=url, api_key="test", auto_batch_tracing=False)
tracer = LangChainTracer(project_name=project, client=client)
seen = []
for question in questions:
    out = chain.invoke({"query": question}, config={"callbacks": [tracer]})
    docs = Retriever().invoke(question)
    contexts = [d.page_content for d in docs]
    ids = [d.metadata["id"] for d in docs]
    seen.append(
        {"question": question, "answer": out["result"], "contexts": contexts,
         "context_document_ids": ids}
    )
tracer.wait_for_futures()
client.flush()
print(json.dumps(seen))
"""


def test_a_langchain_core_chain_traced_by_langchains_tracer(
    capture: CaptureServer, tmp_path: Path
) -> None:
    """A real langchain-core chain shaped as `RetrievalQA` (root `inputs.query`,
    `outputs.result`, the LLM run's messages LangChain-serialised with the stuffed prompt),
    traced by `LangChainTracer` (langchain-core 1.8 in ragas's environment, langsmith 0.15):
    one row per question, the chain's question and answer, the retriever's documents."""
    project = "langchain-core"
    questions = list(QUESTIONS)[:2]
    out = run_peer(
        "ragas",
        LANGCHAIN_PIPELINE,
        capture.url,
        project,
        json.dumps(questions),
        json.dumps(DOCUMENTS),
    )
    seen = json.loads(out.strip().splitlines()[-1])
    client = Client(api_url=capture.url, api_key="test", auto_batch_tracing=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        runs = list(client.list_runs(project_id=capture.project_id(project)))
    assert {"chain", "retriever", "prompt", "llm", "parser"} <= {r.run_type for r in runs}
    path = tmp_path / "langchain.jsonl"
    path.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    read = read_traces_report(path, "langsmith")
    assert read.skipped.height == 0, read.skipped
    columns = ["question", "answer", "contexts", "context_document_ids"]
    got = sorted(read.rows.select(columns).to_dicts(), key=str)
    assert got == sorted(seen, key=str)


def _one_trace_edited(
    exported: dict[str, Any], path: Path, edit: dict[str, dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """The first question's trace of the real export, its runs of each run type in `edit`
    (`"root"` for the root) given those fields."""
    first = exported["seen"][0]
    runs = [json.loads(line) for line in exported["path"].read_text().splitlines()]
    trace = [r for r in runs if r["trace_id"] == first["trace_id"]]
    for run in trace:
        key = "root" if run["parent_run_id"] is None else run["run_type"]
        run.update(edit.get(key, {}))
    path.write_text("".join(json.dumps(r) + "\n" for r in trace))
    return path, first


def test_documents_without_text_dropped_and_scores_alike_in_both_paths(
    exported: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document whose `page_content` is null is no context (as OpenInference drops such
    documents), and a `metadata.score` that is not a number (`true`) is no score, whether the
    batch is decoded by Polars or read per run in Python."""
    from ragframe.inputs.traces import langsmith

    docs = [
        {"page_content": None, "metadata": {"id": "x", "score": 0.9}},
        {"page_content": "b", "metadata": {"id": "y", "score": True}},
        {"page_content": "c", "metadata": {"id": "z", "score": 0.5}},
        {"content": None, "metadata": {"id": "w"}},
    ]
    outputs = json.dumps({"documents": docs})
    expected = [
        {"content": "b", "id": "y", "score": None},
        {"content": "c", "id": "z", "score": 0.5},
    ]
    assert langsmith.documents_of(outputs) == expected
    fast = langsmith._documents_fast(pl.Series([outputs]))
    assert fast is not None and fast.to_list() == [expected]
    edit = {"retriever": {"outputs": {"documents": docs}}}
    path, first = _one_trace_edited(exported, tmp_path / "docs.jsonl", edit)
    for per_run in (False, True):
        if per_run:
            monkeypatch.setattr(langsmith, "_documents_fast", lambda _: None)
        row = read_traces_report(path, "langsmith").rows.row(0, named=True)
        assert row["question"] == first["question"]
        assert row["contexts"] == ["b", "c"], per_run
        assert row["context_document_ids"] == ["y", "z"], per_run
        assert row["context_scores"] == [None, 0.5], per_run


def test_tokens_as_floats_and_times_as_epoch_numbers(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    """Token counts written as floats (`12.0`) are counts, and start / end times written as
    epoch numbers (seconds, milliseconds) are times, not nulls."""
    from datetime import UTC, datetime

    start = datetime(2026, 11, 26, 10, 0, 0, 500000, tzinfo=UTC)
    edit = {
        "root": {"start_time": start.timestamp(), "end_time": start.timestamp() * 1000 + 1500},
        "llm": {
            "prompt_tokens": 12.0,
            "completion_tokens": 3.0,
            "total_tokens": 15.0,
            "outputs": {"choices": [{"message": {"content": "x"}}]},
        },
    }
    path, first = _one_trace_edited(exported, tmp_path / "numbers.jsonl", edit)
    read = read_traces_report(path, "langsmith")
    row = read.rows.row(0, named=True)
    assert (row["question"], row["answer"]) == (first["question"], first["answer"])
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (12, 3, 15)
    assert row["start_time"] == start
    assert row["latency_ms"] == 1500


def test_a_run_with_no_id_is_marked_for_skipping() -> None:
    """The reader gives a run with no `id` (missing, null or empty) its skipped reason, which
    `assemble` lists (the span frame's `skip_reason`); a run with an id has none."""
    from ragframe.inputs.traces.langsmith import NO_ID, scan_runs

    base = {"trace_id": "t", "run_type": "chain", "inputs": {"question": "q"}}
    runs = [{**base, "id": "r1"}, base, {**base, "id": None}, {**base, "id": ""}]
    lines = pl.LazyFrame({"n": [1, 2, 3, 4], "line": [json.dumps(r) for r in runs]})
    spans = scan_runs(lines).collect()
    assert spans["skip_reason"].to_list() == [None, NO_ID, NO_ID, NO_ID]


def test_a_run_with_no_id_forms_no_row_and_is_listed(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    """A run with no `id` (missing, null or empty) would form a row with no span id, whose
    scores could never go back: it is skipped and listed ("run has no id") with its trace
    and line, and the other traces read as before."""
    runs = [json.loads(line) for line in exported["path"].read_text().splitlines()]
    roots = [i for i, r in enumerate(runs) if r["parent_run_id"] is None]
    gone = {runs[roots[0]]["trace_id"]: roots[0], runs[roots[1]]["trace_id"]: roots[1]}
    del runs[roots[0]]["id"]
    runs[roots[1]]["id"] = None
    path = tmp_path / "no-id.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    read = read_traces_report(path, "langsmith")
    assert read.rows["span_id"].null_count() == 0
    assert set(read.rows["trace_id"]) == {s["trace_id"] for s in exported["seen"]} - set(gone)
    listed = read.skipped.filter(pl.col("reason") == "run has no id")
    assert sorted(listed.select("trace_id", "span_id", "line").rows()) == sorted(
        (trace, None, i + 1) for trace, i in gone.items()
    )
