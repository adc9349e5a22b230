"""Custom judges: G-Eval (steps once per configuration, probability-weighted scores) and the
rubric score, against the scripted local server."""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, system_text, task_name, user_text
from conftest import router as by_task

import ragframe
from ragframe.errors import ConfigError
from ragframe.inputs.columns import select_inputs
from ragframe.metrics import REGISTRY
from ragframe.metrics.base import Context
from ragframe.metrics.custom import DEFAULT_RUBRIC, GEval, RubricLevel, RubricScore
from ragframe.testing.server import Reply

STEPS = ["Read the answer.", "Check it answers the question.", "Penalise padding."]


def frame(n: int = 1, **overrides: Any) -> pl.DataFrame:
    base = {
        "question": [f"What is AI? ({i})" for i in range(n)],
        "answer": [f"AI refers to machines mimicking human intelligence ({i})." for i in range(n)],
        "contexts": [["AI is artificial intelligence.", "NVIDIA makes chips."] for _ in range(n)],
        "ground_truth": [f"AI is artificial intelligence ({i})." for i in range(n)],
    }
    base.update(overrides)
    return pl.DataFrame(base, schema_overrides={"contexts": pl.List(pl.String)})


def entry(token: str, p: float, top: dict[str, float] | None = None) -> dict[str, Any]:
    """One OpenAI logprobs entry; `top` maps alternative tokens to probabilities."""
    alts = top if top is not None else {token: p}
    return {
        "token": token,
        "logprob": math.log(p),
        "bytes": list(token.encode()),
        "top_logprobs": [
            {"token": t, "logprob": math.log(q), "bytes": list(t.encode())} for t, q in alts.items()
        ],
    }


def scored_reply(reason: str, score: int, top: dict[str, float]) -> Reply:
    """A JSON answer tokenised like a BPE model would, with `top` on the score digits."""
    content = json.dumps({"reason": reason, "score": score})
    pieces = re.findall(r"\d+|[A-Za-z_]+|\s+|[^\w\s]+", content)
    key = pieces.index("score")
    digits = next(i for i in range(key, len(pieces)) if pieces[i].isdigit())
    logprobs = [
        entry(t, top[t], top) if i == digits else entry(t, 0.99) for i, t in enumerate(pieces)
    ]
    assert "".join(pieces) == content
    return Reply(content=content, logprobs=logprobs)


# ------------------------------------------------------------------------------ G-Eval


def test_g_eval_weights_score_tokens_by_probability(server, judge):
    """Top tokens 4 (p=0.7) and 3 (p=0.3) on 1..5: raw 3.7, score (3.7 - 1) / 4 = 0.675.

    Alternatives that are not integers in range ("7", "four") are dropped and the rest
    renormalised, so they do not move the score.
    """
    top = {"4": 0.42, "3": 0.18, "7": 0.3, "four": 0.1}  # 0.42 : 0.18 = 0.7 : 0.3
    server.handler = by_task(g_eval_score=scored_reply("Mostly right.", 4, top))
    metric = GEval(evaluation_steps=STEPS)
    out = ragframe.evaluate(frame(), [metric], judge=judge)
    detail = out["g_eval_detail"][0]
    assert detail["raw_score"] == pytest.approx(3.7)
    assert out["g_eval"][0] == pytest.approx(0.675)
    assert detail["integer_score"] == 4
    assert detail["method"] == "logprobs"
    assert detail["reason"] == "Mostly right."
    assert [(d["score"], d["probability"]) for d in detail["distribution"]] == [
        (3, pytest.approx(0.3)),
        (4, pytest.approx(0.7)),
    ]
    body = server.requests[-1].body
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    schema = body["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["reason", "score"]  # reason first: think, then score
    assert schema["properties"]["score"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert server.count() == 1  # steps given: no steps request


def test_g_eval_without_logprobs_uses_the_integer(server, judge):
    server.handler = by_task(g_eval_score=reply({"reason": "ok", "score": 2}))
    metric = GEval(evaluation_steps=STEPS, top_logprobs=0)
    out = ragframe.evaluate(frame(), [metric], judge=judge)
    detail = out["g_eval_detail"][0]
    assert out["g_eval"][0] == pytest.approx(0.25)
    assert (detail["method"], detail["raw_score"], detail["integer_score"]) == ("integer", 2.0, 2)
    assert detail["distribution"] is None
    assert "logprobs" not in server.requests[-1].body


def test_g_eval_score_token_that_cannot_be_isolated_falls_back_to_integer(server, judge):
    """The fake server cuts its own logprobs into 4-character chunks (': 3}'), so the digits
    share a token with punctuation: no distribution is trusted, the integer is used."""
    server.handler = by_task(g_eval_score=reply({"reason": "ok", "score": 3}))
    out = ragframe.evaluate(frame(), [GEval(evaluation_steps=STEPS)], judge=judge)
    detail = out["g_eval_detail"][0]
    assert server.requests[-1].body["logprobs"] is True
    assert (detail["method"], out["g_eval"][0]) == ("integer", 0.5)


def test_g_eval_require_logprobs_scores_from_the_distribution(server, judge):
    top = {"4": 0.7, "3": 0.3}
    server.handler = by_task(g_eval_score=scored_reply("Mostly right.", 4, top))
    metric = GEval(evaluation_steps=STEPS, require_logprobs=True)
    assert metric.needs_logprobs and metric.config()["require_logprobs"] is True
    out = ragframe.evaluate(frame(), [metric], judge=judge)
    assert out["g_eval"][0] == pytest.approx(0.675)
    assert out["g_eval_detail"][0]["method"] == "logprobs"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Reply(content=json.dumps({"reason": "ok", "score": 3}), logprobs=[]), "no logprobs"),
        # The fake server's own logprobs come in 4-character chunks: ': 3}' holds the digits.
        (reply({"reason": "ok", "score": 3}), "not one token"),
    ],
)
def test_g_eval_require_logprobs_refuses_the_integer_fallback(server, judge, answer, why):
    server.handler = by_task(g_eval_score=answer)
    metric = GEval(evaluation_steps=STEPS, require_logprobs=True)
    out = ragframe.evaluate(frame(2), [metric], judge=judge)
    assert out["g_eval"].to_list() == [None, None]
    for detail in out["g_eval_detail"]:
        assert why in detail["error"] and "require_logprobs=True" in detail["error"]
        assert (detail["method"], detail["integer_score"]) == ("integer", 3)  # kept, not used


def test_only_g_eval_with_require_logprobs_needs_logprobs():
    assert not any(cls().needs_logprobs for cls in REGISTRY.values())
    assert not GEval(evaluation_steps=STEPS).needs_logprobs


def test_g_eval_writes_steps_once_per_run_not_per_row(server, judge):
    """100 rows: exactly 1 steps request + 100 score requests; a second run reuses the steps."""
    seen_steps: list[str] = []

    def score(body: dict[str, Any]) -> str:
        seen_steps.append(system_text(body))
        return reply({"reason": "fine", "score": 5})

    server.handler = by_task(g_eval_steps=reply({"steps": STEPS}), g_eval_score=score)
    metric = GEval(criteria="The answer must be concise.", top_logprobs=0)
    assert metric.steps is None
    result = ragframe.run(frame(100), [metric], judge=judge)
    assert result.stats.by_task["g_eval.steps"] == 1
    assert result.stats.by_task["g_eval.score"] == 100
    assert metric.steps == STEPS
    assert result.metadata()["metrics"]["g_eval"]["config"]["steps"] == STEPS
    assert all("1. Read the answer.\n2. Check it answers" in s for s in seen_steps)
    assert all("The answer must be concise." in s for s in seen_steps)
    steps_body = next(r.body for r in server.requests if task_name(r.body) == "g_eval_steps")
    assert fenced(steps_body, "criteria") == ["The answer must be concise."]
    assert result.frame["g_eval"].to_list() == [1.0] * 100

    ragframe.run(frame(3, question=["a?", "b?", "c?"]), [metric], judge=judge)
    assert server.count() == 101 + 3  # no second steps request


def test_g_eval_steps_are_written_once_across_concurrent_chunks(server, judge):
    server.handler = by_task(
        g_eval_steps=Reply(content=reply({"steps": STEPS}), delay=0.1),
        g_eval_score=reply({"reason": "ok", "score": 3}),
    )
    metric = GEval(criteria="Be correct.", top_logprobs=0)

    async def two_chunks() -> list[pl.DataFrame]:
        inputs = select_inputs(frame(4), {"g_eval": metric.requires})
        async with judge.session() as session:
            ctx = Context(session, {})
            return await asyncio.gather(
                metric.run(inputs.slice(0, 2), ctx.view()),
                metric.run(inputs.slice(2, 2), ctx.view()),
            )

    chunks = asyncio.run(two_chunks())
    assert sum(task_name(r.body) == "g_eval_steps" for r in server.requests) == 1
    assert sum(task_name(r.body) == "g_eval_score" for r in server.requests) == 4
    assert [c["g_eval"].to_list() for c in chunks] == [[0.5, 0.5], [0.5, 0.5]]


def test_g_eval_guide_example_with_given_steps(server, judge):
    """The guide's deepeval example (seed 003): steps given, so no steps request; deepeval's
    0-10 scale; scripted token probabilities 5 and 6 whose mean reproduces the reported
    0.5326435311680616."""
    steps = [
        "Create a list of statements from 'actual output'",
        "Validate if they are relevant and answers the given question in 'input', penalize if "
        "any statements are irrelevant",
        "Also Validate if they exist in 'expected output', penalize if any statements are "
        "missing or factually wrong",
        "Also validate if these statements are grounded in the 'retrieval context' and "
        "penalize if they are missing or factually wrong",
        "Finally also penalize if any statements seem to be invented or made up and do not "
        "make sense factually given the 'input' and 'retrieval context'",
    ]
    q6 = 0.326435311680616  # 0.5 + q6 / 10 = 0.5326435311680616
    server.handler = by_task(
        g_eval_score=scored_reply(
            "Correct definition, but 'electric sheep and cyborg kittens' are made up.",
            5,
            {"5": 1 - q6, "6": q6},
        )
    )
    context = (
        "Artificial intelligence refers to machines mimicking human intelligence, like "
        "problem-solving and learning. AI includes applications like virtual assistants, "
        "robotics, and autonomous vehicles."
    )
    df = pl.DataFrame(
        {
            "input": ["What is AI?"],
            "actual_output": [
                "AI refers to machines mimicking human intelligence, such as problem-solving "
                "and learning, and includes applications like electric sheep and cyborg kittens"
            ],
            "retrieval_context": [[context]],
        }
    )
    metric = GEval(
        "RAG Fact Checker",
        evaluation_steps=steps,
        inputs=("input", "actual_output", "retrieval_context"),
        score_range=(0, 10),
    )
    assert metric.requires == ("question", "contexts", "answer")
    out = ragframe.evaluate(df, [metric], judge=judge)
    assert out["RAG Fact Checker"][0] == pytest.approx(0.5326435311680616, abs=1e-12)
    assert out["RAG Fact Checker_detail"][0]["method"] == "logprobs"
    assert server.count() == 1
    body = server.requests[0].body
    assert task_name(body) == "g_eval_score"
    assert all(step in system_text(body) for step in steps)
    assert "Evaluation criteria" not in system_text(body)  # none given
    assert fenced(body, "context") == [context]
    assert fenced(body, "question") == ["What is AI?"]
    assert "<ground_truth>" not in user_text(body)


def test_two_g_eval_metrics_in_one_run_each_with_own_columns(server, judge):
    def steps(body: dict[str, Any]) -> str:
        topic = "brevity" if "concise" in user_text(body) else "tone"
        return reply({"steps": [f"{topic} step {i}" for i in range(3)]})

    def score(body: dict[str, Any]) -> str:
        return reply({"reason": "r", "score": 5 if "brevity step" in system_text(body) else 1})

    server.handler = by_task(g_eval_steps=steps, g_eval_score=score)
    brevity = GEval("brevity", criteria="Is the answer concise?", top_logprobs=0)
    tone = GEval("tone", criteria="Is the answer polite?", inputs=("answer",), top_logprobs=0)
    result = ragframe.run(frame(3), [brevity, tone], judge=judge)
    out = result.frame
    assert out["brevity"].to_list() == [1.0] * 3
    assert out["tone"].to_list() == [0.0] * 3
    assert {"brevity_detail", "tone_detail"} <= set(out.columns)
    assert result.stats.by_task["g_eval.steps"] == 2
    assert result.stats.by_task["g_eval.score"] == 6
    assert brevity.steps == [f"brevity step {i}" for i in range(3)]
    assert tone.steps == [f"tone step {i}" for i in range(3)]
    meta = result.metadata()["metrics"]
    assert meta["tone"]["config"]["inputs"] == ["answer"]
    assert (
        meta["brevity"]["prompt_hashes"]["g_eval.score"]
        != meta["tone"]["prompt_hashes"]["g_eval.score"]
    )


def test_g_eval_rubric_goes_into_the_prompt(server, judge):
    server.handler = by_task(g_eval_score=reply({"reason": "ok", "score": 9}))
    rubric = [
        RubricLevel(8, 10, "Fully correct and complete."),
        RubricLevel(0, 3, "Wrong or off-topic."),
        RubricLevel(4, 7, "Partly correct."),
    ]
    metric = GEval(
        criteria="Correctness.",
        evaluation_steps=STEPS,
        rubric=rubric,
        score_range=(0, 10),
        top_logprobs=0,
    )
    out = ragframe.evaluate(frame(), [metric], judge=judge)
    assert out["g_eval"][0] == pytest.approx(0.9)
    system = system_text(server.requests[0].body)
    assert "- 0 to 3: Wrong or off-topic.\n- 4 to 7: Partly correct.\n- 8 to 10: Fully" in system
    assert "Evaluation criteria:\nCorrectness." in system
    assert metric.config()["rubric"][0] == {
        "low": 0,
        "high": 3,
        "expected_outcome": "Wrong or off-topic.",
    }


def test_g_eval_missing_inputs_give_null_with_reason_and_no_request(server, judge):
    metric = GEval(criteria="Grounded?", inputs=("question", "answer", "contexts"))
    df = frame(3, answer=[None, "  ", "fine"], contexts=[["a"], ["b"], []])
    out = ragframe.evaluate(df, [metric], judge=judge)
    assert out["g_eval"].to_list() == [None, None, None]
    errors = out["g_eval_detail"].struct.field("error").to_list()
    assert errors[0] == errors[1] == "missing input: 'answer' is null or empty"
    assert errors[2] == "missing input: 'contexts' is null or has no non-empty items"
    assert server.count() == 0  # not even the steps request
    assert metric.steps is None


def test_g_eval_invalid_answer_is_a_row_error(server, judge):
    """A score outside the range fails validation, is re-asked once, then fails the row."""
    server.handler = by_task(g_eval_score=reply({"reason": "great", "score": 9}))
    out = ragframe.evaluate(frame(), [GEval(evaluation_steps=STEPS)], judge=judge)
    detail = out["g_eval_detail"][0]
    assert out["g_eval"][0] is None
    assert "unusable answer" in detail["error"] and "<= 5" in detail["error"]
    assert detail["method"] is None and detail["raw_score"] is None
    assert server.count() == 2


def test_g_eval_failed_steps_fail_every_row_without_score_requests(server, judge):
    server.handler = by_task(g_eval_steps=reply({"steps": ["only one"]}))
    metric = GEval(criteria="Anything.")
    out = ragframe.evaluate(frame(2), [metric], judge=judge)
    assert out["g_eval"].to_list() == [None, None]
    errors = out["g_eval_detail"].struct.field("error").to_list()
    assert all(e.startswith("g_eval: writing the evaluation steps failed") for e in errors)
    assert all(task_name(r.body) == "g_eval_steps" for r in server.requests)
    assert metric.steps is None  # a failure is not cached: the next run asks again


def test_g_eval_detail_types_and_score_matches_detail(server, judge):
    """With the server's own answers: every score is (raw_score - 1) / 4 of its detail."""
    metric = GEval(
        criteria="Is the answer supported by the contexts?",
        inputs=("question", "answer", "contexts"),
    )
    out = ragframe.evaluate(frame(20), [metric], judge=judge)
    assert out.schema["g_eval"] == pl.Float64
    assert out.schema["g_eval_detail"] == pl.Struct(
        {
            "reason": pl.String,
            "raw_score": pl.Float64,
            "integer_score": pl.Int64,
            "method": pl.String,
            "distribution": pl.List(pl.Struct({"score": pl.Int64, "probability": pl.Float64})),
            "error": pl.String,
            "prompt_tokens": pl.Int64,
            "completion_tokens": pl.Int64,
            "inputs_cut": pl.List(pl.String),
        }
    )
    detail = out["g_eval_detail"].struct.unnest()
    scored = out.with_columns(detail).filter(pl.col("error").is_null())
    assert scored.height > 0
    expected = (scored["raw_score"] - 1) / 4
    assert (scored["g_eval"] - expected).abs().max() < 1e-12
    assert scored["prompt_tokens"].min() > 0
    assert GEval.direction == "higher"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give criteria"),
        ({"criteria": "x", "inputs": "answer"}, "sequence of names"),
        ({"criteria": "x", "inputs": ("answer", "verdict")}, "unknown inputs"),
        ({"criteria": "x", "inputs": ()}, "inputs is empty"),
        ({"criteria": "x", "score_range": (5, 1)}, "score_range"),
        ({"criteria": "x", "top_logprobs": 21}, "top_logprobs"),
        ({"criteria": "x", "top_logprobs": 0, "require_logprobs": True}, "top_logprobs > 0"),
        ({"evaluation_steps": ["ok", " "]}, "non-empty"),
        ({"criteria": "x", "rubric": [RubricLevel(0, 2, "bad")]}, "within score_range"),
        (
            {"criteria": "x", "rubric": [RubricLevel(1, 3, "a"), RubricLevel(3, 5, "b")]},
            "overlap",
        ),
    ],
)
def test_g_eval_bad_configuration_is_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GEval(**kwargs)


# ------------------------------------------------------------------------- rubric score


def test_rubric_score_worked_example_level_4_of_5_is_075(server, judge):
    server.handler = by_task(
        rubric_score_score=reply({"reason": "Accurate, one detail missing.", "level": 4})
    )
    metric = RubricScore()
    out = ragframe.evaluate(frame(2), [metric], judge=judge)
    assert out["rubric_score"].to_list() == [0.75, 0.75]
    detail = out["rubric_score_detail"][0]
    assert (detail["level"], detail["reason"]) == (4, "Accurate, one detail missing.")
    assert out.schema["rubric_score_detail"] == pl.Struct(
        {
            "level": pl.Int64,
            "reason": pl.String,
            "error": pl.String,
            "prompt_tokens": pl.Int64,
            "completion_tokens": pl.Int64,
            "inputs_cut": pl.List(pl.String),
        }
    )
    assert server.count() == 2  # one request per row
    body = server.requests[0].body
    schema = body["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["reason", "level"]
    assert schema["properties"]["level"] == {"type": "integer", "enum": [1, 2, 3, 4, 5]}
    assert all(f"- {k}: {v}" in system_text(body) for k, v in DEFAULT_RUBRIC.items())
    # Two rows in flight at once: either may arrive first.
    assert sorted(fenced(r.body, "ground_truth")[0] for r in server.requests) == [
        "AI is artificial intelligence (0).",
        "AI is artificial intelligence (1).",
    ]
    assert RubricScore.direction == "higher"


def test_rubric_score_custom_levels(server, judge):
    """Levels 0/2/4 (seed 004's answer-accuracy scale): level 2 is (2 - 0) / (4 - 0) = 0.5; a
    level outside the rubric fails validation and is re-asked."""
    answers = iter([{"reason": "between", "level": 3}, {"reason": "partial", "level": 2}])
    server.handler = by_task(rubric_score_score=lambda body: reply(next(answers)))
    rubric = {4: "Exactly matches the reference.", 0: "Inaccurate.", 2: "Partly matches."}
    metric = RubricScore(rubric, name="accuracy", inputs=("answer", "ground_truth"))
    out = ragframe.evaluate(frame(), [metric], judge=judge)
    assert out["accuracy"][0] == 0.5
    assert out["accuracy_detail"][0]["level"] == 2
    assert server.count() == 2  # the invalid level 3 was re-asked once
    body = server.requests[0].body
    assert body["response_format"]["json_schema"]["schema"]["properties"]["level"]["enum"] == [
        0,
        2,
        4,
    ]
    assert "<question>" not in user_text(body)
    assert "- 0: Inaccurate.\n- 2: Partly matches.\n- 4: Exactly" in system_text(body)
    assert metric.config()["rubric"][0] == {"level": 0, "description": "Inaccurate."}


def test_rubric_score_missing_input_and_invalid_answer(server, judge):
    server.handler = by_task(rubric_score_score=reply({"reason": "no level"}))
    df = frame(2, ground_truth=[None, "AI is artificial intelligence."])
    out = ragframe.evaluate(df, [RubricScore()], judge=judge)
    assert out["rubric_score"].to_list() == [None, None]
    errors = out["rubric_score_detail"].struct.field("error").to_list()
    assert errors[0] == "missing input: 'ground_truth' is null or empty"
    assert "unusable answer" in errors[1]
    assert server.count() == 2  # only the second row was sent (and re-asked once)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"inputs": ("question", "answer")}, "default rubric"),
        (({1: "only one"},), {}, "at least two"),
        (({1: "a", "2": "b"},), {}, "integers"),
        (({1: "a", 2: " "},), {}, "non-empty description"),
    ],
)
def test_rubric_score_bad_configuration_is_refused(args, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RubricScore(*args, **kwargs)
