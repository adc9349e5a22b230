"""The judge's per-request work on the cold path: fast paths that must answer as the slow
ones do (issue 29)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from ragframe.judge.coerce import coerce, fits_exactly
from ragframe.judge.limits import AdaptiveLimiter
from ragframe.judge.parse import parse_answer
from ragframe.judge.transport import _BadReply, _read_embeddings

#: context_recall's shape: a nullable index into the prompt's contexts.
FACTS = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "covered": {"type": "boolean"},
                    "source_context": {"type": ["integer", "null"], "minimum": 1, "maximum": 3},
                },
                "required": ["covered", "source_context"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}


def test_a_nullable_index_that_fits_takes_the_fast_path() -> None:
    facts = [{"covered": True, "source_context": 2}, {"covered": False, "source_context": None}]
    value = {"facts": facts}
    assert fits_exactly(value, FACTS)
    assert parse_answer(json.dumps(value), FACTS) == coerce(value, FACTS) == value


@pytest.mark.parametrize(
    "index",
    [0, 4, True, "2", 2.0],  # out of range, a bool, a string, a float: `coerce` decides
)
def test_a_nullable_index_that_needs_coercing_does_not(index: object) -> None:
    facts = [{"covered": True, "source_context": index}, {"covered": True, "source_context": 1}]
    value = {"facts": facts}
    assert not fits_exactly(value, FACTS)


def test_a_nullable_number_is_left_to_coerce() -> None:
    """`coerce` turns an integer answer to a "number" into a float: no fast path for it."""
    schema = {"type": ["number", "null"]}
    assert not fits_exactly(3, schema)
    assert fits_exactly(None, schema)
    assert coerce(None, schema) is None


def _walk(value: object, schema: dict) -> bool:
    """The schema walk `fits_exactly` used to do for every answer: the reference its
    compiled checks must agree with."""
    exact = {"string": str, "boolean": bool, "object": dict, "array": list}
    kind = schema.get("type")
    if len(schema.keys() - _KEYS) > 0:
        return False
    if isinstance(kind, list):
        if value is None:
            return "null" in kind
        concrete = [t for t in kind if t != "null"]
        if len(concrete) != 1 or not isinstance(concrete[0], str) or concrete[0] == "number":
            return False
        kind = concrete[0]
    elif not isinstance(kind, str):
        return False
    if kind == "integer":
        ok = type(value) is int
    elif kind == "number":
        ok = type(value) in (int, float)
    else:
        ok = exact.get(kind) is not None and type(value) is exact[kind]
    if not ok:
        return False
    if kind in ("integer", "number", "string"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return False
        return schema.get("enum") is None or value in schema["enum"]
    if kind == "array":
        low, high = schema.get("minItems"), schema.get("maxItems")
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            return False
        items = schema.get("items")
        return items is None or all(_walk(v, items) for v in value)
    if kind == "object":
        props = schema.get("properties")
        if props is None or value.keys() != props.keys():
            return False
        return all(_walk(value[k], sub) for k, sub in props.items())
    return True


_KEYS = frozenset(
    {"type", "properties", "required", "items", "minItems", "maxItems", "minimum", "maximum"}
    | {"enum", "additionalProperties", "description", "title"}
)


def _mutations(value: object, rng: random.Random) -> list[object]:
    """`value` and a few ways an answer goes wrong, nested anywhere in it."""
    out = [value]
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        out += [{k: v for k, v in value.items() if k != key}, {**value, "extra": 1}]
        out += [{**value, key: m} for m in _mutations(value[key], rng)[1:]]
    elif isinstance(value, list):
        out += [value[:-1], [*value, *value[:1]], []]
        if value:
            out += [[m, *value[1:]] for m in _mutations(value[0], rng)[1:]]
    elif isinstance(value, bool):
        out += [int(value), str(value).lower(), None]
    elif isinstance(value, int):
        out += [value + 1000, -value - 1, float(value), str(value), True, None]
    elif isinstance(value, float):
        out += [int(value), value + 1e6, None]
    elif isinstance(value, str):
        out += [value + "x", 3, None]
    return out


def test_the_compiled_check_answers_as_the_schema_walk_on_every_task_schema() -> None:
    """Every schema ragframe's metrics send (with and without reasons, with counts), and
    answers the stand-in writes for them, right and wrong in every way `_mutations` knows:
    the compiled check and the walk agree on each, and both pass the right ones."""
    from ragframe.metrics.catalog import REGISTRY
    from ragframe.testing.server import synthesize

    rng = random.Random(29)
    schemas = []
    for cls in REGISTRY.values():
        try:
            metric = cls()
        except TypeError:  # a metric that needs settings (G-Eval's criteria)
            continue
        for reasons in (True, False):
            for task in metric.tasks():
                variant = task.with_reasons(reasons)
                for count in (None, 1, 3) if isinstance(variant.counted, str) else (None,):
                    schemas.append(variant.schema_for(count))
    schemas += [FACTS, {"type": ["number", "null"]}, {"type": ["integer", "string"]}]
    checked = fitting = 0
    for schema in schemas:
        for _ in range(3):
            right = synthesize(schema, rng)
            fitting += fits_exactly(right, schema)
            for value in _mutations(right, rng):
                assert fits_exactly(value, schema) == _walk(value, schema), (schema, value)
                checked += 1
    assert checked > 2000 and fitting > len(schemas)  # most synthesized answers fit


def test_an_embeddings_reply_is_read_as_plain_json() -> None:
    raw = json.dumps(
        {"data": [{"index": 1, "embedding": [0.5, 1]}, {"index": 0, "embedding": [1.0, 0.0]}]}
    ).encode()
    assert _read_embeddings(raw) == [(1, [0.5, 1]), (0, [1.0, 0.0])]
    for garbled in (b"<html>busy</html>", b'{"data": [{"embedding": []}]}', b"[]"):
        with pytest.raises(_BadReply):
            _read_embeddings(garbled)


async def _order_of_slots(limiter: AdaptiveLimiter, names: str, again: str = "") -> list[str]:
    """Queue one request per letter of `names` (in that order) on `limiter`, then release
    the slots two at a time, both in one step of the loop; the order the slots were taken
    in. `again` queues one more request, sent again, once the others wait."""
    order: list[str] = []
    done = asyncio.Event()

    async def one(name: str, resend: bool = False) -> None:
        await limiter.acquire(again=resend)
        order.append(name)
        await done.wait()

    tasks = [asyncio.create_task(one(name)) for name in names]
    await asyncio.sleep(0)
    if again:
        tasks.append(asyncio.create_task(one(again, resend=True)))
        await asyncio.sleep(0)
    for _ in range(len(tasks)):  # bounded: a limiter that loses a request must not hang
        if len(order) == len(tasks) or any(task.done() for task in tasks):
            break
        held = limiter.in_flight
        for _ in range(held):  # every slot freed in the same step of the loop
            await limiter.release()
        for _ in range(5):
            await asyncio.sleep(0)
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order


def test_the_pool_sends_in_order_of_arrival() -> None:
    """Slots go to the requests queued longest, however many free at once: a column asked
    first is sent first, so the stage that waits for it starts while the pool is full (a
    woken request used to lose its place when two slots freed in one step)."""
    order = asyncio.run(_order_of_slots(AdaptiveLimiter(2), "abcdefgh"))
    assert order == list("abcdefgh")


def test_a_request_sent_again_goes_first() -> None:
    """A retry or a repair (its row half done) takes the next free slot."""
    order = asyncio.run(_order_of_slots(AdaptiveLimiter(2), "abcdef", again="R"))
    assert order == ["a", "b", "R", "c", "d", "e", "f"]
