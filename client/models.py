"""Typed replies (msgspec Structs). camelCase on the wire; unknown fields are ignored, a missing
required field or a wrong type is a malformed reply."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

TicketState = Literal["queued", "held", "done", "expired"]
ReceiptPhase = Literal[
    "lease-acquired", "references-applied", "provider-submitted", "provider-terminal"
]


class _Wire(msgspec.Struct, kw_only=True, rename="camel"):
    def to_wire(self) -> dict[str, Any]:
        """The reply as the camelCase JSON object it came from."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class Owner(_Wire, kw_only=True):
    machine_id: str | None
    claim_id: str | None = None


class Pause(_Wire, kw_only=True):
    reason_code: str
    started_at: float
    until: float
    machine_id: str
    claim_id: str | None = None
    ticket_id: str


class Ticket(_Wire, kw_only=True):
    ticket_id: str
    lane: str
    state: TicketState
    machine_id: str | None = None
    claim_id: str | None = None
    project: str | None = None
    scene: str | None = None
    prompt_hash: str | None = None
    position: int | None = None
    eta_seconds: float | None = None
    enqueued_at: float | None = None
    held_at: float | None = None
    lease_expires_at: float | None = None
    heartbeat_at: float | None = None
    fence: int | None = None


class LaneReply(_Wire, kw_only=True):
    """acquire and await (SPEC §4.1, §4.2)."""

    coordinator: str
    lane: str
    enforced: bool
    ticket: Ticket
    granted: bool
    duplicate: bool = False
    owner: Owner
    pause: Pause | None = None

    @property
    def ticket_id(self) -> str:
        return self.ticket.ticket_id

    @property
    def state(self) -> str:
        return self.ticket.state


class HeartbeatReply(_Wire, kw_only=True):
    coordinator: str
    refreshed: bool
    state: TicketState
    lease_expires_at: float | None = None
    fence: int | None = None
    reason: str | None = None


class ReleaseReply(_Wire, kw_only=True):
    coordinator: str
    released: bool
    state: TicketState
    outcome: str | None = None
    promoted: list[str] = msgspec.field(default_factory=list)
    reason: str | None = None


class ReceiptReply(_Wire, kw_only=True):
    coordinator: str
    stored: bool
    replay: bool
    content_hash_verified: bool | None = None
    # Filled in by the client (not on the wire): what was sent.
    receipt_id: str = ""
    content_hash: str = ""
    http_status: int = 0


class CooldownReply(_Wire, kw_only=True):
    coordinator: str
    paused: bool
    extended: bool = False
    pause: Pause | None = None


class ReceiptRow(_Wire, kw_only=True):
    receipt_id: str
    ticket_id: str
    phase: ReceiptPhase
    machine_id: str
    payload: dict[str, Any]
    content_hash: str
    content_hash_verified: bool | None
    created_at: float


class StatusReply(_Wire, kw_only=True):
    coordinator: str
    lane: str
    enforced: bool
    capacity: int | None = None
    held: list[Ticket]
    queued: list[Ticket]
    queued_total: int | None = None
    pause: Pause | None = None
    now: float
    # Absent (None) when the coordinator sent no receipt keys: the local queue, an
    # unenforced lane, or a status call without includeReceipts.
    recent_receipts: list[ReceiptRow] | None = None
    # Rows the coordinator sent that this client could not read (skipped); 0 = complete trail.
    unreadable_receipts: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        if self.recent_receipts is None:
            out.pop("recentReceipts", None)
            out.pop("unreadableReceipts", None)
        return out


class HistoryEntry(_Wire, kw_only=True):
    ticket_id: str
    project: str
    scene: str
    prompt_hash: str
    machine_id: str
    claim_id: str | None = None
    outcome: str | None = None
    late_outcome: str | None = None
    provider_job_id: str | None = None
    note: str | None = None
    enqueued_at: float
    held_at: float | None = None
    ended_at: float | None = None
    wait_seconds: float | None = None
    hold_seconds: float | None = None
    fence: int | None = None


class HistoryReply(_Wire, kw_only=True):
    coordinator: str
    lane: str
    enforced: bool = True
    entries: list[HistoryEntry]
    counts: dict[str, int] = msgspec.field(default_factory=dict)
    retained: int = 0
    retained_limit: int | None = None


class LaneSummary(_Wire, kw_only=True):
    lane: str
    enforced: bool
    capacity: int | None = None
    held: int
    queued: int
    pause: Pause | None = None


class LanesReply(_Wire, kw_only=True):
    coordinator: str
    lanes: list[LaneSummary]
    now: float | None = None


class Incident(_Wire, kw_only=True):
    id: int
    lane: str
    kind: str
    at: float
    ticket_id: str | None = None
    machine_id: str | None = None
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class IncidentsReply(_Wire, kw_only=True):
    coordinator: str
    incidents: list[Incident]


class Machine(_Wire, kw_only=True):
    machine_id: str
    last_seen_at: float
    online: bool
    seconds_since_seen: float | None = None
    lanes: list[str] = msgspec.field(default_factory=list)


class MachinesReply(_Wire, kw_only=True):
    coordinator: str
    machines: list[Machine]
    now: float | None = None


class EvidenceReply(_Wire, kw_only=True):
    """Evidence shapes vary by kind ("unknown" strings vs lists), so they stay plain JSON."""

    coordinator: str
    lane: str
    enforced: bool
    coordinator_evidence: dict[str, Any]
    job_evidence: dict[str, Any] | None = None
    now: float | None = None
