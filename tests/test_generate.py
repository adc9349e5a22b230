"""Test-set generation (`ragframe.engine.generate`) against the stand-in judge, through the real
openai client: the spans, the pairs, each check rejecting what it should with its reason, the
type mix, the request counts, reproducibility and the cache.

The stand-in's answers are scripted here (`scripted`): questions made of words drawn from the
prompt's hash (so no two are near-duplicates by accident), every claim supported, every
question self-contained, answerable unless it was written as unanswerable. Each test changes
one of those answers and looks for the rejection it must cause.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import fenced, judge_for, router, system_text, task_name, user_text

from ragframe.engine.generate import STYLES, generate, generate_run
from ragframe.errors import ConfigError
from ragframe.inputs.corpus import read_corpus, split_documents
from ragframe.testing.server import auto_answer, embed_text

DOCS = {
    "solar.md": (
        "# Solar panels\n\nThe Helio 400 panel produces 400 watts at peak sun and weighs 21 "
        "kilograms. Its frame is anodised aluminium and its glass is 3.2 millimetres thick.\n\n"
        "## Warranty\n\nHelio panels carry a 25 year performance warranty that guarantees 84 "
        "percent of rated output after 25 years, and a 12 year product warranty."
    ),
    "battery.md": (
        "# Home batteries\n\nThe Vault 10 battery stores 10 kilowatt hours and delivers 5 "
        "kilowatts continuously. It pairs with the Helio 400 panel through the Bridge "
        "inverter.\n\n## Installation\n\nA Vault 10 must be mounted indoors or in a shaded "
        "enclosure, between minus 10 and 45 degrees Celsius, at least one metre from a door."
    ),
    "inverter.md": (
        "# Inverters\n\nThe Bridge inverter converts up to 8 kilowatts of direct current and "
        "supports two battery strings of up to three Vault 10 units each.\n\n## Updates\n\n"
        "Bridge firmware updates arrive over Wi-Fi every quarter and install overnight; a "
        "failed update rolls back to the previous version on its own."
    ),
    "grid.md": (
        "# Grid export\n\nSurplus energy is exported to the grid when the Vault 10 is full; "
        "the export limit is set by the network operator, often 5 kilowatts per home.\n\n"
        "## Tariffs\n\nExport tariffs are paid per kilowatt hour and are reviewed by the "
        "supplier each April, with new rates applying from the first of May."
    ),
}
CORPUS = pl.DataFrame(
    {"path": list(DOCS), "text": list(DOCS.values()), "topic": ["pv", "storage", "power", "grid"]}
)

_VOCAB = [f"w{hashlib.sha1(str(i).encode()).hexdigest()[:6]}" for i in range(256)]


def _words(seed: str, k: int = 7) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return " ".join(_VOCAB[b] for b in digest[:k])


def proposer(kind: str, edit: Callable[[int, dict[str, str]], None] | None = None) -> Any:
    """A generation answer: as many pairs as the schema pins, words drawn from the prompt;
    `edit(item, pair)` changes pair `item` (1-based) before it is sent."""

    def handle(body: dict[str, Any]) -> str:
        count = len(json.loads(auto_answer(body))["questions"])
        text = user_text(body)
        pairs = []
        for item in range(1, count + 1):
            pair = {
                "question": f"{kind} {_words(text + str(item))}?",
                "ground_truth": f"Truth {_words(text + 'gt' + str(item))}.",
            }
            if edit is not None:
                edit(item, pair)
            pairs.append(pair)
        return json.dumps({"questions": pairs})

    return handle


def claims(body: dict[str, Any]) -> str:
    """The answer's sentences as its claims."""
    (answer,) = fenced(body, "answer")
    return json.dumps({"claims": [s.strip() for s in answer.split(". ") if s.strip()]})


def verify(body: dict[str, Any]) -> str:
    """Every claim supported, except one that says UNSUPPORTED."""
    verdicts = [
        {
            "index": i,
            "reason": "the contexts never state it" if "UNSUPPORTED" in c else "stated",
            "supported": "UNSUPPORTED" not in c,
        }
        for i, c in enumerate(fenced(body, "claim"), 1)
    ]
    return json.dumps({"verdicts": verdicts})


def check(body: dict[str, Any]) -> str:
    """Self-contained unless "according to the passage"; answerable unless written so (the
    unanswerable check's `answered_by` empty then)."""
    verdicts = []
    for i, q in enumerate(fenced(body, "question"), 1):
        loose = "according to the passage" in q.lower()
        verdict = {
            "index": i,
            "reason": "refers to a passage the reader has not seen" if loose else "fine",
            "self_contained": not loose,
            "answerable": not q.startswith("unanswerable"),
        }
        if task_name(body) == "generate_check_unanswerable":
            verdict["answered_by"] = []
        verdicts.append(verdict)
    return json.dumps({"verdicts": verdicts})


def scripted(**overrides: Any) -> Any:
    tasks = {
        "generate_single_hop": proposer("single"),
        "generate_multi_hop": proposer("multi"),
        "generate_single_hop_abstract": proposer("abstract"),
        "generate_comparative": proposer("compare"),
        "generate_unanswerable": proposer("unanswerable"),
        "answer_claims": claims,
        "faithfulness_verify": verify,
        "generate_check": check,
        "generate_check_unanswerable": check,
    }
    return router(**{**tasks, **overrides})


def run(server: Any, tmp_path: Any, **options: Any) -> Any:
    options.setdefault("n", 6)
    judge = options.pop("judge", None) or judge_for(server, tmp_path)
    return generate_run(CORPUS, judge=judge, id_column="path", **options)


def chunk_table() -> pl.DataFrame:
    return split_documents(read_corpus(CORPUS, id_column="path"))


# ------------------------------------------------------------------------------ rows


def test_every_reference_context_is_an_exact_span_of_its_document(server, tmp_path):
    server.handler = scripted()
    result = run(server, tmp_path, n=6)
    assert result.frame.height == 6
    spans = {r["chunk_id"]: r for r in chunk_table().iter_rows(named=True)}
    for row in result.frame.iter_rows(named=True):
        ids, texts, docs = row["reference_context_ids"], row["reference_contexts"], row["doc_ids"]
        assert len(ids) == len(texts) == len(docs) >= 1
        for chunk_id, text, doc in zip(ids, texts, docs, strict=True):
            span = spans[chunk_id]
            assert span["doc_id"] == doc
            assert DOCS[doc][span["start"] : span["end"]] == text
        # corpus metadata comes from the first source chunk's document
        assert row["topic"] == CORPUS.filter(pl.col("path") == docs[0])["topic"][0]
        assert row["generation_detail"]["request_chunk_ids"] == ids


def test_multi_hop_rows_draw_on_two_neighbouring_chunks_of_different_documents(server, tmp_path):
    server.handler = scripted()
    result = run(server, tmp_path, n=6, types="multi_hop")
    assert result.frame.height == 6
    chunks = chunk_table().filter(pl.col("tokens") >= 16)
    texts = dict(zip(chunks["chunk_id"], chunks["text"], strict=True))
    docs = dict(zip(chunks["chunk_id"], chunks["doc_id"], strict=True))
    for row in result.frame.iter_rows(named=True):
        anchor, neighbour = row["reference_context_ids"]
        assert docs[anchor] != docs[neighbour]
        assert row["ground_truth"] and row["question"].startswith("multi")
        # the neighbour is the anchor's nearest chunk of another document (the stand-in's
        # embeddings are `embed_text`)
        others = [c for c in texts if docs[c] != docs[anchor]]
        cosine = [np.dot(embed_text(texts[anchor]), embed_text(texts[c])) for c in others]
        assert others[int(np.argmax(cosine))] == neighbour
    # the generation request read both contexts
    bodies = [b for b in server.chat_requests if task_name(b) == "generate_multi_hop"]
    asked = {tuple(fenced(b, "context")) for b in bodies}
    assert {tuple(r) for r in result.frame["reference_contexts"]} <= asked
    assert all(len(pair) == 2 for pair in asked)


def test_abstract_and_comparative_questions_read_one_and_two_chunks_and_are_checked(
    server, tmp_path
):
    """single_hop_abstract reads one chunk, comparative a neighbour pair of two documents; both
    go through the grounded check (an unsupported ground truth is rejected) and must be
    answerable."""

    def unsupported_first(kind: str) -> Any:
        def edit(item: int, pair: dict[str, str]) -> None:
            if item == 1:
                pair["ground_truth"] = "Truth stated. UNSUPPORTED claim."

        return proposer(kind, edit)

    def comparative_unanswerable(body: dict[str, Any]) -> str:
        verdicts = json.loads(check(body))["verdicts"]
        questions = fenced(body, "question")
        return json.dumps(
            {
                "verdicts": [
                    {**v, "answerable": not q.startswith("compare") or "item 3" not in q}
                    for v, q in zip(verdicts, questions, strict=True)
                ]
            }
        )

    def third_marked(kind: str) -> Any:
        def edit(item: int, pair: dict[str, str]) -> None:
            if item == 1:
                pair["ground_truth"] = "Truth stated. UNSUPPORTED claim."
            if item == 3:
                pair["question"] += " item 3"

        return proposer(kind, edit)

    server.handler = scripted(
        generate_single_hop_abstract=unsupported_first("abstract"),
        generate_comparative=third_marked("compare"),
        generate_check=comparative_unanswerable,
    )
    result = run(server, tmp_path, n=8, types="single_hop_abstract,comparative")
    chunks = chunk_table()
    docs = dict(zip(chunks["chunk_id"], chunks["doc_id"], strict=True))
    every = pl.concat([result.frame, result.surplus, result.rejected], how="diagonal")
    assert every.height == 12  # 6 candidates per type, 2 requests of 3
    for row in every.iter_rows(named=True):
        ids = row["reference_context_ids"]
        if row["question_type"] == "comparative":
            assert len(ids) == 2 and docs[ids[0]] != docs[ids[1]]
            assert row["question"].startswith("compare")
        else:
            assert len(ids) == 1 and row["question"].startswith("abstract")
    # the generation requests read 1 and 2 contexts, under their own instructions
    for body in server.chat_requests:
        name = task_name(body)
        if name in ("generate_single_hop_abstract", "generate_comparative"):
            assert len(fenced(body, "context")) == (1 if name.endswith("abstract") else 2)
            assert ("compar" if name.endswith("comparative") else "main idea") in system_text(body)
    # the grounded check ran on both types: each request's first pair is unsupported
    rejected = {
        (r["question_type"], r["rejected_by"]) for r in result.rejected.iter_rows(named=True)
    }
    assert rejected == {
        ("single_hop_abstract", "grounded"),
        ("comparative", "grounded"),
        ("comparative", "answerable"),
    }
    assert result.rejected.height == 2 + 2 + 2
    kept = pl.concat([result.frame, result.surplus])
    assert (kept["generation_detail"].struct.field("faithfulness") == 1.0).all()
    assert kept["generation_detail"].struct.field("answerable").all()
    assert dict(result.frame["question_type"].value_counts().iter_rows()) == {
        "single_hop_abstract": 4,
        "comparative": 2,
    }


def test_paired_types_embed_the_chunks_once_and_never_share_a_pair(server, tmp_path):
    server.handler = scripted()
    # 9 candidates, one per request: 5 multi_hop, 4 comparative asked for; this corpus has
    # fewer distinct neighbour pairs (mutual neighbours give the same pair twice)
    result = run(server, tmp_path, n=6, types="multi_hop,comparative", questions_per_request=1)
    bodies = [b for b in server.chat_requests if task_name(b).startswith("generate_")]
    pairs = [
        frozenset(fenced(b, "context"))
        for b in bodies
        if not task_name(b).startswith("generate_check")
    ]
    assert len(pairs) == len(set(pairs)) == sum(result.requests.values()) < 9
    assert result.requests["multi_hop"] == 5
    assert any(note.startswith("comparative: the corpus has only") for note in result.notes)
    assert server.count("/embeddings") == 2  # the chunks once, then the questions


def test_an_unsupported_ground_truth_is_rejected_with_the_reason(server, tmp_path):
    def half_unsupported(item: int, pair: dict[str, str]) -> None:
        if item == 1:  # two claims, one supported: faithfulness 0.5, not 1.0
            pair["ground_truth"] = "Truth stated. UNSUPPORTED wattage claim."

    server.handler = scripted(generate_single_hop=proposer("single", half_unsupported))
    result = run(server, tmp_path, n=4, types="single_hop")
    bad = result.rejected.filter(pl.col("ground_truth").str.contains("UNSUPPORTED"))
    assert bad.height == 2  # one per generation request (6 candidates, 3 per request)
    assert bad["rejected_by"].to_list() == ["grounded", "grounded"]
    for row in bad.iter_rows(named=True):
        assert "the contexts never state it" in row["reason"]
        assert "UNSUPPORTED wattage claim" in row["reason"]
        assert row["generation_detail"]["grounded"] is False
        assert row["generation_detail"]["faithfulness"] == 0.5
    assert not result.frame["ground_truth"].str.contains("UNSUPPORTED").any()
    assert result.frame.height == 4
    assert (result.frame["generation_detail"].struct.field("faithfulness") == 1.0).all()
    assert "grounded 2" in result.summary()


def test_a_question_that_is_not_self_contained_is_rejected(server, tmp_path):
    def loose(item: int, pair: dict[str, str]) -> None:
        if item == 2:
            pair["question"] = "According to the passage, " + pair["question"]

    server.handler = scripted(generate_single_hop=proposer("single", loose))
    result = run(server, tmp_path, n=4, types="single_hop")
    bad = result.rejected.filter(pl.col("question").str.starts_with("According"))
    assert bad.height == 2
    assert set(bad["rejected_by"]) == {"self_contained"}
    assert bad["reason"].str.contains("refers to a passage the reader has not seen").all()
    assert bad["generation_detail"].struct.field("self_contained").to_list() == [False, False]
    assert not result.frame["question"].str.starts_with("According").any()


def _nearest(question: str, chunks: pl.DataFrame, source: str, k: int) -> list[str]:
    """The `k` chunk ids nearest to `question` by the stand-in's embedding, `source` left out."""
    q = np.asarray(embed_text(question))
    cosine = [
        (float(np.asarray(embed_text(t)) @ q), i)
        for i, t in zip(chunks["chunk_id"], chunks["text"], strict=True)
        if i != source
    ]
    ordered = sorted(range(len(cosine)), key=lambda j: -cosine[j][0])  # stable: corpus order
    return [cosine[j][1] for j in ordered[:k]]


def answered_by_chunk(chunk_text: str) -> Any:
    """The unanswerable check's stand-in: a question is answerable when (and only when) the
    context holding `chunk_text` is among those the request shows, and names that context."""

    def handle(body: dict[str, Any]) -> str:
        contexts = fenced(body, "context")
        where = [k for k, text in enumerate(contexts, 1) if chunk_text in text]
        verdicts = json.loads(check(body))["verdicts"]
        return json.dumps(
            {
                "verdicts": [
                    {**v, "answerable": bool(where), "answered_by": where,
                     "reason": "a context states it" if where else "no context says"}
                    for v in verdicts
                ]
            }
        )  # fmt: skip

    return handle


def test_an_unanswerable_question_another_document_answers_is_rejected_naming_it(server, tmp_path):
    """The check reads the source chunk and each question's nearest chunks of the whole
    corpus: a question another document's chunk answers is rejected, naming that chunk."""
    from ragframe.engine.generate import UNANSWERABLE_NEIGHBOURS

    server.handler = scripted(generate_check_unanswerable=check)
    probe = run(server, tmp_path / "probe", n=2, types="unanswerable")
    chunks = chunk_table()
    docs = dict(zip(chunks["chunk_id"], chunks["doc_id"], strict=True))
    rows = pl.concat([probe.frame, probe.surplus])
    assert rows.height == 3 and probe.rejected.height == 0
    for row in rows.iter_rows(named=True):
        (source,) = row["reference_context_ids"]
        checked = row["generation_detail"]["checked_chunk_ids"]
        assert checked[0] == source  # the source chunk first, then the neighbours
        near = _nearest(row["question"], chunks, source, UNANSWERABLE_NEIGHBOURS)
        assert set(near) <= set(checked[1:])  # each question's nearest chunks are read
        assert len(set(checked)) == len(checked) <= 1 + 3 * UNANSWERABLE_NEIGHBOURS
    # a neighbour from another document (not the source) answers the questions
    row = rows.row(0, named=True)
    (source,) = row["reference_context_ids"]
    other = next(
        i for i in row["generation_detail"]["checked_chunk_ids"][1:] if docs[i] != docs[source]
    )
    text = dict(zip(chunks["chunk_id"], chunks["text"], strict=True))[other]
    server.handler = scripted(generate_check_unanswerable=answered_by_chunk(text))
    result = run(server, tmp_path / "answered", n=2, types="unanswerable")
    bad = result.rejected.filter(pl.col("reference_context_ids").list.first() == source)
    assert bad.height == 3 and set(bad["rejected_by"]) == {"answerable"}
    assert bad["reason"].str.contains(f"answered by chunk {other}", literal=True).all()
    assert bad["reason"].str.contains("should not be").all()
    assert (bad["generation_detail"].struct.field("answerable")).all()


def test_an_unanswerable_question_its_source_answers_is_rejected(server, tmp_path):
    rows = chunk_table()
    probe_handler = scripted()
    server.handler = probe_handler
    probe = run(server, tmp_path / "probe", n=2, types="unanswerable")
    source = pl.concat([probe.frame, probe.surplus])["reference_context_ids"][0][0]
    text = dict(zip(rows["chunk_id"], rows["text"], strict=True))[source]
    server.handler = scripted(generate_check_unanswerable=answered_by_chunk(text))
    result = run(server, tmp_path / "answered", n=2, types="unanswerable")
    bad = result.rejected.filter(pl.col("reference_context_ids").list.first() == source)
    assert bad.height == 3
    assert bad["reason"].str.contains(f"answered by chunk {source}", literal=True).all()


def test_an_unanswerable_question_no_checked_chunk_answers_is_kept(server, tmp_path):
    """A chunk the check did not read for a question (neither its source nor one of its
    nearest) answering it does not reject it: the chunks that were read do not say."""
    rows = chunk_table()
    server.handler = scripted()
    options = {"n": 2, "types": "unanswerable", "questions_per_request": 1}
    probe = run(server, tmp_path / "probe", **options)
    first = probe.frame.row(0, named=True)
    checked = first["generation_detail"]["checked_chunk_ids"]
    assert len(checked) == 4  # the source and its 3 nearest: not the whole corpus
    far = [t for i, t in zip(rows["chunk_id"], rows["text"], strict=True) if i not in checked]
    server.handler = scripted(generate_check_unanswerable=answered_by_chunk(far[0]))
    result = run(server, tmp_path / "kept", **options)
    kept = pl.concat([result.frame, result.surplus])
    mine = kept.filter(pl.col("question") == first["question"])
    assert mine.height == 1
    detail = mine["generation_detail"][0]
    assert detail["answerable"] is False and detail["checked_chunk_ids"] == checked
    assert not result.rejected["question"].is_in([first["question"]]).any()


def test_an_unanswerable_check_that_fails_for_every_question_leaves_no_rows(server, tmp_path):
    def answered(body: dict[str, Any]) -> str:
        verdicts = json.loads(check(body))["verdicts"]
        return json.dumps(
            {"verdicts": [{**v, "answerable": True, "answered_by": [1]} for v in verdicts]}
        )

    server.handler = scripted(generate_check_unanswerable=answered)
    result = run(server, tmp_path, n=3, types="unanswerable")
    assert result.frame.height == 0
    assert set(result.rejected["rejected_by"]) == {"answerable"}
    assert result.rejected["reason"].str.contains("should not be").all()
    assert "Only 0 of the 3 rows asked for survived" in result.summary()


def test_a_near_duplicate_is_rejected_naming_the_other(server, tmp_path):
    def repeat(item: int, pair: dict[str, str]) -> None:
        if item in (1, 2):
            pair["question"] = "single what does the Helio 400 panel weigh?"
            pair["ground_truth"] = f"Truth number {item}."

    server.handler = scripted(generate_single_hop=proposer("single", repeat))
    result = run(server, tmp_path, n=2, types="single_hop")  # one request of 3
    dup = result.rejected.filter(pl.col("rejected_by") == "duplicate")
    assert dup.height == 1
    kept = pl.concat([result.frame, result.surplus])
    twin = kept.filter(pl.col("question") == dup["question"][0])
    assert twin.height == 1  # the other copy survived, and is the one named
    named = dup["generation_detail"].struct.field("duplicate_of")[0]
    assert named == twin["generation_detail"].struct.field("candidate")[0]
    assert named in dup["reason"][0]
    assert dup["generation_detail"].struct.field("duplicate_cosine")[0] >= 0.92
    assert kept["generation_detail"].struct.field("duplicate_of").is_null().all()


# ------------------------------------------------------------------------------ the mix


def test_the_type_mix_follows_the_weights(server, tmp_path):
    server.handler = scripted()
    weights = {"single_hop": 2, "multi_hop": 1, "unanswerable": 1}
    result = run(server, tmp_path, n=8, types=weights)
    counts = dict(result.frame["question_type"].value_counts().iter_rows())
    assert counts == {"single_hop": 4, "multi_hop": 2, "unanswerable": 2}
    # 12 candidates proposed, 6 / 3 / 3, in 2 / 1 / 1 requests of 3
    assert result.proposed == {"single_hop": 6, "multi_hop": 3, "unanswerable": 3}
    assert result.requests == {"single_hop": 2, "multi_hop": 1, "unanswerable": 1}
    # the string form names the same mix
    again = run(server, tmp_path, n=8, types="single_hop:2,multi_hop:1,unanswerable:1")
    assert again.frame.equals(result.frame)


def test_when_a_type_falls_short_the_others_fill_in_and_the_summary_says_so(server, tmp_path):
    def no_multi(body: dict[str, Any]) -> str:
        verdicts = json.loads(check(body))["verdicts"]
        questions = fenced(body, "question")
        return json.dumps(
            {
                "verdicts": [
                    {**v, "self_contained": not q.startswith("multi")}
                    for v, q in zip(verdicts, questions, strict=True)
                ]
            }
        )

    server.handler = scripted(generate_check=no_multi)
    result = run(server, tmp_path, n=6)
    assert result.frame.height == 6
    counts = dict(result.frame["question_type"].value_counts().iter_rows())
    assert counts == {"single_hop": 3, "unanswerable": 3}
    summary = result.summary()
    assert "multi_hop 2 short of its 2" in summary
    assert "filled in by single_hop +1, unanswerable +1" in summary
    assert "self_contained 3" in summary


# ------------------------------------------------------------------------------ styles, personas


def _big_corpus(documents: int) -> pl.DataFrame:
    """`documents` one-paragraph documents of distinct words: one source chunk each."""
    return pl.DataFrame(
        {
            "path": [f"d{i}.md" for i in range(documents)],
            "text": [
                f"Document {i} says " + _words(f"doc {i}", 24) + "." for i in range(documents)
            ],
        }
    )


def _style_of(body: dict[str, Any]) -> str:
    found = [s for s, text in STYLES.items() if text is not None and text in user_text(body)]
    assert len(found) <= 1
    return found[0] if found else "plain"


def _persona_of(body: dict[str, Any]) -> str | None:
    text = user_text(body)
    return (
        text.split("Who asks: ", 1)[1].split(". Write each", 1)[0] if "Who asks: " in text else None
    )


def test_style_and_persona_reach_each_generation_prompt_and_are_recorded_per_row(server, tmp_path):
    server.handler = scripted()
    personas = ["a homeowner new to solar power", "an electrician fitting batteries"]
    result = run(
        server, tmp_path, n=9, types="single_hop,comparative,unanswerable",
        styles="keywords,misspelled", personas=personas,
    )  # fmt: skip
    asked = {}  # (task, contexts) -> (style, persona) of the request that read them
    for body in server.chat_requests:
        name = task_name(body)
        if name.startswith("generate_") and not name.startswith("generate_check"):
            asked[name.removeprefix("generate_"), tuple(fenced(body, "context"))] = (
                _style_of(body),
                _persona_of(body),
            )
            assert "Pairs to write: 3" in user_text(body)
    assert len(asked) == 6
    assert {style for style, _ in asked.values()} == {"keywords", "misspelled"}
    assert {persona for _, persona in asked.values()} == set(personas)
    every = pl.concat([result.frame, result.surplus, result.rejected], how="diagonal")
    assert every.height == 18
    for row in every.iter_rows(named=True):
        detail = row["generation_detail"]
        key = (row["question_type"], tuple(row["reference_contexts"]))
        assert (detail["query_style"], detail["persona"]) == asked[key]
    # the check request is not styled: it judges whatever form the question takes
    checks = [b for b in server.chat_requests if task_name(b).startswith("generate_check")]
    assert checks and all("Who asks" not in user_text(b) for b in checks)
    assert "keyword query" in system_text(checks[0]) and "typo" in system_text(checks[0])


def test_without_styles_or_personas_every_question_is_plain_and_the_prompt_unchanged(
    server, tmp_path
):
    server.handler = scripted()
    result = run(server, tmp_path, n=3)
    for body in server.chat_requests:
        if task_name(body) in ("generate_single_hop", "generate_multi_hop"):
            assert user_text(body).split("\n\n<context", 1)[0] == "Pairs to write: 3"
    detail = result.frame["generation_detail"]
    assert (detail.struct.field("query_style") == "plain").all()
    assert detail.struct.field("persona").is_null().all()


def test_styles_follow_their_weights_within_one_request_and_personas_take_turns(server, tmp_path):
    """Systematic sampling: over R requests each style gets floor or ceil of R × its share,
    so |count - R × share| < 1 (a draw per request would miss by several); personas in turn,
    each within one of the others. 48 requests of one question, one per document."""
    server.handler = scripted()
    corpus = _big_corpus(48)
    styles = {"plain": 1, "keywords": 2, "conversational": 0.5, "misspelled": 0.5}
    personas = ["a student", "a landlord", "a retired engineer"]
    result = generate_run(
        corpus, n=48, oversample=1, questions_per_request=1, types="unanswerable",
        styles=styles, personas=personas, judge=judge_for(server, tmp_path), id_column="path",
    )  # fmt: skip
    bodies = [b for b in server.chat_requests if task_name(b) == "generate_unanswerable"]
    assert len(bodies) == 48
    counts = Counter(_style_of(b) for b in bodies)
    total = sum(styles.values())
    for style, weight in styles.items():
        assert abs(counts[style] - 48 * weight / total) < 1, counts
    assert Counter(_persona_of(b) for b in bodies) == dict.fromkeys(personas, 16)
    every = pl.concat([result.frame, result.surplus, result.rejected], how="diagonal")
    recorded = Counter(every["generation_detail"].struct.field("query_style"))
    assert recorded == counts

    # seeded: the same seed, the same styles per request; another seed, another assignment
    def styles_by_contexts(seed: int) -> dict[tuple[str, ...], str]:
        server.reset()
        generate_run(
            corpus, n=48, oversample=1, questions_per_request=1, types="unanswerable",
            styles=styles, seed=seed, judge=judge_for(server, tmp_path), id_column="path",
        )  # fmt: skip
        return {
            tuple(fenced(b, "context")): _style_of(b)
            for b in server.chat_requests
            if task_name(b) == "generate_unanswerable"
        }

    assert styles_by_contexts(1) == styles_by_contexts(1) != styles_by_contexts(2)


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n": 0}, "n must be"),
        ({"types": "single_hop,hypothetical"}, "unknown question type 'hypothetical'.*single_hop"),
        ({"types": {"single_hop": 0}}, "weight of 'single_hop' must be a positive"),
        ({"types": {"single_hop": 1, "multi_hop": -2}}, "weight of 'multi_hop'"),
        ({"text_column": "body"}, "no text column 'body'"),
        ({"oversample": 0.5}, "oversample"),
        ({"styles": "plain,shouty"}, "unknown query style 'shouty'; the query styles: plain"),
        ({"styles": "keywords:0"}, "weight of 'keywords' must be a positive"),
        ({"styles": {"keywords": "x"}}, "weight of 'keywords'"),
        ({"styles": ""}, "styles names no query style"),
        ({"personas": []}, "personas is empty"),
        ({"personas": ["a student", "  "]}, "persona 2 must be a non-blank string"),
        ({"personas": "a student"}, "personas must be a list"),
    ],
)
def test_configuration_errors_come_before_any_request(server, tmp_path, options, message):
    server.handler = scripted()
    with pytest.raises(ConfigError, match=message):
        run(server, tmp_path, **options)
    assert server.requests == []


# ------------------------------------------------------------------------------ runs


def test_same_corpus_judge_options_and_seed_give_the_same_rows(server, tmp_path):
    server.handler = scripted()
    first = run(server, tmp_path, n=6)
    second = run(server, tmp_path, n=6)
    assert first.frame.equals(second.frame)
    assert first.rejected.equals(second.rejected) and first.surplus.equals(second.surplus)
    frame = generate(CORPUS, n=6, judge=judge_for(server, tmp_path), id_column="path")
    assert frame.equals(first.frame)


def test_a_rerun_with_the_same_cache_sends_nothing(server, tmp_path):
    server.handler = scripted()
    judge = judge_for(server, tmp_path, cache=True)
    first = run(server, tmp_path, n=6, judge=judge)
    assert server.requests
    server.reset()
    second = run(server, tmp_path, n=6, judge=judge_for(server, tmp_path, cache=True))
    assert server.requests == []
    assert second.frame.equals(first.frame)
    assert second.stats.requests == 0 and second.stats.cache_hits > 0


def test_requests_per_kept_row_on_the_default_mix(server, tmp_path):
    """3 generation + 3 check requests, 2 faithfulness requests per grounded candidate
    (6 of the 9), 2 embedding requests (chunks, questions): 20 for 6 rows."""
    server.handler = scripted()
    result = run(server, tmp_path, n=6)
    assert result.frame.height == 6 and result.rejected.height == 0
    sent = len(server.requests)
    by_task: dict[str, int] = {}
    for body in server.chat_requests:
        by_task[task_name(body)] = by_task.get(task_name(body), 0) + 1
    assert by_task == {
        "generate_single_hop": 1,
        "generate_multi_hop": 1,
        "generate_unanswerable": 1,
        "generate_check": 2,
        "generate_check_unanswerable": 1,
        "answer_claims": 6,
        "faithfulness_verify": 6,
    }
    assert server.count("/embeddings") == 2
    assert sent == 20 == result.stats.requests
    assert sent / result.frame.height <= 4
