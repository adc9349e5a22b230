"""Context metrics against the scripted server: one rule for blank contexts, verdicts matched
to contexts by their `index`, and context_recall's covered/source consistency.

Blank contexts (base.py's rule): dropped before judging, never counted, and the detail names
each judged context by its 1-based position in the input list. Verdicts: each names the
context it judges; a shuffled order scores the same, a duplicate or missing index is re-asked
once, then reported.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, router, task_name

import ragframe
from ragframe.metrics import REGISTRY
from ragframe.metrics.context import (
    ContextPrecision,
    ContextPrecisionWithoutReference,
    ContextRecall,
)
from ragframe.metrics.custom import GEval
from ragframe.metrics.nvidia import ContextRelevance, ResponseGroundedness
from ragframe.metrics.relevancy import AnswerRelevancyLLM, ContextualRelevancy, Hallucination
from ragframe.testing.server import auto_answer

BLANKS = ["good", "", "good2"]


def frame(n: int = 1, **overrides: Any) -> pl.DataFrame:
    base: dict[str, Any] = {
        "question": [f"What is AI? ({i})" for i in range(n)],
        "answer": [f"AI is machines mimicking intelligence. ({i})" for i in range(n)],
        "ground_truth": [f"AI stands for artificial intelligence. ({i})" for i in range(n)],
        "contexts": [["NVIDIA makes chips.", "AI is artificial intelligence."] for _ in range(n)],
    }
    base.update(overrides)
    return pl.DataFrame(base, schema_overrides={"contexts": pl.List(pl.String)})


def numbered(items: list[dict[str, Any]], order: list[int] | None = None) -> list[dict[str, Any]]:
    """Verdicts with the `index` (1..n) of the item each judges, written in `order` (0-based
    positions; default: in index order)."""
    indexed = [{"index": k, **item} for k, item in enumerate(items, start=1)]
    return [indexed[i] for i in order] if order is not None else indexed


def flags(key: str, *values: bool) -> dict[str, Any]:
    """`{"verdicts": [...]}` with one numbered verdict per value of `key`."""
    return {"verdicts": numbered([{"reason": "r", key: v} for v in values])}


def fact(covered: bool, source: int | None, text: str = "f") -> dict[str, Any]:
    return {"fact": text, "reason": "r", "covered": covered, "source_context": source}


# ------------------------------------------------------------------ blank contexts, one rule

#: metric, task, the scripted answer for the two kept contexts, expected score, detail list
#: field, and what each detail item must say (context_index first).
BLANK_CASES = [
    (
        ContextPrecision(),
        "context_precision_reference",
        flags("relevant", False, True),
        0.5,  # AP of [0, 1] over the 2 judged contexts (1/3 if the blank were ranked 2nd)
        "verdicts",
        [(1, False), (3, True)],
        "relevant",
    ),
    (
        ContextPrecisionWithoutReference(),
        "context_precision_answer",
        flags("relevant", True, False),
        1.0,
        "verdicts",
        [(1, True), (3, False)],
        "relevant",
    ),
    (
        Hallucination(),
        "hallucination_contexts",
        flags("contradicted", False, True),
        0.5,  # 1 of 2 judged contexts, not 1 of 3
        "contexts",
        [(1, False), (3, True)],
        "contradicted",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("metric", "task", "answer", "score", "field", "expected", "flag"), BLANK_CASES
)
def test_blank_context_is_dropped_and_indices_name_input_positions(
    server, judge, metric, task, answer, score, field, expected, flag
):
    bodies: list[dict[str, Any]] = []
    server.handler = router(**{task: lambda b: bodies.append(b) or reply(answer)})
    out = ragframe.evaluate(frame(contexts=[BLANKS]), [metric], judge=judge)
    (body,) = bodies
    assert fenced(body, "context") == ["good", "good2"]  # the blank is never judged
    detail = out[f"{metric.name}_detail"][0]
    assert detail["error"] is None
    assert [(v["context_index"], v[flag]) for v in detail[field]] == expected
    assert out[metric.name][0] == score


def test_a_context_python_strips_to_nothing_is_blank_too(server, judge):
    """The blank-context rule is the missing-input rule: ASCII separators (0x1C-0x1F), which
    Polars' own strip keeps, make no context."""
    bodies: list[dict[str, Any]] = []
    server.handler = lambda body: bodies.append(body) or auto_answer(body)
    df = frame(contexts=[["good", "\x1c\x1f", "good2"]])
    out = ragframe.evaluate(df, [ContextPrecision()], judge=judge)
    assert fenced(bodies[0], "context") == ["good", "good2"]
    detail = out["context_precision_detail"][0]
    assert [v["context_index"] for v in detail["verdicts"]] == [1, 3]


def test_blank_context_contextual_relevancy(server, judge):
    statement = {"statement": "s", "reason": "r"}
    answer = {
        "contexts": numbered(
            [
                {"statements": [{**statement, "relevant": True}]},
                {"statements": [{**statement, "relevant": False}, {**statement, "relevant": True}]},
            ]
        )
    }
    server.handler = router(contextual_relevancy_statements=reply(answer))
    out = ragframe.evaluate(frame(contexts=[BLANKS]), [ContextualRelevancy()], judge=judge)
    detail = out["contextual_relevancy_detail"][0]
    assert [c["context_index"] for c in detail["contexts"]] == [1, 3]
    assert [len(c["statements"]) for c in detail["contexts"]] == [1, 2]
    assert out["contextual_relevancy"][0] == 2 / 3
    assert fenced(server.chat_requests[0], "context") == ["good", "good2"]


def test_blank_context_recall_source_names_the_input_position(server, judge):
    """The judge numbers the kept contexts 1..2; source 2 is "good2", input position 3."""
    server.handler = router(
        context_recall_attribute=reply({"facts": [fact(True, 2, "a"), fact(False, None, "b")]})
    )
    out = ragframe.evaluate(frame(contexts=[BLANKS]), [ContextRecall()], judge=judge)
    facts = out["context_recall_detail"][0]["facts"]
    assert [(f["fact"], f["covered"], f["source_context"]) for f in facts] == [
        ("a", True, 3),
        ("b", False, None),
    ]
    assert out["context_recall"][0] == 0.5
    body = server.chat_requests[0]
    assert fenced(body, "context") == ["good", "good2"]
    schema = body["response_format"]["json_schema"]["schema"]
    source = schema["properties"]["facts"]["items"]["properties"]["source_context"]
    assert source["maximum"] == 2  # bounded by the judged contexts, not the input list


@pytest.mark.parametrize(
    "metric",
    [
        ContextRelevance(shortcuts=False),
        ResponseGroundedness(shortcuts=False),
        GEval(criteria="c", evaluation_steps=["s"], inputs=("question", "contexts")),
    ],
)
def test_blank_context_is_dropped_from_whole_set_prompts(server, judge, metric):
    out = ragframe.evaluate(frame(contexts=[BLANKS]), [metric], judge=judge)
    assert out[f"{metric.name}_detail"][0]["error"] is None
    assert all(fenced(body, "context") == ["good", "good2"] for body in server.chat_requests)
    assert all('index="3"' not in body["messages"][-1]["content"] for body in server.chat_requests)


CONTEXT_METRICS = sorted(
    name for name, cls in REGISTRY.items() if "contexts" in cls.requires and cls.uses_llm
)


@pytest.mark.parametrize("name", CONTEXT_METRICS)
def test_all_blank_contexts_are_missing_input_with_no_request(server, judge, name):
    out = ragframe.evaluate(frame(contexts=[["", "  ", "\n"]]), [name], judge=judge)
    assert out[name][0] is None
    assert "missing input: 'contexts'" in out[f"{name}_detail"][0]["error"]
    assert server.count() == 0


# --------------------------------------------------------------- seeds' examples, any order


def test_context_precision_guide_example_in_any_order(server, judge):
    """Guide (seed 003): relevance [0, 1, 1, 0, 0] gives (1/2 + 2/3) / 2 = 0.5833, whatever
    the order the judge writes its verdicts in."""
    flags = [False, True, True, False, False]
    verdicts = [{"reason": f"r{i}", "relevant": f} for i, f in enumerate(flags, start=1)]
    scores, details = [], []
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        server.handler = router(
            context_precision_reference=reply({"verdicts": numbered(verdicts, order)})
        )
        df = frame(contexts=[[f"node {i}" for i in range(5)]])
        out = ragframe.evaluate(df, [ContextPrecision()], judge=judge)
        scores.append(out["context_precision"][0])
        details.append(out["context_precision_detail"][0]["verdicts"])
    assert scores[0] == pytest.approx(0.5833, abs=1e-4)
    assert scores[0] == scores[1]
    assert details[0] == details[1]
    assert [(v["context_index"], v["relevant"], v["reason"]) for v in details[1]] == [
        (k, f, f"r{k}") for k, f in enumerate(flags, start=1)
    ]


def test_context_recall_guide_example(server, judge):
    """Guide (seed 003): fact 1 attributable to node 2, fact 2 not: 1/2 = 0.5."""
    server.handler = router(
        context_recall_attribute=reply({"facts": [fact(True, 2), fact(False, None)]})
    )
    out = ragframe.evaluate(frame(), [ContextRecall()], judge=judge)
    assert out["context_recall"][0] == 0.5
    facts = out["context_recall_detail"][0]["facts"]
    assert [(f["covered"], f["source_context"]) for f in facts] == [(True, 2), (False, None)]
    assert out["context_recall_detail"][0]["truncated"] is False


SHUFFLE_CASES = [
    (Hallucination(), "hallucination_contexts", "verdicts",
     [{"reason": "a", "contradicted": True}, {"reason": "b", "contradicted": False}]),
    (ContextPrecisionWithoutReference(), "context_precision_answer", "verdicts",
     [{"reason": "a", "relevant": False}, {"reason": "b", "relevant": True}]),
    (ContextualRelevancy(), "contextual_relevancy_statements", "contexts",
     [{"statements": [{"statement": "a", "reason": "a", "relevant": True}]},
      {"statements": [{"statement": "b", "reason": "b", "relevant": False}] * 3}]),
    (AnswerRelevancyLLM(), "answer_relevancy_llm_verdicts", "verdicts",
     [{"reason": "a", "verdict": "no"}, {"reason": "b", "verdict": "yes"}]),
]  # fmt: skip


def run_with(server, judge, metric, by_task: dict[str, Any]) -> Any:
    server.handler = router(answer_claims=reply({"claims": ["s1", "s2"]}), **by_task)
    return ragframe.run(frame(), [metric], judge=judge)


@pytest.mark.parametrize(("metric", "task", "array", "items"), SHUFFLE_CASES)
def test_shuffled_verdicts_score_the_same(server, judge, metric, task, array, items):
    ordered = run_with(server, judge, metric, {task: reply({array: numbered(items)})}).frame
    shuffled = run_with(
        server, judge, metric, {task: reply({array: numbered(items, [1, 0])})}
    ).frame
    assert ordered[metric.name][0] is not None
    assert shuffled[metric.name][0] == ordered[metric.name][0]
    detail = f"{metric.name}_detail"
    assert shuffled[detail][0]["error"] is None
    assert {k: v for k, v in shuffled[detail][0].items() if not k.endswith("tokens")} == {
        k: v for k, v in ordered[detail][0].items() if not k.endswith("tokens")
    }


def bad_indices(items: list[dict[str, Any]], indices: list[int]) -> list[dict[str, Any]]:
    return [{"index": k, **item} for k, item in zip(indices, items, strict=True)]


@pytest.mark.parametrize(("metric", "task", "array", "items"), SHUFFLE_CASES)
@pytest.mark.parametrize("indices", [[1, 1], [2, 2]])
def test_duplicate_or_missing_index_is_repaired(server, judge, metric, task, array, items, indices):
    def answer(body: dict[str, Any]) -> str:
        repaired = len(body["messages"]) > 2
        return reply({array: numbered(items) if repaired else bad_indices(items, indices)})

    result = run_with(server, judge, metric, {task: answer})
    assert result.frame[f"{metric.name}_detail"][0]["error"] is None
    assert result.frame[metric.name][0] is not None
    assert result.stats.repairs == 1
    assert sum(1 for r in server.requests if task_name(r.body or {}) == task) == 2


@pytest.mark.parametrize(("metric", "task", "array", "items"), SHUFFLE_CASES)
def test_duplicate_index_twice_is_the_rows_error(server, judge, metric, task, array, items):
    result = run_with(server, judge, metric, {task: reply({array: bad_indices(items, [1, 1])})})
    assert result.frame[metric.name][0] is None
    error = result.frame[f"{metric.name}_detail"][0]["error"]
    assert "index" in error and "[1, 1]" in error
    assert sum(1 for r in server.requests if task_name(r.body or {}) == task) == 2


# ---------------------------------------------------------- context_recall: covered <-> source


@pytest.mark.parametrize(
    ("inconsistent", "why"),
    [
        (fact(True, None), "covered is true but source_context is null"),
        (fact(False, 1), "covered is false but source_context is 1"),
    ],
)
def test_inconsistent_recall_verdict_is_repaired(server, judge, inconsistent, why):
    repair_prompts: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        if len(body["messages"]) > 2:
            repair_prompts.append(body["messages"][-1]["content"])
            return reply({"facts": [fact(True, 2), fact(False, None)]})
        return reply({"facts": [fact(True, 2), inconsistent]})

    server.handler = router(context_recall_attribute=answer)
    result = ragframe.run(frame(), [ContextRecall()], judge=judge)
    assert result.frame["context_recall"][0] == 0.5
    assert result.frame["context_recall_detail"][0]["error"] is None
    assert result.stats.repairs == 1 and server.count() == 2
    (feedback,) = repair_prompts
    assert "$.facts[1]" in feedback and why in feedback


@pytest.mark.parametrize(
    ("inconsistent", "why"),
    [
        (fact(True, None), "covered is true but source_context is null"),
        (fact(False, 2), "covered is false but source_context is 2"),
    ],
)
def test_inconsistent_recall_verdict_twice_is_null_with_the_reason(
    server, judge, inconsistent, why
):
    server.handler = router(context_recall_attribute=reply({"facts": [inconsistent]}))
    out = ragframe.evaluate(frame(), [ContextRecall()], judge=judge)
    assert out["context_recall"][0] is None
    assert why in out["context_recall_detail"][0]["error"]
    assert server.count() == 2  # the answer and one repair


def test_recall_at_the_fact_cap_says_truncated(server, judge):
    facts = [fact(i % 2 == 0, 1 if i % 2 == 0 else None, f"f{i}") for i in range(40)]
    server.handler = router(context_recall_attribute=reply({"facts": facts}))
    out = ragframe.evaluate(frame(), [ContextRecall()], judge=judge)
    detail = out["context_recall_detail"][0]
    assert detail["truncated"] is True and detail["error"] is None
    assert out["context_recall"][0] == 0.5


def test_recall_under_output_bounds_says_truncated(server, make_judge):
    """A judge with output_bounds (the embedded judge: 6 items per open list) cuts the facts
    at 6: a row with 6 facts may have been cut and says so; 5 facts do not."""
    judge = make_judge(output_bounds=(6, 160))
    for n, expected in ((6, True), (5, False)):
        facts = [fact(True, 1, f"f{i}") for i in range(n)]
        server.handler = router(context_recall_attribute=reply({"facts": facts}))
        out = ragframe.evaluate(frame(), [ContextRecall()], judge=judge)
        assert out["context_recall_detail"][0]["truncated"] is expected
        assert out["context_recall"][0] == 1.0


def test_contextual_relevancy_under_output_bounds_says_truncated(server, make_judge):
    six = [{"statement": f"s{i}", "reason": "r", "relevant": True} for i in range(6)]
    answer = {"contexts": numbered([{"statements": six}, {"statements": six[:1]}])}
    server.handler = router(contextual_relevancy_statements=reply(answer))
    bounded = ragframe.evaluate(
        frame(), [ContextualRelevancy()], judge=make_judge(output_bounds=(6, 160))
    )
    unbounded = ragframe.evaluate(frame(), [ContextualRelevancy()], judge=make_judge())
    assert bounded["contextual_relevancy_detail"][0]["truncated"] is True
    assert unbounded["contextual_relevancy_detail"][0]["truncated"] is False
    assert bounded["contextual_relevancy"][0] == unbounded["contextual_relevancy"][0] == 1.0


def test_answer_relevancy_llm_at_the_claims_cap_says_truncated(server, judge):
    claims = [f"claim {i}" for i in range(40)]
    server.handler = router(answer_claims=reply({"claims": claims}))
    out = ragframe.evaluate(frame(), [AnswerRelevancyLLM()], judge=judge)
    detail = out["answer_relevancy_llm_detail"][0]
    assert detail["truncated"] is True and len(detail["statements"]) == 40
    server.handler = router(answer_claims=reply({"claims": claims[:39]}))
    out = ragframe.evaluate(frame(), [AnswerRelevancyLLM()], judge=judge)
    assert out["answer_relevancy_llm_detail"][0]["truncated"] is False
