"""Commands the lane core accepts, already validated by the caller's schema layer.

`credential`: the name of the credential the call presented (docs/protocol.md#credentials),
recorded with what the call writes; None where there is none (the client's local queue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Acquire:
    machine_id: str
    claim_id: str | None
    project: str
    scene: str
    prompt_hash: str
    lease_seconds: float | None
    new_ticket_id: str  # minted by the caller; used only when a new ticket is created
    credential: str | None = None


@dataclass(slots=True, frozen=True)
class TicketCall:
    """await / heartbeat / release / cooldown name one exact ticket."""

    machine_id: str
    claim_id: str | None
    ticket_id: str
    credential: str | None = None


@dataclass(slots=True, frozen=True)
class Heartbeat:
    call: TicketCall
    lease_seconds: float | None


@dataclass(slots=True, frozen=True)
class Release:
    call: TicketCall
    outcome: str | None
    provider_job_id: str | None
    note: str | None


@dataclass(slots=True, frozen=True)
class Cooldown:
    call: TicketCall
    reason_code: str
    retry_after_seconds: float


@dataclass(slots=True, frozen=True)
class RecordReceipt:
    machine_id: str
    claim_id: str | None
    ticket_id: str
    receipt_id: str
    phase: str
    payload_json: str  # canonical JSON (RFC 8785) of the payload
    content_hash: str  # as sent
    computed_hash: str  # sha256:<hex> over payload_json
    credential: str | None = None


@dataclass(slots=True, frozen=True)
class Reconcile:
    """End the in-flight job of an ended ticket by hand (docs/protocol.md#reconcile)."""

    call: TicketCall
    outcome: str  # completed, failed, not-found
    provider_job_id: str | None
    note: str | None
    admin: bool = False  # an admin credential: any machine's ticket (the owner rule waived)
