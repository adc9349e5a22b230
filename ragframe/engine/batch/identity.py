"""A job's identity: the judge, metrics and input it was made for, and whether what is
given now matches.

A job's answers were paid for with its metrics' prompts: metrics with other settings would
ask other questions, so the answers collected would not be used. They are refused, naming
the setting; a metric is rebuilt from its record after a restart only when it would ask
exactly the same questions. Another model, endpoint or input is refused the same way.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.errors import ConfigError, RagframeError
from ragframe.judge.batch.manifest import InputInfo, JudgeInfo, Manifest, MetricRecord
from ragframe.judge.client import Judge

#: What a pass scores: the frame, the metrics, the column renames.
Inputs = tuple[pl.DataFrame, list[Any], dict[str, str] | None]

_NOT_SET = "(not set)"


def metric_record(metric: Any) -> MetricRecord:
    """How the manifest records `metric` (a Metric, or a RagasScore over metrics)."""
    from ragframe.metrics import Metric

    if isinstance(metric, Metric):
        return MetricRecord(
            name=metric.name,
            cls=type(metric).__name__,
            config=json.loads(json.dumps(metric.config(), default=str)),
            prompt_hashes={t.name: t.prompt_hash for t in metric.tasks()},
        )
    return MetricRecord(
        name=metric.name,
        cls=type(metric).__name__,
        config={"of": list(metric.of)},
        prompt_hashes={},
    )


def identity(records: list[MetricRecord]) -> list[tuple[str, str]]:
    """What names a job's metrics; their settings are compared by `check_settings`."""
    return [(r.name, r.cls) for r in records]


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide what a metric asks: its config() without what it fills in as
    it runs (a setting `x` whose `x_source` is "generated", such as G-Eval's steps)."""
    generated = {
        key[: -len("_source")]
        for key, value in config.items()
        if key.endswith("_source") and value == "generated"
    }
    return {k: v for k, v in config.items() if k not in generated}


def check_settings(recorded: list[MetricRecord], given: list[MetricRecord], manifest: Path) -> None:
    """Refuse metrics whose settings differ from the job's: their prompts would differ from
    the ones paid for, so the answers collected would not be used."""
    for old, new in zip(recorded, given, strict=True):
        before, now = _settings(old.config), _settings(new.config)
        for key in sorted(before.keys() | now.keys(), key=str):
            if before.get(key, _NOT_SET) != now.get(key, _NOT_SET):
                raise ConfigError(
                    f"{str(manifest)!r} was submitted with {old.name} {key}="
                    f"{before.get(key, _NOT_SET)!r}, not {now.get(key, _NOT_SET)!r}: "
                    "pass the job's settings, or use another --manifest for the new ones"
                )


def metric_from_record(record: MetricRecord) -> Any:
    """Rebuild a metric after a restart; refuse when it would not ask the same questions."""
    from ragframe.metrics import REGISTRY, RagasScore

    if record.cls == "RagasScore":
        return RagasScore(of=tuple(record.config["of"]), name=record.name)
    cls = REGISTRY.get(record.name)
    candidates = []
    if cls is not None and cls.__name__ == record.cls:
        candidates.append(lambda: cls())
        candidates.append(lambda: cls(**record.config))
    for make in candidates:
        try:
            metric = make()
        except (TypeError, ValueError, RagframeError):
            continue
        if metric_record(metric) == record:
            return metric
    raise ConfigError(
        f"cannot rebuild metric {record.name!r} ({record.cls}, {record.config}) "
        "from the manifest: pass metrics=[...] as given to submit"
    )


# ------------------------------------------------------------------------ judge and input


def default_judge(m: Manifest | None) -> Judge:
    """The judge a job was made for (endpoint and key from the environment)."""
    if m is None:
        return Judge()
    info = m.judge
    return Judge(info.model, embedding_model=info.embedding_model, cache=info.cache or True)


def check_judge(judge: Judge, m: Manifest | None, path: Path) -> None:
    """Refuse a judge that cannot serve a batch job, or not the one the job was made for."""
    if judge.local:
        raise ConfigError(
            "the batch backend needs an OpenAI-compatible endpoint, not the embedded local "
            "judge: pass base_url/api_key (--base-url, $OPENAI_API_KEY). For vllm run-batch, "
            "give --base-url a label such as http://vllm-batch/v1 and --model the model name"
        )
    if judge.cache is None:
        raise ConfigError("the batch backend keeps its answers in the cache: use cache=True")
    if m is None:
        return
    info = m.judge
    if (judge.model, judge.endpoint_host) != (info.model, info.endpoint_host):
        raise ConfigError(
            f"{str(path)!r} was made for model {info.model!r} at "
            f"{info.endpoint_host!r}, not {judge.model!r} at {judge.endpoint_host!r}: "
            "pass the same --model and --base-url"
        )
    if info.cache and Path(info.cache) != judge.cache_path:
        warnings.warn(
            f"the manifest's answers are in the cache {info.cache}, but this judge uses "
            f"{judge.cache_path}; answers already collected will be requested again",
            stacklevel=3,
        )


def check_same_job(
    m: Manifest, rows: int, records: list[MetricRecord], cols: dict[str, str] | None, path: Path
) -> None:
    """Refuse other metrics, settings or input than the job's (its answers would not fit)."""
    if identity(m.metrics) != identity(records):
        raise ConfigError(
            f"{str(path)!r} belongs to a job with other metrics "
            f"({[r.name for r in m.metrics]}); use another --manifest"
        )
    check_settings(m.metrics, records, path)
    if m.input.rows != rows or m.columns != cols:
        raise ConfigError(
            f"{str(path)!r} belongs to a job over another input "
            f"({m.input.rows} rows, columns {m.columns}); use another --manifest"
        )


def new_manifest(
    judge: Judge,
    source: InputInfo,
    records: list[MetricRecord],
    cols: dict[str, str] | None,
    max_attempts: int,
) -> Manifest:
    """A new job's manifest (saved by its first submit or export)."""
    return Manifest(
        job=uuid.uuid4().hex[:16],
        input=source,
        metrics=records,
        columns=cols,
        judge=JudgeInfo(
            model=judge.model,
            endpoint_host=judge.endpoint_host,
            embedding_model=judge.embedding_model,
            cache=str(judge.cache_path) if judge.cache_path else None,
        ),
        max_attempts=max_attempts,
    )


def keep_input(data: Any, frame: pl.DataFrame, files_dir: Path) -> InputInfo:
    """The input's path; a frame given in memory is copied, so collect works after a restart."""
    if isinstance(data, str | Path):
        return InputInfo(path=str(Path(data).resolve()), copied=False, rows=frame.height)
    target = files_dir / "input.parquet"
    files_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".input.", suffix=".tmp", dir=files_dir)
    os.close(fd)
    frame.write_parquet(tmp)
    os.replace(tmp, target)
    return InputInfo(path=str(target.resolve()), copied=True, rows=frame.height)


def load_inputs(
    judge: Judge,
    m: Manifest,
    data: Any,
    metrics: Iterable[Any] | None,
    columns: Mapping[str, str] | None,
    path: Path,
) -> Inputs:
    """What a pass scores: given now, or what the manifest recorded."""
    from ragframe.engine.prepare import check_judge as check_metrics_judge
    from ragframe.inputs.columns import load_frame
    from ragframe.metrics import resolve

    frame = load_frame(data if data is not None else m.input.path)
    if frame.height != m.input.rows:
        raise ConfigError(
            f"the input now has {frame.height} rows, the job was submitted with "
            f"{m.input.rows}: pass the same data"
        )
    if metrics is not None:
        metric_list = resolve(metrics)
        records = [metric_record(x) for x in metric_list]
        if identity(records) != identity(m.metrics):
            raise ConfigError("these metrics differ from the ones the job was submitted with")
        check_settings(m.metrics, records, path)
    else:
        metric_list = [metric_from_record(r) for r in m.metrics]
    cols = dict(columns) if columns else m.columns
    check_metrics_judge(judge, metric_list)
    return frame, metric_list, cols
