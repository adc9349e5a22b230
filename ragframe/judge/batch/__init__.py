"""Score a frame through the OpenAI Batch API (half price, answers within 24 h), across restarts.

Two stores hold all the state, and nothing else does:

- the answer cache (the SQLite file live runs use) holds every answer, keyed by request;
- a manifest (JSON, typed and versioned, replaced atomically: `manifest.py`) holds the
  batches: ids, files, custom_ids, stage, status, and how often each request has failed.

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

The job itself (BatchJob, the steps above) runs the metrics, so it is the engine's:
`ragframe.engine.batch`. The parts here: `manifest` (the job's state on disk),
`identity` (a job's metrics and whether given ones match), `remote` (the Files and Batches
API), `ingest` (result lines into the cache), `jsonl` (request files and result lines),
`report` (the status and its table).
"""

from ragframe.judge.batch.jsonl import (
    ENDPOINT,
    MAX_BYTES,
    MAX_REQUESTS,
    read_result_line,
)
from ragframe.judge.batch.jsonl import split as _split
from ragframe.judge.batch.manifest import (
    DEFAULT_MAX_ATTEMPTS,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    MAX_STAGES,
    TERMINAL,
    BatchStatus,
    JobState,
    Manifest,
    Mode,
)
from ragframe.judge.batch.report import format_status
from ragframe.judge.client import REPAIR_PROMPT as REPAIR
from ragframe.judge.transport import scrub

#: The states a job's progress reports (kept for code that named the old Literal).
State = JobState

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "ENDPOINT",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "MAX_BYTES",
    "MAX_REQUESTS",
    "MAX_STAGES",
    "REPAIR",
    "TERMINAL",
    "BatchStatus",
    "JobState",
    "Manifest",
    "Mode",
    "State",
    "_split",
    "format_status",
    "read_result_line",
    "scrub",
]
