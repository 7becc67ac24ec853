"""The SQLite lane transaction and its writes (coordinator/store/sqlite_writes.py):
`SqliteTransaction`'s begin / apply / finish / abort and the actor's group commit, and
`write_changes` on a real lane file's connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.engine.model import (
    Incident,
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutReceipt,
    PutTicket,
    TicketState,
)
from coordinator.engine.store import Group, StaleLane
from coordinator.errors import StoreError
from coordinator.store.sqlite import SqliteLaneStore
from coordinator.store.sqlite_writes import write_changes
from tests.store_pg.kit import ended, receipt, ticket
from tests.unit.kit import LANE, T0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "lane.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteLaneStore]:
    s = SqliteLaneStore(path, LANE)
    s.open()
    yield s
    s.close()


@pytest.fixture
def conn(store: SqliteLaneStore, path: Path) -> Iterator[sqlite3.Connection]:
    """A second connection to the migrated lane file, in a transaction of its own."""
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("BEGIN IMMEDIATE")
    yield db
    db.execute("ROLLBACK")
    db.close()


def _count(db: sqlite3.Connection, table: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_finish_commits_and_returns_the_next_version(store: SqliteLaneStore) -> None:
    v0 = store.begin().version
    store.apply([PutTicket(ticket("t1", 1)), PutCounters(0, 2)])
    assert store.finish(T0 + 5, T0) == v0 + 1
    head = store.begin()
    store.abort()
    assert (head.version, head.next_deadline, head.last_now) == (v0 + 1, T0 + 5, T0)
    assert store.get_ticket("t1") is not None


def test_abort_keeps_nothing_applied(store: SqliteLaneStore) -> None:
    store.begin()
    store.apply([PutTicket(ticket("t1", 1))])
    store.abort()
    assert store.get_ticket("t1") is None
    store.abort()  # outside a transaction: nothing to do


def test_calls_out_of_order_are_refused(store: SqliteLaneStore) -> None:
    with pytest.raises(StoreError, match="apply outside a transaction"):
        store.apply([PutCounters(0, 2)])
    with pytest.raises(StoreError, match="commit outside a transaction"):
        store.finish(None, T0)
    store.begin()
    with pytest.raises(StoreError, match="already open"):
        store.begin()
    store.abort()


def test_a_group_at_a_moved_version_writes_nothing(store: SqliteLaneStore) -> None:
    version = store.begin().version
    store.abort()
    assert store.commit_group(Group(version, [PutTicket(ticket("t1", 1))], None, T0)) == (
        version + 1
    )
    with pytest.raises(StaleLane):
        store.commit_group(Group(version, [PutTicket(ticket("t2", 2))], None, T0))
    assert store.get_ticket("t2") is None


def test_a_prepared_group_is_not_started_inside_another_transaction(
    store: SqliteLaneStore,
) -> None:
    version = store.begin().version
    assert store.prepare_group(Group(version, [], None, T0)) is False
    store.abort()
    group = Group(version, [PutTicket(ticket("t1", 1))], None, T0)
    assert store.prepare_group(group) is True
    assert store.commit_prepared(group) == version + 1
    assert store.get_ticket("t1") is not None


def test_write_changes_inserts_then_updates_a_ticket(conn: sqlite3.Connection) -> None:
    counters = write_changes(conn, [PutTicket(ticket("t1", 1)), PutCounters(0, 2)], None)
    assert counters == (0, 2)
    held = ticket("t1", 1, state=TicketState.HELD)
    write_changes(conn, [PutTicket(held)], counters)  # seq below next_seq: an UPDATE
    row = conn.execute("SELECT state, fence FROM tickets WHERE ticket_id = 't1'").fetchone()
    assert (row["state"], row["fence"]) == ("held", 1)
    assert _count(conn, "tickets") == 1


def test_write_changes_writes_only_the_counters_that_changed(conn: sqlite3.Connection) -> None:
    write_changes(conn, [PutCounters(3, 9)], None)
    conn.execute("UPDATE meta SET value = 'x' WHERE key = 'next_seq'")  # a marker
    assert write_changes(conn, [PutCounters(4, 9)], (3, 9)) == (4, 9)
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert meta["last_fence"] == "4" and meta["next_seq"] == "x"  # next_seq not rewritten


def test_write_changes_replaces_the_pause_and_prunes_by_exact_excess(
    conn: sqlite3.Connection,
) -> None:
    pause = Pause("provider-human-check", T0, T0 + 60, "mA", None, "t1")
    write_changes(
        conn,
        [
            PutPause(pause),
            PutTicket(ended("t1", 1, T0 + 1)),
            PutTicket(ended("t2", 2, T0 + 2)),
            PutTicket(ended("t3", 3, T0 + 3)),
            PutReceipt(receipt("t1")),
            PutIncident(Incident("lease-expired", T0, "t1", "mA", {})),
            PutIncident(Incident("lease-expired", T0, "t2", "mA", {})),
        ],
        None,
    )
    assert _count(conn, "pause") == 1
    write_changes(conn, [PutPause(None), PruneHistory(keep=1, excess=2), PruneIncidents(1)], None)
    assert _count(conn, "pause") == 0
    assert [r[0] for r in conn.execute("SELECT ticket_id FROM tickets")] == ["t3"]
    assert _count(conn, "receipts") == 0  # the pruned ticket's receipt went with it
    assert [r[0] for r in conn.execute("SELECT ticket_id FROM incidents")] == ["t2"]
