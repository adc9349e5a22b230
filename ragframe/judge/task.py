"""What a metric stage asks the judge: instructions, an answer schema, and limits."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ragframe.judge.parse import AnswerError
from ragframe.judge.schema import Spec, dtype_of, without_reasons
from ragframe.prompts import for_reasons, has_reason_marks


@dataclass(frozen=True)
class Task:
    """One kind of question, asked once per prompt of a column.

    `counted` names the array property whose length must equal the number of items in the
    prompt (claims, contexts): the schema then pins it with minItems/maxItems so that
    grammar-constrained servers return exactly that many, and a wrong count is a parse
    failure to retry, never silently zipped short. A tuple names several arrays, each pinned
    to its own count (the per-prompt count is then a tuple in the same order).

    Reasons: `system` may mark the text that asks for a written reason (`[[reason: ...]]`, see
    `ragframe.prompts`), and the schema may hold `reason` fields (`schema.REASON_FIELDS`).
    A Task is one variant: `reasons=True` (the default) sends both as written; `reasons=False`
    sends the instructions without the marked text and the schema without reason fields, so
    the judge neither writes nor is asked for a reason. Either way `dtype` is the full
    schema's, so answers decode to the same struct (null reasons) and details keep their
    type; the two variants differ in `prompt_hash` and in every request, hence in cache keys.
    `with_reasons` gives the other variant.
    """

    name: str
    system: str
    #: The answer's JSON Schema, or a `Spec` built with `ragframe.judge.schema`.
    schema: dict[str, Any] | Spec
    max_tokens: int = 1024
    counted: str | tuple[str, ...] | None = None
    #: Paths ("facts.items.source_context") of integers that index the prompt's items: their
    #: `maximum` is pinned to the count, so an out-of-range index fails validation.
    indexes: tuple[str, ...] = ()
    top_logprobs: int = 0
    #: Counted arrays whose items carry an `index` (1..n) naming the prompt item they judge:
    #: the schema bounds it, `finish` checks that every index 1..n appears exactly once and
    #: puts the items in index order, so the order the judge writes them in does not matter.
    indexed: tuple[str, ...] = ()
    #: A consistency check on a validated answer that JSON Schema cannot say (e.g. "covered
    #: facts name their source"); returns the problem, fed back to the judge for a repair.
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)
    #: False: ask for no reasons (the marked text and the reason fields left out).
    reasons: bool = True
    dtype: pl.DataType = field(init=False, compare=False, repr=False)
    #: Hash of the instructions and schema: recorded in the output metadata.
    prompt_hash: str = field(init=False, compare=False, repr=False)

    #: The instructions and schema as given, both variants in them (see `with_reasons`).
    source: tuple[str, dict[str, Any]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.schema, Spec):  # one definition: the schema and its Polars type
            object.__setattr__(self, "schema", self.schema.schema)
        object.__setattr__(self, "source", (self.system, self.schema))
        object.__setattr__(self, "dtype", dtype_of(self.schema))
        object.__setattr__(self, "system", for_reasons(self.system, self.reasons))
        if not self.reasons:
            object.__setattr__(self, "schema", without_reasons(self.schema))
        blob = json.dumps([self.system, self.schema], sort_keys=True)
        object.__setattr__(self, "prompt_hash", hashlib.sha256(blob.encode()).hexdigest()[:16])

    @property
    def has_reasons(self) -> bool:
        """True when this task's two variants differ: its instructions mark a reason, or its
        schema has reason fields (the NVIDIA ratings, say, never ask for one)."""
        system, schema = self.source
        return has_reason_marks(system) or without_reasons(schema) != schema

    def with_reasons(self, reasons: bool) -> Task:
        """This task asking for reasons or not (itself when it already does as asked)."""
        if reasons == self.reasons:
            return self
        system, schema = self.source
        return dataclasses.replace(self, system=system, schema=schema, reasons=reasons)

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
        for name in self.indexed:
            n = counts[names.index(name)] if name in names else counts[0]
            index = schema["properties"][name]["items"]["properties"]["index"]
            index["minimum"] = 1
            index["maximum"] = n
        return schema

    def finish(self, value: Any) -> Any:
        """Checks JSON Schema cannot express, applied to every validated answer (live, cached
        raw, Batch API): indices exactly 1..n, then `check`. Raises AnswerError (repaired like
        a wrong count); returns the value with indexed items in index order."""
        for name in self.indexed:
            items = value.get(name) or []
            seen = sorted(item["index"] for item in items)
            if seen != list(range(1, len(items) + 1)):
                raise AnswerError(
                    f"$.{name}: each of the {len(items)} items must carry a different index "
                    f"from 1 to {len(items)} (the number of the item it judges); got "
                    f"{[item['index'] for item in items]}",
                    kind="index",
                )
            value[name] = sorted(items, key=lambda item: item["index"])
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise AnswerError(problem, kind="inconsistent")
        return value
