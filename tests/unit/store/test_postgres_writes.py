"""The writes of a PostgreSQL lane store (coordinator/store/postgres_writes.py): each change
as SQL on one lane's rows, on a fresh migrated database — other lanes' rows untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.engine.model import (
    Change,
    Incident,
    Pause,
    PruneHistory,
    PruneIncidents,
    PruneMachinesSeen,
    PutCounters,
    PutIncident,
    PutMachineSeen,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    TicketState,
)
from coordinator.store import postgres_db as db
from coordinator.store.pg_batch import Batch
from coordinator.store.postgres_writes import split_counters, write_changes
from tests.store_pg.kit import ended, receipt, ticket
from tests.unit.kit import LANE, T0

OTHER = "other:main"


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[db.Conn]:
    db.migrate(pg_dsn)
    c = db.connect(pg_dsn)
    for lane in (LANE, OTHER):
        c.execute("INSERT INTO lanes (lane) VALUES (%s)", (lane,))
    yield c
    c.close()


def _write(conn: db.Conn, changes: list[Change], lane: str = LANE) -> None:
    with conn.transaction():
        write_changes(conn, lane, changes)


def _rows(conn: db.Conn, query: str, *args: Any) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in conn.execute(query, args).fetchall()]


def test_a_ticket_written_twice_in_a_batch_is_its_last_write(conn: db.Conn) -> None:
    _write(conn, [PutTicket(ticket("t1", 1)), PutTicket(ticket("t1", 1, state=TicketState.HELD))])
    assert _rows(conn, "SELECT lane, state, fence FROM tickets") == [(LANE, "held", 1)]
    _write(conn, [PutTicket(ended("t1", 1, T0 + 9))])  # a later write updates the row
    assert _rows(conn, "SELECT state, ended_at FROM tickets") == [("done", T0 + 9)]


def test_counters_and_projects_served_are_the_lanes(conn: db.Conn) -> None:
    _write(conn, [PutCounters(4, 7), PutProjectServed("p", 4, T0)])
    _write(conn, [PutProjectServed("p", 5, T0 + 1)])
    assert _rows(conn, "SELECT lane, last_fence, next_seq FROM lanes ORDER BY lane") == [
        (OTHER, 0, 1),
        (LANE, 4, 7),
    ]
    assert _rows(conn, "SELECT lane, project, last_fence FROM projects") == [(LANE, "p", 5)]


def test_the_pause_is_replaced_and_removed(conn: db.Conn) -> None:
    first = Pause("provider-human-check", T0, T0 + 60, "mA", None, "t1")
    _write(conn, [PutPause(first)])
    _write(conn, [PutPause(Pause("provider-human-check", T0, T0 + 90, "mA", "cA", "t1"))])
    assert _rows(conn, "SELECT lane, until, claim_id FROM pauses") == [(LANE, T0 + 90, "cA")]
    _write(conn, [PutPause(None)])
    assert _rows(conn, "SELECT lane FROM pauses") == []


def test_incidents_are_numbered_per_lane_and_pruned_from_the_oldest(conn: db.Conn) -> None:
    def incident(tid: str) -> PutIncident:
        return PutIncident(Incident("lease-expired", T0, tid, "mA", {"x": 1}))

    _write(conn, [incident("a"), incident("b"), incident("c")])
    _write(conn, [incident("z")], lane=OTHER)
    assert _rows(conn, "SELECT lane, id, ticket_id FROM incidents ORDER BY lane, id") == [
        (OTHER, 1, "z"),
        (LANE, 1, "a"),
        (LANE, 2, "b"),
        (LANE, 3, "c"),
    ]
    _write(conn, [PruneIncidents(keep=1, excess=2)])
    assert _rows(conn, "SELECT lane, id FROM incidents ORDER BY lane, id") == [
        (OTHER, 1),
        (LANE, 3),
    ]


def test_a_history_prune_removes_the_oldest_ended_tickets_with_their_receipts(
    conn: db.Conn,
) -> None:
    _write(
        conn,
        [
            PutTicket(ended("t1", 1, T0 + 1)),
            PutTicket(ended("t2", 2, T0 + 2)),
            PutTicket(ticket("t3", 3)),  # live: never pruned
            PutReceipt(receipt("t1")),
            PutReceipt(receipt("t2")),
        ],
    )
    _write(conn, [PutTicket(ended("o1", 1, T0))], lane=OTHER)
    _write(conn, [PruneHistory(keep=1, excess=1)])
    assert _rows(conn, "SELECT lane, ticket_id FROM tickets ORDER BY lane, seq") == [
        (OTHER, "o1"),
        (LANE, "t2"),
        (LANE, "t3"),
    ]
    assert _rows(conn, "SELECT ticket_id FROM receipts") == [("t2",)]


def test_a_machine_seen_keeps_its_latest_time_and_old_rows_are_pruned(conn: db.Conn) -> None:
    _write(conn, [PutMachineSeen("mA", T0 + 10), PutMachineSeen("mB", T0)])
    _write(conn, [PutMachineSeen("mA", T0 + 5)])  # an older sighting never moves it back
    _write(conn, [PutMachineSeen("mB", T0)], lane=OTHER)
    q = "SELECT lane, machine_id, last_seen_at FROM machines_seen ORDER BY lane, machine_id"
    assert _rows(conn, q) == [(OTHER, "mB", T0), (LANE, "mA", T0 + 10), (LANE, "mB", T0)]
    _write(conn, [PruneMachinesSeen(T0 + 1)])
    assert _rows(conn, q) == [(OTHER, "mB", T0), (LANE, "mA", T0 + 10)]


def test_split_counters_keeps_the_last_counters_apart_from_the_other_changes() -> None:
    t = PutTicket(ticket("t1", 1))
    rest, counters = split_counters([PutCounters(0, 2), t, PutCounters(1, 2)])
    assert rest == [t] and counters == PutCounters(1, 2)
    assert split_counters([t]) == ([t], None)


def test_the_writes_go_the_same_through_a_batch(conn: db.Conn) -> None:
    batch = Batch(conn)
    batch.execute("BEGIN")
    write_changes(batch, LANE, [PutTicket(ticket("t1", 1)), PutCounters(4, 9)])
    batch.execute("COMMIT")
    batch.run()
    assert _rows(conn, "SELECT lane, ticket_id FROM tickets") == [(LANE, "t1")]
    assert _rows(conn, "SELECT last_fence, next_seq FROM lanes WHERE lane = %s", LANE) == [(4, 9)]
