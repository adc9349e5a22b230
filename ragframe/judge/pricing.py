"""Prices of judge models, for the run's cost figure and `max_cost`.

Dollars per million tokens, (prompt, completion), as published by the providers; extend or
correct it for your account: `ragframe.judge.pricing.PRICES["my-model"] = (0.2, 0.6)`, or pass
`Judge(price=(0.2, 0.6))`. Batch API requests are billed at half these rates by OpenAI. A model
not listed has no cost figure (tokens are still counted); nor has the embedded judge, which is
not billed per token (`Judge(price=...)` gives it one).
"""

from __future__ import annotations

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


def price_of(model: str) -> tuple[float, float] | None:
    """The price of `model`, also for dated snapshots ("gpt-4o-mini-2024-07-18")."""
    if model in PRICES:
        return PRICES[model]
    for name in sorted(PRICES, key=len, reverse=True):
        if model.startswith(f"{name}-"):
            return PRICES[name]
    return None


def cost(
    price: tuple[float, float] | None, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """Dollars for the given tokens, or None when the price is unknown."""
    if price is None:
        return None
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000
