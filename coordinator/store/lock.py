"""The data dir's lock: one coordinator process per data dir, or leases stop meaning anything."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from coordinator.errors import ConfigError

LOCK_NAME = ".lane-coordinator.lock"


class DataDirLock:
    """An exclusive, non-blocking flock on DATA_DIR/.lane-coordinator.lock.

    Two servers on one data dir would each hold their own copy of every lane in memory
    and hand out the same slot twice; the second one is refused at startup. The kernel
    drops the lock when the process dies (kill -9 included), so a crash never wedges it.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"data dir: {self.path.parent} is in use by another lane-coordinator "
                "(stop it first; one server per data dir)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None
