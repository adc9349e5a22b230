"""docs/migrating.md's claims, checked: the same verdicts give the same score in ragframe and
in ragas 0.4.3 / deepeval 4.3.1, except where the page says how and by how much they differ.

ragframe's side is a real run: `ragframe.run` against the scripted fake judge
(`ragframe.testing`), whose answers are the verdicts below. The peers' side is each peer's own
scoring code, run in its own environment (`tests/real_tools.run_peer`) on the same verdicts
built as the peer's own verdict objects: deepeval's `Metric._calculate_score()` on a metric
built with its defaults, and ragas's scoring methods (`_compute_score`,
`_calculate_average_precision`, `_compute_f1_score`, `_average_scores`, `_calculate_score`) on
its metric classes; for answer relevancy, ragas is given the vectors ragframe's run embedded.
What is not checked is the judging itself: the prompts differ, so a real judge may give the
two tools different verdicts on the same row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from conftest import fenced, reply, router
from real_tools import run_peer

import ragframe
from ragframe.metrics import AnswerCorrectness
from ragframe.testing import embed_text

# --------------------------------------------------------------------------- the verdicts
# One list per row. deepeval's words: "yes", "no", "borderline" (its older prompts' "idk",
# which it still reads as borderline).

#: faithfulness: the judge's verdict on each claim of the answer.
FAITHFULNESS = [["yes", "no", "yes", "yes"], ["no", "no", "yes"], ["yes"], ["no"]]
#: ...with deepeval's third verdict: a claim the contexts neither support nor contradict.
FAITHFULNESS_BORDERLINE = [["yes", "borderline", "no", "yes"], ["borderline", "borderline", "no"]]
#: answer_relevancy_llm / AnswerRelevancyMetric: each statement relevant, not, or "idk".
ANSWER_RELEVANCY = [["yes", "idk", "no"], ["no", "no"], ["yes", "yes", "idk", "yes"]]
#: context precision: each context, in rank order, relevant or not.
CONTEXT_PRECISION = [[0, 1, 1, 0, 0], [1, 0, 1], [0, 0], [1, 1, 1]]
#: context recall: each fact of the ground truth, found in the contexts or not.
CONTEXT_RECALL = [[1, 0], [1, 1, 0, 1], [0], [1]]
#: contextual relevancy: per context, each of its statements relevant or not.
CONTEXTUAL_RELEVANCY = [
    [[0], [0], [1, 1, 1], [1, 1, 1], [1, 1, 1]],  # 9 / 11, the example of deepeval's page
    [[1, 0], [0]],
    [[0, 0]],
]
#: hallucination: each context contradicted by the answer or not.
HALLUCINATION = [[1, 0, 0], [0, 0], [1], [1, 1, 0, 1]]
#: answer correctness: each answer statement TP (the ground truth supports it) or FP; each
#: ground-truth statement covered by the answer or not (not covered: FN).
ANSWER_CORRECTNESS = [
    (["TP", "FP", "TP"], [1, 0]),
    (["FP"], [0, 0]),
    (["TP", "TP"], [1, 1]),
    (["TP", "FP", "FP", "FP"], [1, 0, 0]),
]
#: answer_relevancy: the questions the judge writes from each answer, and whether it finds the
#: answer noncommittal (ragas asks for each question apart, each with its own flag).
ANSWER_RELEVANCY_EMBEDDING = [  # the rows' questions are "Question of row i?"
    (["What is the question of row 0?", "Which row is it?", "When was the tower built?"], False),
    (["Question of row 1?", "The question of row 1?", "What question has row 1?"], False),
    (["Question of row 2?", "Which row is it?", "When was the tower built?"], True),
]
#: NVIDIA's dual-template metrics: the two templates' ratings.
ANSWER_ACCURACY = [(4, 2), (0, 0), (2, 4), (4, 4)]  # 0, 2 or 4
CONTEXT_RELEVANCE = [(2, 1), (0, 0), (1, 2), (2, 2)]  # 0, 1 or 2
RESPONSE_GROUNDEDNESS = [(1, 1), (2, 0), (0, 2), (2, 2)]  # 0, 1 or 2


# ------------------------------------------------------------------- the peers' own scoring

DEEPEVAL = r"""
import json, os, sys
os.environ["OPENAI_API_KEY"] = "sk-test-not-a-real-key"  # the metrics build a client, unused
from deepeval.metrics import (AnswerRelevancyMetric, ContextualPrecisionMetric,
    ContextualRecallMetric, ContextualRelevancyMetric, FaithfulnessMetric, HallucinationMetric)
from deepeval.metrics.answer_relevancy.schema import AnswerRelevancyVerdict
from deepeval.metrics.contextual_precision.schema import ContextualPrecisionVerdict
from deepeval.metrics.contextual_recall.schema import ContextualRecallVerdict
from deepeval.metrics.contextual_relevancy.schema import (ContextualRelevancyVerdict,
    ContextualRelevancyVerdicts)
from deepeval.metrics.faithfulness.schema import FaithfulnessVerdict
from deepeval.metrics.hallucination.schema import HallucinationVerdict

cases = json.loads(sys.argv[1])
yes_no = lambda flag: "yes" if flag else "no"

def score(metric, **state):
    for name, value in state.items():
        setattr(metric, name, value)
    return metric._calculate_score()

def faithfulness(rows, **options):
    return [score(FaithfulnessMetric(model="gpt-4o-mini", **options),
                  verdicts=[FaithfulnessVerdict(verdict=v, reason="r") for v in row])
            for row in rows]

out = {
    "faithfulness": faithfulness(cases["faithfulness"]),
    "faithfulness_borderline": faithfulness(cases["faithfulness_borderline"]),
    "faithfulness_borderline_penalized": faithfulness(
        cases["faithfulness_borderline"], penalize_ambiguous_claims=True),
    "answer_relevancy": [
        score(AnswerRelevancyMetric(model="gpt-4o-mini"), verdicts=[
            AnswerRelevancyVerdict(verdict="borderline" if v == "idk" else v, reason="r")
            for v in row])
        for row in cases["answer_relevancy"]],
    "context_precision": [
        score(ContextualPrecisionMetric(model="gpt-4o-mini"), verdicts=[
            ContextualPrecisionVerdict(verdict=yes_no(v), reason="r") for v in row])
        for row in cases["context_precision"]],
    "context_recall": [
        score(ContextualRecallMetric(model="gpt-4o-mini"), verdicts=[
            ContextualRecallVerdict(verdict=yes_no(v), reason="r") for v in row])
        for row in cases["context_recall"]],
    "contextual_relevancy": [
        score(ContextualRelevancyMetric(model="gpt-4o-mini"), verdicts_list=[
            ContextualRelevancyVerdicts(verdicts=[
                ContextualRelevancyVerdict(statement="s", verdict=yes_no(v), reason="r")
                for v in context])
            for context in row])
        for row in cases["contextual_relevancy"]],
    # deepeval's verdict is "does the answer agree with this context": yes unless contradicted
    "hallucination": [
        score(HallucinationMetric(model="gpt-4o-mini"), verdicts=[
            HallucinationVerdict(verdict=yes_no(not v), reason="r") for v in row])
        for row in cases["hallucination"]],
}
print(json.dumps(out))
"""

RAGAS = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from ragas.metrics._answer_relevance import ResponseRelevanceOutput, ResponseRelevancy
from ragas.metrics._context_recall import ContextRecallClassification, LLMContextRecall
from ragas.metrics.collections import (AnswerAccuracy, AnswerCorrectness,
    ContextPrecisionWithReference, ContextPrecisionWithoutReference, ContextRelevance,
    Faithfulness, ResponseGroundedness)
from ragas.metrics.collections.answer_correctness.util import (ClassificationWithReason,
    StatementsWithReason)
from ragas.metrics.collections.faithfulness.util import (NLIStatementOutput,
    StatementFaithfulnessAnswer)

cases = json.loads(sys.argv[1])
vectors = json.loads(sys.argv[2])  # the fake judge's embedding of each text ragframe embedded

class Embeddings:
    # the same vectors ragframe's run got from the fake judge's /embeddings
    def embed_query(self, text):
        return vectors[text]

    def embed_documents(self, texts):
        return [vectors[t] for t in texts]

def bare(cls, **state):
    # The metric's own scoring methods use no LLM: an instance without one, its settings set.
    metric = cls.__new__(cls)
    metric.__dict__.update(state)
    return metric

def f1(answer, truth):
    said = lambda n: [StatementsWithReason(statement=f"s{i}", reason="r") for i in range(n)]
    tp, fp = answer.count("TP"), answer.count("FP")
    fn = truth.count(0)
    return bare(AnswerCorrectness, beta=1.0)._compute_f1_score(
        ClassificationWithReason(TP=said(tp), FP=said(fp), FN=said(fn)))

def dual(cls, top, rows):
    return [bare(cls)._average_scores(a / top, b / top) for a, b in rows]

out = {
    "faithfulness": [
        bare(Faithfulness)._compute_score(NLIStatementOutput(statements=[
            StatementFaithfulnessAnswer(statement="s", reason="r", verdict=int(v == "yes"))
            for v in row]))
        for row in cases["faithfulness"]],
    "context_precision": [
        bare(ContextPrecisionWithReference)._calculate_average_precision(row)
        for row in cases["context_precision"]],
    "context_precision_without_reference": [
        bare(ContextPrecisionWithoutReference)._calculate_average_precision(row)
        for row in cases["context_precision"]],
    "context_recall": [
        LLMContextRecall()._compute_score([
            ContextRecallClassification(statement="s", reason="r", attributed=v) for v in row])
        for row in cases["context_recall"]],
    "answer_correctness": [f1(a, t) for a, t in cases["answer_correctness"]],
    "answer_relevancy": [
        float(ResponseRelevancy(embeddings=Embeddings())._calculate_score(
            [ResponseRelevanceOutput(question=q, noncommittal=int(flag)) for q in questions],
            {"user_input": question}))
        for question, questions, flag in cases["answer_relevancy_embedding"]],
    "answer_accuracy": dual(AnswerAccuracy, 4, cases["answer_accuracy"]),
    "context_relevance": dual(ContextRelevance, 2, cases["context_relevance"]),
    "response_groundedness": dual(ResponseGroundedness, 2, cases["response_groundedness"]),
}
print(json.dumps(out))
"""

CASES = {
    "faithfulness": FAITHFULNESS,
    "faithfulness_borderline": FAITHFULNESS_BORDERLINE,
    "answer_relevancy": ANSWER_RELEVANCY,
    "context_precision": CONTEXT_PRECISION,
    "context_recall": CONTEXT_RECALL,
    "contextual_relevancy": CONTEXTUAL_RELEVANCY,
    "hallucination": HALLUCINATION,
    "answer_correctness": ANSWER_CORRECTNESS,
    "answer_accuracy": ANSWER_ACCURACY,
    "context_relevance": CONTEXT_RELEVANCE,
    "response_groundedness": RESPONSE_GROUNDEDNESS,
    "answer_relevancy_embedding": [
        (f"Question of row {i}?", questions, flag)
        for i, (questions, flag) in enumerate(ANSWER_RELEVANCY_EMBEDDING)
    ],
}
#: The fake judge's embedding of every text the answer relevancy rows embed.
VECTORS = {
    text: embed_text(text)
    for question, questions, _ in CASES["answer_relevancy_embedding"]
    for text in (question, *questions)
}


@pytest.fixture(scope="module")
def deepeval() -> dict[str, list[float]]:
    """deepeval 4.3.1's scores of the verdicts, by its own `_calculate_score`."""
    return json.loads(run_peer("deepeval", DEEPEVAL, json.dumps(CASES)).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ragas() -> dict[str, list[float]]:
    """ragas 0.4.3's scores of the verdicts, by its own scoring methods."""
    out = run_peer("ragas", RAGAS, json.dumps(CASES), json.dumps(VECTORS))
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------- ragframe on the verdicts


def rows(n: int, contexts: int = 1) -> pl.DataFrame:
    """n rows whose texts name their row (`Row i`), so a scripted answer can find it."""
    return pl.DataFrame(
        {
            "question": [f"Question of row {i}?" for i in range(n)],
            "answer": [f"Answer of row {i}." for i in range(n)],
            "contexts": [[f"Row {i} context {k}." for k in range(contexts)] for i in range(n)],
            "ground_truth": [f"Truth of row {i}." for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


def row_of(body: dict[str, Any], tag: str) -> int:
    """The row a request is about: the number after "row " in its first `tag` text."""
    text = fenced(body, tag)[0]
    return int(text.lower().split("row ")[1].split()[0].rstrip(".?"))


def numbered(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"index": i, **item} for i, item in enumerate(items, start=1)]


def scored(server: Any, judge: Any, frame: pl.DataFrame, metric: Any, **by_task: Any) -> list:
    server.handler = router(**by_task)
    out = ragframe.run(frame, [metric], judge=judge).frame
    name = metric if isinstance(metric, str) else metric.name
    errors = out[f"{name}_detail"].struct.field("error").to_list()
    assert errors == [None] * out.height, errors
    return out[name].to_list()


def claims_of(lengths: list[int]) -> Callable[[dict[str, Any]], str]:
    """The claims stage: row i's answer has lengths[i] claims, each naming its row."""

    def answer(body: dict[str, Any]) -> str:
        i = row_of(body, "answer")
        return reply({"claims": [f"Claim {k} of row {i}." for k in range(lengths[i])]})

    return answer


def by_row(make: Callable[[int], Any], tag: str) -> Callable[[dict[str, Any]], str]:
    return lambda body: reply(make(row_of(body, tag)))


def ragframe_faithfulness(server: Any, judge: Any, verdicts: list[list[str]]) -> list:
    """ragframe's judge says `supported` true or false: a borderline claim is not supported
    (it cannot be inferred from the contexts), so it is scripted as false."""
    return scored(
        server,
        judge,
        rows(len(verdicts)),
        "faithfulness",
        answer_claims=claims_of([len(v) for v in verdicts]),
        faithfulness_verify=by_row(
            lambda i: {
                "verdicts": numbered(
                    [{"reason": "r", "supported": v == "yes"} for v in verdicts[i]]
                )
            },
            "claim",
        ),
    )


# --------------------------------------------------------------------------------- equal


def test_faithfulness_equals_ragas_and_deepeval(server, judge, ragas, deepeval) -> None:
    ours = ragframe_faithfulness(server, judge, FAITHFULNESS)
    assert ours == [0.75, 1 / 3, 1.0, 0.0]
    assert ragas["faithfulness"] == ours
    assert deepeval["faithfulness"] == ours


def test_deepeval_counts_a_borderline_claim_as_supported(server, judge, deepeval) -> None:
    """deepeval's faithfulness passes "borderline" (formerly "idk") claims unless
    `penalize_ambiguous_claims=True`: it is higher than ragframe's by exactly the share of
    borderline claims, and equal with that option."""
    ours = ragframe_faithfulness(server, judge, FAITHFULNESS_BORDERLINE)
    borderline = [row.count("borderline") / len(row) for row in FAITHFULNESS_BORDERLINE]
    assert ours == [0.5, 0.0]
    assert deepeval["faithfulness_borderline"] == pytest.approx(
        [o + b for o, b in zip(ours, borderline, strict=True)], abs=1e-12
    )
    assert deepeval["faithfulness_borderline"] == [0.75, 2 / 3]
    assert deepeval["faithfulness_borderline_penalized"] == ours


def test_answer_relevancy_llm_equals_deepeval_answer_relevancy(server, judge, deepeval) -> None:
    """Both count an "idk" (deepeval: borderline) statement as relevant."""
    ours = scored(
        server,
        judge,
        rows(len(ANSWER_RELEVANCY)),
        "answer_relevancy_llm",
        answer_claims=claims_of([len(v) for v in ANSWER_RELEVANCY]),
        answer_relevancy_llm_verdicts=by_row(
            lambda i: {
                "verdicts": numbered([{"reason": "r", "verdict": v} for v in ANSWER_RELEVANCY[i]])
            },
            "statement",
        ),
    )
    assert ours == [2 / 3, 0.0, 1.0]
    assert deepeval["answer_relevancy"] == ours


def precision_reply(i: int) -> dict[str, Any]:
    flags = CONTEXT_PRECISION[i]
    return {"verdicts": numbered([{"reason": "r", "relevant": bool(v)} for v in flags])}


def test_context_precision_equals_ragas_and_deepeval(server, judge, ragas, deepeval) -> None:
    """Average precision over the relevant contexts, with and without a reference; ragas adds
    1e-10 to the divisor."""
    ours = []
    for i, flags in enumerate(CONTEXT_PRECISION):
        frame = rows(1, len(flags))
        ours += scored(
            server,
            judge,
            frame,
            "context_precision",
            context_precision_reference=reply(precision_reply(i)),
        )
        without = scored(
            server,
            judge,
            frame,
            "context_precision_without_reference",
            context_precision_answer=reply(precision_reply(i)),
        )
        assert without == ours[-1:]
    assert ours == pytest.approx([(1 / 2 + 2 / 3) / 2, (1 + 2 / 3) / 2, 0.0, 1.0], abs=1e-12)
    assert deepeval["context_precision"] == ours
    assert ragas["context_precision"] == pytest.approx(ours, rel=1e-9, abs=1e-12)
    assert ragas["context_precision_without_reference"] == ragas["context_precision"]


def test_context_recall_equals_ragas_and_deepeval(server, judge, ragas, deepeval) -> None:
    ours = scored(
        server,
        judge,
        rows(len(CONTEXT_RECALL)),
        "context_recall",
        context_recall_attribute=by_row(
            lambda i: {
                "facts": [
                    {
                        "fact": f"f{k}",
                        "reason": "r",
                        "covered": bool(v),
                        "source_context": 1 if v else None,
                    }
                    for k, v in enumerate(CONTEXT_RECALL[i])
                ]
            },
            "ground_truth",
        ),
    )
    assert ours == [0.5, 0.75, 0.0, 1.0]
    assert ragas["context_recall"] == ours
    assert deepeval["context_recall"] == ours


def test_contextual_relevancy_equals_deepeval(server, judge, deepeval) -> None:
    ours = []
    for contexts in CONTEXTUAL_RELEVANCY:
        frame = rows(1, len(contexts))
        answer = {
            "contexts": numbered(
                [
                    {
                        "statements": [
                            {"statement": "s", "reason": "r", "relevant": bool(v)} for v in c
                        ]
                    }
                    for c in contexts
                ]
            )
        }
        ours += scored(
            server,
            judge,
            frame,
            "contextual_relevancy",
            contextual_relevancy_statements=reply(answer),
        )
    assert ours == pytest.approx([9 / 11, 1 / 3, 0.0], abs=1e-12)
    assert deepeval["contextual_relevancy"] == ours


def test_answer_relevancy_equals_ragas_response_relevancy(server, judge, ragas) -> None:
    """Mean cosine of the question and the generated questions, 0 when noncommittal, on the
    same questions and the same embeddings (the fake judge's, given to ragas's own code)."""
    ours = scored(
        server,
        judge,
        rows(len(ANSWER_RELEVANCY_EMBEDDING)),
        "answer_relevancy",
        answer_relevancy_questions=by_row(
            lambda i: {
                "questions": ANSWER_RELEVANCY_EMBEDDING[i][0],
                "noncommittal": ANSWER_RELEVANCY_EMBEDDING[i][1],
            },
            "answer",
        ),
    )
    assert 0 < ours[0] < ours[1] <= 1 and ours[2] == 0.0
    # equal up to the float32 rounding of the vectors on ragframe's embedding path
    assert ragas["answer_relevancy"] == pytest.approx(ours, abs=1e-6)


def test_answer_correctness_factual_half_equals_ragas(server, judge, ragas) -> None:
    """With weights (1, 0) answer_correctness is the factual F1, ragas's `_compute_f1_score`."""
    answer_n = [len(a) for a, _ in ANSWER_CORRECTNESS]

    def truth(body: dict[str, Any]) -> str:
        i = row_of(body, "ground_truth")
        return reply(
            {"statements": [f"Fact {k} of row {i}." for k in range(len(ANSWER_CORRECTNESS[i][1]))]}
        )

    def classify(body: dict[str, Any]) -> str:
        i = row_of(body, "claim")
        said, covered = ANSWER_CORRECTNESS[i]
        return reply(
            {
                "answer_statements": numbered([{"reason": "r", "verdict": v} for v in said]),
                "ground_truth_statements": numbered(
                    [{"reason": "r", "covered": bool(v)} for v in covered]
                ),
            }
        )

    ours = scored(
        server,
        judge,
        rows(len(ANSWER_CORRECTNESS)),
        AnswerCorrectness(weights=(1.0, 0.0)),
        answer_claims=claims_of(answer_n),
        ground_truth_statements=truth,
        answer_correctness_classify=classify,
    )
    assert ours == pytest.approx([2 / 3, 0.0, 1.0, 2 / 7], abs=1e-12)
    assert ragas["answer_correctness"] == pytest.approx(ours, abs=1e-12)


#: NVIDIA's metrics: ragframe's two template tasks and the ratings scripted for them.
NVIDIA = {
    "answer_accuracy": (
        ("answer_accuracy_answer_vs_reference", "answer_accuracy_reference_vs_answer"),
        ANSWER_ACCURACY,
    ),
    "context_relevance": (
        ("context_relevance_direct", "context_relevance_rephrased"),
        CONTEXT_RELEVANCE,
    ),
    "response_groundedness": (
        ("response_groundedness_direct", "response_groundedness_rephrased"),
        RESPONSE_GROUNDEDNESS,
    ),
}


@pytest.mark.parametrize("metric", list(NVIDIA))
def test_nvidia_metrics_equal_ragas(server, judge, ragas, metric) -> None:
    """The two templates' ratings, each over the top of its scale, averaged."""
    (first, second), ratings = NVIDIA[metric]
    ours = []
    for a, b in ratings:
        replies = {first: reply({"rating": a}), second: reply({"rating": b})}
        ours += scored(server, judge, rows(1), metric, **replies)
    top = 4 if metric == "answer_accuracy" else 2
    assert ours == pytest.approx([(a + b) / 2 / top for a, b in ratings], abs=1e-12)
    assert ragas[metric] == pytest.approx(ours, abs=1e-12)


# ------------------------------------------------------------------------------ opposite


def test_deepeval_hallucination_is_one_minus_ragframes(server, judge, deepeval) -> None:
    """deepeval 4.3.1 scores hallucination as the share of contexts the answer agrees with
    (higher is better); ragframe's is the share it contradicts (lower is better)."""
    ours = []
    for flags in HALLUCINATION:
        frame = rows(1, len(flags))
        answer = {"verdicts": numbered([{"reason": "r", "contradicted": bool(v)} for v in flags])}
        ours += scored(server, judge, frame, "hallucination", hallucination_contexts=reply(answer))
    assert ours == pytest.approx([1 / 3, 0.0, 1.0, 0.75], abs=1e-12)
    assert deepeval["hallucination"] == pytest.approx([1 - o for o in ours], abs=1e-12)
