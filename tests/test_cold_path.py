"""The judge's per-request work on the cold path: fast paths that must answer as the slow
ones do (issue 29)."""

from __future__ import annotations

import json

import pytest

from ragframe.judge.coerce import coerce, fits_exactly
from ragframe.judge.parse import parse_answer
from ragframe.judge.transport import _BadReply, _read_embeddings

#: context_recall's shape: a nullable index into the prompt's contexts.
FACTS = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "covered": {"type": "boolean"},
                    "source_context": {"type": ["integer", "null"], "minimum": 1, "maximum": 3},
                },
                "required": ["covered", "source_context"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}


def test_a_nullable_index_that_fits_takes_the_fast_path() -> None:
    facts = [{"covered": True, "source_context": 2}, {"covered": False, "source_context": None}]
    value = {"facts": facts}
    assert fits_exactly(value, FACTS)
    assert parse_answer(json.dumps(value), FACTS) == coerce(value, FACTS) == value


@pytest.mark.parametrize(
    "index",
    [0, 4, True, "2", 2.0],  # out of range, a bool, a string, a float: `coerce` decides
)
def test_a_nullable_index_that_needs_coercing_does_not(index: object) -> None:
    facts = [{"covered": True, "source_context": index}, {"covered": True, "source_context": 1}]
    value = {"facts": facts}
    assert not fits_exactly(value, FACTS)


def test_a_nullable_number_is_left_to_coerce() -> None:
    """`coerce` turns an integer answer to a "number" into a float: no fast path for it."""
    schema = {"type": ["number", "null"]}
    assert not fits_exactly(3, schema)
    assert fits_exactly(None, schema)
    assert coerce(None, schema) is None


def test_an_embeddings_reply_is_read_as_plain_json() -> None:
    raw = json.dumps(
        {"data": [{"index": 1, "embedding": [0.5, 1]}, {"index": 0, "embedding": [1.0, 0.0]}]}
    ).encode()
    assert _read_embeddings(raw) == [(1, [0.5, 1]), (0, [1.0, 0.0])]
    for garbled in (b"<html>busy</html>", b'{"data": [{"embedding": []}]}', b"[]"):
        with pytest.raises(_BadReply):
            _read_embeddings(garbled)
