"""Tests for ragframe.judge.parse: lenient about spelling, strict about shape."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragframe.judge.parse import (
    AnswerError,
    coerce,
    extract_json,
    normalise_verdict,
    parse_answer,
)

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VERDICTS = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "verdict": {"type": "string", "enum": ["yes", "no", "idk"]},
                    "reason": {"type": "string"},
                },
                "required": ["verdict"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["verdicts"],
    "additionalProperties": False,
}

CLAIMS = {
    "type": "object",
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"claim": {"type": "string"}, "supported": {"type": "boolean"}},
                "required": ["claim", "supported"],
            },
        }
    },
    "required": ["claims"],
}


def schema_error(value: Any, schema: dict[str, Any]) -> str:
    with pytest.raises(AnswerError) as info:
        coerce(value, schema)
    assert info.value.kind == "schema"
    return info.value.message


def answer_error(text: str, schema: dict[str, Any] | None = None) -> AnswerError:
    with pytest.raises(AnswerError) as info:
        if schema is None:
            extract_json(text)
        else:
            parse_answer(text, schema)
    return info.value


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    "raw", ["Yes", "yes.", " YES ", "y", "true", "True", "1", 1, 1.0, True, "**Yes**", "'yes'"]
)
def test_normalise_verdict_true(raw: Any) -> None:
    assert normalise_verdict(raw) is True


@pytest.mark.parametrize("raw", ["no", "No.", " NO ", "n", "false", "0", 0, 0.0, False, "No!"])
def test_normalise_verdict_false(raw: Any) -> None:
    assert normalise_verdict(raw) is False


@pytest.mark.parametrize(
    "raw", ["idk", "maybe", "", "yes and no", "Yes, mostly", 2, -1, 0.5, None, [], {}, "2"]
)
def test_normalise_verdict_unknown(raw: Any) -> None:
    assert normalise_verdict(raw) is None


def test_deepeval_yes_dot_counts_as_yes() -> None:
    """deepeval compares against "yes" exactly and scores "Yes." as no; we must not."""
    answer = '{"verdicts": [{"verdict": "Yes."}, {"verdict": "yes"}, {"verdict": "No."}]}'
    got = parse_answer(answer, VERDICTS)
    assert [v["verdict"] for v in got["verdicts"]] == ["yes", "yes", "no"]
    boolean = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert parse_answer('{"ok": "Yes."}', boolean) == {"ok": True}


# --------------------------------------------------------------------------- extraction


def test_extract_clean_json() -> None:
    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json("  [1, 2]\n") == [1, 2]
    assert extract_json('"just a string"') == "just a string"


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"a": 1}\n```',
        '```\n{"a": 1}\n```',
        'Here you go:\n```JSON\n{"a": 1}\n```\nHope that helps!',
        '```json {"a": 1}```',
        '```{"a": 1}```',
    ],
)
def test_extract_fenced(text: str) -> None:
    assert extract_json(text) == {"a": 1}


def test_extract_prefers_fence_over_earlier_brackets() -> None:
    text = 'Per [the rubric], my answer:\n```json\n{"a": 1}\n```'
    assert extract_json(text) == {"a": 1}


def test_extract_prose_around() -> None:
    text = 'Sure! Based on the context, here is my verdict: {"a": [1, 2]} Let me know.'
    assert extract_json(text) == {"a": [1, 2]}


def test_extract_nested_braces_inside_strings() -> None:
    text = 'Answer: {"reason": "uses {braces} and ] brackets \\" and quotes", "n": {"m": [1]}} ok'
    assert extract_json(text) == {
        "reason": 'uses {braces} and ] brackets " and quotes',
        "n": {"m": [1]},
    }


def test_extract_trailing_commas() -> None:
    assert extract_json('{"a": [1, 2, ], "b": {"c": 1,},}') == {"a": [1, 2], "b": {"c": 1}}


def test_extract_single_quotes_and_python_literals() -> None:
    text = "{'a': 'it\\'s', 'b': True, 'c': None, 'd': False, 'e': 'say \"hi\"'}"
    assert extract_json(text) == {"a": "it's", "b": True, "c": None, "d": False, "e": 'say "hi"'}


def test_extract_python_literals_inside_strings_untouched() -> None:
    assert extract_json("{'a': 'True None', 'b': True,}") == {"a": "True None", "b": True}


def test_extract_smart_quotes() -> None:
    assert extract_json("{“verdict”: “yes”, ‘n’: 1}") == {"verdict": "yes", "n": 1}


def test_extract_bare_keys() -> None:
    assert extract_json('{verdict: "yes", score: 4}') == {"verdict": "yes", "score": 4}


def test_extract_literal_newline_in_string() -> None:
    assert extract_json('{"reason": "line one\nline two"}') == {"reason": "line one\nline two"}


def test_extract_skips_think_block() -> None:
    assert extract_json('<think>maybe {x} or [y</think>\n{"a": 1}') == {"a": 1}


def test_extract_skips_unparseable_bracketed_prose() -> None:
    assert extract_json('See {this note} first. {"a": 1}') == {"a": 1}


@pytest.mark.parametrize("text", ["", "   \n\t", None])
def test_extract_empty(text: Any) -> None:
    assert answer_error(text).kind == "empty"


@pytest.mark.parametrize("text", ["yes", "The claim is supported.", "True"])
def test_extract_no_json(text: str) -> None:
    error = answer_error(text)
    assert error.kind == "no_json"
    assert "JSON" in error.message


def test_extraction_messages_are_bare_clauses() -> None:
    """The client wraps them: "Your answer could not be used: {message}. Reply again ..."."""
    for text in ["", "nope", '{"a": 1 "b": 2}', '{"a": [1,']:
        message = answer_error(text).message
        assert message[0].islower()
        assert not message.endswith(".")


def test_extract_invalid_json() -> None:
    error = answer_error('{"a": 1 "b": 2}')
    assert error.kind == "invalid_json"
    assert "line 1 column" in error.message


def test_extract_truncated_json() -> None:
    error = answer_error('Here: {"verdicts": ["yes", "no", "id')
    assert error.kind == "invalid_json"
    assert "never closed" in error.message


@pytest.mark.parametrize("prefix", ["Here: ", "Per [1]: "])
def test_parse_answer_truncated_reports_incomplete_not_fragment(prefix: str) -> None:
    """A cut-off answer still holds parseable fragments; the model should hear "incomplete"."""
    text = prefix + '{"verdicts": [{"verdict": "yes"}, {"verdict": '
    assert extract_json(text) == ([1] if "[1]" in prefix else {"verdict": "yes"})
    error = answer_error(text, VERDICTS)
    assert error.kind == "invalid_json"
    assert "never closed" in error.message


# --------------------------------------------------------------------------- coercion


def test_object_required_missing_and_extra_dropped() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }
    assert coerce({"a": 1, "b": "x", "c": 3}, schema) == {"a": 1, "b": "x"}
    assert schema_error({"a": 1}, schema) == "$.b: required key is missing"


def test_object_additional_properties() -> None:
    props = {"a": {"type": "integer"}}
    keep = {"type": "object", "properties": props, "additionalProperties": True}
    typed = {"type": "object", "properties": props, "additionalProperties": {"type": "integer"}}
    assert coerce({"a": 1, "z": "q"}, keep) == {"a": 1, "z": "q"}
    assert coerce({"a": 1, "z": "2"}, typed) == {"a": 1, "z": 2}
    assert coerce({"x": 1}, {"type": "object"}) == {"x": 1}


def test_object_key_case_variant_and_default() -> None:
    schema = {
        "type": "object",
        "properties": {"verdict": {"type": "boolean"}, "n": {"type": "integer", "default": 0}},
        "required": ["verdict"],
    }
    assert coerce({"Verdict ": "yes"}, schema) == {"verdict": True, "n": 0}


def test_object_not_an_object() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schema_error([1], schema) == "$: expected an object, got an array"
    assert schema_error("x", schema) == "$: expected an object, got 'x'"


def test_bare_array_is_wrapped() -> None:
    answer = '[{"verdict": "yes"}, {"verdict": "no"}, {"verdict": "IDK"}]'
    got = parse_answer(answer, VERDICTS)
    assert got == {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}, {"verdict": "idk"}]}


def test_bare_array_not_wrapped_when_two_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array"}, "b": {"type": "array"}},
    }
    assert schema_error([1], schema) == "$: expected an object, got an array"


def test_citation_brackets_before_answer_are_skipped() -> None:
    text = 'Using [1] and [2], the verdicts: {"verdicts": ["yes", "no", "idk"]}'
    schema = {
        "type": "object",
        "properties": {"verdicts": {"type": "array", "items": {"enum": ["yes", "no", "idk"]}}},
        "required": ["verdicts"],
    }
    assert parse_answer(text, schema) == {"verdicts": ["yes", "no", "idk"]}


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps(VERDICTS),
        '{"type": "object", "properties": {"verdicts": [{"verdict": "yes"}]}}',
        '{"properties": {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]}}',
    ],
)
def test_echoed_schema(answer: str) -> None:
    error = answer_error(answer, VERDICTS)
    assert error.kind == "schema"
    assert error.message.startswith("$: the JSON schema was echoed instead of filled")
    assert "'verdicts'" in error.message


def test_property_named_like_schema_word_is_not_echo() -> None:
    schema = {
        "type": "object",
        "properties": {"type": {"type": "string"}, "properties": {"type": "object"}},
    }
    value = {"type": "object", "properties": {"x": 1}}
    assert coerce(value, schema) == value


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (2, "$.verdicts: expected 3 items, got 2"),
        (4, "$.verdicts: expected 3 items, got 4"),
        (0, "$.verdicts: expected 3 items, got 0"),
    ],
)
def test_wrong_item_count_is_an_error(count: int, message: str) -> None:
    value = {"verdicts": [{"verdict": "yes"}] * count}
    assert schema_error(value, VERDICTS) == message


def test_item_bounds_min_max() -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}
    assert schema_error([], schema) == "$: expected at least 1 item, got 0"
    assert schema_error([1, 2, 3], schema) == "$: expected at most 2 items, got 3"
    assert coerce(["1", 2.0], schema) == [1, 2]


def test_array_unwraps_single_key_object() -> None:
    assert coerce({"items": [1, "2"]}, {"type": "array", "items": {"type": "integer"}}) == [1, 2]


def test_boolean_error_names_path() -> None:
    value = {
        "claims": [{"claim": "a", "supported": "yes"}] * 2 + [{"claim": "c", "supported": "maybe"}]
    }
    assert schema_error(value, CLAIMS) == (
        "$.claims[2].supported: expected a boolean verdict, got 'maybe'"
    )


def test_all_errors_reported_at_once() -> None:
    value = {"claims": [{"claim": "a", "supported": "maybe"}, {"supported": 1}]}
    with pytest.raises(AnswerError) as info:
        coerce(value, CLAIMS)
    assert info.value.errors == [
        "$.claims[0].supported: expected a boolean verdict, got 'maybe'",
        "$.claims[1].claim: required key is missing",
    ]
    assert info.value.message == "; ".join(info.value.errors)


def test_many_errors_are_capped_in_message() -> None:
    schema = {"type": "array", "items": {"type": "boolean"}}
    with pytest.raises(AnswerError) as info:
        coerce(["?"] * 9, schema)
    assert len(info.value.errors) == 9
    assert info.value.message.endswith("; and 4 more")


def test_odd_keys_are_quoted_in_paths() -> None:
    schema = {"type": "object", "properties": {"a b": {"type": "integer"}}, "required": ["a b"]}
    assert schema_error({"a b": "x"}, schema) == "$[\"a b\"]: expected an integer, got 'x'"


def test_string_conversion_and_null() -> None:
    schema = {"type": "string"}
    assert coerce(4, schema) == "4"
    assert coerce(0.5, schema) == "0.5"
    assert coerce(True, schema) == "True"
    assert schema_error(None, schema) == "$: expected a string, got null"
    assert schema_error({"a": 1}, schema) == "$: expected a string, got an object"
    assert coerce(None, {"type": ["string", "null"]}) is None
    assert coerce(None, {"type": "string", "nullable": True}) is None
    assert coerce(3, {"type": ["string", "null"]}) == "3"


@pytest.mark.parametrize("raw", [4, 4.0, "4", "4.0", " 4 ", "+4", "4e0"])
def test_integer_accepts_clean_numerics(raw: Any) -> None:
    got = coerce(raw, {"type": "integer"})
    assert got == 4
    assert type(got) is int


@pytest.mark.parametrize("raw", [4.5, "4.5", "4/4", "four", "", True, None, [4], "4 points", "inf"])
def test_integer_rejects(raw: Any) -> None:
    assert "expected an integer" in schema_error(raw, {"type": "integer"})


def test_integer_bounds_and_enum() -> None:
    schema = {"type": "integer", "minimum": 1, "maximum": 5}
    assert coerce("5", schema) == 5
    assert schema_error(0, schema) == "$: expected a value >= 1, got 0"
    assert schema_error("6.0", schema) == "$: expected a value <= 5, got 6"
    assert coerce("2", {"type": "integer", "enum": [1, 2, 3]}) == 2
    assert schema_error(4, {"type": "integer", "enum": [1, 2, 3]}) == (
        "$: expected one of 1, 2, 3, got 4"
    )
    exclusive = {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}
    assert schema_error(0, exclusive) == "$: expected a value > 0, got 0"
    assert schema_error(3, exclusive) == "$: expected a value < 3, got 3"


def test_number() -> None:
    schema = {"type": "number", "minimum": 0, "maximum": 1}
    assert coerce("0.25", schema) == 0.25
    assert coerce(1, schema) == 1.0
    assert coerce(" .5 ", schema) == 0.5
    assert schema_error(1.5, schema) == "$: expected a value <= 1, got 1.5"
    assert schema_error("NaN", schema) == "$: expected a number, got 'NaN'"
    assert schema_error(float("inf"), {"type": "number"}) == "$: expected a number, got inf"
    assert schema_error(False, schema) == "$: expected a number, got false"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Yes.", "yes"),
        ("IDK", "idk"),
        (" no ", "no"),
        ("**No**", "no"),
        (True, "yes"),
        ("y", "yes"),
    ],
)
def test_enum_loose_spelling_returns_canonical(raw: Any, expected: str) -> None:
    assert coerce(raw, {"type": "string", "enum": ["yes", "no", "idk"]}) == expected


def test_enum_canonical_spelling_kept() -> None:
    schema = {"enum": ["Supported", "Not Supported"]}
    assert coerce("not supported.", schema) == "Not Supported"
    assert schema_error("maybe", schema) == (
        "$: expected one of 'Supported', 'Not Supported', got 'maybe'"
    )


def test_enum_nullable() -> None:
    assert coerce(None, {"type": ["string", "null"], "enum": ["a", None]}) is None
    assert coerce(None, {"enum": ["a", None]}) is None


def test_any_of_first_branch_that_coerces() -> None:
    schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert coerce("7", schema) == "7"  # already a string: no lossy conversion
    assert coerce(7, schema) == 7
    assert coerce(7.0, schema) == 7
    enum_first = {"anyOf": [{"enum": ["yes", "no"]}, {"type": "string"}]}
    assert coerce("Yes.", enum_first) == "yes"
    assert coerce("maybe", enum_first) == "maybe"
    bool_then_int = {"anyOf": [{"type": "boolean"}, {"type": "null"}]}
    assert coerce("no", bool_then_int) is False
    assert coerce(None, bool_then_int) is None


def test_any_of_error() -> None:
    optional = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert schema_error("x", optional) == "$: expected an integer, got 'x'"
    two = {"anyOf": [{"type": "integer"}, {"type": "array"}]}
    assert schema_error("x", two) == (
        "$: matched none of the allowed forms (expected an integer, got 'x' | "
        "expected an array, got 'x')"
    )


def test_type_list_prefers_value_type() -> None:
    assert coerce(4, {"type": ["string", "integer"]}) == 4
    assert coerce("4", {"type": ["integer", "string"]}) == "4"
    assert coerce(True, {"type": ["integer", "boolean"]}) is True
    assert schema_error([1], {"type": ["integer", "string"]}) == (
        "$: expected integer or string, got an array"
    )


def test_ref_and_defs() -> None:
    """Pydantic-generated schemas put nested models in $defs and Optional in anyOf."""
    schema = {
        "$defs": {
            "Verdict": {
                "type": "object",
                "properties": {"verdict": {"enum": ["yes", "no"], "type": "string"}},
                "required": ["verdict"],
            }
        },
        "type": "object",
        "properties": {
            "verdicts": {"type": "array", "items": {"$ref": "#/$defs/Verdict"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["verdicts"],
    }
    got = parse_answer('{"verdicts": [{"verdict": "No."}], "note": null}', schema)
    assert got == {"verdicts": [{"verdict": "no"}], "note": None}


def test_parse_answer_end_to_end_messy() -> None:
    text = (
        "Sure! Here is the JSON you asked for:\n```json\n"
        "{'claims': [{'claim': 'Paris is in {France}', 'supported': 'Yes.'},"
        " {'claim': 'x', 'supported': 0,},],}\n```\nLet me know if you need more."
    )
    assert parse_answer(text, CLAIMS) == {
        "claims": [
            {"claim": "Paris is in {France}", "supported": True},
            {"claim": "x", "supported": False},
        ]
    }


def test_parse_answer_reports_error_of_typed_candidate() -> None:
    text = 'See [1]. {"claims": [{"claim": "a", "supported": "maybe"}]}'
    error = answer_error(text, CLAIMS)
    assert error.message == "$.claims[0].supported: expected a boolean verdict, got 'maybe'"


def test_parse_answer_extraction_errors_pass_through() -> None:
    assert answer_error("", CLAIMS).kind == "empty"
    assert answer_error("no json here", CLAIMS).kind == "no_json"


# --------------------------------------------------------------------------- properties

KEYS = st.text(alphabet=string.ascii_letters + "_ -", min_size=1, max_size=6)
FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    bounded_int = st.tuples(st.integers(-100, 100), st.integers(0, 100)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}
    )
    bounded_num = st.tuples(st.integers(-10, 10), st.integers(0, 10)).map(
        lambda t: {"type": "number", "minimum": t[0], "maximum": t[0] + t[1]}
    )
    enum = st.lists(st.text(max_size=6), min_size=1, max_size=4, unique=True).map(
        lambda members: {"type": "string", "enum": members}
    )
    base = st.sampled_from(
        [{"type": "string"}, {"type": "boolean"}, {"type": "integer"}, {"type": "number"}]
    )
    plain = st.one_of(base, bounded_int, bounded_num, enum)
    nullable = plain.map(lambda s: {**s, "type": [s["type"], "null"]})
    return st.one_of(plain, nullable)


def _any_of(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Branches of distinct JSON types, so the branch a value came from is unambiguous."""

    def top_type(schema: dict[str, Any]) -> str:
        declared = schema["type"]
        return declared if isinstance(declared, str) else "nullable"

    return st.lists(children, min_size=1, max_size=3, unique_by=top_type).map(
        lambda branches: {"anyOf": branches}
    )


def _containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    array = st.tuples(children, st.integers(0, 3), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
    )
    obj = st.dictionaries(KEYS, children, max_size=4).flatmap(
        lambda props: (
            st.lists(st.sampled_from(sorted(props)), unique=True).map(
                lambda req: {
                    "type": "object",
                    "properties": props,
                    "required": req,
                    "additionalProperties": False,
                }
            )
            if props
            else st.just({"type": "object", "properties": {}, "additionalProperties": False})
        )
    )
    return st.one_of(array, obj, _any_of(children.filter(lambda s: "type" in s)))


SCHEMAS = st.recursive(_leaf_schemas(), _containers, max_leaves=8)


def values_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that already satisfy ``schema`` exactly (so coercion must be the identity)."""
    if "anyOf" in schema:
        return st.one_of([values_for(b) for b in schema["anyOf"]])
    declared = schema["type"]
    if isinstance(declared, list):
        (concrete,) = [t for t in declared if t != "null"]
        return st.one_of(st.none(), values_for({**schema, "type": concrete}))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if declared == "string":
        return st.text(max_size=12)
    if declared == "boolean":
        return st.booleans()
    if declared == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if declared == "number":
        return st.floats(
            schema.get("minimum"), schema.get("maximum"), allow_nan=False, allow_infinity=False
        )
    if declared == "array":
        return st.lists(
            values_for(schema["items"]),
            min_size=schema["minItems"],
            max_size=schema["maxItems"],
        )
    props = schema["properties"]
    required = set(schema.get("required", []))
    optional = [k for k in props if k not in required]
    return st.fixed_dictionaries(
        {k: values_for(props[k]) for k in props if k in required},
        optional={k: values_for(props[k]) for k in optional},
    )


@FAST
@given(st.data(), SCHEMAS)
def test_round_trip_of_valid_values(data: st.DataObject, schema: dict[str, Any]) -> None:
    value = data.draw(values_for(schema))
    assert parse_answer(json.dumps(value), schema) == value


@FAST
@given(st.text())
def test_extract_json_only_raises_answer_error(text: str) -> None:
    try:
        extract_json(text)
    except AnswerError as exc:
        assert exc.kind in {"empty", "no_json", "invalid_json"}
        assert exc.message


@FAST
@given(st.text(alphabet="{}[]\"'`,:\\ \n tTrueFalsNn0123.-“”‘’<>/think"))
def test_extract_json_only_raises_answer_error_on_bracket_soup(text: str) -> None:
    try:
        extract_json(text)
    except AnswerError as exc:
        assert exc.kind in {"empty", "no_json", "invalid_json"}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | FINITE | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
CONTAINERS = st.one_of(
    st.lists(JSON_VALUES, max_size=4), st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4)
)
PROSE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="{}[]`\"'“”‘’<\\"),
    max_size=40,
)


@FAST
@given(
    CONTAINERS,
    PROSE,
    PROSE,
    st.sampled_from(["prose", "fence", "bare_fence", "fence_in_prose"]),
    st.sampled_from([None, 2]),
    st.booleans(),
)
def test_wrapped_json_still_parses(
    value: Any, before: str, after: str, wrap: str, indent: int | None, ascii_only: bool
) -> None:
    dumped = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    text = {
        "prose": f"{before}{dumped}{after}",
        "fence": f"```json\n{dumped}\n```",
        "bare_fence": f"```\n{dumped}\n```",
        "fence_in_prose": f"{before}\n```json\n{dumped}\n```\n{after}",
    }[wrap]
    assert extract_json(text) == value


# ------------------------------------------------------- verdicts that name their item


def _verify_answer(indices: list[Any]) -> str:
    return json.dumps(
        {"verdicts": [{"index": i, "reason": f"r{i}", "supported": "yes"} for i in indices]}
    )


def test_verify_schema_bounds_each_verdicts_index_to_its_prompt() -> None:
    from ragframe.metrics.faithfulness import VERIFY

    schema = VERIFY.schema_for(3)
    verdicts = schema["properties"]["verdicts"]
    assert (verdicts["minItems"], verdicts["maxItems"]) == (3, 3)
    index = verdicts["items"]["properties"]["index"]
    assert (index["type"], index["minimum"], index["maximum"]) == ("integer", 1, 3)
    assert "index" in verdicts["items"]["required"]
    with pytest.raises(AnswerError, match=r"\$\.verdicts\[1\]\.index: expected a value <= 3"):
        parse_answer(_verify_answer([1, 4, 2]), schema)


def test_verdicts_written_in_any_order_come_back_in_index_order() -> None:
    from ragframe.metrics.faithfulness import VERIFY

    schema = VERIFY.schema_for(3)
    value = VERIFY.finish(parse_answer(_verify_answer(["3", 1, 2.0]), schema))
    assert [(v["index"], v["reason"]) for v in value["verdicts"]] == [
        (1, "r1"),
        (2, "r2.0"),
        (3, "r3"),
    ]


@pytest.mark.parametrize("indices", [[1, 1, 3], [2, 3, 3]])
def test_a_duplicate_index_is_an_index_error_naming_what_came(indices: list[int]) -> None:
    from ragframe.metrics.faithfulness import VERIFY

    value = parse_answer(_verify_answer(indices), VERIFY.schema_for(3))
    with pytest.raises(AnswerError) as caught:
        VERIFY.finish(value)
    assert caught.value.kind == "index"
    assert "$.verdicts" in caught.value.message and str(indices) in caught.value.message


def test_classification_bounds_each_array_by_its_own_count() -> None:
    from ragframe.metrics.correctness import CLASSIFY

    props = CLASSIFY.schema_for((3, 2))["properties"]
    assert props["answer_statements"]["items"]["properties"]["index"]["maximum"] == 3
    assert props["ground_truth_statements"]["items"]["properties"]["index"]["maximum"] == 2
    answer = {
        "answer_statements": [{"index": k, "reason": "r", "verdict": "TP"} for k in (2, 3, 1)],
        "ground_truth_statements": [{"index": k, "reason": "r", "covered": True} for k in (2, 1)],
    }
    value = CLASSIFY.finish(parse_answer(json.dumps(answer), CLASSIFY.schema_for((3, 2))))
    assert [v["index"] for v in value["answer_statements"]] == [1, 2, 3]
    assert [v["index"] for v in value["ground_truth_statements"]] == [1, 2]
