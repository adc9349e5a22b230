"""Dataclasses to JSON and back, strictly: the manifest's types are its schema.

A field is written under its name (or `metadata["json"]`), in declaration order; enums as
their values, tuples as lists. Reading checks every field against its annotation (str, int,
bool, Any, enums, `X | None`, list, dict with str keys, fixed tuples, nested dataclasses)
and raises `Unreadable` naming the first field that does not fit, so a manifest is read
whole or refused, never half read. A field with `metadata["omit_none"]` is left out when
None and may be missing.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any

JSON_NAME = "json"
OMIT_NONE = "omit_none"


class Unreadable(Exception):
    """A field missing or of the wrong type; the message names it."""


def to_json(value: Any) -> Any:
    """`value` (dataclasses, enums, containers of them) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get(OMIT_NONE):
                continue
            out[f.metadata.get(JSON_NAME, f.name)] = to_json(item)
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [to_json(x) for x in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def from_json(cls: type[Any], raw: Any, where: str = "") -> Any:
    """An instance of the dataclass `cls` from `raw`, every field checked."""
    if not isinstance(raw, dict):
        raise Unreadable(f"{where or 'the top level'} is {_show(raw)}, not an object")
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = f.metadata.get(JSON_NAME, f.name)
        path = f"{where}.{key}" if where else key
        if key not in raw:
            if f.metadata.get(OMIT_NONE):
                continue
            raise Unreadable(f"{path} is missing")
        values[f.name] = _read(hints[f.name], raw[key], path)
    return cls(**values)


@functools.cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read(kind: Any, raw: Any, where: str) -> Any:
    """`raw` checked (and built) as a `kind`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return raw
    if origin in (types.UnionType, typing.Union):
        if raw is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _read(inner, raw, where)
    if dataclasses.is_dataclass(kind):
        return from_json(kind, raw, where)  # type: ignore[arg-type]
    if origin is list:
        _expect(raw, list, where)
        return [_read(args[0], x, f"{where}[{i}]") for i, x in enumerate(raw)]
    if origin is dict:
        _expect(raw, dict, where)
        return {k: _read(args[1], v, f"{where}[{k!r}]") for k, v in raw.items()}
    if origin is tuple:
        if not isinstance(raw, list) or len(raw) != len(args):
            raise Unreadable(f"{where} is {_show(raw)}, not a list of {len(args)}")
        return tuple(
            _read(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, raw, strict=True))
        )
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(raw)
        except ValueError:
            raise Unreadable(
                f"{where} is {_show(raw)}, not one of {[m.value for m in kind]}"
            ) from None
    return _expect(raw, kind, where)


def _expect(raw: Any, kind: type, where: str) -> Any:
    if not isinstance(raw, kind) or (kind is int and isinstance(raw, bool)):
        raise Unreadable(f"{where} is {_show(raw)}, not {_article(kind.__name__)}")
    return raw


def _article(name: str) -> str:
    names = {"str": "a string", "int": "an integer", "bool": "true or false", "dict": "an object"}
    return names.get(name, f"a {name}")


def _show(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."
