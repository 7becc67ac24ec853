"""The lane reads written once for both stores (coordinator/store/reads.py): each query in
each dialect, and `LaneReads` answering the same on a real SQLite file and a real
PostgreSQL database."""

from __future__ import annotations

import pytest

from coordinator.engine.model import Incident, IncidentKind, PutIncident, PutReceipt, PutTicket
from coordinator.store.reads import POSTGRES_READS, SQLITE_READS, ReadQueries
from tests.store_pg.kit import AnyStore, ended, receipt, ticket, write
from tests.unit.kit import T0

QUERIES = (
    "live",
    "projects",
    "holds",
    "seen",
    "ticket",
    "receipt",
    "recent_receipts",
    "ticket_receipts",
    "history",
    "project_history",
    "history_count",
    "incidents",
    "oldest_ended",
)


@pytest.mark.parametrize("name", QUERIES)
def test_each_query_uses_its_dialects_placeholder_and_lane_key(name: str) -> None:
    lite, pg = getattr(SQLITE_READS, name), getattr(POSTGRES_READS, name)
    assert "%s" not in lite and "lane = ?" not in lite  # one lane per file: no lane key
    assert "?" not in pg
    assert "lane = %s" in pg  # every lane in one database: each read is of one lane


def test_the_lane_leads_the_parameters_only_where_rows_carry_it() -> None:
    assert SQLITE_READS.args("solo:main", 5) == (5,)
    assert POSTGRES_READS.args("solo:main", 5) == ("solo:main", 5)
    assert isinstance(SQLITE_READS, ReadQueries)


def test_only_sqlite_names_the_live_tickets_index() -> None:
    assert "INDEXED BY tickets_live_identity" in SQLITE_READS.live
    assert "INDEXED BY" not in POSTGRES_READS.live


def test_the_reads_answer_alike_on_both_stores(store: AnyStore) -> None:
    write(
        store,
        [
            PutTicket(ticket("t1", 1)),
            PutTicket(ended("t2", 2, T0 + 10, project="a")),
            PutTicket(ended("t3", 3, T0 + 20, project="b")),
            PutReceipt(receipt("t2", at=T0 + 5)),
            PutReceipt(receipt("t2", "provider-submitted", at=T0 + 6)),
        ],
    )
    got = store.get_ticket("t1")
    assert got is not None and got.ticket_id == "t1"
    assert store.get_ticket("nope") is None
    assert [t.ticket_id for t in store.history(10, None)] == ["t3", "t2"]  # newest first
    assert [t.ticket_id for t in store.history(10, "a")] == ["t2"]
    assert [t.ticket_id for t in store.history(1, None)] == ["t3"]
    assert store.history_count() == 2
    recent = store.recent_receipts(10)
    assert [r.phase for r in recent] == ["provider-submitted", "lease-acquired"]
    assert [r.phase for r in store.receipts_for_ticket("t2")] == [
        "lease-acquired",
        "provider-submitted",
    ]
    first = recent[-1]
    assert store.get_receipt(first.receipt_id) == first
    assert store.incidents(5) == []


def test_incidents_are_read_newest_first(store: AnyStore) -> None:
    def incident(at: float) -> Incident:
        return Incident(IncidentKind.DUPLICATE_COLLISION, at, "t1", "mA", {"n": at})

    write(store, [PutIncident(incident(T0 + 1)), PutIncident(incident(T0 + 2))])
    found = store.incidents(5)
    assert [i.at for _, i in found] == [T0 + 2, T0 + 1]
    assert [i.at for _, i in store.incidents(1)] == [T0 + 2]
