"""The coordinator's operations: validated commands in, wire replies out.

HTTP handlers call these; each lane operation becomes one job in that lane's actor.
Unenforced lanes (SPEC §5) are answered here without any actor or file.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.actor.lane_actor import Ctx
from coordinator.actor.registry import LaneRegistry
from coordinator.clock import Clock
from coordinator.constants import (
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
    Receipt,
    ReceiptPhase,
    Ticket,
    TicketState,
)
from coordinator.core.views import history_row, incident_row, outcome_counts, receipt_row
from coordinator.errors import NotFound

UNLIMITED_PREFIX = "unlimited-"
UNKNOWN = "unknown"  # what evidence reads where the coordinator has none


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
        return LaneCore(lane, settings, LaneSnapshot(), self.clock.now())

    @staticmethod
    async def _ended(ctx: Ctx, ticket_id: str) -> Ticket | None:
        if ticket_id in ctx.core.live:
            return None
        return await ctx.read(ctx.actor.store.get_ticket, ticket_id)

    # ---------------------------------------------------------------- unenforced

    def _unlimited_ticket(self, lane: str, cmd: Acquire | None, ticket_id: str) -> dict[str, Any]:
        now = self.clock.now()
        return {
            "ticketId": ticket_id,
            "lane": lane,
            "state": TicketState.HELD.value,
            "machineId": cmd.machine_id if cmd else None,
            "claimId": cmd.claim_id if cmd else None,
            "project": cmd.project if cmd else None,
            "scene": cmd.scene if cmd else None,
            "promptHash": cmd.prompt_hash if cmd else None,
            "position": 0,
            "etaSeconds": 0.0,
            "enqueuedAt": now,
            "heldAt": now,
            "leaseExpiresAt": None,
            "heartbeatAt": None,
            "fence": None,
        }

    def _unenforced_reply(self, lane: str, cmd: Acquire | None, ticket_id: str) -> dict[str, Any]:
        ticket = self._unlimited_ticket(lane, cmd, ticket_id)
        return {
            "lane": lane,
            "enforced": False,
            "ticket": ticket,
            "granted": True,
            "duplicate": False,
            "owner": {"machineId": ticket["machineId"], "claimId": ticket["claimId"]},
            "pause": None,
        }

    # ---------------------------------------------------------------- operations

    async def acquire(self, lane: str, cmd: Acquire) -> dict[str, Any]:
        if not self.enforced(lane):
            return self._unenforced_reply(lane, cmd, UNLIMITED_PREFIX + str(uuid.uuid4()))

        async def job(ctx: Ctx) -> dict[str, Any]:
            reply, fx = ctx.core.acquire(cmd, ctx.now)
            ctx.fx.extend(fx)
            return reply

        result: dict[str, Any] = await self._job(lane, job, create=True)
        return result

    async def await_(self, lane: str, call: TicketCall, wait_seconds: float) -> dict[str, Any]:
        if not self.enforced(lane) or call.ticket_id.startswith(UNLIMITED_PREFIX):
            if self.enforced(lane):
                raise NotFound(f"ticketId: no ticket {call.ticket_id!r} in lane {lane}")
            return self._unenforced_reply(lane, None, call.ticket_id)
        deadline = self.clock.now() + wait_seconds
        parked: list[asyncio.Future[None]] = []

        async def first(ctx: Ctx) -> dict[str, Any]:
            ended = await self._ended(ctx, call.ticket_id)
            reply, fx, park = ctx.core.await_(call, ctx.now, ended)
            ctx.fx.extend(fx)
            if park:
                parked.append(ctx.park(call.ticket_id))
            return reply

        async def again(ctx: Ctx) -> dict[str, Any]:
            ended = await self._ended(ctx, call.ticket_id)
            reply, fx, _ = ctx.core.await_(call, ctx.now, ended)
            ctx.fx.extend(fx)
            return reply

        try:
            reply: dict[str, Any] = await self._job(lane, first)
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

    async def heartbeat(self, lane: str, cmd: Heartbeat) -> dict[str, Any]:
        if not self.enforced(lane):
            return {
                "refreshed": True,
                "state": "held",
                "leaseExpiresAt": None,
                "fence": None,
                "reason": None,
            }

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.heartbeat(cmd, now, ended)
        )

    async def release(self, lane: str, cmd: Release) -> dict[str, Any]:
        if not self.enforced(lane):
            return {
                "released": True,
                "state": "done",
                "outcome": cmd.outcome,
                "promoted": [],
                "reason": None,
            }

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.release(cmd, now, ended)
        )

    async def cooldown(self, lane: str, cmd: Cooldown) -> dict[str, Any]:
        if not self.enforced(lane):
            return {"paused": False, "extended": False, "pause": None}

        return await self._ticket_op(
            lane, cmd.call.ticket_id, lambda core, now, ended: core.cooldown(cmd, now, ended)
        )

    async def receipt(self, lane: str, cmd: RecordReceipt) -> tuple[int, dict[str, Any]]:
        if not self.enforced(lane):
            return 200, {"stored": False, "replay": False, "contentHashVerified": None}

        async def job(ctx: Ctx) -> tuple[int, dict[str, Any]]:
            ended = await self._ended(ctx, cmd.ticket_id)
            existing = await ctx.read(ctx.actor.store.get_receipt, cmd.receipt_id)
            reply, fx, stored = ctx.core.receipt(cmd, ctx.now, ended, existing)
            ctx.fx.extend(fx)
            return (201 if stored else 200), reply

        result: tuple[int, dict[str, Any]] = await self._ticket_job(lane, cmd.ticket_id, job)
        return result

    async def _ticket_op(
        self,
        lane: str,
        ticket_id: str,
        op: Callable[[LaneCore, float, Ticket | None], tuple[dict[str, Any], Effects]],
    ) -> dict[str, Any]:
        """One call on one exact ticket: the ticket from memory, or the file once it ended."""

        async def job(ctx: Ctx) -> dict[str, Any]:
            ended = await self._ended(ctx, ticket_id)
            reply, fx = op(ctx.core, ctx.now, ended)
            ctx.fx.extend(fx)
            return reply

        reply: dict[str, Any] = await self._ticket_job(lane, ticket_id, job)
        return reply

    async def _ticket_job(self, lane: str, ticket_id: str, job: Any) -> Any:
        try:
            return await self._job(lane, job)
        except _NoLane:
            raise NotFound(f"ticketId: no ticket {ticket_id!r} in lane {lane}") from None

    async def status(self, lane: str, include_receipts: bool) -> dict[str, Any]:
        if not self.enforced(lane):
            return {
                "lane": lane,
                "enforced": False,
                "capacity": None,
                "held": [],
                "queued": [],
                "queuedTotal": 0,
                "pause": None,
                "now": self.clock.now(),
            }

        async def job(ctx: Ctx) -> dict[str, Any]:
            reply = ctx.core.status(ctx.now, STATUS_QUEUED_LIMIT)
            if include_receipts:
                rows = await ctx.read(ctx.actor.store.recent_receipts, RECENT_RECEIPTS_LIMIT)
                reply["recentReceipts"] = [receipt_row(r) for r in rows]
            return reply

        try:
            result: dict[str, Any] = await self._job(lane, job)
        except _NoLane:
            result = self._empty_core(lane).status(self.clock.now(), STATUS_QUEUED_LIMIT)
            if include_receipts:
                result["recentReceipts"] = []
        return result

    async def history(self, lane: str, limit: int, project: str | None) -> dict[str, Any]:
        retained_limit = self.config.history_retained
        if not self.enforced(lane):
            return {
                "lane": lane,
                "enforced": False,
                "entries": [],
                "counts": {},
                "retained": 0,
                "retainedLimit": retained_limit,
            }

        async def job(ctx: Ctx) -> dict[str, Any]:
            rows = await ctx.read(ctx.actor.store.history, limit, project)
            return {
                "lane": lane,
                "enforced": True,
                "entries": [history_row(t) for t in rows],
                "retained": ctx.core.history_count,
            }

        try:
            reply: dict[str, Any] = await self._job(lane, job)
        except _NoLane:
            reply = {"lane": lane, "enforced": True, "entries": [], "retained": 0}
        reply["counts"] = outcome_counts(reply["entries"])
        reply["retainedLimit"] = retained_limit
        return reply

    # ---------------------------------------------------------------- control-room reads

    async def lanes(self) -> dict[str, Any]:
        out = []
        for lane in self.registry.known_lanes():
            settings = self.config.lane_settings(lane)
            if settings is None:
                out.append(
                    {
                        "lane": lane,
                        "enforced": False,
                        "capacity": None,
                        "held": 0,
                        "queued": 0,
                        "pause": None,
                    }
                )
                continue

            async def job(ctx: Ctx) -> dict[str, Any]:
                return ctx.core.summary(ctx.now)

            try:
                out.append(await self._job(lane, job))
            except _NoLane:
                out.append(self._empty_core(lane).summary(self.clock.now()))
        return {"lanes": out, "now": self.clock.now()}

    async def incidents(self, lane: str | None, limit: int) -> dict[str, Any]:
        lanes = [lane] if lane is not None else self.registry.known_lanes()
        rows: list[dict[str, Any]] = []
        for name in lanes:
            if not self.enforced(name):
                continue

            async def job(ctx: Ctx, name: str = name) -> list[dict[str, Any]]:
                found = await ctx.read(ctx.actor.store.incidents, limit)
                return [incident_row(name, i, inc) for i, inc in found]

            try:
                rows.extend(await self._job(name, job))
            except _NoLane:
                continue
        rows.sort(key=lambda r: (r["at"], r["id"]), reverse=True)
        return {"incidents": rows[:limit]}

    async def overview(self, q: OverviewQuery) -> dict[str, Any]:
        """Every lane in one bounded read: what the control room's periodic refresh needs.

        One job per lane (run concurrently), each reading only bounded rows: the lane's
        status (at most `q.queued` queued tickets), its newest `q.history` render-log rows,
        its newest `q.receipts` receipts (no payload) plus the mismatched ones among the
        newest RECENT_RECEIPTS_LIMIT, and its newest `q.incidents` incidents. The render log
        (`log`) is the newest `q.limit` rows of `q.lane` (every lane when None), filtered by
        `q.project`. Machines are added by the HTTP layer (presence lives there).
        """
        now = self.clock.now()
        lanes = self.registry.known_lanes()
        views = await asyncio.gather(*(self._overview_lane(lane, q) for lane in lanes))
        incidents = [row for v in views for row in v.incidents]
        incidents.sort(key=lambda r: (r["at"], r["id"]), reverse=True)
        log_rows = [row for v in views for row in v.log]
        log_rows.sort(key=lambda r: float(r["endedAt"] or 0.0), reverse=True)
        log_rows = log_rows[: q.limit]
        in_log = [v for v in views if q.lane is None or v.lane["lane"] == q.lane]
        return {
            "now": now,
            "limits": {
                "history": q.history,
                "queued": q.queued,
                "receipts": q.receipts,
                "incidents": q.incidents,
                "limit": q.limit,
            },
            "lanes": [v.lane for v in views],
            "incidents": incidents[: q.incidents],
            "log": {
                "lane": q.lane,
                "project": q.project,
                "entries": log_rows,
                "counts": outcome_counts(log_rows),
                "retained": sum(int(v.lane["history"]["retained"]) for v in in_log),
                "retainedLimit": self.config.history_retained,
            },
        }

    async def _overview_lane(self, lane: str, q: OverviewQuery) -> _LaneView:
        in_log = q.lane is None or q.lane == lane
        if not self.enforced(lane):
            view = {
                "lane": lane,
                "enforced": False,
                "capacity": None,
                "held": [],
                "queued": [],
                "queuedTotal": 0,
                "pause": None,
                "now": self.clock.now(),
            }
            return _LaneView({**view, **_nothing_yet()}, [], [])

        async def job(ctx: Ctx) -> _LaneView:
            core = ctx.core
            store = ctx.actor.store
            view = core.status(ctx.now, q.queued)
            # one history read serves the timeline and, unfiltered, the render log
            shared = in_log and q.project is None
            n = max(q.history, q.limit) if shared else q.history
            rows = [history_row(t) for t in await ctx.read(store.history, n, None)] if n else []
            log = rows[: q.limit] if shared else []
            if in_log and not shared:
                log = [history_row(t) for t in await ctx.read(store.history, q.limit, q.project)]
            recs = await ctx.read(store.recent_receipts, RECENT_RECEIPTS_LIMIT)
            found = await ctx.read(store.incidents, q.incidents)
            live = [t.project for t in core.live.values()]
            served = sorted(core.served, key=lambda p: core.served[p], reverse=True)
            view["history"] = {"entries": rows[: q.history], "retained": core.history_count}
            view["recentReceipts"] = [_receipt_summary(r) for r in recs[: q.receipts]]
            view["receiptMismatches"] = [
                _receipt_summary(r) for r in recs if r.content_hash_verified is False
            ]
            view["projects"] = _projects([*live, *served, *(r["project"] for r in rows)])
            return _LaneView(
                view,
                [incident_row(lane, i, inc) for i, inc in found],
                [{"lane": lane, **r} for r in log],
            )

        try:
            result: _LaneView = await self._job(lane, job)
        except _NoLane:
            view = self._empty_core(lane).status(self.clock.now(), q.queued)
            view.update(_nothing_yet())
            result = _LaneView(view, [], [])
        return result

    async def evidence(self, lane: str, ticket_id: str | None) -> dict[str, Any]:
        now = self.clock.now()
        unknown = UNKNOWN
        job_evidence: dict[str, Any] | None = None
        coord: dict[str, Any] = {"machinesSeen": [], "distinctMachines": 0, "collision": None}
        if self.enforced(lane):

            async def job(ctx: Ctx) -> tuple[dict[str, Any], dict[str, Any] | None]:
                core = ctx.core
                seen: list[dict[str, Any]] = sorted(
                    (
                        {"machineId": m, "lastSeenAt": at}
                        for m, at in core.machines_seen.items()
                        if now - at <= EVIDENCE_RECENT_SECONDS
                    ),
                    key=lambda r: float(r["lastSeenAt"]),
                    reverse=True,
                )
                c = {
                    "machinesSeen": seen,
                    "distinctMachines": len(seen),
                    "collision": core.last_collision,
                }
                if ticket_id is None:
                    return c, None
                t = core.live.get(ticket_id) or await ctx.read(
                    ctx.actor.store.get_ticket, ticket_id
                )
                if t is None:
                    return c, _unknown_job(ticket_id)
                recs = await ctx.read(ctx.actor.store.receipts_for_ticket, ticket_id)
                by_phase: dict[str, Any] = {p.value: unknown for p in ReceiptPhase}
                for r in recs:
                    if r.ticket_id != ticket_id:
                        continue
                    cur = by_phase.get(r.phase)
                    row = receipt_row(r)
                    by_phase[r.phase] = [row] if not isinstance(cur, list) else [*cur, row]
                return c, {
                    "ticketId": ticket_id,
                    "found": True,
                    "identity": {
                        "project": t.project,
                        "scene": t.scene,
                        "promptHash": t.prompt_hash,
                        "machineId": t.machine_id,
                        "claimId": t.claim_id,
                    },
                    "state": t.state.value,
                    "outcome": t.outcome,
                    "fence": t.fence,
                    "receipts": by_phase,
                    "complete": all(v != unknown for v in by_phase.values()),
                }

            try:
                coord, job_evidence = await self._job(lane, job)
            except _NoLane:
                if ticket_id is not None:
                    job_evidence = _unknown_job(ticket_id)
        elif ticket_id is not None:  # unenforced: the coordinator keeps nothing of its tickets
            job_evidence = _unknown_job(ticket_id)
        return {
            "lane": lane,
            "enforced": self.enforced(lane),
            "coordinatorEvidence": coord,
            "jobEvidence": job_evidence,
            "now": now,
        }


def _unknown_job(ticket_id: str) -> dict[str, Any]:
    """Job evidence for a ticket the coordinator has no record of: everything `unknown`."""
    return {
        "ticketId": ticket_id,
        "found": False,
        "identity": UNKNOWN,
        "receipts": {p.value: UNKNOWN for p in ReceiptPhase},
        "complete": False,
    }


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
    lane: dict[str, Any]
    incidents: list[dict[str, Any]]
    log: list[dict[str, Any]]


def _nothing_yet() -> dict[str, Any]:
    """The overview's per-lane reads of a lane with no file, or an unenforced one."""
    return {
        "history": {"entries": [], "retained": 0},
        "recentReceipts": [],
        "receiptMismatches": [],
        "projects": [],
    }


def _receipt_summary(r: Receipt) -> dict[str, Any]:
    """A receipt row without its payload (the overview stays small; evidence has it)."""
    row = receipt_row(r)
    del row["payload"]
    return row


def _projects(names: list[str]) -> list[str]:
    """Distinct names in the given (most recent first) order, cut, then sorted."""
    return sorted(list(dict.fromkeys(names))[:OVERVIEW_PROJECTS_LIMIT])


class _NoLane(Exception):
    """The lane has no file yet (nothing was ever acquired there)."""
