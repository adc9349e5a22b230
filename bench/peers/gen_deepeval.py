"""Generate a test set with deepeval's Synthesizer against an OpenAI-compatible endpoint.

Run with bench/peers/.venv-deepeval/bin/python (deepeval 4.3.1). The model is deepeval's
OpenAIModel (GPTModel is deprecated in 4.3) pointed at the endpoint (as `gpt-4o-mini`,
deepeval sends `response_format` json_schema where it asks for a schema; its evolutions and
expected outputs are free text); `Synthesizer(max_concurrent=concurrency)` with its
default FiltrationConfig (quality threshold 0.5, up to 3 critic rounds), EvolutionConfig (1
evolution drawn from its 7 kinds, equal weights) and StylingConfig (none).

The documents go in through `generate_goldens_from_contexts`, one document per context,
`max_goldens_per_context = ceil(n / documents)`, expected outputs on. Why not
`generate_goldens_from_docs`: its context construction needs `chromadb` and langchain's text
splitters (not installed with deepeval) and counts chunk sizes with tiktoken, whose encoding
file downloads on first use and fails offline; ExpertQA passages are at most 1,000
characters, so each is one context as its 1,024-token chunking would leave it. What this
skips: the context-construction stage's own LLM calls (a quality score per chunk, with
retries) and its grouping of similar chunks into multi-chunk contexts.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import math
import os
import time
from collections import Counter
from typing import Any

from gen_runner import parse_args, read_corpus, timed, write
from runner import Collect

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")


def _blank(text: Any) -> bool:
    return not isinstance(text, str) or text.strip() in ("", "{}")


def main() -> None:
    args = parse_args(__doc__)
    collect = Collect()
    logging.getLogger().addHandler(collect)
    t_import = time.monotonic()
    from deepeval.models import OpenAIModel
    from deepeval.synthesizer import Synthesizer

    import_s = time.monotonic() - t_import
    docs = read_corpus(args.corpus)
    per_context = math.ceil(args.n / len(docs))
    model = OpenAIModel(model=args.model, base_url=args.base_url, api_key="sk-fake-local")
    synthesizer = Synthesizer(model=model, async_mode=True, max_concurrent=args.concurrency)
    out: dict[str, Any] = {
        "framework": "deepeval",
        "versions": {k: md.version(k) for k in ("deepeval", "openai")},
        "config": {
            "entry": "Synthesizer.generate_goldens_from_contexts",
            "max_concurrent": args.concurrency,
            "max_goldens_per_context": per_context,
            "filtration": vars(synthesizer.filtration_config) | {"critic_model": "same"},
            "evolution": {
                "num_evolutions": synthesizer.evolution_config.num_evolutions,
                "evolutions": [e.value for e in synthesizer.evolution_config.evolutions],
            },
        },
        "import_s": round(import_s, 2),
        "documents": len(docs),
        "asked": len(docs) * per_context,
        "asked_n": args.n,
    }
    try:
        goldens = timed(
            out,
            args.out,
            lambda: synthesizer.generate_goldens_from_contexts(
                contexts=[[d["text"]] for d in docs],
                include_expected_output=True,
                max_goldens_per_context=per_context,
            ),
        )
    except BaseException:
        out["errors"] = dict(collect.counts.most_common(20))
        write(out, args.out)
        raise
    usable = [g for g in goldens if not _blank(g.input) and not _blank(g.expected_output)]
    out["returned"] = len(goldens)
    out["produced"] = len(usable)
    out["blank_or_braces"] = len(goldens) - len(usable)
    out["evolutions_used"] = dict(
        Counter(e for g in goldens for e in (g.additional_metadata or {}).get("evolutions", []))
    )
    out["errors"] = dict(collect.counts.most_common(20))
    out["sample"] = [
        {"input": g.input, "expected_output": (g.expected_output or "")[:300]} for g in goldens[:3]
    ]
    write(out, args.out)


if __name__ == "__main__":
    main()
