"""Dry-run placeholders: schema-valid stand-in answers, so multi-stage metrics can be counted.

A dry run sends nothing. Each request the cache cannot answer is counted, with its prompt
tokens estimated as characters / 4 and its completion tokens from a typical answer: every
array filled with `TYPICAL_ITEMS` items (or exactly the count the schema pins), every string a
short sentence, every item's `index` its number (1..n). Later stages (claims -> verification
batches) are then built from these placeholders and counted as well. It is an estimate, not a
bill.
"""

from __future__ import annotations

import json
from typing import Any

from ragframe.judge.schema import first_branch, kind_of

TYPICAL_ITEMS = 4
TYPICAL_TEXT = "a typical judge sentence of about twelve words, for estimating tokens"


def _fill(schema: dict[str, Any]) -> Any:
    schema = first_branch(schema)
    if "enum" in schema:
        return schema["enum"][0]
    kind = kind_of(schema)
    if kind == "object":
        return {name: _fill(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        low = schema.get("minItems", TYPICAL_ITEMS)
        high = schema.get("maxItems", max(low, TYPICAL_ITEMS))
        count = min(max(low, TYPICAL_ITEMS), high)
        items = [_fill(schema.get("items", {"type": "string"})) for _ in range(count)]
        # Verdicts that name the item they judge get its number, as a real answer would.
        for number, item in enumerate(items, start=1):
            if isinstance(item, dict) and "index" in item:
                item["index"] = number
        return items
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    return TYPICAL_TEXT


def placeholder(schema: dict[str, Any]) -> tuple[Any, int]:
    """A value valid for `schema`, and its size in tokens (characters / 4)."""
    value = _fill(schema)
    return value, len(json.dumps(value)) // 4 + 1
