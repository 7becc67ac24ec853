"""Every lane operation, written once for every host (the server's lane actor, the client's
local queue).

An operation is pure: `needs(core)` says which store reads it wants (given the lane's state
after `advance(now)`), the host performs them (`Reads.perform`: on the actor's store thread,
or in the local queue's own thread, inside its lane transaction), then `run(core, now,
reads)` returns the reply, the effects to persist and, for `await`, the ticket to park on.

A host runs an operation like this (engine/store.py has the store side):

    now = lane_now(clock, lane.last_now); fx = core.advance(now)  # persisted even if refused
    reads = Reads.perform(store, op.needs(core))  # after fx is applied: reads see it
    result = op.run(core, now, reads)             # may raise a LaneError (nothing changed)

A lane that has no store yet is answered by `detached` from an empty core, with no reads and
nothing persisted: only an operation with `creates` (acquire) makes a lane.

A ticket operation that is answered (not refused) also writes the machines-seen rows that are
due (`answered`: a new machine, or a row older than SEEN_WRITE_SECONDS), so the evidence's
machines seen survive the lane's close and a restart, and every replica loads them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

import msgspec

from coordinator.constants import EVIDENCE_RECENT_SECONDS, MACHINES_LISTED_MAX
from coordinator.engine import commands
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Effects, LaneSettings, LaneSnapshot, ReceiptPhase, Ticket
from coordinator.engine.store import NO_NEEDS, Needs, Reads
from coordinator.engine.views import history_row, outcome_counts, receipt_row
from coordinator.protocol import replies as wire
from coordinator.protocol.replies import UNKNOWN

R = TypeVar("R")


@dataclass(slots=True)
class Result(Generic[R]):
    """An operation's reply, what it changed, and (await) the ticket to park on."""

    reply: R
    fx: Effects = field(default_factory=Effects)
    park: str | None = None


class Operation(Protocol[R]):
    """One lane operation: what it reads, then its pure part."""

    @property
    def creates(self) -> bool:
        """Whether the operation makes the lane exist (only acquire does)."""
        ...

    def needs(self, core: LaneCore) -> Needs: ...

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[R]: ...


def detached(
    op: Operation[R], lane: str, settings: LaneSettings, now: float, coordinator: str
) -> R:
    """The reply for a lane with no store yet: an empty core, nothing read or persisted.
    A call on a ticket raises the core's not-found, as on a lane that exists."""
    core = LaneCore(lane, settings, LaneSnapshot(), now, coordinator=coordinator)
    return op.run(core, now, Reads()).reply


def answered(core: LaneCore, now: float, fx: Effects) -> Effects:
    """An answered ticket operation's effects, with the machines-seen rows now due."""
    core.flush_seen(fx, now)
    return fx


def _known(core: LaneCore, ticket_id: str) -> bool:
    """The core holds the ticket: live, or ended with an in-flight job."""
    return ticket_id in core.live or ticket_id in core.in_flight


def _ended(core: LaneCore, ticket_id: str) -> Needs:
    """A ticket call reads the ticket from the store only once the core no longer holds it."""
    return NO_NEEDS if _known(core, ticket_id) else Needs(ticket=ticket_id)


# ---------------------------------------------------------------- ticket operations


@dataclass(slots=True, frozen=True)
class AcquireOp:
    cmd: commands.Acquire
    creates: bool = True

    def needs(self, core: LaneCore) -> Needs:
        return NO_NEEDS

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.LaneReply]:
        reply, fx = core.acquire(self.cmd, now)
        return Result(reply, answered(core, now, fx))


@dataclass(slots=True, frozen=True)
class AwaitOp:
    """One look at a ticket; `park` names it while it is still queued (the actor parks a
    long poll on it, the local queue polls again)."""

    call: commands.TicketCall
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return _ended(core, self.call.ticket_id)

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.LaneReply]:
        reply, fx, park = core.await_(self.call, now, reads.ticket)
        return Result(reply, answered(core, now, fx), self.call.ticket_id if park else None)


# heartbeat, release and cooldown: one command naming one ticket (`cmd.call`), answered by
# the core's method of the same name.
_C = TypeVar("_C", commands.Heartbeat, commands.Release, commands.Cooldown, commands.Reconcile)


@dataclass(slots=True, frozen=True)
class _TicketCommandOp(ABC, Generic[_C, R]):
    cmd: _C
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return _ended(core, self.cmd.call.ticket_id)

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[R]:
        reply, fx = self._step(core, now, reads.ticket)
        return Result(reply, answered(core, now, fx))

    @abstractmethod
    def _step(self, core: LaneCore, now: float, ended: Ticket | None) -> tuple[R, Effects]:
        """The core's method of the command's name."""


@dataclass(slots=True, frozen=True)
class HeartbeatOp(_TicketCommandOp[commands.Heartbeat, wire.HeartbeatReply]):
    def _step(
        self, core: LaneCore, now: float, ended: Ticket | None
    ) -> tuple[wire.HeartbeatReply, Effects]:
        return core.heartbeat(self.cmd, now, ended)


@dataclass(slots=True, frozen=True)
class ReleaseOp(_TicketCommandOp[commands.Release, wire.ReleaseReply]):
    def _step(
        self, core: LaneCore, now: float, ended: Ticket | None
    ) -> tuple[wire.ReleaseReply, Effects]:
        return core.release(self.cmd, now, ended)


@dataclass(slots=True, frozen=True)
class CooldownOp(_TicketCommandOp[commands.Cooldown, wire.CooldownReply]):
    def _step(
        self, core: LaneCore, now: float, ended: Ticket | None
    ) -> tuple[wire.CooldownReply, Effects]:
        return core.cooldown(self.cmd, now, ended)


@dataclass(slots=True, frozen=True)
class ReconcileOp(_TicketCommandOp[commands.Reconcile, wire.ReconcileReply]):
    """End an ended ticket's in-flight job by hand (docs/protocol.md#reconcile)."""

    def _step(
        self, core: LaneCore, now: float, ended: Ticket | None
    ) -> tuple[wire.ReconcileReply, Effects]:
        return core.reconcile(self.cmd, now, ended)


@dataclass(slots=True, frozen=True)
class ReceiptOp:
    """The reply is (HTTP status, body): 201 when a new receipt was stored, 200 otherwise."""

    cmd: commands.RecordReceipt
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        ended = None if _known(core, self.cmd.ticket_id) else self.cmd.ticket_id
        return Needs(ticket=ended, receipt=self.cmd.receipt_id)

    def run(
        self, core: LaneCore, now: float, reads: Reads
    ) -> Result[tuple[int, wire.ReceiptReply]]:
        reply, fx, stored = core.receipt(self.cmd, now, reads.ticket, reads.receipt)
        return Result((201 if stored else 200, reply), answered(core, now, fx))


@dataclass(slots=True, frozen=True)
class TickOp:
    """Nothing but the lane's clock: whatever fell due (expiries, grants, a pause ending) is
    done — the alarm, and a lane's first operation after it opens."""

    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return NO_NEEDS

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[None]:
        return Result(None)


TICK = TickOp()


# ---------------------------------------------------------------- reads


@dataclass(slots=True, frozen=True)
class StatusOp:
    """The lane's status (at most `queued_limit` queued tickets listed); with `receipts`,
    the newest that many receipts too (the local queue keeps none and never asks)."""

    queued_limit: int
    receipts: int | None = None
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return NO_NEEDS if self.receipts is None else Needs(recent_receipts=self.receipts)

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.StatusReply]:
        reply = core.status(now, self.queued_limit)
        if self.receipts is not None:
            reply.receipts = [receipt_row(r) for r in reads.recent_receipts]
        return Result(reply)


@dataclass(slots=True, frozen=True)
class HistoryOp:
    """The render log: newest `limit` ended tickets (of `project`), counted by outcome."""

    limit: int
    project: str | None
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        return Needs(history=(self.limit, self.project))

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.HistoryReply]:
        entries = [history_row(t) for t in reads.history]
        return Result(
            wire.HistoryReply(
                coordinator=core.coordinator,
                lane=core.lane,
                enforced=True,
                entries=entries,
                counts=outcome_counts(entries),
                retained=core.history_count,
                retained_limit=core.settings.history_retained,
            )
        )


@dataclass(slots=True, frozen=True)
class EvidenceOp:
    """What the coordinator saw: machines seen lately, the latest collision and, for a
    ticket, its identity, state and receipts by phase (`unknown` where none)."""

    ticket_id: str | None
    creates: bool = False

    def needs(self, core: LaneCore) -> Needs:
        tid = self.ticket_id
        if tid is None:
            return NO_NEEDS
        return Needs(ticket=None if _known(core, tid) else tid, receipts_for_ticket=tid)

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[wire.EvidenceReply]:
        coord = coordinator_evidence(core, now)
        job: wire.JobEvidence | None = None
        if self.ticket_id is not None:
            t = core.live.get(self.ticket_id) or core.in_flight.get(self.ticket_id) or reads.ticket
            job = _job_evidence(self.ticket_id, t, reads)
        return Result(evidence_reply(core.lane, True, coord, job, now, core.coordinator))


def coordinator_evidence(core: LaneCore, now: float) -> wire.CoordinatorEvidence:
    """The machines seen on the lane in the last hour (the most recent first, at most
    MACHINES_LISTED_MAX listed; `distinctMachines` counts them all) and the latest collision.
    After a reload (a restart, the lane's close, another replica's write) a machine's
    `lastSeenAt` is its stored time: at most SEEN_WRITE_SECONDS behind its last call."""
    seen = sorted(
        (
            wire.MachineSeen(machine_id=m, last_seen_at=at)
            for m, at in core.machines_seen.items()
            if now - at <= EVIDENCE_RECENT_SECONDS
        ),
        key=lambda r: (-r.last_seen_at, r.machine_id),
    )
    collision = core.last_collision
    return wire.CoordinatorEvidence(
        machines_seen=seen[:MACHINES_LISTED_MAX],
        distinct_machines=len(seen),
        collision=None if collision is None else _collision(collision),
    )


def _job_evidence(ticket_id: str, t: Ticket | None, reads: Reads) -> wire.JobEvidence:
    if t is None or t.ticket_id != ticket_id:
        return unknown_job(ticket_id)
    by_phase: dict[str, list[wire.ReceiptRow] | wire.Unknown] = {
        p.value: UNKNOWN for p in ReceiptPhase
    }
    for r in reads.receipts_for_ticket:
        if r.ticket_id != ticket_id:
            continue
        cur = by_phase.get(r.phase)
        row = receipt_row(r)
        by_phase[r.phase] = [row] if not isinstance(cur, list) else [*cur, row]
    return wire.JobEvidence(
        ticket_id=ticket_id,
        found=True,
        identity=wire.JobIdentity(
            project=t.project,
            scene=t.scene,
            prompt_hash=t.prompt_hash,
            machine_id=t.machine_id,
            claim_id=t.claim_id,
            credential=t.credential,
        ),
        state=t.state.value,
        outcome=cast("wire.Outcome | None", t.outcome),
        fence=t.fence,
        receipts=by_phase,
        complete=all(v != UNKNOWN for v in by_phase.values()),
    )


def evidence_reply(
    lane: str,
    enforced: bool,
    coord: wire.CoordinatorEvidence | None,
    job: wire.JobEvidence | None,
    now: float,
    coordinator: str,
) -> wire.EvidenceReply:
    return wire.EvidenceReply(
        coordinator=coordinator,
        lane=lane,
        enforced=enforced,
        coordinator_evidence=coord
        or wire.CoordinatorEvidence(machines_seen=[], distinct_machines=0, collision=None),
        job_evidence=job,
        now=now,
    )


def _collision(stored: dict[str, Any]) -> wire.Collision:
    """The lane's latest collision, as the core recorded it (an incident's detail)."""
    return msgspec.convert(stored, wire.Collision)


def unknown_job(ticket_id: str) -> wire.JobEvidence:
    """Job evidence for a ticket the coordinator has no record of: everything `unknown`."""
    return wire.JobEvidence(
        ticket_id=ticket_id,
        found=False,
        identity=UNKNOWN,
        receipts={p.value: UNKNOWN for p in ReceiptPhase},
        complete=False,
    )
