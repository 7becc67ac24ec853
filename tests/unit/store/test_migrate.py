"""Migration 0005 (coordinator/store/migrations/0005_ticket_indexes.sql): the tickets table
keeps every constraint with fewer indexes to write, every read of it still uses an index, and
a lane file written by the previous schema (0004) upgrades with its tickets intact."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.engine.model import PutCounters, PutTicket, TicketState
from coordinator.errors import StoreError
from coordinator.store.migrate import migrations
from coordinator.store.rows import ENDED, TICKET_COLUMNS
from coordinator.store.sqlite import SqliteLaneStore
from tests.store_pg.kit import ended, ticket, write
from tests.unit.kit import LANE, T0

# Every query the SQLite lane store runs on `tickets` (coordinator/store/sqlite.py,
# sqlite_writes.py), with a key naming it.
QUERIES = {
    "live": f"SELECT {TICKET_COLUMNS} FROM tickets INDEXED BY tickets_live_identity "
    "WHERE state IN ('queued', 'held') ORDER BY seq",
    "by id": f"SELECT {TICKET_COLUMNS} FROM tickets WHERE ticket_id = 't_1'",
    "update": "UPDATE tickets SET state = 'done' WHERE ticket_id = 't_1'",
    "history": f"SELECT {TICKET_COLUMNS} FROM tickets WHERE {ENDED} "
    "ORDER BY ended_at DESC, seq DESC LIMIT 5",
    "history of a project": f"SELECT {TICKET_COLUMNS} FROM tickets WHERE {ENDED} "
    "AND project = 'p' ORDER BY ended_at DESC, seq DESC LIMIT 5",
    "hold durations": f"SELECT ended_at - held_at AS d FROM tickets WHERE {ENDED} "
    "AND held_at IS NOT NULL ORDER BY ended_at DESC, seq DESC LIMIT 5",
    "history count": f"SELECT count(*) AS n FROM tickets WHERE {ENDED}",
    "prune": f"SELECT ticket_id FROM tickets WHERE {ENDED} ORDER BY ended_at ASC, seq ASC LIMIT 5",
}
# What each query's plan must say (a full scan of the table reads the whole history).
PLANS = {
    "live": "SCAN tickets USING INDEX tickets_live_identity",
    "by id": "SEARCH tickets USING INDEX sqlite_autoindex_tickets_1 (ticket_id=?)",
    "update": "SEARCH tickets USING INDEX sqlite_autoindex_tickets_1 (ticket_id=?)",
    "history": "SCAN tickets USING INDEX tickets_log",
    "history of a project": "SEARCH tickets USING INDEX tickets_log_project (project=?)",
    "hold durations": "SCAN tickets USING INDEX tickets_log",
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
        for name, sql in QUERIES.items():
            plan = " | ".join(r["detail"] for r in db.execute("EXPLAIN QUERY PLAN " + sql))
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
    write(old, [*(PutTicket(t) for t in history), *(PutTicket(t) for t in live)])
    write(old, [PutCounters(5, 6)])
    before = old.load()
    old.close()
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
