"""Every score equals what its own detail implies, for every metric and every row.

The promise (README, "Output"): a score is reported only with no error, and always equals
what its `{metric}_detail` implies. Here each metric's formula is written again, in plain
Python over the detail's verdicts, from the metric's docstring and the seed documents
(`../shared/seeds/`), without calling ragframe's scoring code. Every metric of the catalogue
(each registered one, a G-Eval with criteria, the ragas score) runs over a frame of varied rows
(several contexts, blank contexts, no contexts, empty, long and echoing answers) against
several seeds of the scripted server and against unhelpful judges (empty lists, all-false and
all-true verdicts, duplicated items, lists at their cap). For every row: where `error` is null
the score equals the formula (within 1e-9); where `error` is set the score is null.

A disagreement is reported with the run, the metric, the row, both values and the detail.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe import GEval, Metric, RagasScore
from ragframe.testing.server import FakeServer, Reply, auto_answer

TOLERANCE = 1e-9
#: The caps the docstrings name: claims per answer (faithfulness) and facts per ground truth
#: (context_recall); a list that reaches its cap must say `truncated`.
CLAIMS_CAP = 40
FACTS_CAP = 40
#: Lists the "long" judge writes: the cap, so capped lists reach it and pinned ones overflow.
LONG = 40
SEEDS = (0, 1, 2, 3)
UNHELPFUL = ("empty", "all_false", "all_true", "duplicates", "long")
GEVAL_RANGE = (1, 5)
RUBRIC_LEVELS = (1, 5)  # the default rubric's lowest and highest level

LONG_ANSWER = " ".join(
    f"Fact {i}: the turbine at site {i} produces {10 * i} kilowatts on a windy day."
    for i in range(30)
)


# --------------------------------------------------------------------------------- the frame


def frame() -> pl.DataFrame:
    """20 rows covering what a log holds: one to four contexts, blank contexts among good
    ones, all-blank and empty context lists, empty and null answers, a long answer, contexts
    that echo the question and an answer found verbatim in its contexts (the NVIDIA
    shortcuts), and reference ids with blanks and repeats."""
    rows: list[dict[str, Any]] = [
        {"q": "What is the capital of France?", "a": "Paris is the capital of France.",
         "c": ["Paris is the capital and largest city of France."], "g": "Paris."},
        {"q": "Who wrote Hamlet?", "a": "Shakespeare wrote Hamlet around 1600.",
         "c": ["Hamlet is a tragedy by William Shakespeare.", "", "It was written c. 1600."],
         "g": "William Shakespeare wrote Hamlet."},
        {"q": "How do solar panels work?", "a": "They turn light into electricity.",
         "c": ["  ", "Photovoltaic cells convert light.", "\n", "Panels age slowly.",
               "Inverters convert DC to AC."], "g": "Photovoltaic cells convert light."},
        {"q": "What is water made of?", "a": "", "c": ["Water is H2O."], "g": "H2O."},
        {"q": "Why is the sky blue?", "a": None, "c": ["Rayleigh scattering."], "g": "Scattering."},
        {"q": "Name a prime number.", "a": "Seven is prime.", "c": ["", " "], "g": "2, 3, 5, 7."},
        {"q": "What is the boiling point of water?", "a": "100 degrees Celsius at sea level.",
         "c": [], "g": "100 °C at one atmosphere."},
        {"q": "How much power do the turbines make?", "a": LONG_ANSWER,
         "c": ["Site 1 makes 10 kW.", "Site 2 makes 20 kW.", "", "Site 3 makes 30 kW."],
         "g": "Each site makes ten kilowatts per site number."},
        {"q": "Where is Mount Fuji? Mount Fuji is in Japan.", "a": "It is in Japan.",
         "c": ["Mount Fuji is in Japan."], "g": "Japan."},
        {"q": "What colour is grass?", "a": "Grass is green.",
         "c": ["Grass is green.", "Chlorophyll absorbs red and blue."], "g": "Green."},
        {"q": "Who painted the Mona Lisa?", "a": "Leonardo da Vinci painted it.",
         "c": ["The Mona Lisa is by Leonardo.", "It hangs in the Louvre.",
               "Leonardo was born in Vinci.", "The painting is small."],
         "g": "Leonardo da Vinci."},
        {"q": "What is 2 + 2?", "a": "Four.", "c": ["Arithmetic: 2 + 2 = 4."], "g": None},
        {"q": "", "a": "An answer to nothing.", "c": ["Some context."], "g": "Something."},
        {"q": "Quelle est la capitale de l'Allemagne ?", "a": "Berlin est la capitale. 🇩🇪",
         "c": ["Berlin ist die Hauptstadt.", "", "柏林是德国的首都。"], "g": "Berlin."},
        {"q": "What does DNA stand for?", "a": "Deoxyribonucleic acid.",
         "c": ["DNA: deoxyribonucleic acid.", "RNA: ribonucleic acid."], "g": ""},
        {"q": "How tall is Everest?", "a": "About 8,849 metres. It grows a little each year.",
         "c": ["Everest is 8,849 m tall.", "Everest grows about 4 mm a year.",
               "K2 is 8,611 m tall."], "g": "8,849 metres."},
        {"q": "What is the speed of light?", "a": "About 300,000 km/s.",
         "c": ["Light travels at 299,792 km/s in vacuum."], "g": "299,792,458 m/s."},
        {"q": "Is the Earth flat?", "a": "No. The Earth is an oblate spheroid.",
         "c": ["The Earth is round.", "  ", "Some people claim it is flat."],
         "g": "No, it is round."},
        {"q": "When did WW2 end?", "a": "In 1945.",
         "c": ["World War II ended in 1945.", "The war began in 1939."], "g": "1945."},
        {"q": "What is the largest ocean?", "a": "The Pacific Ocean.",
         "c": ["The Pacific is the largest ocean.", "The Atlantic is second."],
         "g": "The Pacific."},
    ]  # fmt: skip
    n = len(rows)
    return pl.DataFrame(
        {
            "row": list(range(n)),
            "question": [r["q"] for r in rows],
            "answer": [r["a"] for r in rows],
            "contexts": [r["c"] for r in rows],
            "ground_truth": [r["g"] for r in rows],
            "reference_contexts": [
                [*r["c"][:1], "An unrelated reference passage."] if i % 3 else r["c"][:1]
                for i, r in enumerate(rows)
            ],
            "retrieved_context_ids": [[f"d{i}", f"d{i + 1}", " ", f"d{i}"] for i in range(n)],
            "reference_context_ids": [[f"d{i}", f"d{i + 7}", ""] for i in range(n)],
        },
        schema_overrides={
            "contexts": pl.List(pl.String),
            "reference_contexts": pl.List(pl.String),
        },
    )


def every_metric() -> list[Metric | RagasScore]:
    """The catalogue: every registered metric at its defaults, G-Eval from criteria (a steps
    request, then logprob form filling) and the ragas score over the core four."""
    return [
        *(cls() for cls in ragframe.REGISTRY.values()),
        GEval(criteria="Is the answer correct and complete for the question?"),
        RagasScore(),
    ]


# ------------------------------------------------------------------------- unhelpful judges


def _spoil(value: Any, mode: str) -> Any:
    """An answer an unhelpful judge could give: every list emptied, every verdict false or
    true, every list item twice, or every list stretched to LONG items (indices renumbered
    where items carry one, so only the count can be wrong)."""
    if isinstance(value, dict):
        return {k: _spoil_field(k, v, mode) for k, v in value.items()}
    if isinstance(value, list):
        items = [_spoil(v, mode) for v in value]
        if mode == "empty":
            return []
        if mode == "duplicates":
            # Indexed verdicts twice would only fail their count; repeat what is listed.
            indexed = any(isinstance(item, dict) and "index" in item for item in items)
            return items if indexed else items + copy.deepcopy(items)
        if mode == "long" and items:
            stretched = [copy.deepcopy(items[i % len(items)]) for i in range(LONG)]
            for i, item in enumerate(stretched):
                if isinstance(item, dict) and isinstance(item.get("index"), int):
                    item["index"] = i + 1
                elif isinstance(item, str):
                    stretched[i] = f"{item} {i}"
            return stretched
        return items
    return value


_FALSE_TRUE = {"verdict": {"yes": ("no", "yes"), "no": ("no", "yes"), "idk": ("no", "yes"),
                           "TP": ("FP", "TP"), "FP": ("FP", "TP")}}  # fmt: skip


def _spoil_field(key: str, value: Any, mode: str) -> Any:
    if mode in ("all_false", "all_true"):
        truth = mode == "all_true"
        if isinstance(value, bool):
            return truth
        pair = _FALSE_TRUE.get(key, {}).get(value) if isinstance(value, str) else None
        if pair is not None:
            return pair[truth]
    return _spoil(value, mode)


def _consistent(value: Any) -> Any:
    """The scripted answer with context_recall's documented rule applied (a fact not covered
    names no source context), so a scripted judge's facts are scored rather than re-asked."""
    if isinstance(value, dict):
        fixed = {k: _consistent(v) for k, v in value.items()}
        if fixed.get("covered") is False and "source_context" in fixed:
            fixed["source_context"] = None
        return fixed
    if isinstance(value, list):
        return [_consistent(v) for v in value]
    return value


def _score_logprobs(content: str, seed: int) -> list[dict[str, Any]] | None:
    """Logprobs in which the digits after `"score":` are one token whose top alternatives
    spread over every level (plus two that must be ignored: out of range, not a number), so
    G-Eval's form filling is exercised; None when the answer has no score."""
    match = re.search(r'"score":\s*(\d+)', content)
    if match is None:
        return None
    rng = random.Random(f"{seed}:{content}")
    weights = [rng.random() + 0.05 for _ in range(GEVAL_RANGE[0], GEVAL_RANGE[1] + 1)]
    alternatives = [
        {"token": str(s), "logprob": math.log(w / sum(weights)), "bytes": None}
        for s, w in zip(range(GEVAL_RANGE[0], GEVAL_RANGE[1] + 1), weights, strict=True)
    ]
    alternatives += [{"token": "9", "logprob": -3.0, "bytes": None},
                     {"token": "x", "logprob": -4.0, "bytes": None}]  # fmt: skip
    parts = [content[: match.start(1)], match.group(1), content[match.end(1) :]]
    tokens = []
    for part in parts:
        top = (
            alternatives
            if part == match.group(1)
            else [{"token": part, "logprob": 0.0, "bytes": None}]
        )
        tokens.append({"token": part, "logprob": top[0]["logprob"], "bytes": None,
                       "top_logprobs": top})  # fmt: skip
    return tokens


def scripted(seed: int) -> Callable[[dict[str, Any]], Reply]:
    """The scripted server's answer for `seed`, made consistent; score answers asked with
    logprobs come with logprobs over every score level."""

    def handler(body: dict[str, Any]) -> Reply:
        content = json.dumps(_consistent(json.loads(auto_answer(body, seed))))
        logprobs = _score_logprobs(content, seed) if body.get("logprobs") else None
        return Reply(content=content, logprobs=logprobs)

    return handler


def unhelpful(mode: str) -> Callable[[dict[str, Any]], str]:
    def handler(body: dict[str, Any]) -> str:
        return json.dumps(_consistent(_spoil(json.loads(auto_answer(body, 0)), mode)))

    return handler


# ----------------------------------------------------------------------------- the formulas


def _ratio(flags: list[Any]) -> float | None:
    """Share of true flags; None (no score) for no flags or a missing verdict."""
    if not flags or any(f is None for f in flags):
        return None
    return sum(1 for f in flags if f) / len(flags)


def _average_precision(flags: list[Any]) -> float | None:
    """AP = sum_k precision@k * r_k / relevant; 0 when nothing is relevant (seed 003)."""
    if not flags or any(f is None for f in flags):
        return None
    hits, total = 0, 0.0
    for k, relevant in enumerate(flags, 1):
        if relevant:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def _ranked(items: list[dict[str, Any]] | None, key: str = "context_index") -> list[Any]:
    return sorted(items or [], key=lambda item: item[key])


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def faithfulness(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _ratio([c["supported"] for c in d["claims"] or []])


def answer_relevancy(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    sims = [q["similarity"] for q in d["questions"] or []]
    if d["noncommittal"]:
        return 0.0
    if not sims or any(s is None for s in sims):
        return None
    return _clip(sum(sims) / len(sims))


def context_precision(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _average_precision([v["relevant"] for v in _ranked(d["verdicts"])])


def context_recall(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _ratio([f["covered"] for f in d["facts"] or []])


def contextual_relevancy(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _ratio([s["relevant"] for c in d["contexts"] or [] for s in c["statements"] or []])


def answer_relevancy_llm(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    verdicts = [s["verdict"] for s in d["statements"] or []]
    return _ratio([None if v is None else v != "no" for v in verdicts])


def hallucination(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _ratio([c["contradicted"] for c in d["contexts"] or []])


def _dual(scale: int, shortcut_score: float | None) -> Callable[..., float | None]:
    """NVIDIA's dual judge: the mean of the valid ratings / scale (seed 004)."""

    def formula(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
        if d["shortcut"] is not None:
            return shortcut_score
        valid = [r for r in (d["rating_1"], d["rating_2"]) if r is not None]
        return sum(r / scale for r in valid) / len(valid) if valid else None

    return formula


def answer_correctness(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    """0.75 F1 + 0.25 similarity, F1 = TP / (TP + (FP + FN) / 2), counted from the verdicts."""
    answer = d["answer_statements"] or []
    truth = d["ground_truth_statements"] or []
    tp = sum(1 for s in answer if s["verdict"] == "TP")
    fp = sum(1 for s in answer if s["verdict"] == "FP")
    fn = sum(1 for s in truth if s["covered"] is False)
    if (not answer and not truth) or d["similarity"] is None:
        return None
    f1 = tp / (tp + 0.5 * (fp + fn)) if tp + fp + fn else 0.0
    return 0.75 * f1 + 0.25 * _clip(d["similarity"])


def rubric_score(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    lo, hi = RUBRIC_LEVELS
    return None if d["level"] is None else (d["level"] - lo) / (hi - lo)


def g_eval(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    """(raw - lo) / (hi - lo); raw = sum p * s over the distribution, else the integer."""
    lo, hi = GEVAL_RANGE
    if d["method"] == "logprobs":
        dist = d["distribution"] or []
        if not dist:
            return None
        raw = sum(p["probability"] * p["score"] for p in dist)
    elif d["method"] == "integer":
        raw = d["integer_score"]
    else:
        return None
    return None if raw is None else (raw - lo) / (hi - lo)


def context_precision_nonllm(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _average_precision([c["relevant"] for c in _ranked(d["contexts"])])


def context_recall_nonllm(d: dict[str, Any], _row: dict[str, Any]) -> float | None:
    return _ratio([r["matched"] for r in d["references"] or []])


def _ids(values: list[str] | None) -> set[str]:
    return {v.strip() for v in values or [] if v is not None and v.strip()}


def context_precision_ids(d: dict[str, Any], row: dict[str, Any]) -> float | None:
    """|retrieved ∩ reference| / |retrieved|, recounted from the input ids."""
    retrieved, reference = _ids(row["retrieved_context_ids"]), _ids(row["reference_context_ids"])
    if not retrieved or not reference:
        return None
    return len(retrieved & reference) / len(retrieved)


def context_recall_ids(d: dict[str, Any], row: dict[str, Any]) -> float | None:
    retrieved, reference = _ids(row["retrieved_context_ids"]), _ids(row["reference_context_ids"])
    if not retrieved or not reference:
        return None
    return len(retrieved & reference) / len(reference)


def ragas_score(d: dict[str, Any], row: dict[str, Any]) -> float | None:
    """Harmonic mean of the row's scores in `of`; null if one is null, 0 if one is 0."""
    scores = [row[name] for name in d["of"] or []]
    if not scores or any(s is None for s in scores):
        return None
    if any(s == 0 for s in scores):
        return 0.0
    return len(scores) / sum(1 / s for s in scores)


FORMULAS: dict[str, Callable[[dict[str, Any], dict[str, Any]], float | None]] = {
    "faithfulness": faithfulness,
    "answer_relevancy": answer_relevancy,
    "context_precision": context_precision,
    "context_precision_without_reference": context_precision,
    "context_recall": context_recall,
    "contextual_relevancy": contextual_relevancy,
    "answer_relevancy_llm": answer_relevancy_llm,
    "hallucination": hallucination,
    "answer_accuracy": _dual(4, None),
    "context_relevance": _dual(2, 0.0),
    "response_groundedness": _dual(2, 1.0),
    "answer_correctness": answer_correctness,
    "rubric_score": rubric_score,
    "g_eval": g_eval,
    "context_precision_nonllm": context_precision_nonllm,
    "context_recall_nonllm": context_recall_nonllm,
    "context_precision_ids": context_precision_ids,
    "context_recall_ids": context_recall_ids,
    "ragas_score": ragas_score,
}


# ------------------------------------------------------------ what a detail must also say


def _nonblank_positions(contexts: list[str] | None) -> list[int]:
    return [i for i, c in enumerate(contexts or [], 1) if c is not None and c.strip()]


def detail_problems(name: str, d: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """Consistency a scored detail owes its input beyond the score: context indices point
    at the non-blank contexts of the input list, each once; a list at its cap says
    `truncated`; a score from one template says which failed (`partial`); a covered fact
    names its source and an uncovered one none; answer_correctness's counts match its
    verdicts."""
    problems: list[str] = []
    judged = {
        "context_precision": "verdicts",
        "context_precision_without_reference": "verdicts",
        "hallucination": "contexts",
        "contextual_relevancy": "contexts",
        "context_precision_nonllm": "contexts",
    }
    if name in judged:
        indices = sorted(item["context_index"] for item in d[judged[name]] or [])
        if indices != _nonblank_positions(row["contexts"]):
            problems.append(f"context_index {indices} is not the non-blank positions")
    if name == "faithfulness" and len(d["claims"] or []) >= CLAIMS_CAP and not d["truncated"]:
        problems.append(f"{len(d['claims'])} claims (the cap) without truncated")
    if name == "context_recall":
        facts = d["facts"] or []
        if len(facts) >= FACTS_CAP and not d["truncated"]:
            problems.append(f"{len(facts)} facts (the cap) without truncated")
        sources = set(_nonblank_positions(row["contexts"]))
        for fact in facts:
            if fact["covered"] != (fact["source_context"] is not None):
                problems.append(f"inconsistent fact {fact}")
            elif fact["covered"] and fact["source_context"] not in sources:
                problems.append(f"source_context {fact['source_context']} is not a context")
    if name in ("answer_accuracy", "context_relevance", "response_groundedness"):
        valid = [r for r in (d["rating_1"], d["rating_2"]) if r is not None]
        if d["shortcut"] is None and (len(valid) == 1) != (d["partial"] is not None):
            problems.append(f"{len(valid)} valid ratings but partial={d['partial']!r}")
    if name == "g_eval":
        dist = d["distribution"] or []
        if d["method"] == "logprobs" and abs(sum(p["probability"] for p in dist) - 1) > TOLERANCE:
            problems.append("the distribution's probabilities do not add up to 1")
        scaled = g_eval(d, row)
        raw = (
            None if scaled is None else scaled * (GEVAL_RANGE[1] - GEVAL_RANGE[0]) + GEVAL_RANGE[0]
        )
        if raw is None or d["raw_score"] is None or abs(d["raw_score"] - raw) > TOLERANCE:
            problems.append(f"raw_score {d['raw_score']} but the detail implies {raw}")
    if name == "answer_correctness":
        answer, truth = d["answer_statements"] or [], d["ground_truth_statements"] or []
        counts = (
            sum(1 for s in answer if s["verdict"] == "TP"),
            sum(1 for s in answer if s["verdict"] == "FP"),
            sum(1 for s in truth if s["covered"] is False),
        )
        if counts != (d["tp"], d["fp"], d["fn"]):
            problems.append(f"tp/fp/fn {d['tp'], d['fp'], d['fn']} but verdicts give {counts}")
    return problems


# ------------------------------------------------------------------------------- the check


def disagreements(out: pl.DataFrame, run: str) -> list[str]:
    """Every row of every metric whose score is not what its detail implies."""
    found: list[str] = []
    records = out.to_dicts()
    for name, formula in FORMULAS.items():
        for row in records:
            detail, score = row[f"{name}_detail"], row[name]
            where = f"[{run}] {name} row {row['row']}"
            if detail["error"] is not None:
                if score is not None:
                    found.append(f"{where}: score {score} with error {detail['error']!r}")
                continue
            want = formula(detail, row)
            if (
                score is None
                or want is None
                or not math.isclose(score, want, rel_tol=0.0, abs_tol=TOLERANCE)
            ):
                found.append(f"{where}: score {score}, detail implies {want}; detail {detail}")
                continue
            found.extend(
                f"{where}: {p}; detail {detail}" for p in detail_problems(name, detail, row)
            )
    return found


def score_with(handler: Any, seed: int, tmp_path: Path) -> pl.DataFrame:
    with FakeServer(handler, seed=seed) as server:
        judge = judge_for(server, tmp_path)
        out = ragframe.evaluate(frame(), every_metric(), judge=judge)
    assert set(FORMULAS) <= set(out.columns)
    return out


def test_formulas_cover_the_whole_catalogue() -> None:
    """A metric added to the catalogue must get its formula here."""
    assert {m.name for m in every_metric()} == set(FORMULAS)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_score_equals_its_detail_for_scripted_judges(tmp_path: Path, seed: int) -> None:
    out = score_with(scripted(seed), seed, tmp_path)
    found = disagreements(out, f"seed {seed}")
    assert not found, "\n".join(found)
    # The check was not vacuous: every metric scored most rows it had inputs for.
    thin = {n: k for n in FORMULAS if (k := out.get_column(n).drop_nulls().len()) < 10}
    assert not thin, f"metrics that scored fewer than 10 of 20 rows: {thin}"


@pytest.mark.parametrize("mode", UNHELPFUL)
def test_every_score_equals_its_detail_for_unhelpful_judges(tmp_path: Path, mode: str) -> None:
    out = score_with(unhelpful(mode), 0, tmp_path)
    found = disagreements(out, mode)
    assert not found, "\n".join(found)


def test_a_jury_score_equals_its_own_detail_for_every_metric(tmp_path: Path) -> None:
    """A jury of three over the whole catalogue: each judge's own columns keep the promise
    above, and the jury's score is what its detail implies (faithfulness: the majority's
    verdicts on the shared claims, supported / claims with a verdict; context_precision: the
    average precision of the majority's verdicts on the row's contexts; every other metric:
    the mean of the judges' scores the detail lists), null exactly where its error is set."""
    with FakeServer(scripted(0), seed=0) as server:
        judges = [judge_for(server, tmp_path, name) for name in ("juror-a", "juror-b", "juror-c")]
        out = ragframe.evaluate(frame(), every_metric(), judges=judges)
    found: list[str] = []
    for juror in ("juror-a", "juror-b", "juror-c"):
        own = {f"{m}@{juror}": m for m in FORMULAS} | {
            f"{m}@{juror}_detail": f"{m}_detail" for m in FORMULAS
        }
        alone = out.select("row", "question", "answer", "contexts", *own).rename(own)
        found += disagreements(alone.join(out.select("row", *_inputs(out)), on="row"), juror)
    for row in out.to_dicts():
        for name in FORMULAS:
            detail, score = row[f"{name}_detail"], row[name]
            if detail["error"] is not None or score is None:
                if (detail["error"] is None) != (score is not None):
                    found.append(f"[jury] {name} row {row['row']}: {score} with {detail}")
                continue
            if name == "faithfulness":
                votes = [c["supported"] for c in detail["claims"] if c["supported"] is not None]
                want = sum(votes) / len(votes)
            elif name == "context_precision":  # the contexts are every judge's: voted on
                want = _average_precision([v["relevant"] for v in _ranked(detail["verdicts"])])
            else:
                given = [s for s in detail["scores"] if s is not None]
                want = sum(given) / len(given)
            if not math.isclose(score, want, rel_tol=0.0, abs_tol=TOLERANCE):
                found.append(f"[jury] {name} row {row['row']}: {score}, detail implies {want}")
    assert not found, "\n".join(found)
    assert out.get_column("faithfulness").drop_nulls().len() >= 10


def _inputs(out: pl.DataFrame) -> list[str]:
    """The input columns a formula may read besides the score and detail (ids, truths)."""
    taken = {"row", "question", "answer", "contexts"}
    return [c for c in frame().columns if c not in taken and c in out.columns]
