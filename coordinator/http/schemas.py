"""Request schemas (msgspec). Unknown fields are ignored; every limit is SPEC §4's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from coordinator import constants as C

Identity = Annotated[str, Meta(min_length=1, max_length=C.MAX_IDENTITY_CHARS)]
Lane = Annotated[str, Meta(min_length=3, max_length=129)]
# Patterns end in \Z, not $: "$" also matches before a trailing newline.
MachineId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,64}\Z")]
ClaimId = Annotated[str, Meta(min_length=1, max_length=C.MAX_CLAIM_CHARS)]
TicketId = Annotated[str, Meta(min_length=1, max_length=200)]
LeaseSeconds = Annotated[float, Meta(ge=C.MIN_LEASE_SECONDS, le=C.MAX_LEASE_SECONDS)]
WaitSeconds = Annotated[float, Meta(ge=C.MIN_AWAIT_SECONDS, le=C.MAX_AWAIT_SECONDS)]
RetryAfter = Annotated[float, Meta(ge=C.MIN_COOLDOWN_SECONDS, le=C.MAX_COOLDOWN_SECONDS)]
ContentHash = Annotated[str, Meta(pattern=r"^sha256:[0-9a-f]{64}\Z")]
HistoryLimit = Annotated[int, Meta(ge=1, le=C.MAX_HISTORY_LIMIT)]
ReleaseOutcome = Literal[
    "completed", "failed", "timeout", "lease-lost", "not-submitted", "slot-busy", "abandoned"
]
Phase = Literal["lease-acquired", "references-applied", "provider-submitted", "provider-terminal"]


class Base(msgspec.Struct, kw_only=True, rename="camel"):
    protocol_version: int
    lane: Lane


class Mutation(Base, kw_only=True):
    machine_id: MachineId
    claim_id: ClaimId | None = None


class AcquireBody(Mutation, kw_only=True):
    project: Identity
    scene: Identity
    prompt_hash: Identity
    lease_seconds: LeaseSeconds | None = None


class TicketBody(Mutation, kw_only=True):
    ticket_id: TicketId


class AwaitBody(TicketBody, kw_only=True):
    wait_seconds: WaitSeconds = C.DEFAULT_AWAIT_SECONDS


class HeartbeatBody(TicketBody, kw_only=True):
    lease_seconds: LeaseSeconds | None = None


class ReleaseBody(TicketBody, kw_only=True):
    outcome: ReleaseOutcome | None = None
    provider_job_id: Annotated[str, Meta(max_length=C.MAX_PROVIDER_JOB_CHARS)] | None = None
    note: Annotated[str, Meta(max_length=C.MAX_NOTE_CHARS)] | None = None


class ReceiptBody(TicketBody, kw_only=True):
    receipt_id: Annotated[str, Meta(min_length=1, max_length=400)]
    phase: Phase
    payload: dict[str, Any]
    content_hash: ContentHash


class CooldownBody(TicketBody, kw_only=True):
    reason_code: Literal["provider-human-check"]
    retry_after_seconds: RetryAfter


class StatusBody(Base, kw_only=True):
    machine_id: MachineId | None = None
    include_receipts: bool = False


class HistoryBody(Base, kw_only=True):
    limit: HistoryLimit = C.DEFAULT_HISTORY_LIMIT
    project: Identity | None = None
    machine_id: MachineId | None = None


SCHEMAS: dict[str, type[Base]] = {
    "acquire": AcquireBody,
    "await": AwaitBody,
    "heartbeat": HeartbeatBody,
    "release": ReleaseBody,
    "receipt": ReceiptBody,
    "status": StatusBody,
    "history": HistoryBody,
    "cooldown": CooldownBody,
}
