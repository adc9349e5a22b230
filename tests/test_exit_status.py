"""Exit statuses mean one thing each: 1 is a failed gate and nothing else.

Each case here once ended with a Python traceback and exit status 1, so CI read a crash as a
failed quality gate: an output folder that cannot be written, an unusable cache, an empty or
cut Parquet file, a count too large for pyarrow, a KeyError inside a command, a closed stdout
(`ragframe metrics | head -1`), a second Ctrl-C while the first one's cleanup ran; and SIGTERM
(what CI runners and Kubernetes send) killed the process with no message, leaving a `.tmp`.

Cheap cases call `main()` in this process; signals and closed pipes need a real process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import wait_for

from ragframe._sync import run_sync, terminate_as_interrupt
from ragframe.cli import COMMON_STATUSES, build_parser, main
from ragframe.cli.common import MAX_COUNT, MAX_SEED
from ragframe.testing.server import FakeServer, auto_answer

ROOT = Path(__file__).resolve().parent.parent
ROWS = 6
LAST = f"Fact {ROWS - 1} is"
RESUME = "run the same command again"


def log(n: int = ROWS) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "question": [f"What is fact {i}?" for i in range(n)],
            "answer": [f"Fact {i} is true. Fact {i} is old." for i in range(n)],
            "contexts": [[f"Fact {i} is true.", "Other text."] for i in range(n)],
        }
    )


@pytest.fixture
def scored(tmp_path: Path) -> Path:
    """A log to score, as Parquet."""
    path = tmp_path / "log.parquet"
    log().write_parquet(path)
    return path


def score_argv(source: Path, out: Path, server: FakeServer, *extra: str) -> list[str]:
    return [
        "score", str(source), "-o", str(out), "--metrics", "faithfulness", "--model", "m",
        "--base-url", server.base_url, "--no-progress", *extra,
    ]  # fmt: skip


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """main's status and stderr; an exception escaping main fails the test as it is."""
    status = main(argv)
    return status, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("RAGFRAME_DEBUG", raising=False)


# ------------------------------------------------- input and environment errors: status 2


def test_an_output_folder_that_cannot_be_written_is_status_2_naming_it(
    scored: Path,
    tmp_path: Path,
    server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """mkstemp's PermissionError (the tests run as root here, where chmod cannot forbid a
    write, so the refusal is the operating system's error raised where it would arise)."""
    folder = tmp_path / "locked"
    folder.mkdir()

    def refused(*args: Any, dir: Any = None, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", os.path.join(dir, ".out.parquet.1.x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    status, err = run_main(score_argv(scored, folder / "out.parquet", server, "--no-cache"), capsys)
    line = one_line(err)
    assert status == 2, err
    assert repr(str(folder)) in line and "Permission denied" in line, line


def test_an_output_under_a_file_is_status_2_naming_the_path(
    scored: Path, tmp_path: Path, server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    argv = score_argv(scored, blocker / "out.parquet", server, "--no-cache")
    status, err = run_main(argv, capsys)
    assert status == 2 and repr(str(blocker)) in one_line(err), err


def test_a_cache_that_cannot_be_opened_is_status_2_naming_it(
    scored: Path, tmp_path: Path, server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """sqlite3.OperationalError ("unable to open database file") carries no path: the line
    names the command's --cache."""
    cache = tmp_path / "a-folder"
    cache.mkdir()
    argv = score_argv(scored, tmp_path / "out.parquet", server, "--cache", str(cache))
    status, err = run_main(argv, capsys)
    line = one_line(err)
    assert status == 2, err
    assert repr(str(cache)) in line and "--no-cache" in line and "sqlite3" in line, line


@pytest.fixture
def broken(tmp_path: Path, scored: Path) -> dict[str, Path]:
    """An empty Parquet file and one cut short (the first 500 bytes of a real one)."""
    empty, cut = tmp_path / "empty.parquet", tmp_path / "cut.parquet"
    empty.write_bytes(b"")
    cut.write_bytes(scored.read_bytes()[:500])
    return {"empty": empty, "cut": cut}


@pytest.mark.parametrize("kind", ["empty", "cut"])
@pytest.mark.parametrize(
    "command",
    [
        ["export", "{file}", "--to", "phoenix", "-o", "{out}"],
        ["summarize", "{file}"],
        ["gate", "{file}", "--fail-under", "faithfulness=0.5"],
        ["compare", "{good}", "{file}"],
        ["report", "{file}", "-o", "{out}.html"],
    ],
    ids=lambda c: c[0] if isinstance(c, list) else c,
)
def test_a_parquet_file_that_cannot_be_read_is_status_2_naming_it(
    command: list[str],
    kind: str,
    broken: dict[str, Path],
    scored: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = broken[kind]
    names = {"file": str(file), "out": str(tmp_path / "x.parquet"), "good": str(scored)}
    status, err = run_main([part.format(**names) for part in command], capsys)
    line = one_line(err)
    assert status == 2, err
    assert repr(str(file)) in line or str(file) in line, line


@pytest.mark.parametrize(
    "extra",
    [("--fail-under", "context_recall=0.5"), ("--min-pass-rate", "answer_relevancy=0.9")],
    ids=["--fail-under", "--min-pass-rate"],
)
def test_score_from_an_export_refuses_a_gate_on_an_unscored_metric_before_converting(
    extra: tuple[str, ...], tmp_path: Path, server: FakeServer,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """With --from, the gates were checked after the whole export had been converted: the
    same refusal, but only once every trace had been read and written again."""
    from ragframe.cli import import_traces

    converted: list[Any] = []
    monkeypatch.setattr(import_traces, "write_rows", lambda *a, **k: converted.append(a))
    source = tmp_path / "ragas.jsonl"
    source.write_text(json.dumps({"user_input": "q", "response": "a"}) + "\n")
    out = tmp_path / "out.parquet"
    argv = [*score_argv(source, out, server, "--no-cache", *extra), "--from", "ragas"]
    status, err = run_main(argv, capsys)
    assert status == 2 and "does not score" in one_line(err), err
    assert converted == [] and server.count() == 0 and not out.exists()


# ------------------------------------------------------------------- numbers: refused, 2


def integer_options() -> Iterator[tuple[str, str, Any]]:
    """(subcommand path, option, type) of every whole-number option of every subcommand."""

    def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str, Any]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}".strip())
            elif getattr(action.type, "__name__", "").startswith("int_at_least"):
                yield path, action.option_strings[-1], action.type

    yield from walk(build_parser(), "")


def test_every_whole_number_option_refuses_a_number_too_large_to_use() -> None:
    """99999999999999999999 passed argparse and overflowed in pyarrow (exit 1, traceback)."""
    options = list(integer_options())
    assert len(options) > 10
    for path, option, kind in options:
        with pytest.raises(argparse.ArgumentTypeError, match="must be a whole number from"):
            kind("99999999999999999999")
        assert kind("2") == 2, (path, option)  # small counts still pass


def test_every_seed_says_its_range_in_its_help() -> None:
    """--seed's help said nothing of its bound (2**32 - 1), which argparse enforces."""
    seeds = [
        (path, action)
        for path, sub in subcommand_parsers()
        for action in sub._actions
        if "--seed" in action.option_strings
    ]
    assert len(seeds) > 5
    for path, action in seeds:
        assert f"from 0 to {MAX_SEED}" in (action.help or ""), (path, action.help)


def subcommand_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser, nested ones included, with its path ("batch run")."""

    def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield f"{path} {name}".strip(), sub
                    yield from walk(sub, f"{path} {name}")

    yield from walk(build_parser(), "")


def test_chunk_rows_too_large_stops_before_anything_is_sent(
    scored: Path, tmp_path: Path, server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = score_argv(scored, tmp_path / "out.parquet", server, "--no-cache")
    status = main([*argv, "--chunk-rows", "99999999999999999999"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"argument --chunk-rows: must be a whole number from 1 to {MAX_COUNT}" in err, err
    assert "Traceback" not in err and server.count() == 0


def test_the_largest_count_still_runs(
    scored: Path, tmp_path: Path, server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = score_argv(scored, tmp_path / "out.parquet", server, "--no-cache")
    assert main([*argv, "--chunk-rows", str(MAX_COUNT)]) == 0, capsys.readouterr().err
    assert pl.read_parquet(tmp_path / "out.parquet").height == ROWS


# ------------------------------------------------------------- unexpected errors: 70


@pytest.fixture
def catalog_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ragframe metrics` hits a bug: a KeyError with a message over two lines."""

    def fail() -> Any:
        raise KeyError("faithfulness\nsecond line")

    monkeypatch.setattr("ragframe.metrics.catalog.catalog", fail)


@pytest.mark.usefixtures("catalog_fails")
def test_an_unexpected_error_is_70_on_one_line_naming_it_and_where_to_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, err = run_main(["metrics"], capsys)
    line = one_line(err)
    assert status == 70, err
    assert line.startswith("ragframe: internal error: KeyError: ") and "second line" in line
    assert "bug" in line and "report it" in line and "--debug" in line, line


@pytest.mark.usefixtures("catalog_fails")
@pytest.mark.parametrize(
    ("argv", "env"),
    [(["--debug", "metrics"], "0"), (["metrics", "--debug"], ""), (["metrics"], "1")],
    ids=["--debug before", "--debug after", "RAGFRAME_DEBUG=1"],
)
def test_debug_adds_the_traceback(
    argv: list[str], env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGFRAME_DEBUG", env)
    status, err = run_main(argv, capsys)
    assert status == 70
    assert err.startswith("Traceback") and "KeyError" in err
    assert err.strip().splitlines()[-1].startswith("ragframe: internal error: KeyError")


def test_debug_given_before_the_subcommand_survives_its_parser() -> None:
    """A subcommand's own --debug must not reset a --debug given before it."""
    assert build_parser().parse_args(["--debug", "metrics"]).debug is True
    assert build_parser().parse_args(["metrics", "--debug"]).debug is True
    assert build_parser().parse_args(["metrics"]).debug is False


def test_an_error_raised_while_an_interrupted_run_shuts_down_is_the_interrupt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What asyncio raised after a second Ctrl-C: a RuntimeError whose context is the
    KeyboardInterrupt. It is the interruption (130), not a bug (70) nor a gate (1)."""

    def shutdown() -> Any:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Event loop stopped before Future completed.")  # noqa: B904

    monkeypatch.setattr("ragframe.metrics.catalog.catalog", shutdown)
    status, err = run_main(["metrics"], capsys)
    assert status == 130 and RESUME in one_line(err)


@pytest.mark.parametrize(
    ("extra", "cached"),
    [((), True), (("--cache", "c.sqlite3"), True), (("--no-cache",), False)],
    ids=["default cache", "--cache", "--no-cache"],
)
def test_the_ctrl_c_line_promises_the_cache_only_when_one_was_used(
    extra: tuple[str, ...], cached: bool, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:  # fmt: skip
    """`--no-cache` was told its answers were in the cache: the line looked only at whether
    the subcommand has a --cache option."""

    def ctrl_c(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("ragframe.cli.score.cmd_score", ctrl_c)
    monkeypatch.chdir(tmp_path)
    argv = ["score", "log.parquet", "-o", "out.parquet", "--metrics", "faithfulness", *extra]
    status, err = run_main(argv, capsys)
    line = one_line(err)
    assert status == 130 and RESUME in line, line
    assert ("in the cache" in line) is cached, line


SECOND_CTRL_C = """
import asyncio, os, signal
from ragframe._sync import run_sync

async def run():
    helper = asyncio.create_task(asyncio.sleep(30))  # a request in flight
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the run is cancelled
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        # A second Ctrl-C lands in the same turn of the loop as the run's end, before the
        # loop's own callback for that end has run.
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
        raise

try:
    run_sync(run())
except BaseException as err:
    print(type(err).__name__, repr(err.__context__))
"""


def test_a_second_ctrl_c_during_shutdown_is_still_a_keyboard_interrupt() -> None:
    """The 1-in-20 case made certain: asyncio.run's loop left its "stop" callback queued and
    ran it while closing, raising RuntimeError("Event loop stopped before Future completed")
    in place of the KeyboardInterrupt. run_sync raises KeyboardInterrupt."""
    done = subprocess.run(
        [sys.executable, "-c", SECOND_CTRL_C], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split()[:1] == ["KeyboardInterrupt"], done.stdout + done.stderr[-2000:]


def test_a_first_ctrl_c_while_a_finished_run_closes_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run had finished and its loop was closing when Ctrl-C came: the interruption was
    swallowed as if a first one were already on its way, and the run's value came back (the
    command line could then write its output and exit 0)."""
    close = asyncio.Runner.close

    def ctrl_c_while_closing(runner: asyncio.Runner) -> None:
        signal.raise_signal(signal.SIGINT)  # its Python handler runs before this returns
        close(runner)

    async def finished() -> int:
        return 42

    monkeypatch.setattr(asyncio.Runner, "close", ctrl_c_while_closing)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        run_sync(finished())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_while_an_interruption_unwinds_to_the_command_line_is_counted() -> None:
    """Once the run has returned, a second Ctrl-C (or SIGTERM) while `finally` blocks unwind
    toward main's handler raised again in the middle of a cleanup. Inside the command line it
    is counted; outside, and after, the handlers are what they were."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    async def interrupted() -> None:
        signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(30)

    with terminate_as_interrupt():
        try:
            run_sync(interrupted())
        except KeyboardInterrupt:
            try:  # a cleanup on the way to main
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGTERM)
            except KeyboardInterrupt:
                pytest.fail("a second signal raised in the middle of a cleanup")
        else:
            pytest.fail("the run was not interrupted")
    after = {signum: signal.getsignal(signum) for signum in before}
    assert after == before
    with pytest.raises(KeyboardInterrupt):  # outside the command line: as it was
        run_sync(interrupted())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --------------------------------------------------------------------- signals: 130, 143


def test_sigterm_is_taken_over_only_for_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A program calling ragframe keeps SIGTERM as it was (here the default, which ends the
    process); inside the command line's `terminate_as_interrupt` a run handles it as Ctrl-C;
    after main() the handler is back."""
    before = signal.getsignal(signal.SIGTERM)
    seen: list[Any] = []

    async def look() -> None:
        seen.append(signal.getsignal(signal.SIGTERM))

    run_sync(look())
    with terminate_as_interrupt():
        run_sync(look())
    assert seen[0] is before and seen[1] not in (before, signal.SIG_DFL, signal.SIG_IGN)
    assert main(["metrics"]) == 0 and "faithfulness" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is before


@contextmanager
def held_server() -> Iterator[tuple[FakeServer, threading.Event]]:
    """A fake server whose requests about the last row wait while the gate is closed, so a
    run is always mid-flight when the signal comes; every other request is answered at once.
    The gate opens before the server closes, whatever the test did."""
    gate = threading.Event()

    async def handle(body: dict[str, Any]) -> str:
        if LAST in json.dumps(body.get("messages")):
            while not gate.is_set():
                await asyncio.sleep(0.02)
        return auto_answer(body)

    with FakeServer(handle) as server:
        try:
            yield server, gate
        finally:
            gate.set()


def answers(cache: Path) -> int:
    if not cache.exists():
        return 0
    db = sqlite3.connect(f"{cache.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return int(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
    except sqlite3.OperationalError:  # the table is not there yet
        return 0
    finally:
        db.close()


def program(argv: list[str]) -> subprocess.Popen[str]:
    """`ragframe ARGV` as its own process (`python -m ragframe.cli`, as the script runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGFRAME_"))}
    env["OPENAI_API_KEY"] = "sk-test-not-a-real-key"
    command = [sys.executable, "-m", "ragframe.cli", *argv]
    return subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def mid_run(tmp_path: Path, server: FakeServer, cache: Path) -> subprocess.Popen[str]:
    """A `ragframe score` that has cached every answer but the held last row's, with that
    row's request open at the server and its temporary output on disk."""
    source = tmp_path / "log.parquet"
    log().write_parquet(source)
    proc = program(score_argv(source, tmp_path / "out.parquet", server, "--cache", str(cache)))

    # faithfulness asks twice per row, statements then verdicts; the verdicts wait for every
    # row's statements: each other row's statements committed, the last row's held.
    def held_with_the_rest_cached() -> bool:
        cached = answers(cache) >= ROWS - 1
        return server.in_flight > 0 and cached and bool(temporary(tmp_path))

    ready = wait_for(lambda: proc.poll() is not None or held_with_the_rest_cached(), 60)
    if not ready or proc.poll() is not None:
        proc.kill()
        state = (server.in_flight, answers(cache), temporary(tmp_path))
        pytest.fail(f"the run never got mid-flight {state}: {proc.communicate()[1][-3000:]}")
    return proc


def temporary(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_sigterm_stops_like_ctrl_c_143_then_the_rerun_resumes(tmp_path: Path) -> None:
    """SIGTERM used to kill the process (status -15, no message, a .tmp file left)."""
    cache, out = tmp_path / "cache.sqlite3", tmp_path / "out.parquet"
    with held_server() as (server, gate):
        proc = mid_run(tmp_path, server, cache)
        cached = answers(cache)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        line = one_line(err)
        assert "terminated (SIGTERM)" in line and RESUME in line, line
        assert temporary(tmp_path) == [] and not out.exists()
        gate.set()
        assert wait_for(lambda: server.in_flight == 0, 30)
        server.reset()
        rerun = program(score_argv(tmp_path / "log.parquet", out, server, "--cache", str(cache)))
        _, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err[-3000:]
        # Resumed: nothing answered before was asked again (2 requests a row in all).
        assert cached > 0 and server.count() == 2 * ROWS - cached == answers(cache) - cached
    assert pl.read_parquet(out).height == ROWS


@pytest.mark.parametrize(
    ("signals", "status"),
    [((signal.SIGINT, signal.SIGINT), 130), ((signal.SIGTERM, signal.SIGTERM), 143)],
    ids=["ctrl-c twice", "sigterm twice"],
)
def test_a_second_signal_still_ends_with_the_one_line(
    signals: tuple[int, int], status: int, tmp_path: Path
) -> None:
    with held_server() as (server, _):
        proc = mid_run(tmp_path, server, tmp_path / "cache.sqlite3")
        for signum in signals:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err[-3000:]
    assert RESUME in one_line(err)
    assert temporary(tmp_path) == []


def test_a_ctrl_c_while_the_process_exits_changes_nothing(tmp_path: Path) -> None:
    """Once the line is printed the process is ending (the cache closes at exit): a Ctrl-C
    then used to kill it (status -2) or print "Exception ignored in atexit callback"."""
    with held_server() as (server, _):
        proc = mid_run(tmp_path, server, tmp_path / "cache.sqlite3")
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        proc.send_signal(signal.SIGINT)  # (not sent if the process has already ended)
        rest = proc.stderr.read()
        proc.wait(timeout=60)
    assert proc.returncode == 130, line + rest
    assert RESUME in line and rest == ""


# ------------------------------------------------------------------ a closed stdout: 141


@pytest.mark.parametrize("argv", [["metrics"], ["metrics", "--json"]])
def test_a_closed_stdout_is_quiet(argv: list[str]) -> None:
    """`ragframe metrics | head -1`: the reader is gone before the first write (closed here
    before the process has even started, so every write meets a closed pipe)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragframe.cli", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err
    assert err == ""  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_a_closed_stderr_keeps_the_status() -> None:
    """The one line cannot be printed (`2>&-`, a closed pipe): the status still says what
    happened, instead of 1 from the BrokenPipeError raised while printing it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragframe.cli", "summarize", "no-such-file.parquet"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    proc.stderr.close()
    assert proc.wait(timeout=60) == 2


# ------------------------------------------------------------------------------- the docs


def test_every_status_is_documented() -> None:
    """docs/exit-status.md and the README's table have a row for each status any command
    may end with, and each subcommand's --help names them."""
    for page in (ROOT / "docs" / "exit-status.md", ROOT / "README.md"):
        text = page.read_text()
        for status in COMMON_STATUSES:
            assert f"\n| {status} |" in text, (page.name, status)
        assert "--debug" in text, page.name
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subparsers.choices.items():
        for status in COMMON_STATUSES:
            assert str(status) in (sub.epilog or ""), (name, status)


def test_only_a_subcommand_with_a_cache_says_a_rerun_resumes_from_it() -> None:
    """`metrics`, `report`, `gate` have no cache: their 130 and 143 said "rerun to resume
    from the cache" all the same."""
    said: dict[bool, list[str]] = {True: [], False: []}
    for _, sub in subcommand_parsers():
        has_cache = "--cache" in sub._option_string_actions
        said[has_cache].append(sub.prog)
        epilog = " ".join((sub.epilog or "").split())
        assert ("resume from the cache" in epilog) is has_cache, (sub.prog, epilog)
        assert "rerun" in epilog, (sub.prog, epilog)
    assert "ragframe score" in said[True] and "ragframe metrics" in said[False], said


def test_an_interrupted_batch_job_says_it_goes_on_at_the_provider(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Ctrl-C during `ragframe batch run` stops the waiting, not the batches already submitted:
    the line names the manifest to collect from (it used to speak of the answer cache only)."""

    def ctrl_c(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("ragframe.cli.batch.cmd_batch", ctrl_c)
    monkeypatch.chdir(tmp_path)
    argv = ["batch", "run", "log.parquet", "-o", "out.parquet", "--manifest", "job.json"]
    status, err = run_main(argv, capsys)
    line = one_line(err)
    assert status == 130, line
    assert "go on at the provider" in line and "batch collect --manifest job.json" in line, line
