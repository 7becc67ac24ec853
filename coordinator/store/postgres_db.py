"""The PostgreSQL database of every lane: connections (the session a lane store needs), the
numbered migrations in `pg_migrations/` and their runner, and the queries over every lane
(the alarm poller's `lanes_due`, `known_lanes`). DSNs appear in messages only without their
password (`redact_dsn`)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from typing import Protocol

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from coordinator.constants import DEFAULT_REPLICA_STALL_SECONDS, LOCK_WAIT_MARGIN_SECONDS
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


REASON_MAX_CHARS = 300


def libpq_reason(exc: BaseException, dsn: str | None = None) -> str:
    """Why libpq (or the server) refused, for messages and logs: its text on one line
    ('connection to server at "db", port 5432 failed: FATAL:  password authentication failed
    for user "lanes"', 'database "x" does not exist', 'Connection refused'), with the DSN's
    password masked should it ever appear, at most REASON_MAX_CHARS."""
    text = " ".join(str(exc).split()).removeprefix("connection failed: ")
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password") if dsn else None
    except psycopg.Error:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return text[:REASON_MAX_CHARS] or type(exc).__name__


APPLICATION_NAME = "lane-coordinator"  # every session but the LISTEN one
# server_version_num of the first PostgreSQL with `transaction_timeout` (17)
TRANSACTION_TIMEOUT_SINCE = 170000
KEEPALIVE_PROBES = 3  # TCP keepalive probes unanswered before a peer is taken for gone
# A server that cannot set a TCP option (a platform without it) refuses the SET: the session
# goes on without it (the transaction timeouts still bound a stall).
TCP_REFUSED = (
    psycopg.errors.InvalidParameterValue,
    psycopg.errors.FeatureNotSupported,
    psycopg.errors.CantChangeRuntimeParam,
)


@dataclasses.dataclass(frozen=True, slots=True)
class StallBudget:
    """Every coordinator session's timeouts, derived from `replica_stall_seconds` (a
    replica that stops responding inside a lane transaction blocks the lane on the others for
    at most that long: docs/protocol.md#replica-stall; the choices: docs/decisions.md, "A
    frozen replica never freezes a lane").

    - idle_in_transaction_session_timeout = the stall: the database ends the session of a
      replica that sits in a transaction without sending anything (frozen, cut off, wedged)
      and releases its lane lock; its late COMMIT then fails.
    - lock_timeout = the stall + LOCK_WAIT_MARGIN_SECONDS: a healthy replica waiting for a
      lane's lock is never refused before the database has freed it from a frozen holder,
      and its wait is bounded whatever holds the lock.
    - transaction_timeout (PostgreSQL 17 and later) = lock_timeout + the stall: the backstop
      for a transaction that is not idle, longer than any healthy one (its lock wait, then
      milliseconds of work).
    - TCP keepalives (idle = the stall, KEEPALIVE_PROBES probes in about the stall again) and
      tcp_user_timeout = the stall, on both ends: a session whose peer vanished (cut off, a
      half-open connection) dies on the server and in the replica instead of waiting for
      ever. `lock_timeout_ms` overrides the derived lock timeout (tests)."""

    seconds: float = DEFAULT_REPLICA_STALL_SECONDS
    lock_timeout_ms: int | None = None

    @property
    def stall_ms(self) -> int:
        return round(self.seconds * 1000)

    @property
    def lock_ms(self) -> int:
        if self.lock_timeout_ms is not None:
            return int(self.lock_timeout_ms)
        return round((self.seconds + LOCK_WAIT_MARGIN_SECONDS) * 1000)

    @property
    def transaction_ms(self) -> int:
        return self.lock_ms + self.stall_ms

    @property
    def keepalive_idle(self) -> int:
        return max(1, math.ceil(self.seconds))

    @property
    def keepalive_interval(self) -> int:
        return max(1, math.ceil(self.seconds / KEEPALIVE_PROBES))

    def conninfo(self, dsn: str) -> str:
        """`dsn` with libpq's keepalive and tcp_user_timeout parameters (the replica's end)
        added, except those the DSN sets itself. Raises psycopg.Error for a DSN libpq cannot
        read."""
        given = psycopg.conninfo.conninfo_to_dict(dsn)
        params = {
            "keepalives": 1,
            "keepalives_idle": self.keepalive_idle,
            "keepalives_interval": self.keepalive_interval,
            "keepalives_count": KEEPALIVE_PROBES,
            "tcp_user_timeout": self.stall_ms,
        }
        return psycopg.conninfo.make_conninfo(
            dsn, **{k: v for k, v in params.items() if k not in given}
        )

    def timeouts_sql(self, server_version: int) -> sql.Composed:
        """The session's transaction timeouts (one round trip); transaction_timeout only
        where the server has it (`server_version`: server_version_num)."""
        settings = [
            ("synchronous_commit", "on"),
            ("lock_timeout", f"{self.lock_ms}ms"),
            ("idle_in_transaction_session_timeout", f"{self.stall_ms}ms"),
        ]
        if server_version >= TRANSACTION_TIMEOUT_SINCE:
            settings.append(("transaction_timeout", f"{self.transaction_ms}ms"))
        return _sets(settings)

    def tcp_sql(self) -> sql.Composed:
        """The server's end of the TCP keepalives and tcp_user_timeout (ignored by the server
        on a Unix socket)."""
        return _sets(
            [
                ("tcp_keepalives_idle", str(self.keepalive_idle)),
                ("tcp_keepalives_interval", str(self.keepalive_interval)),
                ("tcp_keepalives_count", str(KEEPALIVE_PROBES)),
                ("tcp_user_timeout", f"{self.stall_ms}ms"),
            ]
        )


DEFAULT_STALL = StallBudget()


def _sets(settings: list[tuple[str, str]]) -> sql.Composed:
    return sql.SQL("; ").join(
        sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
        for name, value in settings
    )


def connect(
    dsn: str,
    *,
    stall: StallBudget = DEFAULT_STALL,
    lock_timeout_ms: int | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
) -> Conn:
    """A connection in autocommit mode (the store issues BEGIN itself), its session set for
    the store: synchronous_commit=on (checked: a commit is durable when COMMIT returns) and
    the timeouts and TCP keepalives of `stall` (`StallBudget`; `lock_timeout_ms` overrides
    its lock timeout: a `begin` waiting longer for another writer's lane lock fails as busy).
    Raises StoreError (the DSN's password never appears in it)."""
    if lock_timeout_ms is not None:
        stall = dataclasses.replace(stall, lock_timeout_ms=lock_timeout_ms)
    try:
        conn = psycopg.connect(
            stall.conninfo(dsn),
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=max(1, round(connect_timeout)),
            application_name=APPLICATION_NAME,
        )
    except psycopg.Error as exc:
        why = libpq_reason(exc, dsn)
        raise StoreError(
            f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {why}", reason=why
        ) from exc
    try:
        conn.execute(stall.timeouts_sql(conn.info.server_version))
        with contextlib.suppress(*TCP_REFUSED):
            conn.execute(stall.tcp_sql())
        row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is None or row["synchronous_commit"] != "on":
            raise StoreError("PostgreSQL session refused synchronous_commit=on")
    except BaseException as exc:
        conn.close()
        if isinstance(exc, psycopg.Error):
            why = libpq_reason(exc, dsn)
            raise StoreError(
                f"cannot set up a session at {redact_dsn(dsn)}: {why}", reason=why
            ) from exc
        raise
    return conn


class ConnectionSource(Protocol):
    """Where a lane store gets its session: `get` one for a transaction or a read, `put` it
    back afterwards (`broken=True`: its state is unknown, close it)."""

    def get(self) -> Conn: ...

    def idle(self) -> Conn | None: ...  # an idle session, or None: never connects (the loop)

    def put(self, conn: Conn, *, broken: bool = False) -> None: ...

    def close(self) -> None: ...


def _usable(conn: Conn) -> bool:
    return not conn.closed and not conn.broken


class ConnectionPool:
    """Sessions shared by every lane store of one process: idle ones are kept (at most
    `max_idle`), a lost one is dropped and a new one opened on the next `get`. It does not
    bound how many are open at once: the caller does (the lane registry lets at most
    `max_idle` lane transactions run at a time), so a `get` never waits for a `put`."""

    def __init__(
        self,
        dsn: str,
        max_idle: int,
        *,
        stall: StallBudget = DEFAULT_STALL,
        lock_timeout_ms: int | None = None,
    ) -> None:
        self._dsn = dsn
        self._max_idle = max_idle
        self._stall = stall
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

    def idle(self) -> Conn | None:
        while True:
            with self._mutex:
                if self._closed or not self._idle:
                    return None
                conn = self._idle.pop()
            if _usable(conn) and conn.info.transaction_status is TransactionStatus.IDLE:
                return conn
            self._close(conn)

    def get(self) -> Conn:
        while True:
            with self._mutex:
                if self._closed:
                    raise StoreError("the PostgreSQL connection pool is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = connect(self._dsn, stall=self._stall, lock_timeout_ms=self._lock_timeout_ms)
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

    def __init__(
        self, dsn: str, *, stall: StallBudget = DEFAULT_STALL, lock_timeout_ms: int | None = None
    ) -> None:
        self._dsn = dsn
        self._stall = stall
        self._lock_timeout_ms = lock_timeout_ms
        self._conn: Conn | None = None

    def idle(self) -> Conn | None:
        conn = self._conn
        if conn is None or not _usable(conn):
            return None
        self._conn = None
        return conn

    def get(self) -> Conn:
        conn, self._conn = self._conn, None
        if conn is not None and _usable(conn):
            return conn
        if conn is not None:
            _close_quietly(conn)
        return connect(self._dsn, stall=self._stall, lock_timeout_ms=self._lock_timeout_ms)

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
        why = libpq_reason(exc, dsn)
        raise StoreError(
            f"cannot migrate the database at {redact_dsn(dsn)}: {why}", reason=why
        ) from exc
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


# A coordinator session (of any replica) stuck inside a transaction for longer than the
# stall: idle in it, or in the middle of a pipeline (active, waiting for the client's next
# message). PostgreSQL's own idle_in_transaction_session_timeout misses two such cases: a
# pipeline whose client sent a Flush after its Sync (psycopg does, when the results were not
# all read yet: reading the Flush disarms the timer and nothing arms it again), and a client
# frozen between a pipeline's statements. The alarm poller of every replica ends them.
_END_STALLED = (
    "SELECT pid, pg_terminate_backend(pid) AS ended FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND application_name = %s AND xact_start IS NOT NULL "
    "AND (state LIKE 'idle in transaction%%' OR (state = 'active' AND wait_event = 'ClientRead')) "
    "AND state_change < now() - make_interval(secs => %s)"
)


def end_stalled_sessions(conn: Conn, stall_seconds: float) -> list[int]:
    """End every coordinator session stuck in a transaction for longer than `stall_seconds`
    (the database then releases its lane locks); returns their server process ids. A role
    that may not end another replica's sessions (replicas under different roles, without
    pg_signal_backend) raises psycopg.Error."""
    rows = conn.execute(_END_STALLED, (APPLICATION_NAME, stall_seconds)).fetchall()
    return [int(r["pid"]) for r in rows if r["ended"]]
