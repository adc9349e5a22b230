"""ragas and deepeval datasets as the tools' own save methods write them, read back by ragframe.

Each tool runs in its own environment (`run_peer`), builds the records below with its own
classes and saves them with each of its save methods; ragframe reads every file here. A row
must equal its record: question, answer, contexts in order, ground truth, and every other
field the tool wrote, under its own name. The tool's blocks of docs/traces/ragas-deepeval.md
run here too, in the tool's environment, then the page's ragframe commands on what they wrote.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from real_tools import QUIET, peer_python, run_peer
from test_docs import blocks, commands

from ragframe.cli import main
from ragframe.inputs.traces import detect_format, read_traces, read_traces_report
from ragframe.inputs.traces.datasets import KNOWN_FIELDS
from ragframe.testing.server import FakeServer

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "traces" / "ragas-deepeval.md"
TRACE_COLUMNS = {"trace_id", "span_id", "start_time", "end_time", "latency_ms", "model_name"}
TRACE_COLUMNS |= {"prompt_tokens", "completion_tokens", "total_tokens", "retrievals"}
KINDS = ("json", "jsonl", "csv")

#: What the pipeline saw, as ragas's SingleTurnSample fields: quotes, commas, `|`, a newline,
#: non-ASCII text; the last sample has no response (ragas's CSV takes its columns from the
#: first record, so a sparser record goes last).
RAGAS_SAMPLES: list[dict[str, Any]] = [
    {
        "user_input": "What is X?",
        "retrieved_contexts": ["X is Y.", 'Y, it\'s "Z" | W.'],
        "reference_contexts": ["X is Y."],
        "retrieved_context_ids": ["d1", "d2"],
        "reference_context_ids": ["d1"],
        "response": "X is Y.",
        "multi_responses": ["X is Y.", "Y."],
        "reference": "X is Y.",
        "rubrics": {"score1_description": "wrong", "score5_description": "right"},
        "persona_name": "analyst",
        "query_style": "formal",
        "query_length": "short",
    },
    {
        "user_input": "Où est W ?",
        "retrieved_contexts": ["W is in V.\nV is far.", "[not a list]", "V."],
        "reference_contexts": ["W is in V."],
        "retrieved_context_ids": ["d3", "d4", "d5"],
        "reference_context_ids": ["d3", "d9"],
        "response": "In V, « far ».",
        "multi_responses": ["In V."],
        "reference": "W is in V.",
        "rubrics": {"score1_description": "no"},
        "persona_name": "novice",
        "query_style": "casual",
        "query_length": "medium",
    },
    {
        "user_input": "Unanswered?",
        "retrieved_contexts": ["Nothing."],
        "reference_contexts": ["Nothing."],
        "retrieved_context_ids": ["d6"],
        "reference_context_ids": ["d6"],
        "multi_responses": ["-"],
        "reference": "No answer.",
        "rubrics": {"score1_description": "x"},
        "persona_name": "novice",
        "query_style": "casual",
        "query_length": "short",
    },
]

RAGAS_WRITER = """
import json, sys
from pathlib import Path
from ragas import EvaluationDataset, SingleTurnSample

out = Path(sys.argv[1])
ds = EvaluationDataset(samples=[SingleTurnSample(**s) for s in json.loads(sys.argv[2])])
frame = ds.to_pandas()
hf = ds.to_hf_dataset()
ds.to_jsonl(out / "to_jsonl.jsonl")
ds.to_csv(out / "to_csv.csv")
(out / "to_list.json").write_text(json.dumps(ds.to_list()))
frame.to_parquet(out / "pandas.parquet")
frame.to_json(out / "pandas_columns.json")
frame.to_json(out / "pandas_records.json", orient="records")
frame.to_json(out / "pandas_lines.jsonl", orient="records", lines=True)
frame.to_json(out / "pandas_index.json", orient="index")
frame.to_csv(out / "pandas.csv", index=False)
frame.to_csv(out / "pandas_index.csv")
hf.to_parquet(str(out / "hf.parquet"))
hf.to_json(str(out / "hf.jsonl"))
hf.to_csv(str(out / "hf.csv"), index=False)
# ragas's Dataset with a local backend (a folder of datasets/<name>.jsonl or .csv)
from ragas import Dataset
for backend in ("local/jsonl", "local/csv"):
    table = Dataset("golden", backend, data_model=SingleTurnSample, root_dir=str(out / "backend"))
    for sample in ds:
        table.append(sample)
    table.save()
print(json.dumps(list(SingleTurnSample.model_fields)))
"""
RAGAS_FILES = (
    "to_jsonl.jsonl",
    "to_csv.csv",
    "to_list.json",
    "pandas.parquet",
    "pandas_columns.json",
    "pandas_records.json",
    "pandas_lines.jsonl",
    "pandas_index.json",
    "pandas.csv",
    "pandas_index.csv",
    "hf.parquet",
    "hf.jsonl",
    "hf.csv",
    "backend/datasets/golden.jsonl",
    "backend/datasets/golden.csv",
)

#: deepeval goldens as a user fills them: before the run (context, no output) and after it
#: (actual_output and retrieval_context on the golden).
DEEPEVAL_GOLDENS: list[dict[str, Any]] = [
    {
        "input": "What is X?",
        "expected_output": "X is Y.",
        "context": ["X is Y.", 'Y, it\'s "Z".'],
        "name": "g1",
        "comments": "checked by hand",
        "source_file": "kb/x.md",
        "additional_metadata": {"topic": "x", "level": 2},
        "custom_column_key_values": {"team": "search"},
    },
    {
        "input": "Où est W ?",
        "actual_output": "In V.",
        "expected_output": "W is in V.",
        "retrieval_context": ["W is in V.", "V is far.\nVery."],
        "context": ["W is in V."],
        "name": "g2",
    },
    # Empty lists, which deepeval's JSON Lines and CSV write as "" (an empty cell).
    {
        "input": "Q3",
        "actual_output": "A3",
        "retrieval_context": [],
        "context": ["ctx three"],
        "name": "g3",
    },
    {"input": "Q4", "actual_output": "A4", "retrieval_context": ["r4"], "context": []},
]
#: deepeval LLMTestCases (saved as goldens by `save_as(..., include_test_cases=True)`).
DEEPEVAL_CASES: list[dict[str, Any]] = [
    {
        "input": "What is X?",
        "actual_output": "X is Y.",
        "expected_output": "X is Y.",
        "retrieval_context": ["X is Y.", "Y, it's Z."],
        "context": ["X is Y."],
        "additional_metadata": {"run": 7},
    },
    {
        "input": "Where is W?",
        "actual_output": "In V.",
        "retrieval_context": ["W is in V."],
    },
]

DEEPEVAL_WRITER = """
import json, sys
from deepeval.dataset import EvaluationDataset, Golden
from deepeval.test_case import LLMTestCase

out = sys.argv[1]
goldens = EvaluationDataset(goldens=[Golden(**g) for g in json.loads(sys.argv[2])])
cases = EvaluationDataset()
for case in json.loads(sys.argv[3]):
    cases.add_test_case(LLMTestCase(**case))
for kind in ("json", "jsonl", "csv"):
    goldens.save_as(kind, out, file_name="goldens")
    cases.save_as(kind, out, file_name="cases", include_test_cases=True)
"""


@pytest.fixture(scope="module")
def ragas_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ragas")
    fields = run_peer("ragas", RAGAS_WRITER, str(out), json.dumps(RAGAS_SAMPLES))
    (out / "model_fields.json").write_text(fields.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def deepeval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deepeval")
    run_peer(
        "deepeval",
        DEEPEVAL_WRITER,
        out.as_posix(),
        json.dumps(DEEPEVAL_GOLDENS),
        json.dumps(DEEPEVAL_CASES),
    )
    return out


def _objects(text: str | None) -> Any:
    """An object column's JSON text, with the null keys some writers add (a Parquet / Arrow
    struct holds every key of the column in every row) left out."""
    if text is None:
        return None
    return {k: v for k, v in json.loads(text).items() if v is not None}


def _source_fields(path: Path) -> set[str]:
    if path.suffix == ".csv":
        return set(pl.read_csv(path, n_rows=0).columns)
    if path.suffix == ".parquet":
        return set(pl.read_parquet_schema(path))
    text = path.read_text()
    try:
        data = json.loads(text)
    except ValueError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = list(data.values()) if "user_input" not in data else [data]
    return {k for record in data for k in record}


@pytest.mark.parametrize("name", RAGAS_FILES)
def test_ragas_dataset_from_each_save_method(ragas_dir: Path, name: str) -> None:
    path = ragas_dir / name
    read = read_traces_report(path, "ragas")
    assert read.skipped.height == 0
    rows = read.rows
    mapped = {
        "user_input": "question",
        "response": "answer",
        "retrieved_contexts": "contexts",
        "reference": "ground_truth",
    }
    expected_columns = [mapped.get(k, k) for k in RAGAS_SAMPLES[0]]
    assert sorted(rows.columns) == sorted([*expected_columns, "note"]), rows.columns
    assert not TRACE_COLUMNS & set(rows.columns)
    assert rows.schema["retrieved_context_ids"] == pl.List(pl.String)
    assert rows.schema["multi_responses"] == pl.List(pl.String)
    for row, sample in zip(rows.iter_rows(named=True), RAGAS_SAMPLES, strict=True):
        for field, value in sample.items():
            got = row[mapped.get(field, field)]
            assert (_objects(got) if field == "rubrics" else got) == value, (name, field)
        no_answer = "response" not in sample
        assert row["answer"] is None if no_answer else row["answer"] == sample["response"]
        assert row["note"] == ("no answer in the dataset" if no_answer else None)
    assert rows.height == len(RAGAS_SAMPLES)


def test_ragas_files_are_detected_as_ragas(ragas_dir: Path) -> None:
    """Every file ragas writes by default is told apart without --from (the Parquet file was
    detected, then read as JSON Lines and refused)."""
    for name in ("to_jsonl.jsonl", "to_csv.csv", "to_list.json", "pandas.parquet", "hf.parquet"):
        path = ragas_dir / name
        assert detect_format(path) == "ragas", name
        rows = read_traces(path, on_skip="raise").collect()
        assert rows["question"].to_list() == [s["user_input"] for s in RAGAS_SAMPLES], name


@pytest.mark.parametrize("name", ["to_jsonl.jsonl", "to_csv.csv", "pandas.parquet"])
def test_ragas_fields_are_all_known(ragas_dir: Path, name: str) -> None:
    """The canary: a field ragas writes that the reader was never checked against fails here,
    whether the samples above fill it or not (SingleTurnSample's own fields)."""
    assert _source_fields(ragas_dir / name) <= KNOWN_FIELDS["ragas"]
    fields = json.loads((ragas_dir / "model_fields.json").read_text())
    assert set(fields) == KNOWN_FIELDS["ragas"]


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv"])
def test_deepeval_goldens_from_each_save_as(deepeval_dir: Path, kind: str) -> None:
    """`retrieval_context: null` (a golden before the run) falls back to `context`, noted; an
    answered golden keeps its own retrieval_context; every field deepeval wrote is kept."""
    path = deepeval_dir / f"goldens.{kind}"
    assert _source_fields(path) <= KNOWN_FIELDS["deepeval"]
    rows = read_traces_report(path, "deepeval").rows
    assert not TRACE_COLUMNS & set(rows.columns)
    first, second, *_ = rows.iter_rows(named=True)
    g1, g2, *_ = DEEPEVAL_GOLDENS
    assert first["question"] == g1["input"] and first["answer"] is None
    assert first["contexts"] == g1["context"] == first["reference_contexts"]
    assert first["ground_truth"] == g1["expected_output"]
    assert "no answer in the dataset" in first["note"] and "context" in first["note"]
    for field in ("name", "comments", "source_file"):
        assert first[field] == g1[field], field
    assert json.loads(first["additional_metadata"]) == g1["additional_metadata"]
    assert json.loads(first["custom_column_key_values"]) == g1["custom_column_key_values"]
    assert second["answer"] == g2["actual_output"] and second["note"] is None
    assert second["contexts"] == g2["retrieval_context"]
    assert second["reference_contexts"] == g2["context"]
    assert second["name"] == "g2" and second["comments"] is None
    # Columns deepeval wrote with no value in any row (tools, tokens) add nothing.
    assert not {"tools_called", "expected_tools", "token_cost", "expectations"} & set(rows.columns)


def test_deepeval_empty_lists_read_alike_from_each_save_as(deepeval_dir: Path) -> None:
    """An empty retrieval_context falls back to context whatever the file (JSON Lines wrote it
    as "", read as [""], and the fallback was skipped); an empty context is none alike."""
    read = {k: read_traces_report(deepeval_dir / f"goldens.{k}", "deepeval") for k in KINDS}
    for kind, report in read.items():
        assert report.skipped.height == 0, kind
        rows = report.rows
        assert rows["question"].to_list() == [g["input"] for g in DEEPEVAL_GOLDENS], kind
        assert rows["contexts"].to_list()[2:] == [["ctx three"], ["r4"]], kind
        assert rows["reference_contexts"].to_list()[2:] == [["ctx three"], None], kind
        assert "context" in rows["note"][2] and rows["note"][3] is None, kind
    assert read["jsonl"].rows.equals(read["json"].rows)
    assert read["csv"].rows.equals(read["json"].rows)


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv"])
def test_deepeval_test_cases_from_each_save_as(deepeval_dir: Path, kind: str) -> None:
    path = deepeval_dir / f"cases.{kind}"
    assert _source_fields(path) <= KNOWN_FIELDS["deepeval"]
    rows = read_traces_report(path, "deepeval").rows
    assert rows["question"].to_list() == [c["input"] for c in DEEPEVAL_CASES]
    assert rows["answer"].to_list() == [c["actual_output"] for c in DEEPEVAL_CASES]
    assert rows["contexts"].to_list() == [c["retrieval_context"] for c in DEEPEVAL_CASES]
    assert rows["ground_truth"].to_list() == [c.get("expected_output") for c in DEEPEVAL_CASES]
    assert rows["reference_contexts"].to_list() == [c.get("context") for c in DEEPEVAL_CASES]
    metadata = [None if m is None else json.loads(m) for m in rows["additional_metadata"]]
    assert metadata == [c.get("additional_metadata") for c in DEEPEVAL_CASES]
    assert "note" not in rows.columns


def test_deepeval_goldens_through_pandas_csv(deepeval_dir: Path, tmp_path: Path) -> None:
    """deepeval's JSON put through pandas' `to_csv` (lists as Python lists, not `|`-joined)."""
    pd = pytest.importorskip("pandas")
    path = tmp_path / "goldens.csv"
    pd.read_json(deepeval_dir / "goldens.json").to_csv(path, index=False)
    rows = read_traces_report(path, "deepeval").rows
    assert rows["contexts"].to_list() == [
        g.get("retrieval_context") or g["context"] for g in DEEPEVAL_GOLDENS
    ]
    assert rows["reference_contexts"].to_list() == [g["context"] or None for g in DEEPEVAL_GOLDENS]


def test_a_bad_line_costs_only_itself(ragas_dir: Path, tmp_path: Path) -> None:
    lines = (ragas_dir / "to_jsonl.jsonl").read_text().splitlines()
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([lines[0], '{"user_input": "cut', "[1, 2]", *lines[1:]]) + "\n")
    read = read_traces_report(path, "ragas")
    assert read.rows["question"].to_list() == [s["user_input"] for s in RAGAS_SAMPLES]
    assert read.skipped["line"].to_list() == [2, 3]
    assert read.skipped["reason"][1] == "line is not a JSON object"


# ---------------------------------------------------------------- scoring: --from = direct

NONLLM = "context_precision_nonllm,context_recall_nonllm,context_precision_ids,context_recall_ids"


def _score(server: FakeServer, source: Path, out: Path, *extra: str) -> pl.DataFrame:
    argv = [
        "score", str(source), "-o", str(out), "--metrics", f"faithfulness,{NONLLM}",
        "--model", "fake-judge", "--base-url", server.base_url, "--no-cache", "--no-progress",
        *extra,
    ]  # fmt: skip
    assert main(argv) == 0
    return pl.read_parquet(out)


@pytest.mark.parametrize("name", ["to_jsonl.jsonl", "to_csv.csv", "pandas.parquet", "hf.csv"])
def test_from_ragas_scores_as_the_file_read_directly(
    ragas_dir: Path, name: str, tmp_path: Path, server: FakeServer, monkeypatch: Any
) -> None:
    """`--from ragas` kept ragas's reference_contexts and context ids (the non-LLM metrics
    need them): it scores every file as ragframe scores ragas's JSON Lines read directly."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    direct = _score(server, ragas_dir / "to_jsonl.jsonl", tmp_path / "direct.parquet")
    imported = _score(server, ragas_dir / name, tmp_path / "from.parquet", "--from", "ragas")
    metrics = ["faithfulness", *NONLLM.split(",")]
    assert imported.select(metrics).equals(direct.select(metrics))
    assert direct["context_recall_ids"].to_list() == [1.0, 0.5, 1.0]
    assert imported["multi_responses"].to_list() == direct["multi_responses"].to_list()


def test_ragas_csv_without_from_says_to_pass_it(
    ragas_dir: Path, tmp_path: Path, server: FakeServer, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    argv = [
        "score", str(ragas_dir / "to_csv.csv"), "-o", str(tmp_path / "o.parquet"),
        "--metrics", NONLLM, "--model", "m", "--base-url", server.base_url, "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--from ragas" in err, err
    assert "retrieved_contexts" in err and "row 1" in err


# ------------------------------------------------------------------ the page, executed


def _page_blocks() -> list[Any]:
    found = [b for b in blocks(PAGE.read_text()) if b.lang in ("python", "bash")]
    assert found and all(b.no_run for b in found), "every block of the page runs here"
    return found


def _tool_of(body: str) -> str | None:
    for tool in ("ragas", "deepeval"):
        if f"from {tool}" in body or f"import {tool}" in body:
            return tool
    return None


def test_the_page_runs_as_written(tmp_path: Path, server: FakeServer, monkeypatch: Any) -> None:
    """The tool's blocks run in the tool's own environment (in one folder), then each
    `ragframe` line on what they wrote, against the local server."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test")
    monkeypatch.setenv("RAGFRAME_MODEL", "fake-judge")
    monkeypatch.setenv("RAGFRAME_EMBEDDING_MODEL", "fake-embedding")
    monkeypatch.setenv("RAGFRAME_CACHE", str(tmp_path / "cache.sqlite3"))
    monkeypatch.chdir(tmp_path)
    ran = {"ragas": 0, "deepeval": 0, "ragframe": 0}
    for block in _page_blocks():
        where = f"{PAGE.name}, block {block.number}"
        tool = _tool_of(block.body)
        if block.lang == "python":
            assert tool is not None, f"{where}: a Python block of neither tool"
            done = subprocess.run(
                [str(peer_python(tool)), "-c", block.body],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp_path,
                env={**os.environ, **QUIET},
                check=False,
            )
            assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
            ran[tool] += 1
            continue
        for line in commands(block.body):
            args = shlex.split(line, comments=True)
            assert args[0] == "ragframe", f"{where}: `{line}`"
            assert main(args[1:]) == 0, f"{where}: `{line}`"
            ran["ragframe"] += 1
    assert ran["ragas"] and ran["deepeval"] and ran["ragframe"] >= 2, ran


def test_a_column_named_as_ragframes_own_is_namespaced(tmp_path: Path) -> None:
    """A pandas frame of ragas's records with columns of the team's own: kept, the ones that
    would take one of ragframe's names as `ragas.<name>`; a CSV answer that looks like a list
    stays text."""
    path = tmp_path / "team.csv"
    pl.DataFrame(
        {
            "user_input": ["Q1", "Q2"],
            "response": ["[1, 2]", "['a']"],
            "retrieved_contexts": ["['c1', 'c2']", "[]"],
            "note": ["checked", None],
            "trace_id": ["t1", "t2"],
            "metadata": ["{'k': 1}", "{'k': 2}"],
            "team": ["search", "search"],
        }
    ).write_csv(path)
    rows = read_traces_report(path, "ragas").rows
    assert rows.columns == [
        "question", "answer", "contexts", "ragas.note", "ragas.trace_id", "ragas.metadata", "team"
    ]  # fmt: skip
    assert rows["answer"].to_list() == ["[1, 2]", "['a']"]
    assert rows["contexts"].to_list() == [["c1", "c2"], []]
    assert rows["ragas.note"].to_list() == ["checked", None]
    assert rows["ragas.metadata"].to_list() == ['{"k": 1}', '{"k": 2}']
