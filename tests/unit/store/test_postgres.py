"""PostgresLaneStore's own behaviour: several replicas on one lane (the lane row's lock),
many lanes in one database, the session, migrations, and the queries over every lane."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import dict_row

from coordinator.engine.model import Incident, PutCounters, PutIncident, PutTicket, TicketState
from coordinator.errors import StoreError
from coordinator.store import postgres as pg
from coordinator.store import postgres_db
from coordinator.store.postgres import PostgresLaneStore, lanes_due, migrate, redact_dsn
from coordinator.store.rows import TICKET_COLUMNS, ticket_values
from tests.store_pg.kit import AnyStore, Stores, ticket, write
from tests.unit.kit import LANE, T0

OTHER = "duo:main"


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[pg.Conn]:
    """A plain autocommit connection to the test's database (the stores never share theirs)."""
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


# ---------------------------------------------------------------- replicas on one lane


def test_second_replica_begin_waits_for_the_first_to_finish(pg_stores: Stores) -> None:
    a, b = pg_stores.new(), pg_stores.new()
    assert a.begin().version == 0
    a.apply([PutTicket(ticket("t_1", 1)), PutCounters(0, 2)])
    got: dict[str, object] = {}
    b_began = threading.Event()

    def replica_b() -> None:
        try:
            head = b.begin()  # blocks on the lane row's lock
            b_began.set()
            got["head"] = head
            got["snap"] = b.load()
            b.apply([PutCounters(0, 3)])
            got["version"] = b.finish(None, T0 + 1)
        except BaseException as exc:  # reported to the test thread
            got["error"] = exc
            b_began.set()

    th = threading.Thread(target=replica_b, daemon=True)
    th.start()
    assert not b_began.wait(0.5), "b's begin did not wait for a's lock"
    assert a.finish(T0 + 60, T0) == 1
    assert b_began.wait(10), "b's begin never returned after a committed"
    th.join(10)
    assert "error" not in got, got.get("error")
    head = got["head"]
    assert (head.version, head.last_now) == (1, T0)  # type: ignore[attr-defined]
    snap = got["snap"]
    assert [t.ticket_id for t in snap.live] == ["t_1"]  # type: ignore[attr-defined]
    assert got["version"] == 2
    final = a.load()
    assert (final.version, final.next_seq, final.last_now) == (2, 3, T0 + 1)


def test_a_rolled_back_first_writer_lets_the_second_in_at_the_same_version(
    pg_stores: Stores,
) -> None:
    a, b = pg_stores.new(), pg_stores.new()
    write(a, [PutCounters(0, 2)])
    a.begin()
    a.apply([PutCounters(0, 9)])
    heads: list[int] = []
    th = threading.Thread(target=lambda: heads.append(b.begin().version), daemon=True)
    th.start()
    time.sleep(0.2)
    assert heads == []
    a.abort()
    th.join(10)
    assert heads == [1]
    assert b.load().next_seq == 2  # nothing of a's aborted transaction
    b.abort()


def test_begin_gives_up_as_busy_after_the_lock_timeout(pg_dsn: str, pg_stores: Stores) -> None:
    a = pg_stores.new()
    impatient = PostgresLaneStore(pg_dsn, LANE, lock_timeout_ms=100)
    impatient.open()
    try:
        a.begin()
        with pytest.raises(StoreError) as exc:
            impatient.begin()
        assert "busy" in exc.value.message and LANE in exc.value.message
        a.abort()
        assert impatient.begin().version == 0  # usable again
        impatient.abort()
    finally:
        impatient.close()


def test_many_replicas_creating_a_new_lane_at_once_take_turns(pg_stores: Stores) -> None:
    """Each replica's first begin on a brand-new lane inserts its row (ON CONFLICT DO NOTHING)
    and locks it: no duplicate-key error, every increment kept, versions 1..n."""
    replicas = [pg_stores.new("new:lane") for _ in range(6)]
    barrier = threading.Barrier(len(replicas))
    versions: list[int] = []
    errors: list[BaseException] = []

    def run(s: AnyStore) -> None:
        try:
            barrier.wait(10)
            for _ in range(5):
                s.begin()
                n = s.load().next_seq
                s.apply([PutCounters(0, n + 1)])
                versions.append(s.finish(None, T0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in replicas]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert errors == []
    assert sorted(versions) == list(range(1, 31))
    snap = replicas[0].load()
    assert (snap.version, snap.next_seq) == (30, 31)  # no lost update


def test_last_now_never_goes_back_across_replicas(pg_stores: Stores) -> None:
    a, b = pg_stores.new(), pg_stores.new()
    write(a, [PutCounters(0, 2)], last_now=T0 + 10)
    write(b, [PutCounters(0, 3)], last_now=T0 + 4)  # b's clock is behind
    assert b.begin().last_now == T0 + 10
    b.abort()
    write(b, [PutCounters(0, 4)], last_now=T0 + 11)
    assert a.load().last_now == T0 + 11


# ---------------------------------------------------------------- many lanes, one database


def test_lanes_are_isolated_in_one_database(pg_stores: Stores) -> None:
    a, o = pg_stores.new(LANE), pg_stores.new(OTHER)
    write(a, [PutTicket(ticket("t_1", 1)), PutCounters(0, 2), PutIncident(_incident())])
    same_id = ticket("t_1", 1, lane=OTHER, project="other")  # ticket ids are per lane
    write(o, [PutTicket(same_id), PutCounters(4, 9), PutIncident(_incident())])
    write(o, [PutIncident(_incident())])
    assert a.get_ticket("t_1") == ticket("t_1", 1)
    assert o.get_ticket("t_1") == same_id
    sa, so = a.load(), o.load()
    assert (sa.version, sa.next_seq, sa.incident_count) == (1, 2, 1)
    assert (so.version, so.next_seq, so.last_fence, so.incident_count) == (2, 9, 4, 2)
    assert [n for n, _ in a.incidents(10)] == [1]  # incident ids count per lane
    assert [n for n, _ in o.incidents(10)] == [2, 1]
    # One lane's lock does not hold up another lane.
    a.begin()
    o.begin()
    o.abort()
    a.abort()


def test_lanes_due_and_known_lanes(pg_stores: Stores, conn: pg.Conn) -> None:
    a, o, c = pg_stores.new(LANE), pg_stores.new(OTHER), pg_stores.new("idle:main")
    a.begin()
    a.finish(T0 + 60, T0)
    o.begin()
    o.finish(T0 + 30, T0)
    c.begin()
    c.finish(None, T0)  # nothing pending
    pg_stores.new("never:main").begin()  # begun, never finished: the row is rolled back
    assert lanes_due(conn, T0 + 29) == []
    assert lanes_due(conn, T0 + 30) == [OTHER]
    assert lanes_due(conn, T0 + 90) == [OTHER, LANE]  # earliest first
    assert pg.known_lanes(conn) == sorted([LANE, OTHER, "idle:main"])


# ---------------------------------------------------------------- the session


def test_session_commits_synchronously(pg_store: PostgresLaneStore) -> None:
    pg_store.begin()
    db = pg_store._txn
    assert db is not None
    row = db.execute("SHOW synchronous_commit").fetchone()
    assert row is not None and row["synchronous_commit"] == "on"
    pg_store.abort()


def test_a_lost_connection_is_replaced(pg_store: PostgresLaneStore, conn: pg.Conn) -> None:
    def backend_pid() -> int:
        pg_store.begin()
        assert pg_store._txn is not None
        pid = pg_store._txn.info.backend_pid
        pg_store.abort()
        return pid

    write(pg_store, [PutCounters(0, 2)])
    pid = backend_pid()
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.1)
    # the dead session fails at BEGIN, before anything was sent in it: replaced at once
    assert write(pg_store, [PutCounters(0, 3)]) == 2
    assert backend_pid() != pid


def test_the_password_never_shows(pg_dsn: str) -> None:
    dsn = pg_dsn.replace("postgres@", "postgres:s3cret-pw@").replace("127.0.0.1:", "127.0.0.1:1")
    assert "s3cret-pw" not in redact_dsn(dsn) and "***" in redact_dsn(dsn)
    store = PostgresLaneStore("postgresql://u:s3cret-pw@127.0.0.1:1/x?connect_timeout=1", LANE)
    assert "s3cret-pw" not in repr(store)
    with pytest.raises(StoreError) as exc:
        store.open()
    assert "s3cret-pw" not in exc.value.message and "127.0.0.1" in exc.value.message
    assert "s3cret-pw" not in redact_dsn("host=h password=s3cret-pw dbname=x")


# ---------------------------------------------------------------- migrations


def test_migrations_recorded_once_and_rerun_is_a_no_op(pg_dsn: str, conn: pg.Conn) -> None:
    shipped = pg.migrations()
    assert [v for v, _, _ in shipped] == list(range(1, len(shipped) + 1))
    assert migrate(pg_dsn) == [name for _, name, _ in shipped]
    rows = conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
    assert [(r["version"], r["name"]) for r in rows] == [(v, n) for v, n, _ in shipped]
    for r, (_, _, text) in zip(rows, shipped, strict=True):
        assert r["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert r["applied_at"] is not None
    assert migrate(pg_dsn) == []  # nothing twice
    assert conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall() == rows
    store = PostgresLaneStore(pg_dsn, LANE)
    store.open()
    assert store.schema_version() == shipped[-1][0]
    store.close()


def test_replicas_migrating_at_once_apply_each_migration_once(pg_dsn: str) -> None:
    results: list[list[str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(migrate(pg_dsn)), daemon=True)
        for _ in range(3)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sorted(map(len, results)) == [0, 0, len(pg.migrations())]


def test_an_edited_migration_is_refused(pg_dsn: str, conn: pg.Conn) -> None:
    migrate(pg_dsn)
    conn.execute("UPDATE schema_migrations SET sha256 = %s WHERE version = 1", ("0" * 64,))
    with pytest.raises(StoreError) as exc:
        migrate(pg_dsn)
    assert "0001_initial.sql" in exc.value.message and "edited" in exc.value.message
    store = PostgresLaneStore(pg_dsn, LANE)
    with pytest.raises(StoreError) as exc:
        store.open()
    assert "edited" in exc.value.message
    with pytest.raises(StoreError):  # a refused open leaves the store closed
        store.load()
    row = conn.execute("SELECT sha256 FROM schema_migrations WHERE version = 1").fetchone()
    assert row is not None and row["sha256"] == "0" * 64  # the refusal changed nothing


def test_a_newer_schema_is_refused(pg_dsn: str, conn: pg.Conn) -> None:
    migrate(pg_dsn)
    conn.execute(
        "INSERT INTO schema_migrations (version, name, sha256) VALUES (999, '0999_later.sql', 'x')"
    )
    for attempt in (lambda: migrate(pg_dsn), PostgresLaneStore(pg_dsn, LANE).open):
        with pytest.raises(StoreError) as exc:
            attempt()
        assert "0999_later.sql" in exc.value.message and "newer" in exc.value.message


def test_an_unmigrated_database_is_refused_with_the_fix(pg_dsn: str) -> None:
    store = PostgresLaneStore(pg_dsn, LANE)
    with pytest.raises(StoreError) as exc:
        store.open()
    assert "lane-coordinator migrate" in exc.value.message
    assert not store.is_open


def _incident() -> Incident:
    return Incident("lease-expired", T0, None, None, {})


def test_a_database_at_schema_3_upgrades_in_place_with_no_first_etas(pg_dsn: str) -> None:
    """PostgreSQL migration 0004: a database migrated to 0003 (its tickets written with no
    first ETA) upgrades in place; those tickets count in no ETA error, tickets written after
    the upgrade carry theirs and the lane loads its last grants' errors."""
    shipped = postgres_db.migrations()
    assert postgres_db.migrate(pg_dsn, upto=3)[-1] == shipped[2][1]
    old_columns = TICKET_COLUMNS.split(", eta_first_seconds")[0]
    n = old_columns.count(",") + 2  # and the lane
    before = ticket("t_1", 1, state=TicketState.HELD)
    with psycopg.connect(pg_dsn) as db:
        db.execute("INSERT INTO lanes (lane, last_fence, next_seq) VALUES (%s, 1, 2)", (LANE,))
        db.execute(
            f"INSERT INTO tickets (lane, {old_columns}) VALUES ({', '.join(['%s'] * n)})",
            (LANE, *ticket_values(before)[: n - 1]),
        )
    assert postgres_db.migrate(pg_dsn) == [name for _, name, _ in shipped[3:]]
    store = PostgresLaneStore(pg_dsn, LANE)
    store.open()
    try:
        snap = store.load()
        assert snap.live == [before] and snap.live[0].eta_first_seconds is None
        assert snap.recent_eta_errors == []
        granted = ticket("t_2", 2, state=TicketState.HELD, fence=2, scene="s2")
        granted.eta_first_seconds, granted.held_at = 12.5, granted.enqueued_at + 10.0
        write(store, [PutTicket(granted)])
        assert store.get_ticket("t_2") == granted
        assert store.load().recent_eta_errors == [2.5]
    finally:
        store.close()
