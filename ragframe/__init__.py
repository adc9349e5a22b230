"""ragframe: score RAG outputs in bulk. Polars frames and Parquet logs in, typed scores out.

>>> import polars as pl, ragframe
>>> scored = df.pipe(ragframe.evaluate, metrics=["faithfulness", "context_recall"])
"""

from __future__ import annotations

__version__ = "0.1.0"

from ragframe.catalog import catalog
from ragframe.compare import Comparison, compare
from ragframe.errors import (
    BudgetExceeded,
    ConfigError,
    InputError,
    JudgeError,
    RagframeError,
)
from ragframe.evaluate import (
    RunResult,
    aestimate,
    aevaluate,
    arun,
    estimate,
    evaluate,
    run,
)
from ragframe.io import read_metadata
from ragframe.judge import Judge
from ragframe.judge.batch import BatchJob
from ragframe.metrics import (
    REGISTRY,
    AnswerAccuracy,
    AnswerCorrectness,
    AnswerRelevancy,
    AnswerRelevancyLLM,
    ContextPrecision,
    ContextPrecisionIDs,
    ContextPrecisionNonLLM,
    ContextPrecisionWithoutReference,
    ContextRecall,
    ContextRecallIDs,
    ContextRecallNonLLM,
    ContextRelevance,
    ContextualRelevancy,
    Faithfulness,
    GEval,
    Hallucination,
    Metric,
    RagasScore,
    ResponseGroundedness,
    RubricLevel,
    RubricScore,
)

__all__ = [
    "REGISTRY",
    "AnswerAccuracy",
    "AnswerCorrectness",
    "AnswerRelevancy",
    "AnswerRelevancyLLM",
    "BatchJob",
    "BudgetExceeded",
    "Comparison",
    "ConfigError",
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
    "InputError",
    "Judge",
    "JudgeError",
    "Metric",
    "RagasScore",
    "RagframeError",
    "ResponseGroundedness",
    "RubricLevel",
    "RubricScore",
    "RunResult",
    "__version__",
    "aestimate",
    "aevaluate",
    "arun",
    "catalog",
    "compare",
    "estimate",
    "evaluate",
    "read_metadata",
    "run",
]
