"""The writes of a PostgreSQL lane store: each `Change` of the engine as SQL on the lane's
rows (upserts, the pause, counters, project served, receipts, incidents numbered per lane,
prunes of the history and the incidents by exact excess)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from coordinator.engine.model import (
    Change,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
)
from coordinator.store.postgres_db import Conn

TICKET_COLUMNS = (
    "ticket_id, seq, state, machine_id, claim_id, project, scene, prompt_hash, enqueued_at, "
    "lease_seconds, last_seen_at, held_at, lease_expires_at, heartbeat_at, fence, outcome, "
    "late_outcome, provider_job_id, note, ended_at"
)
TICKET_UPSERT = (
    f"INSERT INTO tickets (lane, {TICKET_COLUMNS}) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (lane, ticket_id) DO UPDATE SET state = excluded.state, "
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
_OLDESTENDED = (
    f"SELECT ticket_id FROM tickets WHERE lane = %s AND {ENDED} "
    "ORDER BY ended_at ASC, seq ASC LIMIT %s"
)


def write_changes(db: Conn, lane: str, changes: Sequence[Change]) -> None:
    """Write each change of one lane (the caller holds the lane's transaction), superseded
    ticket and counter writes dropped; the same semantics as the SQLite store's apply."""
    for ch in coalesce(changes):
        if isinstance(ch, PutTicket):
            t = ch.ticket
            db.execute(
                TICKET_UPSERT,
                (
                    lane,
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
                ),
            )
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
                p = ch.pause
                db.execute(
                    "INSERT INTO pauses (lane, reason_code, started_at, until, machine_id, "
                    "claim_id, ticket_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        lane,
                        p.reason_code,
                        p.started_at,
                        p.until,
                        p.machine_id,
                        p.claim_id,
                        p.ticket_id,
                    ),
                )
        elif isinstance(ch, PutReceipt):
            r = ch.receipt
            db.execute(
                f"INSERT INTO receipts (lane, {RECEIPT_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    lane,
                    r.receipt_id,
                    r.ticket_id,
                    r.phase,
                    r.machine_id,
                    r.payload_json,
                    r.content_hash,
                    r.content_hash_verified,
                    r.created_at,
                ),
            )
        elif isinstance(ch, PutIncident):
            i = ch.incident
            db.execute(
                "WITH n AS (UPDATE lanes SET last_incident = last_incident + 1 "
                "WHERE lane = %s RETURNING last_incident) "
                "INSERT INTO incidents (lane, id, kind, at, ticket_id, machine_id, detail) "
                "SELECT %s, n.last_incident, %s, %s, %s, %s, %s FROM n",
                (
                    lane,
                    lane,
                    i.kind,
                    i.at,
                    i.ticket_id,
                    i.machine_id,
                    json.dumps(i.detail, separators=(",", ":"), sort_keys=True),
                ),
            )
        elif isinstance(ch, PruneHistory):
            db.execute(
                f"WITH old AS ({_OLDESTENDED}), "
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


def coalesce(changes: Sequence[Change]) -> list[Change]:
    """Drop ticket/counter writes superseded later in the same batch (fewer statements); the
    same rule as the SQLite store's."""
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
