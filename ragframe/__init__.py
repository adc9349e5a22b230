"""ragframe: score RAG outputs in bulk. Polars frames and Parquet logs in, typed scores out.

This module is the public API only. The package is built in layers, each importing only the
layers below it (`tests/test_layers.py` keeps the order, and no import cycle):

    cli        the `ragframe` command, one module per subcommand
    ray        scaling out on Ray Data
    report     the HTML report          export   scores back to Phoenix, LangSmith, OTel
    decide     summaries, gates, compare, agreement, calibration, human estimates, pairwise
    engine     one run specification, executed in memory, streamed, on Arrow, in batches
    metrics    one file per metric family, the catalogue, thresholds
    judge      the only code that talks to an LLM
    inputs     files, traces, canonical columns, samples
    stats      means with honest intervals (pure numbers)
    errors, _version, prompts/                                   (the ground)

`testing` (the fake judge server) stands beside them, for tests and docs.

>>> import polars as pl, ragframe
>>> scored = df.pipe(ragframe.evaluate, metrics=["faithfulness", "context_recall"])
"""

from __future__ import annotations

from ragframe._version import __version__
from ragframe.decide.agreement import agreement
from ragframe.decide.calibration import Calibration, apply_calibration, calibrate
from ragframe.decide.compare import (
    Comparison,
    RegressionCheck,
    RegressionUnknownWarning,
    check_regression,
    compare,
)
from ragframe.decide.gates import EXIT_GATE_FAILED, GateResult, assert_scores, check_gates
from ragframe.decide.human import human_estimate, human_estimate_difference, labels_needed
from ragframe.decide.label_sheet import label_sheet
from ragframe.decide.pairwise import summarize_pairs
from ragframe.decide.summarize import Summary, summarize
from ragframe.engine.answer import aanswer, answer
from ragframe.engine.arrow import score_arrow
from ragframe.engine.batch import BatchJob
from ragframe.engine.generate import (
    GenerateResult,
    aestimate_generate,
    agenerate,
    agenerate_run,
    estimate_generate,
    generate,
    generate_run,
)
from ragframe.engine.result import RowsFailedWarning, RunResult
from ragframe.engine.run import aestimate, aevaluate, arun, estimate, evaluate, run
from ragframe.errors import (
    BudgetExceeded,
    ConfigError,
    InputError,
    JudgeError,
    RagframeError,
)
from ragframe.export import export_scores
from ragframe.inputs.io import read_metadata
from ragframe.inputs.traces import read_traces, write_traces
from ragframe.judge import Judge
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
from ragframe.metrics.catalog import catalog
from ragframe.metrics.pairwise import Pairwise, run_pairs
from ragframe.report import report, show
from ragframe.stats import mean_interval
from ragframe.stats.alpha import alpha_interval, krippendorff_alpha

# Grouped for the reader (what runs, then the metrics by family), not sorted.
__all__ = [  # noqa: RUF022
    # running, deciding, reporting
    "EXIT_GATE_FAILED",
    "BatchJob",
    "BudgetExceeded",
    "Calibration",
    "Comparison",
    "ConfigError",
    "GateResult",
    "GenerateResult",
    "InputError",
    "Judge",
    "JudgeError",
    "RagframeError",
    "RegressionCheck",
    "RegressionUnknownWarning",
    "RowsFailedWarning",
    "RunResult",
    "Summary",
    "__version__",
    "aanswer",
    "aestimate",
    "aestimate_generate",
    "aevaluate",
    "agenerate",
    "agenerate_run",
    "agreement",
    "alpha_interval",
    "answer",
    "apply_calibration",
    "arun",
    "assert_scores",
    "calibrate",
    "catalog",
    "check_gates",
    "check_regression",
    "compare",
    "estimate",
    "estimate_generate",
    "evaluate",
    "export_scores",
    "generate",
    "generate_run",
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
    "show",
    "summarize",
    "summarize_pairs",
    "write_traces",
    # metrics: ragas
    "Faithfulness",
    "AnswerRelevancy",
    "ContextPrecision",
    "ContextPrecisionWithoutReference",
    "ContextRecall",
    "AnswerCorrectness",
    "RagasScore",
    # metrics: ragas without an LLM
    "ContextPrecisionNonLLM",
    "ContextRecallNonLLM",
    "ContextPrecisionIDs",
    "ContextRecallIDs",
    # metrics: deepeval
    "AnswerRelevancyLLM",
    "ContextualRelevancy",
    "Hallucination",
    "GEval",
    # metrics: NVIDIA
    "AnswerAccuracy",
    "ContextRelevance",
    "ResponseGroundedness",
    # metrics: rubrics, pairs and the base class
    "RubricScore",
    "RubricLevel",
    "Pairwise",
    "Metric",
    "REGISTRY",
]
