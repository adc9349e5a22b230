"""Score a frame through the OpenAI Batch API (half price, answers within 24 h), across restarts.

Two stores hold all the state, and nothing else does:

- the answer cache (the SQLite file live runs use) holds every answer, keyed by request;
- a manifest (JSON, replaced atomically) holds the batches: ids, files, custom_ids, stage,
  status, and how often each request has failed.

A *pass* runs the metrics with a deferred judge session: every request the cache cannot
answer becomes a Batch API line whose `custom_id` is its cache key, and the rows waiting for
it get a null score with a PENDING error. So:

    submit   pass -> lines not already in an open batch -> JSONL -> Files API -> Batches API
    status   poll the open batches
    collect  download finished batches into the cache -> pass again -> next stage, or output
    run      submit, then poll and collect until done

A multi-stage metric (faithfulness: extract claims, then verify them) takes one stage per
step; a request that failed in a batch is retried in the next stage, up to `max_attempts`,
then reported on its rows. Nothing answered is paid for twice (the cache answers it) and no
batch is submitted twice: a batch is written into the manifest before its upload and again
after it is created, and one whose creation was interrupted is found again by its input file.

Embeddings (answer_relevancy) are sent live during a pass: they are cheap, and batching them
would add a stage. The same JSONL serves `vllm run-batch`: `export_jsonl` writes a pass's
requests to a file, `import_results` reads its output back into the cache.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from ragframe import __version__
from ragframe.errors import ConfigError, RagframeError
from ragframe.judge.client import REPAIR_PROMPT, Answer, Judge, JudgeSession, RunStats
from ragframe.judge.parse import AnswerError, parse_answer
from ragframe.judge.task import Task

#: OpenAI's limits per batch input file (50,000 requests, 200 MB); bytes kept a little under.
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 1024 * 1024
DEFAULT_MAX_ATTEMPTS = 3
#: A job that needs more stages than this is looping, not converging.
MAX_STAGES = 50
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
ENDPOINT = "/v1/chat/completions"
MANIFEST_FORMAT = "ragframe-batch-manifest"
REPAIR = REPAIR_PROMPT
_KEEP_CONTENT = 32_000  # characters of an unusable answer kept for its repair prompt

State = Literal["submitted", "waiting", "missing", "done"]


@dataclass
class BatchProgress:
    """Where a job stands after a call.

    state: "submitted" (new batches were created), "waiting" (batches still run), "missing"
    (a file-mode job has unanswered requests: export them), "done" (every request answered or
    given up; `result` holds the scored frame, written to `output` when one was given).
    """

    state: State
    stage: int
    submitted: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    requests: int = 0
    given_up: int = 0
    output: Path | None = None
    result: Any = None  # ragframe.evaluate.RunResult once done
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


# ------------------------------------------------------------------------------- result lines


def _error_text(status: int | None, body: Any, error: Any) -> str:
    """A short reason from a failed result line, whatever shape its error has."""
    message: str | None = None
    for source in (error, body):
        if isinstance(source, str) and source:
            message = source
            break
        if isinstance(source, dict):
            inner = source.get("error") if isinstance(source.get("error"), dict) else source
            found = inner.get("message") or inner.get("code")
            if found:
                message = str(found)
                break
    message = " ".join((message or "no answer").split())[:300]
    return f"HTTP {status}: {message}" if status not in (None, 200) else message


def read_result_line(line: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """(custom_id, chat completion, None) for an answered line, (custom_id, None, reason) else.

    Accepts OpenAI's batch output and `vllm run-batch`'s: `response` as
    `{"status_code", "body"}`, without `status_code` (then 200 when the body has choices), or
    the completion itself; a line with an `error` and no usable body is a failure.
    """
    custom_id = line.get("custom_id")
    cid = custom_id if isinstance(custom_id, str) else None
    response = line.get("response")
    error = line.get("error")
    body: Any = None
    status: int | None = None
    if isinstance(response, dict):
        if "body" in response or "status_code" in response:
            body = response.get("body")
            raw = response.get("status_code")
            status = int(raw) if isinstance(raw, int | str) and str(raw).isdigit() else None
        else:
            body = response
        if status is None and isinstance(body, dict) and body.get("choices"):
            status = 200
    if status == 200 and isinstance(body, dict) and body.get("choices"):
        return cid, body, None
    return cid, None, _error_text(status, body, error)


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The client's logprobs shape: [{token, logprob, top: [{token, logprob}]}]."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        {
            "token": item.get("token"),
            "logprob": item.get("logprob"),
            "top": [
                {"token": t.get("token"), "logprob": t.get("logprob")}
                for t in item.get("top_logprobs") or []
            ],
        }
        for item in content
    ]


def _schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    schema = (
        (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
    )
    return schema if isinstance(schema, dict) else fmt.get("schema")


def _task_name(body: dict[str, Any]) -> str:
    fmt = body.get("response_format") or {}
    return str((fmt.get("json_schema") or {}).get("name") or "request")


# ------------------------------------------------------------------------------------ files


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _atomic_write(path: Path, data: bytes) -> None:
    """Write beside the target, fsync, rename: a crash leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonl(lines: Iterable[dict[str, Any]]) -> list[bytes]:
    return [
        (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        for line in lines
    ]


def _split(encoded: list[bytes], max_requests: int, max_bytes: int) -> list[list[bytes]]:
    """Greedy parts within the per-file limits, in order."""
    parts: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for line in encoded:
        if len(line) > max_bytes:
            raise ConfigError(f"one batch request is {len(line)} bytes, over the {max_bytes} limit")
        if current and (len(current) >= max_requests or size + len(line) > max_bytes):
            parts.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        parts.append(current)
    return parts


def _read_jsonl(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


# -------------------------------------------------------------------------------------- job


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
        stored = self._load()
        if judge is None:
            judge = self._default_judge(stored)
        self.judge = judge
        self._max_attempts = max_attempts
        if max_attempts is not None and max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        if max_requests < 1 or max_bytes < 1:
            raise ConfigError("max_requests and max_bytes must be positive")
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._client: Any = None
        self._inputs: tuple[pl.DataFrame, list[Any], dict[str, str] | None] | None = None
        if stored is not None:
            self._check_judge(stored)

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
        with self._locked():
            m = self._open_job(data, metrics, columns)
            m["mode"] = "api"
            self._supersede_exports(m)
            progress = BatchProgress(state="waiting", stage=m["stage"])
            self._finish_submissions(m, progress)
            frame, metric_list, cols = self._inputs_for(m)
            _, deferred, _ = self._pass(m, frame, metric_list, cols)
            self._submit_lines(m, deferred, progress)
            m["state"] = progress.state
            self._save(m)
            return progress

    def status(self) -> dict[str, Any]:
        """Poll the open batches; return the job's state, one entry per batch, the failures."""
        with self._locked(shared_ok=True) as writable:
            m = self._require()
            self._refresh(m)
            if writable:
                self._save(m)
            return self._describe(m)

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
        with self._locked():
            m = self._require()
            if data is not None or metrics is not None:
                self._inputs = self._load_inputs(m, data, metrics, columns)
            if target is not None:
                m["output"] = str(target.resolve())
            progress = BatchProgress(state="waiting", stage=m["stage"])
            self._finish_submissions(m, progress)
            self._refresh(m)
            for entry in m["batches"]:
                done = entry["status"] in TERMINAL
                if entry["kind"] == "api" and not entry["collected"] and done:
                    self._collect_batch(m, entry, progress)
                    self._save(m)
            progress.open = [e["id"] for e in self._open(m)]
            if progress.open:
                progress.state = "waiting"
                progress.notes.append(self._waiting_note(m))
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
            if progress.state in ("done", "missing"):
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
            m["mode"] = "file"
            frame, metric_list, cols = self._inputs_for(m)
            _, deferred, _ = self._pass(m, frame, metric_list, cols)
            self._supersede_exports(m)
            held = {cid for e in self._open(m) for cid in e["custom_ids"]}
            lines = [
                self._with_repair(m, line) for cid, line in deferred.items() if cid not in held
            ]
            progress = BatchProgress(state="done", stage=m["stage"], requests=len(lines))
            if not lines:
                progress.notes.append(
                    "nothing to export: every request is answered; run collect to write the output"
                )
                self._save(m)
                return progress
            m["stage"] += 1
            self._check_stages(m)
            _atomic_write(target, b"".join(_jsonl(lines)))
            m["batches"].append(
                self._entry(
                    m,
                    kind="file",
                    ident=f"file-{m['stage']}",
                    part=1,
                    custom_ids=[line["custom_id"] for line in lines],
                    requests_path=str(target.resolve()),
                    status="exported",
                )
            )
            self._save(m)
            progress.state, progress.stage = "submitted", m["stage"]
            progress.notes.append(
                f"stage {m['stage']}: wrote {len(lines)} requests to {target} "
                f"({self._by_task(lines)})"
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
            for entry in m["batches"]:  # later requests (retries with repairs) win
                bodies.update(self._request_bodies(entry, download=False))
            text = source.read_text(encoding="utf-8")
            counts = self._ingest(m, _read_jsonl(text), bodies)
            seen = counts.pop("seen_ids")
            for entry in m["batches"]:
                answered_here = bool(seen & set(entry["custom_ids"]))
                if entry["kind"] == "file" and not entry["collected"] and answered_here:
                    entry["status"], entry["collected"] = "imported", True
                    entry["collected_at"] = _now()
            self._save(m)
            return counts

    # ---------------------------------------------------------------- manifest
    def _load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        try:
            m = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ConfigError(f"manifest {str(self.path)!r} is not valid JSON: {err}") from None
        if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
            raise ConfigError(f"{str(self.path)!r} is not a ragframe batch manifest")
        return m

    def _require(self) -> dict[str, Any]:
        m = self._load()
        if m is None:
            raise ConfigError(
                f"no manifest at {str(self.path)!r}: start the job with submit (or export)"
            )
        self._check_judge(m)
        if self._max_attempts is not None:
            m["max_attempts"] = self._max_attempts
        return m

    def _save(self, m: dict[str, Any]) -> None:
        m["updated"] = _now()
        _atomic_write(self.path, json.dumps(m, indent=1, ensure_ascii=False).encode("utf-8"))

    @contextlib.contextmanager
    def _locked(self, *, shared_ok: bool = False, wait: float = 60.0) -> Iterator[bool]:
        """One process at a time per manifest (a lock file beside it).

        With `shared_ok`, a busy lock yields False (read-only) instead of waiting.
        """
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            yield True
            return
        lock = self.path.with_name(f".{self.path.name}.lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as fh:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if shared_ok:
                        yield False
                        return
                    if time.monotonic() > deadline:
                        raise ConfigError(
                            f"another process is working on {str(self.path)!r}; try again later"
                        ) from None
                    time.sleep(0.1)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _default_judge(self, m: dict[str, Any] | None) -> Judge:
        if m is None:
            return Judge()
        info = m["judge"]
        return Judge(
            info["model"],
            embedding_model=info.get("embedding_model"),
            cache=info.get("cache") or True,
        )

    def _check_judge(self, m: dict[str, Any] | None) -> None:
        judge = self.judge
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
        info = m["judge"]
        if (judge.model, judge.endpoint_host) != (info["model"], info["endpoint_host"]):
            raise ConfigError(
                f"{str(self.path)!r} was made for model {info['model']!r} at "
                f"{info['endpoint_host']!r}, not {judge.model!r} at {judge.endpoint_host!r}: "
                "pass the same --model and --base-url"
            )
        if info.get("cache") and Path(info["cache"]) != judge.cache_path:
            warnings.warn(
                f"the manifest's answers are in the cache {info['cache']}, but this judge uses "
                f"{judge.cache_path}; answers already collected will be requested again",
                stacklevel=3,
            )

    def _open_job(
        self, data: Any, metrics: Iterable[Any], columns: Mapping[str, str] | None
    ) -> dict[str, Any]:
        """The manifest for (data, metrics): created on first use, checked against after."""
        from ragframe.columns import load_frame, select_inputs
        from ragframe.evaluate import check_output_names
        from ragframe.metrics import Metric, resolve

        metric_list = resolve(metrics)
        frame = load_frame(data)
        check_output_names(frame, metric_list)
        scorers = [x for x in metric_list if isinstance(x, Metric)]
        select_inputs(frame.head(0), {x.name: x.requires for x in scorers}, columns)
        cols = dict(columns) if columns else None
        self._inputs = (frame, metric_list, cols)
        records = [_metric_record(x) for x in metric_list]
        m = self._load()
        if m is not None:
            self._check_judge(m)
            if _identity(m["metrics"]) != _identity(records):
                raise ConfigError(
                    f"{str(self.path)!r} belongs to a job with other metrics "
                    f"({[r['name'] for r in m['metrics']]}); use another --manifest"
                )
            if m["input"]["rows"] != frame.height or m["columns"] != cols:
                raise ConfigError(
                    f"{str(self.path)!r} belongs to a job over another input "
                    f"({m['input']['rows']} rows, columns {m['columns']}); use another --manifest"
                )
            if self._max_attempts is not None:
                m["max_attempts"] = self._max_attempts
            return m
        if isinstance(data, str | Path):
            source, copied = str(Path(data).resolve()), False
        else:  # keep a copy, so that collect works after a restart
            target = self.files_dir / "input.parquet"
            self.files_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".input.", suffix=".tmp", dir=self.files_dir)
            os.close(fd)
            frame.write_parquet(tmp)
            os.replace(tmp, target)
            source, copied = str(target.resolve()), True
        judge = self.judge
        m = {
            "format": MANIFEST_FORMAT,
            "version": 1,
            "job": uuid.uuid4().hex[:16],
            "ragframe_version": __version__,
            "created": _now(),
            "updated": _now(),
            "input": {"path": source, "copied": copied, "rows": frame.height},
            "metrics": records,
            "columns": cols,
            "judge": {
                "model": judge.model,
                "endpoint_host": judge.endpoint_host,
                "embedding_model": judge.embedding_model,
                "cache": str(judge.cache_path) if judge.cache_path else None,
            },
            "max_attempts": self._max_attempts or DEFAULT_MAX_ATTEMPTS,
            "mode": "api",
            "stage": 0,
            "state": "new",
            "output": None,
            "batches": [],
            "failures": {},
            "totals": {
                "requests": 0,
                "answered": 0,
                "failed_lines": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            },
        }
        return m

    def _inputs_for(self, m: dict[str, Any]) -> tuple[pl.DataFrame, list[Any], Any]:
        if self._inputs is None:
            self._inputs = self._load_inputs(m, None, None, None)
        return self._inputs

    def _load_inputs(
        self,
        m: dict[str, Any],
        data: Any,
        metrics: Iterable[Any] | None,
        columns: Mapping[str, str] | None,
    ) -> tuple[pl.DataFrame, list[Any], dict[str, str] | None]:
        """What a pass scores: given now, or what the manifest recorded."""
        from ragframe.columns import load_frame
        from ragframe.metrics import resolve

        frame = load_frame(data if data is not None else m["input"]["path"])
        if frame.height != m["input"]["rows"]:
            raise ConfigError(
                f"the input now has {frame.height} rows, the job was submitted with "
                f"{m['input']['rows']}: pass the same data"
            )
        if metrics is not None:
            metric_list = resolve(metrics)
            if _identity([_metric_record(x) for x in metric_list]) != _identity(m["metrics"]):
                raise ConfigError("these metrics differ from the ones the job was submitted with")
        else:
            metric_list = [_metric_from_record(r) for r in m["metrics"]]
        cols = dict(columns) if columns else m["columns"]
        return frame, metric_list, cols

    # ---------------------------------------------------------------- the pass
    def _given_up(self, m: dict[str, Any]) -> dict[str, str]:
        limit = m["max_attempts"]
        return {
            cid: f"the batch request failed {f['attempts']} times (last: {f['reason']})"
            for cid, f in m["failures"].items()
            if f["attempts"] >= limit
        }

    def _pass(
        self, m: dict[str, Any], frame: pl.DataFrame, metrics: list[Any], columns: Any
    ) -> tuple[pl.DataFrame, dict[str, dict[str, Any]], RunStats]:
        from ragframe.evaluate import run_sync, score_frame

        async def go() -> tuple[pl.DataFrame, dict[str, dict[str, Any]], RunStats]:
            session = _BatchSession(self.judge, self._given_up(m))
            async with session:
                scored = await score_frame(frame, metrics, session, columns)
            return scored, session.deferred, session.stats

        return run_sync(go())  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- submission
    def _open(self, m: dict[str, Any]) -> list[dict[str, Any]]:
        """Batches whose answers are not in the cache yet (their requests must not be resent)."""
        return [e for e in m["batches"] if not e["collected"]]

    def _supersede_exports(self, m: dict[str, Any]) -> None:
        """A new export (or a switch to the API) replaces request files not imported yet;
        their results can still be imported."""
        for entry in m["batches"]:
            if entry["kind"] == "file" and not entry["collected"]:
                entry["status"], entry["collected"] = "superseded", True

    def _with_repair(self, m: dict[str, Any], line: dict[str, Any]) -> dict[str, Any]:
        """A retry of an unusable answer feeds the validation error back, as live runs do."""
        failure = m["failures"].get(line["custom_id"])
        if not failure or failure.get("repair") is None:
            return line
        body = dict(line["body"])
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": failure.get("content") or ""},
            {"role": "user", "content": REPAIR.format(error=failure["repair"])},
        ]
        return {**line, "body": body}

    def _submit_lines(
        self, m: dict[str, Any], deferred: dict[str, dict[str, Any]], progress: BatchProgress
    ) -> None:
        held = {cid for entry in self._open(m) for cid in entry["custom_ids"]}
        lines = [self._with_repair(m, x) for cid, x in deferred.items() if cid not in held]
        progress.open = [e["id"] for e in self._open(m)]
        if not lines:
            if progress.open:
                progress.notes.append(self._waiting_note(m))
            else:
                progress.state = "done"
                progress.notes.append("nothing to submit: every request is answered")
            return
        m["stage"] += 1
        self._check_stages(m)
        stage = m["stage"]
        parts = _split(_jsonl(lines), self.max_requests, self.max_bytes)
        start = 0
        for number, part in enumerate(parts, 1):
            ids = [line["custom_id"] for line in lines[start : start + len(part)]]
            start += len(part)
            path = self.files_dir / f"stage{stage}-part{number}.jsonl"
            _atomic_write(path, b"".join(part))
            m["batches"].append(
                self._entry(
                    m,
                    kind="api",
                    ident=None,
                    part=number,
                    custom_ids=ids,
                    requests_path=str(path.resolve()),
                    status="prepared",
                )
            )
        m["totals"]["requests"] += len(lines)
        self._save(m)  # recorded before any upload: a crash cannot lead to a second batch
        self._finish_submissions(m, progress)
        progress.state, progress.stage, progress.requests = "submitted", stage, len(lines)
        progress.open = [e["id"] for e in self._open(m)]
        progress.notes.append(
            f"stage {stage}: submitted {len(lines)} requests in {len(parts)} batch"
            f"{'es' if len(parts) > 1 else ''} ({self._by_task(lines)}): "
            + ", ".join(progress.submitted)
        )

    def _entry(
        self,
        m: dict[str, Any],
        *,
        kind: str,
        ident: str | None,
        part: int,
        custom_ids: list[str],
        requests_path: str,
        status: str,
    ) -> dict[str, Any]:
        return {
            "id": ident,
            "kind": kind,
            "stage": m["stage"],
            "part": part,
            "status": status,
            "created": _now(),
            "requests_path": requests_path,
            "input_file_id": None,
            "output_file_id": None,
            "error_file_id": None,
            "request_counts": {"total": len(custom_ids), "completed": 0, "failed": 0},
            "errors": None,
            "collected": False,
            "collected_at": None,
            "result": None,
            "custom_ids": custom_ids,
        }

    def _check_stages(self, m: dict[str, Any]) -> None:
        if m["stage"] > MAX_STAGES:
            raise RagframeError(
                f"the job needs more than {MAX_STAGES} stages; it is not converging "
                f"(see the failures in {str(self.path)!r})"
            )

    def _finish_submissions(self, m: dict[str, Any], progress: BatchProgress) -> None:
        """Upload and create the batches recorded but not yet created (also after a crash)."""
        pending = [e for e in m["batches"] if e["kind"] == "api" and e["id"] is None]
        if not pending:
            return
        client = self._api()
        for entry in pending:
            if entry["input_file_id"] is None:
                path = Path(entry["requests_path"])
                with open(path, "rb") as fh:
                    uploaded = client.files.create(file=(path.name, fh), purpose="batch")
                entry["input_file_id"] = uploaded.id
                entry["status"] = "uploaded"
                self._save(m)
            batch = (
                self._find_batch(entry["input_file_id"]) if entry["status"] == "uploaded" else None
            )
            if batch is None:
                import openai

                try:
                    batch = client.batches.create(
                        input_file_id=entry["input_file_id"],
                        endpoint=ENDPOINT,
                        completion_window="24h",
                        metadata={
                            "ragframe_job": m["job"],
                            "stage": str(entry["stage"]),
                            "part": str(entry["part"]),
                        },
                    )
                except openai.BadRequestError as err:
                    # Refused for good (e.g. the enqueued-token limit): its requests count
                    # as failed once and go into the next stage.
                    entry["id"] = f"refused-{m['job']}-{entry['stage']}-{entry['part']}"
                    entry["status"] = "failed"
                    entry["errors"] = _error_text(400, getattr(err, "body", None), str(err))
                    self._save(m)
                    continue
            entry["id"] = batch.id
            self._update(entry, batch)
            self._save(m)
            progress.submitted.append(batch.id)

    def _find_batch(self, input_file_id: str) -> Any:
        """A batch already created from this file (the process died before recording it)."""
        client = self._api()
        for seen, batch in enumerate(client.batches.list(limit=100)):
            if batch.input_file_id == input_file_id:
                return batch
            if seen >= 1000:
                break
        return None

    def _api(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            judge = self.judge
            self._client = OpenAI(
                base_url=judge.base_url,
                api_key=judge._api_key or "not-needed",
                max_retries=3,
                timeout=max(judge.timeout, 300.0),
            )
        return self._client

    # ---------------------------------------------------------------- polling and collecting
    def _update(self, entry: dict[str, Any], batch: Any) -> None:
        entry["status"] = batch.status
        counts = batch.request_counts
        if counts is not None:
            entry["request_counts"] = {
                "total": counts.total,
                "completed": counts.completed,
                "failed": counts.failed,
            }
        entry["output_file_id"] = batch.output_file_id
        entry["error_file_id"] = batch.error_file_id
        errors = getattr(batch, "errors", None)
        data = getattr(errors, "data", None) if errors is not None else None
        if data:
            entry["errors"] = "; ".join(
                f"{e.code or 'error'}: {e.message or ''}".strip() for e in data[:5]
            )

    def _refresh(self, m: dict[str, Any]) -> None:
        entries = [
            e
            for e in m["batches"]
            if e["kind"] == "api" and e["id"] and not e["collected"] and e["status"] not in TERMINAL
        ]
        if not entries:
            return
        client = self._api()
        for entry in entries:
            self._update(entry, client.batches.retrieve(entry["id"]))

    def _request_bodies(
        self, entry: dict[str, Any], *, download: bool = True
    ) -> dict[str, dict[str, Any]]:
        """custom_id -> request body, from the kept request file (else the uploaded one)."""
        path = Path(entry["requests_path"]) if entry.get("requests_path") else None
        if path is not None and path.exists():
            text = path.read_text(encoding="utf-8")
        elif download and entry["kind"] == "api" and entry.get("input_file_id"):
            text = self._api().files.content(entry["input_file_id"]).text
        else:
            return {}
        return {
            line["custom_id"]: line["body"]
            for line in _read_jsonl(text)
            if isinstance(line.get("custom_id"), str) and isinstance(line.get("body"), dict)
        }

    def _collect_batch(
        self, m: dict[str, Any], entry: dict[str, Any], progress: BatchProgress
    ) -> None:
        client = self._api()
        bodies = self._request_bodies(entry)
        lines: list[dict[str, Any]] = []
        for file_id in (entry["output_file_id"], entry["error_file_id"]):
            if file_id:
                lines.extend(_read_jsonl(client.files.content(file_id).text))
        mine = set(entry["custom_ids"])
        counts = self._ingest(m, (x for x in lines if x.get("custom_id") in mine), bodies)
        missing = mine - counts.pop("seen_ids")
        why = entry.get("errors") or "no result line"
        for cid in sorted(missing):
            self._fail(m, cid, f"batch {entry['status']}: {why}")
        counts["failed"] += len(missing)
        entry["collected"], entry["collected_at"] = True, _now()
        entry["result"] = {"answered": counts["answered"], "failed": counts["failed"]}
        progress.notes.append(
            f"collected {entry['id']} (stage {entry['stage']}, {entry['status']}): "
            f"{counts['answered']} answered, {counts['failed']} failed"
        )

    def _ingest(
        self,
        m: dict[str, Any],
        lines: Iterable[dict[str, Any]],
        bodies: Mapping[str, dict[str, Any]],
    ) -> dict[str, Any]:
        """Validate each result line against its request and store the good ones."""
        cache = self.judge.cache
        assert cache is not None
        answered = failed = unknown = 0
        seen: set[str] = set()
        for line in lines:
            cid, completion, reason = read_result_line(line)
            body = bodies.get(cid) if cid is not None else None
            if cid is None or body is None:
                unknown += 1
                continue
            if cid in seen:
                continue
            seen.add(cid)
            if completion is None:
                self._fail(m, cid, reason or "no answer")
                failed += 1
                continue
            choice = completion["choices"][0]
            content = (choice.get("message") or {}).get("content") or ""
            usage = completion.get("usage") or {}
            tokens = (
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
            )
            schema = _schema(body)
            try:
                if choice.get("finish_reason") == "length":
                    raise AnswerError(
                        "the answer was cut off at max_tokens; answer more briefly", kind="length"
                    )
                if schema is not None:
                    parse_answer(content, schema)
            except AnswerError as err:
                self._fail(
                    m,
                    cid,
                    f"unusable answer ({err.kind}): {err.message}",
                    content=content,
                    repair=err.message,
                    usage=tokens,
                )
                failed += 1
                continue
            earlier = (m["failures"].pop(cid, None) or {}).get("usage") or [0, 0]
            paid = (tokens[0] + earlier[0], tokens[1] + earlier[1])
            cache.put(
                cid,
                self.judge.model,
                {
                    "content": content,
                    "logprobs": _logprobs(choice) if body.get("logprobs") else None,
                    "usage": {"prompt_tokens": paid[0], "completion_tokens": paid[1]},
                },
            )
            totals = m["totals"]
            totals["answered"] += 1
            totals["prompt_tokens"] += tokens[0]
            totals["completion_tokens"] += tokens[1]
            answered += 1
        return {"answered": answered, "failed": failed, "unknown": unknown, "seen_ids": seen}

    def _fail(
        self,
        m: dict[str, Any],
        cid: str,
        reason: str,
        *,
        content: str | None = None,
        repair: str | None = None,
        usage: tuple[int, int] | None = None,
    ) -> None:
        record = m["failures"].setdefault(cid, {"attempts": 0, "usage": [0, 0]})
        record["attempts"] += 1
        record["reason"] = reason
        if repair is not None:  # else keep the last unusable answer: the retry still repairs it
            record["content"] = (content or "")[:_KEEP_CONTENT]
            record["repair"] = repair
        if usage is not None:  # paid for, like a live run's unusable answer before its repair
            record["usage"] = [record["usage"][0] + usage[0], record["usage"][1] + usage[1]]
        m["totals"]["failed_lines"] += 1
        m["totals"]["prompt_tokens"] += usage[0] if usage else 0
        m["totals"]["completion_tokens"] += usage[1] if usage else 0

    def _advance(
        self, m: dict[str, Any], progress: BatchProgress, *, overwrite: bool
    ) -> BatchProgress:
        """Every batch is in: run the pass; submit the next stage, or finish."""
        frame, metric_list, cols = self._inputs_for(m)
        t0 = time.monotonic()
        scored, deferred, stats = self._pass(m, frame, metric_list, cols)
        if deferred:
            if m["mode"] == "file":
                progress.state, progress.requests = "missing", len(deferred)
                m["state"] = "missing"
                progress.notes.append(
                    f"{len(deferred)} requests are not answered yet: export them "
                    "(ragframe batch export) and import the results"
                )
                self._save(m)
                return progress
            self._submit_lines(m, deferred, progress)
            m["state"] = progress.state
            self._save(m)
            return progress
        from ragframe.evaluate import RunResult

        given_up = self._given_up(m)
        ids = [e["id"] for e in m["batches"] if e["kind"] == "api" and e["id"]]
        extra = {
            "batch": {
                "job": m["job"],
                "manifest": str(self.path.resolve()),
                "batch_ids": ids,
                "stages": m["stage"],
                "requests_submitted": m["totals"]["requests"],
                "failed_lines": m["totals"]["failed_lines"],
                "given_up_requests": len(given_up),
                "prompt_tokens": m["totals"]["prompt_tokens"],
                "completion_tokens": m["totals"]["completion_tokens"],
            }
        }
        result = RunResult(
            frame=scored,
            metrics=metric_list,
            judge=self.judge,
            stats=stats,
            seconds=time.monotonic() - t0,
            started=m["created"],
            extra=extra,
        )
        progress.state, progress.result, progress.given_up = "done", result, len(given_up)
        progress.stage = m["stage"]
        m["state"] = "done"
        if m.get("output"):
            target = Path(m["output"])
            result.write_parquet(target, overwrite=overwrite)
            progress.output = target
            progress.notes.append(f"done after {m['stage']} stage(s): wrote {target}")
        else:
            progress.notes.append(f"done after {m['stage']} stage(s)")
        if given_up:
            progress.notes.append(
                f"{len(given_up)} requests failed {m['max_attempts']} times and were given up; "
                "their rows say why in {metric}_detail.error"
            )
        self._save(m)
        return progress

    # ---------------------------------------------------------------- reporting
    @staticmethod
    def _by_task(lines: Iterable[dict[str, Any]]) -> str:
        counts: dict[str, int] = {}
        for line in lines:
            name = _task_name(line["body"])
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in counts.items())

    def _waiting_note(self, m: dict[str, Any]) -> str:
        parts = []
        for e in self._open(m):
            if e["kind"] == "file":
                parts.append(
                    f"{e['id']}: {len(e['custom_ids'])} requests written to "
                    f"{e['requests_path']}, results not imported yet"
                )
                continue
            c = e["request_counts"]
            parts.append(
                f"{e['id']} {e['status']} {c.get('completed', 0) + c.get('failed', 0)}/"
                f"{c.get('total', len(e['custom_ids']))}"
            )
        return "waiting for " + "; ".join(parts)

    def _describe(self, m: dict[str, Any]) -> dict[str, Any]:
        limit = m["max_attempts"]
        return {
            "job": m["job"],
            "state": m["state"],
            "mode": m["mode"],
            "stage": m["stage"],
            "model": m["judge"]["model"],
            "endpoint_host": m["judge"]["endpoint_host"],
            "input": m["input"]["path"],
            "rows": m["input"]["rows"],
            "metrics": [r["name"] for r in m["metrics"]],
            "output": m["output"],
            "batches": [
                {
                    "id": e["id"],
                    "kind": e["kind"],
                    "stage": e["stage"],
                    "part": e["part"],
                    "status": e["status"],
                    "requests": len(e["custom_ids"]),
                    "request_counts": e["request_counts"],
                    "collected": e["collected"],
                    "result": e["result"],
                }
                for e in m["batches"]
            ],
            "retrying": sum(1 for f in m["failures"].values() if f["attempts"] < limit),
            "given_up": sum(1 for f in m["failures"].values() if f["attempts"] >= limit),
            "totals": dict(m["totals"]),
        }


def format_status(info: dict[str, Any]) -> str:
    """The status as a plain-text table (what `ragframe batch status` prints)."""
    lines = [
        f"job {info['job']}  state {info['state']}  stage {info['stage']}  ({info['mode']})",
        f"{', '.join(info['metrics'])} over {info['rows']} rows of {info['input']}; "
        f"model {info['model']} at {info['endpoint_host']}",
        "",
        f"{'batch':<40} {'stage':>5} {'part':>4} {'status':<11} {'requests':>8} "
        f"{'done':>6} {'failed':>6}  collected",
    ]
    for b in info["batches"]:
        c = b["request_counts"] or {}
        lines.append(
            f"{b['id'] or '(not created)':<40} {b['stage']:>5} {b['part']:>4} {b['status']:<11} "
            f"{b['requests']:>8} {c.get('completed', 0):>6} {c.get('failed', 0):>6}  "
            f"{'yes' if b['collected'] else 'no'}"
        )
    lines.append("")
    t = info["totals"]
    lines.append(
        f"requests submitted {t['requests']}, answered {t['answered']}, failed lines "
        f"{t['failed_lines']} (retrying {info['retrying']}, given up {info['given_up']}); "
        f"tokens {t['prompt_tokens']} prompt + {t['completion_tokens']} completion"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ metrics


def _metric_record(metric: Any) -> dict[str, Any]:
    from ragframe.metrics import Metric

    if isinstance(metric, Metric):
        return {
            "name": metric.name,
            "class": type(metric).__name__,
            "config": json.loads(json.dumps(metric.config(), default=str)),
            "prompt_hashes": {t.name: t.prompt_hash for t in metric.tasks()},
        }
    return {
        "name": metric.name,
        "class": type(metric).__name__,
        "config": {"of": list(metric.of)},
        "prompt_hashes": {},
    }


def _identity(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What names a job's metrics. Settings are not compared: a metric may fill them in as
    it runs (G-Eval writes its steps), and other settings only ask other questions."""
    return [(r["name"], r["class"]) for r in records]


def _metric_from_record(record: dict[str, Any]) -> Any:
    """Rebuild a metric after a restart; refuse when it would not ask the same questions."""
    from ragframe.metrics import REGISTRY, RagasScore

    if record["class"] == "RagasScore":
        return RagasScore(of=tuple(record["config"]["of"]), name=record["name"])
    cls = REGISTRY.get(record["name"])
    candidates = []
    if cls is not None and cls.__name__ == record["class"]:
        candidates.append(lambda: cls())
        candidates.append(lambda: cls(**record["config"]))
    for make in candidates:
        try:
            metric = make()
        except (TypeError, ValueError, RagframeError):
            continue
        if _metric_record(metric) == record:
            return metric
    raise ConfigError(
        f"cannot rebuild metric {record['name']!r} ({record['class']}, {record['config']}) "
        "from the manifest: pass metrics=[...] as given to submit"
    )
