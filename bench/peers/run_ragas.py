"""Score the benchmark rows with ragas (legacy ``evaluate``) against an OpenAI-compatible endpoint.

Run with bench/peers/.venv-ragas/bin/python (ragas pins its own openai and langchain). It uses
ragas' documented path for a custom endpoint: langchain's ChatOpenAI and OpenAIEmbeddings
wrapped by ragas, with ragas' default RunConfig (16 workers, 180 s per job, 10 retries).
``check_embedding_ctx_length=False`` stops langchain fetching a tiktoken file, which fails
offline. Exceptions inside a job are logged by ragas and the score becomes NaN; a logging
handler collects those messages so that the failures can be reported.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from typing import Any

from runner import (
    RAGAS_PACKAGES,
    Collect,
    parse_args,
    read_rows,
    timed_call,
    versions,
    write_result,
)

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")


def main() -> None:
    args = parse_args(__doc__)
    collect = Collect()
    logging.getLogger().addHandler(collect)
    t_import = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from ragas import EvaluationDataset, evaluate
        from ragas.embeddings import LangchainEmbeddingsWrapper
        from ragas.llms import LangchainLLMWrapper
        from ragas.metrics import (
            AnswerRelevancy,
            ContextPrecision,
            ContextRecall,
            Faithfulness,
        )
        from ragas.run_config import RunConfig
    import_s = time.monotonic() - t_import
    rows = read_rows(args.rows)
    names = args.metrics.split(",")
    classes: dict[str, Any] = {
        "faithfulness": Faithfulness,
        "answer_relevancy": AnswerRelevancy,
        "context_precision": ContextPrecision,
        "context_recall": ContextRecall,
    }
    metrics = [classes[n]() for n in names]
    llm = LangchainLLMWrapper(
        ChatOpenAI(model=args.model, base_url=args.base_url, api_key="sk-fake-local")
    )
    emb = LangchainEmbeddingsWrapper(
        OpenAIEmbeddings(
            model="text-embedding-3-small",
            base_url=args.base_url,
            api_key="sk-fake-local",
            check_embedding_ctx_length=False,
        )
    )
    dataset = EvaluationDataset.from_list(
        [
            {
                "user_input": r["question"],
                "response": r["answer"],
                "retrieved_contexts": r["contexts"],
                "reference": r["ground_truth"],
            }
            for r in rows
        ]
    )
    config = RunConfig()
    out: dict[str, Any] = {
        "framework": "ragas",
        "versions": versions(RAGAS_PACKAGES),
        "config": {
            "max_workers": config.max_workers,
            "timeout": config.timeout,
            "max_retries": config.max_retries,
        },
        "import_s": round(import_s, 2),
        "rows": len(rows),
    }

    def score() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return evaluate(
                dataset,
                metrics=metrics,
                llm=llm,
                embeddings=emb,
                run_config=config,
                show_progress=False,
            )

    result = timed_call(
        out, args.out, score, lambda: {"errors": dict(collect.counts.most_common(20))}
    )
    scores: dict[str, list[float | None]] = {}
    for name, metric in zip(names, metrics, strict=True):
        raw = [s[metric.name] for s in result.scores]
        scores[name] = [
            None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in raw
        ]
    write_result(out, args.out, scores, dict(collect.counts.most_common(20)))


if __name__ == "__main__":
    main()
