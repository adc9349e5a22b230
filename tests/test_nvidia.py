"""NVIDIA's dual-judge metrics: the seed's worked examples, invalid ratings, shortcuts, edges."""

from __future__ import annotations

import asyncio
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, task_name

import ragframe
from ragframe import Judge
from ragframe.inputs.columns import ROW_ID
from ragframe.metrics.nvidia import (
    ACCURACY_1,
    AnswerAccuracy,
    ContextRelevance,
    ResponseGroundedness,
)
from ragframe.testing.server import FakeServer, Reply

EINSTEIN_Q = "When was Einstein born?"
EINSTEIN_A = "Albert Einstein was born in 1879."
EINSTEIN_CONTEXTS = [
    "Albert Einstein was born March 14, 1879.",
    "Albert Einstein was born at Ulm, in Württemberg, Germany.",
]


def by_task(ratings: dict[str, Any]) -> Any:
    """A handler answering each task (json_schema name suffix) with its scripted rating."""

    def handle(body: dict[str, Any]) -> str | Reply:
        name = task_name(body)
        for suffix, rating in ratings.items():
            if name.endswith(suffix):
                if isinstance(rating, str | Reply):
                    return rating
                return reply({"rating": rating})
        raise AssertionError(f"unexpected task {name}")

    return handle


def accuracy_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {"question": [EINSTEIN_Q], "answer": [EINSTEIN_A], "ground_truth": [EINSTEIN_A]}
    )


# ------------------------------------------------------------------------ answer accuracy


def test_answer_accuracy_seed_example_both_four(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"answer_vs_reference": 4, "reference_vs_answer": 4})
    result = ragframe.run(accuracy_frame(), [AnswerAccuracy()], judge=judge)
    frame = result.frame
    assert frame["answer_accuracy"].to_list() == [1.0]
    detail = frame["answer_accuracy_detail"][0]
    assert detail["rating_1"] == 4 and detail["rating_2"] == 4
    assert detail["template_1"] == "answer_vs_reference"
    assert detail["template_2"] == "reference_vs_answer"
    assert detail["error"] is None and detail["shortcut"] is None
    assert server.count() == 2 and result.stats.requests == 2


def test_answer_accuracy_four_and_two_is_075(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"answer_vs_reference": 4, "reference_vs_answer": 2})
    frame = ragframe.evaluate(accuracy_frame(), [AnswerAccuracy()], judge=judge)
    assert frame["answer_accuracy"][0] == pytest.approx(0.75, abs=1e-12)


def test_answer_accuracy_second_template_swaps_answer_and_reference(
    server: FakeServer, judge: Judge
) -> None:
    bodies: list[dict[str, Any]] = []

    def handle(body: dict[str, Any]) -> str:
        bodies.append(body)
        return reply({"rating": 2})

    server.handler = handle
    frame = pl.DataFrame(
        {"question": ["Q?"], "answer": ["the answer"], "ground_truth": ["the truth"]}
    )
    ragframe.run(frame, [AnswerAccuracy()], judge=judge)
    first = next(b for b in bodies if task_name(b).endswith("answer_vs_reference"))
    second = next(b for b in bodies if task_name(b).endswith("reference_vs_answer"))
    assert len(bodies) == 2
    assert fenced(first, "response") == ["the answer"]
    assert fenced(first, "reference") == ["the truth"]
    assert fenced(second, "response") == ["the truth"]
    assert fenced(second, "reference") == ["the answer"]
    assert fenced(first, "question") == fenced(second, "question") == ["Q?"]
    # Rating-only answers: a small completion budget.
    assert first["max_tokens"] <= 32 and second["max_tokens"] <= 32


def test_rating_written_as_float_is_read_as_its_number(server: FakeServer, judge: Judge) -> None:
    # ragas scans the reply for the digits 0..4 ("4.0" would read as 0); we parse the number.
    server.handler = by_task({"answer_vs_reference": '{"rating": 4.0}', "reference_vs_answer": 4})
    frame = ragframe.evaluate(accuracy_frame(), [AnswerAccuracy()], judge=judge)
    assert frame["answer_accuracy"][0] == 1.0
    assert frame["answer_accuracy_detail"][0]["rating_1"] == 4


def test_answer_accuracy_one_invalid_rating_keeps_the_other(
    server: FakeServer, judge: Judge
) -> None:
    # 3 is off the 0/2/4 scale: the judge re-asks once, then that template fails alone.
    server.handler = by_task({"answer_vs_reference": 3, "reference_vs_answer": 2})
    result = ragframe.run(accuracy_frame(), [AnswerAccuracy()], judge=judge)
    detail = result.frame["answer_accuracy_detail"][0]
    assert result.frame["answer_accuracy"][0] == 0.5
    assert detail["rating_1"] is None and detail["rating_2"] == 2
    assert detail["template_1_error"] and detail["template_2_error"] is None
    assert detail["error"] is None
    # Never silently: the detail says the score rests on template 2 alone, and why.
    assert detail["partial"].startswith("template answer_vs_reference failed (")
    assert detail["template_1_error"] in detail["partial"]
    assert detail["partial"].endswith("scored from template reference_vs_answer alone")


def test_both_ratings_invalid_gives_null_with_both_reasons(
    server: FakeServer, judge: Judge
) -> None:
    server.handler = by_task({"answer_vs_reference": 3, "reference_vs_answer": "not json at all"})
    frame = ragframe.evaluate(accuracy_frame(), [AnswerAccuracy()], judge=judge)
    detail = frame["answer_accuracy_detail"][0]
    assert frame["answer_accuracy"][0] is None
    assert detail["rating_1"] is None and detail["rating_2"] is None
    assert detail["error"].startswith("both ratings failed: answer_vs_reference: ")
    assert "reference_vs_answer: " in detail["error"]


@pytest.mark.parametrize(
    ("metric", "names"),
    [
        (AnswerAccuracy(), ("answer_vs_reference", "reference_vs_answer")),
        (ContextRelevance(shortcuts=False), ("direct", "rephrased")),
        (ResponseGroundedness(shortcuts=False), ("direct", "rephrased")),
    ],
)
def test_failed_request_of_one_template_is_reported_as_partial(
    server: FakeServer, judge: Judge, metric: Any, names: tuple[str, str]
) -> None:
    """Template 2's request is refused (400): the score is template 1's alone, as NVIDIA's
    code does, and `partial` names template 2 and the server's reason; a row where both
    rated has `partial` null."""
    first, second = names
    refused = Reply(content="model overloaded, try later", status=400)
    server.handler = by_task({first: 2, second: refused})
    frame = ragframe.evaluate(several_rows().head(1), [metric], judge=judge)
    detail = frame[f"{metric.name}_detail"][0]
    assert frame[metric.name][0] == 2 / max(metric.scale)
    assert detail["error"] is None and detail["rating_2"] is None
    assert detail["partial"] == (
        f"template {second} failed ({detail['template_2_error']}); "
        f"scored from template {first} alone"
    )
    assert "overloaded" in detail["template_2_error"]


class _OffScaleContext:
    """Stands in for the run context: answers every prompt with a rating of 3, no error."""

    async def ask(self, task: Any, frame: pl.DataFrame, **_: Any) -> pl.DataFrame:
        return frame.with_columns(
            pl.lit({"rating": 3}, dtype=task.dtype).alias("answer"),
            pl.lit(None, dtype=pl.String).alias("error"),
        )


def test_off_scale_rating_is_rejected_in_polars_too() -> None:
    # Even if a rating off the scale got past the judge's schema check, it never scores.
    rows = pl.DataFrame({ROW_ID: pl.Series([0], dtype=pl.UInt32), "prompt": ["p"]})
    rated = asyncio.run(AnswerAccuracy()._rate(_OffScaleContext(), ACCURACY_1, rows))  # type: ignore[arg-type]
    assert rated["rating"].to_list() == [None]
    assert rated["why"].to_list() == ["rating 3 is not one of [0, 2, 4]"]


# ---------------------------------------------------------------------- context relevance


def relevance_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {"question": ["When and Where Albert Einstein was born?"], "contexts": [EINSTEIN_CONTEXTS]}
    )


def test_context_relevance_seed_example_both_two(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"direct": 2, "rephrased": 2})
    result = ragframe.run(relevance_frame(), [ContextRelevance()], judge=judge)
    assert result.frame["context_relevance"].to_list() == [1.0]
    assert server.count() == 2
    body = server.chat_requests[0]
    assert fenced(body, "context") == EINSTEIN_CONTEXTS


def test_context_relevance_one_valid_two_one_invalid(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"direct": 2, "rephrased": "I cannot tell"})
    frame = ragframe.evaluate(relevance_frame(), [ContextRelevance()], judge=judge)
    detail = frame["context_relevance_detail"][0]
    assert frame["context_relevance"][0] == 1.0
    assert detail["rating_1"] == 2 and detail["rating_2"] is None
    assert detail["template_2_error"] is not None and detail["error"] is None


def test_context_relevance_mixed_ratings(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"direct": 1, "rephrased": 0})
    frame = ragframe.evaluate(relevance_frame(), [ContextRelevance()], judge=judge)
    assert frame["context_relevance"][0] == pytest.approx(0.25, abs=1e-12)


def test_context_relevance_shortcut_when_contexts_echo_the_question(
    server: FakeServer, judge: Judge
) -> None:
    frame = pl.DataFrame(
        {"question": ["What is the boiling point of water?"], "contexts": [["boiling point"]]}
    )
    out = ragframe.run(frame, [ContextRelevance()], judge=judge)
    detail = out.frame["context_relevance_detail"][0]
    assert out.frame["context_relevance"][0] == 0.0
    assert "verbatim in the question" in detail["shortcut"]
    assert detail["rating_1"] is None and detail["error"] is None
    assert server.count() == 0
    server.handler = by_task({"direct": 2, "rephrased": 2})
    asked = ragframe.run(frame, [ContextRelevance(shortcuts=False)], judge=judge)
    assert asked.frame["context_relevance"][0] == 1.0 and server.count() == 2


# ------------------------------------------------------------------ response groundedness


def test_response_groundedness_seed_example(server: FakeServer, judge: Judge) -> None:
    server.handler = by_task({"direct": 2, "rephrased": 2})
    frame = pl.DataFrame({"answer": [EINSTEIN_A], "contexts": [EINSTEIN_CONTEXTS]})
    result = ragframe.run(frame, [ResponseGroundedness()], judge=judge)
    assert result.frame["response_groundedness"].to_list() == [1.0]
    assert server.count() == 2
    assert all(fenced(b, "answer") == [EINSTEIN_A] for b in server.chat_requests)
    tasks = sorted(task_name(b) for b in server.chat_requests)
    assert tasks == ["response_groundedness_direct", "response_groundedness_rephrased"]


def test_response_groundedness_shortcut_for_quoted_answer(server: FakeServer, judge: Judge) -> None:
    frame = pl.DataFrame({"answer": ["born at Ulm"], "contexts": [EINSTEIN_CONTEXTS]})
    out = ragframe.run(frame, [ResponseGroundedness()], judge=judge)
    assert out.frame["response_groundedness"][0] == 1.0
    assert out.frame["response_groundedness_detail"][0]["shortcut"] is not None
    assert server.count() == 0


# ----------------------------------------------------------------------------- all three


@pytest.mark.parametrize(
    ("metric", "frame"),
    [
        (
            AnswerAccuracy(),
            pl.DataFrame(
                {
                    "question": ["q", None, "q"],
                    "answer": ["a", "a", "  "],
                    "ground_truth": ["g", "g", "g"],
                }
            ),
        ),
        (
            ContextRelevance(),
            pl.DataFrame(
                {"question": ["q", "q", "q"], "contexts": [["c"], [], ["", " "]]},
                schema={"question": pl.String, "contexts": pl.List(pl.String)},
            ),
        ),
        (
            ResponseGroundedness(),
            pl.DataFrame(
                {"answer": ["a", "", "a"], "contexts": [["c"], ["c"], None]},
                schema={"answer": pl.String, "contexts": pl.List(pl.String)},
            ),
        ),
    ],
)
def test_missing_input_is_null_with_reason_and_sends_nothing(
    server: FakeServer, judge: Judge, metric: Any, frame: pl.DataFrame
) -> None:
    server.handler = lambda body: reply({"rating": 2})
    out = ragframe.run(frame, [metric], judge=judge)
    scores = out.frame[metric.name].to_list()
    errors = [d["error"] for d in out.frame[f"{metric.name}_detail"].to_list()]
    assert scores[0] is not None and scores[1] is None and scores[2] is None
    assert errors[0] is None
    assert all(e.startswith("missing input") for e in errors[1:])
    assert server.count() == 2  # only the first row is judged


def several_rows() -> pl.DataFrame:
    """Six rows with every input the three metrics read; two rows repeat each other."""
    return pl.DataFrame(
        {
            "question": ["Who wrote Emma?", "What is 2+2?", "Capital of Peru?", "Who wrote Emma?",
                         "Largest planet?", "Speed of light?"],
            "answer": ["Jane Austen wrote it.", "It is 4.", "It is Lima.", "Jane Austen wrote it.",
                       "Jupiter is the largest.", "About 300,000 km/s."],
            "ground_truth": ["Jane Austen", "Four", "Lima", "Jane Austen", "Jupiter",
                             "299,792 km/s"],
            "contexts": [["Emma is a novel by Jane Austen."], ["Arithmetic facts.", "2+2=4"],
                         ["Peru's capital is Lima."], ["Emma is a novel by Jane Austen."],
                         ["Jupiter is a gas giant.", "Saturn has rings."],
                         ["Light travels fast."]],
        }
    )  # fmt: skip


@pytest.mark.parametrize("metric", [AnswerAccuracy(), ContextRelevance(), ResponseGroundedness()])
def test_contract_types_direction_and_two_requests_per_row(
    server: FakeServer, judge: Judge, metric: Any
) -> None:
    result = ragframe.run(several_rows(), [metric], judge=judge)  # default: valid ratings
    frame = result.frame
    assert metric.direction == "higher" and metric.uses_llm
    assert metric.info.requests_per_row.startswith("2")
    assert frame.schema[metric.name] == pl.Float64
    detail = frame.schema[f"{metric.name}_detail"]
    assert isinstance(detail, pl.Struct)
    fields = {f.name: f.dtype for f in detail.fields}
    assert fields["rating_1"] == pl.Int64 and fields["rating_2"] == pl.Int64
    assert fields["template_1"] == pl.String and fields["template_2"] == pl.String
    assert fields["error"] == pl.String and fields["shortcut"] == pl.String
    assert fields["partial"] == pl.String
    # Score = mean of the valid ratings over the top of the scale, as the detail says.
    top = float(max(metric.scale))
    unnested = frame.select(metric.name, pl.col(f"{metric.name}_detail").struct.unnest())
    assert unnested["error"].null_count() == frame.height
    assert unnested["shortcut"].null_count() == frame.height
    assert unnested["partial"].null_count() == frame.height  # both templates rated
    expected = pl.concat_list(pl.col("rating_1") / top, pl.col("rating_2") / top).list.mean()
    assert unnested.select((pl.col(metric.name) - expected).abs().max()).item() < 1e-12
    assert unnested[metric.name].is_between(0.0, 1.0).all()
    # Two requests per row; the repeated row's prompts are sent once.
    assert result.stats.requests == server.count() == 2 * 5
    assert result.stats.deduplicated == 2
    assert set(result.stats.by_task) == {t.name for t in metric.tasks()}
