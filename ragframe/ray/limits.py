"""How the actors share the cluster's limits: each actor's judge (its share of the
concurrency, the budget and, with `limits="divided"`, the rates), and with `limits="actor"`
the limiter actor that holds the cluster's request and token buckets (`_ClusterLimiter`)
and the rate each actor's pool asks it through (`RemoteRate`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import ray

from ragframe.errors import ConfigError
from ragframe.judge.cache import SharedAnswerCache
from ragframe.judge.client import Judge
from ragframe.judge.limits import Reservations, share, share_rate

#: How the cluster's requests and tokens per minute are shared (see `ragframe.ray`).
Limits = Literal["divided", "actor"]
LIMITS: tuple[str, ...] = ("divided", "actor")
#: Rate asks sent to the limiter actor in one call at most.
MAX_ASKS = 256

#: The limiter actors this driver started, latest last (for `limiter_counts`).
_LIMITERS: list[Any] = []


def check_limits(limits: str) -> None:
    if limits not in LIMITS:
        raise ConfigError(f"limits must be one of {', '.join(LIMITS)}; got {limits!r}")


def actor_judge(
    judge: Judge, slot: int, actors: int, cache_dir: Path | None, limits: Limits = "actor"
) -> Judge:
    """The judge of the actor in `slot`: its share of the cluster's limits (of the rates too
    with `limits="divided"`; with "actor" the limiter actor holds them), its endpoint, its
    own cache file in `cache_dir` (reading every other actor's), no progress bar."""
    index = slot % actors
    cache: Any = False if cache_dir is None else SharedAnswerCache(cache_dir, f"actor-{slot}")
    parts = actors if limits == "divided" else 1
    return judge.for_endpoint(index).replace(
        concurrency=share(judge.concurrency, actors, index),
        requests_per_minute=share_rate(judge.requests_per_minute, parts),
        tokens_per_minute=share_rate(judge.tokens_per_minute, parts),
        max_cost=None if judge.max_cost is None else judge.max_cost / actors,
        progress=False,
        cache=cache,
    )


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class _ClusterLimiter:
    """The cluster's request and token buckets (`limits="actor"`): each scoring actor asks
    it, for several requests at once, when they may go. Restarted, it starts full again
    (at most one second's burst more)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.buckets = Reservations(requests_per_minute, tokens_per_minute)
        self.calls = 0

    def reserve(self, tokens: list[int]) -> list[float]:
        self.calls += 1
        return self.buckets.reserve(tokens)

    def counts(self) -> dict[str, int]:
        """Requests granted and calls that asked for them (the cost of sharing this way)."""
        return {"granted": self.buckets.granted, "calls": self.calls}


def start_limiter(judge: Judge, limits: Limits) -> Any:
    """The run's limiter actor: one with `limits="actor"` and a rate to hold, else None."""
    if limits != "actor" or not (judge.requests_per_minute or judge.tokens_per_minute):
        return None
    rates = (judge.requests_per_minute, judge.tokens_per_minute)
    limiter = _ClusterLimiter.remote(*rates)  # type: ignore[attr-defined]
    _LIMITERS.append(limiter)
    return limiter


def limiter_counts() -> dict[str, int] | None:
    """The latest run's limiter actor (`limits="actor"`): requests granted, calls it took."""
    return ray.get(_LIMITERS[-1].counts.remote()) if _LIMITERS else None


class RemoteRate:
    """What a judge session's pool asks before each request (`RateLimiter.acquire`), answered
    by the cluster's limiter actor. Asks that arrive while a call is on its way go together in
    the next call: when the rate binds, many requests wait, so one call serves many of them."""

    def __init__(self, limiter: Any) -> None:
        self.limiter = limiter
        self.calls = 0
        self._pending: list[tuple[int, asyncio.Future[float]]] = []
        self._asking: asyncio.Task[None] | None = None

    async def acquire(self, tokens: int) -> None:
        """Wait until the cluster's buckets let one request of about `tokens` tokens go."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pending.append((tokens, future))
        if self._asking is None or self._asking.done():
            self._asking = asyncio.create_task(self._ask())
        delay = await future
        if delay > 0:
            await asyncio.sleep(delay)

    async def _ask(self) -> None:
        while self._pending:
            asks, self._pending = self._pending[:MAX_ASKS], self._pending[MAX_ASKS:]
            try:
                delays = await self.limiter.reserve.remote([tokens for tokens, _ in asks])
            except Exception as exc:  # the requests fail as they would on any pool error
                for _, future in asks:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.calls += 1
            # Delays count from when the limiter reserved them, a moment ago: waiting them
            # out from now errs on the late side, never the early one.
            for (_, future), delay in zip(asks, delays, strict=True):
                if not future.done():
                    future.set_result(delay)
