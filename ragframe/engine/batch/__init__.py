"""A job through the OpenAI Batch API (or vllm run-batch): the metrics run in passes whose
requests go out as batch files, across restarts (`ragframe.judge.batch` holds the wire parts:
the manifest, the JSONL, the Files and Batches API). `job` is BatchJob, `identity` what a
job's metrics are and whether given ones match, `ingest` result lines into the cache."""

from ragframe.engine.batch.job import BatchJob, BatchProgress

__all__ = ["BatchJob", "BatchProgress"]
