"""The `detail` of each incident kind (msgspec Structs): the facts the engine records with it.

An `Incident` reply carries `detail` as a JSON object (`control_room.Incident`), decoded as it
was stored; these Structs say what it holds for each `kind`, and the OpenAPI document types
`Incident` from them (one schema per kind, the kind its constant). A key later versions added
may be absent from an incident an earlier version stored: such keys are `UNSET` (not
required). tests/integration/test_incident_details.py records every kind on a real server and
checks each detail is exactly its Struct.
"""

from __future__ import annotations

from typing import Final, Literal

from msgspec import UNSET, UnsetType

from coordinator.protocol.control_room import Collision
from coordinator.protocol.lane_replies import (
    CooldownReason,
    IncidentKind,
    InFlightEnd,
    Outcome,
    ReceiptPhase,
    ReleaseOutcome,
    Wire,
)


class CooldownStartedDetail(Wire, kw_only=True):
    """provider-cooldown-started: the lane paused until `until`."""

    reason_code: CooldownReason
    until: float
    retry_after_seconds: float


class CooldownExtendedDetail(Wire, kw_only=True):
    """provider-cooldown-extended: a longer report moved the pause's end to `until`."""

    reason_code: CooldownReason
    until: float
    extended_at: float | UnsetType = UNSET
    previous_until: float | UnsetType = UNSET
    started_at: float | UnsetType = UNSET
    retry_after_seconds: float | UnsetType = UNSET


class CooldownEndedDetail(Wire, kw_only=True):
    """provider-cooldown-ended: the pause that began at `startedAt` ended (the incident's
    `at` is its end)."""

    reason_code: CooldownReason
    started_at: float


class ReceiptHashMismatchDetail(Wire, kw_only=True):
    """receipt-hash-mismatch: a receipt stored with a contentHash that is not the hash of its
    payload's canonical JSON."""

    receipt_id: str
    phase: ReceiptPhase
    sent_hash: str
    computed_hash: str


class LeaseExpiredDetail(Wire, kw_only=True):
    """lease-expired: the alarm reaped a held lease (the incident's `at` is its end)."""

    fence: int


class WaiterAbandonedDetail(Wire, kw_only=True):
    """waiter-abandoned: a queued ticket's waiter sent no keep-alive for this long."""

    waiter_timeout_seconds: float


class LateReleaseDetail(Wire, kw_only=True):
    """late-release: the owner released a ticket whose lease had expired; what it reported."""

    late_outcome: ReleaseOutcome | None
    fence: int


class InFlightHeldDetail(Wire, kw_only=True):
    """in-flight-held: the ended ticket's provider job keeps a slot until `holdUntil`."""

    fence: int
    outcome: Outcome
    submitted_at: float
    hold_until: float


class InFlightEndedDetail(Wire, kw_only=True):
    """in-flight-ended: the hold ended before `holdUntil` (`ended`: how)."""

    fence: int
    ended: InFlightEnd
    hold_until: float


class InFlightExpiredDetail(Wire, kw_only=True):
    """in-flight-expired: the hold reached `holdUntil`."""

    fence: int
    ended: Literal["expired"]
    hold_until: float


# The detail of each kind; duplicate-collision's is the collision evidence shows.
DETAILS: Final[dict[IncidentKind, type[Wire]]] = {
    "provider-cooldown-started": CooldownStartedDetail,
    "provider-cooldown-extended": CooldownExtendedDetail,
    "provider-cooldown-ended": CooldownEndedDetail,
    "receipt-hash-mismatch": ReceiptHashMismatchDetail,
    "lease-expired": LeaseExpiredDetail,
    "waiter-abandoned": WaiterAbandonedDetail,
    "duplicate-collision": Collision,
    "late-release": LateReleaseDetail,
    "in-flight-held": InFlightHeldDetail,
    "in-flight-ended": InFlightEndedDetail,
    "in-flight-expired": InFlightExpiredDetail,
}
