"""Result lines into the answer cache: each answer validated as a live answer would be.

A line is matched to its request by custom_id (the request's cache key). An answer passes
the request's JSON Schema and its task's `finish` (indices 1..n, consistency) before it is
stored; a failed line or an unusable answer counts as a failed attempt in the manifest,
with what the retry needs to repair it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragframe.engine.batch.identity import metric_from_record
from ragframe.errors import RagframeError
from ragframe.judge.batch.jsonl import logprobs, read_result_line, request_schema, task_name
from ragframe.judge.batch.manifest import Manifest
from ragframe.judge.client import Judge
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.task import Task
from ragframe.judge.transport import Secrets


@dataclass
class Ingested:
    """What reading a set of result lines did."""

    answered: int = 0
    failed: int = 0
    unknown: int = 0  # lines of no request of this job
    seen: set[str] = field(default_factory=set)  # custom_ids that had a line

    def counts(self) -> dict[str, int]:
        return {"answered": self.answered, "failed": self.failed, "unknown": self.unknown}


def tasks_for(metrics: list[Any], m: Manifest) -> dict[str, Task]:
    """The tasks whose requests this job sends, by the name their requests carry (the
    json_schema name), so a stored answer passes the same `Task.finish` as a live one.

    The job's metrics (given, else rebuilt from the manifest where possible), then every
    catalogue metric with its defaults for tasks not found that way."""
    from ragframe.metrics import REGISTRY, Metric

    metrics = list(metrics)
    if not metrics:
        for record in m.metrics:
            with contextlib.suppress(RagframeError):
                metrics.append(metric_from_record(record))
    tasks: dict[str, Task] = {}
    for metric in [*metrics, *(cls() for cls in REGISTRY.values())]:
        if isinstance(metric, Metric):
            for task in metric.tasks():
                tasks.setdefault(task.name.replace(".", "_"), task)
    return tasks


def ingest(
    m: Manifest,
    lines: Iterable[dict[str, Any]],
    bodies: Mapping[str, dict[str, Any]],
    judge: Judge,
    tasks: Mapping[str, Task],
    secrets: Secrets | None = None,
) -> Ingested:
    """Validate each result line against its request and store the good ones.

    The credentials of the judge (`secrets`, default `Secrets.of(judge)`) are scrubbed from
    a line's error (all of them) and its answer (the secret-like ones) before either is
    kept, as `Transport.chat` does live: a batch's output file is the endpoint speaking, and
    may quote what it was sent.
    """
    secrets = secrets if secrets is not None else Secrets.of(judge)
    out = Ingested()
    for line in lines:
        cid, completion, reason = read_result_line(line)
        body = bodies.get(cid) if cid is not None else None
        if cid is None or body is None:
            out.unknown += 1
            continue
        if cid in out.seen:
            continue
        out.seen.add(cid)
        if completion is None:
            m.fail(cid, reason or "no answer", scrub=secrets.scrub)
            out.failed += 1
        elif _store(m, cid, completion, body, judge, tasks, secrets):
            out.answered += 1
        else:
            out.failed += 1
    return out


def _store(
    m: Manifest,
    cid: str,
    completion: dict[str, Any],
    body: dict[str, Any],
    judge: Judge,
    tasks: Mapping[str, Task],
    secrets: Secrets,
) -> bool:
    """Cache a usable answer (True), or count the attempt as failed with its repair."""
    choice = completion["choices"][0]
    content = secrets.scrub_answer((choice.get("message") or {}).get("content") or "")
    tokens, cached = _usage(completion)
    # Paid for whether the answer is usable or not, as the prompt and completion are.
    m.totals.cached_prompt_tokens = (m.totals.cached_prompt_tokens or 0) + cached
    try:
        _check(choice, content, body, tasks)
    except AnswerError as err:
        m.fail(
            cid,
            f"unusable answer ({err.kind}): {err.message}",
            scrub=secrets.scrub,
            content=content,
            repair=err.message,
            usage=tokens,
            scrub_content=secrets.scrub_answer,
        )
        return False
    earlier = m.failures.pop(cid).usage if cid in m.failures else (0, 0)
    paid = (tokens[0] + earlier[0], tokens[1] + earlier[1])
    cache = judge.cache
    assert cache is not None
    cache.put(
        cid,
        judge.model,
        {
            "content": content,
            "logprobs": logprobs(choice) if body.get("logprobs") else None,
            "usage": {"prompt_tokens": paid[0], "completion_tokens": paid[1]},
        },
    )
    totals = m.totals
    totals.answered += 1
    totals.prompt_tokens += tokens[0]
    totals.completion_tokens += tokens[1]
    return True


def _usage(completion: dict[str, Any]) -> tuple[tuple[int, int], int]:
    """(prompt, completion) tokens of a result line's answer, and of its prompt tokens those
    the provider took from its prompt cache (`usage.prompt_tokens_details.cached_tokens`:
    0 when it does not say, never more than the prompt), as a live answer's are read."""
    usage = completion.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return (prompt, int(usage.get("completion_tokens") or 0)), min(max(cached, 0), prompt)


def _check(
    choice: dict[str, Any], content: str, body: dict[str, Any], tasks: Mapping[str, Task]
) -> None:
    """Raise AnswerError when the answer is cut off or would not pass as a live answer."""
    if choice.get("finish_reason") == "length":
        raise AnswerError(
            "the answer was cut off at max_tokens; answer more briefly", kind="length"
        )
    schema = request_schema(body)
    if schema is not None:
        value = parse_answer(content, schema)
        task = tasks.get(task_name(body))
        if task is not None:  # indices 1..n, consistency: as a live answer
            task.finish(value)
