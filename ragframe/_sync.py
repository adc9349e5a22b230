"""`run_sync`: a coroutine run from sync code, in one place every layer may import; and the
stop signals made one interruption: inside `terminate_as_interrupt` (the command line uses it)
SIGTERM, which CI runners and Kubernetes send, is raised as Ctrl-C's KeyboardInterrupt is, so
every cleanup written for Ctrl-C also runs on SIGTERM."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ragframe.errors import Terminated

__all__ = ["interruption", "run_sync", "terminate_as_interrupt"]

#: The signals that stop a run; each is raised as a KeyboardInterrupt (SIGTERM as Terminated).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interruption(signum: int) -> KeyboardInterrupt:
    """The exception a stop signal is raised as: Terminated for SIGTERM, else KeyboardInterrupt."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


class _Absorbed:
    """The handler left on the stop signals when an interrupted run returns inside
    `terminate_as_interrupt`: a further signal while the interruption unwinds toward the
    command line's handler is absorbed, not raised in the middle of a cleanup. Leaving
    `terminate_as_interrupt` puts `previous` back."""

    def __init__(self, previous: dict[int, Any]) -> None:
        self.previous = previous

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        return None


#: How many `terminate_as_interrupt` blocks the main thread is in (the command line's).
_cli_depth = 0


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises Terminated (a KeyboardInterrupt) as SIGINT raises
    KeyboardInterrupt, instead of killing the process with no cleanup. Installed only from the
    main thread and over the default action (an embedding program's own handler is kept).
    An interrupted run leaves `_Absorbed` on the stop signals while inside; leaving puts back
    what it replaced."""
    global _cli_depth
    if not _in_main_thread():
        yield
        return
    ours = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if ours:
        signal.signal(signal.SIGTERM, _raise_terminated)
    _cli_depth += 1
    try:
        yield
    finally:
        _cli_depth -= 1
        for signum in STOP_SIGNALS:
            handler = signal.getsignal(signum)
            if isinstance(handler, _Absorbed) and signum in handler.previous:
                signal.signal(signum, handler.previous[signum])
        # unless the handler was changed meanwhile (an interrupted program ignores it)
        if ours and signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_sync(coro: Any) -> Any:
    """Run a coroutine from sync code, also inside a running loop (Jupyter): there it runs on
    a worker thread with its own loop, so the notebook's loop is never blocked re-entrantly."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ragframe") as pool:
        return pool.submit(asyncio.run, coro).result()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _ours(signum: int, handler: Any) -> bool:
    """Whether the run may take over a signal: SIGINT from Python's default handler (as
    asyncio.run does); SIGTERM only where `terminate_as_interrupt` asked for it (the command
    line), so a program that calls ragframe keeps its own SIGTERM, or the default that ends it."""
    if signum == signal.SIGTERM:
        return handler is _raise_terminated
    return handler is signal.default_int_handler


def _run_here(coro: Any) -> Any:
    """`asyncio.run`, with SIGTERM (inside `terminate_as_interrupt`) handled as asyncio handles
    SIGINT, and a second signal that cannot land in the middle of a cleanup. The first stop
    signal cancels the run (its cleanups run: the temporary output is removed, the cache keeps
    every answer); a second one stops the loop at its next turn instead of waiting for them
    (what is left is cancelled as the loop closes); a third, for a loop stuck in sync code,
    raises at once. The caller gets KeyboardInterrupt (Terminated for SIGTERM), never the
    loop's own errors about a shutdown cut short ("Event loop stopped before Future completed",
    once 1 run in 20 after a second Ctrl-C), and never the run's value once a signal came,
    even one that came while the finished run's loop was closing. Inside
    `terminate_as_interrupt` an interrupted run leaves signals absorbed, not raised, until the
    command line has handled the interruption."""
    runner = asyncio.Runner()
    loop = runner.get_loop()
    task = loop.create_task(coro)
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 2 or (len(received) == 1 and task.done()):
            raise interruption(received[0])
        if len(received) == 1:
            task.cancel()
        else:
            loop.stop()
        loop.call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()

    previous = _install(on_signal)
    interrupted = False  # an interruption is propagating out of the run
    try:
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if received and task.uncancel() == 0:
                interrupted = True
                raise interruption(received[0]) from None
            raise
        except BaseException:
            if received:  # a later signal, or an error the cancellation caused
                interrupted = True
                raise interruption(received[0]) from None
            raise
        finally:
            if received:  # what is left of an interrupted run goes quietly
                loop.set_exception_handler(lambda loop, context: None)
            try:
                runner.close()
            except BaseException:
                if interrupted:  # a signal while closing: the interruption says it all
                    pass
                elif received:  # the first signal came while closing a finished run
                    raise interruption(received[0]) from None
                else:
                    raise
    finally:
        if received and _cli_depth:  # unwinding toward the command line's handler
            absorbed = _Absorbed(previous)
            _restore(dict.fromkeys(previous, absorbed))
        else:
            _restore(previous)


def _install(handler: Callable[[int, FrameType | None], None]) -> dict[int, Any]:
    """Put `handler` on the stop signals whose current handler is a default one; what was
    there before, to restore."""
    if not _in_main_thread():
        return {}
    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        current = signal.getsignal(signum)
        if _ours(signum, current):
            previous[signum] = current
            signal.signal(signum, handler)
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
