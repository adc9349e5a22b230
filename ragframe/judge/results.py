"""What the judge gives back: one `Answer` per prompt, and the `RunStats` of the whole run."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ragframe.judge.pricing import Price


def dumps(value: Any) -> str:
    """The normalised JSON text answers are kept and cached as."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


@dataclass
class RunStats:
    """What a run cost and what went wrong, for the summary and the output metadata."""

    # Requests sent, and what became of them.
    requests: int = 0
    answered: int = 0
    by_task: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    repairs: int = 0
    # Requests not sent: answered from the cache or this run, or asked twice in one column.
    cache_hits: int = 0
    deduplicated: int = 0
    #: Metric rows whose columns were reused from an earlier run of the same chunk, inputs,
    #: metric, judge and code (`ragframe.engine.reuse`): nothing asked, nothing looked up.
    reused: int = 0
    #: Requests the cache remembers as failed for good (at temperature 0): their rows get
    #: the same error again, unsent (`Judge(retry_failed=True)` sends them).
    remembered_failures: int = 0
    #: Requests of this run that failed for good in a way a plain rerun will not send again
    #: (remembered in the cache: those given again from it, and those remembered now; only
    #: answers cut off at max_tokens at temperature 0). `--retry-failed` sends them. Every
    #: other failure (a garbled answer, a timeout, a 5xx...) a rerun sends again.
    kept_failures: int = 0
    # What the requests sent cost.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Of `prompt_tokens`, those the provider took from its prompt cache (a repeated prefix),
    #: as it reported them (`usage.prompt_tokens_details.cached_tokens`; 0 when it does not).
    cached_prompt_tokens: int = 0
    #: (prompt, completion[, cached prompt]) dollars per million tokens (`pricing.Price`).
    price: Price | None = None
    embedding_requests: int = 0
    #: Texts cut to the embedding model's input limit before they were sent.
    embedding_texts_cut: int = 0
    # How the endpoint held up: the pool's lowest limit, its pauses on 429s, and the
    # structured-output mode the run ended in.
    lowest_concurrency: int = 0
    rate_limit_pauses: int = 0
    rate_limit_paused_s: float = 0.0
    #: Each run-wide step down of structured output: from, to, and the server's reason.
    downgrades: list[dict[str, str]] = field(default_factory=list)
    structured_mode: str = "json_schema"

    @property
    def cost(self) -> float | None:
        """Dollars spent on the requests sent in this run (None when the price is unknown)."""
        from ragframe.judge.pricing import cost

        return cost(
            self.price, self.prompt_tokens, self.completion_tokens, self.cached_prompt_tokens
        )

    @property
    def cached_saving(self) -> float | None:
        """Dollars the provider's cached-prompt rate saved against the full prompt rate; None
        when the price has no cached rate (cached tokens were billed in full, uncounted)."""
        if self.price is None or len(self.price) < 3:
            return None
        cached = min(self.cached_prompt_tokens, self.prompt_tokens)
        return cached * (self.price[0] - self.price[2]) / 1_000_000

    def as_dict(self) -> dict[str, Any]:
        return {
            "cost_usd": None if self.cost is None else round(self.cost, 6),
            "requests": self.requests,
            "answered": self.answered,
            "cache_hits": self.cache_hits,
            "deduplicated": self.deduplicated,
            "reused": self.reused,
            "remembered_failures": self.remembered_failures,
            "kept_failures": self.kept_failures,
            "embedding_requests": self.embedding_requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "cached_saving_usd": None
            if self.cached_saving is None
            else round(self.cached_saving, 6),
            "retries": dict(self.retries),
            "failures": dict(self.failures),
            "repairs": self.repairs,
            "requests_by_task": dict(self.by_task),
            "lowest_concurrency": self.lowest_concurrency,
            "structured_mode": self.structured_mode,
            "structured_downgrades": list(self.downgrades),
            "rate_limit_pauses": self.rate_limit_pauses,
            "rate_limit_paused_s": round(self.rate_limit_paused_s, 3),
            "embedding_texts_cut": self.embedding_texts_cut,
        }


class Failure(Exception):
    """A request that failed for good; `cause` is a short label for the summary, `param` the
    request parameter an HTTP error names (OpenAI's `error.param`), if any."""

    def __init__(self, cause: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message
        self.param = param
