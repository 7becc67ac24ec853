"""Machine presence in the shared PostgreSQL database: the `presence` table (pg migration 0002),
one row per machine and lane, written through by every replica (see coordinator/store/presence.py
for the contract and coordinator/http/presence.py for the throttle)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import psycopg

from coordinator.errors import StoreError
from coordinator.store.postgres_db import DEFAULT_STALL, Conn, StallBudget, connect, redact_dsn
from coordinator.store.presence import Sighting, recent_sql

_UPSERT = (
    "INSERT INTO presence (machine_id, lane, last_seen_at) VALUES (%s, %s, %s) "
    "ON CONFLICT (machine_id, lane) DO UPDATE SET "
    "last_seen_at = GREATEST(presence.last_seen_at, excluded.last_seen_at)"
)
# Rows another replica is writing right now are skipped (SKIP LOCKED), never waited for: the
# prune can neither deadlock with a replica's upserts nor delete a row it just refreshed.
_PRUNE = (
    "DELETE FROM presence WHERE (machine_id, lane) IN (SELECT machine_id, lane FROM presence "
    "WHERE last_seen_at < %s FOR UPDATE SKIP LOCKED)"
)


class PostgresPresenceStore:
    """Presence in the shared database, over one session of its own (opened on first use,
    again after it was lost). The schema comes from `lane-coordinator migrate`."""

    def __init__(self, dsn: str, *, stall: StallBudget = DEFAULT_STALL) -> None:
        self._dsn = dsn
        self._stall = stall
        self._db: Conn | None = None
        self._lock = threading.Lock()
        self.writes = 0  # rows written (tests: the throttle)

    def __repr__(self) -> str:
        return f"PostgresPresenceStore({redact_dsn(self._dsn)!r})"

    def _conn(self) -> Conn:
        db = self._db
        if db is None or db.closed or db.broken:
            self._drop()
            db = self._db = connect(self._dsn, stall=self._stall)
        return db

    def _drop(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                db.close()

    def record(self, sightings: Sequence[Sighting], prune_before: float) -> None:
        """The upserts in one transaction, in key order (two replicas' batches never wait on
        each other in a cycle); the prune after it."""
        rows = sorted((s.machine_id, s.lane, s.last_seen_at) for s in sightings)
        with self._lock:
            try:
                db = self._conn()
                with db.transaction(), db.cursor() as cur:
                    cur.executemany(_UPSERT, rows)
                db.execute(_PRUNE, (prune_before,))
            except psycopg.Error as exc:
                self._drop()
                raise StoreError("cannot write machine presence to PostgreSQL") from exc
            self.writes += len(rows)

    def recent(self, since: float, limit: int) -> list[Sighting]:
        with self._lock:
            try:
                rows = self._conn().execute(recent_sql("%s"), (since, limit, since)).fetchall()
            except psycopg.Error as exc:
                self._drop()
                raise StoreError("cannot read machine presence from PostgreSQL") from exc
        return [
            Sighting(str(r["machine_id"]), str(r["lane"]), float(r["last_seen_at"])) for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._drop()
