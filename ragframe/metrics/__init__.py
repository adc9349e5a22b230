"""The metric catalogue: one class per metric, one file per family, looked up by name."""

from __future__ import annotations

from collections.abc import Iterable

from ragframe.errors import ConfigError
from ragframe.metrics.answer_relevancy import AnswerRelevancy
from ragframe.metrics.base import Context, Metric, MetricInfo
from ragframe.metrics.context import (
    ContextPrecision,
    ContextPrecisionWithoutReference,
    ContextRecall,
)
from ragframe.metrics.faithfulness import Faithfulness

#: Metrics that can be asked for by name, with their default settings.
REGISTRY: dict[str, type[Metric]] = {
    cls.name: cls
    for cls in (
        Faithfulness,
        AnswerRelevancy,
        ContextPrecision,
        ContextPrecisionWithoutReference,
        ContextRecall,
    )
}

CORE = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")


def resolve(metrics: Iterable[str | Metric]) -> list[Metric]:
    """Turn names and instances into metric instances; refuse unknown or repeated names."""
    resolved: list[Metric] = []
    for item in metrics:
        if isinstance(item, Metric):
            resolved.append(item)
            continue
        if not isinstance(item, str):
            raise ConfigError(f"a metric must be a name or a Metric instance, not {item!r}")
        cls = REGISTRY.get(item.strip())
        if cls is None:
            raise ConfigError(
                f"unknown metric {item!r}; known metrics: {', '.join(sorted(REGISTRY))}"
            )
        resolved.append(cls())
    names = [m.name for m in resolved]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"metric names must be unique in one run, but {repeated} appear twice; give the "
            "second one another name (e.g. GEval(name=...))"
        )
    if not resolved:
        raise ConfigError("no metrics requested: pass metrics=[...]")
    return resolved


__all__ = [
    "CORE",
    "REGISTRY",
    "AnswerRelevancy",
    "Context",
    "ContextPrecision",
    "ContextPrecisionWithoutReference",
    "ContextRecall",
    "Faithfulness",
    "Metric",
    "MetricInfo",
    "resolve",
]
