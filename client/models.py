"""Typed replies: the protocol's own Structs (`coordinator.protocol.replies`), which the
coordinator encodes and this client decodes. Re-exported here under the names client code has
always imported. camelCase on the wire; unknown fields are ignored, a missing required field or
a wrong type is a malformed reply."""

from __future__ import annotations

from coordinator.protocol.replies import (
    Collision,
    CooldownReply,
    CoordinatorEvidence,
    EvidenceReply,
    HeartbeatReply,
    HistoryEntry,
    HistoryReply,
    Incident,
    IncidentsReply,
    JobEvidence,
    JobIdentity,
    LaneReply,
    LanesReply,
    LaneSummary,
    Machine,
    MachineSeen,
    MachinesReply,
    Owner,
    Pause,
    ReceiptPhase,
    ReceiptReply,
    ReceiptRow,
    ReleaseReply,
    Reply,
    StatusReply,
    Ticket,
    TicketState,
    Wire,
)

_Wire = Wire  # the base every model derives from (its name before the protocol package)

__all__ = [
    "Collision",
    "CooldownReply",
    "CoordinatorEvidence",
    "EvidenceReply",
    "HeartbeatReply",
    "HistoryEntry",
    "HistoryReply",
    "Incident",
    "IncidentsReply",
    "JobEvidence",
    "JobIdentity",
    "LaneReply",
    "LaneSummary",
    "LanesReply",
    "Machine",
    "MachineSeen",
    "MachinesReply",
    "Owner",
    "Pause",
    "ReceiptPhase",
    "ReceiptReply",
    "ReceiptRow",
    "ReleaseReply",
    "Reply",
    "StatusReply",
    "Ticket",
    "TicketState",
    "Wire",
]
