"""Hold a parsed answer to its schema: lenient about spelling, strict about shape.

Verdicts spelled "Yes.", numbers sent as strings, enum members in another case, a dropped
`{"verdicts": ...}` wrapper are normalised; a wrong shape or item count is never silently
fixed, it becomes an `AnswerError` whose message names the JSON path, so it can be fed back
to the model for one repair retry. The schema is read through `ragframe.judge.schema`.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any, Final

from ragframe.judge.extract import AnswerError
from ragframe.judge.schema import declared_types, numeric_bounds, resolve, types_of, value_types

__all__ = ["coerce", "fits_exactly", "normalise_verdict"]

_MAX_REPORTED: Final = 5  # schema errors spelled out in one message

_TRUE_WORDS: Final = frozenset({"yes", "y", "true", "1"})
_FALSE_WORDS: Final = frozenset({"no", "n", "false", "0"})

_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DIGITS = re.compile(r"[+-]?\d+")
_PLAIN_KEY = re.compile(r"[A-Za-z_][\w]*")


def _schema_error(errors: list[str]) -> AnswerError:
    """One error carrying all problems, so a repair prompt can fix them in one go."""
    shown = "; ".join(errors[:_MAX_REPORTED])
    if len(errors) > _MAX_REPORTED:
        shown += f"; and {len(errors) - _MAX_REPORTED} more"
    return AnswerError(shown, "schema", list(errors))


# --------------------------------------------------------------------------- verdicts


def _norm_word(text: str) -> str:
    """Casefolded text without surrounding whitespace, quotes, markdown or end punctuation."""
    prev = None
    while prev != text:
        prev = text
        text = text.strip().strip("\"'`*_\u201c\u201d\u2018\u2019").rstrip(".,;:!?")
    return text.casefold()


def normalise_verdict(value: Any) -> bool | None:
    """Map a yes/no verdict in any common spelling to a bool; None if it is not one.

    "Yes." must read as yes (some peers compare against "yes" exactly and count it as no).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return True if value == 1 else False if value == 0 else None
    if isinstance(value, str):
        word = _norm_word(value)
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


# --------------------------------------------------------------------------- coercion


def coerce(value: Any, schema: dict[str, Any], path: str = "$") -> Any:
    """Validate ``value`` against ``schema`` and return it normalised.

    Raises AnswerError(kind="schema") listing every problem with its JSON path.
    """
    return _coerce(value, schema, path, schema)


_EXACT = {"string": str, "boolean": bool, "object": dict, "array": list}

#: A compiled `fits_exactly` check of one schema.
Check = Callable[[Any], bool]
#: Checks compiled so far, by the id of their schema (kept beside it, so the id stays its).
_CHECKS: dict[int, tuple[dict[str, Any], Check]] = {}
_MAX_CHECKS = 256


def fits_exactly(value: Any, schema: dict[str, Any]) -> bool:
    """True when ``value`` already is exactly what ``schema`` asks for, needing no repair.

    The common case with schema-constrained servers: a cheap strict check, so that only
    answers that need normalising pay for `coerce`. Anything this subset does not know
    (anyOf, $ref, enums of non-strings...) answers False and goes through `coerce`. The
    check of a schema is compiled once (a task's schema is one object for the whole run):
    1.9 us an answer of the metrics' own schemas, against 10.7 us walking the schema dict.
    """
    known = _CHECKS.get(id(schema))
    if known is None or known[0] is not schema:
        if len(_CHECKS) >= _MAX_CHECKS:  # each session makes its own schemas: bounded
            _CHECKS.clear()
        known = (schema, _compile(schema))
        _CHECKS[id(schema)] = known
    return known[1](value)


def _never(value: Any) -> bool:
    return False


def _compile(schema: dict[str, Any]) -> Check:
    """The check of `schema` (see `fits_exactly`), its subschemas compiled in."""
    if len(schema.keys() - _EXACT_KEYS) > 0:
        return _never
    kind = schema.get("type")
    nullable = False
    if isinstance(kind, list):  # ["integer", "null"]: a nullable field (an optional index)
        nullable = "null" in kind  # what `coerce` returns for a nullable field's null
        concrete = [t for t in kind if t != "null"]
        # One type besides null, and not "number" (`coerce` makes an int of it a float).
        if len(concrete) != 1 or not isinstance(concrete[0], str) or concrete[0] == "number":
            return (lambda value: value is None) if nullable else _never
        kind = concrete[0]
    elif not isinstance(kind, str):
        return _never
    check = _compile_kind(kind, schema)
    if nullable:
        return lambda value: value is None or check(value)
    return check


def _compile_kind(kind: str, schema: dict[str, Any]) -> Check:
    low, high, enum = schema.get("minimum"), schema.get("maximum"), schema.get("enum")
    if kind in ("integer", "number"):
        types = (int,) if kind == "integer" else (int, float)

        def number(value: Any) -> bool:
            if type(value) not in types:
                return False
            if (low is not None and value < low) or (high is not None and value > high):
                return False
            return enum is None or value in enum

        return number
    expected = _EXACT.get(kind)
    if expected is None:
        return _never
    if kind == "string":
        return lambda value: type(value) is str and (enum is None or value in enum)
    if kind == "array":
        fewest, most = schema.get("minItems"), schema.get("maxItems")
        items = schema.get("items")
        each = None if items is None else _compile(items)

        def array(value: Any) -> bool:
            if type(value) is not list:
                return False
            if (fewest is not None and len(value) < fewest) or (
                most is not None and len(value) > most
            ):
                return False
            return each is None or all(each(v) for v in value)

        return array
    if kind == "object":
        props = schema.get("properties")
        if props is None:
            return _never
        names = frozenset(props)
        checks = [(name, _compile(sub)) for name, sub in props.items()]

        def obj(value: Any) -> bool:
            if type(value) is not dict or value.keys() != names:
                return False
            return all(check(value[name]) for name, check in checks)

        return obj
    return lambda value: type(value) is expected


_EXACT_KEYS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "enum",
        "additionalProperties",
        "description",
        "title",
    }
)


def _describe(value: Any) -> str:
    """Short rendering of a bad value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    return repr(value)


def _fail(path: str, message: str) -> AnswerError:
    return _schema_error([f"{path}: {message}"])


def _child_path(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _same(a: Any, b: Any) -> bool:
    """Deep equality that tells True from 1 and "1" from 1 (== does not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _coerce(value: Any, schema: Any, path: str, root: dict[str, Any]) -> Any:
    if schema is True or schema == {}:
        return value
    if schema is False:
        raise _fail(path, "no value is allowed here")
    if not isinstance(schema, dict):
        raise TypeError(f"schema at {path} must be a dict, got {type(schema).__name__}")
    schema = resolve(schema, root)

    for sub in schema.get("allOf") or ():
        value = _coerce(value, sub, path, root)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return _coerce_any_of(value, branches, path, root)

    types = declared_types(schema)
    enum = schema.get("enum")
    if types is None:
        if not isinstance(enum, list):
            return value
        if value is None and None in enum:
            return None
        return _match_enum(value, enum, path)
    nullable = (
        "null" in types
        or schema.get("nullable") is True
        or (isinstance(enum, list) and None in enum)
    )
    if value is None and nullable:
        return None
    concrete = [t for t in types if t != "null"]
    if not concrete:
        raise _fail(path, f"expected null, got {_describe(value)}")
    if len(concrete) == 1:
        return _coerce_type(value, concrete[0], schema, path, root)

    # Several types: one the value already has wins before any lossy conversion.
    have = value_types(value)
    ordered = [t for t in concrete if t in have] + [t for t in concrete if t not in have]
    for t in ordered:
        try:
            return _coerce_type(value, t, schema, path, root)
        except AnswerError:
            continue
    names = " or ".join(types)
    raise _fail(path, f"expected {names}, got {_describe(value)}")


def _coerce_any_of(value: Any, branches: list[Any], path: str, root: dict[str, Any]) -> Any:
    """First branch that coerces, trying branches of the value's own JSON type first.

    Type-first keeps ``4`` an integer under anyOf [string, integer] instead of turning it
    into "4"; within a type, declaration order decides (an enum listed first normalises).
    """
    have = value_types(value)
    matching: list[Any] = []
    other: list[Any] = []
    for branch in branches:
        types = types_of(branch, root)
        (matching if types is None or types & have else other).append(branch)
    errors: list[AnswerError] = []
    for branch in matching + other:
        try:
            return _coerce(value, branch, path, root)
        except AnswerError as exc:
            if types_of(branch, root) != {"null"}:
                errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if not errors:
        raise _fail(path, f"expected null, got {_describe(value)}")
    reasons = " | ".join(e.errors[0].removeprefix(f"{path}: ") for e in errors[:3])
    raise _fail(path, f"matched none of the allowed forms ({reasons})")


def _coerce_type(
    value: Any, type_name: str, schema: dict[str, Any], path: str, root: dict[str, Any]
) -> Any:
    if type_name == "object":
        return _coerce_object(value, schema, path, root)
    if type_name == "array":
        return _coerce_array(value, schema, path, root)
    if type_name == "string":
        result: Any = _to_string(value, path)
    elif type_name == "boolean":
        result = normalise_verdict(value)
        if result is None:
            raise _fail(path, f"expected a boolean verdict, got {_describe(value)}")
    elif type_name == "integer":
        result = _to_int(value)
        if result is None:
            raise _fail(path, f"expected an integer, got {_describe(value)}")
        _check_bounds(result, schema, path)
    elif type_name == "number":
        result = _to_float(value)
        if result is None:
            raise _fail(path, f"expected a number, got {_describe(value)}")
        _check_bounds(result, schema, path)
    elif type_name == "null":
        if value is not None:
            raise _fail(path, f"expected null, got {_describe(value)}")
        return None
    else:
        return value
    enum = schema.get("enum")
    if isinstance(enum, list):
        return _match_enum(result, enum, path)
    return result


def _to_string(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    raise _fail(path, f"expected a string, got {_describe(value)}")


def _to_float(value: Any) -> float | None:
    """Finite float from a number or a clean numeric string ("0.5", " 3 ")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str) and _NUMERIC.fullmatch(value.strip()):
        number = float(value.strip())
    else:
        return None
    return number if math.isfinite(number) else None


def _to_int(value: Any) -> int | None:
    """Integer from 4, 4.0, "4", "4.0" or " 4 "; None for 4.5, "4/4", booleans."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        try:
            return int(value.strip())
        except ValueError:  # beyond Python's int-from-string digit limit
            return None
    number = _to_float(value)
    if number is None or not number.is_integer():
        return None
    return int(number)


def _check_bounds(number: float, schema: dict[str, Any], path: str) -> None:
    low, high, xlow, xhigh = numeric_bounds(schema)
    shown = _describe(number)
    if low is not None and number < low:
        raise _fail(path, f"expected a value >= {low}, got {shown}")
    if high is not None and number > high:
        raise _fail(path, f"expected a value <= {high}, got {shown}")
    if xlow is not None and number <= xlow:
        raise _fail(path, f"expected a value > {xlow}, got {shown}")
    if xhigh is not None and number >= xhigh:
        raise _fail(path, f"expected a value < {xhigh}, got {shown}")


def _match_enum(value: Any, enum: list[Any], path: str) -> Any:
    """Return the canonical enum member for ``value``: exact first, then loose spelling.

    Loose means case-insensitive, ignoring whitespace, quotes and trailing punctuation,
    so enum ["yes", "no", "idk"] accepts "Yes." and "IDK"; a boolean or a verdict word
    picks the one member that is a verdict of the same polarity.
    """
    for member in enum:
        if _same(member, value):
            return member
    if isinstance(value, str):
        word = _norm_word(value)
        for member in enum:
            if isinstance(member, str) and _norm_word(member) == word:
                return member
        number = _to_float(value)
        if number is not None:
            for member in enum:
                if _same(member, number):
                    return member
    elif isinstance(value, int | float) and not isinstance(value, bool):
        for member in enum:
            if isinstance(member, str) and _to_float(member) == value:
                return member
    wordy = isinstance(value, bool) or (isinstance(value, str) and _to_float(value) is None)
    verdict = normalise_verdict(value) if wordy else None
    if verdict is not None:  # true / "y" for a yes/no enum (numbers are too ambiguous)
        hits = [m for m in enum if isinstance(m, str) and normalise_verdict(m) is verdict]
        if len(hits) == 1:
            return hits[0]
    allowed = ", ".join(_describe(m) for m in enum[:12])
    if len(enum) > 12:
        allowed += ", ..."
    raise _fail(path, f"expected one of {allowed}, got {_describe(value)}")


def _coerce_array(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]) -> Any:
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, dict) and len(value) == 1:  # {"items": [...]} around a bare array
        (inner,) = value.values()
        if isinstance(inner, list):
            value = inner
    if not isinstance(value, list):
        raise _fail(path, f"expected an array, got {_describe(value)}")
    count = len(value)
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and low == high and count != low:
        raise _fail(path, f"expected {_items(low)}, got {count}")
    if low is not None and count < low:
        raise _fail(path, f"expected at least {_items(low)}, got {count}")
    if high is not None and count > high:
        raise _fail(path, f"expected at most {_items(high)}, got {count}")
    item_schema = schema.get("items")
    if not isinstance(item_schema, dict):
        return list(value)
    out: list[Any] = []
    errors: list[str] = []
    for index, item in enumerate(value):
        try:
            out.append(_coerce(item, item_schema, f"{path}[{index}]", root))
        except AnswerError as exc:
            errors.extend(exc.errors)
    if errors:
        raise _schema_error(errors)
    return out


_SCHEMA_WORDS: Final = frozenset(
    {"properties", "type", "required", "items", "additionalProperties", "$schema", "$defs"}
)


def _looks_echoed(value: dict[str, Any], props: dict[str, Any], required: list[str]) -> bool:
    """Tiny models sometimes return the schema (or ``{"properties": {...}}``) as the answer."""
    markers = (_SCHEMA_WORDS - props.keys()) & value.keys()
    if not markers:
        return False
    schema_like = isinstance(value.get("properties"), dict) and "properties" in markers
    schema_like = schema_like or ("type" in markers and value["type"] in ("object", "array"))
    return schema_like and not any(k in value for k in (required or props))


def _single_array_property(schema: dict[str, Any], root: dict[str, Any]) -> str | None:
    """Name of the object's only property if that property is an array, else None."""
    props = schema.get("properties")
    if not isinstance(props, dict) or len(props) != 1:
        return None
    ((name, sub),) = props.items()
    return name if types_of(sub, root) == {"array"} else None


def _key_norm(key: str) -> str:
    return key.strip().casefold()


def _coerce_object(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]) -> Any:
    value = _as_object(value, schema, path, root)
    out: dict[str, Any] = {}
    errors: list[str] = []
    used = _coerce_properties(value, schema, path, root, out, errors)
    extra = schema.get("additionalProperties")
    if extra is True or (extra is None and not schema.get("properties")) or isinstance(extra, dict):
        for key, item in value.items():
            if key in used or key in out:
                continue
            if isinstance(extra, dict):
                try:
                    out[key] = _coerce(item, extra, _child_path(path, str(key)), root)
                except AnswerError as exc:
                    errors.extend(exc.errors)
            else:
                out[key] = item
    if errors:
        raise _schema_error(errors)
    return out


def _as_object(
    value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]
) -> dict[Any, Any]:
    """`value` as the object to coerce: a bare list put back in its only array property; an
    error for anything else that is not an object, or for the schema echoed back."""
    props: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = list(schema.get("required") or [])
    if isinstance(value, list | tuple):
        wrapper = _single_array_property(schema, root)
        if wrapper is not None:  # the model dropped the {"verdicts": ...} wrapper
            value = {wrapper: list(value)}
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {_describe(value)}")
    if props and _looks_echoed(value, props, required):
        keys = ", ".join(repr(k) for k in (required or list(props)))
        raise _fail(
            path,
            "the JSON schema was echoed instead of filled; "
            f"return an object with the keys {keys} holding your answers",
        )
    return value


def _coerce_properties(
    value: dict[Any, Any],
    schema: dict[str, Any],
    path: str,
    root: dict[str, Any],
    out: dict[str, Any],
    errors: list[str],
) -> set[Any]:
    """Coerce the declared and the required keys of `value` into `out` (their errors into
    `errors`), a default for a declared key that is missing; the keys of `value` used."""
    props: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = list(schema.get("required") or [])
    # Exact keys first; a case/whitespace variant ("Verdicts ") only for undeclared keys.
    loose: dict[str, str] = {}
    for key in value:
        if isinstance(key, str) and key not in props:
            loose.setdefault(_key_norm(key), key)
    used: set[Any] = set()
    for name, sub in props.items():
        key: Any = name if name in value else loose.get(_key_norm(name))
        if key is None or key in used:
            if name in required:
                errors.append(f"{_child_path(path, name)}: required key is missing")
            elif isinstance(sub, dict) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            continue
        used.add(key)
        try:
            out[name] = _coerce(value[key], sub, _child_path(path, name), root)
        except AnswerError as exc:
            errors.extend(exc.errors)
    for name in required:
        if name not in props:
            if name in value:
                out[name] = value[name]
                used.add(name)
            else:
                errors.append(f"{_child_path(path, name)}: required key is missing")
    return used
