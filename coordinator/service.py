"""The coordinator's operations: validated commands in, protocol replies (Structs) out.

HTTP handlers call these; each lane operation becomes one job in that lane's actor.
Unenforced lanes (SPEC §5) are answered here without any actor or file.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from coordinator.actor.lane_actor import Ctx
from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock
from coordinator.constants import (
    COORDINATOR_KIND,
    DEFAULT_INCIDENTS_LIMIT,
    EVIDENCE_RECENT_SECONDS,
    OVERVIEW_DEFAULT_HISTORY,
    OVERVIEW_DEFAULT_LOG_LIMIT,
    OVERVIEW_DEFAULT_QUEUED,
    OVERVIEW_DEFAULT_RECEIPTS,
    OVERVIEW_PROJECTS_LIMIT,
    RECENT_RECEIPTS_LIMIT,
    STATUS_QUEUED_LIMIT,
)
from coordinator.core.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.core.lane import LaneCore
from coordinator.core.model import (
    Effects,
    LaneSnapshot,
    ReceiptPhase,
    Ticket,
)
from coordinator.core.views import (
    history_row,
    incident_row,
    log_row,
    outcome_counts,
    receipt_row,
    receipt_summary,
)
from coordinator.errors import NotFound
from coordinator.protocol import replies as wire
from coordinator.protocol.replies import UNKNOWN

UNLIMITED_PREFIX = "unlimited-"
R = TypeVar("R")


def new_ticket_id() -> str:
    """`t_` + 128 random bits, url-safe: ticket ids are lease capabilities."""
    return "t_" + secrets.token_urlsafe(16)


class LaneService:
    def __init__(self, registry: LaneRegistry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock
        self.config = registry.config

    # ---------------------------------------------------------------- helpers

    def enforced(self, lane: str) -> bool:
        return self.config.lane_settings(lane) is not None

    async def _job(self, lane: str, job: Any, *, create: bool = False) -> Any:
        actor = await self.registry.get(lane, create=create)
        if actor is None:
            raise _NoLane()
        return await actor.submit(job)

    def _empty_core(self, lane: str) -> LaneCore:
        settings = self.config.lane_settings(lane)
        assert settings is not None
        return LaneCore(
            lane, settings, LaneSnapshot(), self.clock.now(), coordinator=COORDINATOR_KIND
        )

    @staticmethod
    async def _ended(ctx: Ctx, ticket_id: str) -> Ticket | None:
        if ticket_id in ctx.core.live:
            return None
        return await ctx.read(ctx.actor.store.get_ticket, ticket_id)

    # ---------------------------------------------------------------- unenforced

    def _unlimited_ticket(self, lane: str, cmd: Acquire | None, ticket_id: str) -> wire.Ticket:
        now = self.clock.now()
        return wire.Ticket(
            ticket_id=ticket_id,
            lane=lane,
            state="held",
            machine_id=cmd.machine_id if cmd else None,
            claim_id=cmd.claim_id if cmd else None,
            project=cmd.project if cmd else None,
            scene=cmd.scene if cmd else None,
            prompt_hash=cmd.prompt_hash if cmd else None,
            position=0,
            eta_seconds=0.0,
            enqueued_at=now,
            held_at=now,
            lease_expires_at=None,
            heartbeat_at=None,
            fence=None,
        )

    def _unenforced_reply(self, lane: str, cmd: Acquire | None, ticket_id: str) -> wire.LaneReply:
        ticket = self._unlimited_ticket(lane, cmd, ticket_id)
        return wire.LaneReply(
            coordinator=COORDINATOR_KIND,
            lane=lane,
            enforced=False,
            ticket=ticket,
            granted=True,
            duplicate=False,
            owner=wire.Owner(machine_id=ticket.machine_id, claim_id=ticket.claim_id),
            pause=None,
        )

    # ---------------------------------------------------------------- operations

    async def acquire(self, lane: str, cmd: Acquire) -> wire.LaneReply:
        if not self.enforced(lane):
            return self._unenforced_reply(lane, cmd, UNLIMITED_PREFIX + str(uuid.uuid4()))

        async def job(ctx: Ctx) -> wire.LaneReply:
            reply, fx = ctx.core.acquire(cmd, ctx.now)
            ctx.fx.extend(fx)
            return reply

        result: wire.LaneReply = await self._job(lane, job, create=True)
        return result

    async def await_(self, lane: str, call: TicketCall, wait_seconds: float) -> wire.LaneReply:
        if not self.enforced(lane) or call.ticket_id.startswith(UNLIMITED_PREFIX):
            if self.enforced(lane):
                raise NotFound(f"ticketId: no ticket {call.ticket_id!r} in lane {lane}")
            return self._unenforced_reply(lane, None, call.ticket_id)
        deadline = self.clock.now() + wait_seconds
        parked: list[asyncio.Future[None]] = []

        async def first(ctx: Ctx) -> wire.LaneReply:
            ended = await self._ended(ctx, call.ticket_id)
            reply, fx, park = ctx.core.await_(call, ctx.now, ended)
            ctx.fx.extend(fx)
            if park:
                parked.append(ctx.park(call.ticket_id))
            return reply

        async def again(ctx: Ctx) -> wire.LaneReply:
            ended = await self._ended(ctx, call.ticket_id)
            reply, fx, _ = ctx.core.await_(call, ctx.now, ended)
            ctx.fx.extend(fx)
            return reply

        try:
            reply: wire.LaneReply = await self._job(lane, first)
        except _NoLane:
            raise NotFound(f"ticketId: no ticket {call.ticket_id!r} in lane {lane}") from None
        if not parked:
            return reply
        fut = parked[0]
        timer = asyncio.ensure_future(self.clock.sleep_until(deadline))
        try:
            await asyncio.wait({fut, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            fut.cancel()
        try:
            reply = await self._job(lane, again)
        except _NoLane:
            raise NotFound(f"ticketId: no ticket {call.ticket_id!r} in lane {lane}") from None
        return reply

    async def heartbeat(self, lane: str, cmd: Heartbeat) -> wire.HeartbeatReply:
        if not self.enforced(lane):
            return wire.HeartbeatReply(
                coordinator=COORDINATOR_KIND,
                refreshed=True,
                state="held",
                lease_expires_at=None,
                fence=None,
                reason=None,
            )

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.heartbeat(cmd, now, ended)
        )

    async def release(self, lane: str, cmd: Release) -> wire.ReleaseReply:
        if not self.enforced(lane):
            return wire.ReleaseReply(
                coordinator=COORDINATOR_KIND,
                released=True,
                state="done",
                outcome=cmd.outcome,
                promoted=[],
                reason=None,
            )

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.release(cmd, now, ended)
        )

    async def cooldown(self, lane: str, cmd: Cooldown) -> wire.CooldownReply:
        if not self.enforced(lane):
            return wire.CooldownReply(
                coordinator=COORDINATOR_KIND, paused=False, extended=False, pause=None
            )

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.cooldown(cmd, now, ended)
        )

    async def receipt(self, lane: str, cmd: RecordReceipt) -> tuple[int, wire.ReceiptReply]:
        if not self.enforced(lane):
            return 200, wire.ReceiptReply(
                coordinator=COORDINATOR_KIND, stored=False, replay=False, content_hash_verified=None
            )

        async def job(ctx: Ctx) -> tuple[int, wire.ReceiptReply]:
            ended = await self._ended(ctx, cmd.ticket_id)
            existing = await ctx.read(ctx.actor.store.get_receipt, cmd.receipt_id)
            reply, fx, stored = ctx.core.receipt(cmd, ctx.now, ended, existing)
            ctx.fx.extend(fx)
            return (201 if stored else 200), reply

        result: tuple[int, wire.ReceiptReply] = await self._ticket_job(lane, cmd.ticket_id, job)
        return result

    async def _ticket_op(
        self,
        lane: str,
        ticket_id: str,
        op: Callable[[LaneCore, float, Ticket | None], tuple[R, Effects]],
    ) -> R:
        """One call on one exact ticket: the ticket from memory, or the file once it ended."""

        async def job(ctx: Ctx) -> R:
            ended = await self._ended(ctx, ticket_id)
            reply, fx = op(ctx.core, ctx.now, ended)
            ctx.fx.extend(fx)
            return reply

        reply: R = await self._ticket_job(lane, ticket_id, job)
        return reply

    async def _ticket_job(self, lane: str, ticket_id: str, job: Any) -> Any:
        try:
            return await self._job(lane, job)
        except _NoLane:
            raise NotFound(f"ticketId: no ticket {ticket_id!r} in lane {lane}") from None

    def _unenforced_status(self, lane: str) -> wire.StatusReply:
        return wire.StatusReply(
            coordinator=COORDINATOR_KIND,
            lane=lane,
            enforced=False,
            capacity=None,
            held=[],
            queued=[],
            queued_total=0,
            pause=None,
            now=self.clock.now(),
        )

    async def status(self, lane: str, include_receipts: bool) -> wire.StatusReply:
        if not self.enforced(lane):
            return self._unenforced_status(lane)

        async def job(ctx: Ctx) -> wire.StatusReply:
            reply = ctx.core.status(ctx.now, STATUS_QUEUED_LIMIT)
            if include_receipts:
                rows = await ctx.read(ctx.actor.store.recent_receipts, RECENT_RECEIPTS_LIMIT)
                reply.receipts = [receipt_row(r) for r in rows]
            return reply

        try:
            result: wire.StatusReply = await self._job(lane, job)
        except _NoLane:
            result = self._empty_core(lane).status(self.clock.now(), STATUS_QUEUED_LIMIT)
            if include_receipts:
                result.receipts = []
        return result

    async def history(self, lane: str, limit: int, project: str | None) -> wire.HistoryReply:
        retained_limit = self.config.history_retained
        if not self.enforced(lane):
            return wire.HistoryReply(
                coordinator=COORDINATOR_KIND,
                lane=lane,
                enforced=False,
                entries=[],
                counts={},
                retained=0,
                retained_limit=retained_limit,
            )

        async def job(ctx: Ctx) -> tuple[list[wire.HistoryEntry], int]:
            rows = await ctx.read(ctx.actor.store.history, limit, project)
            return [history_row(t) for t in rows], ctx.core.history_count

        try:
            entries, retained = await self._job(lane, job)
        except _NoLane:
            entries, retained = [], 0
        return wire.HistoryReply(
            coordinator=COORDINATOR_KIND,
            lane=lane,
            enforced=True,
            entries=entries,
            counts=outcome_counts(entries),
            retained=retained,
            retained_limit=retained_limit,
        )

    # ---------------------------------------------------------------- control-room reads

    async def lanes(self) -> wire.LanesReply:
        out: list[wire.LaneSummary] = []
        for lane in self.registry.known_lanes():
            settings = self.config.lane_settings(lane)
            if settings is None:
                out.append(
                    wire.LaneSummary(
                        lane=lane, enforced=False, capacity=None, held=0, queued=0, pause=None
                    )
                )
                continue

            async def job(ctx: Ctx) -> wire.LaneSummary:
                return ctx.core.summary(ctx.now)

            try:
                out.append(await self._job(lane, job))
            except _NoLane:
                out.append(self._empty_core(lane).summary(self.clock.now()))
        return wire.LanesReply(coordinator=COORDINATOR_KIND, lanes=out, now=self.clock.now())

    async def incidents(self, lane: str | None, limit: int) -> wire.IncidentsReply:
        lanes = [lane] if lane is not None else self.registry.known_lanes()
        rows: list[wire.Incident] = []
        for name in lanes:
            if not self.enforced(name):
                continue

            async def job(ctx: Ctx, name: str = name) -> list[wire.Incident]:
                found = await ctx.read(ctx.actor.store.incidents, limit)
                return [incident_row(name, i, inc) for i, inc in found]

            try:
                rows.extend(await self._job(name, job))
            except _NoLane:
                continue
        rows.sort(key=lambda r: (r.at, r.id), reverse=True)
        return wire.IncidentsReply(coordinator=COORDINATOR_KIND, incidents=rows[:limit])

    async def overview(self, q: OverviewQuery) -> wire.Overview:
        """Every lane in one bounded read: what the control room's periodic refresh needs.

        One job per lane (run concurrently), each reading only bounded rows: the lane's
        status (at most `q.queued` queued tickets), its newest `q.history` render-log rows,
        its newest `q.receipts` receipts (no payload) plus the mismatched ones among the
        newest RECENT_RECEIPTS_LIMIT, and its newest `q.incidents` incidents. The render log
        (`log`) is the newest `q.limit` rows of `q.lane` (every lane when None), filtered by
        `q.project`. `machines` is left empty: the HTTP layer fills it (presence lives there).
        """
        now = self.clock.now()
        lanes = self.registry.known_lanes()
        views = await asyncio.gather(*(self._overview_lane(lane, q) for lane in lanes))
        incidents = [row for v in views for row in v.incidents]
        incidents.sort(key=lambda r: (r.at, r.id), reverse=True)
        log_rows = [row for v in views for row in v.log]
        log_rows.sort(key=lambda r: float(r.ended_at or 0.0), reverse=True)
        log_rows = log_rows[: q.limit]
        in_log = [v for v in views if q.lane is None or v.lane.lane == q.lane]
        return wire.Overview(
            coordinator=COORDINATOR_KIND,
            now=now,
            limits=wire.OverviewLimits(
                history=q.history,
                queued=q.queued,
                receipts=q.receipts,
                incidents=q.incidents,
                limit=q.limit,
            ),
            lanes=[v.lane for v in views],
            incidents=incidents[: q.incidents],
            machines=[],
            log=wire.OverviewLog(
                lane=q.lane,
                project=q.project,
                entries=log_rows,
                counts=outcome_counts(log_rows),
                retained=sum(v.lane.history.retained for v in in_log),
                retained_limit=self.config.history_retained,
            ),
        )

    async def _overview_lane(self, lane: str, q: OverviewQuery) -> _LaneView:
        in_log = q.lane is None or q.lane == lane
        if not self.enforced(lane):
            return _LaneView(_overview_lane(self._unenforced_status(lane)), [], [])

        async def job(ctx: Ctx) -> _LaneView:
            core = ctx.core
            store = ctx.actor.store
            status = core.status(ctx.now, q.queued)
            # one history read serves the timeline and, unfiltered, the render log
            shared = in_log and q.project is None
            n = max(q.history, q.limit) if shared else q.history
            tickets = await ctx.read(store.history, n, None) if n else []
            logged = tickets[: q.limit] if shared else []
            if in_log and not shared:
                logged = await ctx.read(store.history, q.limit, q.project)
            rows = [history_row(t) for t in tickets[: q.history]]
            recs = await ctx.read(store.recent_receipts, RECENT_RECEIPTS_LIMIT)
            found = await ctx.read(store.incidents, q.incidents)
            live = [t.project for t in core.live.values()]
            served = sorted(core.served, key=lambda p: core.served[p], reverse=True)
            view = _overview_lane(
                status,
                history=wire.LaneHistory(entries=rows, retained=core.history_count),
                recent_receipts=[receipt_summary(r) for r in recs[: q.receipts]],
                receipt_mismatches=[
                    receipt_summary(r) for r in recs if r.content_hash_verified is False
                ],
                projects=_projects([*live, *served, *(t.project for t in tickets)]),
            )
            return _LaneView(
                view,
                [incident_row(lane, i, inc) for i, inc in found],
                [log_row(lane, t) for t in logged],
            )

        try:
            result: _LaneView = await self._job(lane, job)
        except _NoLane:
            status = self._empty_core(lane).status(self.clock.now(), q.queued)
            result = _LaneView(_overview_lane(status), [], [])
        return result

    async def evidence(self, lane: str, ticket_id: str | None) -> wire.EvidenceReply:
        now = self.clock.now()
        job_evidence: wire.JobEvidence | None = None
        coord = wire.CoordinatorEvidence(machines_seen=[], distinct_machines=0, collision=None)
        if self.enforced(lane):

            async def job(ctx: Ctx) -> tuple[wire.CoordinatorEvidence, wire.JobEvidence | None]:
                core = ctx.core
                seen = sorted(
                    (
                        wire.MachineSeen(machine_id=m, last_seen_at=at)
                        for m, at in core.machines_seen.items()
                        if now - at <= EVIDENCE_RECENT_SECONDS
                    ),
                    key=lambda r: r.last_seen_at,
                    reverse=True,
                )
                collision = core.last_collision
                c = wire.CoordinatorEvidence(
                    machines_seen=seen,
                    distinct_machines=len(seen),
                    collision=None if collision is None else _collision(collision),
                )
                if ticket_id is None:
                    return c, None
                t = core.live.get(ticket_id) or await ctx.read(
                    ctx.actor.store.get_ticket, ticket_id
                )
                if t is None:
                    return c, _unknown_job(ticket_id)
                recs = await ctx.read(ctx.actor.store.receipts_for_ticket, ticket_id)
                by_phase: dict[str, list[wire.ReceiptRow] | wire.Unknown] = {
                    p.value: UNKNOWN for p in ReceiptPhase
                }
                for r in recs:
                    if r.ticket_id != ticket_id:
                        continue
                    cur = by_phase.get(r.phase)
                    row = receipt_row(r)
                    by_phase[r.phase] = [row] if not isinstance(cur, list) else [*cur, row]
                return c, wire.JobEvidence(
                    ticket_id=ticket_id,
                    found=True,
                    identity=wire.JobIdentity(
                        project=t.project,
                        scene=t.scene,
                        prompt_hash=t.prompt_hash,
                        machine_id=t.machine_id,
                        claim_id=t.claim_id,
                    ),
                    state=t.state.value,
                    outcome=t.outcome,
                    fence=t.fence,
                    receipts=by_phase,
                    complete=all(v != UNKNOWN for v in by_phase.values()),
                )

            try:
                coord, job_evidence = await self._job(lane, job)
            except _NoLane:
                if ticket_id is not None:
                    job_evidence = _unknown_job(ticket_id)
        elif ticket_id is not None:  # unenforced: the coordinator keeps nothing of its tickets
            job_evidence = _unknown_job(ticket_id)
        return wire.EvidenceReply(
            coordinator=COORDINATOR_KIND,
            lane=lane,
            enforced=self.enforced(lane),
            coordinator_evidence=coord,
            job_evidence=job_evidence,
            now=now,
        )


def _collision(stored: dict[str, Any]) -> wire.Collision:
    """The lane's latest collision, as the core recorded it (an incident's detail)."""
    return msgspec.convert(stored, wire.Collision)


def _unknown_job(ticket_id: str) -> wire.JobEvidence:
    """Job evidence for a ticket the coordinator has no record of: everything `unknown`."""
    return wire.JobEvidence(
        ticket_id=ticket_id,
        found=False,
        identity=UNKNOWN,
        receipts={p.value: UNKNOWN for p in ReceiptPhase},
        complete=False,
    )


def _overview_lane(
    status: wire.StatusReply,
    *,
    history: wire.LaneHistory | None = None,
    recent_receipts: list[wire.ReceiptSummary] | None = None,
    receipt_mismatches: list[wire.ReceiptSummary] | None = None,
    projects: list[str] | None = None,
) -> wire.OverviewLane:
    """A lane's status plus the overview's bounded reads; a lane with no file yet, or an
    unenforced one, has empty lists and `retained: 0`."""
    return wire.OverviewLane(
        lane=status.lane,
        enforced=status.enforced,
        capacity=status.capacity,
        held=status.held,
        queued=status.queued,
        queued_total=status.queued_total or 0,
        pause=status.pause,
        now=status.now,
        history=history or wire.LaneHistory(entries=[], retained=0),
        recent_receipts=recent_receipts or [],
        receipt_mismatches=receipt_mismatches or [],
        projects=projects or [],
    )


@dataclass(frozen=True)
class OverviewQuery:
    """What GET /v1/overview reads; every number is bounded by the HTTP layer."""

    history: int = OVERVIEW_DEFAULT_HISTORY  # render-log rows per lane (timeline)
    queued: int = OVERVIEW_DEFAULT_QUEUED  # queued tickets listed per lane
    receipts: int = OVERVIEW_DEFAULT_RECEIPTS  # newest receipts per lane
    incidents: int = DEFAULT_INCIDENTS_LIMIT  # newest incidents over every lane
    lane: str | None = None  # the render log's lane; every lane when None
    project: str | None = None  # the render log's project filter
    limit: int = OVERVIEW_DEFAULT_LOG_LIMIT  # render-log rows in all


@dataclass
class _LaneView:
    lane: wire.OverviewLane
    incidents: list[wire.Incident]
    log: list[wire.LogEntry]


def _projects(names: list[str]) -> list[str]:
    """Distinct names in the given (most recent first) order, cut, then sorted."""
    return sorted(list(dict.fromkeys(names))[:OVERVIEW_PROJECTS_LIMIT])


class _NoLane(Exception):
    """The lane has no file yet (nothing was ever acquired there)."""
