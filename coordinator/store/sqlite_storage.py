"""The default store: one SQLite file per lane under the data dir, one server per data dir."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import structlog

from coordinator.engine.store import LaneStore
from coordinator.errors import ConfigError
from coordinator.protocol.constants import ACTOR_SQLITE
from coordinator.protocol.names import lane_file_name, lane_from_file_name
from coordinator.store.deadline_index import DeadlineIndex, Key, stat_key, write_index
from coordinator.store.files import (
    TEMP_MARK,
    data_dir_refused,
    data_dir_unwritable,
    is_empty_file,
    make_private_dir,
)
from coordinator.store.lock import DataDirLock
from coordinator.store.sqlite import SqliteLaneStore

log = structlog.get_logger("coordinator.registry")


def _is_empty(entry: os.DirEntry[str]) -> bool:
    """A 0-byte regular file (files.is_empty_file, for a directory entry)."""
    try:
        st = entry.stat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


class SqliteStorage:
    kind = ACTOR_SQLITE
    shared = False
    max_transactions: int | None = None

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock = DataDirLock(data_dir)
        self._index = DeadlineIndex()  # the last clean stop's deadlines (deadline_index.py)

    def path_for(self, lane: str) -> Path:
        return self.data_dir / lane_file_name(lane)

    def start(self) -> None:
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data dir: {self.data_dir} exists and is not a directory")
        if self.data_dir.is_dir() and self.data_dir.stat().st_mode & 0o077:
            # Its lane files are 0600 anyway; the directory's mode is the operator's choice.
            log.warning("data_dir.not_private", data_dir=str(self.data_dir), hint="chmod 700")
        refused = data_dir_refused(self.data_dir)
        if refused is not None:
            raise ConfigError(refused)
        make_private_dir(self.data_dir)
        self._lock.acquire()
        self._remove_temp_files()
        self._index = DeadlineIndex.read(self.data_dir)
        for entry in self._entries():
            if lane_from_file_name(entry.name) is not None and _is_empty(entry):
                log.warning("lane.empty_file_ignored", file=entry.name, hint="no lane yet")

    def _entries(self) -> list[os.DirEntry[str]]:
        """The data dir's entries, by name. (Listing 10,000 lane files as sorted Paths cost
        about 0.1 s each time, before the server listens: names sort faster, and an entry
        carries its type and caches its stat.)"""
        with os.scandir(self.data_dir) as it:
            return sorted(it, key=lambda e: e.name)

    def _remove_temp_files(self) -> None:
        """A lane file being created lives under a temporary name until it is complete
        (files.temp_lane_path); one left by a crash or a power loss during a first acquire is
        never a lane. We hold the data dir's lock: no other server is creating one now."""
        for entry in self._entries():
            p = self.data_dir / entry.name
            if p.name.startswith(".") and TEMP_MARK in p.name and entry.is_file():
                try:
                    p.unlink()
                except OSError as exc:
                    log.warning("lane.temp_file_kept", file=p.name, error=type(exc).__name__)
                    continue
                log.info("lane.temp_file_removed", file=p.name)

    def stop(self) -> None:
        """After every lane is closed: the deadline index for the next start, then the lock.
        (A stop without it only makes the next start read every lane file.)"""
        try:
            deadlines = self._deadlines()
            if deadlines:  # no lane file: nothing to index, nothing written
                write_index(self.data_dir, deadlines)
        except OSError as exc:
            log.warning("lanes.deadline_index_not_written", error=type(exc).__name__)
        finally:
            self._lock.release()

    def _deadlines(self) -> dict[str, tuple[Key, float | None]]:
        out: dict[str, tuple[Key, float | None]] = {}
        for lane in self.stored_lanes():
            path = self.path_for(lane)
            key = stat_key(path)
            if key is None:
                continue
            known, deadline = self.peek_deadline(lane)
            if known and stat_key(path) == key:
                out[lane] = (key, deadline)
        return out

    def make_store(self, lane: str) -> LaneStore:
        return SqliteLaneStore(self.path_for(lane), lane)

    def stored_lanes(self) -> list[str]:
        """Lanes with a file; a 0-byte file (an older version's failed first open) is not
        one: its lane has no file yet, and the next acquire replaces it atomically."""
        out = []
        for entry in self._entries():
            lane = lane_from_file_name(entry.name)
            if lane is not None and entry.is_file() and not _is_empty(entry):
                out.append(lane)
        return out

    def has_lane(self, lane: str) -> bool:
        path = self.path_for(lane)
        return path.exists() and not is_empty_file(path)

    def problem(self) -> str | None:
        return data_dir_unwritable(self.data_dir)

    def where(self, lane: str) -> dict[str, str]:
        return {"file": self.path_for(lane).name}

    def peek_deadline(self, lane: str) -> tuple[bool, float | None]:
        path = self.path_for(lane)
        known, deadline = self._index.deadline(lane, path)
        if known:
            return known, deadline
        return SqliteLaneStore.peek_deadline(path)

    def lanes_due(self, now: float) -> list[str]:
        return []

    async def listen(
        self, on_lane: Callable[[str], None], on_connected: Callable[[], None]
    ) -> None:
        return None  # one server per data dir: nobody else writes its lanes
