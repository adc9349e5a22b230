"""When a row passes a metric: the one rule every part of ragframe uses (the `{metric}_pass`
column, summaries, gates, the report).

A threshold is a score in [0, 1]. A higher-is-better metric passes at or above it; a
lower-is-better one (hallucination) at or below it. Strict mode (deepeval's) passes only a
perfect score: 1.0, or 0.0 for a lower-is-better metric, whatever the threshold. A row with no
score neither passes nor fails: its pass value is null, and whether it counts against a pass
rate is the caller's choice (gates count it as a failure unless told to ignore it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from ragframe.errors import ConfigError

#: The threshold a metric uses when none is given (deepeval's default).
DEFAULT_THRESHOLD = 0.5
PASS_SUFFIX = "_pass"

Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class Threshold:
    """A metric's pass rule: its threshold, strict mode and direction."""

    value: float = DEFAULT_THRESHOLD
    strict: bool = False
    direction: Direction = "higher"

    def __post_init__(self) -> None:
        check_threshold(self.value, "threshold")
        if self.direction not in ("higher", "lower"):
            raise ConfigError(f"direction must be 'higher' or 'lower', not {self.direction!r}")

    def passes(self, score: pl.Expr) -> pl.Expr:
        """Boolean: the row passes (null where the score is null)."""
        if self.strict:
            return score == (1.0 if self.direction == "higher" else 0.0)
        return score >= self.value if self.direction == "higher" else score <= self.value

    def mean_passes(self, mean: float | None) -> bool | None:
        """Whether a mean meets the threshold (None for no mean): the ✅ / ❌ of a summary."""
        if mean is None or math.isnan(mean):
            return None
        if self.strict:
            return mean == (1.0 if self.direction == "higher" else 0.0)
        return mean >= self.value if self.direction == "higher" else mean <= self.value

    def describe(self) -> dict[str, Any]:
        return {"threshold": self.value, "strict": self.strict, "direction": self.direction}


def check_threshold(value: Any, what: str) -> float:
    """A threshold given by a user, checked: a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"{what} must be a number between 0 and 1, not {value!r}")
    return float(value)


def parse_metric_values(text: str | None, option: str) -> dict[str, float]:
    """`faithfulness=0.8,context_recall=0.7` -> {"faithfulness": 0.8, "context_recall": 0.7}
    (for --threshold, --fail-under and --min-pass-rate); each value in [0, 1]."""
    if not text:
        return {}
    values: dict[str, float] = {}
    for part in text.split(","):
        name, sep, raw = part.partition("=")
        name = name.strip()
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if not sep or not name or math.isnan(number):
            raise ConfigError(
                f"{option} expects metric=value pairs like faithfulness=0.8, got {part!r}"
            )
        if name in values:
            raise ConfigError(f"{option} names {name!r} twice")
        values[name] = check_threshold(number, f"{option} {name}")
    return values
