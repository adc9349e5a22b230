"""Generate a test set with ragframe (`ragframe.generate_run`) against an OpenAI-compatible
endpoint.

Run with the repository's venv. Defaults throughout (types single_hop, multi_hop,
unanswerable; 3 questions per request; oversample 1.5; every check on), except
`concurrency` (the benchmark's 32 slots) and `cache=False`, so that every answer is paid
for. The corpus's documents go in as they are; ragframe chunks them itself.
"""

from __future__ import annotations

import importlib.metadata as md
import time
from collections import Counter
from typing import Any

from gen_runner import parse_args, read_corpus, timed, write


def main() -> None:
    args = parse_args(__doc__)
    t_import = time.monotonic()
    import openai  # noqa: F401  (imported lazily by a run; counted here, not in its wall)
    import polars as pl

    import ragframe

    import_s = time.monotonic() - t_import
    docs = read_corpus(args.corpus)
    corpus = pl.DataFrame({"doc_id": [d["id"] for d in docs], "text": [d["text"] for d in docs]})
    judge = ragframe.Judge(
        args.model,
        base_url=args.base_url,
        api_key="sk-fake-local",
        embedding_model=args.embedding_model,
        concurrency=args.concurrency,
        cache=False,
        progress=False,
    )
    out: dict[str, Any] = {
        "framework": "ragframe",
        "versions": {"ragframe": ragframe.__version__, "openai": md.version("openai")},
        "config": {"concurrency": args.concurrency, "cache": False, "defaults": "all others"},
        "import_s": round(import_s, 2),
        "documents": len(docs),
        "asked": args.n,
    }

    def run() -> Any:
        return ragframe.generate_run(corpus, n=args.n, judge=judge, id_column="doc_id")

    result = timed(out, args.out, run)
    rejected = result.rejected
    out["produced"] = result.frame.height
    out["candidates"] = sum(result.proposed.values())
    out["generation_requests"] = dict(result.requests)
    out["rejected"] = rejected.height
    out["surplus"] = result.surplus.height
    out["rejected_by"] = dict(Counter(rejected.get_column("rejected_by").to_list()))
    out["kept_by_type"] = dict(Counter(result.frame.get_column("question_type").to_list()))
    # A rejection is an error (not a verdict) when a request or its parse failed.
    errors = rejected.filter(pl.col("reason").str.contains("(?i)request failed|error"))
    out["lost_to_errors"] = errors.height
    out["rejected_reasons_sample"] = rejected.select("rejected_by", "reason").head(8).to_dicts()
    s = result.stats
    out["own_stats"] = {
        "requests": s.requests,
        "embedding_requests": s.embedding_requests,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "failures": s.failures,
        "retries": s.retries,
        "repairs": s.repairs,
    }
    out["summary"] = result.summary()
    sample = result.frame.select("question", "ground_truth", "question_type").head(3)
    out["sample"] = sample.to_dicts()
    write(out, args.out)


if __name__ == "__main__":
    main()
