"""Every lane in one PostgreSQL database that any number of replicas serve.

A replica holds: a pool of sessions for lane transactions (`ConnectionPool`, at most
PG_MAX_TRANSACTIONS at once: the registry bounds them), one session for the queries over every
lane (readiness, the alarm poller, the lane list), and one LISTEN session of its own
(coordinator/store/pg_listen.py; never from the pool, never through a transaction pooler).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
import structlog

from coordinator.constants import (
    ALARM_POLL_BATCH,
    ALARM_POLL_SECONDS,
    DEFAULT_REPLICA_STALL_SECONDS,
    PG_MAX_TRANSACTIONS,
    READY_PROBE_TIMEOUT_SECONDS,
)
from coordinator.engine.store import LaneStore
from coordinator.errors import StoreError
from coordinator.logs import RateLimitedLog
from coordinator.protocol.constants import ACTOR_POSTGRES
from coordinator.store import postgres_db as db
from coordinator.store.pg_listen import listen_forever
from coordinator.store.postgres import PostgresLaneStore

T = TypeVar("T")
MIN_STALLED_SECONDS = 0.5  # a session in a transaction this long is never taken for stalled
log = structlog.get_logger("coordinator.store")


class PostgresStorage:
    kind = ACTOR_POSTGRES
    shared = True
    max_transactions: int | None = PG_MAX_TRANSACTIONS

    def __init__(self, dsn: str, *, stall_seconds: float = DEFAULT_REPLICA_STALL_SECONDS) -> None:
        """`stall_seconds`: the config's `replica_stall_seconds`; every session's timeouts
        and keepalives derive from it (`postgres_db.StallBudget`)."""
        self.dsn = dsn
        self.stall = db.StallBudget(stall_seconds)
        self.pool = db.ConnectionPool(dsn, PG_MAX_TRANSACTIONS, stall=self.stall)
        self._query: db.Conn | None = None
        self._mutex = threading.Lock()
        self._unreachable = RateLimitedLog("store.unreachable")
        self._cannot_end = RateLimitedLog("store.cannot_end_stalled")

    def __repr__(self) -> str:
        return f"PostgresStorage({db.redact_dsn(self.dsn)!r})"

    def start(self) -> None:
        """Refuses a database that is unreachable, not migrated, behind, edited or newer."""
        self._call(db.schema_status)

    def stop(self) -> None:
        self.pool.close()
        with self._mutex:
            conn, self._query = self._query, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()

    def make_store(self, lane: str) -> LaneStore:
        return PostgresLaneStore(self.dsn, lane, source=self.pool)

    def stored_lanes(self) -> list[str]:
        return self._call(db.known_lanes)

    def has_lane(self, lane: str) -> bool:
        return self._call(lambda conn: db.has_lane(conn, lane))

    def problem(self) -> str | None:
        """None while the database answers; the public /readyz reply names no host or user
        (the log line does, without the password)."""
        try:
            self._call(db.ping, connect_timeout=READY_PROBE_TIMEOUT_SECONDS)
        except StoreError as exc:
            self._unreachable(reason=exc.message)
            return "the database is unreachable"
        return None

    def where(self, lane: str) -> dict[str, str]:
        return {}

    def peek_deadline(self, lane: str) -> tuple[bool, float | None]:
        return True, None  # replicas: the alarm poller reads every lane's deadline

    @property
    def _stalled_after(self) -> float:
        """How long a session may sit in a transaction before this poll ends it: the stall,
        less one poll interval, so that the lane is free within the stall."""
        return max(MIN_STALLED_SECONDS, self.stall.seconds - ALARM_POLL_SECONDS)

    def lanes_due(self, now: float) -> list[str]:
        """The lanes whose deadline has come (the alarm poller, once a second). First, in the
        same call, the sessions of any replica stuck in a transaction for the stall (less this
        poll's interval) are ended (`postgres_db.end_stalled_sessions`): their lanes are free
        again."""

        def poll(conn: db.Conn) -> list[str]:
            try:
                ended = db.end_stalled_sessions(conn, self._stalled_after)
            except psycopg.errors.InsufficientPrivilege:
                self._cannot_end(hint="grant pg_signal_backend, or run replicas as one role")
            else:
                if ended:
                    log.warning(
                        "store.stalled_session_ended", pids=ended, seconds=self.stall.seconds
                    )
            return db.lanes_due(conn, now, ALARM_POLL_BATCH)

        return self._call(poll)

    async def listen(
        self, on_lane: Callable[[str], None], on_connected: Callable[[], None]
    ) -> None:
        await listen_forever(
            self.dsn, on_lane, on_connected, ours=self.pool.sent_by_us, stall=self.stall
        )

    @contextlib.contextmanager
    def _session(self, connect_timeout: float) -> Iterator[db.Conn]:
        conn = self._query
        if conn is None or conn.closed or conn.broken:
            conn = db.connect(self.dsn, stall=self.stall, connect_timeout=connect_timeout)
            self._query = conn
        yield conn

    def _call(
        self, fn: Callable[[db.Conn], T], *, connect_timeout: float = db.CONNECT_TIMEOUT_SECONDS
    ) -> T:
        """`fn` on the query session (one caller at a time); a lost session is dropped and
        the next call opens a new one. psycopg errors become StoreError (no DSN in them)."""
        with self._mutex:
            try:
                with self._session(connect_timeout) as conn:
                    return fn(conn)
            except psycopg.Error as exc:
                lost, self._query = self._query, None
                if lost is not None:
                    with contextlib.suppress(psycopg.Error, OSError):
                        lost.close()
                why = db.libpq_reason(exc, self.dsn)
                raise StoreError(
                    f"the PostgreSQL database is unreachable: {why}", reason=why
                ) from exc
