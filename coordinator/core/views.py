"""Wire views of stored records (pure functions)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from coordinator.core.model import Incident, Receipt, Ticket


def history_row(t: Ticket) -> dict[str, Any]:
    wait = None if t.held_at is None else max(0.0, t.held_at - t.enqueued_at)
    hold = None
    if t.held_at is not None and t.ended_at is not None:
        hold = max(0.0, t.ended_at - t.held_at)
    return {
        "ticketId": t.ticket_id,
        "project": t.project,
        "scene": t.scene,
        "promptHash": t.prompt_hash,
        "machineId": t.machine_id,
        "claimId": t.claim_id,
        "outcome": t.outcome,
        "lateOutcome": t.late_outcome,
        "providerJobId": t.provider_job_id,
        "note": t.note,
        "enqueuedAt": t.enqueued_at,
        "heldAt": t.held_at,
        "endedAt": t.ended_at,
        "waitSeconds": None if wait is None else round(wait, 3),
        "holdSeconds": None if hold is None else round(hold, 3),
        "fence": t.fence,
    }


def outcome_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """outcome -> number; a release with no outcome counts under "null"."""
    c = Counter("null" if r["outcome"] is None else r["outcome"] for r in rows)
    return dict(sorted(c.items()))


def receipt_row(r: Receipt) -> dict[str, Any]:
    try:
        payload: Any = json.loads(r.payload_json)
    except ValueError:
        payload = None
    return {
        "receiptId": r.receipt_id,
        "ticketId": r.ticket_id,
        "phase": r.phase,
        "machineId": r.machine_id,
        "payload": payload,
        "contentHash": r.content_hash,
        "contentHashVerified": r.content_hash_verified,
        "createdAt": r.created_at,
    }


def incident_row(lane: str, incident_id: int, i: Incident) -> dict[str, Any]:
    return {
        "id": incident_id,
        "lane": lane,
        "kind": i.kind,
        "at": i.at,
        "ticketId": i.ticket_id,
        "machineId": i.machine_id,
        "detail": i.detail,
    }
