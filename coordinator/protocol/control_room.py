"""The control room's read replies (msgspec Structs): lanes, incidents, machines, evidence
and GET /v1/overview. `coordinator.protocol.replies` exports them with every other reply."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from coordinator.protocol.json_value import JsonObject
from coordinator.protocol.lane_replies import (
    EtaError,
    HistoryEntry,
    IncidentKind,
    InFlightJob,
    Outcome,
    Owner,
    Pause,
    ReceiptPhase,
    ReceiptRow,
    Reply,
    Ticket,
    TicketState,
    Unknown,
    Wire,
)

# ---------------------------------------------------------------- control-room reads


class LaneSummary(Wire, kw_only=True):
    """A known lane: its capacity (null: unenforced), held and queued counts, pause.
    `error` (absent when the lane is fine): why its file cannot be opened or read, e.g.
    "corrupt file (file is not a database)", "EMFILE", "ENOSPC", "edited migration"; the
    counts are then 0 and the lane's operations answer 503 `unavailable`."""

    lane: str
    enforced: bool
    capacity: int | None = None
    held: int
    queued: int
    pause: Pause | None = None
    error: str | UnsetType = UNSET


class LanesReply(Reply, kw_only=True):
    """Every lane with a file or a per-lane capacity, sorted by name."""

    lanes: list[LaneSummary]
    now: float


class Incident(Wire, kw_only=True):
    """Something that happened in a lane: a reaped lease, an abandoned waiter, a late release,
    a duplicate collision, a receipt hash mismatch, a cooldown started, extended or ended.
    `detail` holds the facts of its kind."""

    id: int
    lane: str
    kind: IncidentKind
    at: float
    ticket_id: str
    machine_id: str
    detail: JsonObject = msgspec.field(default_factory=dict)  # incident_details.DETAILS
    # the name of the credential whose call caused it (null: the lane's clock did)
    credential: str | None = None


class IncidentsReply(Reply, kw_only=True):
    """Incidents, newest first."""

    incidents: list[Incident]


class Machine(Wire, kw_only=True):
    """A computer that made an authenticated call naming it (stored: seen in the last hour)."""

    machine_id: str
    last_seen_at: float
    online: bool
    seconds_since_seen: float
    lanes: list[str] = msgspec.field(default_factory=list)


class MachinesReply(Reply, kw_only=True):
    """The computers seen in the last hour (at most 1,000), most recently seen first."""

    machines: list[Machine]
    now: float


class MachineSeen(Wire, kw_only=True):
    """A computer that called the lane, and when it did last."""

    machine_id: str
    last_seen_at: float


class Collision(Wire, kw_only=True):
    """Two owners converging on one ticket (a duplicate acquire from another owner)."""

    at: float
    ticket_id: str
    project: str
    scene: str
    prompt_hash: str
    owner: Owner
    requester: Owner
    granted: bool


class CoordinatorEvidence(Wire, kw_only=True):
    """The machines that called the lane in the last hour, and its latest collision."""

    machines_seen: list[MachineSeen] = msgspec.field(default_factory=list)
    distinct_machines: int = 0
    collision: Collision | None = None


class JobIdentity(Wire, kw_only=True):
    """The ticket's request identity and owner."""

    project: str
    scene: str
    prompt_hash: str
    machine_id: str
    claim_id: str | None = None
    credential: str | None = None  # the name of the credential whose acquire created it


class JobEvidence(Wire, kw_only=True):
    """Evidence about one exact ticket. A ticket the coordinator has no record of reads
    `found: false`, identity "unknown", every phase "unknown", and has no state, outcome or
    fence keys."""

    ticket_id: str
    found: bool
    identity: JobIdentity | Unknown
    state: TicketState | UnsetType = UNSET
    outcome: Outcome | UnsetType | None = UNSET
    fence: int | UnsetType | None = UNSET
    receipts: dict[str, list[ReceiptRow] | Unknown]
    complete: bool


class EvidenceReply(Reply, kw_only=True):
    """Coordinator evidence about a lane; job evidence about one exact ticket (null when no
    ticketId was asked for)."""

    lane: str
    enforced: bool
    coordinator_evidence: CoordinatorEvidence
    job_evidence: JobEvidence | None = None
    now: float


class WhoamiReply(Reply, kw_only=True):
    """The credential this request presented: its name, role and machine (never its secret).
    `canWrite`: its role may change lanes (driver, admin); the control room warns when so."""

    name: str
    role: Literal["reader", "driver", "admin"]
    machine: str | None = None
    can_write: bool


# ---------------------------------------------------------------- GET /v1/overview


class LaneHistory(Wire, kw_only=True):
    """The lane's newest render-log rows (at most `history`) and how many it keeps."""

    entries: list[HistoryEntry]
    retained: int


class ReceiptSummary(Wire, kw_only=True):
    """A receipt without its payload (GET /v1/evidence shows a ticket's payloads)."""

    receipt_id: str
    ticket_id: str
    phase: ReceiptPhase
    machine_id: str
    content_hash: str
    content_hash_verified: bool | None
    created_at: float
    credential: str | None = None  # the name of the credential that wrote it


class OverviewLane(Wire, kw_only=True):
    """One known lane: its status (held, queued in promotion order, in-flight jobs, the ETA
    error) and bounded reads."""

    lane: str
    enforced: bool
    capacity: int | None
    held: list[Ticket]
    queued: list[Ticket]
    queued_total: int
    pause: Pause | None
    now: float
    in_flight: list[InFlightJob] = msgspec.field(default_factory=list)
    eta_error: EtaError | None = None
    history: LaneHistory
    recent_receipts: list[ReceiptSummary]
    receipt_mismatches: list[ReceiptSummary]
    projects: list[str]


class LogEntry(HistoryEntry, kw_only=True):
    """A render-log row of the overview's merged log: it names its lane."""

    lane: str


class OverviewLog(Wire, kw_only=True):
    """The render log of `lane` (every lane when null), filtered by `project`, newest first;
    `counts` is over these rows, `retained` over the lanes it covers."""

    lane: str | None
    project: str | None
    entries: list[LogEntry]
    counts: dict[str, int]
    retained: int
    retained_limit: int


class OverviewLimits(Wire, kw_only=True):
    """The limits this reply was read with (the query's, or their defaults)."""

    history: int
    queued: int
    receipts: int
    incidents: int
    limit: int


class Overview(Reply, kw_only=True):
    """The control room's whole periodic refresh in one bounded read."""

    now: float
    limits: OverviewLimits
    lanes: list[OverviewLane]
    incidents: list[Incident]
    machines: list[Machine]
    log: OverviewLog
