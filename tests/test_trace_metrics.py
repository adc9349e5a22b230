"""Metric choice on imports (issue 27): `--metrics all` scores only the metrics whose inputs
some row has a value for (a column in the schema is not enough: a trace export has no ground
truth) on every path (a frame, a file streamed, `--from`, `--sample`) and says which it left
out and why; on the command line a metric named whose input no row of the log has is refused
before any request."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import polars as pl
import pytest
from openinference.semconv.trace import DocumentAttributes, SpanAttributes

import ragframe
from ragframe.cli import main
from ragframe.engine.prepare import inputs_with_values
from ragframe.errors import ConfigError
from ragframe.metrics import REGISTRY
from ragframe.testing.server import FakeServer

os.environ["LANGSMITH_TRACING"] = "false"

QUESTIONS = ["What is X?", "Where is Y?", "Who made Z?"]
ANSWERS = ["X is a letter.", "Y is in the alphabet.", "Z was made by people."]
DOCS = [["X is a letter of the alphabet."], ["Y comes after X."], ["People made Z long ago."]]
#: The metrics whose every row fails (missing input) on a log without a ground truth.
NEED_TRUTH = {n for n, cls in REGISTRY.items() if "ground_truth" in cls.requires}


def openinference_export(path: Path) -> Path:
    """An OpenInference span export (the SDK's to_json() layout) of a traced RAG pipeline:
    a chain with the question and answer, a retriever with its documents; no ground truth."""
    iv, ov = SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE
    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    lines = []
    for i, (question, answer, docs) in enumerate(zip(QUESTIONS, ANSWERS, DOCS, strict=True)):
        trace = f"{i + 1:x}" * 32
        spans = [
            ("r", None, {kind: "CHAIN", iv: question, ov: answer}),
            ("d", "r", {kind: "RETRIEVER", iv: question}),
        ]
        for j, text in enumerate(docs):
            prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{j}."
            spans[1][2][prefix + DocumentAttributes.DOCUMENT_CONTENT] = text
            spans[1][2][prefix + DocumentAttributes.DOCUMENT_ID] = f"doc{i}-{j}"
        for n, (name, parent, attributes) in enumerate(spans):
            lines.append(
                {
                    "name": name,
                    "context": {"trace_id": f"0x{trace}", "span_id": f"0x{name * 16}{i}"[:18]},
                    "parent_id": f"0x{parent * 16}{i}"[:18] if parent else None,
                    "start_time": f"2024-05-01T10:00:{n:02d}.000000Z",
                    "end_time": f"2024-05-01T10:00:{n + 1:02d}.000000Z",
                    "attributes": attributes,
                }
            )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def langsmith_export(path: Path) -> Path:
    """LangSmith runs as its client's `Run` schema serialises them (RunTree, no network)."""
    from langsmith.run_trees import RunTree
    from langsmith.schemas import Run

    fields = set(Run.model_fields)
    lines = []
    for question, answer, docs in zip(QUESTIONS, ANSWERS, DOCS, strict=True):
        root = RunTree(name="rag", run_type="chain", inputs={"question": question})
        retriever = root.create_child(
            name="retrieve", run_type="retriever", inputs={"query": question}
        )
        documents = [{"page_content": t, "metadata": {}, "type": "Document"} for t in docs]
        retriever.end(outputs={"documents": documents})
        root.end(outputs={"answer": answer})
        for tree in (root, retriever):
            data = {k: v for k, v in tree.model_dump().items() if k in fields}
            data.pop("child_runs", None)
            data["trace_id"] = tree.trace_id
            lines.append(Run(**data).model_dump_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def judge_args(server: FakeServer) -> list[str]:
    return [
        "--model", "fake-judge", "--base-url", server.base_url,
        "--embedding-model", "fake-embedding", "--no-cache", "--no-progress",
    ]  # fmt: skip


def logged_rows(truth: list[str | None]) -> pl.DataFrame:
    """A log as older ragframe imports wrote it: a ground_truth column, every value null."""
    return pl.DataFrame(
        {"question": QUESTIONS, "answer": ANSWERS, "contexts": DOCS, "ground_truth": truth},
        schema_overrides={"ground_truth": pl.String},
    )


@pytest.mark.parametrize("form", ["openinference", "langsmith"])
def test_all_on_an_export_scores_only_what_the_rows_allow_and_says_what_it_left_out(
    form: str, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = openinference_export if form == "openinference" else langsmith_export
    export, out = build(tmp_path / f"{form}.jsonl"), tmp_path / "out.parquet"
    argv = ["score", str(export), "--from", form, "-o", str(out), "--metrics", "all"]
    assert main([*argv, *judge_args(server)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("--metrics all left out"))
    for name in NEED_TRUTH:
        assert name in line
    assert "rubric_score (needs ground_truth" in line  # (no column, or no value: either)
    scored = pl.read_parquet(out)
    assert scored.height == len(QUESTIONS)
    assert not NEED_TRUTH & set(scored.columns)
    chosen = [n for n in REGISTRY if n in scored.columns]
    assert {"faithfulness", "answer_relevancy", "context_precision_without_reference"} <= set(
        chosen
    )
    for name in chosen:  # every metric chosen scores every row
        assert scored[name].null_count() == 0, scored[f"{name}_detail"].to_list()
    run = json.loads(pl.read_parquet_metadata(out)["ragframe"])
    assert run["run"]["metrics"] == "all"
    assert set(run["summary"]["skipped_metrics"]) >= NEED_TRUTH


@pytest.mark.parametrize("form", ["openinference", "langsmith"])
def test_a_named_metric_no_converted_row_has_inputs_for_is_refused_before_any_request(
    form: str, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = openinference_export if form == "openinference" else langsmith_export
    export, out = build(tmp_path / f"{form}.jsonl"), tmp_path / "out.parquet"
    argv = ["score", str(export), "--from", form, "-o", str(out)]
    argv += ["--metrics", "faithfulness,context_precision", *judge_args(server)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "context_precision needs ground_truth, which no row of " in err[0]
    assert str(export) in err[0] and "context_precision_without_reference" in err[0]
    assert server.count() == 0 and server.count("/embeddings") == 0
    assert not out.exists()


@pytest.mark.parametrize("suffix", ["parquet", "jsonl", "csv"])
def test_a_log_with_an_all_null_ground_truth_column_gets_the_same_choice(
    suffix: str, server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, out = tmp_path / f"rows.{suffix}", tmp_path / "out.parquet"
    rows = logged_rows([None, None, None])
    if suffix == "parquet":
        rows.write_parquet(log)
    elif suffix == "jsonl":
        rows.write_ndjson(log)
    else:
        texts = pl.Series("contexts", [json.dumps(c) for c in DOCS])
        rows.with_columns(texts).write_csv(log)
    base = ["score", str(log), "-o", str(out), *judge_args(server)]
    assert main([*base, "--metrics", "context_precision"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"context_precision needs ground_truth, which no row of {log} has; drop it or use "
        "context_precision_without_reference. Nothing was sent."
    ), err
    assert server.count() == 0
    assert main([*base, "--metrics", "all"]) == 0
    assert "--metrics all left out: context_precision" in capsys.readouterr().out
    assert not NEED_TRUTH & set(pl.read_parquet(out).columns)


def test_sample_and_dry_run_choose_from_the_whole_log(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, out = tmp_path / "rows.parquet", tmp_path / "out.parquet"
    # One row in three has a ground truth: the log has the input, so nothing is left out.
    logged_rows([None, None, "X is a letter."]).write_parquet(log)
    base = ["score", str(log), "-o", str(out), *judge_args(server), "--metrics", "all"]
    assert main([*base, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "ground_truth" not in printed.split("left out:")[1].split("\n")[0]
    logged_rows([None, None, None]).write_parquet(log)
    # The dry run counts what the run will score: the metrics the rows can feed.
    assert main([*base, "--dry-run"]) == 0
    estimate = [x for x in capsys.readouterr().out.splitlines() if x.startswith("estimate")]
    can = [
        n for n, cls in REGISTRY.items() if set(cls.requires) <= {"question", "answer", "contexts"}
    ]
    assert main([*base[:-1], ",".join(can), "--dry-run"]) == 0
    assert estimate == [x for x in capsys.readouterr().out.splitlines() if x.startswith("estimate")]
    assert main([*base, "--sample", "2"]) == 0
    assert "context_recall" in capsys.readouterr().out.split("left out:")[1]
    assert set(pl.read_parquet(out).columns) & set(REGISTRY) == set(can)
    sent = server.count()
    assert main([*base[:-1], "context_recall", "--sample", "2", "--overwrite"]) == 2
    assert "context_recall needs ground_truth" in capsys.readouterr().err
    assert server.count() == sent


def test_the_python_api_records_what_all_left_out_and_why(
    server: FakeServer, judge: ragframe.Judge
) -> None:
    rows = logged_rows([None, "  ", None])  # blank is no value either
    result = ragframe.run(rows, "all", judge=judge)
    skipped = result.extra["skipped_metrics"]
    assert set(skipped) >= NEED_TRUTH and not NEED_TRUTH & {m.name for m in result.metrics}
    assert skipped["context_recall"] == "needs ground_truth, which no row has a value for"
    line = next(li for li in str(result).splitlines() if li.startswith("skipped: "))
    assert "context_recall" in line.split("(needs ground_truth, which no row")[0]
    # A frame without the column keeps the old reason.
    without = ragframe.run(rows.drop("ground_truth"), "all", judge=judge)
    assert without.extra["skipped_metrics"]["context_recall"] == "needs ground_truth"
    # Nothing to score is one line naming the columns and what has values.
    blank = rows.select("question", pl.lit(None, pl.List(pl.String)).alias("contexts"))
    with pytest.raises(ConfigError, match=r"inputs with a value in some row: \['question'\]"):
        ragframe.run(blank, "all", judge=judge)
    # Named, in Python, each row is what it scores alone: null, "missing input", nothing sent.
    sent = server.count()
    named = ragframe.run(rows, ["context_recall"], judge=judge).frame
    assert named["context_recall"].null_count() == rows.height and server.count() == sent


def test_what_counts_as_a_value(tmp_path: Path) -> None:
    frame = pl.DataFrame(
        {
            "question": ["", " \u200b", None],
            "contexts": [[], ["", " "], None],
            "ground_truth": [None, None, "t"],
            "reference_contexts": [None, ["r"], []],
        },
        schema_overrides={"question": pl.String, "reference_contexts": pl.List(pl.String)},
    )
    needed = {"question", "contexts", "ground_truth", "reference_contexts", "answer"}
    expected = {"ground_truth", "reference_contexts"}
    assert inputs_with_values(frame, needed) == expected
    assert inputs_with_values(frame.lazy(), needed) == expected
    path = tmp_path / "f.parquet"
    frame.write_parquet(path, row_group_size=1)
    assert inputs_with_values(path, needed) == expected
    frame.write_ndjson(tmp_path / "f.jsonl")
    assert inputs_with_values(tmp_path / "f.jsonl", needed) == expected
    lists = ("contexts", "reference_contexts")
    frame.with_columns(
        pl.col(c).map_elements(lambda v: json.dumps(list(v)), pl.String) for c in lists
    ).write_csv(tmp_path / "f.csv")
    assert inputs_with_values(tmp_path / "f.csv", needed) == expected
    # A ragas alias and columns= are read as the run reads them.
    renamed = frame.rename({"ground_truth": "reference", "question": "my_q"})
    assert inputs_with_values(renamed, needed, {"question": "my_q"}) == expected


def batches_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The heights of the batches the presence check reads, as it reads them."""
    import ragframe.engine.prepare as prepare

    read: list[int] = []
    batches = prepare._batches

    def counted(source: object, names: list[str]) -> object:
        for batch in batches(source, names):
            read.append(batch.height)
            yield batch

    monkeypatch.setattr(prepare, "_batches", counted)
    return read


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_a_log_is_read_only_until_every_input_is_found(
    suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragframe.engine.prepare as prepare

    monkeypatch.setattr(prepare, "PRESENCE_BATCH_ROWS", 2)
    read = batches_read(monkeypatch)
    rows = pl.concat([logged_rows([None, None, None])] * 4)  # 12 rows, no ground truth
    path = tmp_path / f"rows.{suffix}"
    rows.write_parquet(path) if suffix == "parquet" else rows.write_ndjson(path)
    needed = {"question", "answer", "contexts", "ground_truth"}
    # The all-null column is known from the statistics / the inferred Null type: one batch.
    assert inputs_with_values(path, needed) == needed - {"ground_truth"}
    assert read == [2]
    read.clear()
    late = rows.with_columns(
        pl.when(pl.int_range(pl.len()) == 11).then(pl.lit("t")).alias("ground_truth")
    )
    late.write_parquet(path) if suffix == "parquet" else late.write_ndjson(path)
    assert inputs_with_values(path, needed) == needed
    assert sum(read) == 12  # the value in the last row is found by reading to it


def test_a_parquet_log_is_read_from_its_first_rows_then_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRESENCE_FIRST_ROWS first (a log with its inputs stops there), then the rest in
    batches, never a row twice: 600 rows, ground truth only in row 500."""
    import ragframe.engine.prepare as prepare

    read = batches_read(monkeypatch)
    monkeypatch.setattr(prepare, "PRESENCE_BATCH_ROWS", 300)
    rows = pl.concat([logged_rows([None, None, None])] * 200)
    needed = {"question", "answer", "contexts", "ground_truth"}
    path = tmp_path / "rows.parquet"
    rows.with_columns(pl.lit("t").alias("ground_truth")).write_parquet(path)
    assert inputs_with_values(path, needed) == needed and read == [prepare.PRESENCE_FIRST_ROWS]
    read.clear()
    late = pl.when(pl.int_range(pl.len()) == 500).then(pl.lit("t")).alias("ground_truth")
    rows.with_columns(late).write_parquet(path)
    assert inputs_with_values(path, needed) == needed
    first = prepare.PRESENCE_FIRST_ROWS
    assert read == [first, 300 - first, 300]  # row 500 is in the last batch


def test_prepare_run_chooses_from_the_rows_it_is_given_not_the_schema(tmp_path: Path) -> None:
    """A path that validates on a file's schema (the streamed one) hands prepare_run the file
    (`rows=`), or the command line's measurement (`MeasuredAll`): both choose as the rows say."""
    from ragframe.engine.prepare import prepare_run
    from ragframe.engine.spec import RunSpec
    from ragframe.inputs.io import open_input
    from ragframe.metrics.catalog import MeasuredAll

    path = tmp_path / "rows.parquet"
    logged_rows([None, None, None]).write_parquet(path)
    log = open_input(path)
    judge = ragframe.Judge("m", base_url="http://127.0.0.1:9", api_key="k", embedding_model="e")
    have = {"question", "answer", "contexts"}
    schema_only = prepare_run(log.schema_frame(), RunSpec(metrics="all"), judge)
    assert {m.name for m in schema_only.metrics} >= NEED_TRUTH  # a column is all it sees
    for ready in (
        prepare_run(log.schema_frame(), RunSpec(metrics="all"), judge, rows=log),
        prepare_run(log.schema_frame(), RunSpec(metrics="all"), judge, rows=path),
        prepare_run(log.schema_frame(), RunSpec(metrics=MeasuredAll(have)), judge),
    ):
        assert not NEED_TRUTH & {m.name for m in ready.metrics}
        assert set(ready.extra["skipped_metrics"]) >= NEED_TRUTH
    carried = RunSpec(metrics=MeasuredAll(have))
    assert carried.metrics == "all" and carried.metadata("streamed")["metrics"] == "all"
    again = pickle.loads(pickle.dumps(carried))  # a spec handed to another process
    assert again.metrics == "all" and again.metrics.have == have
    assert json.dumps(carried.metadata("streamed")["metrics"]) == '"all"'


def test_a_log_without_rows_is_judged_by_its_columns(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No row means nothing to send and nothing to refuse: the columns decide, as before."""
    empty = logged_rows([None, None, None]).head(0)
    needed = {"question", "answer", "contexts", "ground_truth"}
    assert inputs_with_values(empty, needed) == needed
    log, out = tmp_path / "empty.parquet", tmp_path / "out.parquet"
    empty.write_parquet(log)
    assert inputs_with_values(log, needed) == needed
    argv = ["score", str(log), "-o", str(out), *judge_args(server)]
    assert main([*argv, "--metrics", "context_precision"]) == 0
    assert pl.read_parquet(out).height == 0 and "context_precision" in pl.read_parquet(out).columns
    assert server.count() == 0


def test_score_file_chooses_all_by_the_rows_values_too(
    judge: ragframe.Judge, tmp_path: Path
) -> None:
    """The streamed path called from Python sees the file's schema only; "all" is still
    chosen by the values its rows have (an all-null ground_truth counts as absent)."""
    from ragframe.engine.stream import score_file

    source, out = tmp_path / "log.parquet", tmp_path / "out.parquet"
    logged_rows([None, None, None]).write_parquet(source)
    result = score_file(source, out, "all", judge=judge)  # type: ignore[arg-type]
    scored = {m.name for m in result.metrics}
    assert scored and not scored & NEED_TRUTH
    assert set(result.extra["skipped_metrics"]) >= NEED_TRUTH


def test_a_ray_run_measures_its_partitions_and_refuses_before_ray_starts(
    server: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--ray` reads a directory of Parquet files: "all" counts an input a row of any file
    has (here only the second file's), and a named metric no file can feed is refused before
    Ray is started or anything is sent."""

    from ragframe.cli.score import chosen_metrics
    from ragframe.engine.spec import RunSpec

    parts = tmp_path / "parts"
    parts.mkdir()
    logged_rows([None, None, None]).write_parquet(parts / "a.parquet")
    logged_rows([None, "Paris.", None]).write_parquet(parts / "b.parquet")
    files = [str(parts / "a.parquet"), str(parts / "b.parquet")]
    _, have, skipped, _ = chosen_metrics(files, RunSpec.of("all"))
    assert have is not None and "ground_truth" in have and not set(skipped) & NEED_TRUTH
    _, have, skipped, _ = chosen_metrics(files[:1], RunSpec.of("all"))
    assert have is not None and "ground_truth" not in have and set(skipped) >= NEED_TRUTH

    (parts / "b.parquet").unlink()
    argv = ["score", str(parts), "--ray", "local", "-o", str(tmp_path / "out"), "--metrics"]
    assert main([*argv, "context_recall", *judge_args(server)]) == 2
    assert "context_recall needs ground_truth" in capsys.readouterr().err
    assert server.count() == 0
