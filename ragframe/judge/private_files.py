"""Folders and files made private (0700, 0600) whatever the umask: the answer cache and the
embedded judge's files hold every prompt sent."""

from __future__ import annotations

import os
from pathlib import Path


def make_private_dirs(directory: Path) -> None:
    """Create `directory` and any missing parents 0700 whatever the umask: the cache holds
    every prompt sent. Folders that already exist keep their mode (they are the user's)."""
    missing: list[Path] = []
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile by another process
            continue
        os.chmod(folder, 0o700)
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)  # raises the error that says why


def create_private_file(path: Path) -> None:
    """Create `path` empty with mode 0600 whatever the umask, unless it exists (an existing
    file keeps its mode). SQLite creates a database's -wal and -shm files with its mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # exists; or cannot be made, which opening it will then report
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
