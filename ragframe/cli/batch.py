"""`ragframe batch ...`: score a log (Parquet, JSON Lines or CSV) through the OpenAI Batch API,
or vllm run-batch.

    ragframe batch submit IN.parquet --manifest M.json --metrics faithfulness,context_recall
    ragframe batch status --manifest M.json
    ragframe batch collect --manifest M.json -o OUT.parquet      # again after each stage
    ragframe batch run IN.parquet -o OUT.parquet --manifest M.json  # all of it, in one process
    ragframe batch export IN.parquet --jsonl requests.jsonl --manifest M.json
    ragframe batch import --manifest M.json results.jsonl

All state is in the manifest and the answer cache, so any command can be repeated after a crash
or on another day: nothing answered is paid for twice, no batch is submitted twice.

Exit status: 0 done (or this step done); 2 a configuration, input or endpoint error, on one
line; 3 `run` stopped waiting (resume with collect); 4 the job finished but some metric failed
on every row that had its inputs (the output is written all the same).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragframe.cli import common
from ragframe.errors import RagframeError


def _judge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="judge model (default: the manifest's, else $RAGFRAME_MODEL)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    p.add_argument("--embedding-model", help="embedding model for answer_relevancy (sent live)")
    p.add_argument("--cache", help="answer cache file (default: the manifest's, else ~/.cache)")
    p.add_argument(
        "--timeout", type=common.positive_float, default=120.0, help="seconds per HTTP request"
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="send again the requests the cache remembers as failed for good (cut off at "
        "max_tokens, or never fitting their schema); by default they are not paid for twice",
    )
    p.add_argument(
        "--max-attempts",
        type=common.positive_int,
        help="times a request may fail in batches before its rows report it (default 3)",
    )


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", default=common.CORE_METRICS, help="comma-separated metric names")
    p.add_argument("--columns", help="rename inputs: question=my_prompt,answer=my_output")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `batch` and its subcommands to the `ragframe` parser's subparsers."""
    batch = subparsers.add_parser(
        "batch",
        help="score through the OpenAI Batch API (half price, within 24 h) or vllm run-batch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    batch.set_defaults(handler=cmd_batch)
    sub = batch.add_subparsers(dest="batch_command", required=True)

    submit = sub.add_parser("submit", help="submit the requests the cache lacks as batches")
    submit.add_argument("input", help="input log: .parquet, .jsonl / .ndjson or .csv")
    submit.add_argument("--manifest", required=True, help="the job's manifest (JSON)")
    _job_options(submit)
    _judge_options(submit)

    status = sub.add_parser("status", help="poll the job's batches and print their state")
    status.add_argument("--manifest", required=True)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    _judge_options(status)

    collect = sub.add_parser(
        "collect", help="store finished batches, submit the next stage or write the output"
    )
    collect.add_argument("--manifest", required=True)
    collect.add_argument("-o", "--output", help="output Parquet file, written when all is done")
    collect.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _judge_options(collect)

    run = sub.add_parser("run", help="submit, poll and collect until done, in one process")
    run.add_argument("input", help="input log: .parquet, .jsonl / .ndjson or .csv")
    run.add_argument("-o", "--output", required=True, help="output Parquet file")
    run.add_argument("--manifest", required=True)
    run.add_argument("--overwrite", action="store_true", help="replace an existing output")
    run.add_argument(
        "--poll-interval",
        type=common.positive_float,
        default=60.0,
        help="seconds between polls",
    )
    run.add_argument(
        "--wait",
        type=common.non_negative_float,
        default=48 * 3600,
        help="give up waiting after this many seconds (resume with collect; default 48 h)",
    )
    _job_options(run)
    _judge_options(run)

    export = sub.add_parser("export", help="write the missing requests as JSONL (vllm run-batch)")
    export.add_argument("input", help="input log: .parquet, .jsonl / .ndjson or .csv")
    export.add_argument("--jsonl", required=True, help="the request file to write")
    export.add_argument("--manifest", help="the job's manifest (default: JSONL.manifest.json)")
    _job_options(export)
    _judge_options(export)

    imp = sub.add_parser("import", help="read a batch output file (OpenAI or vllm) into the cache")
    imp.add_argument("results", help="output JSONL of vllm run-batch or the Batch API")
    imp.add_argument("--manifest", required=True)
    _judge_options(imp)
    return batch


def _manifest_judge(path: Path) -> dict[str, Any]:
    """The judge settings a manifest recorded ({} when there is none yet)."""
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")).get("judge") or {})
    except (ValueError, AttributeError):
        return {}


def _judge(args: argparse.Namespace, manifest: Path) -> Any:
    """The judge for this command: the flags given, else what the manifest recorded."""
    from ragframe.judge import Judge

    recorded = _manifest_judge(manifest)
    return Judge(
        args.model or recorded.get("model"),
        base_url=args.base_url,
        embedding_model=args.embedding_model or recorded.get("embedding_model"),
        timeout=args.timeout,
        cache=args.cache or recorded.get("cache") or True,
        progress=False,
        retry_failed=args.retry_failed,
    )


def cmd_batch(args: argparse.Namespace) -> int:
    """Run one `ragframe batch` subcommand.

    Exit status: 0 when it did its part; 3 when `run` stopped waiting (resume with collect);
    4 when the job finished but some metric failed on every row that had its inputs (the
    output is written all the same). Errors are RagframeError (the caller prints them on one
    line and exits 2); an endpoint that cannot serve the job is named with the fix.
    """
    from ragframe.engine.batch import BatchJob

    if args.batch_command == "export" and not args.manifest:
        args.manifest = f"{args.jsonl}.manifest.json"
    manifest = Path(args.manifest)
    judge = _judge(args, manifest)
    with common.endpoint_named(judge):
        job = BatchJob(manifest, judge, max_attempts=args.max_attempts)
        action = ACTIONS.get(args.batch_command)
        if action is None:
            raise RagframeError(f"unknown batch command {args.batch_command!r}")
        return action(args, job)


def _job_inputs(args: argparse.Namespace) -> tuple[list[str], dict[str, str] | None]:
    """The metric names and column renames of a command that reads the input (an output
    that would overwrite the input is refused)."""
    metrics = common.parse_metrics(args.metrics)
    columns = common.parse_columns(args.columns)
    common.refuse_input_as_output(
        args.input, getattr(args, "output", None), getattr(args, "jsonl", None)
    )
    common.refuse_non_parquet_output(getattr(args, "output", None))
    return metrics, columns


def _submit(args: argparse.Namespace, job: Any) -> int:
    metrics, columns = _job_inputs(args)
    print(job.submit(args.input, metrics, columns).message())
    return common.EXIT_OK


def _status(args: argparse.Namespace, job: Any) -> int:
    from ragframe.judge.batch import format_status

    info = job.status()
    print(json.dumps(info, indent=1) if args.json else format_status(info))
    return common.EXIT_OK


def _collect(args: argparse.Namespace, job: Any) -> int:
    progress = job.collect(args.output, overwrite=args.overwrite)
    print(progress.message())
    return _print_done(progress)


def _run(args: argparse.Namespace, job: Any) -> int:
    metrics, columns = _job_inputs(args)
    progress = job.run(
        args.input,
        metrics,
        args.output,
        columns=columns,
        poll_interval=args.poll_interval,
        timeout=args.wait,
        overwrite=args.overwrite,
        on_progress=_print_notes,
    )
    if progress.state != "done":
        return common.EXIT_STOPPED_WAITING
    return _print_done(progress)


def _export(args: argparse.Namespace, job: Any) -> int:
    metrics, columns = _job_inputs(args)
    progress = job.export_jsonl(args.input, metrics, args.jsonl, columns)
    print(progress.message())
    if progress.state == "submitted":
        print(
            f"run it with: vllm run-batch -i {args.jsonl} -o results.jsonl --model "
            f"{job.judge.model}; then: ragframe batch import --manifest {Path(args.manifest)} "
            "results.jsonl"
        )
    return common.EXIT_OK


def _import(args: argparse.Namespace, job: Any) -> int:
    counts = job.import_results(args.results)
    print(
        f"imported {args.results}: {counts['answered']} answers stored, {counts['failed']} "
        f"failed (retried by the next export), {counts['unknown']} lines not of this job"
    )
    return common.EXIT_OK


ACTIONS: dict[str, Callable[[argparse.Namespace, Any], int]] = {
    "submit": _submit,
    "status": _status,
    "collect": _collect,
    "run": _run,
    "export": _export,
    "import": _import,
}
"""What each `ragframe batch` subcommand does, given its arguments and the job."""


def _print_done(progress: Any) -> int:
    """Print the summary of a finished job; the exit status (4 when a metric failed on
    every row that had its inputs, the output written all the same)."""
    from ragframe.engine.prepare import failed_metrics

    if progress.result is None:
        return common.EXIT_OK
    summary = progress.result.summary()
    print(common.format_summary(summary, local=False))
    info = summary["batch"]
    print(
        f"batches {len(info['batch_ids'])} over {info['stages']} stage(s): "
        f"{info['requests_submitted']} requests submitted, {info['failed_lines']} failed lines, "
        f"{info['given_up_requests']} given up; batch tokens {info['prompt_tokens']} prompt + "
        f"{info['completion_tokens']} completion"
    )
    result = progress.result
    failed = failed_metrics(result.frame, result.metrics, result.stats)
    return common.report_failed_metrics(failed, str(progress.output) if progress.output else None)


def _print_notes(progress: Any) -> None:
    """Print what a running job has to say (called by `BatchJob.run` between polls)."""
    if progress.notes:
        print(progress.message(), flush=True)
