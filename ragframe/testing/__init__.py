"""Test helpers: a fake OpenAI-compatible server (``ragframe.testing.server``).

Names are re-exported lazily, so ``python -m ragframe.testing.server`` does not import the
module twice (runpy warns when a package pre-imports the module it is about to run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import (
        FakeServer,
        Faults,
        Handler,
        Recorded,
        Reply,
        auto_answer,
        embed_text,
        messages_hash,
        synthesize,
    )

__all__ = [
    "FakeServer",
    "Faults",
    "Handler",
    "Recorded",
    "Reply",
    "auto_answer",
    "embed_text",
    "messages_hash",
    "synthesize",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
