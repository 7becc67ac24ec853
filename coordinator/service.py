"""The coordinator's operations: validated commands in, protocol replies (Structs) out.

HTTP handlers call these; each lane operation is an engine operation
(coordinator/engine/operations.py) run as one job in that lane's actor; a lane with no file
yet is answered from an empty core. Unenforced lanes (SPEC §5) are answered here from
coordinator/engine/unenforced.py without any actor or file.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from coordinator.actor.lane_actor import Ctx, operation_job
from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock
from coordinator.constants import (
    OVERVIEW_PROJECTS_LIMIT,
    RECENT_RECEIPTS_LIMIT,
    STATUS_QUEUED_LIMIT,
)
from coordinator.engine import unenforced
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import LaneSettings, LaneSnapshot
from coordinator.engine.operations import (
    AcquireOp,
    AwaitOp,
    CooldownOp,
    EvidenceOp,
    HeartbeatOp,
    HistoryOp,
    Operation,
    ReceiptOp,
    ReleaseOp,
    StatusOp,
    detached,
    evidence_reply,
    unknown_job,
)
from coordinator.engine.unenforced import UNLIMITED_PREFIX
from coordinator.engine.views import (
    history_row,
    incident_row,
    log_row,
    outcome_counts,
    receipt_summary,
)
from coordinator.errors import NotFound, StoreError
from coordinator.protocol import replies as wire
from coordinator.protocol.queries import OverviewParams

R = TypeVar("R")


class LaneService:
    def __init__(self, registry: LaneRegistry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock
        self.config = registry.config
        self.kind = registry.kind  # what replies say in `coordinator`

    # ---------------------------------------------------------------- helpers

    def enforced(self, lane: str) -> bool:
        return self.config.capacity(lane) is not None  # lane_settings, unbuilt

    async def _job(self, lane: str, job: Any, *, create: bool = False) -> Any:
        actor = await self.registry.get(lane, create=create)
        if actor is None:
            raise _NoLane()
        return await actor.submit(job)

    def _settings(self, lane: str) -> LaneSettings:
        settings = self.config.lane_settings(lane)
        assert settings is not None
        return settings

    def _empty_core(self, lane: str) -> LaneCore:
        return LaneCore(
            lane,
            self._settings(lane),
            LaneSnapshot(),
            self.clock.now(),
            coordinator=self.kind,
        )

    async def _perform(
        self, lane: str, op: Operation[R], parked: list[asyncio.Future[None]] | None = None
    ) -> R:
        """An engine operation as one job in the lane's actor; a lane with no file yet is
        answered from an empty core (a ticket call there is not-found) and nothing is made."""
        try:
            result: R = await self._job(lane, operation_job(op, parked), create=op.creates)
        except _NoLane:
            return detached(op, lane, self._settings(lane), self.clock.now(), self.kind)
        return result

    # ---------------------------------------------------------------- operations

    async def acquire(self, lane: str, cmd: Acquire) -> wire.LaneReply:
        if not self.enforced(lane):
            tid = UNLIMITED_PREFIX + str(uuid.uuid4())
            return unenforced.lane_reply(lane, cmd, tid, self.clock.now(), self.kind)
        return await self._perform(lane, AcquireOp(cmd))

    async def await_(self, lane: str, call: TicketCall, wait_seconds: float) -> wire.LaneReply:
        if not self.enforced(lane) or call.ticket_id.startswith(UNLIMITED_PREFIX):
            if self.enforced(lane):
                raise NotFound(f"ticketId: no ticket {call.ticket_id!r} in lane {lane}")
            now = self.clock.now()
            return unenforced.lane_reply(lane, None, call.ticket_id, now, self.kind)
        deadline = self.clock.now() + wait_seconds
        op = AwaitOp(call)
        parked: list[asyncio.Future[None]] = []
        reply = await self._perform(lane, op, parked)
        pause = reply.pause
        # A wake-up is a reason to look again, not to answer: on replicas every parked await
        # of a lane is woken by another replica's change to it (or the re-check timer). Answer
        # only when the ticket is no longer queued, the pause changed, or the time is up.
        while parked and not parked[0].done():
            fut = parked[0]
            timer = asyncio.ensure_future(self.clock.sleep_until(deadline))
            try:
                await asyncio.wait({fut, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
                fut.cancel()
            if self.clock.now() >= deadline:
                return await self._perform(lane, op)
            parked = []
            reply = await self._perform(lane, op, parked)
            if reply.pause != pause:
                break
        for f in parked:
            f.cancel()
        return reply

    async def heartbeat(self, lane: str, cmd: Heartbeat) -> wire.HeartbeatReply:
        if not self.enforced(lane):
            return unenforced.heartbeat_reply(self.kind)
        return await self._perform(lane, HeartbeatOp(cmd))

    async def release(self, lane: str, cmd: Release) -> wire.ReleaseReply:
        if not self.enforced(lane):
            return unenforced.release_reply(cmd.outcome, self.kind)
        return await self._perform(lane, ReleaseOp(cmd))

    async def cooldown(self, lane: str, cmd: Cooldown) -> wire.CooldownReply:
        if not self.enforced(lane):
            return unenforced.cooldown_reply(self.kind)
        return await self._perform(lane, CooldownOp(cmd))

    async def receipt(self, lane: str, cmd: RecordReceipt) -> tuple[int, wire.ReceiptReply]:
        if not self.enforced(lane):
            return 200, unenforced.receipt_reply(self.kind)
        return await self._perform(lane, ReceiptOp(cmd))

    def _unenforced_status(self, lane: str) -> wire.StatusReply:
        return unenforced.status_reply(lane, self.clock.now(), self.kind)

    async def status(self, lane: str, include_receipts: bool) -> wire.StatusReply:
        if not self.enforced(lane):
            return self._unenforced_status(lane)
        receipts = RECENT_RECEIPTS_LIMIT if include_receipts else None
        return await self._perform(lane, StatusOp(STATUS_QUEUED_LIMIT, receipts))

    async def history(self, lane: str, limit: int, project: str | None) -> wire.HistoryReply:
        if not self.enforced(lane):
            retained_limit = self.config.history_retained
            return unenforced.history_reply(lane, retained_limit, self.kind)
        return await self._perform(lane, HistoryOp(limit, project))

    # ---------------------------------------------------------------- control-room reads

    async def lanes(self) -> wire.LanesReply:
        out: list[wire.LaneSummary] = []
        for lane in await self.registry.known_lanes():
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
            except StoreError as exc:  # this lane's file cannot be opened: report it
                summary = self._empty_core(lane).summary(self.clock.now())
                summary.error = exc.reason or exc.message
                out.append(summary)
        return wire.LanesReply(coordinator=self.kind, lanes=out, now=self.clock.now())

    async def incidents(self, lane: str | None, limit: int) -> wire.IncidentsReply:
        lanes = [lane] if lane is not None else await self.registry.known_lanes()
        rows: list[wire.Incident] = []
        for name in lanes:
            if not self.enforced(name):
                continue

            async def job(ctx: Ctx, name: str = name) -> list[wire.Incident]:
                found = await ctx.read(ctx.actor.store.incidents, limit)
                return [incident_row(name, i, inc) for i, inc in found]

            try:
                rows.extend(await self._job(name, job))
            except StoreError:
                if lane is not None:
                    raise  # asked for this lane: 503 with the reason
                continue  # one broken lane (reported by /v1/lanes) hides no other's incidents
            except _NoLane:
                continue
        rows.sort(key=lambda r: (r.at, r.id), reverse=True)
        return wire.IncidentsReply(coordinator=self.kind, incidents=rows[:limit])

    async def overview(self, q: OverviewParams) -> wire.Overview:
        """Every lane in one bounded read: what the control room's periodic refresh needs.

        One job per lane (run concurrently), each reading only bounded rows: the lane's
        status (at most `q.queued` queued tickets), its newest `q.history` render-log rows,
        its newest `q.receipts` receipts (no payload) plus the mismatched ones among the
        newest RECENT_RECEIPTS_LIMIT, and its newest `q.incidents` incidents. The render log
        (`log`) is the newest `q.limit` rows of `q.lane` (every lane when None), filtered by
        `q.project`. `machines` is left empty: the HTTP layer fills it (presence lives there).
        """
        now = self.clock.now()
        lanes = await self.registry.known_lanes()
        views = await asyncio.gather(*(self._overview_lane(lane, q) for lane in lanes))
        incidents = [row for v in views for row in v.incidents]
        incidents.sort(key=lambda r: (r.at, r.id), reverse=True)
        log_rows = [row for v in views for row in v.log]
        log_rows.sort(key=lambda r: float(r.ended_at or 0.0), reverse=True)
        log_rows = log_rows[: q.limit]
        in_log = [v for v in views if q.lane is None or v.lane.lane == q.lane]
        return wire.Overview(
            coordinator=self.kind,
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

    async def _overview_lane(self, lane: str, q: OverviewParams) -> _LaneView:
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
        except (_NoLane, StoreError):  # a broken lane: listed empty (/v1/lanes says why)
            status = self._empty_core(lane).status(self.clock.now(), q.queued)
            result = _LaneView(_overview_lane(status), [], [])
        return result

    async def evidence(self, lane: str, ticket_id: str | None) -> wire.EvidenceReply:
        if self.enforced(lane):
            return await self._perform(lane, EvidenceOp(ticket_id))
        # unenforced: the coordinator keeps nothing of its tickets
        job = None if ticket_id is None else unknown_job(ticket_id)
        return evidence_reply(lane, False, None, job, self.clock.now(), self.kind)


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
