"""The coordinator's operations: validated commands in, protocol replies (Structs) out.

HTTP handlers call these; each lane operation is an engine operation
(coordinator/engine/operations.py, overview.py) run by that lane's actor; a lane with no file
yet is answered from an empty core. Unenforced lanes (docs/protocol.md#unenforced) are answered here
from coordinator/engine/unenforced.py without any actor or file.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TypeVar

from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock
from coordinator.engine import unenforced
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    Reconcile,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.engine.lane import LaneCore
from coordinator.engine.long_poll import long_poll
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
    ReconcileOp,
    ReleaseOp,
    StatusOp,
    detached,
    evidence_reply,
    unknown_job,
)
from coordinator.engine.overview import (
    IncidentsOp,
    LaneView,
    OverviewOp,
    SummaryOp,
    overview_lane,
)
from coordinator.engine.unenforced import UNLIMITED_PREFIX
from coordinator.engine.views import outcome_counts
from coordinator.errors import StoreError
from coordinator.protocol import replies as wire
from coordinator.protocol.constants import (
    RECENT_RECEIPTS_LIMIT,
    STATUS_QUEUED_LIMIT,
)
from coordinator.protocol.errors import NotFound, NotInFlight
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

    async def _submit(
        self,
        lane: str,
        op: Operation[R],
        parked: list[asyncio.Future[None]] | None = None,
    ) -> R:
        """`op` in the lane's actor (opened on demand); _NoLane when the lane has no store
        yet and `op` does not make one."""
        actor = await self.registry.get(lane, create=op.creates)
        if actor is None:
            raise _NoLane()
        return await actor.submit(op, parked)

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
        """An engine operation run by the lane's actor; a lane with no file yet is
        answered from an empty core (a ticket call there is not-found) and nothing is made."""
        try:
            result: R = await self._submit(lane, op, parked)
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
            return unenforced.lane_reply(lane, call, call.ticket_id, now, self.kind)
        deadline = self.clock.now() + wait_seconds
        op = AwaitOp(call)
        parked: list[asyncio.Future[None]] = []

        async def look() -> wire.LaneReply:
            for f in parked:
                f.cancel()
            parked.clear()
            return await self._perform(lane, op, parked)

        async def wait() -> bool:
            # A wake-up is a reason to look again, not to answer: on replicas every parked
            # await of a lane is woken by another replica's change to it (or the re-check).
            if not parked or parked[0].done():
                return False
            timer = asyncio.ensure_future(self.clock.sleep_until(deadline))
            try:
                await asyncio.wait({parked[0], timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            return True

        try:
            return await long_poll(look, wait, lambda: self.clock.now() >= deadline)
        finally:
            for f in parked:
                f.cancel()

    async def heartbeat(self, lane: str, cmd: Heartbeat) -> wire.HeartbeatReply:
        if not self.enforced(lane):
            return unenforced.heartbeat_reply(self.kind)
        return await self._perform(lane, HeartbeatOp(cmd))

    async def release(self, lane: str, cmd: Release) -> wire.ReleaseReply:
        if not self.enforced(lane):
            return unenforced.release_reply(cmd.outcome, self.kind)
        return await self._perform(lane, ReleaseOp(cmd))

    async def reconcile(self, lane: str, cmd: Reconcile) -> wire.ReconcileReply:
        if not self.enforced(lane):
            raise NotInFlight("lane: an unenforced lane keeps no in-flight jobs")
        return await self._perform(lane, ReconcileOp(cmd))

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

            try:
                out.append(await self._submit(lane, SummaryOp()))
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

            try:
                found: list[wire.Incident] = await self._submit(name, IncidentsOp(limit))
                rows.extend(found)
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

        One operation per lane (run concurrently), each reading only bounded rows: the lane's
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

    async def _overview_lane(self, lane: str, q: OverviewParams) -> LaneView:
        if not self.enforced(lane):
            return LaneView(overview_lane(self._unenforced_status(lane)), [], [])
        try:
            return await self._submit(lane, OverviewOp(q))
        except (_NoLane, StoreError):  # a broken lane: listed empty (/v1/lanes says why)
            status = self._empty_core(lane).status(self.clock.now(), q.queued)
            return LaneView(overview_lane(status), [], [])

    async def evidence(self, lane: str, ticket_id: str | None) -> wire.EvidenceReply:
        if self.enforced(lane):
            return await self._perform(lane, EvidenceOp(ticket_id))
        # unenforced: the coordinator keeps nothing of its tickets
        job = None if ticket_id is None else unknown_job(ticket_id)
        return evidence_reply(lane, False, None, job, self.clock.now(), self.kind)


class _NoLane(Exception):
    """The lane has no file yet (nothing was ever acquired there)."""
