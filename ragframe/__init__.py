"""ragframe: score RAG outputs in bulk. Polars frames and Parquet logs in, typed scores out.

>>> import polars as pl, ragframe
>>> scored = df.pipe(ragframe.evaluate, metrics=["faithfulness", "context_recall"])
"""

from __future__ import annotations

__version__ = "0.1.0"

from ragframe.errors import (
    BudgetExceeded,
    ConfigError,
    InputError,
    JudgeError,
    RagframeError,
)
from ragframe.evaluate import RunResult, aevaluate, arun, evaluate, run
from ragframe.io import read_metadata
from ragframe.judge import Judge
from ragframe.metrics import (
    AnswerRelevancy,
    ContextPrecision,
    ContextPrecisionWithoutReference,
    ContextRecall,
    Faithfulness,
    Metric,
)

__all__ = [
    "AnswerRelevancy",
    "BudgetExceeded",
    "ConfigError",
    "ContextPrecision",
    "ContextPrecisionWithoutReference",
    "ContextRecall",
    "Faithfulness",
    "InputError",
    "Judge",
    "JudgeError",
    "Metric",
    "RagframeError",
    "RunResult",
    "__version__",
    "aevaluate",
    "arun",
    "evaluate",
    "read_metadata",
    "run",
]
