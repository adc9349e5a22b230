"""`ragframe score IN -o OUT.parquet`: score a log (Parquet, JSON Lines or CSV), chunk by chunk."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from ragframe.cli import common, options
from ragframe.cli import gate as gate_cli
from ragframe.cli.ray_score import add_ray_options
from ragframe.engine.spec import (
    DEFAULT_CHUNK_ROWS,
    MAX_REPEATS,
    RunSpec,
    metric_names,
    refuse_unsupported,
)
from ragframe.errors import ConfigError, RagframeError
from ragframe.inputs.io import refuse_remote_output
from ragframe.inputs.traces import FORMATS as TRACE_FORMATS

EXIT_STATUSES = (
    "exit status: 0 scored (and every gate passed); 1 a gate failed (--fail-under / "
    "--min-pass-rate; the output is written all the same); 2 a configuration, input or "
    "endpoint error (one line says what to fix; nothing is sent when it can be known before "
    "the first request); 4 some metric failed on every row that had its inputs (the output is "
    "written all the same; 4 wins over 1); 130 interrupted (rerun to resume from the cache)"
)
HELP = "score a log (Parquet, JSON Lines or CSV) and write the scored Parquet file"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `score` to the `ragframe` parser's subparsers."""
    score = options.subcommand(subparsers, "score", cmd_score, HELP, EXIT_STATUSES)
    score.add_argument(
        "input",
        help="input log: .parquet, .jsonl / .ndjson or .csv (in CSV, list columns hold JSON lists)",
    )
    options.add_output(
        score,
        "output Parquet file (not needed with --dry-run, which writes nothing)",
        required=False,
    )
    score.add_argument(
        "--from",
        dest="from_format",
        choices=(*TRACE_FORMATS, "auto"),
        help="INPUT is a trace export or another tool's dataset: read it into one row per RAG "
        "turn (question, answer, contexts, trace and span ids...) before scoring; 'auto' "
        "detects the format where it is unambiguous. Spans that form no row are counted and "
        "listed on stderr",
    )
    score.add_argument(
        "--metrics",
        default=common.CORE_METRICS,
        help=f"comma-separated metric names, or 'all' for every metric whose inputs the log "
        f"has (default: {common.CORE_METRICS}; `ragframe metrics` lists them); a name may be a "
        "[metric.NAME] of ragframe.toml (a G-Eval or rubric with your criteria)",
    )
    score.add_argument("--columns", help="rename inputs: question=my_prompt,answer=my_output")
    _add_run_options(score)
    options.add_judge_options(score.add_argument_group("the judge"))
    gate_cli.add_gate_options(score)
    add_ray_options(score)
    return score


def _add_run_options(score: argparse.ArgumentParser) -> None:
    """What part of the log is scored, how often and in what steps, and what a run may cost
    before it is refused (`--max-cost` is with the judge options: the judge stops a run that
    spends it)."""
    score.add_argument(
        "--sample",
        type=common.positive_int,
        metavar="N",
        help="score a uniform random sample of N rows (with their row_index in the log), and "
        "print the estimate for the whole log beside what the sample cost",
    )
    options.add_seed(score, "the sample's seed (default: 0; same seed, same rows)")
    score.add_argument(
        "--repeats",
        type=common.positive_int,
        default=1,
        metavar="K",
        help="score the rows K times at the judge's seed + 0..K-1 and report, per metric, the "
        f"per-row spread and the test-retest reliability (default: 1, at most {MAX_REPEATS}; "
        "scored in memory; --dry-run and --max-cost count every repeat)",
    )
    score.add_argument(
        "--chunk-rows",
        type=common.positive_int,
        help="rows read, scored and written at a time (default: 2000; memory is bounded by "
        "this, not by the file; not with --ray, whose batches --batch-rows sizes, nor with "
        "--sample, --repeats or --jury, which score in memory)",
    )
    score.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate requests, tokens and cost without sending or writing anything, then "
        "stop (no -o needed; an existing one is left alone)",
    )
    score.add_argument(
        "--calibration",
        action="append",
        metavar="FILE",
        help="a calibration file (ragframe calibrate): adds {metric}_p_human, the probability "
        "that a person labels the row true; repeat it for several metrics (not with --ray)",
    )
    score.add_argument(
        "--jury",
        metavar="MODEL[@URL],...",
        help="score with a jury of judges instead of one: each MODEL at its URL (default: "
        "--base-url), with the other judge options shared and --max-cost split evenly; "
        "{metric} is the jury's, {metric}@MODEL each judge's (scored in memory)",
    )
    score.add_argument(
        "--jury-aggregate",
        choices=("mean", "median"),
        default="mean",
        help="how the jury combines scores where the judges do not vote on shared claims "
        "(default: mean)",
    )


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The run's options, gathered once from the command line (a ConfigError on a malformed
    one): what every path executes and records in the output's metadata."""
    from ragframe.metrics.catalog import is_all

    # The metrics first: they trim the file's thresholds to the run's metrics.
    metrics = "all" if is_all(args.metrics) else named_metrics(args)
    gates = gate_cli._options(args)  # parsed and checked once
    return RunSpec(
        metrics=metrics,
        columns=common.parse_columns(args.columns),
        reasons=False if args.no_reasons else None,
        **{**gates, "strict": tuple(gates["strict"])},
        **options.pick(args, "repeats", "seed", "sample", "chunk_rows", "dry_run", "max_cost"),
        **options.pick(args, "actors", "batch_rows"),
        calibration=tuple(args.calibration or ()),
        judges=tuple(jury(args)),
        aggregate=args.jury_aggregate,
    )


def named_metrics(args: argparse.Namespace) -> tuple[Any, ...] | str:
    """`--metrics` as the run's metrics: a name ragframe.toml defines ([metric.NAME]) is the
    metric the file builds, any other a catalogue name; `g_eval` (which the file does not
    define) is refused with how to give its criteria, in the file or in Python."""
    from ragframe.cli.config import G_EVAL_HOW, config_metrics, trim_to

    built = config_metrics(args)
    names = common.parse_metrics(args.metrics)
    if "g_eval" in names and "g_eval" not in built:
        raise ConfigError(
            f"--metrics g_eval: {G_EVAL_HOW}; or in Python: ragframe.evaluate(df, "
            'metrics=[ragframe.GEval(name=..., criteria="...")])'
        )
    trim_to(args, names)
    return metric_names(tuple(built.get(name, name) for name in names))


def jury(args: argparse.Namespace) -> list[Any]:
    """`--jury a@URL1,b@URL2,c`: one judge per model, each built from the shared judge options
    (a model without @URL at --base-url), the cost cap shared out evenly."""
    if not args.jury:
        return []
    seats = [seat.strip() for seat in args.jury.split(",") if seat.strip()]
    if len(seats) < 2:
        raise RagframeError(f"--jury names at least 2 judges (MODEL[@URL],...), got {args.jury!r}")
    share = {} if args.max_cost is None else {"max_cost": args.max_cost / len(seats)}
    judges = []
    for seat in seats:
        model, _, url = seat.partition("@")
        endpoint = {"base_url": url} if url else {}
        judges.append(options.judge_from_args(args, model=model, **endpoint, **share))
    return judges


def run_path(args: argparse.Namespace, spec: RunSpec) -> str:
    """Which path runs the spec: Ray when asked, in memory for a sample, repeats or a jury,
    else streamed chunk by chunk."""
    if args.ray is not None:
        return "ray"
    in_memory = spec.sample is not None or spec.repeats != 1 or bool(spec.judges)
    return "in-memory" if in_memory else "streamed"


def cmd_score(args: argparse.Namespace) -> int:
    """`ragframe score`; stops with the endpoint named when the judge cannot serve the run.
    Every check that needs no rows (the options, the path, the jury, the judge, the output;
    with named metrics, what the judge and the gates make of them) comes before anything is
    read, converted or sent."""
    if args.from_format is not None and args.ray is not None:
        raise RagframeError(
            "--from is not available with --ray: convert the export first "
            f"(ragframe import {args.input} --from {args.from_format} -o rows.parquet), "
            "then score rows.parquet with --ray"
        )
    spec = run_spec(args)
    if args.output is None and not spec.dry_run:
        raise ConfigError(
            "-o/--output is required: name the Parquet file to write (e.g. -o scored.parquet), "
            "or add --dry-run to estimate the run without writing anything"
        )
    path = run_path(args, spec)
    refuse_unsupported(spec, path)  # an option this path cannot honour: exit 2, nothing sent
    if spec.judges:  # what a jury cannot do (a judge seated twice...), before any estimate
        from ragframe.engine.jury import check_jury

        check_jury(spec, None)
    # A jury's first judge leads it (and names the endpoint in an error); else the one judge.
    judge = spec.judges[0] if spec.judges else options.judge_from_args(args)
    with common.endpoint_named(judge):
        if path == "ray":  # a directory or glob of Parquet files, one output per file
            refuse_remote_output(args.output)  # a local folder of outputs, before any read
            spec = _check_metrics(args, spec, judge, _ray_files(args), args.input)
            return _score_on_ray(args, spec, judge)
        if not spec.dry_run:  # a dry run writes nothing: -o may be absent, or exist
            _refuse_output(args)
        elif args.output is not None:  # but an -o the run itself would refuse is said now
            refuse_remote_output(args.output)
            common.refuse_non_parquet_output(args.output)
        if args.from_format is None:
            spec = _check_metrics(args, spec, judge, args.input, args.input)
            return _score(args, spec, path, judge)
        return _score_traces(args, spec, path, judge)


def _refuse_output(args: argparse.Namespace) -> None:
    """The output file, before any input is read: not a URL (the output is written locally and
    atomically), not the input, not an existing file without --overwrite, not named as
    another format than Parquet."""
    refuse_remote_output(args.output)
    common.refuse_input_as_output(args.input, args.output)
    common.refuse_existing_output(args.overwrite, args.output)
    common.refuse_non_parquet_output(args.output)


def _check_metrics(
    args: argparse.Namespace,
    spec: RunSpec,
    judge: Any,
    source: str | None,
    where: str = "",
    *,
    imported: bool = False,
) -> RunSpec:
    """Before anything is sent: which inputs the rows of `source` have a value for (None:
    named metrics checked without rows, before an export is converted), a metric named whose
    input no row has (refused), a judge that cannot serve a metric (no embedding model), and
    gates on metrics the run does not score. Returns the spec to run: for "all", the metrics
    chosen from what the rows have (a `MeasuredAll`, so every path chooses the same), with one
    line saying which were left out and why. `imported`: rows converted from an export (an
    input it has no column for is refused here, as one it has no value for)."""
    from ragframe.engine.prepare import check_judge, refuse_empty_inputs
    from ragframe.metrics.catalog import MeasuredAll, left_out_line

    chosen, have, skipped, columns = chosen_metrics(source, spec)
    if have is not None:
        if isinstance(spec.metrics, str):
            spec = replace(spec, metrics=MeasuredAll(have))
            print(left_out_line(skipped))
        else:
            present = None if imported else columns
            refuse_empty_inputs(chosen, have, where, spec.columns, present)
    for one in spec.judges or (judge,):
        check_judge(one, chosen)
    gate_cli.check_gate_options(args, [m.name for m in chosen])
    return spec


def _score_traces(args: argparse.Namespace, spec: RunSpec, path: str, judge: Any) -> int:
    """`--from FORMAT`: the export's rows written to a Parquet log of their own (in bounded
    memory, in a temporary directory), then scored like any log, every option as without it.
    What needs no rows (named metrics' judge and gates) is checked before the export is read
    (a refusal converts nothing); which inputs the rows have (the metrics "all" picks, a named
    metric whose input no row has) after, before any request."""
    import tempfile

    from ragframe.cli.import_traces import write_rows

    if not isinstance(spec.metrics, str):
        _check_metrics(args, spec, judge, None)
    with tempfile.TemporaryDirectory(prefix="ragframe-traces-") as folder:
        log = Path(folder) / "rows.parquet"
        write_rows(args.input, args.from_format, log)
        converted = argparse.Namespace(**{**vars(args), "input": str(log), "from_format": None})
        where = f"{args.input} (read with --from {args.from_format})"
        spec = _check_metrics(converted, spec, judge, str(log), where, imported=True)
        return _score(converted, spec, path, judge)


def _score_on_ray(args: argparse.Namespace, spec: RunSpec, judge: Any) -> int:
    """A Ray run, reported as any run: summary, then failed metrics and gates over every
    output file."""
    import polars as pl

    from ragframe.cli import ray_score
    from ragframe.engine.prepare import failed_metrics

    result = ray_score.score_with_ray(args, spec, judge)
    ray_score.report(result, args)
    outputs = ray_score.written_outputs(result)
    if not outputs:
        return common.EXIT_OK
    failed = (
        failed_metrics(pl.scan_parquet(outputs[: len(result.scored)]), result.metrics, result.stats)
        if result.scored
        else {}
    )
    return exit_status(args, spec, failed, pl.scan_parquet(outputs))


def _score(args: argparse.Namespace, spec: RunSpec, path: str, judge: Any) -> int:
    """A log scored on one machine (streamed or in memory), once its output and metrics have
    passed `_refuse_output` and `_check_metrics`."""
    import polars as pl

    from ragframe.engine.prepare import failed_metrics
    from ragframe.engine.stream import score_file

    if (spec.dry_run or spec.max_cost is not None) and _estimate_says_stop(args, spec, judge):
        return common.EXIT_OK
    if path == "in-memory":
        return _score_in_memory(args, spec, judge)
    result = score_file(
        args.input, args.output, spec.metrics, judge=judge, overwrite=args.overwrite, spec=spec
    )
    common.print_summary(result.summary(), result.judge.local)
    print(f"wrote {args.output}")
    failed = failed_metrics(pl.scan_parquet(args.output), result.metrics, result.stats)
    return exit_status(args, spec, failed, args.output)


def exit_status(
    args: argparse.Namespace, spec: RunSpec, failed: dict[str, str], scored: Any
) -> int:
    """4 when a metric failed on every row, else 1 when a gate failed, else 0 (the same rule
    on every path; `scored`: the output file, or every output of a Ray run)."""
    status = common.report_failed_metrics(failed, args.output)
    gated = gate_cli.gate_exit(args, scored) if spec.gated else None
    return status or gated or common.EXIT_OK


def _ray_files(args: argparse.Namespace) -> list[str]:
    """The Parquet files a Ray run scores (its partitions), to measure what their rows have."""
    from ragframe.ray.partitions import find_partitions

    return [str(part.source) for part in find_partitions(args.input, args.output)]


def chosen_metrics(
    source: str | list[str] | None, spec: RunSpec
) -> tuple[list[Any], set[str] | None, dict[str, str], list[str]]:
    """The metrics a run will score (as named, or for "all" those whose inputs some row of
    `source` has a value for), the inputs the rows have (None when `source` is None: named
    metrics, not measured), for "all" the metrics left out and why, and the log's columns.
    `source` may be several files of one schema (a Ray run's partitions): an input counts
    when a row of any of them has it, and measuring stops once every input is found."""
    from ragframe.engine.prepare import choose_metrics, inputs_with_values, needed_inputs
    from ragframe.inputs.columns import list_columns
    from ragframe.inputs.io import open_input

    if source is None:
        return choose_metrics(spec.metrics, (), spec.columns), None, {}, []
    needed = needed_inputs(spec.metrics)
    have: set[str] = set()
    present: list[str] = []
    for one in [source] if isinstance(source, str) else source:
        log = open_input(one, list_columns=list_columns(spec.columns))
        present = present or log.schema_frame().columns
        have |= inputs_with_values(log, needed - have, spec.columns)
        if have >= needed:
            break
    extra: dict[str, Any] = {}
    chosen = choose_metrics(spec.metrics, present, spec.columns, extra, have)
    return chosen, have, extra.get("skipped_metrics", {}), present


def _score_in_memory(args: argparse.Namespace, spec: RunSpec, judge: Any) -> int:
    """Score a sample of the log (then print what the whole log would cost beside it), or the
    log with repeats: in memory, as `ragframe.run` does."""
    from ragframe._sync import run_sync
    from ragframe.engine.prepare import failed_metrics
    from ragframe.engine.run import execute

    result = run_sync(execute(args.input, spec, None if spec.judges else judge))
    result.write_parquet(args.output, overwrite=args.overwrite)
    common.print_summary(result.summary(), result.judge.local)
    print(f"wrote {args.output}")
    sample = result.extra.get("sample")
    if sample and sample["rows"] < sample["of"]:
        whole = _estimate(args.input, spec, judge, whole=True)
        cached = judge.cache_path is not None
        print(_sample_cost_line(result.summary(), whole, cached=cached, local=judge.local))
    failed = failed_metrics(result.frame.lazy(), result.metrics, result.stats)
    return exit_status(args, spec, failed, args.output)


def _estimate(source: str, spec: RunSpec, judge: Any, *, whole: bool = False) -> dict[str, Any]:
    """The dry-run estimate of the run as asked (its sample, seed and repeats), or with
    `whole` of one pass over the whole log."""
    from ragframe.engine.run import estimate

    asked = {} if whole else {"sample": spec.sample, "seed": spec.seed, "repeats": spec.repeats}
    return estimate(
        source,
        spec.metrics,
        judge=None if spec.judges else judge,
        judges=spec.judges,
        columns=spec.columns,
        chunk_rows=spec.chunk_rows or DEFAULT_CHUNK_ROWS,
        reasons=spec.reasons,
        **asked,
    )


def _sample_cost_line(
    summary: dict[str, Any], whole: dict[str, Any], *, cached: bool, local: bool = False
) -> str:
    """What the sample cost, and the dry-run estimate for the rest of the log (with no cache,
    the sample's rows would be paid for again, and the estimate counts them); `local`: the
    embedded judge, which costs nothing."""
    how = (
        "the sample's answers now cached are free"
        if cached
        else "no cache: the sample's rows are counted again"
    )
    return (
        f"this sample: {summary['requests']} requests, {summary['prompt_tokens']} prompt + "
        f"{summary['completion_tokens']} completion tokens, "
        f"{common.dollars(summary.get('cost_usd'), local=local)}"
        f"\nthe whole log ({whole['rows']} rows, dry run; {how}): "
        f"{whole['requests']} requests, {whole['prompt_tokens']} prompt + "
        f"{whole['completion_tokens']} completion tokens, "
        f"{common.dollars(whole['cost_usd'], local=local)}"
    )


def _estimate_says_stop(args: argparse.Namespace, spec: RunSpec, judge: Any) -> bool:
    """Print the estimate; True for a dry run (nothing more to do). A run whose estimate is
    over --max-cost is refused here, before anything is sent."""
    guess = _estimate(args.input, spec, judge)
    which = f"a sample of {guess['rows']}" if spec.sample is not None else f"{guess['rows']}"
    times = f" x {guess['repeats']} repeats" if guess["repeats"] > 1 else ""
    print(
        f"estimate: {guess['requests']} requests, {guess['prompt_tokens']} prompt + "
        f"{guess['completion_tokens']} completion tokens, "
        f"{common.dollars(guess['cost_usd'], local=judge.local)} for "
        f"{which} rows{times} on {guess['model']} (cached answers are free and not counted)"
    )
    if spec.dry_run:
        return True
    common.refuse_over_budget(guess["cost_usd"], spec.max_cost)
    return False
