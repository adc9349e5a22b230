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
    Judge,
)
from ragframe.judge.results import Answer, RunStats
from ragframe.judge.store import AnswerStore, Count
from ragframe.judge.task import Task
from ragframe.judge.transport import Transport

__all__ = [
    "EMBED_CHARS_PER_TOKEN",
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


class JudgeSession:
    """The judge's per-run state: the transport, the answer store, the backend, the stats.

    Created inside the running event loop (asyncio primitives and HTTP connections belong
    to one loop), used as `async with judge.session() as s:`.
    """

    def __init__(self, judge: Judge, backend: BackendName = "live") -> None:
        self.judge = judge
        self.backend = backend
        self.stats = RunStats(price=judge.price)
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
        if self.judge.progress:
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
        if counts is None:
            counts = [None] * len(prompts)
        self.progress.asked(task.name, len(prompts))
        keys, requests = self.store.requests(task, prompts, counts)
        found = await self.store.recall(task, requests)
        misses = [key for key in requests if key not in found]
        if not misses:
            self.progress.show()  # the stage's planned share is gone, nothing is sent
        fresh = await self._backend.answer(task, requests, misses) if misses else {}
        found.update(fresh)
        self.store.remember((found if self._backend.remembers_hits else fresh).items())
        return [found[key] for key in keys]

    def plan(self, expected: Mapping[str, int]) -> None:
        """Announce the run's work, so the progress bar's total (and ETA) is right from the
        start: by task name (`Task.name`; a metric's tasks are `metric.tasks()`), how many
        prompts that task will be asked in the whole run, all chunks together. An estimate:
        each stage's real count of requests sent replaces its share as it starts (the rule is
        in `backends.Progress`). May be called before or after the session is entered;
        calling it again replaces the figures of the tasks it names."""
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
