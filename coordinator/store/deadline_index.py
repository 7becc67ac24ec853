"""The deadline index: each lane file's `next_deadline`, written at a clean stop, so the next
start knows which lanes are due without reading every lane file (about 0.13 ms of CPU per
file: 1.3 s for 10,000 lanes, spent while the due lanes wait to be woken).

It is a hint, never the truth: an entry counts only while the lane file is exactly the file
it was written for — same inode, size, mtime and ctime (any write, copy, restore or `touch`
changes one) — with no WAL content beside it; any other lane file is read as before. So an
index left by an earlier stop stays right after a crash: the lanes written since then are
read, the others have the deadline their untouched file holds. A missing, unreadable, torn
or foreign file is no index: every lane file is read. The start never deletes it (that
would free space on a full disk and make the readiness probe pass); the next clean stop
replaces it.

A wrong entry could only wake a lane early (it finds nothing due and arms its own alarm) or
late; the stat key is what rules the late case out."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import structlog

from coordinator.store.files import fsync_path

INDEX_NAME = ".lane-deadlines.json"  # a dot file: never a lane file name
INDEX_FORMAT = 1

log = structlog.get_logger("coordinator.registry")

Key = tuple[int, int, int, int]  # (st_ino, st_size, st_mtime_ns, st_ctime_ns)


class _Entry(msgspec.Struct, array_like=True, frozen=True):
    key: Key
    deadline: float | None


class _Index(msgspec.Struct, frozen=True):
    format: int
    lanes: dict[str, _Entry]


def stat_key(path: Path) -> Key | None:
    """The lane file's identity as the index records it; None when it has WAL content (then
    the main file alone is not the lane) or cannot be read."""
    try:
        wal = os.stat(path.with_name(path.name + "-wal"))
    except FileNotFoundError:
        pass
    except OSError:
        return None
    else:
        if wal.st_size > 0:
            return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class DeadlineIndex:
    """Read once at start (`read`), consulted per lane file (`deadline`)."""

    def __init__(self, lanes: dict[str, _Entry] | None = None) -> None:
        self._lanes = lanes or {}

    def __len__(self) -> int:
        return len(self._lanes)

    @classmethod
    def read(cls, data_dir: Path) -> DeadlineIndex:
        """The index left by the last clean stop (an empty one when there is none or it
        cannot be used)."""
        try:
            raw = (data_dir / INDEX_NAME).read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            log.warning("lanes.deadline_index_unreadable", error=type(exc).__name__)
            return cls()
        try:
            index = msgspec.json.decode(raw, type=_Index)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("lanes.deadline_index_ignored", reason="not a deadline index")
            return cls()
        if index.format != INDEX_FORMAT:
            log.warning("lanes.deadline_index_ignored", reason=f"format {index.format}")
            return cls()
        return cls(index.lanes)

    def deadline(self, lane: str, path: Path) -> tuple[bool, float | None]:
        """(True, the recorded deadline) when the lane file is the one the entry was written
        for, else (False, None): read the file."""
        entry = self._lanes.get(lane)
        if entry is None or stat_key(path) != entry.key:
            return False, None
        return True, entry.deadline


def write_index(data_dir: Path, lanes: dict[str, tuple[Key, float | None]]) -> None:
    """Write the index (atomically: a temporary name, fsynced, renamed). Called after every
    lane is closed, with the data dir still locked."""
    index = _Index(INDEX_FORMAT, {lane: _Entry(k, d) for lane, (k, d) in lanes.items()})
    path = data_dir / INDEX_NAME
    tmp = data_dir / (INDEX_NAME + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "wb") as f:
        f.write(msgspec.json.encode(index))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(data_dir, directory=True)
