"""The OpenAI Files and Batches API: create batches exactly once, poll them, read results.

Every call takes the `openai.OpenAI` client (or a stand-in) and the manifest part it
updates; saving is the caller's (`save`), after each step a crash must not repeat.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ragframe.errors import EndpointError, RagframeError
from ragframe.judge.batch.jsonl import ENDPOINT, error_text, read_jsonl, request_bodies
from ragframe.judge.batch.manifest import (
    TERMINAL,
    Batch,
    BatchStatus,
    Manifest,
    Mode,
    RequestCounts,
    status_of,
)
from ragframe.judge.client import Judge
from ragframe.judge.config import client_endpoint
from ragframe.judge.transport import Secrets, scrub


def make_client(judge: Judge) -> Any:
    """An OpenAI client for the judge's endpoint, with the SDK's retries and a long timeout
    (uploads and downloads can be large)."""
    from openai import OpenAI

    base_url, headers = client_endpoint(judge.base_url)  # no user:password@ in logged URLs
    return OpenAI(
        base_url=base_url,
        api_key=judge._api_key or "not-needed",
        max_retries=3,
        timeout=max(judge.timeout, 300.0),
        default_headers=headers,
    )


@contextlib.contextmanager
def api_errors(judge: Judge) -> Iterator[None]:
    """Files and Batches API errors as ragframe errors, the key scrubbed: a refused key,
    an endpoint without these routes or one that cannot be reached stops the command
    (EndpointError, exit status 2), with what to check."""
    import openai

    try:
        yield
    except openai.APIError as err:
        status = getattr(err, "status_code", None)
        text = scrub(" ".join(str(getattr(err, "message", None) or err).split()), Secrets.of(judge))
        where = f"{judge.public_base_url} (model {judge.model!r})"  # no user:password@
        if status in (401, 403):
            fix = "check the API key ($OPENAI_API_KEY) is valid for this endpoint"
        elif status == 404:
            fix = (
                "this endpoint may have no Files/Batches API: use ragframe batch export and "
                "import (vllm run-batch), or a live run"
            )
        elif isinstance(err, openai.APIConnectionError):
            fix = "check --base-url ($OPENAI_BASE_URL) and that the server is up"
        else:
            raise RagframeError(f"{where}: the Batch API failed: HTTP {status}: {text}") from None
        raise EndpointError(f"{where}: HTTP {status or '-'}: {text[:300]}; fix: {fix}") from None


def create_batches(
    client: Any, m: Manifest, save: Callable[[], None], secrets: Secrets
) -> list[str]:
    """Upload and create the batches recorded but not yet created (also after a crash);
    return the ids created. A batch the API refuses for good is recorded as failed."""
    created: list[str] = []
    for entry in m.uncreated():
        if entry.input_file_id is None:
            path = Path(entry.requests_path or "")
            with open(path, "rb") as fh:
                uploaded = client.files.create(file=(path.name, fh), purpose="batch")
            entry.input_file_id = uploaded.id
            entry.status = BatchStatus.UPLOADED
            save()
        batch = None
        if entry.status == BatchStatus.UPLOADED:
            batch = find_batch(client, entry.input_file_id)
        if batch is None:
            batch = _create(client, m, entry, secrets)
            if batch is None:
                save()
                continue
        entry.id = batch.id
        update(entry, batch, secrets)
        save()
        created.append(batch.id)
    return created


def _create(client: Any, m: Manifest, entry: Batch, secrets: Secrets) -> Any:
    """The batch created from the entry's input file; None when refused for good (e.g. the
    enqueued-token limit): its requests count as failed once and go into the next stage."""
    import openai

    try:
        return client.batches.create(
            input_file_id=entry.input_file_id,
            endpoint=ENDPOINT,
            completion_window="24h",
            metadata={"ragframe_job": m.job, "stage": str(entry.stage), "part": str(entry.part)},
        )
    except openai.BadRequestError as err:
        entry.id = f"refused-{m.job}-{entry.stage}-{entry.part}"
        entry.status = BatchStatus.FAILED
        entry.errors = scrub(error_text(400, getattr(err, "body", None), str(err)), secrets)
        return None


def find_batch(client: Any, input_file_id: str | None) -> Any:
    """A batch already created from this file (the process died before recording it)."""
    for seen, batch in enumerate(client.batches.list(limit=100)):
        if batch.input_file_id == input_file_id:
            return batch
        if seen >= 1000:
            break
    return None


def update(entry: Batch, batch: Any, secrets: Secrets) -> None:
    """Copy what the API says of a batch into its manifest entry."""
    entry.status = status_of(batch.status)
    counts = batch.request_counts
    if counts is not None:
        entry.request_counts = RequestCounts(
            total=counts.total, completed=counts.completed, failed=counts.failed
        )
    entry.output_file_id = batch.output_file_id
    entry.error_file_id = batch.error_file_id
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) if errors is not None else None
    if data:
        entry.errors = scrub(
            "; ".join(f"{e.code or 'error'}: {e.message or ''}".strip() for e in data[:5]), secrets
        )


def running(m: Manifest) -> list[Batch]:
    """API batches created, not collected, not finished: the ones worth polling."""
    return [
        b
        for b in m.batches
        if b.kind is Mode.API and b.id and not b.collected and b.status not in TERMINAL
    ]


def refresh(client: Any, batches: list[Batch], secrets: Secrets) -> None:
    """Poll each batch."""
    for entry in batches:
        update(entry, client.batches.retrieve(entry.id), secrets)


def bodies_of(entry: Batch, client: Any = None) -> dict[str, dict[str, Any]]:
    """custom_id -> request body, from the kept request file, else (given a client) the
    uploaded one."""
    path = Path(entry.requests_path) if entry.requests_path else None
    if path is not None and path.exists():
        return request_bodies(path.read_text(encoding="utf-8"))
    if client is not None and entry.kind is Mode.API and entry.input_file_id:
        return request_bodies(client.files.content(entry.input_file_id).text)
    return {}


def result_lines(client: Any, entry: Batch) -> list[dict[str, Any]]:
    """The lines of a finished batch's output and error files."""
    lines: list[dict[str, Any]] = []
    for file_id in (entry.output_file_id, entry.error_file_id):
        if file_id:
            lines.extend(read_jsonl(client.files.content(file_id).text))
    return lines
