"""The lane file migrations (coordinator/store/migrate.py and the SQL it ships in
coordinator/store/migrations/).

The runner, on a bare sqlite3 connection: every shipped migration once and in order, up to a
bound, the lane's name recorded once, an edited migration refused, a failing one leaving
nothing behind. Migration 0005 (0005_ticket_indexes.sql): the tickets table keeps every
constraint with fewer indexes to write, every read of it still uses an index, and a lane
file written by the previous schema (0004) upgrades with its tickets intact. Migration 0007
(0007_eta_first.sql): a file of schema 0006 upgrades in place, its tickets with no first
ETA, and the lane's ETA error is read back from the ticket rows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.engine.model import (
    LaneSnapshot,
    PruneHistory,
    PutCounters,
    PutTicket,
    TicketState,
)
from coordinator.errors import StoreError
from coordinator.store import migrate as migrate_module
from coordinator.store.migrate import apply_migrations, latest_migration, migrations
from coordinator.store.reads import SQLITE_READS
from coordinator.store.rows import (
    TICKET_COLUMNS,
    TICKET_UPDATE,
    ticket_update_values,
    ticket_values,
)
from coordinator.store.sqlite import SqliteLaneStore
from tests.store_pg.kit import ended, ticket, write
from tests.unit.kit import LANE, T0

# Every query the SQLite lane store runs on `tickets` (coordinator/store/reads.py, rows.py),
# with a key naming it, and its parameters.
Q = SQLITE_READS
QUERIES: dict[str, tuple[str, tuple[object, ...]]] = {
    "live": (Q.live, ()),
    "by id": (Q.ticket, ("t_1",)),
    "update": (TICKET_UPDATE, ticket_update_values(ticket("t_1", 1, state=TicketState.DONE))),
    "history": (Q.history, (5,)),
    "history of a project": (Q.project_history, ("p", 5)),
    "hold durations": (Q.holds, (5,)),
    "eta errors": (Q.eta_errors, (5,)),
    "history count": (Q.history_count, ()),
    "prune": (Q.oldest_ended, (5,)),
}
# What each query's plan must say (a full scan of the table reads the whole history).
PLANS = {
    "live": "SCAN tickets USING INDEX tickets_live_identity",
    "by id": "SEARCH tickets USING INDEX sqlite_autoindex_tickets_1 (ticket_id=?)",
    "update": "SEARCH tickets USING INDEX sqlite_autoindex_tickets_1 (ticket_id=?)",
    "history": "SCAN tickets USING INDEX tickets_log",
    "history of a project": "SEARCH tickets USING INDEX tickets_log_project (project=?)",
    "hold durations": "SCAN tickets USING INDEX tickets_log",
    "eta errors": "SEARCH tickets USING INDEX sqlite_autoindex_tickets_2 (fence>?)",  # by fence
    "history count": "SCAN tickets USING INDEX tickets_log",
    "prune": "SCAN tickets USING INDEX tickets_log",
}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "solo+main.sqlite"


def raw(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    return db


@pytest.fixture
def store(path: Path) -> Iterator[SqliteLaneStore]:
    s = SqliteLaneStore(path, LANE)
    s.open()
    yield s
    s.close()


def _indexes(db: sqlite3.Connection) -> set[str]:
    return {
        r["name"]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", ("tickets",)
        )
    }


def test_tickets_has_five_indexes_and_every_constraint(store: SqliteLaneStore) -> None:
    db = raw(store.path)
    try:
        # seq is the rowid (no index of its own); tickets_live is gone
        assert _indexes(db) == {
            "sqlite_autoindex_tickets_1",  # ticket_id UNIQUE
            "sqlite_autoindex_tickets_2",  # fence UNIQUE
            "tickets_live_identity",
            "tickets_log",
            "tickets_log_project",
            "tickets_in_flight",  # 0006: the in-flight jobs a lane loads
        }
        cols = [(r["name"], r["pk"]) for r in db.execute("PRAGMA table_info(tickets)")]
        assert [c for c, _ in cols] == [c.strip() for c in TICKET_COLUMNS.split(",")]
        assert [c for c, pk in cols if pk] == ["seq"]
    finally:
        db.close()
    write(store, [PutTicket(ticket("t_1", 1, state=TicketState.HELD))])
    for bad in (
        ticket("t_2", 1),  # seq taken
        ticket("t_3", 3, state=TicketState.HELD, fence=1),  # fence taken
        ticket("t_4", 4, scene="s1"),  # the live identity of t_1 (same project, scene, hash)
    ):
        store.begin()
        with pytest.raises(StoreError) as exc:
            store.apply([PutTicket(bad)])
        store.abort()
        assert isinstance(exc.value.__cause__, sqlite3.IntegrityError), bad.ticket_id
        assert "UNIQUE" in str(exc.value.__cause__)


def test_every_tickets_query_uses_an_index(store: SqliteLaneStore) -> None:
    db = raw(store.path)
    try:
        for name, (sql, args) in QUERIES.items():
            rows = db.execute("EXPLAIN QUERY PLAN " + sql, args)
            plan = " | ".join(r["detail"] for r in rows)
            assert plan.startswith(PLANS[name]), (name, plan)
    finally:
        db.close()


def test_upgrade_from_0004_keeps_every_ticket(path: Path) -> None:
    old = SqliteLaneStore(path, LANE, max_migration=4)
    old.open()
    assert old.schema_version() == 4
    history = [ended(f"t_{i}", i, T0 + 100 + i, project="p" if i % 2 else "q") for i in (1, 2, 3)]
    live = [
        ticket("t_5", 5, state=TicketState.HELD),
        ticket("t_4", 4),  # written out of seq order: read back in seq order
    ]
    write(old, [PutCounters(5, 6)])
    old.close()
    # rows as a coordinator of schema 0004 wrote them (no in-flight columns yet)
    old_columns = TICKET_COLUMNS.split(", submitted_at")[0]
    n = old_columns.count(",") + 1
    db = raw(path)
    with db:
        db.executemany(
            f"INSERT INTO tickets ({old_columns}) VALUES ({', '.join('?' * n)})",
            [ticket_values(t)[:n] for t in (*history, *live)],
        )
    version = db.execute("SELECT version FROM lane_head").fetchone()[0]
    db.close()
    before = LaneSnapshot(live=sorted(live, key=lambda t: t.seq), version=version)
    before.next_seq, before.last_fence = 6, 5
    db = raw(path)
    try:
        assert "tickets_live" in _indexes(db)
    finally:
        db.close()

    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == migrations()[-1][0] >= 5
        snap = new.load()
        assert [t.ticket_id for t in snap.live] == ["t_4", "t_5"]
        assert snap.live == before.live
        assert (snap.version, snap.next_seq, snap.last_fence) == (
            before.version,
            before.next_seq,
            before.last_fence,
        )
        assert [t.ticket_id for t in new.history(10, None)] == ["t_3", "t_2", "t_1"]
        assert [t.ticket_id for t in new.history(10, "p")] == ["t_3", "t_1"]
        assert new.history_count() == 3
        assert new.get_ticket("t_2") == history[1]
        # the write path on the upgraded file: a new ticket, then the update of a live one
        write(new, [PutTicket(ticket("t_6", 6))])
        done = ticket("t_5", 5, state=TicketState.HELD)
        done.state, done.ended_at, done.outcome = TicketState.DONE, T0 + 300, "completed"
        write(new, [PutTicket(done)])
        assert [t.ticket_id for t in new.load().live] == ["t_4", "t_6"]
        assert new.history(1, None)[0].ticket_id == "t_5"
    finally:
        new.close()
    db = raw(path)
    try:
        assert "tickets_live" not in _indexes(db)
        assert [r[0] for r in db.execute("PRAGMA integrity_check")] == ["ok"]
    finally:
        db.close()


def test_upgrade_from_0005_reads_the_live_tickets_receipt_times(path: Path) -> None:
    """Migration 0006: a held ticket of an older file keeps what its receipts say (its latest
    provider-submitted, its provider-terminal), so a lease reaped after the upgrade leaves its
    in-flight job; ended tickets hold no slot."""
    old = SqliteLaneStore(path, LANE, max_migration=5)
    old.open()
    old.close()
    old_columns = TICKET_COLUMNS.split(", submitted_at")[0]
    n = old_columns.count(",") + 1
    rows = [
        ticket("t_1", 1, state=TicketState.HELD, fence=1),
        ticket("t_2", 2, state=TicketState.HELD, fence=2, scene="s2"),
        ended("t_3", 3, T0 + 5),
    ]
    receipts = [
        ("r1", "t_1", "provider-submitted", T0 + 1),
        ("r2", "t_1", "provider-submitted", T0 + 2),
        ("r3", "t_2", "provider-submitted", T0 + 1),
        ("r4", "t_2", "provider-terminal", T0 + 3),
        ("r5", "t_3", "provider-submitted", T0 + 1),
    ]
    db = raw(path)
    with db:
        db.executemany(
            f"INSERT INTO tickets ({old_columns}) VALUES ({', '.join('?' * n)})",
            [ticket_values(t)[:n] for t in rows],
        )
        db.executemany(
            "INSERT INTO receipts (receipt_id, ticket_id, phase, machine_id, payload, "
            "content_hash, created_at) VALUES (?, ?, ?, 'mA', '{}', 'sha256:00', ?)",
            receipts,
        )
    db.close()
    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        snap = new.load()
        got = {t.ticket_id: (t.submitted_at, t.terminal_at) for t in snap.live}
        assert got == {"t_1": (T0 + 2, None), "t_2": (T0 + 1, T0 + 3)}
        assert snap.in_flight == []
        ended_row = new.get_ticket("t_3")
        assert ended_row is not None and ended_row.submitted_at is None
    finally:
        new.close()


def test_in_flight_rows_load_and_outlive_the_history_prune(store: SqliteLaneStore) -> None:
    """An ended ticket whose in-flight job holds is loaded with the lane and never pruned
    from the render log while it holds; once its hold ended it is an ordinary row."""
    holding = ended("t_1", 1, T0 + 1)
    holding.submitted_at, holding.in_flight_until = T0, T0 + 1800
    write(store, [PutTicket(holding), *(PutTicket(ended(f"t_{i}", i, T0 + i)) for i in (2, 3))])
    snap = store.load()
    assert [t.ticket_id for t in snap.in_flight] == ["t_1"]
    assert snap.in_flight[0] == holding
    write(store, [PruneHistory(keep=2, excess=1)])  # the oldest row holds: t_2 goes instead
    assert [t.ticket_id for t in store.history(10, None)] == ["t_3", "t_1"]
    holding.in_flight_ended = "reconciled:completed"
    write(store, [PutTicket(holding)])
    assert store.load().in_flight == []
    write(store, [PruneHistory(keep=1, excess=1)])
    assert [t.ticket_id for t in store.history(10, None)] == ["t_3"]


# ---------------------------------------------------------------- the runner


def _bare(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.row_factory = sqlite3.Row
    return db


def _applied(db: sqlite3.Connection) -> list[int]:
    return [r[0] for r in db.execute("SELECT version FROM schema_migrations ORDER BY version")]


def test_the_shipped_migrations_are_numbered_from_one_in_order() -> None:
    shipped = migrations()
    assert [v for v, _, _ in shipped] == list(range(1, len(shipped) + 1))
    assert all(name.startswith(f"{v:04d}_") and name.endswith(".sql") for v, name, _ in shipped)
    assert latest_migration() == shipped[-1][0] >= 5


def test_the_runner_applies_up_to_a_bound_then_the_rest_once(tmp_path: Path) -> None:
    db = _bare(tmp_path / "lane.sqlite")
    apply_migrations(db, LANE, max_migration=2)
    assert _applied(db) == [1, 2]
    apply_migrations(db, LANE, None)
    apply_migrations(db, "other:lane", None)  # the lane's name is recorded once
    assert _applied(db) == list(range(1, latest_migration() + 1))
    lane = db.execute("SELECT value FROM meta WHERE key = 'lane'").fetchone()[0]
    assert lane == LANE
    db.close()


def test_the_runner_refuses_an_edited_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _bare(tmp_path / "lane.sqlite")
    apply_migrations(db, LANE, None)
    edited = [(v, n, sql + "\n-- edited") if v == 1 else (v, n, sql) for v, n, sql in migrations()]
    monkeypatch.setattr(migrate_module, "migrations", lambda: edited)
    with pytest.raises(StoreError, match=r"0001_initial\.sql was edited") as info:
        apply_migrations(db, LANE, None)
    assert info.value.reason == "edited migration"
    db.close()


def test_a_failing_migration_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _bare(tmp_path / "lane.sqlite")
    broken = [*migrations(), (99, "0099_broken.sql", "CREATE TABLE x (a);\nNOT SQL AT ALL;")]
    monkeypatch.setattr(migrate_module, "migrations", lambda: broken)
    with pytest.raises(sqlite3.OperationalError):
        apply_migrations(db, LANE, None)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == set()  # every migration of the run was rolled back with it
    db.close()


def test_upgrade_from_0006_adds_the_first_eta_and_loads_the_eta_errors(path: Path) -> None:
    """Migration 0007: a file written at schema 0006 opens at the current schema in place;
    its tickets were given no recorded ETA (null: no error), the tickets written after the
    upgrade carry theirs, and the snapshot's ETA errors are the last grants' by fence."""
    old = SqliteLaneStore(path, LANE, max_migration=6)
    old.open()
    assert old.schema_version() == 6
    old.close()
    old_columns = TICKET_COLUMNS.split(", eta_first_seconds")[0]
    n = old_columns.count(",") + 1
    before = [ended("t_1", 1, T0 + 50), ticket("t_2", 2, state=TicketState.HELD)]
    db = raw(path)
    with db:
        db.executemany(
            f"INSERT INTO tickets ({old_columns}) VALUES ({', '.join('?' * n)})",
            [ticket_values(t)[:n] for t in before],
        )
    db.close()
    new = SqliteLaneStore(path, LANE)
    new.open()
    try:
        assert new.schema_version() == migrations()[-1][0] >= 7
        snap = new.load()
        assert [t.eta_first_seconds for t in snap.live] == [None]
        assert snap.live == before[1:] and new.get_ticket("t_1") == before[0]
        assert snap.recent_eta_errors == []  # nothing to count them against
        # tickets written after the upgrade: given 0 and granted at once; given 30 s,
        # waited 45 s; given 100 s, still queued (no grant yet)
        now = [ticket("t_3", 3, state=TicketState.HELD, fence=3), ended("t_4", 4, T0 + 90)]
        now[0].eta_first_seconds, now[0].held_at = 0.0, now[0].enqueued_at
        now[1].eta_first_seconds, now[1].held_at, now[1].fence = 30.0, T0 + 4 + 45.0, 4
        waiting = ticket("t_5", 5)
        waiting.eta_first_seconds = 100.0
        write(new, [PutTicket(t) for t in (*now, waiting)])
        assert new.get_ticket("t_5") == waiting
        assert new.load().recent_eta_errors == [0.0, 15.0]  # the oldest grant first
    finally:
        new.close()
