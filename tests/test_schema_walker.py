"""The one JSON-Schema walker (`ragframe.judge.schema`) that the parser and the test server
both read schemas through: the places where their needs differ are pinned here."""

from __future__ import annotations

import random

import pytest

from ragframe.judge.parse import AnswerError, coerce
from ragframe.judge.schema import (
    declared_types,
    first_branch,
    kind_of,
    merge_all_of,
    numeric_bounds,
    resolve,
    types_of,
    value_types,
)
from ragframe.testing.server import synthesize

DEFS = {
    "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    "list": [{"type": "string"}],
}


def test_resolve_strict_and_lenient() -> None:
    item = DEFS["$defs"]["Item"]
    assert resolve({"$ref": "#/$defs/Item"}, DEFS) is item
    assert resolve({"$ref": "#/list/0"}, DEFS) == {"type": "string"}
    remote = {"$ref": "https://example.com/s.json", "type": "string"}
    assert resolve(remote, DEFS) is remote  # the parser goes by the keywords beside it
    with pytest.raises(TypeError, match="unresolvable"):
        resolve({"$ref": "#/$defs/Missing"}, DEFS)
    assert resolve({"$ref": "#/$defs/Missing"}, DEFS, strict=False) == {}
    assert resolve(remote, DEFS, strict=False) == {}


def test_types_and_kinds() -> None:
    assert declared_types({"type": ["integer", "null"]}) == ["integer", "null"]
    assert declared_types({"items": {}}) == ["array"]
    assert declared_types({"enum": [1]}) is None
    assert types_of({"enum": [1.0, None]}) == {"number", "integer", "null"}
    assert types_of({"anyOf": [{"$ref": "#/$defs/Item"}, {"type": "null"}]}, DEFS) == {
        "object",
        "null",
    }
    assert value_types(4.0) == {"number", "integer"} and value_types((1,)) == {"array"}
    assert kind_of({"type": ["null", "boolean"]}) == "boolean"
    assert kind_of({"enum": [1, 2]}) == "integer"


def test_first_branch_skips_null_and_follows_refs() -> None:
    schema = {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Item"}], "description": "d"}
    assert first_branch(schema) == {"$ref": "#/$defs/Item", "description": "d"}
    optional = {"anyOf": [{"$ref": "#/$defs/Item"}, {"type": "null"}]}
    assert first_branch(optional) == {"$ref": "#/$defs/Item"}  # no root: a ref is not null


def test_merge_all_of_unites_properties_and_required() -> None:
    schema = {
        "allOf": [
            {"$ref": "#/$defs/Item"},
            {"properties": {"m": {"type": "string"}}, "required": ["m"]},
        ],
        "required": ["n"],
    }
    merged = merge_all_of(schema, DEFS)
    assert merged == {
        "required": ["n", "m"],
        "type": "object",
        "properties": {"n": {"type": "integer"}, "m": {"type": "string"}},
    }


def test_numeric_bounds_read_draft_4_flags_alike_in_parser_and_server() -> None:
    draft4 = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3}
    assert numeric_bounds(draft4) == (None, 3, 0, None)
    assert numeric_bounds({"minimum": True, "maximum": "9"}) == (None, None, None, None)
    with pytest.raises(AnswerError, match="> 0"):
        coerce(0, draft4)
    rng = random.Random(0)
    drawn = {synthesize(draft4, rng) for _ in range(200)}
    assert drawn == {1, 2, 3}  # every answer the test server makes, the parser accepts
    assert {coerce(v, draft4) for v in drawn} == drawn
