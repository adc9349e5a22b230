"""The `ragframe` command line, one module per subcommand.

Each subcommand module has `add_parser(subparsers)`, which adds its arguments and sets the
`handler` that runs it (`args` in, exit status out). What several subcommands share (exit
statuses, the `--columns` and `--metrics` parsers, the run summary, the one-line endpoint error)
is in `ragframe.cli.common`; the options several subcommands declare (the judge's, with
`judge_from_args`; the opening of a subcommand; --level, --seed, --output, --json / --csv) in
`ragframe.cli.options`; the human labels beside the judge's figures (`--labels`) in
`ragframe.cli.labels`. A new subcommand is a new module listed in `SUBCOMMANDS`.

Layer: the top; it may import every layer (the package root `ragframe/__init__.py` imports
nothing of it).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import signal
import sqlite3
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragframe._sync import terminate_as_interrupt
from ragframe._version import __version__
from ragframe.cli import (
    batch,
    calibrate,
    compare,
    config,
    export,
    gate,
    generate,
    human,
    import_traces,
    judge_bench,
    jury,
    label_sheet,
    metrics,
    prefer,
    report,
    score,
    summarize,
)
from ragframe.cli.batch import cmd_batch
from ragframe.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_SOFTWARE,
    EXIT_TERMINATED,
    endpoint_error,
    format_summary,
    one_line,
    report_failed_metrics,
)
from ragframe.cli.score import cmd_score
from ragframe.errors import RagframeError, Terminated

__all__ = [
    "build_parser",
    "cmd_batch",
    "cmd_score",
    "endpoint_error",
    "format_summary",
    "main",
    "one_line",
    "report_failed_metrics",
]

DESCRIPTION = (
    "Score RAG logs with an LLM judge, then decide: `ragframe score IN -o OUT.parquet`, "
    "`ragframe summarize` / `gate` / `compare` / `report` on scored files."
)
SUBCOMMANDS = (
    score,
    batch,
    generate,
    summarize,
    gate,
    compare,
    prefer,
    jury,
    report,
    import_traces,
    export,
    calibrate,
    human,
    label_sheet,
    judge_bench,
    metrics,
)


def build_parser() -> argparse.ArgumentParser:
    """The `ragframe` parser, with every subcommand's arguments."""
    parser = argparse.ArgumentParser(prog="ragframe", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ragframe {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    for name in config.READERS:  # the subcommands that read ragframe.toml
        config.add_config_options(subparsers.choices[name])
    for sub in _subcommand_parsers(parser):
        # Also after the subcommand; SUPPRESS keeps a `--debug` given before it.
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        sub.epilog = _with_common_statuses(
            sub.epilog, cache="--cache" in sub._option_string_actions
        )
    return parser


DEBUG_HELP = "on an unexpected error, print its traceback too (also: RAGFRAME_DEBUG=1)"

#: The statuses any subcommand may end with, whatever it does: each subcommand's epilog gets
#: those it does not already name.
COMMON_STATUSES = {
    EXIT_SOFTWARE: "an unexpected error, a bug (one line says where to report it; --debug "
    "prints the traceback)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C; rerun)",
    EXIT_BROKEN_PIPE: "stdout closed before all was written (e.g. piped into head)",
    EXIT_TERMINATED: "terminated (SIGTERM; rerun)",
}
#: Said after "rerun" by a subcommand with --cache only: one without a cache starts over.
RESUME_CLAUSE = " to resume from the cache"


def _subcommand_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every subcommand's parser, nested ones (`batch run`) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub
                yield from _subcommand_parsers(sub)


def _with_common_statuses(epilog: str | None, *, cache: bool) -> str:
    """An epilog's exit statuses with those every command may end with (a parser without
    statuses of its own gets these alone, said to be common to every command). A rerun
    resumes from the cache only where the subcommand has one (`cache`)."""
    text = (epilog or "").rstrip().rstrip(".")
    missing = [
        f"{status} {_resumed(meaning) if cache else meaning}"
        for status, meaning in COMMON_STATUSES.items()
        if not re.search(rf"\b{status}\b", text)
    ]
    if not text:
        return "exit status, as for every command: " + "; ".join(missing)
    return "; ".join([text, *missing])


def _resumed(meaning: str) -> str:
    """A common status's meaning with the cache clause after its "rerun", if it has one."""
    return meaning.replace("rerun)", f"rerun{RESUME_CLAUSE})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `ragframe` command; the exit status. Every way a command can end has its own
    status, so CI never reads a crash as a failed gate (1): errors the user can fix are 2 on
    one line naming what; anything unexpected is 70 with one line (the traceback only with
    --debug or RAGFRAME_DEBUG=1); Ctrl-C is 130 and SIGTERM 143, both after the same cleanup.
    Without `argv` (the `ragframe` program itself) an interrupted process ignores further stop
    signals while it exits, so that a second Ctrl-C cannot cut the cache's closing short."""
    program = argv is None
    if program:
        # Everything imported so far lives as long as the process: out of the collector's
        # passes, which otherwise walk it again and again (5 % of a cold run's CPU).
        gc.freeze()
    argv = sys.argv[1:] if argv is None else list(argv)
    args: argparse.Namespace | None = None
    with terminate_as_interrupt():
        try:
            try:
                parser = build_parser()
                args = parser.parse_args(argv)
                # ragframe.toml's values under the command line's, checked whole before
                # anything is read or sent (a ConfigError naming file, section and key).
                args = config.apply(parser, args, argv)
            except SystemExit as stop:  # a bad option: argparse printed why; --help exits 0
                if stop.code in (0, None):
                    raise
                return stop.code if isinstance(stop.code, int) else EXIT_ERROR
            handler = getattr(args, "handler", None)
            if handler is None:
                return EXIT_ERROR
            status = int(handler(args))
            sys.stdout.flush()  # a closed stdout is found here, not at exit with a traceback
            if program:
                # The process ends now: spare its exit the collector's passes over every
                # object (70 ms of a 0.6 s warm rerun). Files and caches are closed already;
                # whatever is left is freed by refcount, or with the process.
                gc.freeze()
            return status
        except BaseException as err:  # every way out gets its status
            if isinstance(err, SystemExit):
                raise
            with _signals_ignored(keep=program and _interruption(err) is not None):
                return _failed(err, args, _debug(argv, args))


def _debug(argv: Sequence[str], args: argparse.Namespace | None) -> bool:
    if os.environ.get("RAGFRAME_DEBUG", "").strip().lower() not in ("", "0", "false", "no"):
        return True
    return bool(getattr(args, "debug", False)) if args is not None else "--debug" in argv


@contextmanager
def _signals_ignored(*, keep: bool) -> Iterator[None]:
    """A second Ctrl-C (or SIGTERM) while the first one's message is printed must not end in
    a traceback; the handlers come back afterwards unless `keep` (the process is ending)."""
    stops = (signal.SIGINT, signal.SIGTERM)
    try:
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stops}
    except ValueError:  # not the main thread: signals go elsewhere anyway
        previous = {}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if not keep:
                signal.signal(signum, handler)


def _failed(err: BaseException, args: argparse.Namespace | None, debug: bool) -> int:
    """Print what ended the command (one line; the traceback first with --debug); its status."""
    stopped = _interruption(err)
    if stopped is None and _closed_stdout(err):
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    status, message = _ending(err, stopped, args)
    try:
        if debug:
            traceback.print_exception(err, file=sys.stderr)
        print(f"ragframe: {message}", file=sys.stderr)
    except OSError:  # stderr closed too: the status alone says it
        pass
    return status


def _ending(
    err: BaseException, stopped: KeyboardInterrupt | None, args: argparse.Namespace | None
) -> tuple[int, str]:
    """The status and the one line for what ended the command: an interruption (Ctrl-C,
    SIGTERM) with how to go on, else the error explained."""
    if stopped is None:
        return _explain(err, args)
    if isinstance(stopped, Terminated):
        return EXIT_TERMINATED, f"terminated (SIGTERM); {_resume_hint(args)}."
    return EXIT_INTERRUPTED, f"interrupted; {_resume_hint(args)}."


def _resume_hint(args: argparse.Namespace | None) -> str:
    """How to go on after Ctrl-C or SIGTERM: a Batch API job goes on at the provider, a run
    with a cache resumes from it, one without starts over."""
    manifest = getattr(args, "manifest", None)
    if getattr(args, "command", None) == "batch" and manifest:
        return (
            "batches already submitted go on at the provider and nothing answered is paid for "
            "twice: run the same command again, or ragframe batch collect --manifest "
            f"{manifest}, to pick the job up"
        )
    if _cache_path(args) is not None:
        return (
            "answers received so far are in the cache: run the same command again to "
            "resume without paying for them twice"
        )
    return "run the same command again to start over"


def _chain(err: BaseException) -> Iterator[BaseException]:
    """The exception, then what it was raised from or while handling, back to the first."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _interruption(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM behind `err`, if any: an error raised while an interrupted run
    was shutting down (asyncio's "Event loop stopped before Future completed" after a second
    Ctrl-C) is the interruption, not a bug."""
    return next((e for e in _chain(err) if isinstance(e, KeyboardInterrupt)), None)


def _closed_stdout(err: BaseException) -> bool:
    """Whether `err` is a write to a stdout whose reader has gone (`ragframe metrics | head`)."""
    if not isinstance(err, BrokenPipeError):
        return False
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no stdout
        return True


def _silence_stdout() -> None:
    """Point stdout at devnull, as Python's docs advise for SIGPIPE: what is still buffered
    then goes nowhere instead of raising again ("Exception ignored ... BrokenPipeError") when
    the interpreter flushes stdout on exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass


def _explain(err: BaseException, args: argparse.Namespace | None) -> tuple[int, str]:
    """The status and the one line for an error that ended a command."""
    said = one_line(str(err))
    kind = type(err).__name__
    if isinstance(err, RagframeError):
        return EXIT_ERROR, f"error: {said}"
    if isinstance(err, OSError):
        return EXIT_ERROR, f"error: {_os_error(err)}"
    if isinstance(err, sqlite3.Error):
        cache = _cache_path(args)
        where = f"the answer cache {cache!r}" if cache else "an SQLite file"
        fix = "choose another --cache file, or run with --no-cache" if cache else "check it"
        return EXIT_ERROR, (
            f"error: cannot use {where} (sqlite3.{kind}: {said}); check that it is a file you "
            f"may write and not another program's; {fix}"
        )
    unreadable = _unreadable_input(args) if _is_read_error(err) else None
    if unreadable is not None:
        path, why = unreadable
        return EXIT_ERROR, (
            f"error: cannot read {path!r} as Parquet ({why}); is it a complete Parquet file? "
            "(an empty file or one cut short by an interrupted copy cannot be read)"
        )
    command = getattr(args, "command", None) or "COMMAND"
    return EXIT_SOFTWARE, (
        f"internal error: {kind}: {said[:500]}; this is a bug in ragframe {__version__}: please "
        f"report it {_report_to()}, with this line and the traceback that `ragframe --debug "
        f"{command} ...` prints"
    )


def _os_error(err: OSError) -> str:
    """An OSError on one line naming the path (when the error carries it) and what to check."""
    reason = err.strerror or one_line(str(err)) or type(err).__name__
    if err.filename is None:
        what = (
            "a network connection failed; check --base-url and that the server is up"
            if isinstance(err, ConnectionError | TimeoutError)
            else "a file or device could not be used"
        )
        return f"{type(err).__name__}: {one_line(str(err))}; {what}"
    path = Path(
        os.fsdecode(err.filename) if isinstance(err.filename, str | bytes) else str(err.filename)
    )
    named = f"{str(path)!r}"
    if path.name.startswith(".") and path.suffix == ".tmp":  # an output's temporary twin
        named = f"the folder {str(path.parent)!r} (writing a temporary file there)"
    if err.filename2 is not None:
        named += f" or {os.fsdecode(err.filename2)!r}"
    return (
        f"cannot use {named}: {reason} ({type(err).__name__}); check the path and that you "
        "may read or write it"
    )


def _cache_path(args: argparse.Namespace | None) -> str | None:
    """The answer cache the command used, if it uses one."""
    if args is None or not hasattr(args, "cache") or getattr(args, "no_cache", False):
        return None
    if isinstance(args.cache, str):
        return args.cache
    from ragframe.judge.cache import default_cache_path

    return str(default_cache_path())


def _is_read_error(err: BaseException) -> bool:
    """Polars' and pyarrow's errors for a file they cannot decode."""
    names = {kind.__name__ for kind in type(err).__mro__}
    return bool(names & {"ComputeError", "ArrowInvalid", "ArrowException", "PolarsError"})


def _unreadable_input(args: argparse.Namespace | None) -> tuple[str, str] | None:
    """The first Parquet file named on the command line that cannot be read, and why: a read
    error carries no path, so each input is tried (only its footer is read)."""
    if args is None:
        return None
    import pyarrow.parquet as pq

    values: list[Any] = []
    for value in vars(args).values():
        values.extend(value if isinstance(value, list | tuple) else [value])
    for value in values:
        if not isinstance(value, str) or not value.lower().endswith(".parquet"):
            continue
        if not Path(value).is_file():
            continue
        try:
            pq.read_metadata(value)
        except Exception as exc:  # any failure to read it is the answer
            return value, f"{type(exc).__name__}: {one_line(str(exc))[:200]}"
    return None


def _report_to() -> str:
    """Where to report a bug: the package's Issues URL when its metadata has one."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("ragframe").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("issues", "bug tracker", "bugs"):
            return f"at {url.strip()}"
    return "to ragframe's maintainers (its issue tracker)"
