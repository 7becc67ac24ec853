"""The PostgreSQL database of every lane: connections (the session a lane store needs), the
numbered migrations in `pg_migrations/` and their runner, and the queries over every lane
(the alarm poller's `lanes_due`, `known_lanes`). DSNs appear in messages only without their
password (`redact_dsn`)."""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from coordinator.constants import STORE_BUSY_TIMEOUT_MS
from coordinator.errors import StoreError
from coordinator.store.migrate import edited, sha256, shipped

Conn = psycopg.Connection[DictRow]

MIGRATION_LOCK = 0x6C616E65  # pg_advisory_xact_lock key of `migrate` ("lane")
CONNECT_TIMEOUT_SECONDS = 10
# The NOTIFY channel: a committed change that may wake a parked await or changed a pause
# names its lane here; every replica LISTENs on its own connection (coordinator/store/pg_listen.py).
NOTIFY_CHANNEL = "lane_coordinator"


# ---------------------------------------------------------------- connections and DSNs


def redact_dsn(dsn: str) -> str:
    """The DSN without its password (for messages and logs)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable dsn>"
    if "password" in params:
        params["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **params)


def connect(
    dsn: str,
    *,
    lock_timeout_ms: int = STORE_BUSY_TIMEOUT_MS,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
) -> Conn:
    """A connection in autocommit mode (the store issues BEGIN itself), its session set for
    the store: synchronous_commit=on (checked: a commit is durable when COMMIT returns) and
    lock_timeout (a `begin` waiting longer for another writer's lane lock fails as busy).
    Raises StoreError (the DSN's password never appears in it)."""
    try:
        conn = psycopg.connect(
            dsn,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=max(1, round(connect_timeout)),
            application_name="lane-coordinator",
        )
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to PostgreSQL at {redact_dsn(dsn)}") from exc
    try:
        conn.execute("SET synchronous_commit = on")
        conn.execute(
            sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(lock_timeout_ms)}ms"))
        )
        row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is None or row["synchronous_commit"] != "on":
            raise StoreError("PostgreSQL session refused synchronous_commit=on")
    except BaseException as exc:
        conn.close()
        if isinstance(exc, psycopg.Error):
            raise StoreError(f"cannot set up a session at {redact_dsn(dsn)}") from exc
        raise
    return conn


class ConnectionSource(Protocol):
    """Where a lane store gets its session: `get` one for a transaction or a read, `put` it
    back afterwards (`broken=True`: its state is unknown, close it)."""

    def get(self) -> Conn: ...

    def put(self, conn: Conn, *, broken: bool = False) -> None: ...

    def close(self) -> None: ...


def _usable(conn: Conn) -> bool:
    return not conn.closed and not conn.broken


class ConnectionPool:
    """Sessions shared by every lane store of one process: idle ones are kept (at most
    `max_idle`), a lost one is dropped and a new one opened on the next `get`. It does not
    bound how many are open at once: the caller does (the lane registry lets at most
    `max_idle` lane transactions run at a time), so a `get` never waits for a `put`."""

    def __init__(self, dsn: str, max_idle: int, *, lock_timeout_ms: int) -> None:
        self._dsn = dsn
        self._max_idle = max_idle
        self._lock_timeout_ms = lock_timeout_ms
        self._idle: list[Conn] = []
        self._mutex = threading.Lock()
        self._closed = False
        # The server-side process of every session open here: a notification one of them
        # sent is this process's own commit (its actor woke its awaits already).
        self._backends: dict[int, Conn] = {}

    def sent_by_us(self, backend_pid: int) -> bool:
        """`backend_pid` (a notification's sender) is a live session of this pool."""
        conn = self._backends.get(backend_pid)
        return conn is not None and _usable(conn)

    def get(self) -> Conn:
        while True:
            with self._mutex:
                if self._closed:
                    raise StoreError("the PostgreSQL connection pool is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = connect(self._dsn, lock_timeout_ms=self._lock_timeout_ms)
                with self._mutex:
                    self._backends[conn.info.backend_pid] = conn
                return conn
            if _usable(conn) and conn.info.transaction_status is TransactionStatus.IDLE:
                return conn
            self._close(conn)

    def _close(self, conn: Conn) -> None:
        with self._mutex:  # a handful of sessions; a lost one no longer knows its pid
            for pid in [p for p, c in self._backends.items() if c is conn]:
                del self._backends[pid]
        _close_quietly(conn)

    def put(self, conn: Conn, *, broken: bool = False) -> None:
        if not broken and _usable(conn) and conn.info.transaction_status is TransactionStatus.IDLE:
            with self._mutex:
                if not self._closed and len(self._idle) < self._max_idle:
                    self._idle.append(conn)
                    return
        lost = not _usable(conn)
        self._close(conn)
        if lost:
            # A lost session (the server restarted, the network dropped): every idle one
            # shares its fate and would fail its next transaction; open new ones instead.
            with self._mutex:
                idle, self._idle = self._idle, []
            for other in idle:
                self._close(other)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self._close(conn)


class SingleConnection:
    """One session kept for one store (tests, `import`): opened on first use, reopened after
    it was lost."""

    def __init__(self, dsn: str, *, lock_timeout_ms: int = STORE_BUSY_TIMEOUT_MS) -> None:
        self._dsn = dsn
        self._lock_timeout_ms = lock_timeout_ms
        self._conn: Conn | None = None

    def get(self) -> Conn:
        conn, self._conn = self._conn, None
        if conn is not None and _usable(conn):
            return conn
        if conn is not None:
            _close_quietly(conn)
        return connect(self._dsn, lock_timeout_ms=self._lock_timeout_ms)

    def put(self, conn: Conn, *, broken: bool = False) -> None:
        if broken or not _usable(conn) or self._conn is not None:
            _close_quietly(conn)
        else:
            self._conn = conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


def _close_quietly(conn: Conn) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        conn.close()


def ping(conn: Conn) -> None:
    """One round trip (readiness); raises psycopg.Error when the server does not answer."""
    conn.execute("SELECT 1").fetchone()


# ---------------------------------------------------------------- migrations


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every shipped PostgreSQL migration, in order."""
    return shipped("pg_migrations")


_CREATE_SCHEMA_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, sha256 TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)


def _check_applied(
    applied: dict[int, tuple[str, str]], shipped: list[tuple[int, str, str]]
) -> None:
    """Refuse an edited migration, or a database migrated by a newer coordinator."""
    known = {v for v, _, _ in shipped}
    newer = sorted(v for v in applied if v not in known)
    if newer:
        name = applied[newer[-1]][0]
        raise StoreError(
            f"the database schema is newer than this coordinator (migration {name} is unknown "
            "here); run a coordinator at least as new as the one that migrated it"
        )
    for version, name, text in shipped:
        if version in applied and applied[version][1] != sha256(text):
            raise StoreError(edited(name))


def _applied(conn: Conn) -> dict[int, tuple[str, str]]:
    rows = conn.execute("SELECT version, name, sha256 FROM schema_migrations").fetchall()
    return {int(r["version"]): (r["name"], r["sha256"]) for r in rows}


def migrate(dsn: str, *, upto: int | None = None) -> list[str]:
    """Apply every shipped migration the database lacks, each in the same transaction as its
    schema_migrations row, all under one advisory lock (replicas starting together take
    turns; the second finds nothing to do). Refuses an edited or unknown-newer migration
    before applying anything. Returns the names applied (empty: already current)."""
    shipped = [m for m in migrations() if upto is None or m[0] <= upto]
    conn = connect(dsn)
    done: list[str] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(_CREATE_SCHEMA_MIGRATIONS)
            applied = _applied(conn)
            _check_applied(applied, migrations())
            for version, name, text in shipped:
                if version in applied:
                    continue
                conn.execute(text.encode())  # several statements: no parameters
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                    (version, name, sha256(text)),
                )
                done.append(name)
    except psycopg.Error as exc:
        raise StoreError(f"cannot migrate the database at {redact_dsn(dsn)}") from exc
    finally:
        conn.close()
    return done


def schema_status(conn: Conn) -> int:
    """The database's schema version, after checking it is exactly what this coordinator
    ships (StoreError otherwise: not migrated yet, behind, edited, or newer)."""
    shipped = migrations()
    try:
        exists = conn.execute("SELECT to_regclass('schema_migrations') AS t").fetchone()
        applied = _applied(conn) if exists is not None and exists["t"] is not None else {}
    except psycopg.Error as exc:
        raise StoreError("cannot read the database's schema version") from exc
    _check_applied(applied, shipped)
    missing = [name for v, name, _ in shipped if v not in applied]
    if missing:
        raise StoreError(
            f"the database lacks migration {missing[0]}: run `lane-coordinator migrate` first"
        )
    return max(applied, default=0)


# ---------------------------------------------------------------- queries over every lane


def lanes_due(conn: Conn, now: float, limit: int | None = None) -> list[str]:
    """Lanes whose next deadline (lease expiry, waiter deadline, pause end) has come, the
    earliest first (at most `limit`): what the alarm poller wakes."""
    rows = conn.execute(
        "SELECT lane FROM lanes WHERE next_deadline <= %s ORDER BY next_deadline, lane LIMIT %s",
        (now, limit),
    ).fetchall()
    return [r["lane"] for r in rows]


def has_lane(conn: Conn, lane: str) -> bool:
    return conn.execute("SELECT 1 FROM lanes WHERE lane = %s", (lane,)).fetchone() is not None


def known_lanes(conn: Conn) -> list[str]:
    """Every lane the database holds (one that finished at least one transaction), sorted."""
    return [r["lane"] for r in conn.execute("SELECT lane FROM lanes ORDER BY lane").fetchall()]
