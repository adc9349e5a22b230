"""ragframe: score RAG outputs in bulk. Polars frames and Parquet logs in, typed scores out.

>>> import polars as pl, ragframe
>>> scored = df.pipe(ragframe.evaluate, metrics=["faithfulness", "context_recall"])
"""

from __future__ import annotations

__version__ = "0.1.0"

from ragframe.agreement import agreement
from ragframe.arrow import score_arrow
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
from ragframe.gates import EXIT_GATE_FAILED, GateResult, assert_scores, check_gates
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
from ragframe.report import report
from ragframe.stats import mean_interval, summarize

__all__ = [
    "EXIT_GATE_FAILED",
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
    "GateResult",
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
    "agreement",
    "arun",
    "assert_scores",
    "catalog",
    "check_gates",
    "compare",
    "estimate",
    "evaluate",
    "mean_interval",
    "read_metadata",
    "report",
    "run",
    "score_arrow",
    "summarize",
]
