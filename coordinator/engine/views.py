"""Wire views of stored records (pure functions): protocol Structs built from core records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, cast

from coordinator.engine.eta_error import wait_seconds
from coordinator.engine.model import Incident, Receipt, Ticket
from coordinator.protocol import replies as wire
from coordinator.protocol.receipts import stored_payload


def _history_fields(t: Ticket) -> dict[str, Any]:
    wait = None if t.held_at is None else wait_seconds(t.enqueued_at, t.held_at)
    hold = None
    if t.held_at is not None and t.ended_at is not None:
        hold = max(0.0, t.ended_at - t.held_at)
    return {
        "ticket_id": t.ticket_id,
        "project": t.project,
        "scene": t.scene,
        "prompt_hash": t.prompt_hash,
        "machine_id": t.machine_id,
        "claim_id": t.claim_id,
        "outcome": t.outcome,
        "late_outcome": t.late_outcome,
        "provider_job_id": t.provider_job_id,
        "note": t.note,
        "enqueued_at": t.enqueued_at,
        "held_at": t.held_at,
        "ended_at": t.ended_at,
        "eta_first_seconds": t.eta_first_seconds,
        "wait_seconds": wait,
        "hold_seconds": None if hold is None else round(hold, 3),
        "fence": t.fence,
        "in_flight_until": t.in_flight_until,
        "in_flight_ended": t.in_flight_ended,
        "credential": t.credential,
        "released_by": t.released_by,
    }


def history_row(t: Ticket) -> wire.HistoryEntry:
    """A render-log row: a ticket that reached done or expired."""
    return wire.HistoryEntry(**_history_fields(t))


def log_row(lane: str, t: Ticket) -> wire.LogEntry:
    """A render-log row of the overview's merged log: a history row that names its lane."""
    return wire.LogEntry(lane=lane, **_history_fields(t))


def outcome_counts(rows: Iterable[wire.HistoryEntry]) -> dict[str, int]:
    """outcome -> number; a release with no outcome counts under "null"."""
    c = Counter("null" if r.outcome is None else r.outcome for r in rows)
    return dict(sorted(c.items()))


def _payload(r: Receipt) -> dict[str, Any]:
    """The stored canonical JSON of the payload; never raises: a row too deep to read back
    (stored before the nesting bound), not JSON or not an object reads as an `omitted` marker."""
    return stored_payload(r.payload_json)


def _receipt_fields(r: Receipt) -> dict[str, Any]:
    """A receipt's wire fields, all but its payload."""
    return {
        "receipt_id": r.receipt_id,
        "ticket_id": r.ticket_id,
        "phase": cast("wire.ReceiptPhase", r.phase),
        "machine_id": r.machine_id,
        "content_hash": r.content_hash,
        "content_hash_verified": r.content_hash_verified,
        "created_at": r.created_at,
        "credential": r.credential,
    }


def receipt_row(r: Receipt) -> wire.ReceiptRow:
    return wire.ReceiptRow(payload=_payload(r), **_receipt_fields(r))


def receipt_summary(r: Receipt) -> wire.ReceiptSummary:
    """A receipt row without its payload (the overview stays small; evidence has it)."""
    return wire.ReceiptSummary(**_receipt_fields(r))


def incident_row(lane: str, incident_id: int, i: Incident) -> wire.Incident:
    return wire.Incident(
        id=incident_id,
        lane=lane,
        kind=cast("wire.IncidentKind", i.kind),
        at=i.at,
        # Every incident the engine records names its ticket and machine; a row without (the
        # columns allow NULL; no version wrote one) reads "unknown", as evidence does.
        ticket_id=i.ticket_id if i.ticket_id is not None else wire.UNKNOWN,
        machine_id=i.machine_id if i.machine_id is not None else wire.UNKNOWN,
        detail=i.detail,
        credential=i.credential,
    )
