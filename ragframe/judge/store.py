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
import itertools
import json
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import polars as pl

from ragframe.errors import JudgeError
from ragframe.judge.cache import request_key
from ragframe.judge.cache_tables import AnswerRow
from ragframe.judge.config import JudgeConfig
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.results import Answer, RunStats, dumps
from ragframe.judge.task import Task

Count = int | tuple[int, ...] | None
#: A column of prompts: a list of strings, or a String Series (hashed from its Arrow buffer).
Prompts = Sequence[str] | pl.Series
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
    schema are built on demand from the prompt that first had its key (answers the store
    holds never need them, so a warm rerun never turns a prompt into a Python string)."""

    def __init__(
        self,
        task: Task,
        first: dict[str, int],
        prompts: Prompts,
        counts: Sequence[Count],
        schema_of: Callable[[Count], dict[str, Any]],
    ) -> None:
        self.task = task
        #: Each distinct key -> the position of the first prompt with that key.
        self.first = first
        self._prompts = prompts
        self._counts = counts
        self._schema_of = schema_of

    def __iter__(self) -> Iterator[str]:
        return iter(self.first)

    def __len__(self) -> int:
        return len(self.first)

    def schema(self, key: str) -> dict[str, Any]:
        return self._schema_of(self._counts[self.first[key]])

    def __getitem__(self, key: str) -> dict[str, Any]:
        user = self._prompts[self.first[key]]
        return {
            "messages": [
                {"role": "system", "content": self.task.system},
                {"role": "user", "content": user},
            ],
            "schema": self.schema(key),
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
        self, task: Task, prompts: Prompts, counts: Sequence[Count]
    ) -> tuple[list[str], Requests]:
        """The key of each prompt (aligned with `prompts`, a list or a String Series), and
        the distinct requests.

        A Series is hashed from its Arrow buffer (no Python string per prompt, no encoding);
        the keys are the same either way: sha256(`_prefix` digest + the prompt's UTF-8).
        """
        if len(counts) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(counts)} counts")
        schema_of = self._schema_of(task)
        if not len(prompts):
            return [], Requests(task, {}, prompts, counts, schema_of)
        prefix = self._prefix
        # One hasher per distinct count, fed the prefix once; each prompt hashes a copy.
        hashers: dict[Count, Any] = {}
        for count in dict.fromkeys(counts):
            hashers[count] = hashlib.sha256(prefix(task, count)[0])
        same = hashers[counts[0]] if len(hashers) == 1 else None
        keys: list[str] = []
        add = keys.append
        for i, text in enumerate(_utf8(prompts)):
            hasher = (same or hashers[counts[i]]).copy()
            hasher.update(text)
            add(hasher.hexdigest())
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        self.stats.deduplicated += len(keys) - len(first)
        return keys, Requests(task, first, prompts, counts, schema_of)

    def _schema_of(self, task: Task) -> Callable[[Count], dict[str, Any]]:
        return lambda count: self._prefix(task, count)[1]

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
        # request_key({"embedding_model": model, "endpoint": endpoint, "text": sent}) without a
        # dict and a sorted encoding per text: the same bytes (keys in sorted order, compact
        # separators, ensure_ascii=False), the fixed head encoded once.
        blob = {"embedding_model": model, "endpoint": endpoint, "text": ""}
        head = json.dumps(blob, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        head = head.removesuffix('""}')  # the text is the last key: its value goes here
        sha256, quote = hashlib.sha256, encode_basestring
        return {
            text: sha256(f"{head}{quote(sent)}}}".encode()).hexdigest()
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
            lookup = [k for k in requests if k not in found] if found else list(requests)
            for key, row in (await cache.aget_rows(lookup)).items():
                answer = _from_row(row, requests, key, task)
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


def _utf8(prompts: Prompts) -> Iterator[bytes | memoryview]:
    """Each prompt's UTF-8 bytes: from a Series, views into its Arrow data buffer (no copy,
    no Python string); from a list, encoded."""
    if not isinstance(prompts, pl.Series):
        for text in prompts:
            yield text.encode()
        return
    if prompts.dtype != pl.String:
        raise TypeError(f"prompts must be strings, none null; got {prompts.dtype}")
    if nulls := prompts.null_count():
        raise TypeError(
            f"prompts must be strings, none null; got {nulls} null of {len(prompts)} prompts"
        )
    array = prompts.to_arrow(compat_level=pl.CompatLevel.oldest())
    if not len(array):
        return
    _, offsets, data = array.buffers()  # a large_string array: validity, int64 offsets, data
    ends = np.frombuffer(offsets, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    view = memoryview(data)
    bounds = ends.tolist()
    for start, end in itertools.pairwise(bounds):
        yield view[start:end]


def _from_row(row: AnswerRow, requests: Requests, key: str, task: Task) -> Answer | None:
    """A cached answer: its normalised JSON as stored, or (for answers stored raw, as the
    Batch API collector does) the raw content validated now."""
    normalised, content, logprobs, prompt_tokens, completion_tokens = row
    if normalised is None:
        try:
            normalised = dumps(task.finish(parse_answer(content or "", requests.schema(key))))
        except AnswerError:
            return None
    return Answer(
        normalised,
        None,
        int(prompt_tokens),
        int(completion_tokens),
        0,
        True,
        json.loads(logprobs) if logprobs else None,
    )
