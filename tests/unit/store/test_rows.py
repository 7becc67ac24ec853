"""What the two lane stores share (coordinator/store/rows.py): the ticket upsert in each
driver's style, a record to its row parameters and back, incidents with an unreadable detail,
the machines-seen window, and the coalescing of a batch of changes."""

from __future__ import annotations

from typing import Any

from coordinator.constants import EVIDENCE_RECENT_SECONDS
from coordinator.engine.model import (
    Change,
    Incident,
    Pause,
    PruneHistory,
    PruneMachinesSeen,
    PutCounters,
    PutIncident,
    PutMachineSeen,
    PutPause,
    PutTicket,
    Receipt,
    TicketState,
)
from coordinator.store.rows import (
    INCIDENT_COLUMNS,
    PAUSE_COLUMNS,
    RECEIPT_COLUMNS,
    TICKET_COLUMNS,
    TICKET_UPDATE,
    TICKET_UPSERT,
    coalesce,
    detail_json,
    incident_from_row,
    incident_values,
    pause_from_row,
    pause_values,
    receipt_from_row,
    receipt_values,
    seen_from_rows,
    seen_since,
    ticket_from_row,
    ticket_update_values,
    ticket_upsert,
    ticket_values,
)
from tests.store_pg.kit import receipt, ticket
from tests.unit.kit import LANE, T0


def _row(columns: str, values: tuple[Any, ...]) -> dict[str, Any]:
    names = [c.strip() for c in columns.split(",")]
    assert len(names) == len(values)
    return dict(zip(names, values, strict=True))


def test_the_upsert_has_one_placeholder_per_column_in_each_style() -> None:
    n = len(TICKET_COLUMNS.split(","))
    assert TICKET_UPSERT.count("?") == n
    assert "ON CONFLICT (ticket_id)" in TICKET_UPSERT
    pg = ticket_upsert("%s", lane_column=True)
    assert pg.count("%s") == n + 1
    assert pg.startswith("INSERT INTO tickets (lane, ticket_id,")
    assert "ON CONFLICT (lane, ticket_id)" in pg
    assert "state = excluded.state" in pg and "seq = excluded" not in pg


def test_a_ticket_round_trips_through_its_row() -> None:
    t = ticket("t1", 3, state=TicketState.HELD, claim=None, scene="sc")
    t.note, t.provider_job_id = "n", "job"
    assert ticket_from_row(_row(TICKET_COLUMNS, ticket_values(t)), LANE) == t


def test_the_update_parameters_end_with_the_id() -> None:
    t = ticket("t1", 3, state=TicketState.DONE, ended_at=T0 + 9, outcome="failed")
    values = ticket_update_values(t)
    assert TICKET_UPDATE.count("?") == len(values)
    assert values[0] == "done" and values[-1] == "t1"


def test_a_receipt_round_trips_and_its_verdict_reads_as_a_bool_or_none() -> None:
    for verified in (True, False, None):
        r = receipt("t1", verified=verified)
        assert receipt_from_row(_row(RECEIPT_COLUMNS, receipt_values(r))) == r
    stored_as_int = _row(RECEIPT_COLUMNS, receipt_values(receipt("t1")))
    stored_as_int["content_hash_verified"] = 1  # SQLite's bool
    assert receipt_from_row(stored_as_int).content_hash_verified is True


def test_a_pause_round_trips() -> None:
    p = Pause("provider-human-check", T0, T0 + 60, "mA", None, "t1")
    assert pause_from_row(_row(PAUSE_COLUMNS, pause_values(p))) == p
    named = Pause("provider-human-check", T0, T0 + 60, "mA", "c", "t1", "studio-a")
    assert pause_from_row(_row(PAUSE_COLUMNS, pause_values(named))).credential == "studio-a"


def test_an_incident_detail_is_compact_sorted_json_and_unreadable_reads_empty() -> None:
    i = Incident("lease-expired", T0, "t1", "mA", {"b": 1, "a": [1, 2]})
    assert detail_json(i) == '{"a":[1,2],"b":1}'
    row = {"id": 4, "kind": i.kind, "at": T0, "ticket_id": "t1", "machine_id": "mA"}
    row["credential"] = None
    assert incident_from_row({**row, "detail": detail_json(i)}) == (4, i)
    assert incident_from_row({**row, "detail": "{torn"})[1].detail == {}


def test_an_incident_round_trips_with_its_credential() -> None:
    i = Incident("late-release", T0, "t1", "mA", {"fence": 3}, "ops")
    assert incident_from_row({"id": 2, **_row(INCIDENT_COLUMNS, incident_values(i))}) == (2, i)


def test_machines_seen_rows_of_the_last_hour() -> None:
    assert seen_since(None) == -EVIDENCE_RECENT_SECONDS
    assert seen_since(T0) == T0 - EVIDENCE_RECENT_SECONDS
    rows = [{"machine_id": "mA", "last_seen_at": 5}, {"machine_id": "mB", "last_seen_at": 6.5}]
    assert seen_from_rows(rows) == {"mA": 5.0, "mB": 6.5}


def test_coalesce_keeps_the_last_write_of_each_ticket_and_counters_in_order() -> None:
    t1a = ticket("t1", 1)
    t1b = ticket("t1", 1, state=TicketState.HELD)
    t2 = ticket("t2", 2)
    incident = PutIncident(Incident("lease-expired", T0, "t1", "mA", {}))
    changes: list[Change] = [
        PutTicket(t1a),
        PutCounters(1, 2),
        PutTicket(t2),
        incident,
        PutPause(None),
        PutTicket(t1b),
        PutCounters(2, 3),
        PutMachineSeen("mA", T0),
        PruneMachinesSeen(T0 - 10),
        PutMachineSeen("mA", T0 + 1),
        PruneMachinesSeen(T0 - 5),
        PruneHistory(keep=3),
        incident,
    ]
    assert coalesce(changes) == [
        PutTicket(t2),
        incident,
        PutPause(None),
        PutTicket(t1b),
        PutCounters(2, 3),
        PutMachineSeen("mA", T0 + 1),
        PruneMachinesSeen(T0 - 5),
        PruneHistory(keep=3),
        incident,  # incidents are never merged
    ]
    assert coalesce([]) == []


def test_receipt_columns_match_the_receipt_record() -> None:
    names = [c.strip() for c in RECEIPT_COLUMNS.split(",")]
    assert len(names) == len(Receipt.__slots__)
