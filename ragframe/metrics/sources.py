"""The public references the metrics follow, named once: each metric's `MetricInfo.source`
cites its peers' documentation or the paper by these addresses, so a user can read the
definition a score is compared with."""

from __future__ import annotations

#: ragas's metric pages (append a page's slug, e.g. "faithfulness/").
RAGAS = "https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/"
#: deepeval's metric pages (append a metric's slug, e.g. "faithfulness").
DEEPEVAL = "https://deepeval.com/docs/metrics-"
#: llm4s, the Scala library whose org.llm4s.rag.evaluation.metrics document their algorithms.
LLM4S = "https://github.com/llm4s/llm4s"
#: Es et al. 2023, "RAGAS: Automated Evaluation of Retrieval Augmented Generation".
RAGAS_PAPER = "https://arxiv.org/abs/2309.15217"
#: Liu et al. 2023, "G-Eval: NLG Evaluation using GPT-4 with Better Human Alignment".
G_EVAL_PAPER = "https://arxiv.org/abs/2303.16634"

__all__ = ["DEEPEVAL", "G_EVAL_PAPER", "LLM4S", "RAGAS", "RAGAS_PAPER"]
