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
from ragframe.decide.alpha import alpha_interval, krippendorff_alpha
from ragframe.decide.calibration import Calibration, apply_calibration, calibrate
from ragframe.decide.human import human_estimate, human_estimate_difference, labels_needed
from ragframe.decide.label_sheet import label_sheet
from ragframe.decide.pairwise import summarize_pairs
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
from ragframe.export import export_scores
from ragframe.gates import EXIT_GATE_FAILED, GateResult, assert_scores, check_gates
from ragframe.inputs.traces import read_traces
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
from ragframe.metrics.pairwise import Pairwise, run_pairs
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
    "Calibration",
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
    "Pairwise",
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
    "alpha_interval",
    "apply_calibration",
    "arun",
    "assert_scores",
    "calibrate",
    "catalog",
    "check_gates",
    "compare",
    "estimate",
    "evaluate",
    "export_scores",
    "human_estimate",
    "human_estimate_difference",
    "krippendorff_alpha",
    "label_sheet",
    "labels_needed",
    "mean_interval",
    "read_metadata",
    "read_traces",
    "report",
    "run",
    "run_pairs",
    "score_arrow",
    "summarize",
    "summarize_pairs",
]
