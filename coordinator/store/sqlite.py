"""SQLite lane store: one file per lane, WAL, synchronous=FULL, numbered migrations.

Implements `coordinator.engine.store.LaneStore`: `begin` is BEGIN IMMEDIATE (serializes
writers across processes) and reads the `lane_head` row; `finish` writes version + 1,
next_deadline and last_now there and COMMITs. Hosts never see the connection.

Row mapping and shared SQL are in coordinator/store/rows.py, the migrations runner in
coordinator/store/migrate.py, file modes and raw copies in coordinator/store/files.py."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.constants import (
    ETA_HOLD_SAMPLE_SIZE,
    OPEN_ATTEMPTS,
    OPEN_RETRY_SECONDS,
    STORE_BUSY_TIMEOUT_MS,
)
from coordinator.engine.model import (
    Change,
    Incident,
    IncidentKind,
    LaneSnapshot,
    PruneHistory,
    PruneIncidents,
    PruneMachinesSeen,
    PutCounters,
    PutIncident,
    PutMachineSeen,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    Receipt,
    Ticket,
)
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
from coordinator.store.migrate import apply_migrations
from coordinator.store.rows import (
    ENDED,
    PAUSE_COLUMNS,
    RECEIPT_COLUMNS,
    SQLITE_SEEN_LOAD,
    SQLITE_SEEN_PRUNE,
    SQLITE_SEEN_UPSERT,
    TICKET_COLUMNS,
    TICKET_UPSERT,
    coalesce,
    detail_json,
    incident_from_row,
    pause_from_row,
    pause_values,
    receipt_from_row,
    receipt_values,
    seen_from_rows,
    seen_since,
    ticket_from_row,
    ticket_values,
)


class SqliteLaneStore:
    """All SQL of a lane. Calls are synchronous; the caller serializes them per lane."""

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

    # ---------------------------------------------------------------- lifecycle

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("lane store is closed")
        return self._db

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
        self._open_existing()

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
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db = db  # set first, so a failure below closes it
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _migrate(self) -> None:
        apply_migrations(self._conn, self.lane, self._max_migration)

    def schema_version(self) -> int:
        row = self._conn.execute("SELECT max(version) AS v FROM schema_migrations").fetchone()
        return int(row["v"] or 0)

    # ---------------------------------------------------------------- the lane transaction

    def begin(self) -> LaneHead:
        db = self._conn
        if db.in_transaction:
            raise StoreError(f"lane store for {self.lane}: a transaction is already open")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"lane store for {self.lane} is busy") from exc
        try:
            return self._head()
        except BaseException:
            self.abort()
            raise

    def _head(self) -> LaneHead:
        rows = self._read("SELECT version, last_now, next_deadline FROM lane_head WHERE id = 1")
        if not rows:
            raise StoreError(f"lane store for {self.lane} has no lane_head row")
        r = rows[0]
        return LaneHead(int(r["version"]), r["last_now"], r["next_deadline"])

    def apply(self, changes: Sequence[Change]) -> None:
        if not self._conn.in_transaction:
            raise StoreError(f"lane store for {self.lane}: apply outside a transaction")
        try:
            self._write(changes)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc

    def finish(self, next_deadline: float | None, last_now: float, notify: bool = False) -> int:
        """COMMIT (`notify` is for stores shared by replicas: one file has one server)."""
        db = self._conn
        if not db.in_transaction:
            raise StoreError(f"lane store for {self.lane}: finish outside a transaction")
        try:
            db.execute(
                "UPDATE lane_head SET version = version + 1, next_deadline = ?, "
                "last_now = max(coalesce(last_now, ?), ?) WHERE id = 1",
                (next_deadline, last_now, last_now),
            )
            version = int(db.execute("SELECT version FROM lane_head WHERE id = 1").fetchone()[0])
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.abort()
            raise StoreError(f"cannot commit to lane store for {self.lane}") from exc
        return version

    def abort(self) -> None:
        db = self._db
        if db is not None and db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")

    # ---------------------------------------------------------------- writes

    def _write(self, changes: Sequence[Change]) -> None:
        db = self._conn
        for ch in coalesce(changes):
            if isinstance(ch, PutTicket):
                db.execute(TICKET_UPSERT, ticket_values(ch.ticket))
            elif isinstance(ch, PutCounters):
                db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [("last_fence", str(ch.last_fence)), ("next_seq", str(ch.next_seq))],
                )
            elif isinstance(ch, PutProjectServed):
                db.execute(
                    "INSERT INTO projects (project, last_fence, last_granted_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (project) DO UPDATE SET last_fence = excluded.last_fence, "
                    "last_granted_at = excluded.last_granted_at",
                    (ch.project, ch.fence, ch.at),
                )
            elif isinstance(ch, PutPause):
                db.execute("DELETE FROM pause")
                if ch.pause is not None:
                    db.execute(
                        f"INSERT INTO pause (id, {PAUSE_COLUMNS}) VALUES (1, ?, ?, ?, ?, ?, ?)",
                        pause_values(ch.pause),
                    )
            elif isinstance(ch, PutReceipt):
                db.execute(
                    f"INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    receipt_values(ch.receipt),
                )
            elif isinstance(ch, PutIncident):
                i = ch.incident
                db.execute(
                    "INSERT INTO incidents (kind, at, ticket_id, machine_id, detail) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        i.kind,
                        i.at,
                        i.ticket_id,
                        i.machine_id,
                        detail_json(i),
                    ),
                )
            elif isinstance(ch, PruneHistory):
                oldest = (
                    f"SELECT ticket_id FROM tickets WHERE {ENDED} "
                    "ORDER BY ended_at ASC, seq ASC LIMIT ?"
                )
                db.execute(f"DELETE FROM receipts WHERE ticket_id IN ({oldest})", (ch.excess,))
                db.execute(f"DELETE FROM tickets WHERE ticket_id IN ({oldest})", (ch.excess,))
            elif isinstance(ch, PruneIncidents):
                db.execute(
                    "DELETE FROM incidents WHERE id IN "
                    "(SELECT id FROM incidents ORDER BY id ASC LIMIT ?)",
                    (ch.excess,),
                )
            elif isinstance(ch, PutMachineSeen):
                db.execute(SQLITE_SEEN_UPSERT, (ch.machine_id, ch.at))
            elif isinstance(ch, PruneMachinesSeen):
                db.execute(SQLITE_SEEN_PRUNE, (ch.before,))

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
        snap.live = [
            ticket_from_row(r, lane)
            for r in self._read(
                f"SELECT {TICKET_COLUMNS} FROM tickets WHERE state IN ('queued', 'held') "
                "ORDER BY seq"
            )
        ]
        meta = {r["key"]: r["value"] for r in self._read("SELECT key, value FROM meta")}
        snap.last_fence = int(meta.get("last_fence", "0"))
        snap.next_seq = int(meta.get("next_seq", "1"))
        snap.project_served = {
            r["project"]: r["last_fence"]
            for r in self._read("SELECT project, last_fence FROM projects")
        }
        rows = self._read(f"SELECT {PAUSE_COLUMNS} FROM pause")
        if rows:
            snap.pause = pause_from_row(rows[0])
        holds = self._read(
            f"SELECT ended_at - held_at AS d FROM tickets WHERE {ENDED} AND held_at IS NOT NULL "
            "ORDER BY ended_at DESC, seq DESC LIMIT ?",
            (ETA_HOLD_SAMPLE_SIZE,),
        )
        snap.recent_holds = [max(0.0, float(r["d"])) for r in reversed(holds)]
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
        seen = self._read(SQLITE_SEEN_LOAD, (seen_since(head.last_now),))
        snap.machines_seen = seen_from_rows(seen)
        return snap

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        rows = self._read(f"SELECT {TICKET_COLUMNS} FROM tickets WHERE ticket_id = ?", (ticket_id,))
        return ticket_from_row(rows[0], self.lane) if rows else None

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE receipt_id = ?", (receipt_id,)
        )
        return receipt_from_row(rows[0]) if rows else None

    def recent_receipts(self, limit: int) -> list[Receipt]:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (limit,),
        )
        return [receipt_from_row(r) for r in rows]

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE ticket_id = ? "
            "ORDER BY created_at, rowid",
            (ticket_id,),
        )
        return [receipt_from_row(r) for r in rows]

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        if project is None:
            rows = self._read(
                f"SELECT {TICKET_COLUMNS} FROM tickets WHERE {ENDED} "
                "ORDER BY ended_at DESC, seq DESC LIMIT ?",
                (limit,),
            )
        else:
            rows = self._read(
                f"SELECT {TICKET_COLUMNS} FROM tickets WHERE {ENDED} AND project = ? "
                "ORDER BY ended_at DESC, seq DESC LIMIT ?",
                (project, limit),
            )
        return [ticket_from_row(r, self.lane) for r in rows]

    def history_count(self) -> int:
        return int(self._read(f"SELECT count(*) AS n FROM tickets WHERE {ENDED}")[0]["n"])

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        rows = self._read(
            "SELECT id, kind, at, ticket_id, machine_id, detail FROM incidents "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [incident_from_row(r) for r in rows]

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
