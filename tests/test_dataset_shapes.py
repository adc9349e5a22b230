"""ragas / deepeval dataset files of odd but valid shapes: one odd record never changes the
other rows, and a record that cannot form a row is skipped and listed with its line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ragframe.errors import InputError
from ragframe.inputs.traces import read_traces_report


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_plain_string_context_is_one_document(tmp_path: Path) -> None:
    """A record whose retrieved_contexts is one text reads as [text]; the others as they are
    (one string cell turned every row's contexts into single characters)."""
    path = _jsonl(
        tmp_path / "a.jsonl",
        [
            {"user_input": "Q1", "response": "A1", "retrieved_contexts": ["c1", "c2"]},
            {"user_input": "Q2", "response": "A2", "retrieved_contexts": "one context"},
            {"user_input": "Q3", "response": "A3", "retrieved_context_ids": "d7"},
        ],
    )
    rows = read_traces_report(path, "ragas").rows
    assert rows["contexts"].to_list() == [["c1", "c2"], ["one context"], []]
    assert rows["retrieved_context_ids"].to_list() == [None, None, ["d7"]]


def test_a_csv_cell_that_is_not_a_list_costs_no_other_row(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(
        "user_input,response,retrieved_contexts,retrieved_context_ids\n"
        "Q1,A1,\"['c1', 'c2']\",\"['d1', 'd2']\"\n"
        "Q2,A2,plain text,d3\n"
    )
    rows = read_traces_report(path, "ragas").rows
    assert rows["contexts"].to_list() == [["c1", "c2"], ["plain text"]]
    assert rows["retrieved_context_ids"].to_list() == [["d1", "d2"], ["d3"]]


def test_pandas_columns_json_keeps_the_frames_order_and_index(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "user_input": ["second q", "first q", "third q"],
            "response": ["a", "b", "c"],
            "retrieved_contexts": [["x"], ["y"], ["z"]],
        },
        index=["q2", "q10", "q1"],
    )
    for orient in ("columns", "index"):
        path = tmp_path / f"{orient}.json"
        frame.to_json(path, orient=orient)
        rows = read_traces_report(path, "ragas").rows
        assert rows["question"].to_list() == ["second q", "first q", "third q"], orient
        assert rows["contexts"].to_list() == [["x"], ["y"], ["z"]], orient
        assert rows["index"].to_list() == ["q2", "q10", "q1"], orient
    plain = frame.reset_index(drop=True)
    plain.to_json(tmp_path / "plain.json")
    rows = read_traces_report(tmp_path / "plain.json", "ragas").rows
    assert rows["question"].to_list() == ["second q", "first q", "third q"]
    assert "index" not in rows.columns


def test_a_non_object_in_a_json_array_is_skipped_with_its_line(tmp_path: Path) -> None:
    records = [
        {"input": "Q1", "actual_output": "A1", "retrieval_context": ["r1"]},
        None,
        {"input": "Q2", "actual_output": "A2", "retrieval_context": ["r2"]},
        "oops",
    ]
    path = tmp_path / "goldens.json"
    path.write_text(json.dumps(records, indent=2))
    read = read_traces_report(path, "deepeval")
    assert read.rows["question"].to_list() == ["Q1", "Q2"]
    assert read.rows["contexts"].to_list() == [["r1"], ["r2"]]
    lines = path.read_text().splitlines()
    assert read.skipped["line"].to_list() == [
        lines.index("  null,") + 1,
        lines.index('  "oops"') + 1,
    ]
    assert all("not a JSON object" in r for r in read.skipped["reason"])
    assert "element 2" in read.skipped["reason"][0]


def test_a_cut_json_file_says_where_it_ends(tmp_path: Path) -> None:
    records = [{"input": f"Q{i}", "actual_output": "A", "context": ["c"]} for i in range(3)]
    text = json.dumps(records, indent=4)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as caught:
        read_traces_report(path, "deepeval")
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "not valid JSON" in message and "line " in message and "column " in message
    assert "needs a" not in message


@pytest.mark.parametrize("field", ["user_input", "response"])
def test_a_list_question_or_answer_in_every_row_is_json_text(tmp_path: Path, field: str) -> None:
    records = [
        {"user_input": "Q1", "response": "A1", "retrieved_contexts": ["c1"]},
        {"user_input": "Q2", "response": "A2", "retrieved_contexts": ["c2"]},
    ]
    for record in records:
        record[field] = [record[field], "more"]
    rows = read_traces_report(_jsonl(tmp_path / "c.jsonl", records), "ragas").rows
    column = "question" if field == "user_input" else "answer"
    assert [json.loads(v) for v in rows[column]] == [r[field] for r in records]
    assert rows["contexts"].to_list() == [["c1"], ["c2"]]


def test_a_record_without_a_question_is_skipped_and_listed(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "e.jsonl",
        [
            {"user_input": "Q1", "response": "A1", "retrieved_contexts": ["c"]},
            {"foo": "bar"},
            {"user_input": None, "response": "A3"},
            {"user_input": "Q4", "response": "A4"},
        ],
    )
    read = read_traces_report(path, "ragas")
    assert read.rows["question"].to_list() == ["Q1", "Q4"]
    assert "foo" not in read.rows.columns  # only the skipped record had it
    assert read.skipped["line"].to_list() == [2, 3]
    assert all("user_input" in r for r in read.skipped["reason"])


def test_a_csv_row_without_a_question_is_listed_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('input,actual_output,retrieval_context\nQ1,"two\nlines",r1\n,A2,r2\nQ3,A3,r3\n')
    read = read_traces_report(path, "deepeval")
    assert read.rows["question"].to_list() == ["Q1", "Q3"]
    assert read.skipped["line"].to_list() == [4]
