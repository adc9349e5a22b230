"""Finding and choosing metrics (issue 11): the catalogue as a frame and on the command line,
and `metrics="all"` that scores what the inputs allow and says what it skipped."""

from __future__ import annotations

import json
import re

import polars as pl

import ragframe
from ragframe.cli import main
from ragframe.metrics import REGISTRY


def test_catalog_lists_every_metric_with_what_it_needs():
    table = ragframe.catalog()
    assert set(table["name"]) == {*REGISTRY, "g_eval", "ragas_score"}
    for entry in table.iter_rows(named=True):
        assert entry["description"] and entry["source"] and entry["requests_per_row"]
        assert entry["direction"] in ("higher", "lower")
    rows = {e["name"]: e for e in table.iter_rows(named=True)}
    assert rows["hallucination"]["direction"] == "lower"
    assert rows["context_recall"]["required_inputs"] == list(REGISTRY["context_recall"].requires)
    assert rows["context_recall_ids"]["uses_llm"] is False
    assert rows["g_eval"]["by_name"] is False


def test_metrics_command_prints_the_catalogue(capsys):
    assert main(["metrics", "--json"]) == 0
    names = [e["name"] for e in json.loads(capsys.readouterr().out)]
    assert names == ragframe.catalog()["name"].to_list()
    assert main(["metrics"]) == 0
    text = capsys.readouterr().out
    assert "hallucination  (lower is better" in text and "--metrics all" in text


def without_references() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "user_input": ["What is the capital of France?"],  # a ragas alias
            "response": ["Paris is the capital of France."],
            "retrieved_contexts": [["Paris is the capital and largest city of France."]],
        }
    )


#: The summary's one line of what "all" left out, context_recall among those needing a truth.
LEFT_OUT = re.compile(
    r"^skipped: (?:[^\n]*; )?[\w, ]*\bcontext_recall\b[\w, ]* \(needs ground_truth\)", re.M
)


def test_all_scores_what_the_inputs_allow_and_names_the_rest(server, judge):
    result = ragframe.run(without_references(), "all", judge=judge)
    scored = {m.name for m in result.metrics}
    needs_truth = {n for n, cls in REGISTRY.items() if "ground_truth" in cls.requires}
    assert needs_truth and not scored & needs_truth
    assert {"faithfulness", "answer_relevancy", "hallucination"} <= scored
    skipped = result.summary()["skipped_metrics"]
    assert set(skipped) == set(REGISTRY) - scored | {"g_eval"}
    assert skipped["context_recall"] == "needs ground_truth"
    assert LEFT_OUT.search(str(result))
    assert all(result.frame[m].null_count() == 0 for m in scored)


def test_metrics_all_on_the_command_line(server, tmp_path, capsys):
    source, target = tmp_path / "log.jsonl", tmp_path / "out.parquet"
    without_references().write_ndjson(source)
    argv = ["score", str(source), "-o", str(target), "--metrics", "all", "--no-cache"]
    argv += ["--model", "fake-judge", "--base-url", server.base_url, "--no-progress"]
    argv += ["--embedding-model", "fake-embedding"]
    assert main(argv) == 0
    assert LEFT_OUT.search(capsys.readouterr().out)
    assert "faithfulness" in pl.read_parquet(target).columns
