"""`ragframe score IN_DIR_OR_GLOB -o OUT_DIR --ray [auto|ADDRESS] [--actors N]`: score a
directory of Parquet partitions on a Ray cluster, one output file per input file.

Nothing of Ray is imported until `--ray` is given; without `ragframe[ray]` installed the run
stops with one line naming the extra. `ragframe.cli.score` adds the options
(`add_ray_options`), refuses what Ray cannot honour (`ragframe.engine.PATHS`), hands a `--ray`
run to `score_with_ray`, and reports it (summary, gates over every output, exit status) as it
reports every path.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ragframe.cli import common
from ragframe.cli import gate as gate_cli
from ragframe.engine.spec import RunSpec
from ragframe.errors import ConfigError

#: `--ray` given alone: Ray's own choice (`$RAY_ADDRESS`, else a cluster already running on
#: this machine, else a new local one).
LOCAL = "local"


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """Add `--ray`, `--actors` and `--batch-rows` to the `score` parser."""
    group = parser.add_argument_group(
        "on a Ray cluster (pip install 'ragframe[ray]')",
        "With --ray, INPUT is a directory of Parquet files (every .parquet / .pq below it), a "
        "glob or one file, and -o a directory: one scored file per input file, at the same "
        "relative path. --concurrency, the rate limits and --max-cost are the cluster's, "
        "shared among the actors; --cache names a directory on storage every node reaches.",
    )
    group.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL,
        metavar="auto|ADDRESS",
        help="score on Ray: alone, $RAY_ADDRESS or a cluster running on this machine, else a "
        "new local one; 'auto' a running cluster (as `ray start`); or the cluster's address "
        "(ray://HOST:10001 or HOST:6379)",
    )
    group.add_argument(
        "--actors",
        type=common.positive_int,
        help="scoring actors, each with one judge session (default: the cluster's CPUs, at "
        "most --concurrency)",
    )
    group.add_argument(
        "--batch-rows",
        type=common.positive_int,
        help="rows per batch (default: 16 per request slot of an actor, which keeps its share "
        "of the pool busy)",
    )


def score_with_ray(args: argparse.Namespace, spec: RunSpec, judge: Any) -> Any:
    """Run `ragframe score ... --ray` (the options Ray cannot honour were refused before);
    the `PartitionsResult`, which `ragframe.cli.score` reports as any run's."""
    if args.batch_rows is not None and args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be at least 1, got {args.batch_rows}")
    from ragframe import ray as ragframe_ray  # RayNotInstalled (a ConfigError) names the extra

    output = Path(args.output)
    if output.suffix.lower() in (".parquet", ".pq") or output.is_file():
        raise ConfigError(
            f"with --ray, -o names a directory (one scored file per input file), not "
            f"{args.output!r}; e.g. -o {output.with_suffix('')}"
        )
    cache_dir = _cache_dir(args, judge)
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        address = None if args.ray == LOCAL else args.ray
        ray.init(address=address, logging_level="WARNING", configure_logging=True)
    ray.data.DataContext.get_current().enable_progress_bars = not args.no_progress
    try:
        actors = args.actors or _default_actors(ray, judge)
        return _unwrapped(
            ragframe_ray.score_partitions,
            args.input,
            output,
            spec.metrics,
            judge,
            actors=actors,
            batch_size=args.batch_rows,
            cache_dir=cache_dir,
            overwrite=args.overwrite,
            spec=spec,
            before_scoring=lambda chosen: gate_cli.check_gate_options(
                args, [m.name for m in chosen]
            ),
        )
    finally:
        if started_here:
            ray.shutdown()


def _cache_dir(args: argparse.Namespace, judge: Any) -> Path | None:
    """The directory of the actors' cache files: --cache (a directory), else the default."""
    if args.no_cache:
        return None
    if args.cache:
        where = Path(args.cache)
        if where.is_file():
            raise ConfigError(
                f"with --ray, --cache names a directory (one SQLite file per actor, each actor "
                f"reading all of them), but {args.cache!r} is a file; pass a directory on "
                "storage every node reaches"
            )
        return where
    from ragframe.ray import default_cache_dir

    return default_cache_dir(judge)


def _default_actors(ray: Any, judge: Any) -> int:
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(cpus, judge.concurrency))


def _unwrapped(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call `fn`; a ragframe error raised inside a Ray worker is raised as itself (Ray wraps
    it in a `RayTaskError`, which is also a subclass of it but whose text is the worker's
    whole traceback), so the command line prints its one line and exits 2, as without Ray."""
    from ragframe.ray.dataset import original_error

    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        original = original_error(exc)
        if original is None or original is exc:
            raise
        raise original from exc


def written_outputs(result: Any) -> list[str]:
    """The scored files of a Ray run, this run's and those it skipped as already scored."""
    return [str(r.output) for r in result.scored] + [str(p.target) for p in result.skipped]


def report(result: Any, args: argparse.Namespace) -> None:
    """Print the run's summary and what was written."""
    print(common.format_summary(result.summary(), result.judge.local))
    skipped = len(result.skipped)
    print(
        f"wrote {len(result.scored)} files under {args.output}"
        + (f" ({skipped} already scored with the same metrics, judge and input)" if skipped else "")
    )
