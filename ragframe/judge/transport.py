"""The transport: every HTTP request the judge sends, through one pool.

Chat completions and embeddings alike go through `Transport.send`: concurrency-limited (AIMD
on 429s), rate-limited, retried with exponential backoff and jitter (Retry-After honoured). A
429 pauses the whole pool (see `limits`); an endpoint that cannot serve the run at all
(refused connections, a rejected key, an unknown model, no quota) stops it at once, and so
does a run that reached its `max_cost`. Once the endpoint has answered, a 401/403/404 fails
only its own request (a moderation refusal, say) unless it calls the key invalid. A chat
request refused for its structured-output parameter is sent again in a weaker mode
(`structured.Modes`); an embeddings batch the endpoint refuses is split until the text it
refuses is alone, unless the halves are refused alike (a refusal of the whole batch).
"""

from __future__ import annotations

import asyncio
import base64
import errno
import html
import json
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

import numpy as np

from ragframe.errors import BudgetExceeded, EndpointError, JudgeError
from ragframe.judge.config import _SECRET_PARAM as SECRET_PARAM
from ragframe.judge.config import EMBED_CHARS_PER_TOKEN, JudgeConfig, client_endpoint
from ragframe.judge.limits import AdaptiveLimiter, PauseTooLong, RateLimiter
from ragframe.judge.local import openai_http_library
from ragframe.judge.results import Failure, RunStats
from ragframe.judge.structured import (
    LLAMA_CPP_REFUSAL,
    Modes,
    StructuredMode,
    request_body,
    weakest,
)
from ragframe.judge.task import Task

T = TypeVar("T")
#: A chat completion as the judge reads it: content, logprobs, (prompt, completion) tokens
#: and finish reason.
Completion = tuple[str, list[dict[str, Any]] | None, tuple[int, int, int], str | None]
#: One embedding of an embeddings reply: its index in the request's inputs, its vector.
Embedded = tuple[int, list[float]]
#: Failure causes that mean the endpoint cannot serve the run: it stops at once.
ENDPOINT_CAUSES = ("unreachable", "auth", "not_found", "quota")
#: Refused connections (while no request has succeeded) that make the endpoint unreachable.
_REFUSALS_TO_STOP = 2


#: Bytes of a chat reply allowed per completion token its request allows (`max_tokens`):
#: English runs 4 characters a token; JSON escapes (6 bytes for a unicode escape) and runs of
#: whitespace rarely pass 16, so 64 is generous...
REPLY_BYTES_PER_TOKEN = 64
#: ... plus this much per token for each logprob asked (the token's and each top one's
#: entry: token, logprob and its bytes, about 100 bytes written out)...
LOGPROB_BYTES_PER_TOKEN = 256
#: ... plus this much for the JSON envelope (ids, usage, whatever fields a server adds).
REPLY_ENVELOPE_BYTES = 64 * 1024
#: The header asking the SDK for its raw, unread response (its RAW_RESPONSE_HEADER, "stream").
_STREAMED = ("X-Stainless-Raw-Response", "stream")


def reply_limit(body: dict[str, Any]) -> int:
    """The most bytes read of the reply to a chat request `body`, from its `max_tokens`.

    A server that ignores max_tokens (one returned 3 MB of reasons per request, and a
    10-row run took 4.3 GB) can send no more than this: the reply fails its request
    (`reply_too_long`) instead of filling the memory, the cache and the output.
    """
    tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
    per_token = REPLY_BYTES_PER_TOKEN
    if body.get("logprobs"):
        per_token += LOGPROB_BYTES_PER_TOKEN * (1 + int(body.get("top_logprobs") or 0))
    return tokens * per_token + REPLY_ENVELOPE_BYTES


async def _read_capped(response: Any, limit: int) -> bytes:
    """The body of the SDK's streamed `response`, read chunk by chunk (decompressed), and
    no further than `limit` bytes: more raises `_TooLong` and drops the connection. Errors
    while reading are the SDK's own (`APITimeoutError`, `APIConnectionError`), as they are
    when the SDK reads a body itself."""
    openai = _openai()
    http = openai_http_library()
    declared = response.headers.get("content-length")
    try:
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _TooLong(int(declared), limit)
        body = bytearray()
        async for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                raise _TooLong(len(body), limit)
        return bytes(body)
    except http.TimeoutException as err:
        raise openai.APITimeoutError(request=response.http_request) from err
    except http.RequestError as err:
        raise openai.APIConnectionError(request=response.http_request) from err
    finally:
        await response.close()


@dataclass
class _Retry:
    """An attempt that failed in a way another attempt may fix."""

    cause: str
    message: str
    retry_after: float | None = None


class _TooLong(Exception):
    """A reply longer than its request's `reply_limit`: read no further, not retried."""

    def __init__(self, read: int, limit: int) -> None:
        super().__init__(f"reply of {read} bytes or more, over its limit of {limit}")
        self.read = read
        self.limit = limit


class _BadReply(Exception):
    """A 200 reply that is not a chat completion, or not an embeddings reply (a proxy's HTML
    page, a cut-off body); `what` names the kind of reply expected.

    It keeps the raw body: the text shown to the user is cut from it only once the API key
    is scrubbed out (`describe`), so a key echoed across the cut cannot leak in part.
    """

    def __init__(self, raw: bytes, what: str = "a chat completion") -> None:
        super().__init__(f"the endpoint's reply is not {what}")
        self.raw = raw
        self.what = what

    def describe(self, secrets: Secrets) -> str:
        # Enough bytes that a credential starting inside the 200 characters shown is whole
        # (and so scrubbed) before the cut; every form of it is under 4 KiB.
        head = self.raw[: 200 + 4096].decode("utf-8", "replace")
        text = secrets.scrub(head)[:200]
        return f"the endpoint's reply is not {self.what}: {text!r}"


def raise_for_run(failure: Failure, fail_fast: bool) -> None:
    """Raise the run-level error a request that failed for good means, if it means one."""
    if failure.cause == "budget":
        raise BudgetExceeded(failure.message) from None
    if failure.cause in ENDPOINT_CAUSES:
        raise EndpointError(failure.message) from None
    if fail_fast:
        raise JudgeError(failure.message) from None


class Transport:
    """The HTTP client and the pool of one session; see the module docstring.

    Opened inside the running event loop (asyncio primitives and HTTP connections belong to
    one loop) by `open`, closed by `close`, which records the pool's figures in the stats.
    """

    def __init__(self, judge: JudgeConfig, stats: RunStats) -> None:
        self.judge = judge
        self.stats = stats
        self.modes = Modes(judge.structured, stats)
        #: Every credential of the judge: scrubbed from all the endpoint says (see `Secrets`:
        #: all of them from its errors, the secret-like ones from its answers).
        self.secrets = Secrets.of(judge)
        self._client: Any = None
        self._client_options: dict[str, Any] = {}
        # The embedded judge's HTTP client, made in `open`: the SDK client closes it when it
        # was built; `close` does when it was not.
        self._http_client: Any = None
        self._base_url: str | None = judge.base_url
        # Whether any request of this session has been answered: until one has, refused
        # connections mean a wrong or dead endpoint, and the run stops (_REFUSALS_TO_STOP).
        self._answered_once = False
        self._refused = 0
        self._limiter: AdaptiveLimiter | None = None
        self._rate: RateLimiter | None = None
        self._fatal: Failure | None = None

    async def open(self) -> None:
        """Start the embedded judge when it is the one used; open the client and the pool.

        A judge with no embedding model named and no embedder given embeds with the local
        MiniLM embedder when it is installed, whatever its chat endpoint (see `Judge`)."""
        judge = self.judge
        http_client = None
        if judge.local:
            from ragframe.judge.local import local_http_client, start_local_judge

            self._base_url = await asyncio.to_thread(start_local_judge)
            http_client = local_http_client(judge.timeout)  # spread over its servers
            self._http_client = http_client
        if judge.embedder is None and judge.embedding_model is None:
            judge.embedder = _local_embedder_or_none()
        # A user:password@ goes as its Basic header, never in the URL the HTTP library logs.
        base_url, headers = client_endpoint(self._base_url)
        self._client_options = dict(
            base_url=base_url,
            api_key=judge._api_key or "not-needed",
            max_retries=0,
            timeout=judge.timeout,
            http_client=http_client,
            default_headers=headers,
        )
        self._limiter = AdaptiveLimiter(
            judge.concurrency,
            adaptive=judge.adaptive,
            pause_base=judge.backoff_base,
            pause_max=judge.backoff_max,
            pause_cap=judge.rate_limit_wait,
        )
        self._rate = RateLimiter(judge.requests_per_minute, judge.tokens_per_minute)
        self.stats.lowest_concurrency = judge.concurrency

    @property
    def client(self) -> Any:
        """The SDK client, made at the first request: a run the cache answers never imports
        openai (0.6 s of a warm rerun's start-up)."""
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(**self._client_options)
        return self._client

    async def close(self) -> None:
        """Close the HTTP clients and forget them: a session entered again (on this loop or
        another) builds new ones from what `open` sets up again."""
        client, http_client = self._client, self._http_client
        self._client = self._http_client = None
        if client is not None:
            await client.close()  # and the http_client it was given
        elif http_client is not None:
            await http_client.aclose()
        if self._limiter is not None:
            self.stats.lowest_concurrency = self._limiter.lowest
            self.stats.rate_limit_pauses = self._limiter.pauses
            self.stats.rate_limit_paused_s = self._limiter.paused_seconds
        self.stats.structured_mode = self.modes.mode

    # ----------------------------------------------------------------- chat
    async def chat(
        self,
        task: Task,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        again: bool = False,
    ) -> Completion:
        """One chat completion with retries, in the run's structured mode or, after a 400
        about structured output, a weaker one (see `Modes.weaker`). `again`: the request
        re-asks an answer (a repair), so it goes ahead of the queue (`AdaptiveLimiter`)."""
        floor: StructuredMode = "json_schema"  # this request's own fallback, if it had one
        sent: list[StructuredMode] = []
        planned = self.modes.mode
        first = request_body(self.judge, task, messages, schema, planned)
        estimate = sum(len(m["content"]) for m in first["messages"]) // 4 + first["max_tokens"]

        async def post() -> Completion:
            # The mode is read once the pool slot is ours: a downgrade of the run reaches the
            # requests already queued. The body is posted as it is and the reply read as
            # plain JSON: the SDK's request transforms and response models cost a third of
            # the client's CPU per request; its base URL, auth, timeout and errors stay.
            mode = weakest(floor, self.modes.mode)
            sent.append(mode)
            body = (
                first if mode == planned else request_body(self.judge, task, messages, schema, mode)
            )
            return await self._post_chat(body)

        while True:
            try:
                content, logprobs, tokens, finish = await self.send(
                    post, estimate, task.name, again=again or bool(sent)
                )
            except Failure as failure:
                if not sent:  # stopped before anything went out (max_cost, a fatal error)
                    raise
                weaker = self.modes.weaker(sent[-1], failure, retried=floor != "json_schema")
                if weaker is None:
                    raise
                floor = weaker
                continue
            break
        self.stats.prompt_tokens += tokens[0]
        self.stats.completion_tokens += tokens[1]
        self.stats.cached_prompt_tokens += tokens[2]
        # An answer goes to the cache and the output: a proxy that writes a credential into
        # it must not put it there. Only the secret-like ones: the answer's words are scored.
        return self.secrets.scrub_answer(content), logprobs, tokens, finish

    async def _post_chat(self, body: dict[str, Any]) -> Completion:
        # The SDK's streamed raw response (what `with_streaming_response` asks for), whichever
        # HTTP library it is built on (httpx, httpx2): no response model is built, and the
        # body is read chunk by chunk, no further than `reply_limit` (see `_read_capped`).
        response = await self.client.post(
            "/chat/completions", body=body, cast_to=bytes, options={"headers": dict([_STREAMED])}
        )
        return _read_completion(await _read_capped(response, reply_limit(body)))

    # ----------------------------------------------------------- the pool
    def _check_stop(self) -> None:
        """Raise when the run must send no more: a fatal error, or max_cost reached."""
        if self._fatal is not None:
            raise self._fatal
        judge = self.judge
        spent = self.stats.cost
        if judge.max_cost is not None and spent is not None and spent >= judge.max_cost:
            self._fatal = Failure(
                "budget",
                f"stopped: the run has spent ${spent:.4f}, reaching max_cost "
                f"${judge.max_cost:.4f}; answers so far are cached, so rerunning with a "
                "higher max_cost resumes without paying for them again",
            )
            raise self._fatal

    async def send(
        self,
        call: Callable[[], Awaitable[T]],
        tokens: int,
        label: str,
        model: str | None = None,
        again: bool = False,
    ) -> T:
        """Send one request through the pool, retrying what another attempt may fix.

        5xx, timeouts, connection errors and replies that are not completions are retried
        with backoff, `max_attempts` tries in all; a 429 pauses the pool (`AdaptiveLimiter`)
        and the request waits with the others, for up to `rate_limit_wait` seconds in all: a
        pause it cannot wait out fails it before it sleeps, and one it waited out sends it.

        Every request's failure leaves the judge's talk with the endpoint here: its message
        is scrubbed of every credential (`Secrets`) on the way out, whoever wrote it.

        Requests take the pool's slots in order of arrival; a retry, and a request sent
        `again`, go first (see `AdaptiveLimiter.acquire`).
        """
        try:
            return await self._send(call, tokens, label, model, again)
        except Failure as failure:
            failure.message = self.secrets.scrub(failure.message)
            failure.args = (failure.message,)
            raise

    async def _send(
        self,
        call: Callable[[], Awaitable[T]],
        tokens: int,
        label: str,
        model: str | None,
        again: bool,
    ) -> T:
        assert self._limiter is not None and self._rate is not None
        judge = self.judge
        model = model or judge.model
        tries = failed = 0  # attempts sent; those counted against max_attempts
        throttled = 0.0  # seconds this request has spent waiting out rate limits
        while True:
            await self._rate.acquire(tokens)
            try:
                paused, epoch = await self._limiter.acquire(
                    judge.rate_limit_wait - throttled, again=again or tries > 0
                )
            except PauseTooLong as pause:
                waited = throttled + pause.paused
                why = self._too_long(label, waited, pause.wait, pause.asked)
                raise Failure("rate_limit_wait", why) from None
            throttled += paused
            try:
                # Checked once a slot is ours: requests queued behind the limit must not
                # slip past a budget that the requests before them used up.
                self._check_stop()
                # Built before the request is counted: a client that cannot be built sent
                # nothing.
                self.client  # noqa: B018
                self.stats.requests += 1
                self.stats.by_task[label] += 1
                tries += 1
                try:
                    result = await call()
                except (_openai().APIError, _BadReply, _TooLong) as err:
                    retry = self._classify(err, model)
                else:
                    self.stats.answered += 1
                    self._answered_once = True
                    self._limiter.on_success(epoch)
                    return result
            finally:
                await self._limiter.release()
            if retry.cause == "429":
                wait = self._limiter.on_throttle(epoch, retry.retry_after)
                if judge.rate_limit_wait <= 0 or throttled + wait > judge.rate_limit_wait:
                    why = self._too_long(label, throttled, wait, retry.retry_after)
                    raise Failure("429", f"{why} (after {tries} attempts: {retry.message})")
                self.stats.retries["429"] += 1
                continue
            failed += 1
            if failed >= judge.max_attempts:
                message = f"{label}: gave up after {tries} attempts: {retry.message}"
                raise Failure(retry.cause, message)
            self.stats.retries[retry.cause] += 1
            await asyncio.sleep(self._backoff(failed, retry.retry_after))

    def _too_long(self, label: str, waited: float, wait: float, asked: float | None) -> str:
        """Why a request gave up on a rate limit before sleeping through the pool's pause."""
        budget = self.judge.rate_limit_wait
        cause = (
            f"the endpoint's Retry-After asks for {asked:g} s"
            if asked is not None
            else "the endpoint keeps answering 429 (no Retry-After)"
        )
        return (
            f"{label}: gave up on the rate limit: {cause} and the pool is paused {wait:.1f} s "
            f"more, but this request has waited {waited:.1f} s of its rate_limit_wait="
            f"{budget:g}; raise Judge(rate_limit_wait=...) to wait longer"
        )

    def _backoff(self, failed: int, retry_after: float | None) -> float:
        """Seconds before the next try of a request that failed `failed` times (not on 429s)."""
        judge = self.judge
        delay = min(judge.backoff_max, judge.backoff_base * 2 ** (failed - 1))
        delay = random.uniform(delay / 2, delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, judge.backoff_max * 4))
        return delay

    def _classify(self, err: Exception, model: str) -> _Retry:
        """What a failed attempt means: a `_Retry`, or (raised) a `Failure` no retry fixes.

        Failures that mean the endpoint cannot serve the run (`ENDPOINT_CAUSES`) are also
        kept in `_fatal`, so no request queued behind them is sent.
        """
        openai = _openai()
        secret = self.secrets
        if isinstance(err, _BadReply):
            return _Retry("invalid_reply", err.describe(secret))
        if isinstance(err, _TooLong):
            # The same request would bring the same flood: it fails now, unretried (a
            # rerun sends it again: nothing about it is remembered).
            raise Failure(
                "reply_too_long",
                f"the endpoint's reply passed {err.limit:,} bytes, far more than the request's "
                "max_tokens allows (does the server ignore max_tokens?): read no further and "
                "not retried; cap the server's output length, or rerun to send it again",
            )
        if isinstance(err, openai.APITimeoutError):
            return _Retry("timeout", f"request timed out after {self.judge.timeout:g} s")
        message = describe_error(err, secret)
        if isinstance(err, openai.APIConnectionError):
            reason = _connect_refusal(err)
            if reason is not None and not self._answered_once:
                self._refused += 1
                if self._refused >= _REFUSALS_TO_STOP:
                    self._stop_endpoint(
                        "unreachable", f"cannot connect ({reason})", model,
                        "is the server running? check --base-url (Judge(base_url=...))",
                    )  # fmt: skip
            return _Retry("connection", message)
        assert isinstance(err, openai.APIStatusError)
        status = err.status_code
        if status == 429 and getattr(err, "code", None) == "insufficient_quota":
            self._stop_endpoint(
                "quota", f"reports the account's quota used up ({message})", model,
                "check the plan and billing of the account behind OPENAI_API_KEY",
            )  # fmt: skip
        if status == 429:
            return _Retry("429", message, _retry_after(err))
        if status in (401, 403, 404) and self._answered_once and not _bad_key(err):
            # The endpoint has served this run: the key and the model are fine, and this one
            # request was refused for itself (OpenRouter answers a flagged input with 403).
            raise Failure(f"http_{status}", f"{message} (refused this request only; not retried)")
        if status in (401, 403):
            self._stop_endpoint(
                "auth", f"refused the API key ({message})", model,
                "check OPENAI_API_KEY (Judge(api_key=...))",
            )  # fmt: skip
        if status == 404:
            shown = (self._base_url or "") if self.judge.local else self.judge.public_base_url
            base = shown.rstrip("/")  # never with a user:password@ the URL may carry
            self._stop_endpoint(
                "not_found", f"has no such model or route ({message})", model,
                f"check --model (GET {base}/models lists them) and that --base-url ends in /v1",
            )  # fmt: skip
        param = getattr(err, "param", None)
        if status in (400, 413, 422) or (status >= 500 and LLAMA_CPP_REFUSAL.search(message)):
            raise Failure("bad_request", message, param if isinstance(param, str) else None)
        cause = f"{status}" if status >= 500 else f"http_{status}"
        return _Retry(cause, message, _retry_after(err))

    def _stop_endpoint(self, cause: str, what: str, model: str, fix: str) -> NoReturn:
        """Stop the run: the endpoint cannot serve it. One line naming endpoint, model, fix."""
        failure = Failure(
            cause, f"the endpoint {self.judge.endpoint_host} {what} for model {model!r}: {fix}"
        )
        self._fatal = failure
        raise failure

    # ----------------------------------------------------------- embeddings
    def embeddable(self, unique: list[str], errors: dict[str, str]) -> dict[str, str]:
        """Each text worth sending -> the text as sent, cut to the embedding model's input
        limit. Blank texts are not sent: they go to `errors`, and their rows fail with that."""
        limit = self.judge.embedding_max_tokens
        chars = None if limit is None else limit * EMBED_CHARS_PER_TOKEN
        sendable: dict[str, str] = {}
        for text in unique:
            if not text.strip():
                errors[text] = "embedding: the text is blank; nothing to embed"
            elif chars is not None and len(text) > chars:
                sendable[text] = text[:chars]
                self.stats.embedding_texts_cut += 1
            else:
                sendable[text] = text
        return sendable

    async def embed_isolating(self, inputs: list[str]) -> list[np.ndarray | str]:
        """Vectors for `inputs`, in order. When the endpoint refuses the batch (400, 413,
        422), the batch is halved and each half sent again until the text it refuses is
        alone: that text gets the server's reason (a str), every other text its vector."""
        try:
            return list(await self._embed_remote(inputs))
        except Failure as failure:
            if failure.cause != "bad_request":
                raise
            return await self._isolate(inputs, failure.message)

    async def _try_embed(self, inputs: list[str]) -> list[np.ndarray | str] | str:
        """Vectors for `inputs`, or the message of a 400 refusing them (for `_isolate`)."""
        try:
            return list(await self._embed_remote(inputs))
        except Failure as failure:
            if failure.cause != "bad_request":
                raise
            return failure.message

    async def _isolate(self, inputs: list[str], message: str) -> list[np.ndarray | str]:
        """`inputs`, refused with `message`, split in halves until the refused text is alone.

        When both halves are refused with the parent's very message, the refusal is about
        the batch (a model that does not embed, say), not one text: every text fails with
        it, after 3 requests instead of 2n-1. A text the server names gives distinct
        messages to its own half only, so one bad text is still isolated.
        """
        reason = f"embedding request failed: {message}"
        if len(inputs) == 1:
            self.stats.failures["bad_request"] += 1
            return [reason]
        self.stats.retries["embedding_split"] += 1
        half = len(inputs) // 2
        parts = [inputs[:half], inputs[half:]]
        outcomes = await asyncio.gather(*(self._try_embed(part) for part in parts))
        if all(outcome == message for outcome in outcomes):
            self.stats.failures["bad_request"] += len(inputs)
            return [reason] * len(inputs)
        done = await asyncio.gather(
            *(
                self._isolate(part, outcome) if isinstance(outcome, str) else _ready(outcome)
                for part, outcome in zip(parts, outcomes, strict=True)
            )
        )
        return [item for part in done for item in part]

    async def _embed_remote(self, inputs: list[str]) -> np.ndarray:
        """One chunk of texts through the pool. A reply with the wrong number of vectors (or of
        mixed sizes) is asked again, `repair_attempts` times, then fails like any request."""
        judge = self.judge
        model = judge.embedding_model
        problem = ""
        for repair in range(judge.repair_attempts + 1):
            self.stats.embedding_requests += 1
            data = await self.send(
                lambda: self._post_embeddings(model, inputs),
                sum(len(t) for t in inputs) // 4,
                "embeddings",
                model,
                again=repair > 0,
            )
            ordered = sorted(data, key=lambda d: d[0])
            sizes = {len(vector) for _, vector in ordered}
            if [i for i, _ in ordered] == list(range(len(inputs))) and len(sizes) == 1:
                return np.asarray([vector for _, vector in ordered], dtype=np.float32)
            problem = (
                f"embeddings: the endpoint returned {len(ordered)} vectors of sizes "
                f"{sorted(sizes)} for {len(inputs)} texts"
            )
            if repair < judge.repair_attempts:
                self.stats.repairs += 1
                self.stats.retries["invalid_embedding_count"] += 1
        raise Failure("invalid_embedding_count", problem)

    async def _post_embeddings(self, model: str | None, inputs: list[str]) -> list[Embedded]:
        """One embeddings request, its body posted as it is and its reply read as plain JSON
        (as `_post_chat` does): the SDK's response models cost a Python object per number,
        768 to 3,072 of them per text, more CPU than all of a run's chat replies."""
        body = {"model": model, "input": inputs, "encoding_format": "float"}
        return _read_embeddings(await self.client.post("/embeddings", body=body, cast_to=bytes))


# ------------------------------------------------------------------ replies and errors
def _read_embeddings(raw: bytes) -> list[Embedded]:
    """(index, vector) of each embedding in an embeddings reply, in the reply's order.

    The index is kept as sent (as the SDK's reply model did): one that is not the input's
    position (a string "0", say) fails `_embed_remote`'s order check and is asked again."""
    try:
        return [(item["index"], item["embedding"]) for item in json.loads(raw)["data"]]
    except (ValueError, LookupError, TypeError, AttributeError):
        raise _BadReply(raw, "an embeddings reply") from None


def _read_completion(raw: bytes) -> Completion:
    """Content, logprobs, (prompt, completion, cached prompt) tokens and finish reason of a chat
    completion. Cached prompt tokens are the provider's prompt cache's
    (`usage.prompt_tokens_details.cached_tokens`), 0 when it does not say, never more than
    the prompt tokens."""
    try:
        reply = json.loads(raw)
        choice = reply["choices"][0]
        content = choice["message"].get("content") or ""
        usage = reply.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        tokens = (prompt, int(usage.get("completion_tokens") or 0), min(max(cached, 0), prompt))
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
        raise _BadReply(raw) from None


def _openai() -> Any:
    """The openai module, imported on first use (it is slow to import; the CLI's --help and
    a fully cached run never need it)."""
    import openai

    return openai


class Secrets:
    """Every credential a judge sends, in each form an endpoint may echo it back, scrubbed
    at two strengths: all of them from what a failure says, the secret-like ones from an
    answer.

    The credentials: the API key (whole, and its first 8 and last 6 characters, the form
    some servers quote a refused key in); the user and the password of each base URL, as
    written in the URL and decoded, and the Basic token they are sent as; the value of each
    credential-like query parameter (`config.public_url` names them). Each in the forms a
    reply may carry it: raw, percent-encoded, JSON-, Python- and HTML-escaped.

    `scrub` is for error texts (every failure leaving `Transport.send`, before its text is
    cut short so no part of a credential survives the cut; a batch's errors): it takes out
    every credential of `MIN_CHARS` or more, whatever the case (so %2f and %2F alike). A
    server or proxy quoting the request it refused may write any of them, and an error text
    that loses a word is still an error text.

    `scrub_answer` is for an answer's content, which is parsed, scored and cached: there a
    wrong *** changes a claim, a verdict or a JSON key (a user "reason" broke every answer),
    so only what cannot be told from words is taken out: the API key (whole and its first 8
    characters), the URL passwords, their Basic tokens and the secret query values, at least
    `ANSWER_MIN_CHARS` long, in their exact case (either case only for the hex digits of a
    %xx escape). The judge never sees a credential in its prompt, so an answer carries one
    only if a proxy writes it in; a user name is no secret, and a short password ("pass",
    "admin") is a word that answers use. Values shorter than `MIN_CHARS` are left alone
    everywhere: taking out every "ab" would wreck the message and hide nothing.
    """

    MIN_CHARS = 4
    ANSWER_MIN_CHARS = 8

    def __init__(self, key: str | None = None, urls: Sequence[str] = ()) -> None:
        values: set[str] = set()  # every credential, for error texts
        secret_like: set[str] = set()  # those that cannot be words, for answers
        if key:
            values.add(key)
            if len(key) > 12:  # a key echoed in part, e.g. "sk-abc...xyz"
                values.update((key[:8], key[-6:]))
            secret_like.update(value for value in values if len(value) >= self.ANSWER_MIN_CHARS)
        for url in urls:
            every, secret = _url_credentials(url, self.ANSWER_MIN_CHARS)
            values.update(every)
            secret_like.update(secret)
        forms = {form for value in values for form in _echoed_forms(value)}
        self._pattern = _pattern({form for form in forms if len(form) >= self.MIN_CHARS})
        answer_forms = {form for value in secret_like for form in _echoed_forms(value)}
        self._answer_pattern = _pattern(answer_forms, exact=True)

    @classmethod
    def of(cls, judge: JudgeConfig) -> Secrets:
        """The secrets of `judge`: its API key and every one of its base URLs."""
        return cls(judge._api_key, judge.base_urls)

    def scrub(self, text: str) -> str:
        """`text`, an error's, with every credential replaced by ***."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub("***", text)

    def scrub_answer(self, text: str) -> str:
        """`text`, an answer's content, with every secret-like credential replaced by ***."""
        if self._answer_pattern is None or not text:
            return text
        return self._answer_pattern.sub("***", text)


def _pattern(forms: set[str], *, exact: bool = False) -> re.Pattern[str] | None:
    """One regex matching any of `forms`, longest first; in any case, or (`exact`) in the
    forms' own case but for the hex digits of their %xx escapes."""
    if not forms:
        return None
    ordered = sorted(forms, key=len, reverse=True)
    if not exact:
        return re.compile("|".join(map(re.escape, ordered)), re.I)
    return re.compile("|".join(map(_exact_case, ordered)))


def _exact_case(form: str) -> str:
    """A regex for `form` in its own case, each %xx escape's hex digits in either case."""
    parts = re.split(r"(%[0-9A-Fa-f]{2})", form)
    return "".join(
        "%" + "".join(f"[{c.lower()}{c.upper()}]" for c in part[1:]) if i % 2 else re.escape(part)
        for i, part in enumerate(parts)
    )


def _url_credentials(url: str, secret_chars: int) -> tuple[set[str], set[str]]:
    """The user, password and secret query values of `url`, as written and decoded, and the
    Basic token a user:password@ is sent as (`config.client_endpoint`); then the secret-like
    ones of these (`Secrets.scrub_answer`): no user, nothing shorter than `secret_chars`
    decoded."""
    parsed = urlsplit(url if "://" in url else f"http://{url}")
    found: set[str] = set()
    secret: set[str] = set()
    user_info, at, _ = parsed.netloc.rpartition("@")
    if at:
        user, _, password = user_info.partition(":")
        found.update((user, password, unquote(user), unquote(password)))
        for u, p in ((user, password), (unquote(user), unquote(password))):
            found.add(token := base64.b64encode(f"{u}:{p}".encode()).decode("ascii"))
            if len(token) >= secret_chars:
                secret.add(token)
        if len(unquote(password)) >= secret_chars:
            secret.update((password, unquote(password)))
    for part in parsed.query.split("&"):
        name, _, value = part.partition("=")
        if SECRET_PARAM.match(unquote(name)):
            written = {value, unquote(value), unquote_plus(value)}
            found.update(written)
            if len(unquote_plus(value)) >= secret_chars:
                secret.update(written)
    return {value for value in found if value}, secret


def _echoed_forms(value: str) -> set[str]:
    """`value` as a reply may quote it: raw, percent-encoded, JSON, repr and HTML escaped."""
    return {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
        html.escape(value),
    }


def scrub(text: str, secrets: Secrets) -> str:
    """`text`, an error's, without any credential of `secrets` (`Secrets.scrub`)."""
    return secrets.scrub(text)


def describe_error(err: Exception, secrets: Secrets) -> str:
    """A short, one-line description of an openai error, with the credentials scrubbed out."""
    status = getattr(err, "status_code", None)
    text = secrets.scrub(str(getattr(err, "message", None) or err))
    text = " ".join(text.split())[:300]
    return f"HTTP {status}: {text}" if status else f"{type(err).__name__}: {text}"


def _connect_refusal(err: BaseException) -> str | None:
    """Why a connection could not be opened at all (refused, unknown host, no route), or
    None for a connection that broke once open (a reset: an ordinary, retried fault)."""
    seen: BaseException | None = err
    for _ in range(12):  # the openai, HTTP library and OS errors chained below it
        if seen is None:
            return None
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return f"unknown host: {seen.strerror or seen}"
        if isinstance(seen, OSError) and seen.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"no route to host: {seen.strerror}"
        seen = seen.__cause__ or seen.__context__
    return None


async def _ready(value: T) -> T:
    """`value`, as an awaitable (to gather ready results with pending ones)."""
    return value


def _bad_key(err: Exception) -> bool:
    """Whether an error says the API key itself is wrong (OpenAI's 401 `invalid_api_key`):
    that stops the run even after answers (a key revoked mid-run fails every request)."""
    return getattr(err, "status_code", None) == 401 and getattr(err, "code", None) in (
        "invalid_api_key",
        "invalid_authentication",
    )


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
        from ragframe.judge.embed_local import LocalEmbedder, local_embedder_available
    except ImportError:
        return None
    return LocalEmbedder() if local_embedder_available() else None
