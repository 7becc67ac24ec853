"""What the lane stores share (coordinator/store/sqlite.py and postgres.py): the ticket,
receipt and pause columns, the ticket upsert, the parameters a ticket/receipt/pause is written
with, a ticket/receipt/pause/incident from its row (sqlite3.Row or psycopg's DictRow), the
machines seen, projects served, hold durations and ETA errors a snapshot loads, and the
coalescing of a batch of changes before it is written. The read queries are in reads.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from coordinator.constants import EVIDENCE_RECENT_SECONDS
from coordinator.engine.eta_error import grant_error
from coordinator.engine.model import (
    Change,
    Incident,
    Pause,
    PruneMachinesSeen,
    PutCounters,
    PutMachineSeen,
    PutTicket,
    Receipt,
    Ticket,
    TicketState,
)


class Row(Protocol):
    """A result row by column name: sqlite3.Row or psycopg's DictRow."""

    def __getitem__(self, key: str, /) -> Any: ...


TICKET_COLUMNS = (
    "ticket_id, seq, state, machine_id, claim_id, project, scene, prompt_hash, enqueued_at, "
    "lease_seconds, last_seen_at, held_at, lease_expires_at, heartbeat_at, fence, outcome, "
    "late_outcome, provider_job_id, note, ended_at, submitted_at, terminal_at, in_flight_until, "
    "in_flight_ended, eta_first_seconds, credential, released_by"
)
# The columns a ticket's later writes change (the upsert's DO UPDATE, SQLite's plain UPDATE);
# `eta_first_seconds` is not one: the acquire that makes the ticket writes it with its row.
_UPDATED = (
    "state",
    "last_seen_at",
    "held_at",
    "lease_seconds",
    "lease_expires_at",
    "heartbeat_at",
    "fence",
    "outcome",
    "late_outcome",
    "provider_job_id",
    "note",
    "ended_at",
    "submitted_at",
    "terminal_at",
    "in_flight_until",
    "in_flight_ended",
    "released_by",
)
_TICKET_UPDATE = "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _UPDATED)


def ticket_upsert(placeholder: str, lane_column: bool) -> str:
    """The ticket upsert in a driver's parameter style ("?" or "%s"); with `lane_column` the
    lane comes first (one table for every lane) and is part of the key."""
    lane = "lane, " if lane_column else ""
    n = TICKET_COLUMNS.count(",") + 1 + lane_column
    return (
        f"INSERT INTO tickets ({lane}{TICKET_COLUMNS}) VALUES "
        f"({', '.join([placeholder] * n)}) "
        f"ON CONFLICT ({lane}ticket_id) {_TICKET_UPDATE}"
    )


TICKET_UPSERT = ticket_upsert("?", lane_column=False)
# A ticket whose row exists (SQLite's write path): its updated columns, by id.
TICKET_UPDATE = f"UPDATE tickets SET {', '.join(f'{c} = ?' for c in _UPDATED)} WHERE ticket_id = ?"
ENDED = "state IN ('done', 'expired')"
# An ended ticket whose in-flight job still holds a slot (docs/protocol.md#in-flight).
HOLDS_IN_FLIGHT = "in_flight_until IS NOT NULL AND in_flight_ended IS NULL"
RECEIPT_COLUMNS = (
    "receipt_id, ticket_id, phase, machine_id, payload, content_hash, content_hash_verified, "
    "created_at, credential"
)
PAUSE_COLUMNS = "reason_code, started_at, until, machine_id, claim_id, ticket_id, credential"
INCIDENT_COLUMNS = "kind, at, ticket_id, machine_id, detail, credential"

# The evidence's machines seen (migrations 0004 / pg 0002): one row per machine (and lane).
# A snapshot loads the rows of the last hour, the most recent MACHINES_LISTED_MAX at most.
SQLITE_SEEN_UPSERT = (
    "INSERT INTO machines_seen (machine_id, last_seen_at) VALUES (?, ?) "
    "ON CONFLICT (machine_id) DO UPDATE SET "
    "last_seen_at = max(last_seen_at, excluded.last_seen_at)"
)
SQLITE_SEEN_PRUNE = "DELETE FROM machines_seen WHERE last_seen_at < ?"


def seen_since(last_now: float | None) -> float:
    """The oldest machines-seen row a snapshot loads: an hour before the lane's latest `now`
    (an older row can never be listed again: a lane's clock never runs back)."""
    return (0.0 if last_now is None else last_now) - EVIDENCE_RECENT_SECONDS


def seen_from_rows(rows: Sequence[Row]) -> dict[str, float]:
    """machine -> the time its machines-seen row holds."""
    return {r["machine_id"]: float(r["last_seen_at"]) for r in rows}


def projects_from_rows(rows: Sequence[Row]) -> dict[str, int]:
    """project -> the last fence it was served (ReadQueries.projects)."""
    return {r["project"]: int(r["last_fence"]) for r in rows}


def holds_from_rows(rows: Sequence[Row]) -> list[tuple[str, float]]:
    """The recent holds (project, seconds), the oldest first (ReadQueries.holds reads the
    newest first)."""
    return [(r["project"], max(0.0, float(r["d"]))) for r in reversed(rows)]


def eta_errors_from_rows(rows: Sequence[Row]) -> list[float]:
    """The ETA errors of the lane's last grants, the oldest first (ReadQueries.eta_errors
    reads the newest first)."""
    return [
        grant_error(float(r["eta_first_seconds"]), float(r["enqueued_at"]), float(r["held_at"]))
        for r in reversed(rows)
    ]


def ticket_from_row(row: Row, lane: str) -> Ticket:
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
        submitted_at=row["submitted_at"],
        terminal_at=row["terminal_at"],
        in_flight_until=row["in_flight_until"],
        in_flight_ended=row["in_flight_ended"],
        eta_first_seconds=row["eta_first_seconds"],
        credential=row["credential"],
        released_by=row["released_by"],
    )


def receipt_from_row(row: Row) -> Receipt:
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
        credential=row["credential"],
    )


def pause_from_row(r: Row) -> Pause:
    return Pause(
        r["reason_code"],
        r["started_at"],
        r["until"],
        r["machine_id"],
        r["claim_id"],
        r["ticket_id"],
        r["credential"],
    )


def incident_from_row(r: Row) -> tuple[int, Incident]:
    """An incident and its id; a detail that is not JSON reads as {}."""
    try:
        detail = json.loads(r["detail"])
    except ValueError:
        detail = {}
    incident = Incident(
        r["kind"], r["at"], r["ticket_id"], r["machine_id"], detail, r["credential"]
    )
    return int(r["id"]), incident


def detail_json(incident: Incident) -> str:
    return json.dumps(incident.detail, separators=(",", ":"), sort_keys=True)


def incident_values(i: Incident) -> tuple[Any, ...]:
    """An incident's parameters in `INCIDENT_COLUMNS` order."""
    return (i.kind, i.at, i.ticket_id, i.machine_id, detail_json(i), i.credential)


def ticket_values(t: Ticket) -> tuple[Any, ...]:
    """A ticket's parameters in `TICKET_COLUMNS` order."""
    return (
        t.ticket_id,
        t.seq,
        t.state.value,
        t.machine_id,
        t.claim_id,
        t.project,
        t.scene,
        t.prompt_hash,
        t.enqueued_at,
        t.lease_seconds,
        t.last_seen_at,
        t.held_at,
        t.lease_expires_at,
        t.heartbeat_at,
        t.fence,
        t.outcome,
        t.late_outcome,
        t.provider_job_id,
        t.note,
        t.ended_at,
        t.submitted_at,
        t.terminal_at,
        t.in_flight_until,
        t.in_flight_ended,
        t.eta_first_seconds,
        t.credential,
        t.released_by,
    )


def ticket_update_values(t: Ticket) -> tuple[Any, ...]:
    """A ticket's parameters for TICKET_UPDATE (the updated columns, then its id)."""
    return (
        t.state.value,
        t.last_seen_at,
        t.held_at,
        t.lease_seconds,
        t.lease_expires_at,
        t.heartbeat_at,
        t.fence,
        t.outcome,
        t.late_outcome,
        t.provider_job_id,
        t.note,
        t.ended_at,
        t.submitted_at,
        t.terminal_at,
        t.in_flight_until,
        t.in_flight_ended,
        t.released_by,
        t.ticket_id,
    )


def pause_values(p: Pause) -> tuple[Any, ...]:
    """A pause's parameters in `PAUSE_COLUMNS` order."""
    return (
        p.reason_code,
        p.started_at,
        p.until,
        p.machine_id,
        p.claim_id,
        p.ticket_id,
        p.credential,
    )


def receipt_values(r: Receipt) -> tuple[Any, ...]:
    """A receipt's parameters in `RECEIPT_COLUMNS` order (the verdict a bool or None: SQLite
    stores a bool as 0/1)."""
    return (
        r.receipt_id,
        r.ticket_id,
        r.phase,
        r.machine_id,
        r.payload_json,
        r.content_hash,
        r.content_hash_verified,
        r.created_at,
        r.credential,
    )


def coalesce(changes: Sequence[Change]) -> list[Change]:
    """Drop ticket/counter/machine-seen writes and machines-seen prunes superseded later in
    the same batch (fewer statements)."""
    last_ticket: dict[str, int] = {}
    last_seen: dict[str, int] = {}
    last_counters = last_prune = -1
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket):
            last_ticket[ch.ticket.ticket_id] = i
        elif isinstance(ch, PutMachineSeen):
            last_seen[ch.machine_id] = i
        elif isinstance(ch, PutCounters):
            last_counters = i
        elif isinstance(ch, PruneMachinesSeen):
            last_prune = i
    out: list[Change] = []
    for i, ch in enumerate(changes):
        if isinstance(ch, PutTicket) and last_ticket[ch.ticket.ticket_id] != i:
            continue
        if isinstance(ch, PutMachineSeen) and last_seen[ch.machine_id] != i:
            continue
        if isinstance(ch, PutCounters) and i != last_counters:
            continue
        if isinstance(ch, PruneMachinesSeen) and i != last_prune:
            continue
        out.append(ch)
    return out
