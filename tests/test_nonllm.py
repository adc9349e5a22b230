"""Metrics without an LLM: Levenshtein context precision/recall, ID overlap, the ragas score."""

from __future__ import annotations

import random
from typing import Any

import polars as pl
import pytest
from rapidfuzz.distance import Levenshtein

import ragframe
import ragframe.metrics.nonllm as nonllm
from ragframe import Judge
from ragframe.errors import ConfigError
from ragframe.metrics.nonllm import (
    ContextPrecisionIDs,
    ContextPrecisionNonLLM,
    ContextRecallIDs,
    ContextRecallNonLLM,
    RagasScore,
)
from ragframe.testing.server import FakeServer

EIFFEL = "The Eiffel Tower is located in Paris."
PARIS_CAPITAL = "Paris is the capital of France."
EIFFEL_LANDMARK = "The Eiffel Tower is one of the most famous landmarks in Paris."

TEXT = {"contexts": pl.List(pl.String), "reference_contexts": pl.List(pl.String)}
IDS = {"retrieved_context_ids": pl.List(pl.String), "reference_context_ids": pl.List(pl.String)}


def text_frame(contexts: list[Any], references: list[Any]) -> pl.DataFrame:
    return pl.DataFrame({"contexts": contexts, "reference_contexts": references}, schema=TEXT)


def id_frame(retrieved: list[Any], reference: list[Any]) -> pl.DataFrame:
    return pl.DataFrame(
        {"retrieved_context_ids": retrieved, "reference_context_ids": reference}, schema=IDS
    )


# ------------------------------------------------------------------ Levenshtein metrics


def test_ragas_docs_example(server: FakeServer, judge: Judge) -> None:
    """ragas documents 0.9999999999 for this example: AP = 1 / (1 + 1e-10) with its epsilon.

    The single retrieved context is 28 edits from the landmark sentence (62 characters), so
    its normalised similarity is 1 - 28/62 = 34/62 = 0.548387... >= 0.5: relevant, AP = 1.0
    exactly (no epsilon here). Against the capital sentence it is 29 edits over 37 characters,
    0.2162..., so recall finds 1 of the 2 reference contexts: 0.5.
    """
    frame = text_frame([[EIFFEL]], [[PARIS_CAPITAL, EIFFEL_LANDMARK]])
    result = ragframe.run(frame, [ContextPrecisionNonLLM(), ContextRecallNonLLM()], judge=judge)
    out = result.frame
    assert out["context_precision_nonllm"][0] == 1.0
    assert out["context_recall_nonllm"][0] == 0.5
    [ctx] = out["context_precision_nonllm_detail"][0]["contexts"]
    assert ctx == {
        "context_index": 1,
        "best_similarity": pytest.approx(34 / 62, abs=1e-12),
        "best_reference_index": 2,
        "relevant": True,
    }
    refs = out["context_recall_nonllm_detail"][0]["references"]
    assert [r["matched"] for r in refs] == [False, True]
    assert refs[0]["best_similarity"] == pytest.approx(1 - 29 / 37, abs=1e-12)
    assert server.count() == 0 and result.stats.requests == 0


def test_precision_is_average_precision_in_rank_order(judge: Judge) -> None:
    # Relevant, irrelevant, relevant: AP = (1/1 + 2/3) / 2 = 0.8333...
    frame = text_frame(
        [["the cat sat on the mat", "zzzzzzzzzzzzzzzzzzzzzz", "a dog lay on a rug"]],
        [["the cat sat on a mat", "a dog lay on the rug"]],
    )
    out = ragframe.evaluate(frame, [ContextPrecisionNonLLM()], judge=judge)
    flags = [c["relevant"] for c in out["context_precision_nonllm_detail"][0]["contexts"]]
    assert flags == [True, False, True]
    assert out["context_precision_nonllm"][0] == pytest.approx(5 / 6, abs=1e-12)
    # The same contexts with the irrelevant one first rank worse.
    swapped = text_frame(
        [["zzzzzzzzzzzzzzzzzzzzzz", "the cat sat on the mat", "a dog lay on a rug"]],
        [["the cat sat on a mat", "a dog lay on the rug"]],
    )
    low = ragframe.evaluate(swapped, [ContextPrecisionNonLLM()], judge=judge)
    assert low["context_precision_nonllm"][0] == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-12)


def test_similarity_threshold_is_configurable_and_checked(judge: Judge) -> None:
    """ragas's `threshold` of these metrics is the similarity threshold, here
    `similarity_threshold`: `threshold` is the pass threshold every metric takes."""
    frame = text_frame([[EIFFEL]], [[PARIS_CAPITAL, EIFFEL_LANDMARK]])
    strict = ContextPrecisionNonLLM(similarity_threshold=0.6)
    loose = ContextRecallNonLLM(similarity_threshold=0.2, threshold=0.9)
    out = ragframe.evaluate(frame, [strict, loose], judge=judge)
    assert out["context_precision_nonllm"][0] == 0.0  # none relevant: AP 0.0, not null
    assert out["context_recall_nonllm"][0] == 1.0
    assert strict.config()["similarity_threshold"] == 0.6 and "threshold" not in strict.config()
    assert out["context_recall_nonllm_pass"].to_list() == [True]
    assert "context_precision_nonllm_pass" not in out.columns
    with pytest.raises(ConfigError, match="similarity_threshold"):
        ContextRecallNonLLM(similarity_threshold=1.5)


def test_both_text_metrics_share_one_similarity_table(
    judge: Judge, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = nonllm.similarity_pairs

    async def counting(rows: pl.DataFrame) -> pl.DataFrame:
        calls.append(rows.height)
        return await real(rows)

    monkeypatch.setattr(nonllm, "similarity_pairs", counting)
    frame = text_frame([[EIFFEL], ["x"]], [[EIFFEL_LANDMARK], ["y"]])
    ragframe.evaluate(frame, [ContextPrecisionNonLLM(), ContextRecallNonLLM()], judge=judge)
    assert calls == [2]


def test_blank_items_and_missing_lists(server: FakeServer, judge: Judge) -> None:
    frame = text_frame(
        [["", EIFFEL, " "], [EIFFEL], [], None, ["", "  "], [EIFFEL]],
        [[EIFFEL, ""], [], [EIFFEL], [EIFFEL], [EIFFEL], [None, " "]],
    )
    metrics = [ContextPrecisionNonLLM(), ContextRecallNonLLM()]
    out = ragframe.run(frame, metrics, judge=judge).frame
    # Row 0: the blank reference is no reference (recall 1/1); blank retrieved contexts are
    # dropped before ranking (base.py's one rule), so EIFFEL ranks first (AP 1.0, not the
    # 0.5 of a blank slot ranked before it), and the detail still names its input position 2.
    assert out["context_recall_nonllm"][0] == 1.0
    references = out["context_recall_nonllm_detail"][0]["references"]
    assert [(r["reference_index"], r["best_context_index"]) for r in references] == [(1, 2)]
    contexts = out["context_precision_nonllm_detail"][0]["contexts"]
    assert [(c["context_index"], c["relevant"]) for c in contexts] == [(2, True)]
    assert out["context_precision_nonllm"][0] == 1.0
    # Rows 1-5: an empty, null or all-blank list on either side is missing input.
    for metric in metrics:
        assert out[metric.name][1:].null_count() == 5
        errors = [d["error"] for d in out[f"{metric.name}_detail"][1:]]
        assert all(e.startswith("missing input") for e in errors)
    assert server.count() == 0


def ragas_reference(retrieved: list[str], reference: list[str], threshold: float) -> tuple:
    """ragas's loops, transcribed: (AP with its 1e-10 epsilon, recall with `>=`)."""
    best = [max(Levenshtein.normalized_similarity(r, x) for x in reference) for r in retrieved]
    verdicts = [1 if s >= threshold else 0 for s in best]
    numerator = sum(sum(verdicts[: i + 1]) / (i + 1) * verdicts[i] for i in range(len(verdicts)))
    precision = numerator / (sum(verdicts) + 1e-10)
    recalled = [max(Levenshtein.normalized_similarity(r, x) for r in retrieved) for x in reference]
    recall = sum(1 for s in recalled if s >= threshold) / len(reference)
    return precision, recall


def test_matches_a_transcription_of_ragas_on_random_rows(judge: Judge) -> None:
    rng = random.Random(7)
    words = ["paris", "tower", "eiffel", "france", "capital", "is", "the", "in", "of", "a"]

    def text() -> str:
        return " ".join(rng.choices(words, k=rng.randint(2, 8)))

    contexts = [[text() for _ in range(rng.randint(1, 5))] for _ in range(200)]
    references = [[text() for _ in range(rng.randint(1, 4))] for _ in range(200)]
    out = ragframe.evaluate(
        text_frame(contexts, references),
        [ContextPrecisionNonLLM(), ContextRecallNonLLM()],
        judge=judge,
    )
    for i, (c, r) in enumerate(zip(contexts, references, strict=True)):
        precision, recall = ragas_reference(c, r, 0.5)
        assert out["context_precision_nonllm"][i] == pytest.approx(precision, abs=1e-9)
        assert out["context_recall_nonllm"][i] == pytest.approx(recall, abs=1e-12)


def test_text_detail_types_and_consistency(judge: Judge) -> None:
    frame = text_frame([[EIFFEL, PARIS_CAPITAL], ["abc"]], [[EIFFEL_LANDMARK], ["abd", "xyz"]])
    out = ragframe.evaluate(frame, [ContextPrecisionNonLLM(), ContextRecallNonLLM()], judge=judge)
    assert out.schema["context_precision_nonllm"] == pl.Float64
    assert out.schema["context_precision_nonllm_detail"] == pl.Struct(
        {
            "contexts": pl.List(nonllm.CONTEXT_MATCH),
            "error": pl.String,
            "prompt_tokens": pl.Int64,
            "completion_tokens": pl.Int64,
            "inputs_cut": pl.List(pl.String),
        }
    )
    assert out.schema["context_recall_nonllm_detail"].to_schema()["references"] == pl.List(
        nonllm.REFERENCE_MATCH
    )
    # Recall equals the share of matched flags its detail lists.
    implied = out.select(
        pl.col("context_recall_nonllm_detail")
        .struct.field("references")
        .list.eval(pl.element().struct.field("matched").cast(pl.Float64))
        .list.mean()
    ).to_series()
    assert implied.to_list() == out["context_recall_nonllm"].to_list() == [1.0, 0.5]
    for metric in (ContextPrecisionNonLLM(), ContextRecallNonLLM()):
        assert metric.direction == "higher"
        assert not metric.uses_llm and not metric.uses_embeddings
        assert metric.tasks() == [] and metric.info.requests_per_row == "0"


# --------------------------------------------------------------------------- ID metrics


def test_id_precision_and_recall(server: FakeServer, judge: Judge) -> None:
    frame = id_frame(
        [["doc1", "doc2", "doc3"], ["a", "a", " b ", "", None, "c"], ["x"]],
        [["doc1", "doc2", "doc4"], ["b", "z"], ["y"]],
    )
    result = ragframe.run(frame, [ContextPrecisionIDs(), ContextRecallIDs()], judge=judge)
    out = result.frame
    # ragas's docstring example: 2 of 3 retrieved ids are references.
    assert out["context_precision_ids"][0] == pytest.approx(2 / 3, abs=1e-12)
    assert out["context_recall_ids"][0] == pytest.approx(2 / 3, abs=1e-12)
    # Distinct, stripped ids, blanks and nulls dropped: retrieved {a, b, c}, reference {b, z}.
    assert out["context_precision_ids"][1] == pytest.approx(1 / 3, abs=1e-12)
    assert out["context_recall_ids"][1] == 0.5
    assert out["context_precision_ids_detail"][1]["retrieved"] == [
        {"id": "a", "relevant": False},
        {"id": "b", "relevant": True},
        {"id": "c", "relevant": False},
    ]
    assert out["context_recall_ids_detail"][1]["reference"] == [
        {"id": "b", "retrieved": True},
        {"id": "z", "retrieved": False},
    ]
    assert out["context_precision_ids"][2] == 0.0 and out["context_recall_ids"][2] == 0.0
    assert server.count() == 0 and result.stats.requests == 0


def test_id_precision_ignores_rank_as_ragas_does(judge: Judge) -> None:
    early = id_frame([["r", "n1", "n2"]], [["r"]])
    late = id_frame([["n1", "n2", "r"]], [["r"]])
    a = ragframe.evaluate(early, [ContextPrecisionIDs()], judge=judge)
    b = ragframe.evaluate(late, [ContextPrecisionIDs()], judge=judge)
    assert a["context_precision_ids"][0] == b["context_precision_ids"][0] == pytest.approx(1 / 3)


def test_id_missing_input_is_null_never_one(server: FakeServer, judge: Judge) -> None:
    frame = id_frame([["a"], [], ["a"], None, [" ", ""]], [[], ["a"], None, ["a"], ["a"]])
    out = ragframe.evaluate(frame, [ContextPrecisionIDs(), ContextRecallIDs()], judge=judge)
    for name in ("context_precision_ids", "context_recall_ids"):
        assert out[name].null_count() == 5
        assert all(d["error"].startswith("missing input") for d in out[f"{name}_detail"])
    assert server.count() == 0


def test_id_scores_equal_their_details(judge: Judge) -> None:
    rng = random.Random(3)
    retrieved = [[str(rng.randint(0, 9)) for _ in range(rng.randint(1, 6))] for _ in range(100)]
    reference = [[str(rng.randint(0, 9)) for _ in range(rng.randint(1, 4))] for _ in range(100)]
    out = ragframe.evaluate(
        id_frame(retrieved, reference), [ContextPrecisionIDs(), ContextRecallIDs()], judge=judge
    )
    assert out.schema["context_precision_ids_detail"].to_schema()["retrieved"] == pl.List(
        nonllm.RETRIEVED_ID
    )
    for i, (ret, ref) in enumerate(zip(retrieved, reference, strict=True)):
        hits = set(ret) & set(ref)
        assert out["context_precision_ids"][i] == pytest.approx(len(hits) / len(set(ret)))
        assert out["context_recall_ids"][i] == pytest.approx(len(hits) / len(set(ref)))
        flags = [d["relevant"] for d in out["context_precision_ids_detail"][i]["retrieved"]]
        assert out["context_precision_ids"][i] == pytest.approx(sum(flags) / len(flags))


# --------------------------------------------------------------------------- ragas score


def test_ragas_score_expression() -> None:
    frame = pl.DataFrame(
        {
            "faithfulness": [1.0, 0.5, None, 0.0, 0.8],
            "answer_relevancy": [1.0, 1.0, 0.9, 0.7, 0.8],
            "context_precision": [1.0, 0.5, 0.9, 0.7, 0.8],
            "context_recall": [1.0, 1.0, 0.9, 0.7, 0.8],
        }
    )
    out = frame.select(RagasScore().expression())
    assert out.schema["ragas_score"] == pl.Float64
    scores = out["ragas_score"].to_list()
    assert scores[0] == 1.0
    assert scores[1] == pytest.approx(4 / (2 + 1 + 2 + 1), abs=1e-12)  # 0.6667
    assert scores[2] is None  # one input null: the row has no ragas score
    assert scores[3] == 0.0  # one input 0: the harmonic mean's limit
    assert scores[4] == pytest.approx(0.8, abs=1e-12)


def test_ragas_score_custom_columns_and_checks() -> None:
    frame = pl.DataFrame({"a": [0.25], "b": [1.0]})
    custom = RagasScore(of=("a", "b"), name="mine")
    assert frame.select(custom.expression())["mine"][0] == pytest.approx(0.4, abs=1e-12)
    assert RagasScore().name == "ragas_score" and RagasScore.direction == "higher"
    with pytest.raises(ConfigError):
        RagasScore(of=())
    with pytest.raises(ConfigError):
        RagasScore(of=("a", "a"))
