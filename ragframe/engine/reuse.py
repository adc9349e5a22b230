"""Reuse what a metric scored before: a chunk whose inputs, metric, judge and code are all the
same as when it was last scored gets that metric's columns back from the cache file, instead
of rebuilding every prompt, hashing every request and decoding every cached answer again.

Why it is safe: the answer cache already makes a rerun send nothing, and a metric's columns
are a function of its input columns, its settings, the judge's answer-shaping settings, the
code, and the answers. The key is sha256 of all of these but the answers:

- each input column the metric reads (ROW_ID, `requires`, the `optional` ones present), after
  `select_inputs` has mapped and cut them (`column_digest`);
- the metric: its class (module and name), its instance settings (`vars`: reasons, threshold,
  params, written out by `_canonical`), the prompt hashes of its tasks, and, for a class or
  function defined outside ragframe, the source file that holds it (and those of every class
  it inherits from outside ragframe);
- the judge: model, endpoint host, embedder, sampling, token caps, text cut, structured mode
  (`judge_part`); not the pool's limits, retries, price or key, which shape no answer;
- ragframe's own source and prompts, and the Polars and numpy versions (`code_part`).

The answers are covered by keeping columns only when none failed: a chunk in which any answer
the metrics asked for (or any text to embed) came back as a failure keeps nothing, so that a
rerun sends those requests again (or, with `retry_failed`, sends the remembered ones), as
before. A metric is never reused when its settings cannot be written out in full and the same
way in every process (an object that is not plain data, a lambda or a closure, a class made by
`exec` or `type()`, which no file holds). Code that a metric of your own calls in other files
is not seen: while you edit such code, set RAGFRAME_NO_REUSE=1 (or change a setting).

Only a live session with a cache file reuses (a dry run or a Batch API pass still looks each
answer up); `Judge(cache=False)` turns it off with the cache, and RAGFRAME_NO_REUSE=1 alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import io
import json
import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.judge.cache import CacheWriteError
from ragframe.judge.client import JudgeSession
from ragframe.metrics import Metric
from ragframe.metrics.base import ROW_ID

#: Bumped when what is kept changes shape, so older entries are passed over.
FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]


def reuse_enabled(session: JudgeSession) -> bool:
    """Whether `session` may reuse and keep scored columns (see the module docstring)."""
    if os.environ.get("RAGFRAME_NO_REUSE", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    return session.backend == "live" and session.judge.cache_path is not None


@functools.cache
def code_part() -> str:
    """ragframe's source and prompt files, and the versions of what computes the scores."""
    import numpy as np

    digest = hashlib.sha256(f"{FORMAT} {pl.__version__} {np.__version__}".encode())
    for path in sorted(_PACKAGE.rglob("*")):
        if path.is_file() and (path.suffix == ".py" or "prompts" in path.parts):
            digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def judge_part(session: JudgeSession) -> str:
    """The judge settings that shape an answer or what a metric makes of it."""
    judge = session.judge
    shaping = {
        "model": judge.model,
        "endpoint": judge.endpoint_host,
        "embedding": judge.embedding_choice(),
        "temperature": judge.temperature,
        "seed": judge.seed,
        "logprobs": judge.logprobs,
        "max_tokens": judge.max_tokens_cap,
        "output_bounds": judge.output_bounds,
        "max_text_chars": judge.max_text_chars,
        "embedding_max_tokens": judge.embedding_max_tokens,
        "structured": judge.structured,
        "reasons": judge.reasons,
    }
    return json.dumps(shaping, sort_keys=True, default=repr)


class _NotPlain(Exception):
    """A setting that cannot be written out the same way in every process."""


def metric_part(metric: Metric) -> str | None:
    """The metric's identity and settings; None when they cannot be written out in full and
    the same way in every process (then it is never reused)."""
    cls = type(metric)
    try:
        sources = [_source(base) for base in cls.__mro__ if _outside(base)]
        state = _canonical(vars(metric))
    except _NotPlain:
        return None
    prompts = [task.prompt_hash for task in metric.tasks()]
    return json.dumps([cls.__module__, cls.__qualname__, state, prompts, sources])


def _outside(thing: Any) -> bool:
    """Defined outside ragframe (whose own source is in `code_part`)."""
    return thing is not object and not getattr(thing, "__module__", "").startswith("ragframe.")


def _source(thing: Any) -> str:
    """sha256 of the file that holds a class's or function's source."""
    try:
        path = inspect.getsourcefile(thing)
    except TypeError:  # made by exec or type(), or built in: no file holds it
        raise _NotPlain from None
    if path is None or not Path(path).is_file():
        raise _NotPlain
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _canonical(value: Any) -> Any:
    """`value` as JSON-able data, the same in every process (sets sorted, dicts by key), or
    _NotPlain: plain data, enums, paths, data types, dataclasses of those, and named
    functions (a function outside ragframe by its file)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, Path | pl.DataType):
        return [type(value).__name__, str(value)]
    if isinstance(value, list | tuple):
        return [type(value).__name__, [_canonical(item) for item in value]]
    if isinstance(value, set | frozenset):
        return ["set", sorted(json.dumps(_canonical(item)) for item in value)]
    if isinstance(value, dict):
        pairs = [(json.dumps(_canonical(k)), _canonical(v)) for k, v in value.items()]
        return ["dict", sorted(pairs, key=lambda pair: pair[0])]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return [type(value).__module__, type(value).__qualname__, fields]
    if inspect.isfunction(value) and "<" not in value.__qualname__:  # not a lambda or closure
        named = [value.__module__, value.__qualname__]
        return [*named, _source(value)] if _outside(value) else named
    raise _NotPlain


#: Seeds of the two 64-bit row hashes a column digest is made of (128 bits a row).
_SEEDS = (0x5EED_0001, 0x5EED_0002)


def column_digest(series: pl.Series) -> bytes:
    """A digest of a column: its name, type, length, and each row's value as two seeded
    64-bit Polars hashes (nulls included), folded by sha256.

    Polars hashes a column on its own threads without a copy (sha256 of the column's Arrow
    IPC bytes cost 4x as much); its hash is stable within a Polars version, which the key
    holds (`code_part`). 128 bits a row: a changed value goes unnoticed with odds of 2^-128.
    """
    digest = hashlib.sha256(f"{series.name}\0{series.dtype}\0{series.len()}\0".encode())
    for seed in _SEEDS:
        digest.update(series.hash(seed=seed).to_numpy().tobytes())
    return digest.digest()


class Reuse:
    """One chunk's reuse: the keys of its metrics, the columns found, and what to keep."""

    def __init__(self, session: JudgeSession, inputs: pl.DataFrame) -> None:
        self.session = session
        self.inputs = inputs
        self._digests: dict[str, bytes] = {}
        self._common = hashlib.sha256(f"{code_part()}\n{judge_part(session)}\n".encode())
        self.keys: dict[str, str] = {}  # metric name -> key (metrics that may be reused)

    def _key(self, metric: Metric) -> str | None:
        part = metric_part(metric)
        if part is None:
            return None
        digest = self._common.copy()
        digest.update(part.encode())
        optional = [c for c in metric.optional if c in self.inputs.columns]
        for name in (ROW_ID, *metric.requires, *optional):
            if name not in self._digests:
                self._digests[name] = column_digest(self.inputs.get_column(name))
            digest.update(name.encode() + b"\0" + self._digests[name])
        return digest.hexdigest()

    async def found(self, metrics: Sequence[Metric]) -> dict[str, pl.DataFrame]:
        """The kept columns of each metric that has them, by metric name; each is counted in
        the stats (`reused`) and on the progress bar (its tasks' prompts, done unsent)."""
        for metric in metrics:
            key = self._key(metric)
            if key is not None:
                self.keys[metric.name] = key
        cache = self.session.judge.cache
        if cache is None or not self.keys:
            return {}
        blobs = await cache.aget_scored(list(self.keys.values()))
        found: dict[str, pl.DataFrame] = {}
        for metric in metrics:
            blob = blobs.get(self.keys.get(metric.name, ""))
            frame = _read(blob, metric, self.inputs.height) if blob is not None else None
            if frame is None:
                continue
            found[metric.name] = frame
            self.session.stats.reused += frame.height
            for task in metric.tasks():
                self.session.progress.reuse(task.name, frame.height)
        return found

    async def keep(self, scored: Sequence[tuple[Metric, pl.DataFrame]], *, failed: bool) -> None:
        """Keep each metric's freshly scored columns, unless an answer of the chunk `failed`
        (a rerun must ask those again) or an embedding did."""
        if failed or self.session.embedding_errors:
            return
        cache = self.session.judge.cache
        items = [
            (self.keys[metric.name], _write(frame))
            for metric, frame in scored
            if metric.name in self.keys
        ]
        if cache is None or not items:
            return
        # A failed write is reported by the answers' own writes; a rerun scores again.
        with contextlib.suppress(CacheWriteError):
            await cache.aput_scored(items)


def _write(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_ipc(buffer, compression="lz4")
    return buffer.getvalue()


def _read(blob: bytes, metric: Metric, height: int) -> pl.DataFrame | None:
    """The kept frame, if it is what `metric.run` gives for `height` rows (else None: score
    again)."""
    try:
        frame = pl.read_ipc(io.BytesIO(blob))
    except Exception:  # a damaged entry costs a rescore, never a wrong score
        return None
    expected = {ROW_ID, metric.name, f"{metric.name}_detail"}
    if frame.height != height or not expected <= set(frame.columns):
        return None
    return frame
