"""The writes of a PostgreSQL lane store: each `Change` of the engine as SQL on the lane's
rows (upserts, the pause, counters, project served, receipts, incidents numbered per lane,
prunes of the history and the incidents by exact excess, the machines seen and their prune).
Columns, row parameters and the coalescing of a batch are shared with the SQLite store
(coordinator/store/rows.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from coordinator.engine.model import (
    Change,
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
)
from coordinator.store.reads import POSTGRES_READS
from coordinator.store.rows import (
    INCIDENT_COLUMNS,
    PAUSE_COLUMNS,
    RECEIPT_COLUMNS,
    coalesce,
    incident_values,
    pause_values,
    receipt_values,
    ticket_upsert,
    ticket_values,
)

TICKET_UPSERT = ticket_upsert("%s", lane_column=True)


class Executes(Protocol):
    """Where the statements go: a psycopg connection (the importer), or a lane
    transaction's `coordinator.store.pg_batch.Batch`."""

    def execute(self, query: str, params: Sequence[Any], /) -> object: ...


def split_counters(changes: Sequence[Change]) -> tuple[list[Change], PutCounters | None]:
    """The changes without their lane counters, and the last counters (they only grow: the
    last one holds): the commit writes them with the version."""
    rest: list[Change] = []
    counters: PutCounters | None = None
    for ch in changes:
        if isinstance(ch, PutCounters):
            counters = ch
        else:
            rest.append(ch)
    return rest, counters


def _marks(columns: str) -> str:
    """One "%s" per column of a column list."""
    return ", ".join(["%s"] * (columns.count(",") + 1))


_PAUSE_INSERT = f"INSERT INTO pauses (lane, {PAUSE_COLUMNS}) VALUES (%s, {_marks(PAUSE_COLUMNS)})"
_RECEIPT_INSERT = (
    f"INSERT INTO receipts (lane, {RECEIPT_COLUMNS}) VALUES (%s, {_marks(RECEIPT_COLUMNS)})"
)
# the incident's id: the lane's next (incidents are numbered per lane)
_INCIDENT_INSERT = (
    "WITH n AS (UPDATE lanes SET last_incident = last_incident + 1 "
    "WHERE lane = %s RETURNING last_incident) "
    f"INSERT INTO incidents (lane, id, {INCIDENT_COLUMNS}) "
    f"SELECT %s, n.last_incident, {_marks(INCIDENT_COLUMNS)} FROM n"
)


def write_changes(db: Executes, lane: str, changes: Sequence[Change]) -> None:
    """Write each change of one lane (the caller holds the lane's transaction), superseded
    ticket and counter writes dropped; the same semantics as the SQLite store's apply."""
    for ch in coalesce(changes):
        if isinstance(ch, PutTicket):
            db.execute(TICKET_UPSERT, (lane, *ticket_values(ch.ticket)))
        elif isinstance(ch, PutCounters):
            db.execute(
                "UPDATE lanes SET last_fence = %s, next_seq = %s WHERE lane = %s",
                (ch.last_fence, ch.next_seq, lane),
            )
        elif isinstance(ch, PutProjectServed):
            db.execute(
                "INSERT INTO projects (lane, project, last_fence, last_granted_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (lane, project) DO UPDATE SET "
                "last_fence = excluded.last_fence, last_granted_at = excluded.last_granted_at",
                (lane, ch.project, ch.fence, ch.at),
            )
        elif isinstance(ch, PutPause):
            db.execute("DELETE FROM pauses WHERE lane = %s", (lane,))
            if ch.pause is not None:
                db.execute(_PAUSE_INSERT, (lane, *pause_values(ch.pause)))
        elif isinstance(ch, PutReceipt):
            db.execute(_RECEIPT_INSERT, (lane, *receipt_values(ch.receipt)))
        elif isinstance(ch, PutIncident):
            db.execute(_INCIDENT_INSERT, (lane, lane, *incident_values(ch.incident)))
        elif isinstance(ch, PruneHistory):
            db.execute(
                f"WITH old AS ({POSTGRES_READS.oldest_ended}), "
                "gone AS (DELETE FROM receipts WHERE lane = %s "
                "AND ticket_id IN (SELECT ticket_id FROM old)) "
                "DELETE FROM tickets WHERE lane = %s "
                "AND ticket_id IN (SELECT ticket_id FROM old)",
                (lane, ch.excess, lane, lane),
            )
        elif isinstance(ch, PruneIncidents):
            db.execute(
                "DELETE FROM incidents WHERE lane = %s AND id IN "
                "(SELECT id FROM incidents WHERE lane = %s ORDER BY id ASC LIMIT %s)",
                (lane, lane, ch.excess),
            )
        elif isinstance(ch, PutMachineSeen):
            db.execute(
                "INSERT INTO machines_seen (lane, machine_id, last_seen_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (lane, machine_id) DO UPDATE SET "
                "last_seen_at = GREATEST(machines_seen.last_seen_at, excluded.last_seen_at)",
                (lane, ch.machine_id, ch.at),
            )
        elif isinstance(ch, PruneMachinesSeen):
            db.execute(
                "DELETE FROM machines_seen WHERE lane = %s AND last_seen_at < %s",
                (lane, ch.before),
            )
