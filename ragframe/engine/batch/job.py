"""`BatchJob`: one scoring job through the Batch API (or vllm run-batch files), its state in
a typed manifest and its answers in the judge's cache. See the package docstring."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ragframe.engine.batch.identity import (
    Inputs,
    check_judge,
    check_same_job,
    default_judge,
    keep_input,
    load_inputs,
    metric_record,
    new_manifest,
)
from ragframe.engine.batch.ingest import ingest, tasks_for
from ragframe.errors import ConfigError
from ragframe.judge.batch import remote
from ragframe.judge.batch.jsonl import (
    MAX_BYTES,
    MAX_REQUESTS,
    by_task,
    encode,
    read_jsonl,
    split,
)
from ragframe.judge.batch.manifest import (
    DEFAULT_MAX_ATTEMPTS,
    TERMINAL,
    Batch,
    BatchStatus,
    Collected,
    JobState,
    Manifest,
    ManifestFile,
    Mode,
    atomic_write,
)
from ragframe.judge.batch.report import describe, waiting_note
from ragframe.judge.client import REPAIR_PROMPT, Answer, Judge, JudgeSession, RunStats
from ragframe.judge.pricing import cost, with_cached_rate
from ragframe.judge.task import Task
from ragframe.judge.transport import Secrets

#: The share of the listed price the Batch API bills (OpenAI: half, cached prompt included).
BATCH_API_SHARE = 0.5


@dataclass
class BatchProgress:
    """Where a job stands after a call.

    state: "submitted" (new batches were created), "waiting" (batches still run), "missing"
    (a file-mode job has unanswered requests: export them), "done" (every request answered or
    given up; `result` holds the scored frame, written to `output` when one was given).
    """

    state: JobState
    stage: int
    submitted: list[str] = field(default_factory=list)
    open: list[str | None] = field(default_factory=list)
    requests: int = 0
    given_up: int = 0
    output: Path | None = None
    result: Any = None  # ragframe.engine.result.RunResult once done
    notes: list[str] = field(default_factory=list)

    def message(self) -> str:
        return "\n".join(self.notes)


class _BatchSession(JudgeSession):
    """A deferred session that answers requests given up on with their failure, unsent."""

    def __init__(self, judge: Judge, given_up: Mapping[str, str]) -> None:
        super().__init__(judge, backend="defer")
        self.given_up = given_up

    async def __aenter__(self) -> _BatchSession:
        # A pass sends no chat request: the progress bar would only print an empty line.
        progress, self.judge.progress = self.judge.progress, False
        try:
            await super().__aenter__()
        finally:
            self.judge.progress = progress
        return self

    def _not_sent(self, task: Task, key: str, payload: dict[str, Any]) -> Answer:
        reason = self.given_up.get(key)
        if reason is not None:
            self.stats.failures["batch"] += 1
            return Answer(error=f"{task.name}: {reason}")
        return super()._not_sent(task, key, payload)


class BatchJob:
    """One scoring job through the Batch API, its state in `manifest` and the judge's cache.

    Parameters
    ----------
    manifest : path of the job's JSON manifest (created by the first submit or export).
        Request files are kept beside it, in `<manifest stem>_batch_files/`.
    judge : the judge; by default rebuilt from the manifest (model, embedding model, cache)
        with the endpoint and key from `$OPENAI_BASE_URL` / `$OPENAI_API_KEY`. It must use a
        cache (the cache is where answers live) and must not be the embedded local judge.
    max_attempts : times a request may fail in batches before its rows report the failure;
        default: the manifest's, else 3. Raising it lets `collect` retry requests given up on.
    max_requests, max_bytes : limits per batch input file (larger passes are split).
    """

    def __init__(
        self,
        manifest: str | Path,
        judge: Judge | None = None,
        *,
        max_attempts: int | None = None,
        max_requests: int = MAX_REQUESTS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.path = Path(manifest)
        self.files_dir = self.path.with_name(f"{self.path.stem}_batch_files")
        self._file = ManifestFile(self.path)
        stored = self._file.load()
        if judge is None:
            judge = default_judge(stored)
        self.judge = judge
        #: Every credential of the judge, scrubbed from all a batch says (`Secrets`).
        self._secrets = Secrets.of(judge)
        self._max_attempts = max_attempts
        if max_attempts is not None and max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        if max_requests < 1 or max_bytes < 1:
            raise ConfigError("max_requests and max_bytes must be positive")
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._client: Any = None
        self._inputs: Inputs | None = None
        if stored is not None:
            check_judge(self.judge, stored, self.path)

    def __repr__(self) -> str:
        return f"BatchJob({str(self.path)!r}, {self.judge!r})"

    # ---------------------------------------------------------------- public API
    def submit(
        self,
        data: Any,
        metrics: Iterable[Any],
        columns: Mapping[str, str] | None = None,
    ) -> BatchProgress:
        """Run a pass and submit every request it lacks that no open batch already holds."""
        with self._locked(), self._api_errors():
            m = self._open_job(data, metrics, columns)
            m.mode = Mode.API
            m.supersede_exports()
            progress = BatchProgress(state=JobState.WAITING, stage=m.stage)
            self._finish_submissions(m, progress)
            frame, metric_list, cols = self._inputs_for(m)
            _, deferred, _ = self._pass(m, frame, metric_list, cols)
            self._submit_lines(m, deferred, progress)
            m.state = progress.state
            self._save(m)
            return progress

    def status(self) -> dict[str, Any]:
        """Poll the open batches; return the job's state, one entry per batch, the failures."""
        with self._locked(shared_ok=True) as writable, self._api_errors():
            m = self._require()
            self._refresh(m)
            if writable:
                self._save(m)
            return describe(m)

    def collect(
        self,
        output: str | Path | None = None,
        *,
        data: Any = None,
        metrics: Iterable[Any] | None = None,
        columns: Mapping[str, str] | None = None,
        overwrite: bool = False,
    ) -> BatchProgress:
        """Store finished batches in the cache, then submit the next stage or finish.

        When every request is answered (or given up), the scored frame is in the returned
        `result` and, with `output` (or the one `run` recorded), written to Parquet with the
        batch ids in its metadata. `data`/`metrics`/`columns` default to what `submit` got
        (the input path and metric names in the manifest).
        """
        target = Path(output) if output is not None else None
        if target is not None and target.exists() and not overwrite:
            raise ConfigError(f"output {str(target)!r} exists; pass overwrite=True (--overwrite)")
        with self._locked(), self._api_errors():
            m = self._require()
            if data is not None or metrics is not None:
                self._inputs = load_inputs(self.judge, m, data, metrics, columns, self.path)
            if target is not None:
                m.output = str(target.resolve())
            progress = BatchProgress(state=JobState.WAITING, stage=m.stage)
            self._finish_submissions(m, progress)
            self._refresh(m)
            for entry in m.batches:
                if entry.kind is Mode.API and not entry.collected and entry.status in TERMINAL:
                    self._collect_batch(m, entry, progress)
                    self._save(m)
            progress.open = [b.id for b in m.open_batches()]
            if progress.open:
                progress.state = JobState.WAITING
                progress.notes.append(waiting_note(m))
                self._save(m)
                return progress
            return self._advance(m, progress, overwrite=overwrite or target is None)

    def run(
        self,
        data: Any,
        metrics: Iterable[Any],
        output: str | Path | None = None,
        *,
        columns: Mapping[str, str] | None = None,
        poll_interval: float = 60.0,
        timeout: float | None = 48 * 3600,
        overwrite: bool = False,
        on_progress: Any = None,
    ) -> BatchProgress:
        """Submit, then poll and collect until done or `timeout` seconds have passed.

        Returns the last progress; its state is "done" unless the time ran out (then resume
        later with `collect`: nothing is lost). `on_progress(progress)` is called after
        each step (the command line prints there).
        """
        if output is not None and Path(output).exists() and not overwrite:
            raise ConfigError(f"output {str(output)!r} exists; pass overwrite=True (--overwrite)")
        deadline = None if timeout is None else time.monotonic() + timeout
        progress = self.submit(data, metrics, columns)
        if on_progress is not None:
            on_progress(progress)
        while True:
            progress = self.collect(output, overwrite=True)
            if on_progress is not None:
                on_progress(progress)
            if progress.state in (JobState.DONE, JobState.MISSING):
                return progress
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                progress.notes.append(
                    f"stopped waiting after {timeout:g} s; resume with collect "
                    f"(ragframe batch collect --manifest {self.path})"
                )
                return progress
            time.sleep(max(0.0, poll_interval if left is None else min(poll_interval, left)))

    def export_jsonl(
        self,
        data: Any,
        metrics: Iterable[Any],
        path: str | Path,
        columns: Mapping[str, str] | None = None,
    ) -> BatchProgress:
        """Write this pass's missing requests to `path` (for `vllm run-batch`), upload nothing.

        Read the results back with `import_results`, then export again for the next stage
        until nothing is missing, then `collect(output)` writes the scored file.
        """
        target = Path(path)
        with self._locked():
            m = self._open_job(data, metrics, columns)
            m.mode = Mode.FILE
            frame, metric_list, cols = self._inputs_for(m)
            _, deferred, _ = self._pass(m, frame, metric_list, cols)
            m.supersede_exports()
            lines = self._lines_to_send(m, deferred)
            progress = BatchProgress(state=JobState.DONE, stage=m.stage, requests=len(lines))
            if not lines:
                progress.notes.append(
                    "nothing to export: every request is answered; run collect to write the output"
                )
                self._save(m)
                return progress
            stage = m.next_stage(self.path)
            atomic_write(target, b"".join(encode(lines)))
            ids = [line["custom_id"] for line in lines]
            m.batches.append(
                Batch.for_requests(
                    Mode.FILE,
                    stage,
                    1,
                    ids,
                    str(target.resolve()),
                    BatchStatus.EXPORTED,
                    ident=f"file-{stage}",
                )
            )
            self._save(m)
            progress.state, progress.stage = JobState.SUBMITTED, stage
            progress.notes.append(
                f"stage {stage}: wrote {len(lines)} requests to {target} ({by_task(lines)})"
            )
            return progress

    def import_results(self, path: str | Path) -> dict[str, int]:
        """Read a batch output file (OpenAI's or vllm run-batch's) into the cache.

        Lines are matched to requests of this job by custom_id, in any order; an answer is
        validated against its request's schema before it is stored. Failed or unusable lines
        count as failed attempts (retried by the next export, up to max_attempts).
        """
        source = Path(path)
        if not source.exists():
            raise ConfigError(f"results file {str(source)!r} does not exist")
        with self._locked():
            m = self._require()
            bodies: dict[str, dict[str, Any]] = {}
            for entry in m.batches:  # later requests (retries with repairs) win
                bodies.update(remote.bodies_of(entry))
            text = source.read_text(encoding="utf-8")
            got = ingest(m, read_jsonl(text), bodies, self.judge, self._tasks(m), self._secrets)
            for entry in m.batches:
                answered_here = bool(got.seen & set(entry.custom_ids))
                if entry.kind is Mode.FILE and not entry.collected and answered_here:
                    entry.status = BatchStatus.IMPORTED
                    entry.mark_collected()
            self._save(m)
            return got.counts()

    # ---------------------------------------------------------------- manifest
    def _require(self) -> Manifest:
        m = self._file.load()
        if m is None:
            raise ConfigError(
                f"no manifest at {str(self.path)!r}: start the job with submit (or export)"
            )
        check_judge(self.judge, m, self.path)
        if self._max_attempts is not None:
            m.max_attempts = self._max_attempts
        return m

    def _save(self, m: Manifest) -> None:
        self._file.save(m)

    def _locked(self, *, shared_ok: bool = False) -> contextlib.AbstractContextManager[bool]:
        return self._file.locked(shared_ok=shared_ok)

    def _open_job(
        self, data: Any, metrics: Iterable[Any], columns: Mapping[str, str] | None
    ) -> Manifest:
        """The manifest for (data, metrics): created on first use, checked against after."""
        from ragframe.engine.prepare import check_run
        from ragframe.inputs.columns import load_frame
        from ragframe.metrics import resolve

        metric_list = resolve(metrics)
        frame = load_frame(data)
        # Inputs, and what the judge must serve (embeddings are sent live): before any upload.
        check_run(frame, metric_list, columns, self.judge)
        cols = dict(columns) if columns else None
        self._inputs = (frame, metric_list, cols)
        records = [metric_record(x) for x in metric_list]
        m = self._file.load()
        if m is None:
            max_attempts = self._max_attempts or DEFAULT_MAX_ATTEMPTS
            keep = keep_input(data, frame, self.files_dir)
            return new_manifest(self.judge, keep, records, cols, max_attempts)
        check_judge(self.judge, m, self.path)
        check_same_job(m, frame.height, records, cols, self.path)
        if self._max_attempts is not None:
            m.max_attempts = self._max_attempts
        return m

    def _inputs_for(self, m: Manifest) -> Inputs:
        if self._inputs is None:
            self._inputs = load_inputs(self.judge, m, None, None, None, self.path)
        return self._inputs

    # ---------------------------------------------------------------- the pass
    def _pass(
        self, m: Manifest, frame: pl.DataFrame, metrics: list[Any], columns: Any
    ) -> tuple[pl.DataFrame, dict[str, dict[str, Any]], RunStats]:
        from ragframe._sync import run_sync
        from ragframe.engine.prepare import score_frame

        async def go() -> tuple[pl.DataFrame, dict[str, dict[str, Any]], RunStats]:
            session = _BatchSession(self.judge, m.given_up())
            async with session:
                scored = await score_frame(frame, metrics, session, columns)
            return scored, session.deferred, session.stats

        return run_sync(go())  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- submission
    def _lines_to_send(
        self, m: Manifest, deferred: dict[str, dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The pass's requests no open batch holds, retries of unusable answers repaired."""
        held = m.held()
        return [self._with_repair(m, x) for cid, x in deferred.items() if cid not in held]

    @staticmethod
    def _with_repair(m: Manifest, line: dict[str, Any]) -> dict[str, Any]:
        """A retry of an unusable answer feeds the validation error back, as live runs do."""
        failure = m.failures.get(line["custom_id"])
        if failure is None or failure.repair is None:
            return line
        body = dict(line["body"])
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": failure.content or ""},
            {"role": "user", "content": REPAIR_PROMPT.format(error=failure.repair)},
        ]
        return {**line, "body": body}

    def _submit_lines(
        self, m: Manifest, deferred: dict[str, dict[str, Any]], progress: BatchProgress
    ) -> None:
        lines = self._lines_to_send(m, deferred)
        progress.open = [b.id for b in m.open_batches()]
        if not lines:
            if progress.open:
                progress.notes.append(waiting_note(m))
            else:
                progress.state = JobState.DONE
                progress.notes.append("nothing to submit: every request is answered")
            return
        stage = m.next_stage(self.path)
        parts = split(encode(lines), self.max_requests, self.max_bytes)
        start = 0
        for number, part in enumerate(parts, 1):
            ids = [line["custom_id"] for line in lines[start : start + len(part)]]
            start += len(part)
            path = self.files_dir / f"stage{stage}-part{number}.jsonl"
            atomic_write(path, b"".join(part))
            m.batches.append(
                Batch.for_requests(
                    Mode.API, stage, number, ids, str(path.resolve()), BatchStatus.PREPARED
                )
            )
        m.totals.requests += len(lines)
        self._save(m)  # recorded before any upload: a crash cannot lead to a second batch
        self._finish_submissions(m, progress)
        progress.state, progress.stage, progress.requests = JobState.SUBMITTED, stage, len(lines)
        progress.open = [b.id for b in m.open_batches()]
        progress.notes.append(
            f"stage {stage}: submitted {len(lines)} requests in {len(parts)} batch"
            f"{'es' if len(parts) > 1 else ''} ({by_task(lines)}): " + ", ".join(progress.submitted)
        )

    def _finish_submissions(self, m: Manifest, progress: BatchProgress) -> None:
        """Upload and create the batches recorded but not yet created (also after a crash)."""
        if m.uncreated():
            created = remote.create_batches(self._api(), m, lambda: self._save(m), self._secrets)
            progress.submitted.extend(created)

    def _api_errors(self) -> contextlib.AbstractContextManager[None]:
        return remote.api_errors(self.judge)

    def _api(self) -> Any:
        if self._client is None:
            self._client = remote.make_client(self.judge)
        return self._client

    # ---------------------------------------------------------------- polling and collecting
    def _refresh(self, m: Manifest) -> None:
        running = remote.running(m)
        if running:
            remote.refresh(self._api(), running, self._secrets)

    def _tasks(self, m: Manifest) -> dict[str, Task]:
        return tasks_for(list(self._inputs[1]) if self._inputs is not None else [], m)

    def _collect_batch(self, m: Manifest, entry: Batch, progress: BatchProgress) -> None:
        """A finished batch's answers into the cache; a request without a line failed."""
        client = self._api()
        bodies = remote.bodies_of(entry, client)
        lines = remote.result_lines(client, entry)
        mine = set(entry.custom_ids)
        mine_only = (x for x in lines if x.get("custom_id") in mine)
        got = ingest(m, mine_only, bodies, self.judge, self._tasks(m), self._secrets)
        why = entry.errors or "no result line"
        for cid in sorted(mine - got.seen):
            m.fail(cid, f"batch {entry.status}: {why}", scrub=self._secrets.scrub)
            got.failed += 1
        entry.mark_collected()
        entry.result = Collected(answered=got.answered, failed=got.failed)
        progress.notes.append(
            f"collected {entry.id} (stage {entry.stage}, {entry.status}): "
            f"{got.answered} answered, {got.failed} failed"
        )

    def _advance(self, m: Manifest, progress: BatchProgress, *, overwrite: bool) -> BatchProgress:
        """Every batch is in: run the pass; submit the next stage, or finish."""
        frame, metric_list, cols = self._inputs_for(m)
        t0 = time.monotonic()
        scored, deferred, stats = self._pass(m, frame, metric_list, cols)
        if deferred and m.mode is Mode.FILE:
            progress.state, progress.requests = JobState.MISSING, len(deferred)
            m.state = JobState.MISSING
            progress.notes.append(
                f"{len(deferred)} requests are not answered yet: export them "
                "(ragframe batch export) and import the results"
            )
        elif deferred:
            self._submit_lines(m, deferred, progress)
            m.state = progress.state
        else:
            self._finish(m, progress, scored, metric_list, stats, time.monotonic() - t0)
            self._write_output(m, progress, overwrite=overwrite)
        self._save(m)
        return progress

    def _finish(
        self,
        m: Manifest,
        progress: BatchProgress,
        scored: pl.DataFrame,
        metric_list: list[Any],
        stats: RunStats,
        seconds: float,
    ) -> None:
        """The job is done: its result, with the batch summary and the run it executed in
        the output's metadata."""
        from ragframe.engine.result import RunResult
        from ragframe.engine.spec import RunSpec

        names = tuple(x.name for x in metric_list)
        cols = dict(m.columns) if m.columns else None
        given_up = m.given_up()
        extra = {
            "batch": {
                "job": m.job,
                "manifest": str(self.path.resolve()),
                "batch_ids": [b.id for b in m.batches if b.kind is Mode.API and b.id],
                "stages": m.stage,
                "requests_submitted": m.totals.requests,
                "failed_lines": m.totals.failed_lines,
                "given_up_requests": len(given_up),
                "prompt_tokens": m.totals.prompt_tokens,
                "completion_tokens": m.totals.completion_tokens,
                "cached_prompt_tokens": m.totals.cached_prompt_tokens or 0,
                **self._batch_cost(m),
            }
        }
        progress.result = RunResult(
            frame=scored,
            metrics=metric_list,
            judge=self.judge,
            stats=stats,
            seconds=seconds,
            started=m.created,
            extra=extra,
            run=RunSpec.of(names, columns=cols).metadata("batch", self.judge),
        )
        progress.state, progress.given_up, progress.stage = JobState.DONE, len(given_up), m.stage
        m.state = JobState.DONE

    def _batch_cost(self, m: Manifest) -> dict[str, float | None]:
        """What the job's lines cost (`cost_usd`) and what the provider's cached-prompt rate
        saved (`cached_saving_usd`), None without a price (or a cached rate, for the saving):
        the judge's price, the cached prompt tokens at its cached rate, halved for lines sent
        to the Batch API (OpenAI bills them at half its listed rates); lines run as files
        (`vllm run-batch`) at the price as it is."""
        price = with_cached_rate(self.judge.price, self.judge.model)
        t = m.totals
        cached = t.cached_prompt_tokens or 0
        dollars = cost(price, t.prompt_tokens, t.completion_tokens, cached)
        saving = None
        if price is not None and len(price) > 2:
            saving = min(cached, t.prompt_tokens) * (price[0] - price[2]) / 1e6
        share = BATCH_API_SHARE if m.mode is Mode.API else 1.0
        return {
            "cost_usd": None if dollars is None else round(dollars * share, 6),
            "cached_saving_usd": None if saving is None else round(saving * share, 6),
        }

    def _write_output(self, m: Manifest, progress: BatchProgress, *, overwrite: bool) -> None:
        """Write the result where the job was told to, and say what was given up."""
        if m.output:
            target = Path(m.output)
            progress.result.write_parquet(target, overwrite=overwrite)
            progress.output = target
            progress.notes.append(f"done after {m.stage} stage(s): wrote {target}")
        else:
            progress.notes.append(f"done after {m.stage} stage(s)")
        if progress.given_up:
            progress.notes.append(
                f"{progress.given_up} requests failed {m.max_attempts} times and were given up; "
                "their rows say why in {metric}_detail.error"
            )
