"""Answer schemas: one definition per verdict, and one walker over the JSON-Schema subset.

A metric defines what the judge returns once, with the builders below; the JSON Schema the
judge sees (`Spec.schema`) and the Polars type its answers decode to (`Spec.dtype`) both come
from that one definition, so they cannot drift apart:

>>> verdict = indexed_verdict(supported=boolean())
>>> verify = obj(verdicts=array(verdict))
>>> verify.schema["properties"]["verdicts"]["items"]["required"]
['index', 'reason', 'supported']
>>> verdict.struct("claim", "supported", "reason", claim=pl.String())
Struct({'claim': String, 'supported': Boolean, 'reason': String})

Everything else that reads schemas (the parser, the dry-run placeholders, the output bounds for
small judges, the test server) walks plain JSON-Schema dicts through the walker here (`resolve`,
`declared_types`, `types_of`, `kind_of`, `first_branch`, `merge_all_of`, `numeric_bounds`,
`transform`), so the subset is interpreted in one place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

Schema = dict[str, Any]
Number = int | float

#: What `_pointer` returns for a pointer that names nothing (None is a JSON value).
_NOWHERE: Any = object()

_DTYPES: dict[str, pl.DataType] = {
    "string": pl.String(),
    "boolean": pl.Boolean(),
    "integer": pl.Int64(),
    "number": pl.Float64(),
}
#: Keywords whose value is one sub-schema, or a list or a mapping of them.
_ONE = ("items", "not", "additionalProperties")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPPING = ("properties", "$defs", "definitions")


# ----------------------------------------------------------------------------- one definition


@dataclass(frozen=True)
class Spec:
    """One node of an answer schema: its JSON Schema and the Polars type it decodes to."""

    schema: Schema
    dtype: pl.DataType

    @property
    def fields(self) -> dict[str, Spec]:
        """An object's fields, in order (empty for other kinds)."""
        props = self.schema.get("properties", {})
        dtypes = self.dtype.to_schema() if isinstance(self.dtype, pl.Struct) else {}
        return {name: Spec(sub, dtypes[name]) for name, sub in props.items()}

    def struct(self, *names: str, **extra: pl.DataType) -> pl.Struct:
        """A detail struct of this object's fields `names`, in that order; `extra` types
        the names the judge does not return (the claim text, a context's position)."""
        fields = self.fields
        unknown = [n for n in names if n not in fields and n not in extra]
        if unknown:
            raise KeyError(f"no field {unknown} in {list(fields)} or the extra fields")
        return pl.Struct({n: extra[n] if n in extra else fields[n].dtype for n in names})


def string(*, enum: list[str] | None = None) -> Spec:
    schema: Schema = {"type": "string"}
    if enum is not None:
        schema["enum"] = list(enum)
    return Spec(schema, pl.String())


def boolean() -> Spec:
    return Spec({"type": "boolean"}, pl.Boolean())


def integer(
    *, minimum: int | None = None, maximum: int | None = None, enum: list[int] | None = None
) -> Spec:
    schema: Schema = {"type": "integer"}
    if enum is not None:
        schema["enum"] = list(enum)
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return Spec(schema, pl.Int64())


def number() -> Spec:
    return Spec({"type": "number"}, pl.Float64())


def nullable(spec: Spec) -> Spec:
    """The same value, or null (`{"type": [..., "null"]}`)."""
    schema = dict(spec.schema)
    schema["type"] = [schema["type"], "null"]
    return Spec(schema, spec.dtype)


def array(items: Spec, *, min_items: int | None = None, max_items: int | None = None) -> Spec:
    """A list; a count known per prompt is pinned later by `Task.counted`, not here."""
    schema: Schema = {"type": "array", "items": items.schema}
    if min_items is not None:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    return Spec(schema, pl.List(items.dtype))


def obj(**fields: Spec) -> Spec:
    """An object whose fields are all required, in the order given (the judge writes them in
    that order: put a reason before the verdict it explains)."""
    schema: Schema = {
        "type": "object",
        "properties": {name: spec.schema for name, spec in fields.items()},
        "required": list(fields),
    }
    return Spec(schema, pl.Struct({name: spec.dtype for name, spec in fields.items()}))


def indexed_verdict(**fields: Spec) -> Spec:
    """A verdict on one numbered prompt item: `index` (the item's number, bounded 1..n per
    prompt when its array is in `Task.indexed`), `reason`, then the verdict's own fields."""
    return obj(index=integer(), reason=string(), **fields)


# ------------------------------------------------------------------------------ the walker


def resolve(schema: Any, root: Any, *, strict: bool = True) -> Any:
    """Follow local `$ref`s (pydantic puts nested models in `$defs`).

    Strict (the parser): a local ref that leads nowhere is a TypeError, a schema bug to
    report, and a remote one is not followed (the keywords beside it are all there is).
    Lenient (the test server, which answers whatever it is sent): either is `{}`, anything.
    """
    for _ in range(32):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str):
            return schema
        target = _pointer(ref, root)
        if not strict:
            if target is _NOWHERE:
                return {}
        elif not ref.startswith("#"):
            return schema
        elif target is _NOWHERE:
            raise TypeError(f"unresolvable $ref {ref!r}")
        elif not isinstance(target, dict):
            raise TypeError(f"$ref {ref!r} does not point at a schema")
        schema = target
    if strict:
        raise TypeError("$ref chain too long")
    return {}


def _pointer(ref: str, root: Any) -> Any:
    """The node a local JSON pointer (`#/$defs/Name`) names in `root`, or `_NOWHERE`."""
    if not ref.startswith("#"):
        return _NOWHERE
    node = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _NOWHERE
    return node


def declared_types(schema: Schema) -> list[str] | None:
    """The types a schema names, in its order: its `type`, else the one its `properties` or
    `items` imply; None when it names none (an enum, a branch, or anything goes)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return declared
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return None


def types_of(schema: Any, root: Any = None) -> set[str] | None:
    """The JSON types a schema admits, or None when it does not say (anything goes)."""
    if not isinstance(schema, dict):
        return None
    schema = resolve(schema, schema if root is None else root)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        union: set[str] = set()
        for branch in branches:
            types = types_of(branch, root)
            if types is None:
                return None
            union |= types
        return union
    declared = declared_types(schema)
    if declared is not None:
        return set(declared)
    if isinstance(schema.get("enum"), list):
        return set().union(*(value_types(m) for m in schema["enum"]))
    return None


def value_types(value: Any) -> set[str]:
    """The JSON types `value` already is, without conversion (4.0 is an integer too)."""
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


def kind_of(schema: Schema) -> str:
    """The one kind a value of `schema` is built as: its first non-null type, else what its
    keywords imply (properties: object, items: array, anything else: string)."""
    declared = declared_types(schema)
    if declared is not None:
        return next((k for k in declared if k != "null"), "null")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(m, int) for m in enum):
        return "integer"
    return "string"


def first_branch(schema: Schema, root: Any = None) -> Schema:
    """For `anyOf` / `oneOf`, the first branch that is not just null, merged with the
    keywords beside it; the schema itself otherwise. `root` resolves `$ref` branches."""
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            pick = next((o for o in options if not _only_null(o, root)), options[0])
            rest = {k: v for k, v in schema.items() if k != key}
            return {**rest, **pick} if isinstance(pick, dict) else rest
    return schema


def _only_null(schema: Any, root: Any) -> bool:
    try:
        return types_of(schema, root) == {"null"}
    except TypeError:  # a $ref that leads nowhere (or needs a root) is not "just null"
        return False


def merge_all_of(schema: Schema, root: Any) -> Schema:
    """One schema for an `allOf`: properties and required keys united, and any other keyword
    taken from the first part that has it (the schema's own keywords first)."""
    merged: Schema = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        part = resolve(part, root, strict=False)
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def numeric_bounds(
    schema: Schema,
) -> tuple[Number | None, Number | None, Number | None, Number | None]:
    """`(minimum, maximum, exclusiveMinimum, exclusiveMaximum)`, each None when absent or not a
    number; draft 4's `exclusiveMinimum: true` (a flag on `minimum`) is read as draft 6's."""
    low, high = schema.get("minimum"), schema.get("maximum")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if xlow is True:
        xlow, low = low, None
    if xhigh is True:
        xhigh, high = high, None
    return _number(low), _number(high), _number(xlow), _number(xhigh)


def _number(value: Any) -> Number | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def transform(schema: Any, node: Callable[[Schema], Schema]) -> Any:
    """A copy of `schema` with `node` applied to every sub-schema, children first."""
    if isinstance(schema, list):
        return [transform(s, node) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = transform(out[key], node)
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [transform(s, node) for s in out[key]]
    for key in _MAPPING:
        if isinstance(out.get(key), dict):
            out[key] = {name: transform(s, node) for name, s in out[key].items()}
    return node(out)


def dtype_of(schema: Schema) -> pl.DataType:
    """The Polars type of a value that validated against `schema`."""
    schema = first_branch(schema)
    kind = kind_of(schema)
    if kind == "object":
        props = schema.get("properties", {})
        return pl.Struct({name: dtype_of(sub) for name, sub in props.items()})
    if kind == "array":
        return pl.List(dtype_of(schema.get("items", {"type": "string"})))
    return _DTYPES.get(kind, pl.String())


#: Fields the judge writes only to explain a verdict, never the verdict itself: left out of
#: the schema when a run asks for no reasons (`Task(reasons=False)`).
REASON_FIELDS = ("reason",)


def without_reasons(schema: Schema) -> Schema:
    """A copy of `schema` with no `REASON_FIELDS` in any object (nor in its `required`); the
    schema itself when it has none, so a task without reasons keeps its exact bytes."""

    def drop(node: Schema) -> Schema:
        props = node.get("properties")
        if not isinstance(props, dict) or not any(name in props for name in REASON_FIELDS):
            return node
        node["properties"] = {k: v for k, v in props.items() if k not in REASON_FIELDS}
        if isinstance(node.get("required"), list):
            node["required"] = [k for k in node["required"] if k not in REASON_FIELDS]
        return node

    stripped = transform(schema, drop)
    return schema if stripped == schema else stripped  # type: ignore[no-any-return]


def bounded(schema: Schema, max_items: int, max_chars: int) -> Schema:
    """A copy where open lists hold at most `max_items` and free strings at most
    `max_chars` characters, so a small grammar-constrained judge cannot run away; pinned
    counts above the bound and enums are left as they are."""

    def bound(node: Schema) -> Schema:
        kinds = node.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "array" in kinds and node.get("minItems", 0) <= max_items:
            node["maxItems"] = min(node.get("maxItems", max_items), max_items)
        if "string" in kinds and "enum" not in node:
            node["maxLength"] = min(node.get("maxLength", max_chars), max_chars)
        return node

    return transform(copy.deepcopy(schema), bound)  # type: ignore[no-any-return]
