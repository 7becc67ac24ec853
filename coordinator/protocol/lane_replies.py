"""Replies (msgspec Structs): the base classes and the lane operations' replies (tickets and
lanes). `coordinator.protocol.replies` exports every reply, these and the others, and says
how they are encoded and decoded (camelCase, lenient decoding, `coordinator`, client-side
attributes).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from coordinator.protocol.json_value import JsonObject

TicketState = Literal["queued", "held", "done", "expired"]
ReceiptPhase = Literal[
    "lease-acquired", "references-applied", "provider-submitted", "provider-terminal"
]
ReleaseOutcome = Literal[
    "completed", "failed", "timeout", "lease-lost", "not-submitted", "slot-busy", "abandoned"
]
# A ticket's outcome: what its release said, or "expired" when the alarm reaped its lease.
Outcome = Literal[
    "completed",
    "failed",
    "timeout",
    "lease-lost",
    "not-submitted",
    "slot-busy",
    "abandoned",
    "expired",
]
IncidentKind = Literal[
    "provider-cooldown-started",
    "provider-cooldown-extended",
    "provider-cooldown-ended",
    "receipt-hash-mismatch",
    "lease-expired",
    "waiter-abandoned",
    "duplicate-collision",
    "late-release",
    "in-flight-held",
    "in-flight-ended",
    "in-flight-expired",
]
ReconcileOutcome = Literal["completed", "failed", "not-found"]
# How a ticket's in-flight job ended (docs/protocol.md#in-flight): its provider-terminal
# receipt, a reconcile or a late release that said how the job ended, or the alarm.
InFlightEnd = Literal[
    "receipt",
    "expired",
    "reconciled:completed",
    "reconciled:failed",
    "reconciled:not-found",
    "reconciled:not-submitted",
    "reconciled:slot-busy",
]
CooldownReason = Literal["provider-human-check"]
# Who answered (`Reply.coordinator`): this server on SQLite, replicas on PostgreSQL, the
# client's local queue (coordinator.protocol.constants names each; a test keeps them equal).
CoordinatorKind = Literal["actor-sqlite", "actor-postgres", "local-sqlite"]
HeartbeatReason = Literal["not-held", "expired", "done", "not-owner"]
ReleaseReason = Literal["expired", "already-done", "not-owner"]
ErrorCode = Literal[
    "bad-request",
    "unsupported-protocol",
    "unauthorized",
    "not-owner",
    "not-holder",
    "role-forbidden",
    "machine-mismatch",
    "not-found",
    "method-not-allowed",
    "ticket-not-held",
    "receipt-conflict",
    "not-in-flight",
    "payload-too-large",
    "unsupported-media-type",
    "unavailable",
]
UNKNOWN: Final = "unknown"  # what evidence reads where the coordinator has no record
Unknown = Literal["unknown"]


class Wire(msgspec.Struct, kw_only=True, rename="camel"):
    def to_wire(self) -> dict[str, Any]:
        """The object as the camelCase JSON it is on the wire."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class Reply(Wire, kw_only=True):
    """A /v1 reply: it names the kind of coordinator that answered. The field reads any
    string (a client names the kind it refuses: docs/client.md); what a coordinator sends is
    one of `CoordinatorKind`, and the OpenAPI document says so."""

    coordinator: str


# ---------------------------------------------------------------- tickets and lanes


class Owner(Wire, kw_only=True):
    """A ticket's owner: the (machineId, claimId) of the acquire that created it."""

    machine_id: str
    claim_id: str | None = None


class Pause(Wire, kw_only=True):
    """The lane's active provider cooldown: nothing is promoted until `until`."""

    reason_code: CooldownReason
    started_at: float
    until: float
    machine_id: str
    claim_id: str | None = None
    ticket_id: str
    credential: str | None = None  # the name of the credential that reported it


class Ticket(Wire, kw_only=True):
    """A ticket as every reply shows it (null where not applicable)."""

    ticket_id: str
    lane: str
    state: TicketState
    machine_id: str
    claim_id: str | None = None
    project: str
    scene: str
    prompt_hash: str
    position: int | None = None
    eta_seconds: float | None = None
    enqueued_at: float
    held_at: float | None = None
    lease_expires_at: float | None = None
    heartbeat_at: float | None = None
    fence: int | None = None
    credential: str | None = None  # the name of the credential whose acquire created it


class LaneReply(Reply, kw_only=True):
    """acquire and await: the ticket, whether the caller holds it, its owner, the lane's pause."""

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


class HeartbeatReply(Reply, kw_only=True):
    """A heartbeat: the lease refreshed, or `reason` (not-held, expired, done, not-owner)."""

    refreshed: bool
    state: TicketState
    lease_expires_at: float | None = None
    fence: int | None = None
    reason: HeartbeatReason | None = None


class ReleaseReply(Reply, kw_only=True):
    """A release: the ticket ended and `promoted` were granted, or `reason` (expired,
    already-done, not-owner)."""

    released: bool
    state: TicketState
    outcome: Outcome | None = None
    promoted: list[str] = msgspec.field(default_factory=list)
    reason: ReleaseReason | None = None


class ReconcileReply(Reply, kw_only=True):
    """A reconcile: the ticket's in-flight job ended and `promoted` were granted."""

    reconciled: bool
    promoted: list[str] = msgspec.field(default_factory=list)


class InFlightJob(Wire, kw_only=True):
    """A provider job that may still run on the account after its ticket ended: it takes a
    slot until `holdUntil` (docs/protocol.md#in-flight)."""

    ticket_id: str
    fence: int | None = None
    machine_id: str
    claim_id: str | None = None
    project: str
    scene: str
    submitted_at: float
    since: float
    hold_until: float
    credential: str | None = None  # the ticket's (its acquire's credential)


class EtaError(Wire, kw_only=True):
    """How far the lane's ETAs were off (docs/protocol.md#eta-error): over its last `grants`
    grants (at most 100), the median and the 90th percentile (nearest rank) of
    |etaFirstSeconds − waitSeconds|, each grant's first ETA against the wait it had."""

    grants: int
    median_seconds: float
    p90_seconds: float


class ReceiptReply(Reply, kw_only=True, dict=True):
    """A receipt write: stored (201), or not stored (200: a replay, with the stored verdict,
    or an unenforced lane)."""

    # Not on the wire: the client records what it sent (`receipt_id`, `content_hash`) and the
    # HTTP status (201 stored, 200 not) as attributes; `to_wire()` shows them.
    stored: bool
    replay: bool
    content_hash_verified: bool | None = None

    @property
    def receipt_id(self) -> str:
        value: str = self.__dict__.get("receipt_id", "")
        return value

    @receipt_id.setter
    def receipt_id(self, value: str) -> None:
        self.__dict__["receipt_id"] = value

    @property
    def content_hash(self) -> str:
        value: str = self.__dict__.get("content_hash", "")
        return value

    @content_hash.setter
    def content_hash(self, value: str) -> None:
        self.__dict__["content_hash"] = value

    @property
    def http_status(self) -> int:
        value: int = self.__dict__.get("http_status", 0)
        return value

    @http_status.setter
    def http_status(self, value: int) -> None:
        self.__dict__["http_status"] = value

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        out.update(
            receiptId=self.receipt_id, contentHash=self.content_hash, httpStatus=self.http_status
        )
        return out


class CooldownReply(Reply, kw_only=True):
    """A cooldown report: the lane's pause (started, or `extended` to a later `until`)."""

    paused: bool
    extended: bool = False
    pause: Pause | None = None


class ReceiptRow(Wire, kw_only=True):
    """A stored receipt."""

    receipt_id: str
    ticket_id: str
    phase: ReceiptPhase
    machine_id: str
    payload: JsonObject  # as stored: its canonical JSON decoded
    content_hash: str
    content_hash_verified: bool | None
    created_at: float
    credential: str | None = None  # the name of the credential that wrote it


class StatusReply(Reply, kw_only=True, dict=True):
    """A lane's held tickets (by fence) and queued ones (in promotion order, at most 200;
    `queuedTotal` counts them all), the in-flight jobs that take slots too (`inFlight`, by
    holdUntil), how far the lane's ETAs were off (`etaError`, null before its first grant and
    on an unenforced lane). `recentReceipts` (newest first, at most 50) only with
    `includeReceipts: true` on an enforced lane."""

    # In Python, `recent_receipts` reads None when the key is absent; `unreadable_receipts` is
    # the client's count of rows it could not read (an attribute, not on the wire).
    lane: str
    enforced: bool
    capacity: int | None = None
    held: list[Ticket]
    queued: list[Ticket]
    queued_total: int
    pause: Pause | None = None
    now: float
    in_flight: list[InFlightJob] = msgspec.field(default_factory=list)
    eta_error: EtaError | None = None
    receipts: list[ReceiptRow] | UnsetType = msgspec.field(default=UNSET, name="recentReceipts")

    @property
    def recent_receipts(self) -> list[ReceiptRow] | None:
        return None if isinstance(self.receipts, UnsetType) else self.receipts

    @recent_receipts.setter
    def recent_receipts(self, rows: list[ReceiptRow] | None) -> None:
        self.receipts = UNSET if rows is None else rows

    @property
    def unreadable_receipts(self) -> int | None:
        value: int | None = self.__dict__.get("unreadable_receipts")
        return value

    @unreadable_receipts.setter
    def unreadable_receipts(self, value: int | None) -> None:
        self.__dict__["unreadable_receipts"] = value

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        if self.recent_receipts is not None:
            out["unreadableReceipts"] = self.unreadable_receipts
        return out


class HistoryEntry(Wire, kw_only=True):
    """A render-log row: a ticket that reached done or expired (`lateOutcome`: what a release
    after the lease expired reported; `etaFirstSeconds`: the ETA the acquire that created it
    answered, 0 when granted at once, null for a ticket older than that record;
    `waitSeconds`: heldAt − enqueuedAt; `inFlightUntil` / `inFlightEnded`: the in-flight job
    it left, and how that ended — null while it holds; `credential` / `releasedBy`: the
    credential that acquired it and the one whose release made it done)."""

    ticket_id: str
    project: str
    scene: str
    prompt_hash: str
    machine_id: str
    claim_id: str | None = None
    outcome: Outcome | None = None
    late_outcome: ReleaseOutcome | None = None
    provider_job_id: str | None = None
    note: str | None = None
    enqueued_at: float
    held_at: float | None = None
    ended_at: float
    eta_first_seconds: float | None = None
    wait_seconds: float | None = None
    hold_seconds: float | None = None
    fence: int | None = None
    in_flight_until: float | None = None
    in_flight_ended: InFlightEnd | None = None
    # docs/protocol.md#credentials: the credential whose acquire created the ticket, and the
    # one whose release made it done (null: the coordinator ended it, or no release did)
    credential: str | None = None
    released_by: str | None = None


class HistoryReply(Reply, kw_only=True):
    """The render log, newest first; `counts` is outcome -> number over these entries."""

    lane: str
    enforced: bool = True
    entries: list[HistoryEntry]
    counts: dict[str, int] = msgspec.field(default_factory=dict)
    retained: int = 0
    retained_limit: int
