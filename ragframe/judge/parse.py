"""Turn an LLM judge's raw answer into validated, normalised JSON.

Servers that honour ``response_format`` return clean JSON; many do not (fences, prose,
Python literals, verdicts spelled "Yes."). Everything here is lenient about *spelling* and
strict about *shape*: a wrong shape or item count is never silently fixed, it becomes an
:class:`AnswerError` whose message names the JSON path, so it can be fed back to the model
for one repair retry.

Two stages, in two modules: `ragframe.judge.extract` finds the JSON values in the text,
`ragframe.judge.coerce` holds one to the schema; `parse_answer` picks which value is the
answer. The names below are re-exported so callers need one import.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ragframe.judge.coerce import coerce, fits_exactly, normalise_verdict
from ragframe.judge.extract import AnswerError, Scan, candidates, extract_json, truncated_error
from ragframe.judge.schema import types_of, value_types

__all__ = ["AnswerError", "coerce", "extract_json", "normalise_verdict", "parse_answer"]

_MAX_CANDIDATES: Final = 8  # parsed values parse_answer tries against the schema


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
        if fits_exactly(value, schema):
            return value
    wanted = types_of(schema, schema)
    scan = Scan()
    found: list[tuple[Any, bool]] = []
    for value in candidates(text, scan):
        found.append((value, scan.inside_open))
        if len(found) >= _MAX_CANDIDATES:
            break
    fits = [wanted is None or bool(value_types(v) & wanted) for v, _ in found]
    ordered = [c for c, ok in zip(found, fits, strict=True) if ok]
    ordered += [c for c, ok in zip(found, fits, strict=True) if not ok]
    errors: list[tuple[AnswerError, bool]] = []
    for value, fragment in ordered:
        try:
            return coerce(value, schema)
        except AnswerError as exc:
            errors.append((exc, fragment))
    error, fragment = errors[0]  # candidates yields at least once or raises
    if fragment:  # a piece of a cut-off answer: "incomplete" is the useful feedback
        raise truncated_error()
    raise error
