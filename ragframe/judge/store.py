"""The answer store: where a session looks before it asks the judge anything.

A request's key is a hash of everything that shapes its answer (model, endpoint, system
prompt, schema, sampling parameters, user message). The store keeps, by key, this run's
answers (the memo: a stage that several metrics share is paid for once even with the cache
off), the requests in flight (asked twice at once, sent once), and reads and writes the
SQLite cache (`AnswerCache`, whose reads and writes run off the event loop).

Remembered failures. At temperature 0 a request whose answer was cut off at max_tokens
would be cut off the same way if sent again: the store keeps that failure in the cache by
the request's key (`save_failure`), and a rerun gives its rows the same error, marked as
remembered, without sending it (`RunStats.remembered_failures`; `RunStats.kept_failures`
counts every failure of a run that a plain rerun will not send). `Judge(retry_failed=True)`
(`--retry-failed`) sends such requests again, once a run, and an answer then replaces the
failure. A failure is remembered only under the settings it happened with
(`failure_conditions`): more repair attempts, other output bounds or another structured mode
send it again. Every other failure is transient and sent again by a plain rerun: an answer
that was not JSON or did not fit its schema after its repairs (servers and proxies garble
answers now and then: at 40% malformed replies 90 of 500 requests failed both tries, and
remembering them kept a third of the rows null for good), timeouts, 5xx, 429s, refused connections,
replies over their size bound; a 400 (a prompt too long) costs nothing to send again. Only
`REMEMBERED_KINDS` are saved here, and only those are given back from a cache that holds
others (written by an older ragframe).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ragframe.errors import JudgeError
from ragframe.judge.cache import request_key
from ragframe.judge.config import JudgeConfig
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.results import Answer, RunStats, dumps
from ragframe.judge.task import Task

Count = int | tuple[int, ...] | None
#: The `AnswerError` kinds a request at temperature 0 would fail with again, sent again
#: unchanged: an answer cut off at max_tokens. Raising max_tokens (or the repairs) sends it.
REMEMBERED_KINDS = frozenset({"length"})
#: What a remembered failure's row error adds to the reason it failed with.
REMEMBERED = (
    " [remembered: this request failed this way before at temperature 0, with the same "
    "settings, so it was not sent again; --retry-failed (Judge(retry_failed=True)) sends it "
    "again]"
)


class Requests:
    """The distinct requests of one column of prompts, by key; a request's messages and
    schema are built on demand (answers the store holds never need them)."""

    def __init__(self, task: Task, where: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.task = task
        self.where = where

    def __iter__(self) -> Iterator[str]:
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)

    def schema(self, key: str) -> dict[str, Any]:
        return self.where[key][1]

    def __getitem__(self, key: str) -> dict[str, Any]:
        user, schema = self.where[key]
        return {
            "messages": [
                {"role": "system", "content": self.task.system},
                {"role": "user", "content": user},
            ],
            "schema": schema,
        }


class AnswerStore:
    """This run's answers, the requests in flight, and the cache; see the module docstring."""

    def __init__(self, judge: JudgeConfig, stats: RunStats) -> None:
        self.judge = judge
        self.stats = stats
        #: Requests under way, by key: a second ask for one joins it instead of sending again.
        self.inflight: dict[str, asyncio.Future[Answer]] = {}
        # Answers already given in this run. Cleared between chunks of a streamed file.
        self._memo: dict[str, Answer] = {}
        self._prefixes: dict[Any, tuple[bytes, dict[str, Any]]] = {}
        # Failures for good known in this run, with the cache on: those it remembered, and
        # those that happened now (a stage asking one again gets it without a lookup, and
        # retry_failed sends a request at most once a run). Kept across chunks: they are few.
        self._failures: dict[str, Answer] = {}
        # retry_failed: keys sent again although remembered as failed (an answer replaces it).
        self._retried: set[str] = set()

    # ----------------------------------------------------------------- keys
    def requests(
        self, task: Task, prompts: Sequence[str], counts: Sequence[Count]
    ) -> tuple[list[str], Requests]:
        """The key of each prompt (aligned with `prompts`), and the distinct requests."""
        where: dict[str, tuple[str, dict[str, Any]]] = {}
        keys: list[str] = []
        for user, count in zip(prompts, counts, strict=True):
            digest, schema = self._prefix(task, count)
            key = hashlib.sha256(digest + user.encode()).hexdigest()
            keys.append(key)
            if key not in where:
                where[key] = (user, schema)
        self.stats.deduplicated += len(keys) - len(where)
        return keys, Requests(task, where)

    def _prefix(self, task: Task, count: Count) -> tuple[bytes, dict[str, Any]]:
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
                "max_tokens": judge.max_tokens_for(task),
                "top_logprobs": task.top_logprobs,
            },
        }
        digest = hashlib.sha256(request_key(head).encode()).digest()
        self._prefixes[memo] = (digest, schema)
        return digest, schema

    def vector_keys(self, model: str, texts: Mapping[str, str]) -> dict[str, str]:
        """Each text -> the cache key of its vector (`texts`: text -> the text as sent).

        Vectors of an in-process embedder (no `embedding_model` named) are keyed by its name
        alone, whatever the chat endpoint: the local MiniLM's are shared by every judge."""
        judge = self.judge
        endpoint = judge.endpoint_host if judge.embedding_model is not None else "local"
        return {
            text: request_key({"embedding_model": model, "endpoint": endpoint, "text": sent})
            for text, sent in texts.items()
        }

    # -------------------------------------------------------------- answers
    async def recall(self, task: Task, requests: Requests) -> dict[str, Answer]:
        """The answers this run or the cache already holds, by key (remembered failures
        included, as answers with their error; see the module docstring)."""
        memo, failures = self._memo, self._failures
        found: dict[str, Answer] = {k: memo[k] for k in requests if k in memo}
        if failures:
            found.update((k, failures[k]) for k in requests if k in failures)
        remembered = len(found)
        cache = self.judge.cache
        if cache is not None:
            lookup = [k for k in requests if k not in found]
            for key, stored in (await cache.aget_many(lookup)).items():
                answer = _from_cache(stored, requests.schema(key), task)
                if answer is not None:
                    found[key] = answer
            self.stats.cache_hits += len(found) - remembered
            missing = [k for k in lookup if k not in found]
            if missing and self.judge.temperature == 0:
                found.update(self._failed(await cache.aget_failures(missing)))
        return found

    def _failed(self, stored: Mapping[str, dict[str, Any]]) -> dict[str, Answer]:
        """The remembered failures to give rows instead of sending their requests again."""
        judge = self.judge
        now = failure_conditions(judge)
        out: dict[str, Answer] = {}
        for key, failure in stored.items():
            if key in self._failures:  # another stage read it meanwhile: counted there
                out[key] = self._failures[key]
                continue
            if judge.retry_failed:
                self._retried.add(key)
                continue
            if failure["kind"] not in REMEMBERED_KINDS or not _still_holds(
                failure["conditions"], now
            ):
                continue
            usage = failure["usage"]
            out[key] = Answer(
                error=failure["reason"] + REMEMBERED,
                prompt_tokens=int(usage["prompt_tokens"]),
                completion_tokens=int(usage["completion_tokens"]),
                cached=True,
            )
        fresh = {k: a for k, a in out.items() if k not in self._failures}
        self.stats.remembered_failures += len(fresh)
        self.stats.kept_failures += len(fresh)
        self._failures.update(fresh)
        if fresh and judge.fail_fast:
            raise JudgeError(next(iter(fresh.values())).error)
        return out

    def remember(self, answers: Iterable[tuple[str, Answer]]) -> None:
        """Keep the answers without an error for the rest of the run."""
        for key, answer in answers:
            if answer.error is None:
                self._memo[key] = answer

    def forget(self) -> None:
        """Drop this run's in-memory answers (the disk cache keeps them)."""
        self._memo.clear()

    def track(self, key: str, answering: Coroutine[Any, Any, Answer]) -> asyncio.Future[Answer]:
        """Start answering `key`; until it is done, `inflight[key]` is its future."""
        future = asyncio.ensure_future(self._until_done(key, answering))
        self.inflight[key] = future
        return future

    async def _until_done(self, key: str, answering: Coroutine[Any, Any, Answer]) -> Answer:
        try:
            return await answering
        finally:
            self.inflight.pop(key, None)

    async def save(self, key: str, answer: Answer, content: str) -> None:
        """Commit a fresh answer to the cache (resumes once a crash can no longer lose it)."""
        cache = self.judge.cache
        if cache is not None:
            stored = {
                "value": answer.json,
                "content": content,
                "logprobs": answer.logprobs,
                "usage": {
                    "prompt_tokens": answer.prompt_tokens,
                    "completion_tokens": answer.completion_tokens,
                },
            }
            retried = key in self._retried
            await cache.aput(key, self.judge.model, stored, replaces_failure=retried)
            self._retried.discard(key)

    async def save_failure(self, key: str, answer: Answer, kind: str) -> None:
        """Remember in the cache that `key` failed for good with `answer.error`, when its
        `kind` would repeat (`REMEMBERED_KINDS`: an answer cut off at max_tokens): only at
        temperature 0, where sending it again would fail the same way. Other kinds are
        transient: a rerun sends them again."""
        judge = self.judge
        cache = judge.cache
        if judge.temperature != 0 or answer.error is None or kind not in REMEMBERED_KINDS:
            return
        if cache is not None:
            self._failures[key] = answer
            stored = {
                "kind": kind,
                "reason": answer.error,
                "conditions": failure_conditions(judge),
                "usage": {
                    "prompt_tokens": answer.prompt_tokens,
                    "completion_tokens": answer.completion_tokens,
                },
            }
            await cache.aput_failure(key, judge.model, stored)
            # Counted once committed: a failed write (CacheWriteError, counted by the
            # backend as cache_write) leaves a failure a rerun sends again.
            self.stats.kept_failures += 1

    # -------------------------------------------------------------- vectors
    async def vectors(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `keys`, by key."""
        cache = self.judge.cache
        wanted = list(keys)
        if cache is None or not wanted:
            return {}
        found = await cache.aget_vectors(wanted)
        return {key: np.frombuffer(blob, dtype=np.float32) for key, blob in found.items()}

    async def save_vectors(self, model: str, fresh: list[tuple[str, np.ndarray]]) -> None:
        cache = self.judge.cache
        if cache is not None:
            await cache.aput_vectors(model, [(k, v.tobytes()) for k, v in fresh])


def failure_conditions(judge: JudgeConfig) -> dict[str, Any]:
    """The settings a remembered failure depends on beyond its key (which holds the model,
    endpoint, messages, schema, temperature and max_tokens): the repairs it was given, the
    output bounds and the structured-output setting it was asked under."""
    bounds = judge.output_bounds
    return {
        "repair_attempts": judge.repair_attempts,
        "output_bounds": None if bounds is None else list(bounds),
        "structured": judge.structured,
    }


def _still_holds(then: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether a failure under the settings `then` would repeat under `now`: the same bounds
    and structured setting, and no more repair attempts than it already had."""
    return (
        then.get("output_bounds") == now["output_bounds"]
        and then.get("structured") == now["structured"]
        and int(then.get("repair_attempts", 0)) >= now["repair_attempts"]
    )


def _from_cache(stored: dict[str, Any], schema: dict[str, Any], task: Task) -> Answer | None:
    """A cached answer: its normalised JSON as stored, or (for answers stored raw, as the
    Batch API collector does) the raw content validated now."""
    normalised = stored.get("value")
    if normalised is None:
        try:
            normalised = dumps(task.finish(parse_answer(stored["content"], schema)))
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
