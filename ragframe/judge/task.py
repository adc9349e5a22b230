"""What a metric stage asks the judge: instructions, an answer schema, and limits."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass(frozen=True)
class Task:
    """One kind of question, asked once per prompt of a column.

    `counted` names the array property whose length must equal the number of items in the
    prompt (claims, contexts): the schema then pins it with minItems/maxItems so that
    grammar-constrained servers return exactly that many, and a wrong count is a parse
    failure to retry, never silently zipped short. A tuple names several arrays, each pinned
    to its own count (the per-prompt count is then a tuple in the same order).
    """

    name: str
    system: str
    schema: dict[str, Any]
    max_tokens: int = 1024
    counted: str | tuple[str, ...] | None = None
    #: Paths ("facts.items.source_context") of integers that index the prompt's items: their
    #: `maximum` is pinned to the count, so an out-of-range index fails validation.
    indexes: tuple[str, ...] = ()
    top_logprobs: int = 0
    dtype: pl.DataType = field(init=False, compare=False, repr=False)
    #: Hash of the instructions and schema: recorded in the output metadata.
    prompt_hash: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", schema_dtype(self.schema))
        blob = json.dumps([self.system, self.schema], sort_keys=True)
        object.__setattr__(self, "prompt_hash", hashlib.sha256(blob.encode()).hexdigest()[:16])

    def schema_for(self, count: int | tuple[int, ...] | None) -> dict[str, Any]:
        """The schema for one prompt, with the counted array(s) pinned to their counts.

        `count` is one int, or a tuple with one count per name when `counted` is a tuple;
        `indexes` are pinned to the first count.
        """
        if count is None or (self.counted is None and not self.indexes):
            return self.schema
        counts = (count,) if isinstance(count, int) else tuple(count)
        names = (self.counted,) if isinstance(self.counted, str) else (self.counted or ())
        if names and len(counts) != len(names):
            raise ValueError(f"{self.name}: {len(names)} counted arrays but counts {count!r}")
        schema = copy.deepcopy(self.schema)
        for name, n in zip(names, counts, strict=False):
            prop = schema["properties"][name]
            prop["minItems"] = n
            prop["maxItems"] = n
        for path in self.indexes:
            node = schema
            for part in path.split("."):
                node = node[part] if part == "items" else node["properties"][part]
            node["minimum"] = 1
            node["maximum"] = counts[0]
        return schema


def schema_dtype(schema: dict[str, Any]) -> pl.DataType:
    """The Polars type of a value that validated against `schema` (our JSON-schema subset)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "anyOf" in schema:
        return schema_dtype(schema["anyOf"][0])
    if "enum" in schema and kind is None:
        kind = "string"
    if kind == "object":
        props = schema.get("properties", {})
        return pl.Struct({name: schema_dtype(sub) for name, sub in props.items()})
    if kind == "array":
        return pl.List(schema_dtype(schema.get("items", {"type": "string"})))
    return {
        "string": pl.String(),
        "boolean": pl.Boolean(),
        "integer": pl.Int64(),
        "number": pl.Float64(),
    }.get(kind or "string", pl.String())
