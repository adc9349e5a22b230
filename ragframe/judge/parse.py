"""Turn an LLM judge's raw answer into validated, normalised JSON.

Servers that honour ``response_format`` return clean JSON; many do not (fences, prose,
Python literals, verdicts spelled "Yes."). Everything here is lenient about *spelling* and
strict about *shape*: a wrong shape or item count is never silently fixed, it becomes an
:class:`AnswerError` whose message names the JSON path, so it can be fed back to the model
for one repair retry.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["AnswerError", "coerce", "extract_json", "normalise_verdict", "parse_answer"]

_MAX_SPAN_STARTS: Final = 32  # bounds the work on long, bracket-heavy prose
_SCAN_BUDGET: Final = 100_000  # bracket/quote events over all starts (~0.1 s each 100k)
_MAX_CANDIDATES: Final = 8  # parsed values parse_answer tries against the schema
_MAX_REPORTED: Final = 5  # schema errors spelled out in one message

_TRUE_WORDS: Final = frozenset({"yes", "y", "true", "1"})
_FALSE_WORDS: Final = frozenset({"no", "n", "false", "0"})

_FENCE = re.compile(r"```[ \t]*(?:[A-Za-z][\w+-]*(?=\s))?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DIGITS = re.compile(r"[+-]?\d+")
_IDENT = re.compile(r"[\w$]+")
_NUMBER_TOKEN = re.compile(r"[-+]?[\w.+-]+")
_SCAN = re.compile(r"[\[\]{}\"'\u201c\u201d\u201e\u2018\u2019\\]")
_PLAIN_KEY = re.compile(r"[A-Za-z_][\w]*")

_DQ_CLOSE: Final = {
    '"': '"',
    "\u201c": '\u201d\u201c"',
    "\u201d": '\u201d\u201c"',
    "\u201e": '\u201d\u201c"',
}
_SQ_CLOSE: Final = {"'": "'", "\u2018": "\u2019\u2018'", "\u2019": "\u2019\u2018'"}
_QUOTE_CLOSE: Final = {**_DQ_CLOSE, **_SQ_CLOSE}
_PAIRS: Final = {"{": "}", "[": "]"}
_JSON_ESCAPES: Final = frozenset('"\\/bfnrtu')
_PY_LITERALS: Final = {"True": "true", "False": "false", "None": "null"}


class AnswerError(ValueError):
    """The judge's answer could not be used; `message` is fit to feed back to the model.

    Messages are bare clauses (no instructions, no final period): the caller wraps them in
    its own repair prompt ("Your answer could not be used: {message}. Reply again ...").

    ``kind`` is one of ``"empty"``, ``"no_json"``, ``"invalid_json"``, ``"schema"``;
    ``errors`` lists every schema problem found (``message`` shows the first few).
    """

    def __init__(self, message: str, kind: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.errors = errors if errors is not None else [message]


def _schema_error(errors: list[str]) -> AnswerError:
    """One error carrying all problems, so a repair prompt can fix them in one go."""
    shown = "; ".join(errors[:_MAX_REPORTED])
    if len(errors) > _MAX_REPORTED:
        shown += f"; and {len(errors) - _MAX_REPORTED} more"
    return AnswerError(shown, "schema", list(errors))


# --------------------------------------------------------------------------- extraction


def extract_json(text: str) -> Any:
    """Return the first JSON value found in ``text``.

    Tries, in order: strict ``json.loads``; code-fence contents; balanced ``{...}``/``[...]``
    spans (string-aware); each fence/span also gets a light repair (trailing commas, single
    quotes, Python literals, smart quotes, bare keys) if the strict parse fails.
    """
    return next(_candidates(text, _Scan()))


@dataclass
class _Scan:
    """Whether the value just yielded sits inside a span that never closes (a cut-off answer)."""

    inside_open: bool = False


def _candidates(text: str | None, scan: _Scan) -> Iterator[Any]:
    """Yield every parseable JSON value in reading order; raise AnswerError if there is none.

    A generator, so parse_answer can skip e.g. a leading "[1]" citation that is valid
    JSON but not the answer, while extract_json stops at the first hit.
    """
    if text is None or not text.strip():
        raise AnswerError("the answer was empty", "empty")
    strict = _loads(text)
    if strict is not _FAIL:
        yield strict
        return
    body = _THINK.sub("", text)  # reasoning models may put braces in their thoughts
    if not body.strip():
        raise AnswerError("the answer held only reasoning, no JSON", "empty")

    seen: set[str] = set()
    found = False
    first_error: str | None = None
    unclosed = False

    def attempt(chunk: str) -> Any:
        nonlocal found, first_error
        if chunk in seen:
            return _FAIL
        seen.add(chunk)
        value, error = _parse_chunk(chunk)
        if value is _FAIL:
            first_error = first_error or error
        else:
            found = True
        return value

    # Fence contents first: the model itself marked them as the answer.
    for match in _FENCE.finditer(body):
        content = match.group(1).strip()
        if content and (value := attempt(content)) is not _FAIL:
            yield value
    # Then balanced spans, outermost first; starts inside a span that parsed are skipped.
    pos = skip_until = starts = 0
    budget = [max(_SCAN_BUDGET, 2 * len(body))]  # always enough for one full pass
    while starts < _MAX_SPAN_STARTS and budget[0] > 0:
        opens = [i for i in (body.find("{", pos), body.find("[", pos)) if i >= 0]
        if not opens:
            break
        start = min(opens)
        pos = start + 1
        if start < skip_until:
            continue
        starts += 1
        end = _match_close(body, start, budget)
        if end < 0:
            unclosed = unclosed or end == _RAN_OFF
            continue
        if (value := attempt(body[start : end + 1])) is not _FAIL:
            skip_until = end + 1
            scan.inside_open = unclosed  # spans run off to the end, so this one is inside
            yield value

    if found:
        return
    if first_error is not None:
        raise AnswerError(f"the JSON in the answer is not valid: {first_error}", "invalid_json")
    if unclosed:
        raise _truncated_error()
    raise AnswerError("no JSON object found in the answer", "no_json")


def _truncated_error() -> AnswerError:
    return AnswerError(
        "the JSON in the answer is incomplete: a '{' or '[' is never closed", "invalid_json"
    )


class _Fail:
    """Sentinel type: ``None`` is a legitimate JSON value, so failure needs its own marker."""


_FAIL: Final = _Fail()
_RAN_OFF: Final = -1  # _match_close: text ended before the span closed (truncated answer)
_MISMATCH: Final = -2  # _match_close: a closer of the wrong kind (prose, not JSON)


def _loads(text: str, strict: bool = True) -> Any:
    """``json.loads`` that reports failure with _FAIL instead of raising."""
    try:
        return json.loads(text, strict=strict)
    except (ValueError, RecursionError):
        return _FAIL


def _parse_chunk(chunk: str) -> tuple[Any, str]:
    """Strict parse, then repaired parse; on failure return the strict parser's complaint."""
    try:
        return json.loads(chunk), ""
    except json.JSONDecodeError as exc:
        error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        error = str(exc)
    except RecursionError:
        error = "nested too deeply"
    if chunk[:1] in _PAIRS:
        repaired = _repair(chunk)
        if repaired is not None:
            value = _loads(repaired, strict=False)
            if value is not _FAIL:
                return value, ""
    return _FAIL, error


def _match_close(text: str, start: int, budget: list[int]) -> int:
    """Index of the bracket closing ``text[start]``, or _RAN_OFF / _MISMATCH.

    Brackets inside quoted strings (straight, single or smart quotes) do not count.
    ``budget[0]`` counts down per bracket/quote seen, so hostile text cannot take seconds.
    """
    stack = [_PAIRS[text[start]]]
    quote_end: str | None = None
    i = start + 1
    while (m := _SCAN.search(text, i)) is not None:
        budget[0] -= 1
        if budget[0] < 0:
            return _MISMATCH
        i = m.start()
        c = text[i]
        if quote_end is not None:
            if c == "\\":
                i += 2
                continue
            if c in quote_end:
                quote_end = None
        elif c in _QUOTE_CLOSE:
            quote_end = _QUOTE_CLOSE[c]
        elif c in _PAIRS:
            stack.append(_PAIRS[c])
        elif c in "]}":
            if stack.pop() != c:
                return _MISMATCH
            if not stack:
                return i
        i += 1
    return _RAN_OFF


def _repair(chunk: str) -> str | None:
    """Rewrite near-JSON (Python/JS style) into JSON; None if a string is unterminated.

    Handles trailing commas, single- and smart-quoted strings, True/False/None and bare
    identifier keys. Works token by token so nothing inside a string is touched.
    """
    out: list[str] = []
    i = 0
    n = len(chunk)
    while i < n:
        c = chunk[i]
        if c in _QUOTE_CLOSE:
            end, content = _read_string(chunk, i + 1, _QUOTE_CLOSE[c], escape_dq=c != '"')
            if end is None:
                return None
            out.append(f'"{content}"')
            i = end + 1
        elif c in "}]":
            while out and (out[-1].isspace() or out[-1] == ","):
                out.pop()
            out.append(c)
            i += 1
        elif c.isalpha() or c in "_$":
            m = _IDENT.match(chunk, i)
            assert m is not None
            word = m.group()
            i = m.end()
            j = i
            while j < n and chunk[j].isspace():
                j += 1
            if j < n and chunk[j] == ":" and word not in _PY_LITERALS:
                out.append(json.dumps(word))
            else:
                out.append(_PY_LITERALS.get(word, word))
        elif c.isdigit() or c in "-+.":
            m = _NUMBER_TOKEN.match(chunk, i)
            assert m is not None
            out.append(m.group())
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _read_string(s: str, i: int, closers: str, escape_dq: bool) -> tuple[int | None, str]:
    """Read a quoted string body starting at ``i``; return (closing index, JSON-escaped body).

    Fixes escapes JSON rejects (``\\'``, ``\\d``) and, for non-JSON quotes, escapes any raw
    double quote inside.
    """
    parts: list[str] = []
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if nxt == "'":
                parts.append("'")
            elif nxt in _JSON_ESCAPES:
                parts.append(c + nxt)
            else:
                parts.append("\\\\" + nxt)
            i += 2
            continue
        if c in closers:
            return i, "".join(parts)
        parts.append('\\"' if c == '"' and escape_dq else c)
        i += 1
    return None, ""


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


def _exact(value: Any, schema: dict[str, Any]) -> bool:
    """True when ``value`` already is exactly what ``schema`` asks for, needing no repair.

    The common case with schema-constrained servers: a cheap strict check, so that only
    answers that need normalising pay for `coerce`. Anything this subset does not know
    (anyOf, $ref, enums of non-strings...) answers False and goes through `coerce`.
    """
    kind = schema.get("type")
    if not isinstance(kind, str) or len(schema.keys() - _EXACT_KEYS) > 0:
        return False
    if kind == "integer":
        ok = type(value) is int
    elif kind == "number":
        ok = type(value) in (int, float)
    else:
        expected = _EXACT.get(kind)
        ok = expected is not None and type(value) is expected
    if not ok:
        return False
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return False
        enum = schema.get("enum")
        return enum is None or value in enum
    if kind == "string":
        enum = schema.get("enum")
        return enum is None or value in enum
    if kind == "array":
        low, high = schema.get("minItems"), schema.get("maxItems")
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            return False
        items = schema.get("items")
        return items is None or all(_exact(v, items) for v in value)
    if kind == "object":
        props = schema.get("properties")
        if props is None or value.keys() != props.keys():
            return False
        return all(_exact(value[k], sub) for k, sub in props.items())
    return True


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


def parse_answer(text: str, schema: dict[str, Any]) -> Any:
    """Extract JSON from ``text`` and coerce it to ``schema``.

    Looks at the first few JSON values in the text, those of the schema's top-level type
    first, and returns the first that fits, so a "[1]" citation before the answer cannot
    be mistaken for it (e.g. wrapped as a bare array). Otherwise raises the error of the
    first value of the right type, or "incomplete" when that is a fragment of a cut-off
    answer.
    """
    try:  # fast path: clean JSON of exactly the right shape
        value = json.loads(text)
    except (ValueError, TypeError):
        pass
    else:
        if _exact(value, schema):
            return value
    wanted = _declared_types(schema, schema)
    scan = _Scan()
    found: list[tuple[Any, bool]] = []
    for value in _candidates(text, scan):
        found.append((value, scan.inside_open))
        if len(found) >= _MAX_CANDIDATES:
            break
    fits = [wanted is None or bool(_json_types(v) & wanted) for v, _ in found]
    ordered = [c for c, ok in zip(found, fits, strict=True) if ok]
    ordered += [c for c, ok in zip(found, fits, strict=True) if not ok]
    errors: list[tuple[AnswerError, bool]] = []
    for value, fragment in ordered:
        try:
            return coerce(value, schema)
        except AnswerError as exc:
            errors.append((exc, fragment))
    error, fragment = errors[0]  # _candidates yields at least once or raises
    if fragment:  # a piece of a cut-off answer: "incomplete" is the useful feedback
        raise _truncated_error()
    raise error


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


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref``s (pydantic puts nested models in ``$defs``)."""
    for _ in range(32):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        target: Any = root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise TypeError(f"unresolvable $ref {ref!r}")
            target = target[part]
        if not isinstance(target, dict):
            raise TypeError(f"$ref {ref!r} does not point at a schema")
        schema = target
    raise TypeError("$ref chain too long")


def _json_types(value: Any) -> set[str]:
    """JSON Schema type names ``value`` already is, without any conversion."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list | tuple):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


def _declared_types(schema: Any, root: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema admits, or None when it does not say (accepts anything)."""
    if not isinstance(schema, dict):
        return None
    schema = _resolve(schema, root)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        union: set[str] = set()
        for branch in branches:
            types = _declared_types(branch, root)
            if types is None:
                return None
            union |= types
        return union
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    if "properties" in schema:
        return {"object"}
    if "items" in schema:
        return {"array"}
    if isinstance(schema.get("enum"), list):
        return set().union(*(_json_types(m) for m in schema["enum"]))
    return None


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
    schema = _resolve(schema, root)

    for sub in schema.get("allOf") or ():
        value = _coerce(value, sub, path, root)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return _coerce_any_of(value, branches, path, root)

    declared = schema.get("type")
    enum = schema.get("enum")
    if declared is None:
        if "properties" in schema:
            declared = "object"
        elif "items" in schema:
            declared = "array"
        elif isinstance(enum, list):
            if value is None and None in enum:
                return None
            return _match_enum(value, enum, path)
        else:
            return value
    types = [declared] if isinstance(declared, str) else list(declared)
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
    have = _json_types(value)
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
    have = _json_types(value)
    matching: list[Any] = []
    other: list[Any] = []
    for branch in branches:
        types = _declared_types(branch, root)
        (matching if types is None or types & have else other).append(branch)
    errors: list[AnswerError] = []
    for branch in matching + other:
        try:
            return _coerce(value, branch, path, root)
        except AnswerError as exc:
            if _declared_types(branch, root) != {"null"}:
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
    low, high = schema.get("minimum"), schema.get("maximum")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if xlow is True:  # draft-4 spelling: a flag on minimum
        xlow, low = low, None
    if xhigh is True:
        xhigh, high = high, None
    shown = _describe(number)
    if isinstance(low, int | float) and not isinstance(low, bool) and number < low:
        raise _fail(path, f"expected a value >= {low}, got {shown}")
    if isinstance(high, int | float) and not isinstance(high, bool) and number > high:
        raise _fail(path, f"expected a value <= {high}, got {shown}")
    if isinstance(xlow, int | float) and not isinstance(xlow, bool) and number <= xlow:
        raise _fail(path, f"expected a value > {xlow}, got {shown}")
    if isinstance(xhigh, int | float) and not isinstance(xhigh, bool) and number >= xhigh:
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
    return name if _declared_types(sub, root) == {"array"} else None


def _key_norm(key: str) -> str:
    return key.strip().casefold()


def _coerce_object(value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]) -> Any:
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

    # Exact keys first; a case/whitespace variant ("Verdicts ") only for undeclared keys.
    loose: dict[str, str] = {}
    for key in value:
        if isinstance(key, str) and key not in props:
            loose.setdefault(_key_norm(key), key)
    out: dict[str, Any] = {}
    errors: list[str] = []
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

    extra = schema.get("additionalProperties")
    if extra is True or (extra is None and not props) or isinstance(extra, dict):
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
