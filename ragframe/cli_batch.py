"""`ragframe batch ...`: score a Parquet log through the OpenAI Batch API, or vllm run-batch.

    ragframe batch submit IN.parquet --manifest M.json --metrics faithfulness,context_recall
    ragframe batch status --manifest M.json
    ragframe batch collect --manifest M.json -o OUT.parquet      # again after each stage
    ragframe batch run IN.parquet -o OUT.parquet --manifest M.json  # all of it, in one process
    ragframe batch export IN.parquet --jsonl requests.jsonl --manifest M.json
    ragframe batch import --manifest M.json results.jsonl

All state is in the manifest and the answer cache, so any command can be repeated after a crash
or on another day: nothing answered is paid for twice, no batch is submitted twice.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ragframe.errors import ConfigError, RagframeError

CORE_METRICS = "faithfulness,answer_relevancy,context_precision,context_recall"


def _judge_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="judge model (default: the manifest's, else $RAGFRAME_MODEL)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    p.add_argument("--embedding-model", help="embedding model for answer_relevancy (sent live)")
    p.add_argument("--cache", help="answer cache file (default: the manifest's, else ~/.cache)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per HTTP request")
    p.add_argument(
        "--max-attempts",
        type=int,
        help="times a request may fail in batches before its rows report it (default 3)",
    )


def _job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", default=CORE_METRICS, help="comma-separated metric names")
    p.add_argument("--columns", help="rename inputs: question=my_prompt,answer=my_output")


def add_batch_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `batch` and its subcommands to the `ragframe` parser's subparsers."""
    batch = subparsers.add_parser(
        "batch",
        help="score through the OpenAI Batch API (half price, within 24 h) or vllm run-batch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = batch.add_subparsers(dest="batch_command", required=True)

    submit = sub.add_parser("submit", help="submit the requests the cache lacks as batches")
    submit.add_argument("input", help="input Parquet file")
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
    run.add_argument("input", help="input Parquet file")
    run.add_argument("-o", "--output", required=True, help="output Parquet file")
    run.add_argument("--manifest", required=True)
    run.add_argument("--overwrite", action="store_true", help="replace an existing output")
    run.add_argument("--poll-interval", type=float, default=60.0, help="seconds between polls")
    run.add_argument(
        "--wait",
        type=float,
        default=48 * 3600,
        help="give up waiting after this many seconds (resume with collect; default 48 h)",
    )
    _job_options(run)
    _judge_options(run)

    export = sub.add_parser("export", help="write the missing requests as JSONL (vllm run-batch)")
    export.add_argument("input", help="input Parquet file")
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
    from ragframe.judge import Judge

    recorded = _manifest_judge(manifest)
    return Judge(
        args.model or recorded.get("model"),
        base_url=args.base_url,
        embedding_model=args.embedding_model or recorded.get("embedding_model"),
        timeout=args.timeout,
        cache=args.cache or recorded.get("cache") or True,
        progress=False,
    )


def _print_done(progress: Any) -> None:
    from ragframe.cli import format_summary

    if progress.result is None:
        return
    summary = progress.result.summary()
    print(format_summary(summary, local=False))
    info = summary["batch"]
    print(
        f"batches {len(info['batch_ids'])} over {info['stages']} stage(s): "
        f"{info['requests_submitted']} requests submitted, {info['failed_lines']} failed lines, "
        f"{info['given_up_requests']} given up; batch tokens {info['prompt_tokens']} prompt + "
        f"{info['completion_tokens']} completion"
    )


def _print_notes(progress: Any) -> None:
    if progress.notes:
        print(progress.message(), flush=True)


def cmd_batch(args: argparse.Namespace) -> int:
    """Run one `ragframe batch` subcommand; 0 when it did its part, 3 when `run` stopped waiting.

    Errors are RagframeError (the caller prints them and exits 2).
    """
    from ragframe.cli import _parse_columns
    from ragframe.judge.batch import BatchJob, format_status

    command = args.batch_command
    if command == "export" and not args.manifest:
        args.manifest = f"{args.jsonl}.manifest.json"
    manifest = Path(args.manifest)
    job = BatchJob(manifest, _judge(args, manifest), max_attempts=args.max_attempts)
    if command in ("submit", "run", "export"):
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        columns = _parse_columns(args.columns)
        for out in (getattr(args, "output", None), getattr(args, "jsonl", None)):
            if out and Path(out).resolve() == Path(args.input).resolve():
                raise ConfigError(
                    "the output must not be the input file; the input is never written"
                )
    if command == "submit":
        progress = job.submit(args.input, metrics, columns)
        print(progress.message())
        return 0
    if command == "status":
        info = job.status()
        print(json.dumps(info, indent=1) if args.json else format_status(info))
        return 0
    if command == "collect":
        progress = job.collect(args.output, overwrite=args.overwrite)
        print(progress.message())
        _print_done(progress)
        return 0
    if command == "run":
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
        _print_done(progress)
        return 0 if progress.state == "done" else 3
    if command == "export":
        progress = job.export_jsonl(args.input, metrics, args.jsonl, columns)
        print(progress.message())
        if progress.state == "submitted":
            print(
                f"run it with: vllm run-batch -i {args.jsonl} -o results.jsonl --model "
                f"{job.judge.model}; then: ragframe batch import --manifest {manifest} "
                "results.jsonl"
            )
        return 0
    if command == "import":
        counts = job.import_results(args.results)
        print(
            f"imported {args.results}: {counts['answered']} answers stored, {counts['failed']} "
            f"failed (retried by the next export), {counts['unknown']} lines not of this job"
        )
        return 0
    raise RagframeError(f"unknown batch command {command!r}")
