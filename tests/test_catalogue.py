"""Every metric at once: the output contract on real rows, and the requests a joint run sends."""

from __future__ import annotations

from collections import Counter

import polars as pl
from conftest import fenced, task_name

import ragframe
from ragframe import GEval, RagasScore
from ragframe.metrics import CORE
from ragframe.testing.server import auto_answer


def every_metric() -> list:
    return [
        *ragframe.REGISTRY,
        GEval(name="g_eval", evaluation_steps=["Check the answer against the contexts."]),
        RagasScore(),
    ]


def with_reference_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """The non-LLM metrics need reference contexts and ids; derive them from the contexts."""
    return frame.with_columns(
        pl.col("contexts").list.head(1).alias("reference_contexts"),
        pl.col("contexts").list.eval(pl.element().str.slice(0, 12)).alias("retrieved_context_ids"),
        pl.col("contexts")
        .list.head(2)
        .list.eval(pl.element().str.slice(0, 12))
        .alias("reference_context_ids"),
    )


def test_every_metric_at_once_on_the_sample(server, judge, sample):
    df = with_reference_columns(sample)
    metrics = every_metric()
    result = ragframe.run(df, metrics, judge=judge)
    out = result.frame
    assert out.select(df.columns).equals(df)
    names = [m if isinstance(m, str) else m.name for m in metrics]
    for name in names:
        assert out.schema[name] == pl.Float64, name
        assert isinstance(out.schema[f"{name}_detail"], pl.Struct), name
        scores = out[name].drop_nulls()
        assert ((scores >= 0) & (scores <= 1)).all(), name
        # A null score always carries its reason.
        errors = out.filter(pl.col(name).is_null())[f"{name}_detail"].struct.field("error")
        assert errors.null_count() == 0, name
    assert result.summary()["metrics"]["hallucination"]["direction"] == "lower"


def test_joint_run_request_counts(server, judge):
    """Shared stages are paid for once: the claims of an answer serve three metrics."""
    n = 6
    df = with_reference_columns(
        pl.DataFrame(
            {
                "question": [f"question {i}" for i in range(n)],
                "answer": [f"answer {i}" for i in range(n)],
                "contexts": [[f"context {i} one", f"context {i} two"] for i in range(n)],
                "ground_truth": [f"truth {i}" for i in range(n)],
            }
        )
    )
    claims = [f"claim {k}" for k in range(7)]

    def handler(body):
        if task_name(body) == "answer_claims":
            return {"claims": claims}
        return auto_answer(body)

    server.handler = handler
    result = ragframe.run(df, every_metric(), judge=judge)
    by_task = Counter(task_name(body) for body in server.chat_requests)
    per_row = {task: count / n for task, count in by_task.items()}
    assert per_row == {
        "answer_claims": 1,  # shared by faithfulness, answer_relevancy_llm, answer_correctness
        "faithfulness_verify": 1,  # all 7 claims in one request
        "answer_relevancy_questions": 1,
        "context_precision_reference": 1,
        "context_precision_answer": 1,
        "context_recall_attribute": 1,
        "contextual_relevancy_statements": 1,  # all contexts in one request (deepeval: C + 1)
        "answer_relevancy_llm_verdicts": 1,
        "hallucination_contexts": 1,
        "answer_accuracy_answer_vs_reference": 1,
        "answer_accuracy_reference_vs_answer": 1,
        "context_relevance_direct": 1,
        "context_relevance_rephrased": 1,
        "response_groundedness_direct": 1,
        "response_groundedness_rephrased": 1,
        "ground_truth_statements": 1,
        "answer_correctness_classify": 1,
        "rubric_score_score": 1,
        "g_eval_score": 1,  # steps were given: no steps request
    }
    # 19 chat requests a row for 18 metrics and an aggregate; the non-LLM ones send none.
    assert sum(per_row.values()) == 19
    assert result.stats.requests == sum(by_task.values()) + result.stats.embedding_requests
    assert server.count("/embeddings") == result.stats.embedding_requests <= 2


def test_core_metrics_take_five_requests_per_row_whatever_the_claims(server, judge):
    """Faithfulness, answer_relevancy, context_precision and context_recall: 5 chat requests a
    row (claims, one verification, questions, precision, recall) for answers of 6 to 12
    claims, and each row's contexts go into one verification prompt only."""
    n = 14
    df = pl.DataFrame(
        {
            "question": [f"question {i}" for i in range(n)],
            "answer": [f"answer {i}" for i in range(n)],
            "contexts": [[f"context {i} one", f"context {i} two"] for i in range(n)],
            "ground_truth": [f"truth {i}" for i in range(n)],
        }
    )

    def handler(body):
        if task_name(body) == "answer_claims":
            row = int(fenced(body, "answer")[0].split()[1])
            return {"claims": [f"claim {k} of row {row}" for k in range(6 + row % 7)]}
        return auto_answer(body)

    server.handler = handler
    result = ragframe.run(df, list(CORE), judge=judge)
    assert result.frame.select(pl.col(CORE).null_count()).sum_horizontal()[0] == 0
    by_task = Counter(task_name(body) for body in server.chat_requests)
    assert by_task == {
        "answer_claims": n,
        "faithfulness_verify": n,
        "answer_relevancy_questions": n,
        "context_precision_reference": n,
        "context_recall_attribute": n,
    }
    claims = result.frame["faithfulness_detail"].struct.field("claims").list.len()
    assert sorted(set(claims)) == list(range(6, 13))
