"""The fix suggested for a list column given as text must work when pasted.

It used to be `pl.col('contexts').cast(pl.List(pl.String))`, which the installed Polars refuses
("casting from Utf8View to list type is not supported"): the hint itself failed.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

from ragframe.errors import InputError
from ragframe.inputs.columns import list_conversion, select_inputs

NEEDS = {"faithfulness": ["question", "answer", "contexts"]}


def _frame(contexts: pl.Series, name: str = "contexts") -> pl.DataFrame:
    rows = contexts.len()
    return pl.DataFrame({"question": ["q"] * rows, "answer": ["a"] * rows}).with_columns(
        contexts.alias(name)
    )


def _suggested(frame: pl.DataFrame) -> str:
    """The code the error message tells the user to run (`df = df.with_columns(CODE)`)."""
    with pytest.raises(InputError) as caught:
        select_inputs(frame, NEEDS)
    message = str(caught.value)
    match = re.search(r"df = df\.with_columns\((.+?)\)(?: \(|$)", message)
    assert match, message
    return match.group(1)


@pytest.mark.parametrize(
    ("values", "dtype", "expected", "shape"),
    [
        (['["first", "second"]', None, "[]"], pl.String, [["first", "second"], None, []], "json"),
        (["one\n\ntwo", "three"], pl.String, [["one", "two"], ["three"]], "split"),
        (["one | two", "three"], pl.String, [["one", "two"], ["three"]], "split"),
        (["a whole passage.", None], pl.String, [["a whole passage."], [None]], "one"),
        (["x;y", "z"], pl.Categorical, [["x", "y"], ["z"]], "split"),
    ],
)
def test_the_suggested_fix_for_text_contexts_works(
    values: list[str | None], dtype: pl.DataType, expected: list[object], shape: str
) -> None:
    """Evaluated on the frame that raised, the suggestion gives List(String) with the texts
    split as the data says, and ragframe then accepts the column."""
    frame = _frame(pl.Series(values, dtype=dtype))
    code = _suggested(frame)
    assert "cast(pl.List" not in code
    fixed = frame.with_columns(eval(code, {"pl": pl}))
    assert fixed.schema["contexts"] == pl.List(pl.String)
    assert fixed.get_column("contexts").to_list() == expected
    inputs = select_inputs(fixed, NEEDS)
    assert inputs.schema["contexts"] == pl.List(pl.String)
    kind = {"json": "json_decode", "split": ".str.split(", "one": "pl.concat_list("}[shape]
    assert kind in code


def test_an_aliased_column_keeps_its_name_and_is_then_accepted() -> None:
    """A ragas name (`retrieved_contexts`) is converted in place, under its own name."""
    frame = _frame(pl.Series(["one passage", "another"]), name="retrieved_contexts")
    code = _suggested(frame)
    assert code.startswith("pl.concat_list(pl.col('retrieved_contexts'))")
    fixed = frame.with_columns(eval(code, {"pl": pl}))
    assert fixed.columns == frame.columns
    assert select_inputs(fixed, NEEDS).get_column("contexts").to_list() == [
        ["one passage"],
        ["another"],
    ]


def test_list_conversion_without_rows_and_for_non_text() -> None:
    """Before any row is read (a file's schema), text gets the one-context form; a list of
    numbers is still cast item by item, which Polars does."""
    assert list_conversion("contexts", pl.String(), None) == "pl.concat_list(pl.col('contexts'))"
    code = list_conversion("ids", pl.List(pl.Int64), None)
    assert code == "pl.col('ids').cast(pl.List(pl.String))"
    ids = pl.DataFrame({"ids": [[1, 2], [3]]}).with_columns(eval(code, {"pl": pl}))
    assert ids.get_column("ids").to_list() == [["1", "2"], ["3"]]
