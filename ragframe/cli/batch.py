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

from ragframe.cli import common, options
from ragframe.errors import RagframeError

#: What the judge options say where a batch job takes its defaults from.
_BATCH_HELPS = {
    "model": "judge model (default: the manifest's, else $RAGFRAME_MODEL)",
    "embedding-model": "embedding model for answer_relevancy (sent live)",
    "cache": "answer cache file (default: the manifest's, else ~/.cache)",
}


def _judge_options(p: argparse.ArgumentParser) -> None:
    options.add_judge_options(
        p,
        ("model", "base-url", "embedding-model", "cache", "timeout", "retry-failed"),
        helps=_BATCH_HELPS,
    )
    p.add_argument(
        "--max-attempts",
        type=common.positive_int,
        help="times a request may fail in batches before its rows report it (default 3)",
    )


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", default=common.CORE_METRICS, help="comma-separated metric names")
    p.add_argument("--columns", help="rename inputs: question=my_prompt,answer=my_output")


INPUT_HELP = "input log: .parquet, .jsonl / .ndjson or .csv"
EXIT_STATUSES = (
    "exit status: 0 done (or this step done); 2 a configuration, input or endpoint error (one "
    "line says what to fix); 3 run stopped waiting (resume with collect); 4 the job finished "
    "but some metric failed on every row that had its inputs (the output is written all the "
    "same)"
)


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
    _step(sub, "submit", "submit the requests the cache lacks as batches", reads=True)
    status = _step(sub, "status", "poll the job's batches and print their state")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    collect = _step(
        sub, "collect", "store finished batches, submit the next stage or write the output"
    )
    options.add_output(collect, "output Parquet file, written when all is done", required=False)
    run = _step(sub, "run", "submit, poll and collect until done, in one process", reads=True)
    options.add_output(run, "output Parquet file")
    run.add_argument(
        "--poll-interval", type=common.positive_float, default=60.0, help="seconds between polls"
    )
    run.add_argument(
        "--wait",
        type=common.non_negative_float,
        default=48 * 3600,
        help="give up waiting after this many seconds (resume with collect; default 48 h)",
    )
    export = _step(
        sub,
        "export",
        "write the missing requests as JSONL (vllm run-batch)",
        reads=True,
        manifest="the job's manifest (default: JSONL.manifest.json)",
    )
    export.add_argument("--jsonl", required=True, help="the request file to write")
    imp = _step(sub, "import", "read a batch output file (OpenAI or vllm) into the cache")
    imp.add_argument("results", help="output JSONL of vllm run-batch or the Batch API")
    return batch


def _step(
    sub: Any, name: str, help: str, *, reads: bool = False, manifest: str | None = None
) -> argparse.ArgumentParser:
    """One `batch` subcommand: the manifest (required unless `manifest` says its default),
    the judge options, and for one that `reads` the log, the log and what to score in it."""
    step = sub.add_parser(name, help=help, epilog=EXIT_STATUSES)
    if reads:
        step.add_argument("input", help=INPUT_HELP)
    step.add_argument(
        "--manifest", required=manifest is None, help=manifest or "the job's manifest (JSON)"
    )
    if reads:
        _job_options(step)
    _judge_options(step)
    return step


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
    recorded = _manifest_judge(manifest)
    return options.judge_from_args(
        args,
        model=args.model or recorded.get("model"),
        embedding_model=args.embedding_model or recorded.get("embedding_model"),
        cache=args.cache or recorded.get("cache") or True,
        progress=False,
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
    common.print_summary(summary, local=False)
    info = summary["batch"]
    print(
        f"batches {len(info['batch_ids'])} over {info['stages']} stage(s): "
        f"{info['requests_submitted']} requests submitted, {info['failed_lines']} failed lines, "
        f"{info['given_up_requests']} given up; batch tokens {info['prompt_tokens']} prompt + "
        f"{info['completion_tokens']} completion{_batch_cost(info)}"
    )
    result = progress.result
    failed = failed_metrics(result.frame, result.metrics, result.stats)
    return common.report_failed_metrics(failed, str(progress.output) if progress.output else None)


def _batch_cost(info: dict[str, Any]) -> str:
    """ ", 5120 of the prompt cached; cost $0.0123": what the batch section records of the
    provider's prompt cache and of what the lines cost (a summary written before says none)."""
    cached = info.get("cached_prompt_tokens") or 0
    part = f", {cached} of the prompt cached" if cached else ""
    dollars = info.get("cost_usd")
    return part + ("" if dollars is None else f"; cost ${dollars:.4f}")


def _print_notes(progress: Any) -> None:
    """Print what a running job has to say (called by `BatchJob.run` between polls)."""
    if progress.notes:
        print(progress.message(), flush=True)
