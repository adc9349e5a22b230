"""Ambiguous or broken input is refused with one line that says what to do, never taken
silently: two columns for one input, one column for two inputs, scores outside [0, 1] given to
`summarize` and `gate`, invisible-only texts sent to the judge, a hint that fails when pasted,
and a JSON Lines error that does not name the line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

import ragframe
from ragframe.cli import main
from ragframe.decide.gates import check_gates
from ragframe.errors import InputError, RagframeError
from ragframe.inputs.columns import (
    BLANK_PATTERN,
    WHITESPACE,
    canonical_names,
    load_frame,
    missing_input_reason,
    select_inputs,
)

NEEDS_GT = {"answer_correctness": ["question", "answer", "ground_truth"]}


def _qa(**extra: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"question": ["q1", "q2"], "answer": ["a1", "a2"], **extra})


def _one_line(message: str) -> str:
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------ two columns for one input


@pytest.mark.parametrize(
    "names",
    [
        ("reference", "expected_output"),  # ragas' name and deepeval's
        ("expected_output", "reference"),  # whatever the column order
    ],
)
def test_two_aliases_for_one_input_are_refused_naming_both_and_the_choice(names) -> None:
    frame = _qa(**{names[0]: ["gold 1", "gold 2"], names[1]: ["other 1", "other 2"]})
    with pytest.raises(InputError) as caught:
        select_inputs(frame, NEEDS_GT)
    message = _one_line(str(caught.value))
    assert all(repr(n) in message for n in names), message
    assert f"--columns ground_truth={names[0]}" in message, message
    # Choosing one reads that one, whichever it is.
    for chosen in names:
        picked = select_inputs(frame, NEEDS_GT, {"ground_truth": chosen})
        assert picked["ground_truth"].to_list() == frame[chosen].to_list()


@pytest.mark.parametrize("alias", ["reference", "expected_output"])
def test_ragframes_own_name_wins_over_an_alias_as_documented(alias) -> None:
    """A column named `ground_truth` is the ground truth, whatever `reference` holds (the
    rule docs/input-formats.md states); `columns=` still reads the alias when asked."""
    for order in ((alias, "ground_truth"), ("ground_truth", alias)):
        frame = _qa(**{order[0]: ["x1", "x2"], order[1]: ["y1", "y2"]})
        picked = select_inputs(frame, NEEDS_GT)
        assert picked["ground_truth"].to_list() == frame["ground_truth"].to_list()
        chosen = select_inputs(frame, NEEDS_GT, {"ground_truth": alias})
        assert chosen["ground_truth"].to_list() == frame[alias].to_list()
    docs = (Path(__file__).parent.parent / "docs" / "input-formats.md").read_text()
    assert "ragframe's own name" in docs


def test_an_ambiguous_input_no_metric_reads_is_not_refused() -> None:
    """`input` beside `user_input` only matters to a metric that reads the question."""
    frame = pl.DataFrame({"input": ["prompt"], "user_input": ["q"], "response": ["r"]})
    picked = select_inputs(frame, {"m": ["answer"]})
    assert picked["answer"].to_list() == ["r"]
    with pytest.raises(InputError, match="'question'"):
        select_inputs(frame, {"m": ["question", "answer"]})


def test_the_ambiguity_is_refused_before_any_request(server, judge) -> None:
    frame = _qa(reference=["g1", "g2"], expected_output=["g1", "g2"])
    with pytest.raises(InputError, match="ground_truth"):
        ragframe.evaluate(frame, ["answer_correctness"], judge=judge)
    assert server.count() == 0


def test_the_cli_refuses_the_ambiguity_with_status_2(tmp_path: Path, capsys) -> None:
    logs = tmp_path / "logs.parquet"
    _qa(reference=["g1", "g2"], expected_output=["g1", "g2"]).write_parquet(logs)
    out = tmp_path / "out.parquet"
    argv = ["score", str(logs), "-o", str(out), "--metrics", "answer_correctness", "--dry-run"]
    assert main([*argv, "--model", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--columns ground_truth=" in err, err
    assert not out.exists()


# ------------------------------------------------------------ one column for two inputs


def test_one_column_mapped_to_two_inputs_is_refused() -> None:
    frame = pl.DataFrame({"prompt": ["p"], "docs": [["d"]]})
    with pytest.raises(InputError) as caught:
        canonical_names(frame.columns, {"question": "prompt", "answer": "prompt"})
    message = _one_line(str(caught.value))
    assert "'question'" in message and "'answer'" in message and "'prompt'" in message


def test_a_mapped_column_is_not_also_read_under_its_own_name() -> None:
    """`columns={"ground_truth": "answer"}` (a gold answer stored as `answer`) with the model's
    output in `response`: `answer` is the ground truth only, the answer is `response`."""
    frame = pl.DataFrame({"question": ["q"], "answer": ["gold"], "response": ["model says"]})
    mapping = canonical_names(frame.columns, {"ground_truth": "answer"})
    assert mapping == {"ground_truth": "answer", "question": "question", "answer": "response"}
    # An alias mapped to another input is not read as its own input either, and the refusal
    # says where it went.
    frame = pl.DataFrame({"response": ["what is asked"], "contexts": [["c"]]})
    assert canonical_names(frame.columns, {"question": "response"}) == {
        "question": "response",
        "contexts": "contexts",
    }
    with pytest.raises(InputError) as caught:
        select_inputs(frame, {"m": ["question", "answer"]}, {"question": "response"})
    message = _one_line(str(caught.value))
    assert "needs a 'answer' column" in message and "'response' is read as 'question'" in message


# ------------------------------------------------------------ scores outside [0, 1]


def _scored(values: list[object], dtype: pl.DataType = pl.Float64) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "faithfulness": pl.Series(values, dtype=dtype),
            "faithfulness_detail": [{"error": None}] * len(values),
        }
    )


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0.5, 0.9, 7.5, 0.1], "7.5"),
        ([0.5, -0.2, None], "-0.2"),
        ([0.5, float("nan"), float("inf")], "inf"),
    ],
)
def test_summarize_and_gates_refuse_a_score_outside_0_1(values, shown) -> None:
    frame = _scored(values)
    row = next(i for i, v in enumerate(values) if str(v) == shown)
    for call in (
        lambda: ragframe.summarize(frame),
        lambda: check_gates(frame, fail_under={"faithfulness": 0.5}),
        lambda: check_gates(frame, min_pass_rate={"faithfulness": 0.5}),
    ):
        with pytest.raises(InputError) as caught:
            call()
        message = _one_line(str(caught.value))
        assert "'faithfulness'" in message and f"row {row} " in message, message
        assert f"{shown} is outside [0, 1]" in message, message


def test_scores_in_range_with_failed_rows_still_summarize() -> None:
    """Null and NaN are rows that failed to score, not errors; 0 and 1 are scores."""
    table = ragframe.summarize(_scored([0.0, 1.0, None, float("nan")]))
    assert table.row(0, named=True)["mean"] == 0.5 and table["failed"].item() == 2


def test_the_cli_refuses_7_5_with_status_2_for_summarize_and_gate(tmp_path: Path, capsys) -> None:
    path = tmp_path / "scored.parquet"
    _scored([0.5, 7.5]).write_parquet(path)
    for argv in (
        ["summarize", str(path)],
        ["gate", str(path), "--fail-under", "faithfulness=0.5"],
    ):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "7.500" not in captured.out
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and "'faithfulness', row 1 " in err, err


def test_a_text_score_column_is_refused_naming_its_first_value_that_is_no_number(
    tmp_path: Path,
) -> None:
    """A CSV log has no types: "high" among its scores is named with its row, for summarize
    (InputError) and gate (ConfigError, the exit status 2 of a column that holds no scores)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("faithfulness\n0.5\nhigh\n")
    for call in (
        lambda: ragframe.summarize(str(bad), metrics=["faithfulness"]),
        lambda: check_gates(str(bad), fail_under={"faithfulness": 0.5}),
    ):
        with pytest.raises(RagframeError) as caught:
            call()
        message = _one_line(str(caught.value))
        assert "'faithfulness'" in message and "String, not scores" in message, message
        assert "row 1, counting from 0: 'high' is not a number" in message, message


# ------------------------------------------------------------ invisible-only texts


INVISIBLE = ["\u200b\u200b", "\ufeff", "\u00a0\u200b ", "\u2060\u200d", "\u202f", "\x00"]


def test_invisible_only_texts_are_missing_input() -> None:
    frame = pl.DataFrame(
        {
            "answer": [*INVISIBLE, "a\u200bb", "\u200bvisible"],
            "contexts": [[t, ""] for t in INVISIBLE] + [["\u200b", "ctx"], ["ctx"]],
        }
    )
    why = frame.select(missing_input_reason(["answer"]).alias("a"))["a"].to_list()
    assert why[: len(INVISIBLE)] == ["missing input: 'answer' is null or empty"] * len(INVISIBLE)
    assert why[len(INVISIBLE) :] == [None, None]
    ctx = frame.select(missing_input_reason(["contexts"]).alias("c"))["c"].to_list()
    assert all(c is not None for c in ctx[: len(INVISIBLE)]) and ctx[len(INVISIBLE) :] == [None] * 2


def test_a_zero_width_answer_gets_the_empty_reason_and_no_request(server, judge) -> None:
    frame = pl.DataFrame(
        {"question": ["q?", "q?", "What is AI?"], "answer": ["\u200b\u200b", "\ufeff", "AI."]}
    )
    out = ragframe.evaluate(frame, ["answer_relevancy"], judge=judge)
    errors = [d["error"] for d in out["answer_relevancy_detail"]]
    assert errors[:2] == ["missing input: 'answer' is null or empty"] * 2
    assert out["answer_relevancy"][:2].to_list() == [None, None] and errors[2] is None
    bodies = [json.dumps(b) for b in server.chat_requests]
    assert bodies and not any("\\u200b" in b or "\\ufeff" in b for b in bodies)


def test_the_characters_stripped_as_blank_are_exactly_those_the_blank_rule_matches() -> None:
    """WHITESPACE (for `strip_chars`, used across the metrics) and BLANK_PATTERN (the regex of
    missing input) agree on every code point, so every blank check says the same."""
    every = pl.Series([chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000])
    matched = set(every.filter(every.str.contains(BLANK_PATTERN)).to_list())
    assert set(WHITESPACE) == matched
    assert {chr(c) for c in range(0x110000) if chr(c).isspace()} <= matched


# ------------------------------------------------------------ nested lists of contexts


@pytest.mark.parametrize(
    ("contexts", "expected"),
    [
        (pl.Series([[["x", "y"], ["z"]], [["w"]], []]), [["x", "y", "z"], ["w"], []]),
        (pl.Series([[[["x"]], [["y", "z"]]], [], [[["w"]]]]), [["x", "y", "z"], [], ["w"]]),
        (pl.Series([[[1, 2], [3]], [[4]], [[5]]]), [["1", "2", "3"], ["4"], ["5"]]),
    ],
)
def test_the_hint_for_nested_lists_of_contexts_works_when_pasted(contexts, expected) -> None:
    frame = pl.DataFrame({"question": ["q"] * 3, "answer": ["a"] * 3}).with_columns(
        contexts.alias("contexts")
    )
    needs = {"faithfulness": ["question", "answer", "contexts"]}
    with pytest.raises(InputError) as caught:
        select_inputs(frame, needs)
    message = _one_line(str(caught.value))
    match = re.search(r"df = df\.with_columns\((.+?)\)(?: \(|$)", message)
    assert match, message
    fixed = frame.with_columns(eval(match.group(1), {"pl": pl}))
    assert fixed["contexts"].to_list() == expected
    assert select_inputs(fixed, needs).schema["contexts"] == pl.List(pl.String)


def test_a_type_with_no_known_conversion_gets_no_code_that_fails() -> None:
    frame = pl.DataFrame({"question": ["q"], "answer": ["a"], "contexts": [{"text": "x"}]})
    with pytest.raises(InputError) as caught:
        select_inputs(frame, {"faithfulness": ["question", "answer", "contexts"]})
    message = _one_line(str(caught.value))
    assert "with_columns(" not in message and "list of strings per row" in message


# ------------------------------------------------------------ JSON Lines errors


GOOD = json.dumps({"question": "q", "answer": "a", "contexts": ["c"]})


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ('{"question": "q", "answer": }', "is not valid JSON"),
        ('{"question": "q"} {"question": "r"}', "is not valid JSON"),
        ("[1, 2]", "holds a JSON array, not an object"),
        ('"just text"', "holds a JSON string, not an object"),
        ('{"question": "q", "contexts": {"a": 1}}', "gives 'contexts' as a JSON object"),
    ],
)
@pytest.mark.parametrize("before", [2, 3000])
def test_a_bad_json_line_is_named_by_its_line_number(tmp_path: Path, bad, said, before) -> None:
    """Counting from 1, blank lines included, as an editor does; far into the file too."""
    path = tmp_path / "logs.jsonl"
    lines = [GOOD] * before + [""] + [bad] + [GOOD] * 5
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as caught:
        load_frame(str(path))
    message = _one_line(str(caught.value))
    assert f"line {before + 2} (counting from 1) {said}" in message, message
    assert "character" not in message and "line 0" not in message


def test_a_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    path.write_bytes((GOOD + "\n").encode() * 4 + b'{"question": "\xff"}\n')
    with pytest.raises(InputError) as caught:
        load_frame(str(path))
    assert "line 5 (counting from 1) is not UTF-8" in _one_line(str(caught.value))


@pytest.mark.parametrize("cap", ["lines", "bytes"])
def test_the_bad_line_scan_stops_at_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: str
) -> None:
    """The line-by-line check reads at most BAD_LINE_SCAN_LINES lines or BAD_LINE_SCAN_BYTES
    (the error path of a huge file): past the cap, Polars' message, saying the check stopped."""
    from ragframe.inputs import io

    if cap == "lines":
        monkeypatch.setattr(io, "BAD_LINE_SCAN_LINES", 3)
    else:
        monkeypatch.setattr(io, "BAD_LINE_SCAN_BYTES", 3 * (len(GOOD) + 1))
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join([GOOD] * 5 + ["[1, 2]"] + [GOOD] * 2) + "\n")
    assert io.first_bad_line(path) == 3
    with pytest.raises(InputError) as caught:
        load_frame(str(path))
    message = _one_line(str(caught.value))
    assert "check of its first 3 lines found none wrong and stopped there" in message, message
    assert "line 6" not in message and "logs.jsonl" in message, message
