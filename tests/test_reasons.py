"""Reasons off (issue 14): `reasons=False` on a metric or for a run sends schemas without
reason fields and instructions that never ask for one, keeps the detail's type (null reasons),
scores as a run with reasons does on the same verdicts, sends as many requests, and is cached
apart from a run with reasons.

Every LLM metric of the catalogue (and G-Eval) is run twice against the scripted server, whose
handler gives the same verdicts whether or not the schema asks for reasons."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import system_text, task_name, user_text

import ragframe
from ragframe.errors import ConfigError
from ragframe.inputs.columns import select_inputs
from ragframe.judge.task import Task
from ragframe.metrics import (
    REGISTRY,
    AnswerCorrectness,
    ContextPrecision,
    ContextPrecisionNonLLM,
    Faithfulness,
    GEval,
    Metric,
    RagasScore,
    RubricScore,
    with_reasons,
)
from ragframe.metrics.base import Context
from ragframe.prompts import for_reasons, load
from ragframe.testing.server import FakeServer, schema_of, synthesize

PROMPTS = Path(ragframe.__file__).parent / "prompts"
#: Any word that asks for or names a reason ("reason", "reasons", "reasoning").
ASKS_REASON = re.compile(r"\breason", re.IGNORECASE)


def g_eval(**options: Any) -> GEval:
    return GEval(criteria="Does the answer address the question directly?", **options)


#: Every metric that sends chat requests, by a factory taking `reasons`.
LLM_METRICS: dict[str, Callable[..., Metric]] = {
    **{name: cls for name, cls in REGISTRY.items() if cls().uses_llm},
    # top_logprobs=0: the stand-in's logprobs depend on the answer's text, which reasons change.
    "g_eval": lambda **kw: g_eval(top_logprobs=0, **kw),
}


def rows() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": ["Where is the Louvre?", "Who wrote Hamlet?", "How tall is Everest?"],
            "answer": [
                "The Louvre is in Paris. It opened in 1793.",
                "Shakespeare wrote Hamlet around 1600.",
                "Everest is 8,849 metres tall and lies in Nepal.",
            ],
            "ground_truth": [
                "The Louvre is a museum in Paris.",
                "William Shakespeare wrote Hamlet.",
                "Mount Everest is 8,849 m high.",
            ],
            "contexts": [
                ["The Louvre is in Paris.", "Paris is in France.", "The museum opened in 1793."],
                ["Hamlet is a tragedy.", "Shakespeare wrote it.", "It is set in Denmark."],
                ["Everest is in the Himalaya.", "Its height is 8,849 m.", "Nepal borders China."],
            ],
        }
    )


# --------------------------------------------------------------------- the scripted judge


def _strip(schema: Any) -> Any:
    """The schema without `reason` properties (the test's own walker, not the engine's)."""
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strip(v) for k, v in schema.items() if k != "properties"}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _strip(v) for k, v in schema["properties"].items() if k != "reason"}
    if isinstance(schema.get("required"), list):
        out["required"] = [k for k in schema["required"] if k != "reason"]
    return out


def _with_reasons(value: Any, schema: Any) -> Any:
    """`value` with a reason written wherever `schema` has a `reason` property."""
    if isinstance(value, list) and isinstance(schema, dict):
        return [_with_reasons(v, schema.get("items", {})) for v in value]
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    props = schema.get("properties", {})
    out = {k: _with_reasons(v, props.get(k, {})) for k, v in value.items()}
    if "reason" in props:
        out["reason"] = "the second passage states it plainly"
    return out


def same_verdicts(body: dict[str, Any]) -> str:
    """A valid answer drawn from the task and the user message alone (never the instructions),
    with reasons added only where the schema asks: the same verdicts with reasons or without."""
    schema = schema_of(body) or {}
    seed = hashlib.sha256(f"{task_name(body)}\n{user_text(body)}".encode()).digest()
    value = synthesize(_strip(schema), random.Random(int.from_bytes(seed[:8], "big")))
    return json.dumps(_with_reasons(value, schema))


def reason_keys(schema: Any, path: str = "$") -> list[str]:
    """Where a schema names a reason: a `reason` property or a required `reason`."""
    found: list[str] = []
    if isinstance(schema, dict):
        for key, sub in schema.items():
            if key == "properties" and isinstance(sub, dict) and "reason" in sub:
                found.append(f"{path}.properties.reason")
            if key == "required" and isinstance(sub, list) and "reason" in sub:
                found.append(f"{path}.required")
            found += reason_keys(sub, f"{path}.{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            found += reason_keys(sub, f"{path}[{i}]")
    return found


def reason_values(value: Any) -> list[Any]:
    """Every value of a field named `reason` in a detail (nested lists and structs too)."""
    if isinstance(value, list):
        return [r for item in value for r in reason_values(item)]
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == "reason"]
        return found + [r for k, v in value.items() if k != "reason" for r in reason_values(v)]
    return []


def scored(server: FakeServer, judge: ragframe.Judge, metric: Metric) -> tuple[Any, list[Any]]:
    """The run's result and the chat requests it sent (from a clean server record)."""
    server.reset()
    result = ragframe.run(rows(), [metric], judge=judge)
    return result, server.chat_requests


# ------------------------------------------------------------------ every LLM metric


@pytest.mark.parametrize("name", sorted(LLM_METRICS))
def test_reasons_off_asks_for_none_and_scores_the_same(server, judge, name):
    server.handler = same_verdicts
    with_, asked_with = scored(server, judge, LLM_METRICS[name](reasons=True))
    without, asked_without = scored(server, judge, LLM_METRICS[name](reasons=False))
    metric = LLM_METRICS[name]()

    assert asked_without, f"{name} sent no request"
    assert len(asked_without) == len(asked_with)
    for body in asked_without:
        where = f"{name}, task {task_name(body)}"
        assert reason_keys(schema_of(body)) == [], where
        assert not ASKS_REASON.search(system_text(body)), where
        assert not ASKS_REASON.search(user_text(body)), where
    has_reasons = any(t.has_reasons for t in metric.tasks())
    # The run with reasons does ask, where the metric has reasons at all.
    assert has_reasons == any(reason_keys(schema_of(b)) for b in asked_with)
    assert has_reasons == any(ASKS_REASON.search(system_text(b)) for b in asked_with)

    detail = f"{name}_detail"
    assert without.frame.schema == with_.frame.schema
    assert without.frame[name].to_list() == with_.frame[name].to_list()
    assert without.frame[name].null_count() < without.frame.height, "nothing scored"
    assert set(reason_values(without.frame[detail].to_list())) <= {None}
    if has_reasons:
        assert any(r is not None for r in reason_values(with_.frame[detail].to_list()))
        assert without.metadata()["metrics"][name]["config"]["reasons"] is False
        assert with_.metadata()["metrics"][name]["config"]["reasons"] is True
        hashes = [r.metadata()["metrics"][name]["prompt_hashes"] for r in (with_, without)]
        assert hashes[0] != hashes[1]


def test_reasons_off_fills_no_fixed_reason(server, judge):
    """answer_correctness decides a row whose ground truth has no statement without asking;
    its fixed reasons are null too when the metric asks for none."""

    def no_truth(body: dict[str, Any]) -> str:
        if task_name(body) == "ground_truth_statements":
            return json.dumps({"statements": []})
        return same_verdicts(body)

    server.handler = no_truth
    out = {
        reasons: ragframe.run(rows(), [AnswerCorrectness(reasons=reasons)], judge=judge).frame
        for reasons in (True, False)
    }
    with_, without = (out[r]["answer_correctness_detail"].to_list() for r in (True, False))
    assert any(r is not None for r in reason_values(with_))
    assert reason_values(without) and set(reason_values(without)) == {None}
    assert out[True]["answer_correctness"].to_list() == out[False]["answer_correctness"].to_list()


# ------------------------------------------------------------------------- the run


def test_judge_setting_is_the_default_and_a_metric_overrides_it(server, make_judge):
    """A metric left at None follows the judge (`Judge(reasons=False)`); one given True asks."""
    server.handler = same_verdicts
    judge = make_judge(reasons=False)
    ragframe.run(rows(), [ContextPrecision(), Faithfulness(reasons=True)], judge=judge)
    by_task = {task_name(r.body): reason_keys(schema_of(r.body)) for r in server.requests}
    assert by_task["context_precision_reference"] == []
    assert by_task["faithfulness_verify"] != []


def test_a_metric_that_reaches_run_unset_asks_for_reasons(server, make_judge):
    """None counts as True where nothing resolved it (a caller that skips `with_reasons`)."""
    metric = ContextPrecision()
    inputs = select_inputs(rows(), {metric.name: metric.requires})

    async def run_directly() -> pl.DataFrame:
        async with make_judge(reasons=False).session() as session:
            return await metric.run(inputs, Context(session, {}, reasons=False).view())

    out = asyncio.run(run_directly())
    assert metric.reasons is None
    assert [reason_keys(schema_of(r.body)) for r in server.requests] == [
        ["$.properties.verdicts.items.properties.reason", "$.properties.verdicts.items.required"]
    ] * 3
    assert all(r is not None for r in reason_values(out["context_precision_detail"].to_list()))


def test_reasons_off_is_cached_apart_from_reasons_on(server, make_judge):
    """The cache key differs between the two (instructions and schema do), so neither run
    is answered with the other's reasons, and each rerun is answered from the cache."""
    server.handler = same_verdicts
    judge = make_judge(cache=True)
    counts = []
    for reasons in (True, False, False, True):
        server.reset()
        ragframe.run(rows(), [ContextPrecision(reasons=reasons)], judge=judge)
        counts.append(server.count())
    assert counts == [3, 3, 0, 0]


# ----------------------------------------------------------------------- with_reasons


def test_with_reasons_copies_unset_metrics_only():
    unset, off, on = ContextPrecision(), Faithfulness(reasons=False), RubricScore(reasons=True)
    nonllm, aggregate = ContextPrecisionNonLLM(), RagasScore()
    out = with_reasons([unset, off, on, nonllm, aggregate], False)
    assert out[0] is not unset and out[0].reasons is False and unset.reasons is None
    assert out[1:] == [off, on, nonllm, aggregate]
    assert all(a is b for a, b in zip(out[1:], [off, on, nonllm, aggregate], strict=True))
    assert with_reasons([unset], True)[0].reasons is True
    with pytest.raises(ConfigError, match="reasons must be True or False"):
        with_reasons([unset], None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reasons must be True, False or None"):
        Faithfulness(reasons="no")  # type: ignore[arg-type]


def test_g_eval_copy_writes_the_steps_of_the_metric_given(server, judge):
    """The run scores a copy (`with_reasons`); the steps it writes are the given metric's, so
    a second run with the same object sends no second steps request."""
    server.handler = same_verdicts
    metric = g_eval()
    ragframe.run(rows(), [metric], judge=judge, reasons=False)
    assert metric.reasons is None and metric.steps
    server.reset()
    ragframe.run(rows(), [metric], judge=judge)
    assert [task_name(r.body) for r in server.requests] == ["g_eval_score"] * 3


# ---------------------------------------------------------------------- the prompts


@pytest.mark.parametrize("path", sorted(PROMPTS.glob("*.md")), ids=lambda p: p.stem)
def test_templates_mark_every_request_for_a_reason(path):
    """Without reasons no template says "reason"; with them no marker is left."""
    text = load(path.stem)
    assert not ASKS_REASON.search(for_reasons(text, False))
    rendered = for_reasons(text, True)
    assert "[[" not in rendered and "]]" not in rendered
    assert not re.search(r"[ \t]\n|\S  +\S", for_reasons(text, False))


def every_task() -> list[Task]:
    metrics = [cls() for cls in REGISTRY.values()] + [
        g_eval(),
        GEval(name="given", evaluation_steps=["Check the answer.", "Check the facts."]),
        RubricScore(rubric={1: "Off topic.", 2: "On topic."}, inputs=("question", "answer")),
    ]
    return [task for metric in metrics for task in metric.tasks()]


@pytest.mark.parametrize("task", every_task(), ids=lambda t: t.name)
def test_instructions_ask_for_a_reason_exactly_when_the_schema_has_one(task):
    for variant in (task.with_reasons(True), task.with_reasons(False)):
        assert bool(ASKS_REASON.search(variant.system)) == bool(reason_keys(variant.schema))
        assert variant.dtype == task.dtype
    off = task.with_reasons(False)
    assert (off.prompt_hash != task.prompt_hash) == task.has_reasons
    assert off.with_reasons(True).prompt_hash == task.prompt_hash
