"""SQLite lane store: one file per lane, WAL, synchronous=FULL, numbered migrations.

Both store modes of `coordinator.engine.store` (coordinator/store/sqlite_writes.py): a
transaction is BEGIN IMMEDIATE (serializes writers across processes) and reads the
`lane_head` row; its commit writes version + 1, next_deadline and last_now there and
COMMITs. Hosts never see the connection.

The reads shared with the PostgreSQL store are in coordinator/store/reads.py, row mapping and
shared SQL in coordinator/store/rows.py, the migrations runner in
coordinator/store/migrate.py, file modes and raw copies in coordinator/store/files.py."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.constants import (
    ETA_ERROR_GRANTS,
    ETA_HOLD_WINDOW,
    OPEN_ATTEMPTS,
    OPEN_RETRY_SECONDS,
    STORE_BUSY_TIMEOUT_MS,
)
from coordinator.engine.model import IncidentKind, LaneSnapshot
from coordinator.engine.store import LaneHead
from coordinator.errors import StoreError
from coordinator.store.files import (
    check_lane_header,
    fsync_path,
    is_empty_file,
    make_private_file,
    open_failure_reason,
    publish_lane_file,
    remove_lane_file,
    temp_lane_path,
)
from coordinator.store.migrate import apply_migrations, latest_migration, migrations, sha256
from coordinator.store.reads import SQLITE_READS, LaneReads
from coordinator.store.rows import (
    PAUSE_COLUMNS,
    eta_errors_from_rows,
    holds_from_rows,
    pause_from_row,
    projects_from_rows,
    seen_from_rows,
    seen_since,
    ticket_from_row,
)
from coordinator.store.sqlite_writes import SqliteTransaction

# Prepared statements kept per connection: the store uses a few dozen distinct ones; Python's
# default (128) costs about 50 KB more per open lane for nothing.
CACHED_STATEMENTS = 48


def _disk_full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


@functools.cache
def _shipped() -> tuple[tuple[int, str], ...]:
    """(version, sha256) of every shipped migration, as apply_migrations records them; read
    once per process (each open read and hashed every migration file again before)."""
    return tuple((v, sha256(sql)) for v, _name, sql in migrations())


def _has_wal(path: Path) -> bool:
    """The lane has changes waiting in its WAL (then the main file alone is not the lane)."""
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size > 0
    except OSError:
        return False


class SqliteLaneStore(LaneReads, SqliteTransaction):
    """All SQL of a lane. Calls are synchronous; the caller serializes them per lane."""

    _reads = SQLITE_READS

    def __init__(
        self,
        path: Path,
        lane: str,
        *,
        max_migration: int | None = None,
        busy_timeout_ms: int = STORE_BUSY_TIMEOUT_MS,
    ) -> None:
        self.path = path
        self.lane = lane
        self._max_migration = max_migration  # tests: stop at an older schema
        self._busy_timeout_ms = busy_timeout_ms
        self._db: sqlite3.Connection | None = None
        self._read_only = False  # opened read-only because the disk was full
        self._suspended = False  # opened, then its connection closed: reopened on use

    # ---------------------------------------------------------------- lifecycle

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if not self._suspended:
                raise StoreError("lane store is closed")
            self._resume()
        assert self._db is not None
        return self._db

    @property
    def connected(self) -> bool:
        """The lane file is open (it holds descriptors: the database, its -wal and -shm)."""
        return self._db is not None

    def suspend(self) -> None:
        """Close the connection of a quiet lane (its descriptors and page cache go); the
        next call opens the file again. Never inside a transaction."""
        if self._db is None or self._db.in_transaction:
            return
        self.close()
        self._suspended = True

    def resume(self) -> None:
        """Open a suspended lane's file again now (its next call would); else nothing."""
        if self._db is None and self._suspended:
            self._resume()

    def _resume(self) -> None:
        """Open a suspended lane's file again: it must still be this lane's database (a file
        removed or replaced meanwhile is refused, never recreated empty)."""
        try:
            if not self.path.is_file() or is_empty_file(self.path):
                raise StoreError(f"lane store for {self.lane}: its file is gone", reason="gone")
            check_lane_header(self.path)
        except OSError as exc:
            raise self._open_error(exc) from exc
        try:
            self._open_or_read_only()
        finally:
            # failed: still suspended, so the next call tries again (the actor answers 503)
            self._suspended = self._db is None

    @staticmethod
    def peek_deadline(path: Path) -> tuple[bool, float | None]:
        """(known, next_deadline) of a lane file without opening it as a lane: read-only, one
        row. `known` is False when the file cannot tell (an older schema, unreadable): open
        the lane to find out.

        A cleanly closed lane (no WAL content) is read as an immutable file: no locks, no
        -shm or -wal made (a read-only WAL connection would leave both behind) and about a
        quarter of the CPU — at startup this runs for every lane file. A lane with WAL
        content (a crash) is read through SQLite's normal read-only path, WAL included."""
        mode = "ro" if _has_wal(path) else "ro&immutable=1"
        try:
            db = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=1.0)
        except sqlite3.Error:
            return False, None
        try:
            row = db.execute("SELECT next_deadline FROM lane_head WHERE id = 1").fetchone()
        except sqlite3.Error:
            return False, None
        finally:
            db.close()
        if row is None:
            return False, None
        return True, row[0]

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def open(self) -> None:
        """Open the lane file, creating it atomically when it does not exist yet (or is an
        empty file an older version left): a new file is made and migrated under a temporary
        name, fsynced and only then moved into place, so a failed first open leaves no lane
        file. An existing file that is not SQLite is refused before SQLite touches it.
        Raises StoreError, with a short `reason` (see files.open_failure_reason)."""
        try:
            if is_empty_file(self.path) or not self.path.exists():
                self._create()
            check_lane_header(self.path)
        except StoreError as exc:
            self.close()
            if exc.reason is None:
                exc.reason = open_failure_reason(exc)
            raise
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise self._open_error(exc) from exc
        self._open_or_read_only()

    def _open_error(self, exc: BaseException) -> StoreError:
        reason = open_failure_reason(exc)
        return StoreError(f"cannot open lane store for {self.lane}: {reason}", reason=reason)

    def _create(self) -> None:
        tmp = temp_lane_path(self.path)
        try:
            fresh = SqliteLaneStore(
                tmp, self.lane, max_migration=self._max_migration, busy_timeout_ms=0
            )
            try:
                fresh._open_once()
                fresh._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                fresh.close()
            fsync_path(tmp)
            publish_lane_file(tmp, self.path)
        finally:
            remove_lane_file(tmp)

    def _open_or_read_only(self) -> None:
        """Open the lane for writing; on a full disk, when its file is complete on its own (no
        WAL content waiting), open it read-only instead: reads are served, writes answer 503
        (ENOSPC) until space is back — `begin` tries to open it for writing again each time.
        (SQLite cannot create a cleanly closed lane's -shm file on a full disk.)"""
        self._read_only = False
        try:
            self._open_existing()
        except StoreError as exc:
            if not _disk_full(self.path) or _has_wal(self.path):
                raise
            exc.reason = "ENOSPC"
            try:
                self._open_immutable()
            except (sqlite3.Error, StoreError):
                self.close()
                raise exc from None

    def _open_immutable(self) -> None:
        db = sqlite3.connect(
            f"file:{self.path}?mode=ro&immutable=1",
            uri=True,
            check_same_thread=False,
            cached_statements=CACHED_STATEMENTS,
        )
        self._db = db
        db.row_factory = sqlite3.Row
        if self.schema_version() != latest_migration():
            raise StoreError(f"lane store for {self.lane}: an older schema (disk full)")
        self._read_only = True

    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        if self._read_only:  # opened read-only on a full disk: writable again?
            self.close()
            try:
                self._open_or_read_only()
            finally:
                if self._db is None:
                    self._suspended = True  # try again on the next call
            if self._read_only:
                raise StoreError(
                    f"lane store for {self.lane}: the disk is full; reads only", reason="ENOSPC"
                )
        return super().begin_load(load=load)

    def _open_existing(self) -> None:
        # Several processes opening a new file at once (the client's local queue) can find it
        # locked while one of them switches it to WAL: SQLite answers that without waiting on
        # the busy handler, so the whole open is tried again, a bounded number of times.
        for attempt in range(OPEN_ATTEMPTS):
            try:
                self._open_once()
                return
            except sqlite3.OperationalError as exc:
                self.close()
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise self._open_error(exc) from exc
                if attempt == OPEN_ATTEMPTS - 1:
                    raise StoreError(f"lane store for {self.lane} stayed locked") from exc
                time.sleep(OPEN_RETRY_SECONDS)
            except sqlite3.Error as exc:
                self.close()
                raise self._open_error(exc) from exc
            except StoreError as exc:  # e.g. an edited migration: refuse, leave it closed
                self.close()
                if exc.reason is None:
                    exc.reason = open_failure_reason(exc)
                raise

    def _open_once(self) -> None:
        try:
            make_private_file(self.path)  # SQLite gives the -wal and -shm files the same mode
        except OSError as exc:
            raise self._open_error(exc) from exc
        db = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=30.0,
            cached_statements=CACHED_STATEMENTS,
        )
        self._db = db  # set first, so a failure below closes it
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self._suspended = False
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _migrate(self) -> None:
        if self._max_migration is None and self._is_current():
            return  # nothing to apply: no write transaction at open
        apply_migrations(self._conn, self.lane, self._max_migration)

    def _is_current(self) -> bool:
        """The file holds every shipped migration, unedited, and its lane's name. Anything
        else (a new file, an older schema, an edited migration) goes through
        apply_migrations, which applies what is missing or refuses."""
        db = self._conn
        try:
            rows = db.execute("SELECT version, sha256 FROM schema_migrations ORDER BY version")
            applied = tuple((int(r[0]), str(r[1])) for r in rows)
            named = db.execute("SELECT 1 FROM meta WHERE key = 'lane'").fetchone()
        except sqlite3.Error:
            return False
        return named is not None and applied == _shipped()

    def schema_version(self) -> int:
        row = self._conn.execute("SELECT max(version) AS v FROM schema_migrations").fetchone()
        return int(row["v"] or 0)

    # ---------------------------------------------------------------- the lane transaction
    # Both store modes (the locking transaction, the pipelined group commit):
    # coordinator/store/sqlite_writes.py (SqliteTransaction).

    def _head(self) -> LaneHead:
        rows = self._read("SELECT version, last_now, next_deadline FROM lane_head WHERE id = 1")
        if not rows:
            raise StoreError(f"lane store for {self.lane} has no lane_head row")
        r = rows[0]
        return LaneHead(int(r["version"]), r["last_now"], r["next_deadline"])

    # ---------------------------------------------------------------- reads

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read lane store for {self.lane}") from exc

    def load(self) -> LaneSnapshot:
        db = self._conn
        if db.in_transaction:
            return self._load()
        try:  # one read transaction: every table from the same commit
            db.execute("BEGIN")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read lane store for {self.lane}") from exc
        try:
            return self._load()
        finally:
            self.abort()

    def _load(self) -> LaneSnapshot:
        lane = self.lane
        snap = LaneSnapshot()
        q = self._reads
        snap.live = [ticket_from_row(r, lane) for r in self._read(q.live)]
        snap.in_flight = [ticket_from_row(r, lane) for r in self._read(q.in_flight)]
        meta = {r["key"]: r["value"] for r in self._read("SELECT key, value FROM meta")}
        snap.last_fence = int(meta.get("last_fence", "0"))
        snap.next_seq = int(meta.get("next_seq", "1"))
        snap.project_served = projects_from_rows(self._read(q.projects))
        rows = self._read(f"SELECT {PAUSE_COLUMNS} FROM pause")
        if rows:
            snap.pause = pause_from_row(rows[0])
        snap.recent_holds = holds_from_rows(self._read(q.holds, (ETA_HOLD_WINDOW,)))
        snap.recent_eta_errors = eta_errors_from_rows(self._read(q.eta_errors, (ETA_ERROR_GRANTS,)))
        snap.history_count = self.history_count()
        snap.incident_count = int(self._read("SELECT count(*) AS n FROM incidents")[0]["n"])
        coll = self._read(
            "SELECT detail FROM incidents WHERE kind = ? ORDER BY id DESC LIMIT 1",
            (IncidentKind.DUPLICATE_COLLISION.value,),
        )
        if coll:
            snap.last_collision = json.loads(coll[0]["detail"])
        head = self._head()
        snap.version, snap.last_now = head.version, head.last_now
        seen = self._read(q.seen, (seen_since(head.last_now),))
        snap.machines_seen = seen_from_rows(seen)
        return snap

    def backup_to(self, dest: Path) -> None:
        """A consistent online copy through SQLite's backup API."""
        try:
            make_private_file(dest)
            target = sqlite3.connect(dest)
            try:
                self._conn.backup(target)
            finally:
                target.close()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot back up lane store for {self.lane}") from exc
