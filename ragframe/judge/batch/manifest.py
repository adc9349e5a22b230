"""The batch job's manifest: typed, versioned, written atomically, one process at a time.

On disk it is JSON with `format` and `version` fields; in memory a `Manifest` of dataclasses.
The layout of version 1 is the one the Batch API backend wrote from its first release, so
every manifest written so far reads as is. When the layout changes, raise
`MANIFEST_VERSION` and teach `_upgrade` to turn the previous version into the new one: a
manifest this ragframe cannot read is refused with what to do, never half read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ragframe._version import __version__
from ragframe.errors import ConfigError, RagframeError
from ragframe.judge.batch.codec import JSON_NAME, OMIT_NONE, Unreadable, from_json, to_json

MANIFEST_FORMAT = "ragframe-batch-manifest"
#: The layout this ragframe writes, and the newest it reads.
MANIFEST_VERSION = 1
DEFAULT_MAX_ATTEMPTS = 3
#: A job that needs more stages than this is looping, not converging.
MAX_STAGES = 50
_KEEP_CONTENT = 32_000  # characters of an unusable answer kept for its repair prompt


class JobState(StrEnum):
    """Where a job stands: "submitted" (new batches were created), "waiting" (batches still
    run), "missing" (a file-mode job has unanswered requests: export them), "done" (every
    request answered or given up). A job not submitted yet is "new"."""

    NEW = "new"
    SUBMITTED = "submitted"
    WAITING = "waiting"
    MISSING = "missing"
    DONE = "done"


class Mode(StrEnum):
    """How requests travel: uploaded to the Files/Batches API, or written to JSONL files
    (for `vllm run-batch`) whose results are imported."""

    API = "api"
    FILE = "file"


class BatchStatus(StrEnum):
    """A batch's status: ragframe's own before creation and for files, then the Batch API's."""

    PREPARED = "prepared"  # request file written, not uploaded
    UPLOADED = "uploaded"  # input file uploaded, batch not created (or not recorded)
    EXPORTED = "exported"  # written for vllm run-batch, results not imported
    SUPERSEDED = "superseded"  # an export replaced by a newer one
    IMPORTED = "imported"  # an export whose results were imported
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


TERMINAL = frozenset(
    {BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}
)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def status_of(text: str) -> str:
    """A known status as a BatchStatus; a server's status this ragframe does not know as is."""
    return BatchStatus(text) if text in BatchStatus._value2member_map_ else text


# -------------------------------------------------------------------------------- the parts
# Fields are in their order on disk (the codec writes them so): kw_only lets defaults mix.


@dataclass(kw_only=True)
class InputInfo:
    """The rows the job scores: their file (a copy when a frame was given) and row count."""

    path: str
    copied: bool
    rows: int


@dataclass(kw_only=True)
class JudgeInfo:
    """The judge the job was made for; its answers are in `cache`."""

    model: str
    endpoint_host: str
    embedding_model: str | None
    cache: str | None


@dataclass(kw_only=True)
class MetricRecord:
    """One metric of the job: what names it, its settings, the prompts it was asked with."""

    name: str
    cls: str = field(metadata={JSON_NAME: "class"})
    config: dict[str, Any]
    prompt_hashes: dict[str, str]


@dataclass(kw_only=True)
class RequestCounts:
    total: int
    completed: int = 0
    failed: int = 0


@dataclass(kw_only=True)
class Collected:
    """What collecting a batch gave: lines answered and lines failed."""

    answered: int
    failed: int


@dataclass(kw_only=True)
class Batch:
    """One batch (or, in file mode, one exported request file) and its requests."""

    id: str | None = None
    kind: Mode
    stage: int
    part: int
    status: str  # a BatchStatus, or a server's status this ragframe does not know
    created: str = field(default_factory=now)
    requests_path: str | None
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    request_counts: RequestCounts
    errors: str | None = None
    collected: bool = False
    collected_at: str | None = None
    result: Collected | None = None
    custom_ids: list[str]

    def __post_init__(self) -> None:
        self.status = status_of(self.status)

    @classmethod
    def for_requests(
        cls,
        kind: Mode,
        stage: int,
        part: int,
        custom_ids: list[str],
        requests_path: str,
        status: str,
        ident: str | None = None,
    ) -> Batch:
        """A new batch of `custom_ids`, none of them answered yet."""
        return cls(
            id=ident,
            kind=kind,
            stage=stage,
            part=part,
            status=status,
            requests_path=requests_path,
            request_counts=RequestCounts(total=len(custom_ids)),
            custom_ids=custom_ids,
        )

    def mark_collected(self) -> None:
        self.collected, self.collected_at = True, now()


@dataclass(kw_only=True)
class Failure:
    """How often a request failed, why last, and (for an unusable answer) what to repair."""

    attempts: int = 0
    usage: tuple[int, int] = (0, 0)  # prompt, completion tokens paid for its failed answers
    reason: str = ""
    #: The last unusable answer, fed back by its retry, and why it could not be used.
    content: str | None = field(default=None, metadata={OMIT_NONE: True})
    repair: str | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(kw_only=True)
class Totals:
    """Counts over the whole job."""

    requests: int = 0  # request lines submitted, retries included
    answered: int = 0  # answers stored in the cache
    failed_lines: int = 0  # failed attempts: error lines, unusable answers, lines missing
    #: Tokens paid for, failed answers included.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Of `prompt_tokens`, those the provider took from its prompt cache (billed at its
    #: cached rate), as its result lines report them; None (and left out of the file) until
    #: a line is read by a ragframe that counts them, so manifests written before read as is.
    cached_prompt_tokens: int | None = field(default=None, metadata={OMIT_NONE: True})


# ------------------------------------------------------------------------------ the manifest


@dataclass(kw_only=True)
class Manifest:
    """A job's state: what it scores, with which judge, its batches and failed requests.

    On disk it is `{"format", "version", <these fields>}` (see `to_json`)."""

    job: str
    ragframe_version: str = __version__  # the ragframe that created the job
    created: str = field(default_factory=now)
    updated: str = field(default_factory=now)
    input: InputInfo
    metrics: list[MetricRecord]
    columns: dict[str, str] | None
    judge: JudgeInfo
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    mode: Mode = Mode.API
    stage: int = 0
    state: JobState = JobState.NEW
    output: str | None = None
    batches: list[Batch] = field(default_factory=list)
    failures: dict[str, Failure] = field(default_factory=dict)
    totals: Totals = field(default_factory=Totals)

    # ---------------------------------------------------------------- the batches
    def open_batches(self) -> list[Batch]:
        """Batches whose answers are not in the cache yet (their requests must not be resent)."""
        return [b for b in self.batches if not b.collected]

    def held(self) -> set[str]:
        """The requests an open batch holds."""
        return {cid for b in self.open_batches() for cid in b.custom_ids}

    def uncreated(self) -> list[Batch]:
        """API batches recorded but not created yet (also after a crash)."""
        return [b for b in self.batches if b.kind is Mode.API and b.id is None]

    def supersede_exports(self) -> None:
        """A new export (or a switch to the API) replaces request files not imported yet;
        their results can still be imported."""
        for batch in self.batches:
            if batch.kind is Mode.FILE and not batch.collected:
                batch.status, batch.collected = BatchStatus.SUPERSEDED, True

    def next_stage(self, path: Path) -> int:
        self.stage += 1
        if self.stage > MAX_STAGES:
            raise RagframeError(
                f"the job needs more than {MAX_STAGES} stages; it is not converging "
                f"(see the failures in {str(path)!r})"
            )
        return self.stage

    # ---------------------------------------------------------------- failures
    def given_up(self) -> dict[str, str]:
        """custom_id -> why, for requests that failed `max_attempts` times."""
        return {
            cid: f"the batch request failed {f.attempts} times (last: {f.reason})"
            for cid, f in self.failures.items()
            if f.attempts >= self.max_attempts
        }

    def fail(
        self,
        cid: str,
        reason: str,
        *,
        scrub: Callable[[str], str],
        content: str | None = None,
        repair: str | None = None,
        usage: tuple[int, int] | None = None,
        scrub_content: Callable[[str], str] | None = None,
    ) -> None:
        """Count a failed attempt; `scrub` removes every credential of the judge from what is
        kept (`Secrets.of(judge).scrub`), `scrub_content` (default: `scrub`) from the unusable
        answer kept for its repair: `Secrets.scrub_answer`, which leaves words that only look
        like a short credential alone, so the repair shows the judge its own answer."""
        record = self.failures.setdefault(cid, Failure())
        record.attempts += 1
        record.reason = scrub(reason)
        if repair is not None:  # else keep the last unusable answer: the retry still repairs it
            record.content = (scrub_content or scrub)((content or "")[:_KEEP_CONTENT])
            record.repair = scrub(repair)
        if usage is not None:  # paid for, like a live run's unusable answer before its repair
            record.usage = (record.usage[0] + usage[0], record.usage[1] + usage[1])
        self.totals.failed_lines += 1
        self.totals.prompt_tokens += usage[0] if usage else 0
        self.totals.completion_tokens += usage[1] if usage else 0

    # ---------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, **to_json(self)}


# ------------------------------------------------------------------------------- versions


def _upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """The manifest in the current layout, from any layout this ragframe can read.

    A manifest without a version (hand-made, or from a build before versions) is read as
    version 1 when its fields fit. When the layout changes, add a step here from each
    older version to the next.
    """
    if "version" in raw:
        return raw
    return {"ragframe_version": "unknown", **raw, "version": 1}


def parse(raw: Any, path: Path) -> Manifest:
    """The manifest in `raw` (decoded JSON), or a ConfigError that says what to do."""
    if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
        raise ConfigError(f"{str(path)!r} is not a ragframe batch manifest")
    version = raw.get("version")
    maker = raw.get("ragframe_version")
    by = f"ragframe {maker}" if isinstance(maker, str) and maker else "the ragframe that wrote it"
    if version is not None and (
        not isinstance(version, int) or isinstance(version, bool) or version < 1
    ):
        raise ConfigError(
            f"{str(path)!r} has version {version!r}, which no ragframe writes: "
            "start a new --manifest"
        )
    if version is not None and version > MANIFEST_VERSION:
        raise ConfigError(
            f"{str(path)!r} is a version {version} batch manifest, written by {by}; this "
            f"ragframe ({__version__}) reads versions up to {MANIFEST_VERSION}: collect it "
            f"with {by} (or a later one), or start a new --manifest"
        )
    try:
        manifest: Manifest = from_json(Manifest, _upgrade(raw))
    except Unreadable as err:
        if version is None:
            what = (
                "It was written by an older ragframe (it has no version field): "
                f"collect it with {by}"
            )
        else:
            what = f"It is a version {version} manifest, written by {by}: undo any edit to it"
        raise ConfigError(
            f"{str(path)!r} cannot be read: {err}. {what}, or start a new --manifest"
        ) from None
    return manifest


# ---------------------------------------------------------------------------------- the file


def atomic_write(path: Path, data: bytes) -> None:
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


class ManifestFile:
    """Where a job's manifest lives: read, written atomically, locked per process."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Manifest | None:
        """The manifest, or None when the job has not started."""
        if not self.path.exists():
            return None
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ConfigError(f"manifest {str(self.path)!r} is not valid JSON: {err}") from None
        return parse(raw, self.path)

    def save(self, m: Manifest) -> None:
        m.updated = now()
        text = json.dumps(m.to_json(), indent=1, ensure_ascii=False)
        atomic_write(self.path, text.encode("utf-8"))

    @contextlib.contextmanager
    def locked(self, *, shared_ok: bool = False, wait: float = 60.0) -> Iterator[bool]:
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
