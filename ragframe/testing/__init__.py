"""Test helpers: a fake OpenAI-compatible server (``ragframe.testing.server``).

Every name the server module exports is reachable here too (``ragframe.testing.FakeServer``),
loaded on first use, so ``python -m ragframe.testing.server`` does not import the module twice
(runpy warns when a package pre-imports the module it is about to run). The server's
``__all__`` is the one list of those names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import FakeServer as FakeServer
    from .server import Faults as Faults
    from .server import Handler as Handler
    from .server import Recorded as Recorded
    from .server import Reply as Reply
    from .server import auto_answer as auto_answer
    from .server import embed_text as embed_text
    from .server import messages_hash as messages_hash
    from .server import synthesize as synthesize


def __getattr__(name: str) -> Any:
    """`ragframe.testing.X` is `ragframe.testing.server.X`, for each name the server exports."""
    if name != "__all__" and name.startswith("_"):  # import machinery probes: no server
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    server = importlib.import_module(f"{__name__}.server")
    if name == "__all__" or name in server.__all__:
        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
