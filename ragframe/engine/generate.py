"""Test sets from documents: questions and ground truths proposed by the judge, then checked
by it, each rejected candidate kept with the check that failed and why (issue 30).

The pipeline, one judge session for all of it (so every stage is batched per column,
deduplicated, cached on disk and limited by one pool, as scoring is):

1. Chunks. `read_corpus` + `split_documents` (`ragframe.inputs.corpus`): each chunk's `text`
   is an exact span `document[start:end]`. Chunks under `MIN_SOURCE_TOKENS` (a lone heading)
   are not used as sources while longer ones exist.
2. Plan. `ceil(n × oversample)` candidates are split over the question types by their
   weights (largest remainder), and each type sends `ceil(candidates / questions_per_request)`
   generation requests; one request proposes `questions_per_request` pairs (the schema pins
   the array's length). A corpus with fewer distinct sources than requests sends fewer (the
   summary says so).
3. Sources, seeded (`seed`) and spread over documents: the documents in a seeded order, each
   document's chunks in a seeded order, then one chunk per document in turn. Single-chunk
   types take the next chunks of that order. The paired types (`multi_hop`, `comparative`)
   take the next chunks as anchors and pair each with its nearest neighbour by embedding
   (`session.embed` of the chunk texts, cosine), from a different
   document when the corpus has more than one, else a chunk of the same document whose span
   does not overlap the anchor's; a pair is used once, by one type. The chunks are embedded
   once, when any of `multi_hop`, `comparative`, `unanswerable` is asked for (the last for
   its check's nearest chunks, below), and never twice.
4. Generation, one request per source (chunk or pair), per type (its prompt below). Each
   request also carries its query style and persona (see "Query styles and personas").
5. Checks. The questions are embedded first (`session.embed`, once: the unanswerable check
   and the duplicate check both use these vectors), then the checks run at once through the
   same session:
   - grounded (every type but `unanswerable`): ragframe's own `Faithfulness` metric, through
     `score_frame`, with question = the question, answer = the ground truth, contexts = the
     reference contexts. Passes only at 1.0 (every claim supported); the unsupported claims
     and their verdicts' reasons (or the metric's error) are the rejection reason.
     `unanswerable` rows are not checked for this (their ground truth states an absence).
   - `generate.check` (prompt `generate_check`): one request per generation request judges
     all its questions against its contexts: `self_contained` (no "according to the
     passage", nothing the reader cannot resolve; a keyword query or a typo is fine when the
     intent is clear) must be true, and `answerable` must be true for every type but
     `unanswerable`, false for it. Verdicts with a reason.
     An `unanswerable` request is asked with `generate.check_unanswerable` (prompt
     `generate_check_unanswerable`, still one request per generation request) and its
     contexts are its source chunk, then, for each of its questions, the
     `UNANSWERABLE_NEIGHBOURS` (3) chunks of the whole corpus nearest to the question (cosine
     of the question's vector with the chunks' vectors, the source left out; their union, in
     question order, so at most 1 + 3 × questions_per_request contexts). A question passes
     only when the judge finds it answerable from none of them (alone or together); a
     rejection names the chunk ids the judge says answer it (`answered_by`). Every checked
     candidate records the chunk ids its check read in `checked_chunk_ids` (for the other
     types, its own source chunks).
   - near-duplicates: by the questions' vectors; in a seeded order, a
     candidate that passed the checks above is rejected when its cosine with an
     earlier-kept candidate is at least `duplicate_threshold` (0.92 by default), naming it.
   A failed generation request, a blank question or ground truth, a failed check request and
   a question that cannot be embedded are rejections too: nothing is dropped silently.
6. Selection: from the survivors, in the seeded order, `n` rows with the type mix following
   the weights (largest remainder); when a type has too few survivors the others fill in, by
   their weights, and the summary says so. Survivors beyond `n` are `surplus`.

Question types (add one: a prompt file `generate_<name>.md` and a `QuestionType` entry):

- `single_hop` (`generate_single_hop`): one chunk, a specific question it answers.
  E.g. "How much power can the Aster 3 charger deliver on a single-phase supply?" /
  "Up to 7 kW."
- `single_hop_abstract` (`generate_single_hop_abstract`): one chunk; a "why" / "how does"
  question about its main idea, purpose or an implication it draws, not a lookup of one
  fact, still fully answered by the chunk. E.g. "Why does the Aster 3 charger lower its
  output when the household draws a lot of power?" / "So that charging a car never trips
  the main fuse: ..."
- `multi_hop` (`generate_multi_hop`): two neighbouring chunks; a question neither answers
  alone, a ground truth using a fact from each.
- `comparative` (`generate_comparative`): two neighbouring chunks, paired as for
  `multi_hop`; a question comparing or contrasting something each states, a ground truth
  stating the side of each. E.g. "Which charges faster at full power, the Aster 3 or the
  Aster 2 charger?" / "The Aster 3: it delivers up to 11 kW, while the Aster 2 delivers up
  to 7.4 kW."
- `unanswerable` (`generate_unanswerable`): one chunk; a question on its topic that it does
  not answer; the ground truth says the documents do not say. Checked against that chunk
  and the question's nearest chunks of the whole corpus (see the checks): a question another
  document answers is rejected, naming that chunk. Chunks further from the question are not
  read: a corpus that answers it only there is not caught.

The default mix stays `single_hop,multi_hop,unanswerable` (`DEFAULT_TYPES`): adding a type to
it would change which sources every default run asks about for a given seed (the plan splits
the candidates over the types), and the figures below, measured on it, would no longer hold.
`single_hop_abstract` and `comparative` are asked for by name; both are grounded, so each of
their candidates costs as much as a `single_hop` / `multi_hop` one.

Query styles and personas (ragas's query styles and personas; off by default):

- `styles`: `plain` (the default, the only style when `styles` is not given), `keywords` (a
  short search-engine query of a few words), `conversational` (a natural spoken question),
  `misspelled` (the plain question with one or two realistic typos), with weights as
  `types` has them (`"plain:2,keywords:1"` or a mapping). One style per generation request:
  systematic sampling over the weights (one seeded uniform draw, request i takes the style
  whose cumulative share holds (u + i) / R), then a seeded shuffle, so over R requests each
  style gets the floor or the ceiling of R × its share and never misses it by a whole
  request. The style's instruction (`STYLES`) is added to the request's user message; its
  questions take that style, its ground truths stay plain.
- `personas`: short descriptions of who asks ("a homeowner new to solar power"). Each
  generation request gets one, in turn from a seeded starting point (round-robin), and its
  user message asks for questions as that person would ask them.
- Recorded per row in `generation_detail`: `query_style` ("plain" without styles) and
  `persona` (null without personas); a candidate gets its request's.
- A request with the plain style and no persona says only "Pairs to write: K" before its
  contexts, as before styles existed, so a cached generation answer still serves.

Requests per kept row, on the default mix (equal weights, 3 questions per request,
oversample 1.5) with every check passing: per candidate, 1/3 of a generation request, 1/3 of
a check request (the unanswerable check reads more contexts, not more requests), and for
the two grounded types the 2 requests of `Faithfulness` (claims, then verification):
2 × 2/3 + 2/3 = 2 requests per candidate, 3 per kept row at 1.5 candidates per row, plus the
embedding requests (128 texts each: the chunks for the paired types and `unanswerable`, then
the questions). The test measures 20 requests (18 chat, 2 embeddings) for 6 kept rows
at the stand-in server, 3.3 per row. A rerun with the same cache sends nothing.

Output columns (kept rows, and `rejected` with `rejected_by` and `reason` added):
`question`, `ground_truth`, `reference_contexts` (List(String), exact spans of their
documents), `reference_context_ids` (their chunk ids, for `context_recall_ids`), `doc_ids`,
`question_type`, `generation_detail` (`DETAIL`: the query style and persona, every check's
verdict and reason, the chunk ids the check read), then the corpus's metadata columns of the
first source chunk.

The estimate (`estimate_generate`, `ragframe generate --dry-run`): the same pipeline through
the judge's dry backend (`judge.session("dry")`), which sends nothing, counts each request the
cache cannot answer (prompt tokens as characters / 4) and answers with schema placeholders
(`ragframe.judge.estimate.placeholder`). Every stage is counted as if every candidate passed:

- generation, per type: the planned requests, each answered with `questions_per_request`
  placeholder pairs. A placeholder pair (its question or ground truth is the placeholder
  sentence) gets its candidate's id appended, so that no two candidates share a prompt in the
  later stages (real ones differ; the session sends identical prompts once).
- the checks run one after the other (not at once, so each stage's tokens are its own), and
  a placeholder candidate's contexts carry its id in the grounded check for the same reason
  (a few tokens per context more than the real run). Then every failure a placeholder caused
  is cleared: no candidate is rejected as blank, unsupported, not answerable or duplicate.
- embeddings: the texts a real run would embed (the chunks when a paired type or
  `unanswerable` is asked, then every candidate's question), minus those whose vector the
  cache holds, in requests of 128 (none for the in-process embedder). The stand-in vectors
  are drawn from each text's hash, so neighbour pairs form, and the unanswerable check reads
  as many contexts, as on a real corpus.

With every check passing, the estimate's requests are the real run's, except where the real
embeddings pair chunks differently (fewer distinct neighbour pairs than planned on a tiny
corpus) and where a real ground truth has more claims than one verification request holds.
Tokens are estimates (on the tests' corpus, prompt tokens 11 % above the stand-in run's;
completion tokens higher, its scripted answers being short); cached answers are free and not
counted.

What the stand-in server (`ragframe.testing`) cannot show: whether the questions are good.
Its answers are scripted or random words; the tests show the plumbing (spans, pairs, every
check rejecting what it should with its reason, the mix, the counts, reproducibility). The
quality of generated questions, and how often each check fires, need a real judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ragframe._sync import run_sync
from ragframe.engine.prepare import score_frame
from ragframe.errors import ConfigError
from ragframe.inputs.corpus import CHUNK_COLUMNS, read_corpus, split_documents
from ragframe.judge.client import Judge, JudgeSession, RunStats
from ragframe.judge.estimate import TYPICAL_TEXT
from ragframe.judge.schema import array, boolean, indexed_verdict, integer, obj, string
from ragframe.judge.task import Task
from ragframe.metrics.base import fence_items, prompt
from ragframe.metrics.faithfulness import Faithfulness
from ragframe.metrics.verdicts import verdict_task
from ragframe.prompts import load

__all__ = [
    "CHECKS",
    "CHECK_UNANSWERABLE",
    "DEFAULT_TYPES",
    "DETAIL",
    "QUESTION_TYPES",
    "UNANSWERABLE_NEIGHBOURS",
    "GenerateResult",
    "QuestionType",
    "aestimate_generate",
    "agenerate",
    "agenerate_run",
    "estimate_generate",
    "generate",
    "generate_run",
]

DEFAULT_TYPES = "single_hop,multi_hop,unanswerable"
#: Chunks shorter than this (in estimated tokens) are not used as sources while longer ones
#: exist: a lone heading gives no question.
MIN_SOURCE_TOKENS = 16
#: The checks, in the order a candidate's first failure is named (`rejected_by`).
CHECKS = ("generation", "grounded", "check", "self_contained", "answerable", "duplicate")
#: Completion tokens one proposed pair may take.
PAIR_TOKENS = 256
#: Texts per embedding request (`JudgeSession.embed`'s batch size).
EMBED_BATCH = 128
#: Chunks of the whole corpus, nearest to an `unanswerable` question by embedding, that its
#: check reads besides its source chunk: the question passes only when none answers it.
UNANSWERABLE_NEIGHBOURS = 3


@dataclass(frozen=True)
class QuestionType:
    """One kind of question: its prompt (`prompts/generate_<name>.md`), how many chunks a
    request reads (1, or 2 nearest neighbours), whether its ground truth is checked for
    support, and what the answerability check must find."""

    name: str
    sources: int
    grounded: bool
    answerable: bool

    def task(self, per_request: int) -> Task:
        pair = obj(question=string(), ground_truth=string())
        return Task(
            name=f"generate.{self.name}",
            system=load(f"generate_{self.name}"),
            schema=obj(questions=array(pair)),
            counted="questions",
            max_tokens=PAIR_TOKENS * per_request + 64,
        )


QUESTION_TYPES: dict[str, QuestionType] = {
    t.name: t
    for t in (
        QuestionType("single_hop", sources=1, grounded=True, answerable=True),
        QuestionType("single_hop_abstract", sources=1, grounded=True, answerable=True),
        QuestionType("multi_hop", sources=2, grounded=True, answerable=True),
        QuestionType("comparative", sources=2, grounded=True, answerable=True),
        QuestionType("unanswerable", sources=1, grounded=False, answerable=False),
    )
}

CHECK = verdict_task(
    "generate.check",
    load("generate_check"),
    indexed_verdict(self_contained=boolean(), answerable=boolean()),
    max_tokens=1024,
)
#: `generate.check` for `unanswerable` candidates: the contexts are the source chunk and the
#: questions' nearest chunks of the corpus; `answered_by` names the contexts that answer.
CHECK_UNANSWERABLE = verdict_task(
    "generate.check_unanswerable",
    load("generate_check_unanswerable"),
    indexed_verdict(
        self_contained=boolean(), answerable=boolean(), answered_by=array(integer(minimum=1))
    ),
    max_tokens=1024,
)

#: Query styles: what a generation request's user message adds for each (nothing for
#: `plain`, so a request without styles or personas is the one it always was).
STYLES: dict[str, str | None] = {
    "plain": None,
    "keywords": "Question style: keywords. Write each question as a short search-engine query "
    'of two to six words, as a user types it into a search box (e.g. "Aster 3 single-phase '
    'power"), not a full sentence. The ground truth is still a complete answer.',
    "conversational": "Question style: conversational. Write each question as a person would "
    "say it aloud to a helpful colleague, in natural everyday words, with a few words of "
    "context if that is how they would ask. The ground truth is still a complete answer.",
    "misspelled": "Question style: misspelled. Write each question plainly, then put one or "
    "two realistic typos in it (a swapped, missing or doubled letter, as a hurried typist "
    "makes), leaving its meaning clear; never misspell a number. The ground truth is "
    "spelled correctly.",
}
DEFAULT_STYLE = "plain"

#: `generation_detail`: every check's verdict and reason (null where a check did not run).
DETAIL = pl.Struct(
    {
        "candidate": pl.String,
        "request_chunk_ids": pl.List(pl.String),
        "query_style": pl.String,
        "persona": pl.String,
        "grounded": pl.Boolean,
        "faithfulness": pl.Float64,
        "grounded_reason": pl.String,
        "self_contained": pl.Boolean,
        "answerable": pl.Boolean,
        "check_reason": pl.String,
        "checked_chunk_ids": pl.List(pl.String),
        "duplicate_of": pl.String,
        "duplicate_cosine": pl.Float64,
    }
)
_ROW_SCHEMA: dict[str, pl.DataType] = {
    "question": pl.String(),
    "ground_truth": pl.String(),
    "reference_contexts": pl.List(pl.String),
    "reference_context_ids": pl.List(pl.String),
    "doc_ids": pl.List(pl.String),
    "question_type": pl.String(),
    "generation_detail": DETAIL,
}


# ------------------------------------------------------------------------------ options


@dataclass(frozen=True)
class _Options:
    n: int
    weights: dict[str, float]
    seed: int
    per_request: int
    oversample: float
    threshold: float
    styles: dict[str, float] = field(default_factory=lambda: {DEFAULT_STYLE: 1.0})
    personas: tuple[str, ...] = ()


def _check_options(
    n: Any,
    types: Any,
    seed: Any,
    per_request: Any,
    oversample: Any,
    threshold: Any,
    styles: Any = None,
    personas: Any = None,
) -> _Options:
    """Every option checked before anything is read or sent (ConfigError saying the fix)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be a whole number of rows, at least 1, not {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a whole number, 0 or more, not {seed!r}")
    if isinstance(per_request, bool) or not isinstance(per_request, int) or per_request < 1:
        raise ConfigError(
            f"questions_per_request must be a whole number, at least 1, not {per_request!r}"
        )
    if (
        isinstance(oversample, bool)
        or not isinstance(oversample, int | float)
        or not math.isfinite(oversample)
        or oversample < 1
    ):
        raise ConfigError(
            f"oversample must be a number of at least 1 (candidates proposed per row asked "
            f"for), not {oversample!r}"
        )
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 < threshold <= 1
    ):
        raise ConfigError(
            f"duplicate_threshold must be a cosine in (0, 1], not {threshold!r}; 1 rejects "
            "only identical questions"
        )
    return _Options(
        n,
        _weights(types),
        seed,
        per_request,
        float(oversample),
        float(threshold),
        _weights(styles, STYLES, "styles", "query style") if styles is not None else {"plain": 1},
        _personas(personas),
    )


def _personas(personas: Any) -> tuple[str, ...]:
    """`personas` as a tuple of non-blank descriptions (None: no personas)."""
    if personas is None:
        return ()
    if isinstance(personas, str) or not isinstance(personas, Sequence):
        raise ConfigError(
            "personas must be a list of short descriptions of who asks (e.g. ['a homeowner "
            f"new to solar power']), not {type(personas).__name__}"
        )
    if not personas:
        raise ConfigError("personas is empty: give at least one description, or None for none")
    found: list[str] = []
    for k, persona in enumerate(personas, 1):
        if not isinstance(persona, str) or not persona.strip():
            raise ConfigError(
                f"persona {k} must be a non-blank string describing who asks, not {persona!r}"
            )
        found.append(" ".join(persona.split()))
    return tuple(found)


def _weights(
    types: Any,
    known: Mapping[str, Any] | None = None,
    option: str = "types",
    what: str = "question type",
) -> dict[str, float]:
    """`types` as {name: weight}: "a,b" (equal weights), "a:2,b:1", or a mapping; the names
    those of `known` (the question types by default)."""
    known = QUESTION_TYPES if known is None else known
    example = DEFAULT_TYPES if option == "types" else "plain:2,keywords:1"
    if isinstance(types, str):
        pairs: list[tuple[str, Any]] = []
        for part in (p.strip() for p in types.split(",")):
            if not part:
                continue
            name, _, weight = part.partition(":")
            pairs.append((name.strip(), weight.strip() if weight else 1.0))
    elif isinstance(types, Mapping):
        pairs = list(types.items())
    else:
        raise ConfigError(
            f"{option} must be a string such as {example!r} or a mapping {what} -> weight, "
            f"not {type(types).__name__}"
        )
    if not pairs:
        raise ConfigError(f"{option} names no {what}; the {what}s: {', '.join(known)}")
    weights: dict[str, float] = {}
    for name, raw in pairs:
        if name not in known:
            raise ConfigError(f"unknown {what} {name!r}; the {what}s: {', '.join(known)}")
        if name in weights:
            raise ConfigError(f"{option} names {name!r} twice")
        try:
            weight = float(raw) if not isinstance(raw, bool) else math.nan
        except (TypeError, ValueError):
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ConfigError(
                f"the weight of {name!r} must be a positive number, not {raw!r}; leave it "
                "out to generate none of it"
            )
        weights[name] = weight
    return weights


def _largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """`total` split over `weights` in proportion, rounded by largest remainder (ties to the
    type listed first)."""
    whole = sum(weights.values())
    exact = {k: total * w / whole for k, w in weights.items()}
    shares = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(shares.values())
    order = sorted(weights, key=lambda k: (-(exact[k] - shares[k]), list(weights).index(k)))
    for k in order[:left]:
        shares[k] += 1
    return shares


# ------------------------------------------------------------------------------ result


@dataclass
class GenerateResult:
    """What `generate_run` returns: the kept rows, the rejected candidates with the check
    that failed and why, the survivors past `n`, and the session's request figures."""

    frame: pl.DataFrame
    rejected: pl.DataFrame
    surplus: pl.DataFrame
    stats: RunStats
    n: int
    #: Generation requests sent per type, and the candidates they proposed.
    requests: dict[str, int] = field(default_factory=dict)
    proposed: dict[str, int] = field(default_factory=dict)
    #: Plain sentences about what did not go as asked (short sources, a type filled in).
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Kept and rejected counts by type and by check, requests and tokens, and, when
        fewer than `n` rows survived, a sentence saying so and why."""
        kept = self.frame.height
        lines = [
            f"generated {kept} of {self.n} rows asked for, from "
            f"{sum(self.proposed.values())} candidates in {sum(self.requests.values())} "
            f"generation requests ({self.rejected.height} rejected, "
            f"{self.surplus.height} surplus)"
        ]
        width = max(len(t) for t in ("type", *self.proposed))
        lines.append(f"  {'type':<{width}}  kept  rejected  surplus")
        for name in self.proposed:
            counts = [
                f.filter(pl.col("question_type") == name).height
                for f in (self.frame, self.rejected, self.surplus)
            ]
            lines.append(f"  {name:<{width}}  {counts[0]:>4}  {counts[1]:>8}  {counts[2]:>7}")
        by_check = self._by_check()
        if by_check:
            lines.append(
                "  rejected by check: " + ", ".join(f"{k} {v}" for k, v in by_check.items())
            )
        s = self.stats
        lines.append(
            f"  requests: {s.requests} ({s.embedding_requests} of them embeddings), "
            f"{s.cache_hits} answers from the cache"
            + (f", {s.reused} check rows reused as scored before" if s.reused else "")
            + f"; tokens: {s.prompt_tokens} prompt, {s.completion_tokens} completion"
        )
        if kept < self.n:
            why = ", ".join(f"{k} {v}" for k, v in by_check.items()) or "none rejected"
            lines.append(
                f"Only {kept} of the {self.n} rows asked for survived: "
                f"{sum(self.proposed.values())} candidates were proposed and "
                f"{self.rejected.height} rejected ({why}); each reason is in the rejected "
                "rows (GenerateResult.rejected, --rejected FILE); raise oversample "
                "(--oversample) to propose more."
            )
        lines += self.notes
        return "\n".join(lines)

    def _by_check(self) -> dict[str, int]:
        counts = self.rejected.get_column("rejected_by").value_counts()
        found = dict(zip(counts["rejected_by"], counts["count"], strict=True))
        return {k: int(found[k]) for k in CHECKS if k in found}


# ------------------------------------------------------------------------------ the API


def generate(corpus: pl.DataFrame | pl.LazyFrame | str | Path, **options: Any) -> pl.DataFrame:
    """A test set from a corpus: the kept rows of `generate_run` (same options)."""
    return generate_run(corpus, **options).frame


async def agenerate(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path, **options: Any
) -> pl.DataFrame:
    """`generate`, awaited (in a notebook's running loop)."""
    return (await agenerate_run(corpus, **options)).frame


def generate_run(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path,
    *,
    n: int,
    judge: Judge | None = None,
    types: str | Mapping[str, float] = DEFAULT_TYPES,
    seed: int = 0,
    questions_per_request: int = 3,
    oversample: float = 1.5,
    text_column: str = "text",
    id_column: str | None = None,
    chunk_tokens: int = 384,
    overlap_tokens: int = 48,
    duplicate_threshold: float = 0.92,
    styles: str | Mapping[str, float] | None = None,
    personas: Sequence[str] | None = None,
) -> GenerateResult:
    """Generate `n` checked question / ground-truth rows from `corpus` (see the module doc).

    `corpus`: a frame or a Parquet / JSON Lines / CSV file with a text column, or a folder of
    .txt / .md files (`read_corpus`). `types`: question types with weights. `styles`: query
    styles with weights (`STYLES`; None: every question `plain`), one drawn per generation
    request. `personas`: short descriptions of who asks, one per generation request in a
    seeded round-robin. Every configuration error is a ConfigError raised before any request.
    """
    return run_sync(  # type: ignore[no-any-return]
        agenerate_run(
            corpus,
            n=n,
            judge=judge,
            types=types,
            seed=seed,
            questions_per_request=questions_per_request,
            oversample=oversample,
            text_column=text_column,
            id_column=id_column,
            chunk_tokens=chunk_tokens,
            overlap_tokens=overlap_tokens,
            duplicate_threshold=duplicate_threshold,
            styles=styles,
            personas=personas,
        )
    )


async def agenerate_run(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path,
    *,
    n: int,
    judge: Judge | None = None,
    types: str | Mapping[str, float] = DEFAULT_TYPES,
    seed: int = 0,
    questions_per_request: int = 3,
    oversample: float = 1.5,
    text_column: str = "text",
    id_column: str | None = None,
    chunk_tokens: int = 384,
    overlap_tokens: int = 48,
    duplicate_threshold: float = 0.92,
    styles: str | Mapping[str, float] | None = None,
    personas: Sequence[str] | None = None,
) -> GenerateResult:
    """`generate_run`, awaited."""
    judge = judge if judge is not None else Judge(cache=True)
    chunks, opts, wanted = _prepare(
        corpus,
        judge,
        n=n,
        types=types,
        seed=seed,
        questions_per_request=questions_per_request,
        oversample=oversample,
        text_column=text_column,
        id_column=id_column,
        chunk_tokens=chunk_tokens,
        overlap_tokens=overlap_tokens,
        duplicate_threshold=duplicate_threshold,
        styles=styles,
        personas=personas,
    )
    async with judge.session() as session:
        return await _run(chunks, opts, wanted, session)


def estimate_generate(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path,
    *,
    n: int,
    judge: Judge | None = None,
    **options: Any,
) -> dict[str, Any]:
    """What `generate_run` would send, without sending anything (`ragframe generate
    --dry-run`): requests, prompt and completion tokens and cost, in all and by stage.

    The pipeline runs through the judge's dry backend with every candidate passing every
    check (see "The estimate" in the module doc: placeholder answers are made distinct and are
    never rejected as blank, unsupported or duplicate, so every stage is counted). Cached
    answers and vectors are free and not counted. Every configuration error is raised as
    `generate_run` raises it, before anything is counted.

    Args:
        corpus: As in `generate_run`.
        n: Rows asked for, as in `generate_run`.
        judge: The `Judge` whose price and cache count (default: `Judge(cache=True)`, as
            `generate_run`'s).
        **options: `generate_run`'s other options (types, seed, questions_per_request,
            oversample, text_column, id_column, chunk_tokens, overlap_tokens,
            duplicate_threshold, styles, personas); any other name is refused with a
            ConfigError.

    Returns:
        `rows` (n), `candidates`, `requests` (chat and embedding requests, as a run's summary
        counts them), `chat_requests`, `embedding_requests`, `embedding_texts`,
        `requests_by_task` (by task name, embeddings as "embeddings"), `prompt_tokens`,
        `completion_tokens` (chat only), `model`, `cost_usd` (None when the judge has no
        price; embeddings are not priced) and `stages`: one dict per stage (`stage`,
        `requests`, `requests_by_task`, `prompt_tokens`, `completion_tokens`, `cost_usd`).
    """
    return run_sync(  # type: ignore[no-any-return]
        aestimate_generate(corpus, n=n, judge=judge, **options)
    )


async def aestimate_generate(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path,
    *,
    n: int,
    judge: Judge | None = None,
    **options: Any,
) -> dict[str, Any]:
    """`estimate_generate`, awaited."""
    known = set(_OPTION_DEFAULTS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"estimate_generate got an unknown option {unknown[0]!r}; it takes "
            f"{', '.join(sorted(known))}"
        )
    judge = judge if judge is not None else Judge(cache=True)
    chunks, opts, wanted = _prepare(corpus, judge, n=n, **{**_OPTION_DEFAULTS, **options})
    session = judge.session("dry")  # sends nothing: no transport to open (as `estimate`)
    tally = _Tally(session)
    result = await _run(chunks, opts, wanted, session, tally=tally)
    return tally.figures(judge, opts.n, sum(result.proposed.values()))


#: `generate_run`'s options besides corpus, n and judge, with their defaults (read from
#: `agenerate_run`'s signature: the defaults are written there only).
_OPTION_DEFAULTS: dict[str, Any] = {
    name: option.default
    for name, option in inspect.signature(agenerate_run).parameters.items()
    if option.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("n", "judge")
}


def _prepare(
    corpus: pl.DataFrame | pl.LazyFrame | str | Path,
    judge: Judge,
    *,
    n: int,
    types: str | Mapping[str, float],
    seed: int,
    questions_per_request: int,
    oversample: float,
    text_column: str,
    id_column: str | None,
    chunk_tokens: int,
    overlap_tokens: int,
    duplicate_threshold: float,
    styles: str | Mapping[str, float] | None,
    personas: Sequence[str] | None,
) -> tuple[pl.DataFrame, _Options, dict[str, int]]:
    """Options checked, the corpus read and split, the judge's embeddings checked, and the
    generation requests wanted per type: every configuration error before any request."""
    opts = _check_options(
        n, types, seed, questions_per_request, oversample, duplicate_threshold, styles, personas
    )
    docs = read_corpus(corpus, text_column=text_column, id_column=id_column)
    chunks = split_documents(docs, chunk_tokens=chunk_tokens, overlap_tokens=overlap_tokens)
    _refuse_clashes(chunks)
    if chunks.height == 0:
        raise ConfigError(
            "the corpus has no text to generate from: every document is blank; nothing was sent"
        )
    _refuse_no_embeddings(judge)
    candidates = _largest_remainder(math.ceil(opts.n * opts.oversample), opts.weights)
    wanted = {t: math.ceil(c / opts.per_request) for t, c in candidates.items()}
    return chunks, opts, wanted


def _refuse_no_embeddings(judge: Judge) -> None:
    """The duplicate check (and multi-hop pairing, the unanswerable check's nearest chunks)
    embeds: a judge that cannot is refused now, not after the generation requests were paid
    for."""
    from ragframe.judge.capabilities import EMBEDDINGS, unserved

    missing = unserved(judge).get(EMBEDDINGS)
    if missing is not None:
        raise ConfigError(
            f"generation embeds questions (the duplicate check) and chunks (multi_hop and "
            f"comparative neighbours, unanswerable's nearest chunks), but {missing}"
        )


def _refuse_clashes(chunks: pl.DataFrame) -> None:
    carried = [c for c in chunks.columns if c not in CHUNK_COLUMNS]
    clash = [c for c in carried if c in _ROW_SCHEMA or c in ("rejected_by", "reason")]
    if clash:
        raise ConfigError(
            f"the corpus column {clash[0]!r} would clash with the test set's own column of "
            "that name; rename it"
        )


# ------------------------------------------------------------------------------ the run


@dataclass
class _Request:
    """One generation request: its type and the row numbers of its source chunks."""

    qtype: QuestionType
    number: int
    rows: list[int]
    style: str = DEFAULT_STYLE
    persona: str | None = None


@dataclass
class _Candidate:
    """One proposed pair (or a failed request) and its checks' verdicts."""

    request: _Request
    item: int
    question: str | None
    ground_truth: str | None
    fails: list[tuple[str, str]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    #: An estimate's stand-in (the dry backend's placeholder answer), not a real proposal.
    placeholder: bool = False
    #: The question's embedding (NaN when it could not be embedded; None before embedding).
    vector: np.ndarray | None = None

    @property
    def id(self) -> str:
        return f"{self.request.qtype.name}/{self.request.number}/{self.item}"


async def _run(
    chunks: pl.DataFrame,
    opts: _Options,
    wanted: dict[str, int],
    session: JudgeSession,
    *,
    tally: _Tally | None = None,
) -> GenerateResult:
    """The pipeline; with `tally` (a dry session), an estimate in which every candidate
    passes every check (see "The estimate" in the module doc)."""
    notes: list[str] = []
    requests, chunk_vectors = await _plan_requests(chunks, opts, wanted, session, notes, tally)
    candidates = await _propose(chunks, requests, opts.per_request, session, tally)
    # The questions are embedded once, before the checks: the unanswerable check finds each
    # question's nearest chunks with its vector, the duplicate check compares the vectors.
    await _embed_questions(candidates, session, tally)
    await _check(chunks, candidates, session, tally, chunk_vectors)
    if tally is not None:  # placeholders pass: every later stage is counted for each
        for c in candidates:
            c.fails.clear()
    order = np.random.default_rng([opts.seed, 2]).permutation(len(candidates))
    ordered = [candidates[i] for i in order]
    _deduplicate(ordered, opts.threshold, session)
    if tally is not None:
        for c in candidates:
            c.fails.clear()
    survivors = [c for c in ordered if not c.fails]
    chosen = _select(survivors, opts, notes)
    chosen_ids = {id(c) for c in chosen}
    return GenerateResult(
        frame=_frame(chunks, chosen),
        rejected=_frame(chunks, [c for c in ordered if c.fails], rejected=True),
        surplus=_frame(chunks, [c for c in survivors if id(c) not in chosen_ids]),
        stats=session.stats,
        n=opts.n,
        requests={t: sum(r.qtype.name == t for r in requests) for t in opts.weights},
        proposed={
            t: sum(c.request.qtype.name == t and c.question is not None for c in candidates)
            for t in opts.weights
        },
        notes=notes,
    )


def _spread_order(chunks: pl.DataFrame, seed: int) -> list[int]:
    """Source chunk rows in a seeded order spread over documents: documents shuffled, each
    one's chunks shuffled, then one chunk of each document in turn."""
    rng = np.random.default_rng([seed, 1])
    tokens = chunks.get_column("tokens").to_list()
    usable = [i for i, t in enumerate(tokens) if t >= MIN_SOURCE_TOKENS] or list(range(len(tokens)))
    by_doc: dict[str, list[int]] = {}
    doc_ids = chunks.get_column("doc_id").to_list()
    for i in usable:
        by_doc.setdefault(doc_ids[i], []).append(i)
    docs = list(by_doc)
    shuffled = [[by_doc[docs[d]][k] for k in rng.permutation(len(by_doc[docs[d]]))]
                for d in rng.permutation(len(docs))]  # fmt: skip
    return [
        rows[turn]
        for turn in range(max(len(rows) for rows in shuffled))
        for rows in shuffled
        if turn < len(rows)
    ]


async def _plan_requests(
    chunks: pl.DataFrame,
    opts: _Options,
    wanted: dict[str, int],
    session: JudgeSession,
    notes: list[str],
    tally: _Tally | None = None,
) -> tuple[list[_Request], np.ndarray | None]:
    """The generation requests of every type, their sources chosen (see the module doc), and
    the chunks' vectors (None when no type needs them): embedded once, for the paired types'
    neighbours and the unanswerable check's nearest chunks alike."""
    order = _spread_order(chunks, opts.seed)
    cursor = 0
    requests: list[_Request] = []
    paired_wanted = any(k and QUESTION_TYPES[t].sources == 2 for t, k in wanted.items())
    unanswerable_wanted = any(k and not QUESTION_TYPES[t].answerable for t, k in wanted.items())
    vectors: np.ndarray | None = None
    if (paired_wanted and len(order) >= 2) or (unanswerable_wanted and chunks.height >= 2):
        vectors = await _embed(session, chunks.get_column("text").to_list(), tally, "chunks")
    paired: set[frozenset[int]] = set()  # a pair is used once, by one paired type
    for name, k in wanted.items():
        qtype = QUESTION_TYPES[name]
        if qtype.sources == 1:
            take = min(k, len(order))
            sources = [[order[(cursor + i) % len(order)]] for i in range(take)]
            cursor += take
            what = f"{len(order)} usable chunks"
        else:
            sources = _neighbour_pairs(chunks, order, cursor, k, vectors, paired)
            cursor += len(sources)
            what = f"{len(sources)} distinct neighbour pairs left"
        if len(sources) < k:
            notes.append(
                f"{name}: the corpus has only {what}, so {len(sources)} generation requests "
                f"were sent instead of {k}."
            )
        requests += [_Request(qtype, i, rows) for i, rows in enumerate(sources)]
    _assign_styles_and_personas(requests, opts)
    return requests, vectors


def _assign_styles_and_personas(requests: list[_Request], opts: _Options) -> None:
    """Each request's query style and persona, seeded, in plan order.

    Styles: systematic sampling over the weights (one uniform draw; request `i` takes the
    style whose cumulative share holds `(u + i) / R`), then a seeded shuffle: every style gets
    the floor or the ceiling of its share of the R requests, never further from it, and which
    requests get it is random. Personas: a seeded rotation of the list, then one per request
    in turn (round-robin), so each is used within one of every other.
    """
    if not requests:
        return
    rng = np.random.default_rng([opts.seed, 3])
    names = list(opts.styles)
    weights = np.array([opts.styles[s] for s in names], dtype=np.float64)
    cumulative = np.cumsum(weights) / weights.sum()
    cumulative[-1] = 1.0
    points = (rng.random() + np.arange(len(requests))) / len(requests)
    picks = np.minimum(np.searchsorted(cumulative, points, side="right"), len(names) - 1)
    picks = picks[rng.permutation(len(requests))]
    start = int(rng.integers(len(opts.personas))) if opts.personas else 0
    for i, (request, pick) in enumerate(zip(requests, picks, strict=True)):
        request.style = names[int(pick)]
        if opts.personas:
            request.persona = opts.personas[(start + i) % len(opts.personas)]


def _neighbour_pairs(
    chunks: pl.DataFrame,
    order: list[int],
    cursor: int,
    k: int,
    vectors: np.ndarray | None,
    seen: set[frozenset[int]],
) -> list[list[int]]:
    """Up to `k` (anchor, nearest neighbour) pairs, anchors taken from `order` at `cursor`,
    none of them in `seen` (the pairs another paired type took; the new ones are added)."""
    if k == 0 or len(order) < 2 or vectors is None:
        return []
    docs = np.array(chunks.get_column("doc_id").to_list(), dtype=object)
    starts = chunks.get_column("start").to_numpy().astype(np.int64)
    ends = chunks.get_column("end").to_numpy().astype(np.int64)
    usable = np.zeros(chunks.height, dtype=bool)
    usable[order] = True
    usable &= ~np.isnan(vectors).any(axis=1)
    pairs: list[list[int]] = []
    for step in range(len(order)):
        anchor = order[(cursor + step) % len(order)]
        if not usable[anchor]:
            continue
        other_doc = usable & (docs != docs[anchor])
        apart = (
            usable & (docs == docs[anchor]) & ((ends <= starts[anchor]) | (starts >= ends[anchor]))
        )
        allowed = other_doc if other_doc.any() else apart
        if not allowed.any():
            continue
        cosine = np.where(allowed, vectors @ vectors[anchor], -np.inf)
        neighbour = int(np.argmax(cosine))  # ties: the first chunk, in corpus order
        pair = frozenset((anchor, neighbour))
        if pair in seen:
            continue
        seen.add(pair)
        pairs.append([anchor, neighbour])
        if len(pairs) == k:
            break
    return pairs


def _asked(per_request: int, request: _Request) -> str:
    """What a generation request asks for besides its contexts: the number of pairs, then its
    query style's instruction and who asks, when there are (a plain request without a persona
    is only the number)."""
    parts = [f"Pairs to write: {per_request}"]
    style = STYLES[request.style]
    if style is not None:
        parts.append(style)
    if request.persona is not None:
        parts.append(
            f"Who asks: {request.persona}. Write each question as this person would ask it: "
            "what they would want to know, in their words and at their level of knowledge. "
            "The ground truth does not change with who asks."
        )
    return "\n\n".join(parts)


def _contexts(chunks: pl.DataFrame, rows: Sequence[int]) -> list[str]:
    texts = chunks.get_column("text")
    return [texts[i] for i in rows]


async def _propose(
    chunks: pl.DataFrame,
    requests: list[_Request],
    per_request: int,
    session: JudgeSession,
    tally: _Tally | None = None,
) -> list[_Candidate]:
    """Send every type's generation requests at once; one candidate per proposed pair, and
    one per failed request (rejected by "generation"). With `tally`, one type after another
    (each its own stage), and placeholder pairs made distinct (never blank)."""
    by_type: dict[str, list[_Request]] = {}
    for request in requests:
        by_type.setdefault(request.qtype.name, []).append(request)
    session.plan({f"generate.{t}": len(rs) for t, rs in by_type.items()})

    async def ask(name: str, group: list[_Request]) -> list[_Candidate]:
        task = QUESTION_TYPES[name].task(per_request)
        prompts = pl.DataFrame(
            {
                "asked": [_asked(per_request, r) for r in group],
                "contexts": [_contexts(chunks, r.rows) for r in group],
            },
            schema={"asked": pl.String, "contexts": pl.List(pl.String)},
        ).select(
            prompt(pl.col("asked"), fence_items("context", pl.col("contexts"))).alias("prompt")
        )
        answers = await session.ask_frame(
            task, prompts.get_column("prompt"), [per_request] * len(group)
        )
        decoded = answers.get_column("json").str.json_decode(task.dtype).to_list()
        made: list[_Candidate] = []
        for request, value, error in zip(group, decoded, answers["error"], strict=True):
            if value is None:
                failed = _Candidate(request, 0, None, None)
                failed.fails.append(("generation", f"generation request failed: {error}"))
                made.append(failed)
                continue
            for item, pair in enumerate(value["questions"], 1):
                candidate = _Candidate(request, item, pair["question"], pair["ground_truth"])
                if tally is not None and TYPICAL_TEXT in (pair["question"], pair["ground_truth"]):
                    candidate.placeholder = True
                    candidate.question = f"{pair['question']} ({candidate.id})"
                    candidate.ground_truth = f"{pair['ground_truth']} ({candidate.id})"
                if (
                    not (candidate.question or "").strip()
                    or not (candidate.ground_truth or "").strip()
                ):
                    candidate.fails.append(("generation", "blank question or ground truth"))
                made.append(candidate)
        return made

    if tally is None:
        groups = await asyncio.gather(*(ask(name, group) for name, group in by_type.items()))
    else:
        groups = []
        for name, group in by_type.items():
            with tally.stage(f"generation: {name}"):
                groups.append(await ask(name, group))
    return [c for group in groups for c in group]


async def _check(
    chunks: pl.DataFrame,
    candidates: list[_Candidate],
    session: JudgeSession,
    tally: _Tally | None = None,
    chunk_vectors: np.ndarray | None = None,
) -> None:
    """Run the grounded check and `generate.check` at once (with `tally`, one after the
    other, each its own stage); record verdicts and failures."""
    live = [c for c in candidates if not c.fails]
    grounded = [c for c in live if c.request.qtype.grounded]
    for c in candidates:
        c.detail = {
            "candidate": c.id,
            "request_chunk_ids": [chunks["chunk_id"][i] for i in c.request.rows],
            "query_style": c.request.style,
            "persona": c.request.persona,
        }
    if tally is None:
        await asyncio.gather(
            _grounded(chunks, grounded, session),
            _asked_check(chunks, live, session, chunk_vectors),
        )
        return
    with tally.stage("grounded (faithfulness)"):
        await _grounded(chunks, grounded, session, estimating=True)
    with tally.stage("check (self-contained, answerable)"):
        await _asked_check(chunks, live, session, chunk_vectors)


async def _grounded(
    chunks: pl.DataFrame, rows: list[_Candidate], session: JudgeSession, *, estimating: bool = False
) -> None:
    """Faithfulness of each ground truth to its reference contexts; passes only at 1.0.
    `estimating`: a placeholder candidate's contexts carry its id, so that its placeholder
    claims are not verified in one request with its request-mates' identical ones."""
    if not rows:
        return
    contexts = [_contexts(chunks, c.request.rows) for c in rows]
    if estimating:
        contexts = [
            [f"{text} ({c.id})" for text in texts] if c.placeholder else texts
            for c, texts in zip(rows, contexts, strict=True)
        ]
    frame = pl.DataFrame(
        {
            "question": [c.question for c in rows],
            "answer": [c.ground_truth for c in rows],
            "contexts": contexts,
        },
        schema={"question": pl.String, "answer": pl.String, "contexts": pl.List(pl.String)},
    )
    scored = await score_frame(frame, [Faithfulness()], session)
    for c, score, detail in zip(
        rows, scored["faithfulness"], scored["faithfulness_detail"], strict=True
    ):
        passed = score == 1.0
        reason = None
        if not passed:
            unsupported = [
                f"{claim['claim']!r}: {claim['reason'] or 'not supported'}"
                for claim in detail["claims"] or []
                if claim["supported"] is not True
            ]
            reason = "; ".join(unsupported) or detail["error"] or f"faithfulness {score}"
            c.fails.append(("grounded", f"ground truth not supported by its contexts: {reason}"))
        c.detail.update(grounded=passed, faithfulness=score, grounded_reason=reason)


def _nearest_chunks(
    sources: Sequence[int], vector: np.ndarray | None, chunk_vectors: np.ndarray | None
) -> list[int]:
    """The `UNANSWERABLE_NEIGHBOURS` chunk rows nearest to a question's vector by cosine,
    its source chunks and chunks without a vector left out (ties: corpus order)."""
    if vector is None or chunk_vectors is None or np.isnan(vector).any():
        return []
    cosine = (chunk_vectors @ vector).astype(np.float64)
    cosine[np.isnan(cosine)] = -np.inf
    cosine[list(sources)] = -np.inf
    ranked = np.argsort(-cosine, kind="stable")
    return [int(i) for i in ranked[:UNANSWERABLE_NEIGHBOURS] if np.isfinite(cosine[i])]


async def _asked_check(
    chunks: pl.DataFrame,
    live: list[_Candidate],
    session: JudgeSession,
    chunk_vectors: np.ndarray | None = None,
) -> None:
    """`generate.check`: one request per generation request, judging all its questions
    against its contexts. An `unanswerable` request's contexts are its source chunk, then each
    of its questions' `UNANSWERABLE_NEIGHBOURS` nearest chunks of the corpus (their union, in
    question order), asked with `CHECK_UNANSWERABLE`, which names the contexts that answer."""
    groups: dict[int, list[_Candidate]] = {}
    for c in live:
        groups.setdefault(id(c.request), []).append(c)
    if not groups:
        return
    ids = chunks.get_column("chunk_id")
    by_task: dict[bool, list[tuple[list[_Candidate], list[int]]]] = {True: [], False: []}
    for group in groups.values():
        request = group[0].request
        rows = list(request.rows)
        if not request.qtype.answerable:
            for c in group:
                rows += [i for i in _nearest_chunks(request.rows, c.vector, chunk_vectors)
                         if i not in rows]  # fmt: skip
        by_task[request.qtype.answerable].append((group, rows))
    await asyncio.gather(
        *(
            _ask_check(chunks, members, session, ids, answerable)
            for answerable, members in by_task.items()
            if members
        )
    )


async def _ask_check(
    chunks: pl.DataFrame,
    members: list[tuple[list[_Candidate], list[int]]],
    session: JudgeSession,
    ids: pl.Series,
    answerable_type: bool,
) -> None:
    """One check request per (group, context rows); verdicts and failures recorded."""
    frame = pl.DataFrame(
        {
            "contexts": [_contexts(chunks, rows) for _, rows in members],
            "questions": [[c.question for c in g] for g, _ in members],
        },
        schema={"contexts": pl.List(pl.String), "questions": pl.List(pl.String)},
    )
    prompts = frame.select(
        prompt(
            fence_items("context", pl.col("contexts")),
            fence_items("question", pl.col("questions")),
        ).alias("prompt")
    )
    task = (CHECK if answerable_type else CHECK_UNANSWERABLE).with_reasons(session.judge.reasons)
    answers = await session.ask_frame(task, prompts["prompt"], [len(g) for g, _ in members])
    decoded = answers.get_column("json").str.json_decode(task.dtype).to_list()
    for (group, rows), value, error in zip(members, decoded, answers["error"], strict=True):
        checked = [ids[i] for i in rows]
        for k, c in enumerate(group):
            c.detail["checked_chunk_ids"] = checked
            if value is None:
                c.fails.append(("check", f"check request failed: {error}"))
                continue
            verdict = value["verdicts"][k]
            contained, answerable = verdict["self_contained"], verdict["answerable"]
            reason = verdict.get("reason")
            c.detail.update(self_contained=contained, answerable=answerable, check_reason=reason)
            if contained is not True:
                c.fails.append(("self_contained", f"question not self-contained: {reason}"))
            if answerable_type and answerable is not True:
                c.fails.append(
                    ("answerable", f"question not answerable from its contexts: {reason}")
                )
            elif not answerable_type and answerable is not False:
                named = [
                    checked[j - 1]
                    for j in dict.fromkeys(verdict.get("answered_by") or [])
                    if j is not None and 1 <= j <= len(checked)
                ]
                by = ", ".join(named) if named else "no chunk named"
                c.fails.append(
                    (
                        "answerable",
                        f"question answerable from the corpus, but it should not be: "
                        f"answered by chunk {by}: {reason}",
                    )
                )


async def _embed_questions(
    candidates: list[_Candidate], session: JudgeSession, tally: _Tally | None = None
) -> None:
    """Each proposed question's vector (`session.embed`, once for every later use)."""
    live = [c for c in candidates if not c.fails]
    if not live:
        return
    vectors = await _embed(session, [c.question or "" for c in live], tally, "questions")
    for c, vector in zip(live, vectors, strict=True):
        c.vector = vector


def _deduplicate(ordered: list[_Candidate], threshold: float, session: JudgeSession) -> None:
    """Reject each check survivor whose question is a near-duplicate (cosine at least
    `threshold`) of an earlier-kept one, in `ordered`'s (seeded) order, by the vectors
    `_embed_questions` gave them."""
    live = [c for c in ordered if not c.fails]
    if not live:
        return
    errors = session.embedding_errors
    kept: list[np.ndarray] = []
    kept_candidates: list[_Candidate] = []
    for c in live:
        vector = c.vector
        if vector is None or np.isnan(vector).any():
            why = errors.get(c.question or "", "no vector")
            c.fails.append(
                ("duplicate", f"question could not be embedded to check for duplicates: {why}")
            )
            continue
        if kept:
            cosine = np.asarray(kept) @ vector
            best = int(np.argmax(cosine))
            if cosine[best] >= threshold:
                other = kept_candidates[best]
                c.detail.update(duplicate_of=other.id, duplicate_cosine=float(cosine[best]))
                c.fails.append(
                    (
                        "duplicate",
                        f"near-duplicate (cosine {cosine[best]:.3f}) of candidate {other.id}: "
                        f"{other.question!r}",
                    )
                )
                continue
        kept.append(vector)
        kept_candidates.append(c)


def _select(survivors: list[_Candidate], opts: _Options, notes: list[str]) -> list[_Candidate]:
    """`n` survivors, the mix following the weights; short types filled in by the others."""
    by_type: dict[str, list[_Candidate]] = {t: [] for t in opts.weights}
    for c in survivors:
        by_type[c.request.qtype.name].append(c)
    quota = _largest_remainder(opts.n, opts.weights)
    take = {t: min(quota[t], len(by_type[t])) for t in opts.weights}
    short = {t: quota[t] - take[t] for t in opts.weights if take[t] < quota[t]}
    missing = opts.n - sum(take.values())
    while missing:
        spare = {t: w for t, w in opts.weights.items() if len(by_type[t]) > take[t]}
        if not spare:
            break
        extra = _largest_remainder(missing, spare)
        for t, k in extra.items():
            take[t] += min(k, len(by_type[t]) - take[t])
        missing = opts.n - sum(take.values())
    if short:
        filled = {t: take[t] - quota[t] for t in opts.weights if take[t] > quota[t]}
        lacking = ", ".join(f"{t} {q} short of its {quota[t]}" for t, q in short.items())
        if filled:
            by = ", ".join(f"{t} +{k}" for t, k in filled.items())
            notes.append(f"The mix differs from the weights: {lacking}; filled in by {by}.")
        else:
            notes.append(
                f"The mix differs from the weights: {lacking}; no other type had spare rows."
            )
    chosen = {id(c) for t in opts.weights for c in by_type[t][: take[t]]}
    return [c for c in survivors if id(c) in chosen]


def _frame(chunks: pl.DataFrame, rows: list[_Candidate], *, rejected: bool = False) -> pl.DataFrame:
    """The output rows of `rows`, in their order (see the module doc for the columns)."""
    carried = [c for c in chunks.columns if c not in CHUNK_COLUMNS]
    ids, texts, docs = chunks["chunk_id"], chunks["text"], chunks["doc_id"]
    data: dict[str, list[Any]] = {name: [] for name in _ROW_SCHEMA}
    for c in rows:
        data["question"].append(c.question)
        data["ground_truth"].append(c.ground_truth)
        data["reference_contexts"].append([texts[i] for i in c.request.rows])
        data["reference_context_ids"].append([ids[i] for i in c.request.rows])
        data["doc_ids"].append([docs[i] for i in c.request.rows])
        data["question_type"].append(c.request.qtype.name)
        data["generation_detail"].append({k: c.detail.get(k) for k in DETAIL.to_schema()})
    schema = dict(_ROW_SCHEMA)
    if rejected:
        # The checks run at once: their failures are named in CHECKS order, not arrival's.
        fails = [sorted(c.fails, key=lambda f: CHECKS.index(f[0])) for c in rows]
        data["rejected_by"] = [f[0][0] for f in fails]
        data["reason"] = ["; ".join(why for _, why in f) for f in fails]
        schema |= {"rejected_by": pl.String(), "reason": pl.String()}
    frame = pl.DataFrame(data, schema=schema)
    if carried:
        # The metadata of each row's first source chunk (a gather by row number).
        firsts = pl.Series([c.request.rows[0] for c in rows], dtype=pl.UInt32)
        frame = frame.hstack(chunks.select(carried)[firsts].get_columns())
    return frame


# ------------------------------------------------------------------------------ the estimate


_FIGURES = ("requests", "prompt_tokens", "completion_tokens")


class _Tally:
    """An estimate's counts by stage, read from a dry session's counter around each stage,
    and the embeddings a real run would request (the dry backend counts texts only)."""

    def __init__(self, session: JudgeSession) -> None:
        self.session = session
        self.stages: dict[str, Counter[str]] = {}
        #: What each embedding step ("chunks", "questions") would send: texts, requests,
        #: tokens (characters / 4).
        self.embeddings: dict[str, Counter[str]] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        before = Counter(self.session.estimate)
        yield
        after = self.session.estimate
        self.stages[name] = Counter(
            {k: after[k] - before[k] for k in after if after[k] > before[k]}
        )

    def figures(self, judge: Judge, n: int, candidates: int) -> dict[str, Any]:
        from ragframe.engine.run import estimate_figures

        def priced(counts: Mapping[str, int]) -> dict[str, Any]:
            return estimate_figures(judge, counts, n, repeats=1)

        stages = []
        for name, counts in self.stages.items():
            figures = priced(counts)
            stages.append(
                {"stage": name, **{k: figures[k] for k in _FIGURES}}
                | {"requests_by_task": figures["requests_by_task"], "cost_usd": figures["cost_usd"]}
            )
        embedded: Counter[str] = Counter()
        for what, counts in self.embeddings.items():
            embedded.update(counts)
            stages.append(
                {
                    "stage": f"embeddings: {what}",
                    "requests": counts["requests"],
                    "prompt_tokens": counts["tokens"],
                    "completion_tokens": 0,
                    "requests_by_task": {"embeddings": counts["requests"]},
                    "cost_usd": None,
                }
            )
        total = priced(self.session.estimate)
        return {
            "rows": n,
            "candidates": candidates,
            "requests": total["requests"] + embedded["requests"],
            "chat_requests": total["requests"],
            "embedding_requests": embedded["requests"],
            "embedding_texts": embedded["texts"],
            "requests_by_task": {**total["requests_by_task"], "embeddings": embedded["requests"]},
            "prompt_tokens": total["prompt_tokens"],
            "completion_tokens": total["completion_tokens"],
            "model": judge.model,
            "cost_usd": total["cost_usd"],
            "stages": stages,
        }


async def _embed(
    session: JudgeSession, texts: list[str], tally: _Tally | None, what: str
) -> np.ndarray:
    """`session.embed(texts)`; with `tally`, nothing is embedded: the requests a real run
    would send are counted (distinct non-blank texts whose vector the cache does not hold, in
    requests of `EMBED_BATCH`; none for an in-process embedder). A text whose vector the cache
    holds gets it (so a rerun's estimate pairs the chunks as the run did, and counts what the
    cache answers as free); any other a unit vector drawn from its hash (so neighbours pair up
    as on a real corpus)."""
    if tally is None:
        return await session.embed(texts, EMBED_BATCH)
    judge = session.judge
    unique = [t for t in dict.fromkeys(texts) if t.strip()]
    model = judge.embedding_model or getattr(judge.embedder, "name", None)
    cached: dict[str, np.ndarray] = {}
    if model is not None and unique:
        keys = session.store.vector_keys(model, {t: t for t in unique})
        found = await session.store.vectors(keys.values())
        cached = {t: found[key] for t, key in keys.items() if key in found}
    fresh = [t for t in unique if t not in cached]
    counts = tally.embeddings.setdefault(what, Counter())
    counts["texts"] += len(fresh)
    counts["tokens"] += sum(len(t) for t in fresh) // 4
    if judge.embedding_model is not None:
        counts["requests"] += math.ceil(len(fresh) / EMBED_BATCH)
    size = len(next(iter(cached.values()))) if cached else 32
    rows = []
    for text in texts:
        if text in cached and len(cached[text]) == size:
            rows.append(np.asarray(cached[text], dtype=np.float64))
            continue
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        vector = np.random.default_rng(seed).normal(size=size)
        rows.append(vector / np.linalg.norm(vector))
    return np.asarray(rows, dtype=np.float32).reshape(len(texts), size)
