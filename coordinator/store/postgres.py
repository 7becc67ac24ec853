"""PostgreSQL lane store: every lane in one database, `lane` in every key.

A `coordinator.engine.store.LockingStore`, so that several replicas can serve the same
lanes from one database:

- `begin_load` is `BEGIN` and `SELECT version, last_now FROM lanes WHERE lane = $1 FOR UPDATE`
  (the lane's row is created first when missing, race-safe: `INSERT ... ON CONFLICT DO
  NOTHING`, then the locking SELECT). A second writer of the same lane, in this process or in
  another replica, waits in its `begin_load` until the first one commits or rolls back, then
  reads the bumped version (its cached core is stale: the lane is read under the lock).
- `apply` writes each change (upserts, prunes by exact excess, counters, pause, project served)
  in one pipelined round trip; `commit` writes them, version + 1, next_deadline and
  last_now = GREATEST(last_now, $now), then COMMITs (synchronous_commit=on, checked on connect).
- Reads run inside or outside a transaction; `load` outside one is a REPEATABLE READ snapshot.

One connection per store (opened lazily, opened again after a lost connection). The schema
comes from numbered migrations in `pg_migrations/`, each recorded with its sha256 in
`schema_migrations`; `migrate(dsn)` applies them (under an advisory lock, so replicas starting
together take turns), `open()` only checks that the database is current. Messages and logs
never carry the DSN's password (`redact_dsn`). The database side (connections, migrations,
queries over every lane) is in postgres_db.py, the writes in postgres_writes.py; the read
queries shared with the SQLite store are in reads.py, the columns and the row mapping in
rows.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.pq.abc import PGresult
from psycopg.rows import DictRow

from coordinator import failpoints
from coordinator.constants import ETA_ERROR_GRANTS, ETA_HOLD_WINDOW, EVIDENCE_RECENT_SECONDS
from coordinator.engine.model import Change, IncidentKind, LaneSnapshot
from coordinator.engine.store import LaneHead, LoopLockingStore, Writes
from coordinator.errors import StoreError
from coordinator.store.pg_batch import Batch, rows, value
from coordinator.store.postgres_db import (
    NOTIFY_CHANNEL,
    Conn,
    ConnectionPool,
    ConnectionSource,
    SingleConnection,
    connect,
    known_lanes,
    lanes_due,
    libpq_reason,
    migrate,
    migrations,
    redact_dsn,
    schema_status,
)
from coordinator.store.postgres_writes import split_counters, write_changes
from coordinator.store.reads import POSTGRES_READS, LaneReads
from coordinator.store.rows import (
    ENDED,
    PAUSE_COLUMNS,
    eta_errors_from_rows,
    holds_from_rows,
    pause_from_row,
    projects_from_rows,
    seen_from_rows,
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


# ---------------------------------------------------------------- the statements

_LOCK_HEAD = "SELECT version, last_now, next_deadline FROM lanes WHERE lane = %s FOR UPDATE"
# version + 1 (and the lane's deadline and clock); with no lanes row, 1 / 0 fails the
# transaction, so the COMMIT pipelined after it cannot keep a group without its version.
# The group's lane counters (PutCounters: the last fence and next seq) ride on the same
# UPDATE: one statement and one row version fewer per acquire.
_BUMP_VERSION = (
    "WITH u AS (UPDATE lanes SET version = version + 1, next_deadline = %s, "
    "last_now = GREATEST(last_now, %s), last_fence = COALESCE(%s, last_fence), "
    "next_seq = COALESCE(%s, next_seq) WHERE lane = %s RETURNING version) "
    "SELECT (SELECT version FROM u) AS version, 1 / (SELECT count(*) FROM u)::int AS one"
)
# The lanes row, the pause, the counts and the last collision in one statement (a lane
# without its lanes row yet reads NULLs: the snapshot's defaults).
_LOAD_HEAD = (
    "SELECT l.version, l.last_now, l.last_fence, l.next_seq, "
    f"{', '.join('p.' + c.strip() for c in PAUSE_COLUMNS.split(','))}, "
    f"(SELECT count(*) FROM tickets WHERE lane = k.lane AND {ENDED}) AS history_count, "
    "(SELECT count(*) FROM incidents WHERE lane = k.lane) AS incident_count, "
    "(SELECT detail FROM incidents WHERE lane = k.lane AND kind = %s "
    "ORDER BY id DESC LIMIT 1) AS collision "
    "FROM (SELECT %s::text AS lane) k LEFT JOIN lanes l ON l.lane = k.lane "
    "LEFT JOIN pauses p ON p.lane = k.lane"
)


def _head_of(row: DictRow | None) -> LaneHead | None:
    if row is None:
        return None
    return LaneHead(int(row["version"]), row["last_now"], row["next_deadline"])


def _head_of_result(result: PGresult | None) -> LaneHead:
    """_LOCK_HEAD's row, read raw (coordinator/store/pg_batch.py)."""
    version, last_now, deadline = (value(result, c) for c in range(3))
    assert version is not None
    return LaneHead(
        int(version),
        None if last_now is None else float(last_now),
        None if deadline is None else float(deadline),
    )


# ---------------------------------------------------------------- the store


class PostgresLaneStore(LaneReads, LoopLockingStore):
    """All SQL of one lane in the shared database. Calls are synchronous; the caller
    serializes them per store (several stores, in one process or in several replicas, may
    serve the same lane: `begin_load` makes them take turns). A transaction holds one session
    from `source` from `begin_load` to `commit`/`abort`; a read outside one borrows a session."""

    _reads = POSTGRES_READS

    def driver_reason(self, exc: Exception) -> str | None:
        return libpq_reason(exc, self._dsn)  # libpq's text, the password masked

    def __init__(
        self,
        dsn: str,
        lane: str,
        *,
        lock_timeout_ms: int | None = None,
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

    def resume(self) -> None:
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

    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        """BEGIN and the lock, in one round trip (pipelined); with `load`
        (the caller expects another writer moved the lane on), the lane's whole state is read
        in the same round trip, under the lock: the snapshot `load` would return next."""
        self._check_open()
        if self._txn is not None:
            raise StoreError(f"lane store for {self.lane}: a transaction is already open")
        with (
            self.rolled_back_on_error(psycopg.Error, f"lane store for {self.lane} is unavailable"),
            self.rolled_back_on_error(
                psycopg.errors.LockNotAvailable, f"lane store for {self.lane} is busy"
            ),
        ):
            db, row, snap = self._begin_session(load)
            self._txn = db
            if row is None:  # a new lane: create its row (another writer may race us)
                db.execute(
                    "INSERT INTO lanes (lane) VALUES (%s) ON CONFLICT (lane) DO NOTHING",
                    (self.lane,),
                )
                row = _head_of(self._lock_head(db))
                snap = None  # read before the row existed: the caller loads if it needs
            if row is None:
                raise StoreError(f"lane store for {self.lane} has no lanes row")
            if failpoints.ENABLED:  # tests only: freeze here, the lane's row locked
                failpoints.hit("pg.lane_locked", lane=self.lane)
            return row, snap

    def _begin_session(self, load: bool) -> tuple[Conn, LaneHead | None, LaneSnapshot | None]:
        """A session with BEGIN sent and the lane's row locked (and read, with `load` the
        lane too), in one round trip. A session lost while idle (PostgreSQL restarted) fails
        before anything of the lane was done in it: it is dropped (and the idle sessions with
        it) and all of it is sent once more on a new session. Any other failure leaves the
        session as `self._txn` (the caller aborts it)."""
        for attempt in (1, 2):
            db = self._source.get()
            try:
                if load:
                    with db.pipeline():  # its end sends everything, then reads every result
                        db.execute("BEGIN")
                        head = db.execute(_LOCK_HEAD, (self.lane,))
                        reads = self._queue_load(db)
                    row, snap = _head_of(head.fetchone()), self._snapshot(reads)
                else:  # the hot path: two statements in one write, read raw
                    batch = Batch(db)
                    batch.execute("BEGIN")
                    at = batch.execute(_LOCK_HEAD, (self.lane,))
                    result = batch.run()[at]
                    row, snap = (_head_of_result(result) if rows(result) else None), None
            except psycopg.Error:
                if attempt == 1 and (db.closed or db.broken):
                    self._source.put(db, broken=True)
                    continue
                self._txn = db
                raise
            except BaseException:
                self._txn = db
                raise
            return db, row, snap
        raise AssertionError("unreachable")

    def _lock_head(self, db: Conn) -> DictRow | None:
        return db.execute(_LOCK_HEAD, (self.lane,)).fetchone()

    def apply(self, changes: Sequence[Change]) -> None:
        db = self._txn
        if db is None:
            raise StoreError(f"lane store for {self.lane}: apply outside a transaction")
        try:
            batch = Batch(db)
            write_changes(batch, self.lane, changes)
            batch.run()
        except psycopg.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc

    def commit(self, writes: Writes) -> int:
        """One round trip: the changes, version + 1, the NOTIFY and COMMIT pipelined (with
        `notify`, every replica LISTENing hears the lane's name once the transaction commits:
        PostgreSQL sends notifications at COMMIT, never before). A lost lanes row fails the
        version's statement (a division by zero), so the COMMIT after it rolls back instead:
        nothing of the group is kept."""
        db = self._txn
        if db is None:
            raise StoreError(f"lane store for {self.lane}: commit outside a transaction")
        with (
            self.rolled_back_on_error(
                psycopg.Error, f"cannot commit to lane store for {self.lane}"
            ),
            self.rolled_back_on_error(
                psycopg.errors.DivisionByZero, f"lane store for {self.lane} lost its lanes row"
            ),
        ):
            batch, at = self._commit_batch(db, writes)
            version = value(batch.run()[at], 0)
        return self._committed(db, version)

    def _commit_batch(self, db: Conn, writes: Writes) -> tuple[Batch, int]:
        """Every statement of the commit, for one write; the version's index."""
        changes, counters = split_counters(writes.changes)
        fence, seq = (counters.last_fence, counters.next_seq) if counters else (None, None)
        batch = Batch(db)
        write_changes(batch, self.lane, changes)
        at = batch.execute(
            _BUMP_VERSION, (writes.next_deadline, writes.last_now, fence, seq, self.lane)
        )
        if writes.notify:
            batch.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, self.lane))
        batch.execute("COMMIT")
        return batch, at

    def _committed(self, db: Conn, version: str | None) -> int:
        self._txn = None
        self._source.put(db)
        assert version is not None
        return int(version)

    # ---------------------------------------------------------------- on the event loop

    async def begin_here(self) -> LaneHead | None:
        """BEGIN and the lock in one write, awaited on the loop, on an idle session of the
        pool. None without one, when it turns out lost (the store thread's `begin_load` opens
        another), or for a lane without its row yet (`begin_load` creates it). A failure
        drops the session (the server rolls its transaction back)."""
        self._check_open()
        if self._txn is not None:
            raise StoreError(f"lane store for {self.lane}: a transaction is already open")
        db = self._source.idle()
        if db is None:
            return None
        self._txn = db
        batch = Batch(db)
        batch.execute("BEGIN")
        at = batch.execute(_LOCK_HEAD, (self.lane,))
        try:
            result = (await batch.run_here())[at]
            if not rows(result):  # a new lane: `begin_load` creates its row
                end = Batch(db)
                end.execute("ROLLBACK")
                await end.run_here()
                self._txn = None
                self._source.put(db)
                return None
            head = _head_of_result(result)
        except psycopg.Error as exc:
            self._txn = None
            self._source.put(db, broken=True)
            if isinstance(exc, psycopg.OperationalError) and db.closed:
                return None  # lost while idle: nothing of the lane was done in it
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise StoreError(
                    f"lane store for {self.lane} is busy", reason=self.driver_reason(exc)
                ) from exc
            raise StoreError(
                f"lane store for {self.lane} is unavailable", reason=self.driver_reason(exc)
            ) from exc
        except BaseException:
            self._txn = None
            self._source.put(db, broken=True)
            raise
        if failpoints.ENABLED:  # tests only: freeze here, the lane's row locked
            failpoints.hit("pg.lane_locked", lane=self.lane)
        return head

    async def commit_here(self, writes: Writes) -> int:
        """`commit`'s one write, awaited on the loop. On a failure the transaction is left
        open (or its session closed): the caller ends it with `abort`."""
        db = self._txn
        if db is None:
            raise StoreError(f"lane store for {self.lane}: commit outside a transaction")
        try:
            batch, at = self._commit_batch(db, writes)
            version = value((await batch.run_here())[at], 0)
        except psycopg.errors.DivisionByZero as exc:
            raise StoreError(
                f"lane store for {self.lane} lost its lanes row", reason=self.driver_reason(exc)
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot commit to lane store for {self.lane}", reason=self.driver_reason(exc)
            ) from exc
        return self._committed(db, version)

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
            with db.pipeline():  # BEGIN and the reads in one round trip
                db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                reads = self._queue_load(db)
            return self._snapshot(reads)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read lane store for {self.lane}") from exc
        finally:
            self.abort()

    def _load(self) -> LaneSnapshot:
        db = self._txn
        assert db is not None
        try:
            with db.pipeline():
                reads = self._queue_load(db)
            return self._snapshot(reads)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read lane store for {self.lane}") from exc

    def _queue_load(self, db: Conn) -> list[psycopg.Cursor[DictRow]]:
        """Send every read of the lane's state (inside a pipeline: one round trip)."""
        lane, q = self.lane, self._reads
        return [
            db.execute(sql, args)
            for sql, args in (
                (q.live, (lane,)),
                (_LOAD_HEAD, (IncidentKind.DUPLICATE_COLLISION.value, lane)),
                (q.projects, (lane,)),
                (q.holds, (lane, ETA_HOLD_WINDOW)),
                (q.seen, (lane, lane, EVIDENCE_RECENT_SECONDS)),
                (q.in_flight, (lane,)),
                (q.eta_errors, (lane, ETA_ERROR_GRANTS)),
            )
        ]

    def _snapshot(self, reads: list[psycopg.Cursor[DictRow]]) -> LaneSnapshot:
        """The lane's state from the results of `_queue_load`."""
        lane = self.lane
        live, head, projects, holds, seen, in_flight, eta_errors = (c.fetchall() for c in reads)
        snap = LaneSnapshot()
        snap.live = [ticket_from_row(r, lane) for r in live]
        snap.in_flight = [ticket_from_row(r, lane) for r in in_flight]
        h = head[0]
        if h["version"] is not None:
            snap.last_fence, snap.next_seq = int(h["last_fence"]), int(h["next_seq"])
            snap.version, snap.last_now = int(h["version"]), h["last_now"]
        if h["reason_code"] is not None:
            snap.pause = pause_from_row(h)
        snap.history_count = int(h["history_count"])
        snap.incident_count = int(h["incident_count"])
        if h["collision"] is not None:
            snap.last_collision = json.loads(h["collision"])
        snap.project_served = projects_from_rows(projects)
        snap.recent_holds = holds_from_rows(holds)
        snap.recent_eta_errors = eta_errors_from_rows(eta_errors)
        snap.machines_seen = seen_from_rows(seen)
        return snap
