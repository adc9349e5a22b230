"""Concurrency and rate limits for the one shared pool of requests.

The limit counts HTTP requests in flight, whichever metric sent them. On a 429 the limit is
halved (multiplicative decrease); each success adds 1/limit (additive increase, about +1 per
round of requests) until the configured ceiling: the AIMD rule TCP uses, so a run settles at
what the endpoint accepts instead of hammering it.
"""

from __future__ import annotations

import asyncio
import time


class AdaptiveLimiter:
    """An asyncio semaphore whose size moves between 1 and `ceiling` (AIMD)."""

    def __init__(self, ceiling: int, *, adaptive: bool = True) -> None:
        if ceiling < 1:
            raise ValueError("concurrency must be at least 1")
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.adaptive = adaptive
        self.in_flight = 0
        self.lowest = ceiling
        self._cond = asyncio.Condition()
        self._last_decrease = 0.0

    async def __aenter__(self) -> None:
        async with self._cond:
            try:
                await self._cond.wait_for(lambda: self.in_flight < max(1, int(self.limit)))
            except asyncio.CancelledError:
                # Python < 3.13 drops a wake-up that reaches a waiter being cancelled; with
                # notify(n) that could leave a free slot unused while others wait: pass it on.
                self._cond.notify(1)
                raise
            self.in_flight += 1

    async def __aexit__(self, *exc: object) -> None:
        async with self._cond:
            self.in_flight -= 1
            # Wake only as many waiters as there are free slots: waking every queued request
            # on each release costs O(queue) per request, O(n^2) for a column.
            self._cond.notify(max(1, int(self.limit) - self.in_flight))

    def on_success(self) -> None:
        if self.adaptive and self.limit < self.ceiling:
            self.limit = min(self.ceiling, self.limit + 1.0 / self.limit)

    def on_throttle(self) -> None:
        """Halve the limit, at most once per second so a burst of 429s counts as one signal."""
        now = time.monotonic()
        if self.adaptive and now - self._last_decrease > 1.0:
            self.limit = max(1.0, self.limit / 2)
            self.lowest = min(self.lowest, int(self.limit))
            self._last_decrease = now


class RateLimiter:
    """Token buckets for requests per minute and tokens per minute (either may be None).

    Each bucket holds one second's worth (rpm / 60 requests, tpm / 60 tokens) and starts full,
    so a run opens with at most a one-second burst, never a whole minute's requests at once:
    providers enforce per-minute limits over shorter windows and answer such a burst with
    429s. A request larger than the token bucket waits for a full bucket, then takes all its
    tokens (the bucket goes into debt), so the long-run rate never exceeds the limit.
    """

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._req_cap = max(1.0, requests_per_minute / 60) if requests_per_minute else 0.0
        self._tok_cap = tokens_per_minute / 60 if tokens_per_minute else 0.0
        self._req_level = self._req_cap
        self._tok_level = self._tok_cap
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        elapsed = now - self._stamp
        self._stamp = now
        if self.rpm:
            self._req_level = min(self._req_cap, self._req_level + elapsed * self.rpm / 60)
        if self.tpm:
            self._tok_level = min(self._tok_cap, self._tok_level + elapsed * self.tpm / 60)

    async def acquire(self, tokens: int) -> None:
        """Wait (without blocking the loop) until one request of about `tokens` may go."""
        if not self.rpm and not self.tpm:
            return
        async with self._lock:
            while True:
                self._refill()
                need_req = 1.0 - self._req_level if self.rpm else 0.0
                # A request larger than the bucket waits for a full bucket, then goes.
                want_tok = min(float(tokens), self._tok_cap) if self.tpm else 0.0
                need_tok = want_tok - self._tok_level if self.tpm else 0.0
                if need_req <= 0 and need_tok <= 0:
                    if self.rpm:
                        self._req_level -= 1
                    if self.tpm:
                        self._tok_level -= float(tokens)
                    return
                wait = 0.0
                if self.rpm and need_req > 0:
                    wait = max(wait, need_req * 60 / self.rpm)
                if self.tpm and need_tok > 0:
                    wait = max(wait, need_tok * 60 / self.tpm)
                await asyncio.sleep(wait)
