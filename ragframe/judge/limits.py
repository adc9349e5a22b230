"""Concurrency and rate limits for the one shared pool of requests.

The limit counts HTTP requests in flight, whichever metric sent them. On a 429 the limit is
halved (multiplicative decrease); each success adds 1/limit (additive increase, about +1 per
round of requests) until the configured ceiling: the AIMD rule TCP uses, so a run settles at
what the endpoint accepts instead of hammering it.

A 429 also pauses the whole pool: no request starts until the pause ends (Retry-After when the
server gives one, else a backoff that doubles with each 429 in a row), and then a single probe
goes alone until one succeeds. A throttled provider sees one request per pause, not a storm of
retries from every slot. No pause outlasts `pause_cap` (the judge's `rate_limit_wait`): a
Retry-After of an hour would otherwise idle the run for an hour, then fail every row that
waited; and a request whose own budget is smaller than the pause fails before it sleeps.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque


class PauseTooLong(Exception):
    """The pool's pause lasts longer than the request may still wait (`acquire`'s budget):
    failing now beats sleeping through the pause only to fail after it."""

    def __init__(self, wait: float, asked: float | None, paused: float) -> None:
        super().__init__(f"the pool is paused for {wait:.1f} s more")
        self.wait = wait  # seconds left in the pause
        self.asked = asked  # the Retry-After behind the pause, if the server gave one
        self.paused = paused  # seconds this request had already waited in this acquire


class _Place:
    """A request's place in the pool's queue, kept while it sleeps out a pause.

    `future` is what the request awaits: True hands it a slot (counted in `in_flight`),
    False wakes it to wait out a pause (it stays queued, in its place, meanwhile). `gone`:
    the request left the queue (cancelled, or it gave up on a pause); its place is skipped.
    """

    __slots__ = ("future", "gone")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[bool] = loop.create_future()
        self.gone = False


class AdaptiveLimiter:
    """An asyncio semaphore whose size moves between 1 and `ceiling` (AIMD), and that a 429
    pauses for every request (see the module docstring)."""

    def __init__(
        self,
        ceiling: int,
        *,
        adaptive: bool = True,
        pause_base: float = 0.5,
        pause_max: float = 30.0,
        pause_cap: float = math.inf,
    ) -> None:
        if ceiling < 1:
            raise ValueError("concurrency must be at least 1")
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.adaptive = adaptive
        self.in_flight = 0
        self.lowest = ceiling
        self.pause_base = pause_base
        self.pause_max = pause_max
        self.pause_cap = pause_cap
        #: The Retry-After (uncapped) that set the current pause's end, for error messages.
        self.asked: float | None = None
        #: Bumped by each pause; a 429 to a request sent before the latest pause is covered by it.
        self.epoch = 0
        self.pauses = 0
        self.paused_seconds = 0.0
        self._resume = 0.0  # time.monotonic() at which the current pause ends
        self._strikes = 0  # pauses since the last success: the next pause doubles
        self._probing = False  # after a pause, one request at a time until one succeeds
        #: Requests queued for a slot, longest first (see `_hand_over`).
        self._waiters: deque[_Place] = deque()
        self._handing_over = False  # a `_hand_over` is scheduled
        self._last_decrease = 0.0

    def _allowed(self) -> int:
        return 1 if self._probing else max(1, int(self.limit))

    async def acquire(self, budget: float = math.inf, again: bool = False) -> tuple[float, int]:
        """Wait until the pool is not paused and a slot is free; take the slot.

        Returns the seconds spent waiting out pauses (rate-limit waiting, which the caller
        counts against its own budget) and the pause epoch the request is sent in. Raises
        `PauseTooLong` instead of sleeping through a pause longer than `budget` seconds
        minus what it already waited here.

        Requests queue in order of arrival, except a request sent `again` (a retry, a repair,
        a weaker structured mode: its row is half done), which goes first.
        """
        paused = 0.0
        place: _Place | None = None  # this request's place in the queue, once it has one
        loop = asyncio.get_running_loop()
        while True:
            wait = self._resume - time.monotonic()
            if wait > 0:
                if wait > budget - paused:
                    self._leave(place)
                    raise PauseTooLong(wait, self.asked, paused)
                start = time.monotonic()
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    self._leave(place)
                    raise
                paused += time.monotonic() - start
                continue
            if place is None:
                if again and self.in_flight < self._allowed():
                    self.in_flight += 1
                    return paused, self.epoch
                self._hand_over()  # slots freed while nobody released (a pause ended)
                if not self._waiters and self.in_flight < self._allowed():
                    self.in_flight += 1
                    return paused, self.epoch
                place = _Place(loop)
                if again:
                    self._waiters.appendleft(place)
                else:
                    self._waiters.append(place)
            elif not place.future.result():
                # Woken for a pause, now over, and still queued in its place: wait there.
                place.future = loop.create_future()
                self._hand_over()  # slots freed while nobody released: queued first
            try:
                slot = await place.future
            except asyncio.CancelledError:
                self._leave(place)
                raise
            if slot and self._resume <= time.monotonic():
                return paused, self.epoch
            if slot:  # a pause began after the hand-over: the slot goes back, the place stays
                self.in_flight -= 1
                place.future = loop.create_future()
                place.future.set_result(False)
                self._waiters.appendleft(place)
                self._hand_over_soon()
            # Paused: wait it out in place, then take the next free slot in turn.

    def _leave(self, place: _Place | None) -> None:
        """A queued request leaves (cancelled, or it gave up on a pause): a slot handed to it
        goes back, and the hand-over goes on, so no request queued behind it waits for a
        wake-up that was its."""
        if place is None:
            return
        place.gone = True
        future = place.future
        if future.done() and not future.cancelled() and future.result():
            self.in_flight -= 1  # handed a slot as it left: pass it on
        self._hand_over_soon()

    async def release(self) -> None:
        self.in_flight -= 1
        self._hand_over_soon()

    def _hand_over_soon(self) -> None:
        """Hand the free slots over once the releasing request has gone on: one that sends
        again at once (a retry, a weaker structured mode) takes its slot back first."""
        if self._waiters and not self._handing_over:
            self._handing_over = True
            asyncio.get_running_loop().call_soon(self._hand_over)

    def _hand_over(self) -> None:
        """Give the free slots to the requests queued longest, in their order (FIFO).

        A slot goes straight to its waiter (counted in `in_flight` at once), so that no
        request arriving meanwhile takes it, and a woken request never goes back to the end
        of the queue: a column asked first is sent first, and the stage waiting for it
        starts while the pool is still full. While the pool is paused, as many waiters as
        there are free slots (at least one) wake without a slot, to wait the pause out (or
        give up on it) in their places: after it, the slots go to the queue's front as before.
        """
        self._handing_over = False
        waiters = self._waiters
        while waiters and waiters[0].gone:
            waiters.popleft()
        if not waiters:
            return
        if self._resume > time.monotonic():
            wake = max(1, self._allowed() - self.in_flight)
            for place in waiters:
                if wake <= 0:
                    break
                if place.gone:
                    continue
                if not place.future.done():
                    place.future.set_result(False)
                wake -= 1
            return
        while waiters and self.in_flight < self._allowed():
            place = waiters.popleft()
            if place.gone:
                continue
            self.in_flight += 1
            if place.future.done():  # asleep through the pause that just ended: its slot waits
                place.future = asyncio.get_running_loop().create_future()
            place.future.set_result(True)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def on_success(self, epoch: int | None = None) -> None:
        """A success; one sent after the latest pause (`epoch`) ends the probing."""
        if epoch is None or epoch == self.epoch:
            self._strikes = 0
            self._probing = False
        if self.adaptive and self.limit < self.ceiling:
            self.limit = min(self.ceiling, self.limit + 1.0 / self.limit)

    def on_throttle(self, epoch: int | None = None, retry_after: float | None = None) -> float:
        """A 429: halve the limit (at most once per second, so a burst counts as one signal)
        and pause the pool. Returns the seconds until the pool resumes.

        `epoch` is the one `acquire` gave the throttled request: a request sent before the
        latest pause is already covered by it (only a longer Retry-After extends it), so a
        burst of 429s in flight makes one pause, and the pause doubles only when a request
        sent after it is throttled again.
        """
        now = time.monotonic()
        if self.adaptive and now - self._last_decrease > 1.0:
            self.limit = max(1.0, self.limit / 2)
            self.lowest = min(self.lowest, int(self.limit))
            self._last_decrease = now
        if epoch is not None and epoch != self.epoch:
            if retry_after is not None:
                self._extend(now + min(retry_after, self.pause_cap), retry_after)
            return max(0.0, self._resume - now)
        if retry_after is None:
            ceiling = min(self.pause_max, self.pause_base * 2**self._strikes)
            wait = random.uniform(ceiling / 2, ceiling)
        else:
            wait = retry_after
        self._strikes += 1
        self.epoch += 1
        self.pauses += 1
        self._probing = True
        self._extend(now + min(wait, self.pause_cap), retry_after)
        return max(0.0, self._resume - now)

    def _extend(self, until: float, asked: float | None) -> None:
        now = time.monotonic()
        if until > self._resume:
            self.paused_seconds += until - max(self._resume, now)
            self._resume = until
            self.asked = asked


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


def share(total: int, parts: int, index: int) -> int:
    """Holder `index`'s share of `total` request slots split among `parts` holders (the
    actors of a cluster): the shares differ by at most one and add up to `total`, so the
    cluster never has more requests in flight than the endpoint was given."""
    if not 0 <= index < parts:
        raise ValueError(f"index must lie in [0, {parts}), got {index}")
    return total // parts + (1 if index < total % parts else 0)


def share_rate(rate: float | None, parts: int) -> float | None:
    """One holder's share of a per-minute rate (requests or tokens) split among `parts`."""
    return None if rate is None else rate / parts


class Reservations:
    """The cluster's request and token buckets, kept in one place (a limiter actor) and
    handed out ahead of time: `reserve` says, for each of several requests at once, how many
    seconds from now it may go. Nothing waits here, so one holder serves any number of askers.

    The same buckets as `RateLimiter` (one second's worth each, full at the start; a request
    larger than the token bucket waits for a full bucket and leaves it in debt), written as
    reservations (GCRA): per bucket, the time `due` at which it would be full again.
    """

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        #: (units per second, capacity, whether a unit is a token rather than a request)
        self.buckets: list[tuple[float, float, bool]] = []
        if requests_per_minute:
            rate = requests_per_minute / 60
            self.buckets.append((rate, max(1.0, rate), False))
        if tokens_per_minute:
            self.buckets.append((tokens_per_minute / 60, tokens_per_minute / 60, True))
        self._due = [-math.inf] * len(self.buckets)
        self.granted = 0

    def reserve(self, tokens: list[int], now: float | None = None) -> list[float]:
        """Seconds from `now` after which each request (of about `tokens[i]` tokens) may go,
        in order; the buckets are charged at once."""
        now = time.monotonic() if now is None else now
        delays = []
        for size in tokens:
            units = [float(size) if tokens else 1.0 for _, _, tokens in self.buckets]
            at = now
            for i, ((rate, cap, _), want) in enumerate(zip(self.buckets, units, strict=True)):
                # Goes once the bucket holds `want` (at most a full bucket): its level is
                # cap - (due - t) * rate, so t >= due - (cap - min(want, cap)) / rate.
                at = max(at, self._due[i] - (cap - min(want, cap)) / rate)
            for i, ((rate, _, _), want) in enumerate(zip(self.buckets, units, strict=True)):
                self._due[i] = max(self._due[i], at) + want / rate
            delays.append(at - now)
        self.granted += len(tokens)
        return delays
