"""`run_sync`: a coroutine run from sync code, in one place every layer may import."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any


def run_sync(coro: Any) -> Any:
    """Run a coroutine from sync code, also inside a running loop (Jupyter): there it runs on
    a worker thread with its own loop, so the notebook's loop is never blocked re-entrantly."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ragframe") as pool:
        return pool.submit(asyncio.run, coro).result()
