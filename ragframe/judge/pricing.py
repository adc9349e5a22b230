"""Prices of judge models, for the run's cost figure and `max_cost`.

Dollars per million tokens, (prompt, completion), as published by the providers; extend or
correct it for your account: `ragframe.judge.pricing.PRICES["my-model"] = (0.2, 0.6)`, or pass
`Judge(price=(0.2, 0.6))`. Batch API requests are billed at half these rates by OpenAI. A model
not listed has no cost figure (tokens are still counted); nor has the embedded judge, which is
not billed per token (`Judge(price=...)` gives it one).

Providers bill the prompt tokens they took from their prompt cache (a repeated prefix of 1,024
tokens or more, reported as `usage.prompt_tokens_details.cached_tokens`) at a discount:
`CACHED_INPUT` holds that rate for the listed models. A price may carry it as a third element,
(prompt, completion, cached prompt); without one, cached tokens are billed at the prompt rate
and the run summary says the saving is not counted.
"""

from __future__ import annotations

#: (prompt, completion) or (prompt, completion, cached prompt), dollars per million tokens.
Price = tuple[float, float] | tuple[float, float, float]

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o4-mini": (1.10, 4.40),
    "text-embedding-3-small": (0.02, 0.0),
    "text-embedding-3-large": (0.13, 0.0),
}

#: Dollars per million cached prompt tokens, as OpenAI lists them (half the prompt rate for
#: gpt-4o, a quarter for gpt-4.1 and o4-mini).
CACHED_INPUT: dict[str, float] = {
    "gpt-4o": 1.25,
    "gpt-4o-mini": 0.075,
    "gpt-4.1": 0.50,
    "gpt-4.1-mini": 0.10,
    "gpt-4.1-nano": 0.025,
    "o4-mini": 0.275,
}


def _listed(table: dict[str, float] | dict[str, tuple[float, float]], model: str) -> str | None:
    """The table's name for `model`, also for dated snapshots ("gpt-4o-mini-2024-07-18")."""
    if model in table:
        return model
    for name in sorted(table, key=len, reverse=True):
        if model.startswith(f"{name}-"):
            return name
    return None


def price_of(model: str) -> tuple[float, float] | None:
    """The price of `model`, also for dated snapshots ("gpt-4o-mini-2024-07-18")."""
    name = _listed(PRICES, model)
    return None if name is None else PRICES[name]


def cached_rate_of(model: str) -> float | None:
    """Dollars per million cached prompt tokens of `model`, or None when not listed."""
    name = _listed(CACHED_INPUT, model)
    return None if name is None else CACHED_INPUT[name]


def with_cached_rate(price: Price | None, model: str) -> Price | None:
    """`price` with the model's listed cached-prompt rate as its third element, when `price`
    is the model's listed price; a price of one's own keeps its own terms (give it a third
    element for its cached rate), since the discount is the provider's, not the model's."""
    if price is None or len(price) != 2:
        return price
    rate = cached_rate_of(model)
    if rate is None or tuple(price) != price_of(model):
        return price
    return (price[0], price[1], rate)


def cost(
    price: Price | None, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float | None:
    """Dollars for the given tokens, or None when the price is unknown: the uncached prompt at
    the prompt rate, the cached part (`cached_tokens`, within `prompt_tokens`) at the cached
    rate when the price has one (else at the prompt rate), the completion at its rate."""
    if price is None:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens)
    rate = price[2] if len(price) > 2 else price[0]
    dollars = (prompt_tokens - cached) * price[0] + cached * rate + completion_tokens * price[1]
    return dollars / 1_000_000
