"""Installed packages located without importing them: the local models ship as data packages
whose import may need tools a `--no-deps` install lacks; `find_spec` only locates them."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_folders(package: str) -> list[Path]:
    """The folders `package` is installed in, none when it is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location) for location in spec.submodule_search_locations]
