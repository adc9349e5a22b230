"""Find the JSON value in a judge's raw answer.

Servers that honour ``response_format`` return clean JSON; many do not (fences, prose,
Python literals, smart quotes, a reasoning model's thoughts). This module finds the values
in such text and repairs near-JSON; `ragframe.judge.coerce` then holds them to the schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["AnswerError", "Scan", "candidates", "extract_json", "truncated_error"]

_MAX_SPAN_STARTS: Final = 32  # bounds the work on long, bracket-heavy prose
_SCAN_BUDGET: Final = 100_000  # bracket/quote events over all starts (~0.1 s each 100k)

_FENCE = re.compile(r"```[ \t]*(?:[A-Za-z][\w+-]*(?=\s))?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_IDENT = re.compile(r"[\w$]+")
_NUMBER_TOKEN = re.compile(r"[-+]?[\w.+-]+")
_SCAN = re.compile(r"[\[\]{}\"'\u201c\u201d\u201e\u2018\u2019\\]")

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


def extract_json(text: str) -> Any:
    """Return the first JSON value found in ``text``.

    Tries, in order: strict ``json.loads``; code-fence contents; balanced ``{...}``/``[...]``
    spans (string-aware); each fence/span also gets a light repair (trailing commas, single
    quotes, Python literals, smart quotes, bare keys) if the strict parse fails.
    """
    return next(candidates(text, Scan()))


@dataclass
class Scan:
    """Whether the value just yielded sits inside a span that never closes (a cut-off answer)."""

    inside_open: bool = False


def candidates(text: str | None, scan: Scan) -> Iterator[Any]:
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

    attempts = _Attempts()
    # Fence contents first: the model itself marked them as the answer.
    for match in _FENCE.finditer(body):
        content = match.group(1).strip()
        if content and (value := attempts.parse(content)) is not _FAIL:
            yield value
    yield from _span_values(body, attempts, scan)
    if not attempts.found:
        raise attempts.failure()


@dataclass
class _Attempts:
    """The chunks `candidates` tried to parse, and what came of them."""

    seen: set[str] = field(default_factory=set)
    found: bool = False
    first_error: str | None = None
    #: Whether some span never closed (the answer may have been cut off).
    unclosed: bool = False

    def parse(self, chunk: str) -> Any:
        """The value of `chunk`, or _FAIL (also for a chunk tried before)."""
        if chunk in self.seen:
            return _FAIL
        self.seen.add(chunk)
        value, error = _parse_chunk(chunk)
        if value is _FAIL:
            self.first_error = self.first_error or error
        else:
            self.found = True
        return value

    def failure(self) -> AnswerError:
        """Why no chunk parsed: the first parse error, else a span cut off, else no JSON."""
        if self.first_error is not None:
            return AnswerError(
                f"the JSON in the answer is not valid: {self.first_error}", "invalid_json"
            )
        if self.unclosed:
            return truncated_error()
        return AnswerError("no JSON object found in the answer", "no_json")


def _span_values(body: str, attempts: _Attempts, scan: Scan) -> Iterator[Any]:
    """The values of the balanced spans of `body`, outermost first; starts inside a span that
    parsed are skipped. Bounded: at most _MAX_SPAN_STARTS starts and a scanning budget."""
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
            attempts.unclosed = attempts.unclosed or end == _RAN_OFF
            continue
        if (value := attempts.parse(body[start : end + 1])) is not _FAIL:
            skip_until = end + 1
            scan.inside_open = attempts.unclosed  # spans run off to the end: this one is inside
            yield value


def truncated_error() -> AnswerError:
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
