"""Machine presence in the store: one row per machine and lane it named, holding the latest
time it was seen there. coordinator/http/presence.py writes sightings through to it
(throttled) and lists `GET /v1/machines` from it, so every replica lists the same machines and
a restart forgets none.

- `SqlitePresenceStore`: a small SQLite file in the data dir, PRESENCE_FILE_NAME, which is
  never taken for a lane file (it does not end in the lane suffix, see
  `lane_from_file_name`); owner-only (0600), created complete under a temporary name and then
  moved into place, like a lane file (coordinator/store/files.py).
- `PostgresPresenceStore` (coordinator/store/presence_pg.py): the `presence` table of the
  shared database (pg migration 0002).

Calls are synchronous and may block (a file, the network): the caller runs them on an
executor. Each store serializes its own calls (a lock), so a shared executor is fine.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from coordinator.constants import DEFAULT_REPLICA_STALL_SECONDS, STORE_BUSY_TIMEOUT_MS
from coordinator.errors import StoreError
from coordinator.store.files import (
    check_lane_header,
    fsync_path,
    is_empty_file,
    make_private_file,
    publish_lane_file,
    remove_lane_file,
    temp_lane_path,
)
from coordinator.store.storage import postgres_url, sqlite_data_dir

PRESENCE_FILE_NAME = "presence.db"  # in the data dir; not a lane file name
PRESENCE_SCHEMA_VERSION = 1  # the file's PRAGMA user_version


@dataclass(slots=True, frozen=True, order=True)
class Sighting:
    """A machine seen on a lane ("" when its call named none), and when it was last."""

    machine_id: str
    lane: str
    last_seen_at: float


class PresenceStore(Protocol):
    def record(self, sightings: Sequence[Sighting], prune_before: float) -> None:
        """Write each sighting (its row keeps the later of the stored and the new time), then
        delete the rows last seen before `prune_before`. Raises StoreError."""
        ...

    def recent(self, since: float, limit: int) -> list[Sighting]:
        """The rows seen at or after `since` of the `limit` machines seen most recently.
        Raises StoreError."""
        ...

    def close(self) -> None: ...


def presence_store_for(
    url: str | None, data_dir: Path | None, *, stall_seconds: float = DEFAULT_REPLICA_STALL_SECONDS
) -> PresenceStore:
    """The presence store beside the lane store `url` names: None or "sqlite", a file in
    `data_dir`; a postgresql:// URL, that database (its session's timeouts derived from
    `stall_seconds`, the config's `replica_stall_seconds`)."""
    pg = postgres_url(url)
    if pg is not None:
        from coordinator.store.postgres_db import StallBudget
        from coordinator.store.presence_pg import PostgresPresenceStore

        return PostgresPresenceStore(pg, stall=StallBudget(stall_seconds))
    return SqlitePresenceStore(sqlite_data_dir(data_dir) / PRESENCE_FILE_NAME)


def recent_sql(placeholder: str) -> str:
    """The `recent` query in a driver's parameter style: (since, limit, since)."""
    p = placeholder
    return (
        "WITH top AS (SELECT machine_id, max(last_seen_at) AS at FROM presence "
        f"WHERE last_seen_at >= {p} GROUP BY machine_id ORDER BY at DESC, machine_id LIMIT {p}) "
        "SELECT presence.machine_id, presence.lane, presence.last_seen_at FROM presence "
        f"JOIN top ON top.machine_id = presence.machine_id WHERE presence.last_seen_at >= {p} "
        "ORDER BY presence.machine_id, presence.lane"
    )


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS presence (machine_id TEXT NOT NULL, lane TEXT NOT NULL, "
    "last_seen_at REAL NOT NULL, PRIMARY KEY (machine_id, lane))",
    "CREATE INDEX IF NOT EXISTS presence_seen ON presence (last_seen_at)",
    f"PRAGMA user_version = {PRESENCE_SCHEMA_VERSION}",
)
_UPSERT = (
    "INSERT INTO presence (machine_id, lane, last_seen_at) VALUES (?, ?, ?) "
    "ON CONFLICT (machine_id, lane) DO UPDATE SET "
    "last_seen_at = max(last_seen_at, excluded.last_seen_at)"
)


class SqlitePresenceStore:
    """Presence in one SQLite file (WAL), opened on first use and again after a failure."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = STORE_BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.writes = 0  # rows written (tests: the throttle)

    def __repr__(self) -> str:
        return f"SqlitePresenceStore({str(self.path)!r})"

    def _connect(self, path: Path) -> sqlite3.Connection:
        make_private_file(path)  # created 0600 before SQLite opens it (its -wal, -shm too)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            db.execute("PRAGMA journal_mode = WAL")
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > PRESENCE_SCHEMA_VERSION:
                raise StoreError(f"{path.name} was written by a newer coordinator")
            if version < PRESENCE_SCHEMA_VERSION:
                for statement in _SCHEMA:
                    db.execute(statement)
        except BaseException:
            db.close()
            raise
        return db

    def _create(self) -> None:
        """Make the file complete under a temporary name, then move it into place (another
        file that appeared meanwhile wins)."""
        tmp = temp_lane_path(self.path)
        try:
            db = self._connect(tmp)
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                db.close()
            fsync_path(tmp)
            publish_lane_file(tmp, self.path)
        finally:
            remove_lane_file(tmp)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if not self.path.exists() or is_empty_file(self.path):
                self._create()
            check_lane_header(self.path)  # a file that is not SQLite is refused, untouched
            self._db = self._connect(self.path)
        return self._db

    def _drop(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def record(self, sightings: Sequence[Sighting], prune_before: float) -> None:
        with self._lock:
            try:
                db = self._conn()
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        _UPSERT, [(s.machine_id, s.lane, s.last_seen_at) for s in sightings]
                    )
                    db.execute("DELETE FROM presence WHERE last_seen_at < ?", (prune_before,))
                    db.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, OSError) as exc:
                self._drop()
                raise StoreError(f"cannot write machine presence to {self.path.name}") from exc
            self.writes += len(sightings)

    def recent(self, since: float, limit: int) -> list[Sighting]:
        with self._lock:
            try:
                rows = self._conn().execute(recent_sql("?"), (since, limit, since)).fetchall()
            except (sqlite3.Error, OSError) as exc:
                self._drop()
                raise StoreError(f"cannot read machine presence from {self.path.name}") from exc
        return [Sighting(str(m), str(lane), float(at)) for m, lane, at in rows]

    def close(self) -> None:
        with self._lock:
            self._drop()
