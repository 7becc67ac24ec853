"""The SQL a lane store shares and the mapping between rows and engine records: the
ticket and receipt columns, a ticket/receipt from its row, and the coalescing of a batch of
changes before it is written (coordinator/store/sqlite.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from coordinator.engine.model import Change, PutCounters, PutTicket, Receipt, Ticket, TicketState

TICKET_COLUMNS = (
    "ticket_id, seq, state, machine_id, claim_id, project, scene, prompt_hash, enqueued_at, "
    "lease_seconds, last_seen_at, held_at, lease_expires_at, heartbeat_at, fence, outcome, "
    "late_outcome, provider_job_id, note, ended_at"
)
TICKET_UPSERT = (
    f"INSERT INTO tickets ({TICKET_COLUMNS}) VALUES "
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (ticket_id) DO UPDATE SET state = excluded.state, "
    "last_seen_at = excluded.last_seen_at, held_at = excluded.held_at, "
    "lease_seconds = excluded.lease_seconds, "
    "lease_expires_at = excluded.lease_expires_at, heartbeat_at = excluded.heartbeat_at, "
    "fence = excluded.fence, outcome = excluded.outcome, late_outcome = excluded.late_outcome, "
    "provider_job_id = excluded.provider_job_id, note = excluded.note, "
    "ended_at = excluded.ended_at"
)
ENDED = "state IN ('done', 'expired')"
RECEIPT_COLUMNS = (
    "receipt_id, ticket_id, phase, machine_id, payload, content_hash, content_hash_verified, "
    "created_at"
)


def ticket_from_row(row: sqlite3.Row, lane: str) -> Ticket:
    return Ticket(
        ticket_id=row["ticket_id"],
        lane=lane,
        state=TicketState(row["state"]),
        machine_id=row["machine_id"],
        claim_id=row["claim_id"],
        project=row["project"],
        scene=row["scene"],
        prompt_hash=row["prompt_hash"],
        seq=row["seq"],
        enqueued_at=row["enqueued_at"],
        lease_seconds=row["lease_seconds"],
        last_seen_at=row["last_seen_at"],
        held_at=row["held_at"],
        lease_expires_at=row["lease_expires_at"],
        heartbeat_at=row["heartbeat_at"],
        fence=row["fence"],
        outcome=row["outcome"],
        late_outcome=row["late_outcome"],
        provider_job_id=row["provider_job_id"],
        note=row["note"],
        ended_at=row["ended_at"],
    )


def receipt_from_row(row: sqlite3.Row) -> Receipt:
    v = row["content_hash_verified"]
    return Receipt(
        receipt_id=row["receipt_id"],
        ticket_id=row["ticket_id"],
        phase=row["phase"],
        machine_id=row["machine_id"],
        payload_json=row["payload"],
        content_hash=row["content_hash"],
        content_hash_verified=None if v is None else bool(v),
        created_at=row["created_at"],
    )


def coalesce(changes: Sequence[Change]) -> list[Change]:
    """Drop ticket/counter writes superseded later in the same batch (fewer statements)."""
    last_ticket: dict[str, int] = {}
    last_counters = -1
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket):
            last_ticket[ch.ticket.ticket_id] = i
        elif isinstance(ch, PutCounters):
            last_counters = i
    out: list[Change] = []
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket) and last_ticket[ch.ticket.ticket_id] != i:
            continue
        if isinstance(ch, PutCounters) and i != last_counters:
            continue
        out.append(ch)
    return out
