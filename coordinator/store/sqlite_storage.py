"""The default store: one SQLite file per lane under the data dir, one server per data dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from coordinator.engine.store import LaneStore
from coordinator.errors import ConfigError
from coordinator.names import lane_file_name, lane_from_file_name
from coordinator.protocol.constants import ACTOR_SQLITE
from coordinator.store.files import (
    TEMP_MARK,
    data_dir_unwritable,
    is_empty_file,
    make_private_dir,
)
from coordinator.store.lock import DataDirLock
from coordinator.store.sqlite import SqliteLaneStore

log = structlog.get_logger("coordinator.registry")


class SqliteStorage:
    kind = ACTOR_SQLITE
    shared = False
    max_transactions: int | None = None

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._lock = DataDirLock(data_dir)

    def path_for(self, lane: str) -> Path:
        return self.data_dir / lane_file_name(lane)

    def start(self) -> None:
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data dir: {self.data_dir} exists and is not a directory")
        if self.data_dir.is_dir() and self.data_dir.stat().st_mode & 0o077:
            # Its lane files are 0600 anyway; the directory's mode is the operator's choice.
            log.warning("data_dir.not_private", data_dir=str(self.data_dir), hint="chmod 700")
        make_private_dir(self.data_dir)
        self._lock.acquire()
        self._remove_temp_files()
        for p in sorted(self.data_dir.iterdir()):
            if lane_from_file_name(p.name) is not None and is_empty_file(p):
                log.warning("lane.empty_file_ignored", file=p.name, hint="no lane yet")

    def _remove_temp_files(self) -> None:
        """A lane file being created lives under a temporary name until it is complete
        (files.temp_lane_path); one left by a crash or a power loss during a first acquire is
        never a lane. We hold the data dir's lock: no other server is creating one now."""
        for p in sorted(self.data_dir.iterdir()):
            if p.name.startswith(".") and TEMP_MARK in p.name and p.is_file():
                try:
                    p.unlink()
                except OSError as exc:
                    log.warning("lane.temp_file_kept", file=p.name, error=type(exc).__name__)
                    continue
                log.info("lane.temp_file_removed", file=p.name)

    def stop(self) -> None:
        self._lock.release()

    def make_store(self, lane: str) -> LaneStore:
        return SqliteLaneStore(self.path_for(lane), lane)

    def stored_lanes(self) -> list[str]:
        """Lanes with a file; a 0-byte file (an older version's failed first open) is not
        one: its lane has no file yet, and the next acquire replaces it atomically."""
        out = []
        for p in sorted(self.data_dir.iterdir()):
            lane = lane_from_file_name(p.name)
            if lane is not None and p.is_file() and not is_empty_file(p):
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
        return SqliteLaneStore.peek_deadline(self.path_for(lane))

    def lanes_due(self, now: float) -> list[str]:
        return []

    async def listen(
        self, on_lane: Callable[[str], None], on_connected: Callable[[], None]
    ) -> None:
        return None  # one server per data dir: nobody else writes its lanes
