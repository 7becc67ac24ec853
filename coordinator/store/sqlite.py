"""SQLite lane store: one file per lane, WAL, synchronous=FULL, numbered migrations.

Implements `coordinator.engine.store.LaneStore`: `begin` is BEGIN IMMEDIATE (serializes
writers across processes) and reads the `lane_head` row; `finish` writes version + 1,
next_deadline and last_now there and COMMITs. Hosts never see the connection."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Sequence
from importlib import resources
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
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    Receipt,
    Ticket,
    TicketState,
)
from coordinator.engine.store import LaneHead
from coordinator.errors import StoreError

_TICKET_COLUMNS = (
    "ticket_id, seq, state, machine_id, claim_id, project, scene, prompt_hash, enqueued_at, "
    "lease_seconds, last_seen_at, held_at, lease_expires_at, heartbeat_at, fence, outcome, "
    "late_outcome, provider_job_id, note, ended_at"
)
_TICKET_UPSERT = (
    f"INSERT INTO tickets ({_TICKET_COLUMNS}) VALUES "
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (ticket_id) DO UPDATE SET state = excluded.state, "
    "last_seen_at = excluded.last_seen_at, held_at = excluded.held_at, "
    "lease_seconds = excluded.lease_seconds, "
    "lease_expires_at = excluded.lease_expires_at, heartbeat_at = excluded.heartbeat_at, "
    "fence = excluded.fence, outcome = excluded.outcome, late_outcome = excluded.late_outcome, "
    "provider_job_id = excluded.provider_job_id, note = excluded.note, "
    "ended_at = excluded.ended_at"
)
_ENDED = "state IN ('done', 'expired')"
_RECEIPT_COLUMNS = (
    "receipt_id, ticket_id, phase, machine_id, payload, content_hash, content_hash_verified, "
    "created_at"
)


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


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every shipped migration, in order."""
    out = []
    folder = resources.files("coordinator.store") / "migrations"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            out.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return out


def _ticket(row: sqlite3.Row, lane: str) -> Ticket:
    return Ticket(
        ticket_id=row["ticket_id"],
        lane=lane,
        state=TicketState(row["state"]),
        machine_id=row["machine_id"],
        claim_id=row["claim_id"],
        project=row["project"],
        scene=row["scene"],
        prompt_hash=row["prompt_hash"],
        seq=row["seq"],
        enqueued_at=row["enqueued_at"],
        lease_seconds=row["lease_seconds"],
        last_seen_at=row["last_seen_at"],
        held_at=row["held_at"],
        lease_expires_at=row["lease_expires_at"],
        heartbeat_at=row["heartbeat_at"],
        fence=row["fence"],
        outcome=row["outcome"],
        late_outcome=row["late_outcome"],
        provider_job_id=row["provider_job_id"],
        note=row["note"],
        ended_at=row["ended_at"],
    )


def _receipt(row: sqlite3.Row) -> Receipt:
    v = row["content_hash_verified"]
    return Receipt(
        receipt_id=row["receipt_id"],
        ticket_id=row["ticket_id"],
        phase=row["phase"],
        machine_id=row["machine_id"],
        payload_json=row["payload"],
        content_hash=row["content_hash"],
        content_hash_verified=None if v is None else bool(v),
        created_at=row["created_at"],
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
                    raise StoreError(f"cannot open lane store for {self.lane}") from exc
                if attempt == OPEN_ATTEMPTS - 1:
                    raise StoreError(f"lane store for {self.lane} stayed locked") from exc
                time.sleep(OPEN_RETRY_SECONDS)
            except sqlite3.Error as exc:
                self.close()
                raise StoreError(f"cannot open lane store for {self.lane}") from exc
            except StoreError:  # e.g. an edited migration: refuse, and leave the store closed
                self.close()
                raise

    def _open_once(self) -> None:
        try:
            make_private_file(self.path)  # SQLite gives the -wal and -shm files the same mode
        except OSError as exc:
            raise StoreError(f"cannot open lane store for {self.lane}") from exc
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
        db = self._conn
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, sha256 TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            applied = {
                r["version"]: (r["name"], r["sha256"])
                for r in db.execute("SELECT version, name, sha256 FROM schema_migrations")
            }
            for version, name, sql in migrations():
                if self._max_migration is not None and version > self._max_migration:
                    break
                digest = hashlib.sha256(sql.encode()).hexdigest()
                if version in applied:
                    if applied[version][1] != digest:
                        raise StoreError(
                            f"migration {name} was edited after it was applied; "
                            "add a new numbered migration instead"
                        )
                    continue
                for statement in _split_sql(sql):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, sha256, applied_at) "
                    "VALUES (?, ?, ?, datetime('now'))",
                    (version, name, digest),
                )
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('lane', ?) ON CONFLICT (key) DO NOTHING",
                (self.lane,),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

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
        rows = self._read("SELECT version, last_now FROM lane_head WHERE id = 1")
        if not rows:
            raise StoreError(f"lane store for {self.lane} has no lane_head row")
        return LaneHead(int(rows[0]["version"]), rows[0]["last_now"])

    def apply(self, changes: Sequence[Change]) -> None:
        if not self._conn.in_transaction:
            raise StoreError(f"lane store for {self.lane}: apply outside a transaction")
        try:
            self._write(changes)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc

    def finish(self, next_deadline: float | None, last_now: float) -> int:
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
        for ch in _coalesce(changes):
            if isinstance(ch, PutTicket):
                t = ch.ticket
                db.execute(
                    _TICKET_UPSERT,
                    (
                        t.ticket_id,
                        t.seq,
                        t.state.value,
                        t.machine_id,
                        t.claim_id,
                        t.project,
                        t.scene,
                        t.prompt_hash,
                        t.enqueued_at,
                        t.lease_seconds,
                        t.last_seen_at,
                        t.held_at,
                        t.lease_expires_at,
                        t.heartbeat_at,
                        t.fence,
                        t.outcome,
                        t.late_outcome,
                        t.provider_job_id,
                        t.note,
                        t.ended_at,
                    ),
                )
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
                    p = ch.pause
                    db.execute(
                        "INSERT INTO pause (id, reason_code, started_at, until, machine_id, "
                        "claim_id, ticket_id) VALUES (1, ?, ?, ?, ?, ?, ?)",
                        (
                            p.reason_code,
                            p.started_at,
                            p.until,
                            p.machine_id,
                            p.claim_id,
                            p.ticket_id,
                        ),
                    )
            elif isinstance(ch, PutReceipt):
                r = ch.receipt
                db.execute(
                    f"INSERT INTO receipts ({_RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        r.receipt_id,
                        r.ticket_id,
                        r.phase,
                        r.machine_id,
                        r.payload_json,
                        r.content_hash,
                        None if r.content_hash_verified is None else int(r.content_hash_verified),
                        r.created_at,
                    ),
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
                        json.dumps(i.detail, separators=(",", ":"), sort_keys=True),
                    ),
                )
            elif isinstance(ch, PruneHistory):
                oldest = (
                    f"SELECT ticket_id FROM tickets WHERE {_ENDED} "
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
            _ticket(r, lane)
            for r in self._read(
                f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE state IN ('queued', 'held') "
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
        rows = self._read(
            "SELECT reason_code, started_at, until, machine_id, claim_id, ticket_id FROM pause"
        )
        if rows:
            r = rows[0]
            snap.pause = Pause(
                r["reason_code"],
                r["started_at"],
                r["until"],
                r["machine_id"],
                r["claim_id"],
                r["ticket_id"],
            )
        holds = self._read(
            f"SELECT ended_at - held_at AS d FROM tickets WHERE {_ENDED} AND held_at IS NOT NULL "
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
        return snap

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        rows = self._read(
            f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE ticket_id = ?", (ticket_id,)
        )
        return _ticket(rows[0], self.lane) if rows else None

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        rows = self._read(
            f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE receipt_id = ?", (receipt_id,)
        )
        return _receipt(rows[0]) if rows else None

    def recent_receipts(self, limit: int) -> list[Receipt]:
        rows = self._read(
            f"SELECT {_RECEIPT_COLUMNS} FROM receipts ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (limit,),
        )
        return [_receipt(r) for r in rows]

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        rows = self._read(
            f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE ticket_id = ? "
            "ORDER BY created_at, rowid",
            (ticket_id,),
        )
        return [_receipt(r) for r in rows]

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        if project is None:
            rows = self._read(
                f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE {_ENDED} "
                "ORDER BY ended_at DESC, seq DESC LIMIT ?",
                (limit,),
            )
        else:
            rows = self._read(
                f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE {_ENDED} AND project = ? "
                "ORDER BY ended_at DESC, seq DESC LIMIT ?",
                (project, limit),
            )
        return [_ticket(r, self.lane) for r in rows]

    def history_count(self) -> int:
        return int(self._read(f"SELECT count(*) AS n FROM tickets WHERE {_ENDED}")[0]["n"])

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        rows = self._read(
            "SELECT id, kind, at, ticket_id, machine_id, detail FROM incidents "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        out = []
        for r in rows:
            try:
                detail = json.loads(r["detail"])
            except ValueError:
                detail = {}
            out.append(
                (r["id"], Incident(r["kind"], r["at"], r["ticket_id"], r["machine_id"], detail))
            )
        return out

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


def _coalesce(changes: Sequence[Change]) -> list[Change]:
    """Drop ticket/counter writes superseded later in the same batch (fewer statements)."""
    last_ticket: dict[str, int] = {}
    last_counters = -1
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket):
            last_ticket[ch.ticket.ticket_id] = i
        elif isinstance(ch, PutCounters):
            last_counters = i
    out: list[Change] = []
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket) and last_ticket[ch.ticket.ticket_id] != i:
            continue
        if isinstance(ch, PutCounters) and i != last_counters:
            continue
        out.append(ch)
    return out


def _split_sql(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
