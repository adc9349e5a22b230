"""Score the benchmark rows with deepeval's ``evaluate`` against an OpenAI-compatible endpoint.

Run with bench/peers/.venv-deepeval/bin/python. It uses deepeval's GPTModel pointed at the
endpoint (with gpt-4o-mini as the model name deepeval sends ``response_format`` json_schema,
its structured-output path) and deepeval's default AsyncConfig (20 test cases at once) and
metric settings (reasons on, threshold 0.5). Two settings differ from the defaults, and why:
``ignore_errors=True``, because the default aborts the whole run on the first failing row and
then no per-row failure count exists; and no cache or result display, so every answer is paid
for and nothing waits on a terminal.
"""

from __future__ import annotations

import importlib.metadata as md
import math
import os
import time
from collections import Counter
from typing import Any

from runner import parse_args, read_rows, timed_call, write_result

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_NO_INSPECT_PROMPT", "1")


def main() -> None:
    args = parse_args(__doc__)
    t_import = time.monotonic()
    from deepeval import evaluate
    from deepeval.evaluate.configs import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig
    from deepeval.metrics import (
        AnswerRelevancyMetric,
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        FaithfulnessMetric,
    )
    from deepeval.models import GPTModel
    from deepeval.test_case import LLMTestCase

    import_s = time.monotonic() - t_import
    rows = read_rows(args.rows)
    names = args.metrics.split(",")
    model = GPTModel(model=args.model, base_url=args.base_url, api_key="sk-fake-local")
    classes: dict[str, Any] = {
        "faithfulness": FaithfulnessMetric,
        "answer_relevancy": AnswerRelevancyMetric,
        "context_precision": ContextualPrecisionMetric,
        "context_recall": ContextualRecallMetric,
    }
    metrics = [classes[n](model=model) for n in names]
    cases = [
        LLMTestCase(
            name=f"row-{i}",
            input=r["question"],
            actual_output=r["answer"],
            retrieval_context=r["contexts"],
            expected_output=r["ground_truth"],
        )
        for i, r in enumerate(rows)
    ]
    async_config = AsyncConfig()
    out: dict[str, Any] = {
        "framework": "deepeval",
        "versions": {k: md.version(k) for k in ("deepeval", "openai")},
        "config": {"max_concurrent": async_config.max_concurrent, "ignore_errors": True},
        "import_s": round(import_s, 2),
        "rows": len(rows),
    }
    result = timed_call(
        out,
        args.out,
        lambda: evaluate(
            cases,
            metrics,
            async_config=async_config,
            display_config=DisplayConfig(
                show_indicator=False, print_results=False, inspect_after_run=False
            ),
            cache_config=CacheConfig(write_cache=False, use_cache=False),
            error_config=ErrorConfig(ignore_errors=True),
        ),
    )
    # Results may come back in completion order; the case name carries the row.
    by_row: dict[int, Any] = {}
    for tr in result.test_results:
        by_row[int(tr.name.split("-")[1])] = tr
    out["returned_in_order"] = [int(tr.name.split("-")[1]) for tr in result.test_results] == list(
        range(len(result.test_results))
    )
    out["rows_returned"] = len(by_row)
    scores: dict[str, list[float | None]] = {n: [] for n in names}
    errors: dict[str, Counter[str]] = {n: Counter() for n in names}
    for i in range(len(rows)):
        tr = by_row.get(i)
        data = {d.name: d for d in (tr.metrics_data or [])} if tr is not None else {}
        for n, metric in zip(names, metrics, strict=True):
            d = data.get(metric.__name__)
            score = None if d is None else d.score
            if d is not None and d.error:
                errors[n][d.error[:300]] += 1
                score = None
            if d is None:
                errors[n]["row missing from the results"] += 1
            ok = isinstance(score, int | float) and not math.isnan(score)
            scores[n].append(float(score) if ok else None)  # type: ignore[arg-type]
    write_result(out, args.out, scores, {n: dict(c.most_common(10)) for n, c in errors.items()})


if __name__ == "__main__":
    main()
