"""Processes the simulator's own tests run under the shim (test_simulator.py):

    python -m tests.powerloss.child files DIR      file and directory operations, then waits
    python -m tests.powerloss.child sqlite DIR SYNC N  N SQLite commits (WAL, PRAGMA
                                                     synchronous = SYNC), "acked N" after each

Both print "ready" and sleep once done, waiting for kill -9.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

PAGE = 4096


def _write(path: Path, data: bytes, *, sync: bool, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def files(d: Path) -> None:
    """Every rule of the simulated disk once (the expected outcome is in test_simulator)."""
    # pre-existing (durable) files: a, d, f, h, t
    _write(d / "a", b"A1" * 100, sync=False)  # overwritten, never synced
    _write(d / "c", b"C0" * 100, sync=True)  # created, synced ...
    _sync_dir(d)  # ... and named durably
    _write(d / "e", b"E0", sync=False)  # created: its name is durable after the next dir sync
    fd = os.open(d / "h", os.O_RDWR)  # truncated, then a write past a hole, synced
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"H1" * (PAGE // 2), 2 * PAGE)
    os.fdatasync(fd)
    os.close(fd)
    _sync_dir(d)
    with open(d / "c", "ab") as f:  # appended, never synced
        f.write(b"more")
    _write(d / "b", b"B0" * 100, sync=True)  # created and synced, its name never synced
    (d / "d").unlink()  # removed, the directory never synced
    os.rename(d / "f", d / "g")  # renamed, the directory never synced
    _write(d / "t", b"T1", sync=False, flags=os.O_TRUNC)  # truncated by open, never synced


def sqlite(d: Path, sync: str, commits: int) -> None:
    db = sqlite3.connect(d / "x.db", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {sync}")
    db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER PRIMARY KEY, pad TEXT)")
    for n in range(1, commits + 1):
        db.execute("INSERT INTO t (n, pad) VALUES (?, ?)", (n, "x" * 500))
        print(f"acked {n}", flush=True)


def main() -> None:
    case, d = sys.argv[1], Path(sys.argv[2])
    if case == "files":
        files(d)
    elif case == "sqlite":
        sqlite(d, sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown case {case}")
    print("ready", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
