"""The metric catalogue: one class per metric, one file per family, looked up by name; a metric
carries its own pass threshold (`thresholds`), and `catalog` lists what a log can be scored
with.

Layer: above the judge; imports `judge`, `inputs`, `stats` and the ground.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from ragframe.errors import ConfigError
from ragframe.metrics.answer_relevancy import AnswerRelevancy
from ragframe.metrics.base import Context, Metric, MetricInfo, set_threshold
from ragframe.metrics.context import (
    ContextPrecision,
    ContextPrecisionWithoutReference,
    ContextRecall,
)
from ragframe.metrics.correctness import AnswerCorrectness
from ragframe.metrics.custom import GEval, RubricLevel, RubricScore
from ragframe.metrics.faithfulness import Faithfulness
from ragframe.metrics.nonllm import (
    ContextPrecisionIDs,
    ContextPrecisionNonLLM,
    ContextRecallIDs,
    ContextRecallNonLLM,
    RagasScore,
)
from ragframe.metrics.nvidia import AnswerAccuracy, ContextRelevance, ResponseGroundedness
from ragframe.metrics.relevancy import AnswerRelevancyLLM, ContextualRelevancy, Hallucination

#: Metrics that can be asked for by name, with their default settings. (GEval needs criteria
#: or steps, so it is built, not named.)
REGISTRY: dict[str, type[Metric]] = {
    cls.name: cls
    for cls in (
        Faithfulness,
        AnswerRelevancy,
        ContextPrecision,
        ContextPrecisionWithoutReference,
        ContextRecall,
        ContextualRelevancy,
        AnswerRelevancyLLM,
        Hallucination,
        AnswerAccuracy,
        ContextRelevance,
        ResponseGroundedness,
        AnswerCorrectness,
        RubricScore,
        ContextPrecisionNonLLM,
        ContextRecallNonLLM,
        ContextPrecisionIDs,
        ContextRecallIDs,
    )
}

#: Metrics built with the caller's own settings, never named: name -> how to build one.
#: (`resolve` and the run specification refuse such a name with this advice.)
BUILT = {"g_eval": 'GEval(name=..., criteria="...")'}

#: The metrics a run scores when none is named, the same in Python (`evaluate`) and on the
#: command line (`ragframe score`).
CORE = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")


def refuse_built_by_name(names: Iterable[object]) -> None:
    """A metric the catalogue lists but that has no meaning without the caller's settings
    (G-Eval judges by your criteria): one line saying how to build it, instead of "unknown
    metric". Every path that turns names into metrics goes through `resolve`, which calls
    this; the run specification calls it earlier, before anything is read or sent."""
    for name in names:
        if isinstance(name, str) and name.strip() in BUILT:
            raise ConfigError(
                f"{name.strip()!r} cannot be named: G-Eval needs your criteria; build it in "
                f"Python, e.g. ragframe.evaluate(df, metrics=[ragframe.{BUILT[name.strip()]}]) "
                "(its columns are named after name=)"
            )


def resolve(metrics: Iterable[str | Metric | RagasScore]) -> list[Metric | RagasScore]:
    """Turn names and instances into metric instances; refuse unknown or repeated names, and
    a name that must be built (`g_eval`) with how to build it.

    `ragas_score` (an aggregate of other metrics' columns) is accepted by name too.
    """
    resolved: list[Metric | RagasScore] = []
    for item in metrics:
        if isinstance(item, Metric | RagasScore):
            resolved.append(item)
            continue
        if not isinstance(item, str):
            raise ConfigError(f"a metric must be a name or a Metric instance, not {item!r}")
        name = item.strip()
        refuse_built_by_name([name])
        if name == RagasScore.name:
            resolved.append(RagasScore())
            continue
        cls = REGISTRY.get(name)
        if cls is None:
            known = ", ".join(sorted([*REGISTRY, RagasScore.name]))
            raise ConfigError(f"unknown metric {item!r}; known metrics: {known}")
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


def with_reasons(
    metrics: Iterable[Metric | RagasScore], default: bool
) -> list[Metric | RagasScore]:
    """The metrics of a run, each `reasons=None` LLM metric replaced by a copy that asks for
    reasons as `default` says (the run's setting, else the judge's).

    A metric with its own `reasons` (True or False), a metric that sends no request and an
    aggregate (`RagasScore`) are returned as they are; the instances given are never changed,
    so one metric object can serve runs with different settings.
    """
    if not isinstance(default, bool):
        raise ConfigError(f"reasons must be True or False for a run, got {default!r}")
    resolved: list[Metric | RagasScore] = []
    for metric in metrics:
        if isinstance(metric, Metric) and metric.reasons is None and metric.uses_llm:
            metric = copy.copy(metric)
            metric.reasons = default
        resolved.append(metric)
    return resolved


def with_thresholds(
    metrics: Iterable[Metric | RagasScore],
    thresholds: Mapping[str, float] | None = None,
    strict: Iterable[str] = (),
) -> list[Metric | RagasScore]:
    """The metrics of a run with the run's thresholds (`--threshold faithfulness=0.8`) and
    strict modes (`--strict faithfulness`) set, by metric name, on copies (the instances given
    are never changed). A name that is not a metric of the run is refused."""
    thresholds = dict(thresholds or {})
    strict = set(strict)
    names = {m.name for m in metrics if isinstance(m, Metric)}
    unknown = sorted((set(thresholds) | strict) - names)
    if unknown:
        raise ConfigError(
            f"a threshold names {unknown}, which the run does not score; its metrics: "
            f"{sorted(names)}"
        )
    resolved: list[Metric | RagasScore] = []
    for metric in metrics:
        if isinstance(metric, Metric) and (metric.name in thresholds or metric.name in strict):
            metric = copy.copy(metric)
            set_threshold(
                metric,
                thresholds.get(metric.name, metric.threshold),
                metric.strict or metric.name in strict,
            )
        resolved.append(metric)
    return resolved


__all__ = [
    "BUILT",
    "CORE",
    "REGISTRY",
    "AnswerAccuracy",
    "AnswerCorrectness",
    "AnswerRelevancy",
    "AnswerRelevancyLLM",
    "Context",
    "ContextPrecision",
    "ContextPrecisionIDs",
    "ContextPrecisionNonLLM",
    "ContextPrecisionWithoutReference",
    "ContextRecall",
    "ContextRecallIDs",
    "ContextRecallNonLLM",
    "ContextRelevance",
    "ContextualRelevancy",
    "Faithfulness",
    "GEval",
    "Hallucination",
    "Metric",
    "MetricInfo",
    "RagasScore",
    "ResponseGroundedness",
    "RubricLevel",
    "RubricScore",
    "refuse_built_by_name",
    "resolve",
    "with_reasons",
    "with_thresholds",
]
