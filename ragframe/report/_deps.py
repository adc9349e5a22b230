"""The report's optional dependencies (altair, vl-convert-python), imported on demand."""

from __future__ import annotations

import importlib
from typing import Any

from ragframe.errors import ConfigError

INSTALL = "pip install 'ragframe[report]'"


def need(module: str) -> Any:
    """Import one of the report's optional dependencies, or say how to install them."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"ragframe.report needs altair and vl-convert-python ({module} is missing): {INSTALL}"
        ) from exc
