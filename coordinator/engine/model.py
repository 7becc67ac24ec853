"""Domain records of a lane: tickets, pauses, receipts, incidents, and the changes to persist."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast

from coordinator.protocol.replies import CooldownReason
from coordinator.protocol.replies import Pause as WirePause


class TicketState(StrEnum):
    QUEUED = "queued"
    HELD = "held"
    DONE = "done"
    EXPIRED = "expired"


LIVE_STATES = frozenset({TicketState.QUEUED, TicketState.HELD})
TERMINAL_STATES = frozenset({TicketState.DONE, TicketState.EXPIRED})


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LEASE_LOST = "lease-lost"
    NOT_SUBMITTED = "not-submitted"
    SLOT_BUSY = "slot-busy"
    ABANDONED = "abandoned"
    EXPIRED = "expired"  # set by the coordinator only, when the alarm reaps a lease


RELEASE_OUTCOMES = tuple(o.value for o in Outcome if o is not Outcome.EXPIRED)


class ReceiptPhase(StrEnum):
    LEASE_ACQUIRED = "lease-acquired"
    REFERENCES_APPLIED = "references-applied"
    PROVIDER_SUBMITTED = "provider-submitted"
    PROVIDER_TERMINAL = "provider-terminal"


class IncidentKind(StrEnum):
    COOLDOWN_STARTED = "provider-cooldown-started"
    COOLDOWN_EXTENDED = "provider-cooldown-extended"
    COOLDOWN_ENDED = "provider-cooldown-ended"
    RECEIPT_HASH_MISMATCH = "receipt-hash-mismatch"
    LEASE_EXPIRED = "lease-expired"
    WAITER_ABANDONED = "waiter-abandoned"
    DUPLICATE_COLLISION = "duplicate-collision"
    LATE_RELEASE = "late-release"
    IN_FLIGHT_HELD = "in-flight-held"
    IN_FLIGHT_ENDED = "in-flight-ended"
    IN_FLIGHT_EXPIRED = "in-flight-expired"


# A release with one of these outcomes leaves an in-flight job when the ticket's provider job
# may still run (docs/protocol.md#in-flight); a late release with one of the terminal ones ends
# the ticket's in-flight job.
IN_FLIGHT_OUTCOMES = frozenset({Outcome.LEASE_LOST.value, Outcome.TIMEOUT.value})
IN_FLIGHT_TERMINAL_OUTCOMES = frozenset(
    {
        Outcome.COMPLETED.value,
        Outcome.FAILED.value,
        Outcome.NOT_SUBMITTED.value,
        Outcome.SLOT_BUSY.value,
    }
)
RECONCILE_OUTCOMES = ("completed", "failed", "not-found")


@dataclass(slots=True)
class Ticket:
    ticket_id: str
    lane: str
    state: TicketState
    machine_id: str
    claim_id: str | None
    project: str
    scene: str
    prompt_hash: str
    seq: int
    enqueued_at: float
    lease_seconds: float
    last_seen_at: float
    held_at: float | None = None
    lease_expires_at: float | None = None
    heartbeat_at: float | None = None
    fence: int | None = None
    outcome: str | None = None
    late_outcome: str | None = None
    provider_job_id: str | None = None
    note: str | None = None
    ended_at: float | None = None
    # Receipts the in-flight rule reads (docs/protocol.md#in-flight): the createdAt of the
    # ticket's latest provider-submitted receipt and of its provider-terminal receipt, as
    # recorded while it was live.
    submitted_at: float | None = None
    terminal_at: float | None = None
    # The in-flight job the ticket left when it ended: its holdUntil, and how the hold ended
    # (None while it holds: "receipt", "reconciled:<outcome>" — a reconcile or a late
    # release — or "expired").
    in_flight_until: float | None = None
    in_flight_ended: str | None = None
    # The etaSeconds the acquire that created the ticket answered (0 when granted at once;
    # None for a ticket stored before it was recorded): its grant's ETA error
    # (docs/protocol.md#eta-error) is measured against it.
    eta_first_seconds: float | None = None
    # docs/protocol.md#credentials: the name of the credential whose acquire created the
    # ticket, and of the one whose release made it done (None: no release did)
    credential: str | None = None
    released_by: str | None = None

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.project, self.scene, self.prompt_hash)

    @property
    def holds_in_flight(self) -> bool:
        """The ticket ended and its in-flight job still takes a slot."""
        return self.in_flight_until is not None and self.in_flight_ended is None


@dataclass(slots=True, frozen=True)
class Pause:
    reason_code: str
    started_at: float
    until: float
    machine_id: str
    claim_id: str | None
    ticket_id: str
    credential: str | None = None  # the reporter's credential

    def wire(self) -> WirePause:
        return WirePause(
            reason_code=cast("CooldownReason", self.reason_code),
            started_at=self.started_at,
            until=self.until,
            machine_id=self.machine_id,
            claim_id=self.claim_id,
            ticket_id=self.ticket_id,
            credential=self.credential,
        )


@dataclass(slots=True, frozen=True)
class Receipt:
    receipt_id: str
    ticket_id: str
    phase: str
    machine_id: str
    payload_json: str  # the payload's canonical JSON (RFC 8785)
    content_hash: str
    content_hash_verified: bool | None
    created_at: float
    credential: str | None = None  # the writer's credential


@dataclass(slots=True, frozen=True)
class Incident:
    kind: str
    at: float
    ticket_id: str | None
    machine_id: str | None
    detail: dict[str, Any]
    credential: str | None = None  # the credential whose call caused it (None: the clock)


# ---- changes the store persists, in order, in one transaction ----


@dataclass(slots=True, frozen=True)
class PutTicket:
    """`by`: the credential whose call made this write (None: the lane's own rules did — a
    grant, a reap; the log line names it)."""

    ticket: Ticket
    by: str | None = None


@dataclass(slots=True, frozen=True)
class PutCounters:
    last_fence: int
    next_seq: int


@dataclass(slots=True, frozen=True)
class PutProjectServed:
    project: str
    fence: int
    at: float


@dataclass(slots=True, frozen=True)
class PutPause:
    pause: Pause | None


@dataclass(slots=True, frozen=True)
class PutReceipt:
    receipt: Receipt


@dataclass(slots=True, frozen=True)
class PutIncident:
    incident: Incident


@dataclass(slots=True, frozen=True)
class PruneHistory:
    """Delete the `excess` oldest render-log rows (and their receipts): `keep` remain.

    The core knows the exact count, so the store deletes by the log index from the old
    end — O(excess · log n), never a scan over the `keep` rows."""

    keep: int
    excess: int = 1


@dataclass(slots=True, frozen=True)
class PruneIncidents:
    keep: int
    excess: int = 1


@dataclass(slots=True, frozen=True)
class PutMachineSeen:
    """A machine seen on the lane (the evidence's machines seen): its row holds the later of
    its stored time and `at`. Written when the machine is new or its row is old
    (SEEN_WRITE_SECONDS), never on every call."""

    machine_id: str
    at: float


@dataclass(slots=True, frozen=True)
class PruneMachinesSeen:
    """Delete the machines-seen rows last seen before `before` (an hour ago): they can never
    be listed again."""

    before: float


Change = (
    PutTicket
    | PutCounters
    | PutProjectServed
    | PutPause
    | PutReceipt
    | PutIncident
    | PruneHistory
    | PruneIncidents
    | PutMachineSeen
    | PruneMachinesSeen
)


@dataclass(slots=True)
class Effects:
    """What one operation changed: rows to persist, and whom to wake."""

    changes: list[Change] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)  # tickets whose state changed
    pause_changed: bool = False
    promoted: list[str] = field(default_factory=list)
    # the seq of each ticket that left the queue (granted, or ended while queued): only a
    # queued ticket has parked awaits, here or on another replica
    dequeued: list[int] = field(default_factory=list)

    def extend(self, other: Effects) -> None:
        self.changes.extend(other.changes)
        self.woken |= other.woken
        self.dequeued.extend(other.dequeued)
        self.pause_changed = self.pause_changed or other.pause_changed
        self.promoted.extend(other.promoted)


@dataclass(slots=True)
class LaneSettings:
    capacity: int
    default_lease_seconds: float
    waiter_timeout_seconds: float
    default_hold_seconds: float
    history_retained: int
    incidents_retained: int
    # How long after its provider-submitted receipt an ended ticket's job may hold its slot
    # (docs/protocol.md#in-flight); 0: no holds (the local queue, unenforced lanes).
    in_flight_hold_seconds: float = 0.0


@dataclass(slots=True)
class LaneSnapshot:
    """What a store loads to rebuild a lane's in-memory state."""

    live: list[Ticket] = field(default_factory=list)
    in_flight: list[Ticket] = field(default_factory=list)  # ended tickets whose job holds
    last_fence: int = 0
    next_seq: int = 1
    project_served: dict[str, int] = field(default_factory=dict)
    pause: Pause | None = None
    # the lane's last measured holds (project, seconds), the oldest first (eta_estimate.py)
    recent_holds: list[tuple[str, float]] = field(default_factory=list)
    # the ETA errors of the lane's last grants (engine/eta_error.py), the oldest grant first
    recent_eta_errors: list[float] = field(default_factory=list)
    history_count: int = 0
    incident_count: int = 0
    last_collision: dict[str, Any] | None = None
    version: int = 0  # the lane's version when it was loaded (engine/store.py)
    last_now: float | None = None  # the latest `now` a finished transaction ran at
    # machine -> the time its machines-seen row holds (the rows of the hour before last_now)
    machines_seen: dict[str, float] = field(default_factory=dict)
