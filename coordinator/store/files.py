"""Lane files on disk: owner-only modes (0600 files, 0700 directories) whatever the umask,
and a consistent raw copy of a lane file through SQLite's backup API."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from coordinator.errors import StoreError

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_LANE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def make_private_file(path: Path) -> None:
    """Lane files hold every machine's tickets and receipts: owner-only (0600), whatever the
    process umask. A new file is created empty with that mode before SQLite opens it (SQLite
    then gives its -wal and -shm files the database file's mode); an existing lane file that
    an older version left open to others is tightened, with its -wal/-shm/-journal.
    Raises OSError when the file cannot be created (the caller words it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        for suffix in _LANE_FILE_SUFFIXES:
            side = path.with_name(path.name + suffix)
            with contextlib.suppress(OSError):  # absent, or not ours: SQLite's open decides
                if side.stat().st_mode & 0o077:
                    side.chmod(PRIVATE_FILE_MODE)
        return
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # os.open's mode is filtered by the umask
    finally:
        os.close(fd)


def make_private_dir(path: Path) -> None:
    """Create a directory (and missing parents) owner-only (0700), whatever the umask. An
    existing directory keeps its mode: the operator chose it."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    path.chmod(PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask


def copy_lane_file(src: Path, dest: Path) -> None:
    """A consistent copy of a lane file (raw, no migrations applied) via the backup API."""
    try:
        make_private_file(dest)
        s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        d = sqlite3.connect(dest)
        try:
            s.backup(d)
        finally:
            s.close()
            d.close()
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot copy lane file {src.name}") from exc
