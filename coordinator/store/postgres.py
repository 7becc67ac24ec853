"""PostgreSQL lane store: every lane in one database, `lane` in every key.

Implements `coordinator.engine.store.LaneStore` exactly as `SqliteLaneStore` does, so that
several replicas can serve the same lanes from one database:

- `begin` is `BEGIN` and `SELECT version, last_now FROM lanes WHERE lane = $1 FOR UPDATE`
  (the lane's row is created first when missing, race-safe: `INSERT ... ON CONFLICT DO
  NOTHING`, then the locking SELECT). A second writer of the same lane, in this process or in
  another replica, waits in its `begin` until the first one commits or rolls back, then reads
  the bumped version (its cached core is stale: it calls `load`).
- `apply` writes each change (upserts, prunes by exact excess, counters, pause, project served)
  in one pipelined round trip; `finish` writes version + 1, next_deadline and
  last_now = GREATEST(last_now, $now), then COMMITs (synchronous_commit=on, checked on connect).
- Reads run inside or outside a transaction; `load` outside one is a REPEATABLE READ snapshot.

One connection per store (opened lazily, opened again after a lost connection). The schema
comes from numbered migrations in `pg_migrations/`, each recorded with its sha256 in
`schema_migrations`; `migrate(dsn)` applies them (under an advisory lock, so replicas starting
together take turns), `open()` only checks that the database is current. Messages and logs
never carry the DSN's password (`redact_dsn`). The database side (connections, migrations,
queries over every lane) is in postgres_db.py, the writes in postgres_writes.py, the columns
and the row mapping shared with the SQLite store in rows.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from coordinator.constants import ETA_HOLD_SAMPLE_SIZE, STORE_BUSY_TIMEOUT_MS
from coordinator.engine.model import (
    Change,
    Incident,
    IncidentKind,
    LaneSnapshot,
    Receipt,
    Ticket,
)
from coordinator.engine.store import LaneHead
from coordinator.errors import StoreError
from coordinator.store.postgres_db import (
    NOTIFY_CHANNEL,
    Conn,
    ConnectionPool,
    ConnectionSource,
    SingleConnection,
    connect,
    known_lanes,
    lanes_due,
    migrate,
    migrations,
    redact_dsn,
    schema_status,
)
from coordinator.store.postgres_writes import write_changes
from coordinator.store.rows import (
    ENDED,
    PAUSE_COLUMNS,
    PG_SEEN_LOAD,
    RECEIPT_COLUMNS,
    TICKET_COLUMNS,
    incident_from_row,
    pause_from_row,
    receipt_from_row,
    seen_from_rows,
    seen_since,
    ticket_from_row,
)

__all__ = [
    "Conn",
    "ConnectionPool",
    "ConnectionSource",
    "PostgresLaneStore",
    "SingleConnection",
    "connect",
    "known_lanes",
    "lanes_due",
    "migrate",
    "migrations",
    "redact_dsn",
    "schema_status",
]


# ---------------------------------------------------------------- the store


class PostgresLaneStore:
    """All SQL of one lane in the shared database. Calls are synchronous; the caller
    serializes them per store (several stores, in one process or in several replicas, may
    serve the same lane: `begin` makes them take turns). A transaction holds one session from
    `source` from `begin` to `finish`/`abort`; a read outside one borrows a session."""

    def __init__(
        self,
        dsn: str,
        lane: str,
        *,
        lock_timeout_ms: int = STORE_BUSY_TIMEOUT_MS,
        source: ConnectionSource | None = None,
    ) -> None:
        self._dsn = dsn
        self.lane = lane
        self._own_source = source is None
        self._source: ConnectionSource = source or SingleConnection(
            dsn, lock_timeout_ms=lock_timeout_ms
        )
        self._txn: Conn | None = None  # the session of the open transaction
        self._opened = False

    def __repr__(self) -> str:
        return f"PostgresLaneStore({redact_dsn(self._dsn)!r}, {self.lane!r})"

    # ---------------------------------------------------------------- lifecycle

    @property
    def is_open(self) -> bool:
        return self._opened

    def open(self) -> None:
        """Check the schema is current (refuses an unmigrated, edited or newer one, and
        stays closed)."""
        self._opened = True
        try:
            self.schema_version()
        except BaseException:
            self.close()
            raise

    @property
    def connected(self) -> bool:
        return False  # sessions belong to the replica's pool, not to a lane

    def suspend(self) -> None:
        return None

    def close(self) -> None:
        self.abort()
        self._opened = False
        if self._own_source:
            self._source.close()

    def _check_open(self) -> None:
        if not self._opened:
            raise StoreError("lane store is closed")

    @contextlib.contextmanager
    def _session(self) -> Iterator[Conn]:
        """The open transaction's session, or one borrowed for a single read."""
        self._check_open()
        if self._txn is not None:
            yield self._txn
            return
        conn = self._source.get()
        broken = True
        try:
            yield conn
            broken = False
        finally:
            self._source.put(conn, broken=broken)

    def _in_transaction(self) -> bool:
        return self._txn is not None

    def schema_version(self) -> int:
        with self._session() as db:
            return schema_status(db)

    # ---------------------------------------------------------------- the lane transaction

    def begin(self) -> LaneHead:
        self._check_open()
        if self._txn is not None:
            raise StoreError(f"lane store for {self.lane}: a transaction is already open")
        self._txn = db = self._begin_session()
        try:
            row = self._lock_head(db)
            if row is None:  # a new lane: create its row (another writer may race us)
                db.execute(
                    "INSERT INTO lanes (lane) VALUES (%s) ON CONFLICT (lane) DO NOTHING",
                    (self.lane,),
                )
                row = self._lock_head(db)
            if row is None:
                raise StoreError(f"lane store for {self.lane} has no lanes row")
            return LaneHead(int(row["version"]), row["last_now"], row["next_deadline"])
        except psycopg.errors.LockNotAvailable as exc:
            self.abort()
            raise StoreError(f"lane store for {self.lane} is busy") from exc
        except psycopg.Error as exc:
            self.abort()
            raise StoreError(f"lane store for {self.lane} is unavailable") from exc
        except BaseException:
            self.abort()
            raise

    def _begin_session(self) -> Conn:
        """A session with BEGIN sent. A session lost while idle (PostgreSQL restarted) fails
        at BEGIN, before anything of the lane was sent in it: it is dropped (and the idle
        sessions with it) and BEGIN is sent once more on a new session."""
        for attempt in (1, 2):
            db = self._source.get()
            try:
                db.execute("BEGIN")
            except psycopg.OperationalError as exc:
                self._source.put(db, broken=True)
                if attempt == 2:
                    raise StoreError(f"lane store for {self.lane} is unavailable") from exc
                continue
            return db
        raise AssertionError("unreachable")

    def _lock_head(self, db: Conn) -> DictRow | None:
        return db.execute(
            "SELECT version, last_now, next_deadline FROM lanes WHERE lane = %s FOR UPDATE",
            (self.lane,),
        ).fetchone()

    def apply(self, changes: Sequence[Change]) -> None:
        db = self._txn
        if db is None:
            raise StoreError(f"lane store for {self.lane}: apply outside a transaction")
        try:
            with db.pipeline():
                write_changes(db, self.lane, changes)
        except psycopg.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc

    def finish(self, next_deadline: float | None, last_now: float, notify: bool = False) -> int:
        """COMMIT; with `notify`, every replica LISTENing hears the lane's name once the
        transaction commits (PostgreSQL sends notifications at COMMIT, never before)."""
        db = self._txn
        if db is None:
            raise StoreError(f"lane store for {self.lane}: finish outside a transaction")
        try:
            row = db.execute(
                "UPDATE lanes SET version = version + 1, next_deadline = %s, "
                "last_now = GREATEST(last_now, %s) WHERE lane = %s RETURNING version",
                (next_deadline, last_now, self.lane),
            ).fetchone()
            if row is None:
                raise StoreError(f"lane store for {self.lane} lost its lanes row")
            if notify:
                db.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, self.lane))
            db.execute("COMMIT")
        except psycopg.Error as exc:
            self.abort()
            raise StoreError(f"cannot commit to lane store for {self.lane}") from exc
        except BaseException:
            self.abort()
            raise
        self._txn = None
        self._source.put(db)
        return int(row["version"])

    def abort(self) -> None:
        db, self._txn = self._txn, None
        if db is None:
            return
        broken = True
        if not db.closed and db.info.transaction_status in (
            TransactionStatus.INTRANS,
            TransactionStatus.INERROR,
            TransactionStatus.IDLE,
        ):
            try:
                if db.info.transaction_status is not TransactionStatus.IDLE:
                    db.execute("ROLLBACK")
                broken = False
            except psycopg.Error:
                pass  # state unknown: the session is closed, the next call gets a new one
        self._source.put(db, broken=broken)

    # ---------------------------------------------------------------- reads

    def _read(self, query: str, args: Sequence[Any] = ()) -> list[DictRow]:
        try:
            with self._session() as db:
                return db.execute(query, args).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read lane store for {self.lane}") from exc

    def load(self) -> LaneSnapshot:
        if self._txn is not None:
            return self._load()
        self._check_open()
        db = self._source.get()
        self._txn = db  # one snapshot: every table from the same commit
        try:
            db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except psycopg.Error as exc:
            self.abort()
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
                f"SELECT {TICKET_COLUMNS} FROM tickets "
                "WHERE lane = %s AND state IN ('queued', 'held') ORDER BY seq",
                (lane,),
            )
        ]
        head = self._read(
            "SELECT version, last_now, last_fence, next_seq FROM lanes WHERE lane = %s", (lane,)
        )
        if head:
            h = head[0]
            snap.last_fence, snap.next_seq = int(h["last_fence"]), int(h["next_seq"])
            snap.version, snap.last_now = int(h["version"]), h["last_now"]
        snap.project_served = {
            r["project"]: int(r["last_fence"])
            for r in self._read("SELECT project, last_fence FROM projects WHERE lane = %s", (lane,))
        }
        rows = self._read(
            f"SELECT {PAUSE_COLUMNS} FROM pauses WHERE lane = %s",
            (lane,),
        )
        if rows:
            snap.pause = pause_from_row(rows[0])
        holds = self._read(
            f"SELECT ended_at - held_at AS d FROM tickets WHERE lane = %s AND {ENDED} "
            "AND held_at IS NOT NULL ORDER BY ended_at DESC, seq DESC LIMIT %s",
            (lane, ETA_HOLD_SAMPLE_SIZE),
        )
        snap.recent_holds = [max(0.0, float(r["d"])) for r in reversed(holds)]
        snap.history_count = self.history_count()
        snap.incident_count = int(
            self._read("SELECT count(*) AS n FROM incidents WHERE lane = %s", (lane,))[0]["n"]
        )
        coll = self._read(
            "SELECT detail FROM incidents WHERE lane = %s AND kind = %s ORDER BY id DESC LIMIT 1",
            (lane, IncidentKind.DUPLICATE_COLLISION.value),
        )
        if coll:
            snap.last_collision = json.loads(coll[0]["detail"])
        seen = self._read(PG_SEEN_LOAD, (lane, seen_since(snap.last_now)))
        snap.machines_seen = seen_from_rows(seen)
        return snap

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        rows = self._read(
            f"SELECT {TICKET_COLUMNS} FROM tickets WHERE lane = %s AND ticket_id = %s",
            (self.lane, ticket_id),
        )
        return ticket_from_row(rows[0], self.lane) if rows else None

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE lane = %s AND receipt_id = %s",
            (self.lane, receipt_id),
        )
        return receipt_from_row(rows[0]) if rows else None

    def recent_receipts(self, limit: int) -> list[Receipt]:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE lane = %s "
            "ORDER BY created_at DESC, id DESC LIMIT %s",
            (self.lane, limit),
        )
        return [receipt_from_row(r) for r in rows]

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        rows = self._read(
            f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE lane = %s AND ticket_id = %s "
            "ORDER BY created_at, id",
            (self.lane, ticket_id),
        )
        return [receipt_from_row(r) for r in rows]

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        if project is None:
            rows = self._read(
                f"SELECT {TICKET_COLUMNS} FROM tickets WHERE lane = %s AND {ENDED} "
                "ORDER BY ended_at DESC, seq DESC LIMIT %s",
                (self.lane, limit),
            )
        else:
            rows = self._read(
                f"SELECT {TICKET_COLUMNS} FROM tickets WHERE lane = %s AND {ENDED} "
                "AND project = %s ORDER BY ended_at DESC, seq DESC LIMIT %s",
                (self.lane, project, limit),
            )
        return [ticket_from_row(r, self.lane) for r in rows]

    def history_count(self) -> int:
        rows = self._read(
            f"SELECT count(*) AS n FROM tickets WHERE lane = %s AND {ENDED}", (self.lane,)
        )
        return int(rows[0]["n"])

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        rows = self._read(
            "SELECT id, kind, at, ticket_id, machine_id, detail FROM incidents WHERE lane = %s "
            "ORDER BY id DESC LIMIT %s",
            (self.lane, limit),
        )
        return [incident_from_row(r) for r in rows]
