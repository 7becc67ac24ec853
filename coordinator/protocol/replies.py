"""Replies (msgspec Structs): every reply body and every object nested in one.

The server encodes these and the client decodes them, so the two cannot disagree. camelCase on
the wire. Decoding is lenient the way a client needs: unknown fields are ignored and fields a
reply may lack have defaults. The server always sends every field except those whose default
is `UNSET` (the OpenAPI document marks the rest required).

Top-level replies of /v1 derive from `Reply` and carry `coordinator`: who answered —
"actor-sqlite" (this server), "actor-postgres" (replicas) or "local-sqlite" (the client's local
queue). The host fills it in: the lane core is built with it, the server's reads and errors
name the server's kind.

A few replies also carry values the client fills in after decoding (what it sent, the HTTP
status, unreadable receipt rows). They are attributes, never fields: they are not on the wire
and not in the schema, but `to_wire()` (the client's JSON view) shows them.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from coordinator.protocol.control_room import (
    Collision,
    CoordinatorEvidence,
    EvidenceReply,
    Incident,
    IncidentsReply,
    JobEvidence,
    JobIdentity,
    LaneHistory,
    LanesReply,
    LaneSummary,
    LogEntry,
    Machine,
    MachineSeen,
    MachinesReply,
    Overview,
    OverviewLane,
    OverviewLimits,
    OverviewLog,
    ReceiptSummary,
    WhoamiReply,
)
from coordinator.protocol.lane_replies import (
    UNKNOWN,
    CooldownReason,
    CooldownReply,
    CoordinatorKind,
    ErrorCode,
    EtaError,
    HeartbeatReason,
    HeartbeatReply,
    HistoryEntry,
    HistoryReply,
    IncidentKind,
    InFlightEnd,
    InFlightJob,
    LaneReply,
    Outcome,
    Owner,
    Pause,
    ReceiptPhase,
    ReceiptReply,
    ReceiptRow,
    ReconcileOutcome,
    ReconcileReply,
    ReleaseOutcome,
    ReleaseReason,
    ReleaseReply,
    Reply,
    StatusReply,
    Ticket,
    TicketState,
    Unknown,
    Wire,
)

# ---------------------------------------------------------------- errors and public paths


class ErrorDetail(Wire, kw_only=True):
    """The error's code and a message safe to show (it names the field or the rule)."""

    code: ErrorCode
    message: str
    supported: list[int] | UnsetType = UNSET  # unsupported-protocol: the versions spoken


class ErrorReply(Wire, kw_only=True):
    """Every error under /v1: it names the coordinator like every /v1 reply. `supported`
    only with unsupported-protocol."""

    coordinator: str
    error: ErrorDetail


class PlainErrorReply(Wire, kw_only=True):
    """Every error outside /v1 (the public paths and /metrics): no `coordinator`."""

    error: ErrorDetail


class Healthz(Wire, kw_only=True):
    """The process is alive (no queue data)."""

    ok: bool


class Readyz(Wire, kw_only=True):
    """The server can commit: its store is reachable and it is not shutting down (no queue
    data). `brokenLanes`: lanes whose file cannot be opened; they do not make it unready."""

    ready: bool
    broken_lanes: int


# Every reply the OpenAPI document publishes, by the status and route that answer it.
REPLIES: tuple[type[Wire], ...] = (
    LaneReply,
    HeartbeatReply,
    ReleaseReply,
    ReceiptReply,
    CooldownReply,
    ReconcileReply,
    StatusReply,
    HistoryReply,
    LanesReply,
    IncidentsReply,
    MachinesReply,
    EvidenceReply,
    Overview,
    WhoamiReply,
    ErrorReply,
    PlainErrorReply,
    Healthz,
    Readyz,
)

__all__ = [
    "REPLIES",
    "UNKNOWN",
    "Collision",
    "CooldownReason",
    "CooldownReply",
    "CoordinatorEvidence",
    "CoordinatorKind",
    "ErrorCode",
    "ErrorDetail",
    "ErrorReply",
    "EtaError",
    "EvidenceReply",
    "Healthz",
    "HeartbeatReason",
    "HeartbeatReply",
    "HistoryEntry",
    "HistoryReply",
    "InFlightEnd",
    "InFlightJob",
    "Incident",
    "IncidentKind",
    "IncidentsReply",
    "JobEvidence",
    "JobIdentity",
    "LaneHistory",
    "LaneReply",
    "LaneSummary",
    "LanesReply",
    "LogEntry",
    "Machine",
    "MachineSeen",
    "MachinesReply",
    "Outcome",
    "Overview",
    "OverviewLane",
    "OverviewLimits",
    "OverviewLog",
    "Owner",
    "Pause",
    "PlainErrorReply",
    "Readyz",
    "ReceiptPhase",
    "ReceiptReply",
    "ReceiptRow",
    "ReceiptSummary",
    "ReconcileOutcome",
    "ReconcileReply",
    "ReleaseOutcome",
    "ReleaseReason",
    "ReleaseReply",
    "Reply",
    "StatusReply",
    "Ticket",
    "TicketState",
    "Unknown",
    "WhoamiReply",
    "Wire",
]
