"""The PostgreSQL database side (coordinator/store/postgres_db.py): DSN redaction, the
session a store needs, the connection pool and the single connection, the migrations and the
schema check, the queries over every lane — on a fresh database of the session's cluster."""

from __future__ import annotations

import time

import psycopg
import pytest

from coordinator.errors import StoreError
from coordinator.store import postgres_db as db
from tests.store_pg.kit import write
from tests.unit.kit import LANE


def test_redact_dsn_hides_the_password_only() -> None:
    out = db.redact_dsn("postgresql://alice:s3cret@db.example:5433/lanes")
    assert "s3cret" not in out and "alice" in out and "db.example" in out and "***" in out
    assert "***" not in db.redact_dsn("postgresql://alice@h/d")
    assert db.redact_dsn("host=h password") == "<unparsable dsn>"


def test_a_session_commits_synchronously_with_a_lock_timeout(pg_dsn: str) -> None:
    conn = db.connect(pg_dsn, lock_timeout_ms=1234)
    try:
        assert conn.autocommit is True
        row = conn.execute("SHOW lock_timeout").fetchone()
        assert row is not None and row["lock_timeout"] == "1234ms"
        db.ping(conn)
    finally:
        conn.close()


def test_every_session_is_set_from_the_stall_budget(pg_dsn: str) -> None:
    """idle_in_transaction_session_timeout = the stall, lock_timeout = the stall + 1 s,
    TCP keepalives and tcp_user_timeout on both ends; transaction_timeout where the server
    has it."""
    stall = db.StallBudget(3.0)
    conn = db.connect(pg_dsn, stall=stall)
    try:

        def show(name: str) -> str:
            row = conn.execute(f"SHOW {name}").fetchone()
            assert row is not None
            return str(row[name])

        assert show("idle_in_transaction_session_timeout") == "3s"
        assert show("lock_timeout") == "4s"
        assert (show("tcp_keepalives_idle"), show("tcp_keepalives_count")) == ("3", "3")
        assert show("tcp_user_timeout") == "3000"
        if conn.info.server_version >= db.TRANSACTION_TIMEOUT_SINCE:
            assert show("transaction_timeout") == "7s"
        params = psycopg.conninfo.conninfo_to_dict(conn.info.dsn)
        assert (params["keepalives"], params["keepalives_idle"]) == ("1", "3")
        assert params["tcp_user_timeout"] == "3000"
    finally:
        conn.close()
    # a DSN's own keepalive setting is kept
    assert "keepalives_idle=42" in stall.conninfo(pg_dsn + "?keepalives_idle=42")


def test_a_session_idle_in_a_transaction_longer_than_the_stall_is_ended(pg_dsn: str) -> None:
    """By the database's own timer, and (a pipeline that left it unarmed, a client frozen
    mid-pipeline) by `end_stalled_sessions` from another session."""
    stall = db.StallBudget(1.0)
    idle = db.connect(pg_dsn, stall=stall)
    idle.execute("BEGIN")
    unarmed = db.connect(pg_dsn, stall=stall)
    unarmed.execute("SET idle_in_transaction_session_timeout = 0")  # as after a stray Flush
    unarmed.execute("BEGIN")
    peer = db.connect(pg_dsn, stall=stall)
    try:
        time.sleep(1.5)
        with pytest.raises(psycopg.Error):
            idle.execute("SELECT 1")
        assert db.end_stalled_sessions(peer, 1.0) == [unarmed.info.backend_pid]
        with pytest.raises(psycopg.Error):
            unarmed.execute("SELECT 1")
        assert db.end_stalled_sessions(peer, 1.0) == []
    finally:
        for c in (idle, unarmed, peer):
            c.close()


def test_a_refused_connection_is_a_store_error_without_the_password(refused_port: int) -> None:
    dsn = f"postgresql://u:s3cret@127.0.0.1:{refused_port}/d"
    with pytest.raises(StoreError) as info:
        db.connect(dsn, connect_timeout=1)
    assert "s3cret" not in str(info.value) and "cannot connect" in str(info.value)


def test_the_pool_reuses_an_idle_session_and_keeps_at_most_max_idle(pg_dsn: str) -> None:
    pool = db.ConnectionPool(pg_dsn, 1, lock_timeout_ms=1000)
    try:
        a, b = pool.get(), pool.get()
        a_pid, b_pid = a.info.backend_pid, b.info.backend_pid
        assert a is not b
        assert pool.sent_by_us(a_pid) and pool.sent_by_us(b_pid)
        assert not pool.sent_by_us(-1)
        pool.put(a)
        pool.put(b)  # one idle session already kept: this one is closed
        assert b.closed and not pool.sent_by_us(b_pid) and pool.sent_by_us(a_pid)
        assert pool.get() is a
        pool.put(a)
    finally:
        pool.close()
    assert a.closed
    with pytest.raises(StoreError, match="pool is closed"):
        pool.get()


def test_the_pool_never_reuses_a_session_left_in_a_transaction_or_broken(pg_dsn: str) -> None:
    pool = db.ConnectionPool(pg_dsn, 4, lock_timeout_ms=1000)
    try:
        a = pool.get()
        a.execute("BEGIN")
        pool.put(a)
        assert a.closed
        b = pool.get()
        pool.put(b, broken=True)
        assert b.closed
        c = pool.get()
        assert c is not a and c is not b and not c.closed
        pool.put(c)
    finally:
        pool.close()


def test_a_single_connection_is_kept_and_reopened_after_it_was_lost(pg_dsn: str) -> None:
    single = db.SingleConnection(pg_dsn)
    try:
        a = single.get()
        single.put(a)
        assert single.get() is a
        a.close()  # lost
        single.put(a)
        b = single.get()
        assert b is not a and not b.closed
        single.put(b)
    finally:
        single.close()
    assert b.closed


def test_schema_status_refuses_an_unmigrated_database_then_reads_the_version(
    pg_dsn: str,
) -> None:
    conn = db.connect(pg_dsn)
    try:
        with pytest.raises(StoreError, match="lane-coordinator migrate"):
            db.schema_status(conn)
        assert db.migrate(pg_dsn, upto=1) == [db.migrations()[0][1]]
        with pytest.raises(StoreError, match="lacks migration"):
            db.schema_status(conn)  # behind
        rest = db.migrate(pg_dsn)
        assert rest == [name for _, name, _ in db.migrations()[1:]]
        assert db.schema_status(conn) == db.migrations()[-1][0]
        assert db.migrate(pg_dsn) == []
    finally:
        conn.close()


def test_queries_over_every_lane(pg_dsn: str) -> None:
    from coordinator.store.postgres import PostgresLaneStore

    db.migrate(pg_dsn)
    conn = db.connect(pg_dsn)
    stores = [PostgresLaneStore(pg_dsn, lane) for lane in ("b:main", LANE)]
    try:
        assert db.known_lanes(conn) == [] and not db.has_lane(conn, LANE)
        for i, s in enumerate(stores):
            s.open()
            s.begin()
            s.finish(100.0 + i, 1.0)
        assert db.known_lanes(conn) == ["b:main", LANE]
        assert db.has_lane(conn, LANE)
        assert db.lanes_due(conn, 100.5) == ["b:main"]
        assert db.lanes_due(conn, 200.0) == ["b:main", LANE]
        assert db.lanes_due(conn, 200.0, limit=1) == ["b:main"]
        write(stores[0], [], last_now=2.0)  # a finish without a deadline: never due
        assert db.lanes_due(conn, 200.0) == [LANE]
    finally:
        for s in stores:
            s.close()
        conn.close()


def test_ping_of_a_closed_session_raises(pg_dsn: str) -> None:
    """Readiness relies on it: `ping` answers only when the server does."""
    conn = db.connect(pg_dsn)
    conn.close()
    with pytest.raises(psycopg.Error):
        db.ping(conn)
