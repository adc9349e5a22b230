"""OpenInference spans whose values take shapes OTel allows but a strict read would refuse:
one span's odd token count or tag list costs that value only (null, or kept as JSON text),
never the file; span-frame messages without `message.content` or not objects at all read as
null instead of stopping the frame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from openinference.semconv.trace import SpanAttributes
from test_traces import span, write_jsonl

from ragframe.cli import main
from ragframe.inputs.traces import read_traces_report

S = SpanAttributes
#: One trace per odd prompt-token count (as the JSON of a span line holds it), then one well
#: formed; the tags of the last trace's root hold an object.
ODD_COUNTS = ["NaN", 1e30, "inf", "-Infinity", 1.5e19]
TAGS = ["rag", {"experiment": "b", "arm": 2}, 7]


def traces() -> list[dict[str, Any]]:
    """A CHAIN root and an LLM child per trace, the LLM span's prompt token count odd in all
    but the last trace, whose root carries TAGS."""
    records = []
    for n, count in enumerate([*ODD_COUNTS, 12]):
        trace = f"{n + 1:032x}"
        root = {S.INPUT_VALUE: f"Q{n}", S.OUTPUT_VALUE: f"A{n}"}
        if count == 12:
            root[S.TAG_TAGS] = TAGS
        llm = {S.OUTPUT_VALUE: f"A{n}", S.LLM_TOKEN_COUNT_PROMPT: count}
        llm[S.LLM_TOKEN_COUNT_COMPLETION] = 3
        records.append(span(trace, f"{n:x}1", "CHAIN", 0, **root))
        records.append(span(trace, f"{n:x}2", "LLM", 1, parent=f"{n:x}1", **llm))
    return records


def frame_of(records: list[dict[str, Any]]) -> pl.DataFrame:
    """The spans laid out as Phoenix's span frame, the token counts a Float64 column (as a
    pandas frame holds an integer column with a missing value)."""
    rows = []
    for record in records:
        attrs = record["attributes"]
        count = attrs.get(S.LLM_TOKEN_COUNT_PROMPT)
        rows.append(
            {
                "context.span_id": record["context"]["span_id"][2:],
                "context.trace_id": record["context"]["trace_id"][2:],
                "parent_id": (record["parent_id"] or "0x")[2:] or None,
                "span_kind": attrs[S.OPENINFERENCE_SPAN_KIND],
                "start_time": record["start_time"],
                "end_time": record["end_time"],
                "attributes.input.value": attrs.get(S.INPUT_VALUE),
                "attributes.output.value": attrs.get(S.OUTPUT_VALUE),
                "attributes.llm.token_count.prompt": None if count is None else float(count),
                "attributes.llm.token_count.completion": attrs.get(S.LLM_TOKEN_COUNT_COMPLETION),
            }
        )
    return pl.DataFrame(rows, schema_overrides={"attributes.llm.token_count.prompt": pl.Float64})


@pytest.mark.parametrize("shape", ["sdk_lines", "frame_parquet"])
def test_an_odd_token_count_or_tag_costs_that_value_only(tmp_path: Path, shape: str) -> None:
    """`ragframe import` of spans whose prompt token counts are "NaN", 1e30, "inf",
    "-Infinity" and 1.5e19 (beyond Int64), and a tag list holding an object and a number:
    every trace forms its row, the odd counts are null (the completion counts kept), the
    well-formed one is read, and the tags keep the object and number as JSON text."""
    records = traces()
    if shape == "sdk_lines":
        source = write_jsonl(tmp_path / "spans.jsonl", records)
    else:
        source = tmp_path / "spans.parquet"
        frame_of(records).write_parquet(source)
    out, skipped = tmp_path / "rows.parquet", tmp_path / "skipped.parquet"
    args = ["import", str(source), "--from", "openinference", "-o", str(out)]
    assert main([*args, "--skipped", str(skipped)]) == 0
    rows = pl.read_parquet(out)
    assert pl.read_parquet(skipped).height == 0
    assert rows["question"].to_list() == [f"Q{n}" for n in range(len(ODD_COUNTS) + 1)]
    assert rows["prompt_tokens"].to_list() == [None] * len(ODD_COUNTS) + [12]
    assert rows["completion_tokens"].to_list() == [3] * (len(ODD_COUNTS) + 1)
    if shape == "sdk_lines":
        tags = rows["tags"].to_list()
        assert tags[:-1] == [None] * len(ODD_COUNTS)
        assert tags[-1][0] == "rag" and tags[-1][2] == "7"
        assert json.loads(tags[-1][1]) == TAGS[1]


def test_tags_that_are_not_a_json_list_are_one_tag(tmp_path: Path) -> None:
    """A `tag.tags` text that starts like a list but is not JSON, beside a real list: the
    odd one is one tag as written, the list's items are the other span's tags."""
    records = [
        span("1" * 32, "a1", "CHAIN", 0, **{S.INPUT_VALUE: "Q", S.OUTPUT_VALUE: "A"}),
        span("2" * 32, "b1", "CHAIN", 0, **{S.INPUT_VALUE: "Q2", S.OUTPUT_VALUE: "A2"}),
    ]
    records[0]["attributes"][S.TAG_TAGS] = ["x", "y"]
    records[1]["attributes"][S.TAG_TAGS] = "[not json"
    read = read_traces_report(write_jsonl(tmp_path / "spans.jsonl", records))
    assert read.skipped.height == 0
    assert read.rows["tags"].to_list() == [["x", "y"], ["[not json"]]


BASE = {
    "context.span_id": ["a1"],
    "context.trace_id": ["t1"],
    "parent_id": [None],
    "span_kind": ["LLM"],
    "attributes.input.value": ["the request"],
    "attributes.output.value": ["the answer"],
}


@pytest.mark.parametrize(
    ("messages", "question"),
    [
        # content parts only: the struct has no `message.content` field
        (
            [
                {
                    "message.role": "user",
                    "message.contents": [
                        {"message_content.type": "text", "message_content.text": "hi"},
                        {"message_content.type": "image", "message_content.image": {"u": "x"}},
                        {"message_content.type": "text", "message_content.text": "there"},
                    ],
                }
            ],
            "hi\nthere",
        ),
        # only tool calls: no content of either kind, so the span's input
        (
            [{"message.role": "user", "message.tool_calls": [{"tool_call.id": "c1"}]}],
            "the request",
        ),
        # messages that are plain strings (no role): the span's input
        (["hello"], "the request"),
        # objects without a role
        ([{"message.content": "hello"}], "the request"),
    ],
)
def test_frame_messages_of_other_shapes(messages: list[Any], question: str) -> None:
    """A span frame's `llm.input_messages` whose structs lack `message.content` (content
    parts, tool calls), or that are not objects: no Polars error, the question is the parts'
    text, else the span's input."""
    frame = pl.DataFrame({**BASE, "attributes.llm.input_messages": [messages]})
    read = read_traces_report(frame)
    assert read.skipped.height == 0
    assert read.rows["question"].to_list() == [question]
    assert read.rows["answer"].to_list() == ["the answer"]


def test_frame_documents_as_strings_and_tags_as_objects() -> None:
    """A span frame whose `retrieval.documents` are plain strings (their content, in order)
    and whose `tag.tags` list holds objects (each as its JSON text)."""
    frame = pl.DataFrame(
        {
            "context.span_id": ["a1", "a2"],
            "context.trace_id": ["t1", "t1"],
            "parent_id": [None, "a1"],
            "span_kind": ["CHAIN", "RETRIEVER"],
            "attributes.input.value": ["q", "q"],
            "attributes.output.value": ["ans", None],
            "attributes.retrieval.documents": [None, ["first doc", "second doc"]],
            "attributes.tag.tags": [[{"arm": "b"}], None],
        }
    )
    read = read_traces_report(frame)
    assert read.skipped.height == 0
    row = read.rows.row(0, named=True)
    assert row["contexts"] == ["first doc", "second doc"]
    assert [json.loads(t) for t in row["tags"]] == [{"arm": "b"}]
