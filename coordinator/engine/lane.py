"""One lane's state machine. Pure: every method takes `now` and returns reply + Effects."""

from __future__ import annotations

from collections import deque
from typing import Any

from sortedcontainers import SortedList

from coordinator.constants import ETA_HOLD_SAMPLE_SIZE
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.engine.model import (
    Effects,
    Incident,
    IncidentKind,
    LaneSettings,
    LaneSnapshot,
    Outcome,
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
    Receipt,
    Ticket,
    TicketState,
)
from coordinator.protocol import replies as wire
from coordinator.protocol.errors import (
    NotFound,
    NotHolder,
    NotOwner,
    ReceiptConflict,
    TicketNotHeld,
)

# A project never granted in this lane sorts before every granted one.
_NEVER_SERVED = 0


def is_owner(ticket: Ticket, machine_id: str, claim_id: str | None) -> bool:
    """SPEC §4.3 owner rule: a named claim must equal the ticket's; else the machine decides."""
    if ticket.machine_id != machine_id:
        return False
    return claim_id is None or claim_id == ticket.claim_id


class LaneCore:
    """One lane's live state and rules.

    Calling convention (the actor and the local queue both follow it): for each operation,
    read `now` once, call `advance(now)` and keep its effects, then call the operation with
    the same `now`. An operation may raise a LaneError (not-found, not-owner, ...); it does
    so before changing anything, but time-driven changes (reaps, grants, a pause ending)
    belong to `advance` and must be persisted even when the operation is refused.

    Replies are protocol Structs (`coordinator.protocol.replies`); `coordinator` is the kind
    of host the core answers for ("actor-sqlite" in the server, "local-sqlite" in the
    client's local queue), which every top-level reply names.
    """

    def __init__(
        self,
        lane: str,
        settings: LaneSettings,
        snapshot: LaneSnapshot,
        now: float,
        *,
        coordinator: str = "",
    ):
        self.lane = lane
        self.coordinator = coordinator
        self.settings = settings
        self.last_fence = snapshot.last_fence
        self.next_seq = snapshot.next_seq
        self.served: dict[str, int] = dict(snapshot.project_served)
        self.pause: Pause | None = snapshot.pause
        self.holds: deque[float] = deque(snapshot.recent_holds, maxlen=ETA_HOLD_SAMPLE_SIZE)
        self.history_count = snapshot.history_count
        self.incident_count = snapshot.incident_count
        self.last_collision = snapshot.last_collision
        self.machines_seen: dict[str, float] = {}

        self.live: dict[str, Ticket] = {}
        self.by_identity: dict[tuple[str, str, str], str] = {}
        self.held: dict[str, Ticket] = {}
        self.leases: SortedList = SortedList()  # (lease_expires_at, ticket_id)
        self.queues: dict[str, SortedList] = {}  # project -> (seq, ticket_id)
        self.order: SortedList = SortedList()  # (served_fence, oldest_seq, project)
        self.order_key: dict[str, tuple[int, int, str]] = {}
        self.waiters: SortedList = SortedList()  # (deadline, ticket_id)
        self.waiter_key: dict[str, float] = {}
        for t in sorted(snapshot.live, key=lambda x: x.seq):
            # A restart grants every waiter a full keep-alive window from `now`.
            if t.state is TicketState.QUEUED:
                t.last_seen_at = max(t.last_seen_at, now)
            self._index(t)

    # ------------------------------------------------------------------ indexes

    def _index(self, t: Ticket) -> None:
        self.live[t.ticket_id] = t
        self.by_identity[t.identity] = t.ticket_id
        if t.state is TicketState.HELD:
            self.held[t.ticket_id] = t
            assert t.lease_expires_at is not None
            self.leases.add((t.lease_expires_at, t.ticket_id))
        else:
            q = self.queues.get(t.project)
            if q is None:
                q = self.queues[t.project] = SortedList()
            q.add((t.seq, t.ticket_id))
            self._reorder(t.project)
            self._set_waiter_deadline(t)

    def _unindex(self, t: Ticket) -> None:
        self.live.pop(t.ticket_id, None)
        if self.by_identity.get(t.identity) == t.ticket_id:
            del self.by_identity[t.identity]
        if t.ticket_id in self.held:
            del self.held[t.ticket_id]
            assert t.lease_expires_at is not None
            self.leases.discard((t.lease_expires_at, t.ticket_id))
        else:
            self._dequeue(t)

    def _dequeue(self, t: Ticket) -> None:
        q = self.queues.get(t.project)
        if q is not None:
            q.discard((t.seq, t.ticket_id))
            if not q:
                del self.queues[t.project]
            self._reorder(t.project)
        old = self.waiter_key.pop(t.ticket_id, None)
        if old is not None:
            self.waiters.discard((old, t.ticket_id))

    def _reorder(self, project: str) -> None:
        old = self.order_key.pop(project, None)
        if old is not None:
            self.order.discard(old)
        q = self.queues.get(project)
        if q:
            key = (self.served.get(project, _NEVER_SERVED), q[0][0], project)
            self.order_key[project] = key
            self.order.add(key)

    def _set_waiter_deadline(self, t: Ticket) -> None:
        old = self.waiter_key.get(t.ticket_id)
        if old is not None:
            self.waiters.discard((old, t.ticket_id))
        deadline = t.last_seen_at + self.settings.waiter_timeout_seconds
        self.waiter_key[t.ticket_id] = deadline
        self.waiters.add((deadline, t.ticket_id))

    def _keepalive(self, t: Ticket, now: float) -> None:
        """A waiter's call keeps it alive; kept in memory only (never a row per call)."""
        if t.state is TicketState.QUEUED and now > t.last_seen_at:
            t.last_seen_at = now
            self._set_waiter_deadline(t)

    def restore_keepalive(self, ticket_id: str, last_seen_at: float) -> None:
        """Set a waiter's keep-alive back (a host that keeps the core between calls takes
        back a keep-alive it did not persist, as a rebuild from the store would)."""
        t = self.live.get(ticket_id)
        if t is not None and t.state is TicketState.QUEUED:
            t.last_seen_at = last_seen_at
            self._set_waiter_deadline(t)

    # ------------------------------------------------------------------ reads

    def paused(self, now: float) -> bool:
        return self.pause is not None and now < self.pause.until

    def next_deadline(self) -> float | None:
        candidates: list[float] = []
        if self.leases:
            candidates.append(self.leases[0][0])
        if self.waiters:
            candidates.append(self.waiters[0][0])
        if self.pause is not None:
            candidates.append(self.pause.until)
        return min(candidates) if candidates else None

    def is_idle(self) -> bool:
        return not self.live and self.pause is None

    def queued_count(self) -> int:
        return len(self.live) - len(self.held)

    def hold_estimate(self) -> float:
        if not self.holds:
            return self.settings.default_hold_seconds
        return sum(self.holds) / len(self.holds)

    def position(self, t: Ticket) -> int:
        """1-based place in the simulated round-robin order (SPEC §3); 0 when not queued."""
        if t.state is not TicketState.QUEUED:
            return 0
        q = self.queues[t.project]
        k = q.index((t.seq, t.ticket_id))
        my_key = self.order_key[t.project]
        pos = 1
        for key in self.order:
            count = len(self.queues[key[2]])
            pos += min(count, k)
            if key < my_key and count > k:
                pos += 1
        return pos

    def promotion_order(self, limit: int) -> list[Ticket]:
        """The first `limit` queued tickets in the order they would be granted."""
        projects = [self.queues[key[2]] for key in self.order]
        out: list[Ticket] = []
        rnd = 0
        while projects and len(out) < limit:
            still: list[SortedList] = []
            for q in projects:
                if rnd < len(q):
                    out.append(self.live[q[rnd][1]])
                    if len(out) >= limit:
                        break
                    if rnd + 1 < len(q):
                        still.append(q)
            projects = still
            rnd += 1
        return out

    def _slot_free_times(self, now: float) -> list[float]:
        h = self.hold_estimate()
        cap = max(self.settings.capacity, 1)
        remaining = sorted(
            max(0.0, h - (now - (now if t.held_at is None else t.held_at)))
            for t in self.held.values()
        )
        extra = max(0, len(remaining) - cap)
        padded = [0.0] * max(0, cap - len(remaining)) + remaining
        return padded[extra:] if extra else padded

    def eta(self, position: int, now: float, free: list[float] | None = None) -> float:
        """ETA formula (docs/protocol.md): pause left + the p-th slot's free time + waves × hold.

        slot = (p-1) mod capacity, wave = (p-1) div capacity; a held slot frees after
        max(0, hold - held_for); hold = mean of the last 20 measured holds (or the default).
        """
        if position <= 0:
            return 0.0
        if free is None:
            free = self._slot_free_times(now)
        cap = max(self.settings.capacity, 1)
        pause_left = max(0.0, self.pause.until - now) if self.paused(now) and self.pause else 0.0
        slot = min((position - 1) % cap, len(free) - 1)
        wave = (position - 1) // cap
        return round(pause_left + free[slot] + wave * self.hold_estimate(), 3)

    def ticket_view(
        self,
        t: Ticket,
        now: float,
        position: int | None = None,
        free: list[float] | None = None,
    ) -> wire.Ticket:
        pos: int | None
        eta: float | None
        if t.state is TicketState.QUEUED:
            pos = self.position(t) if position is None else position
            eta = self.eta(pos, now, free)
        elif t.state is TicketState.HELD:
            pos, eta = 0, 0.0
        else:
            pos, eta = None, None
        return wire.Ticket(
            ticket_id=t.ticket_id,
            lane=t.lane,
            state=t.state.value,
            machine_id=t.machine_id,
            claim_id=t.claim_id,
            project=t.project,
            scene=t.scene,
            prompt_hash=t.prompt_hash,
            position=pos,
            eta_seconds=eta,
            enqueued_at=t.enqueued_at,
            held_at=t.held_at,
            lease_expires_at=t.lease_expires_at if t.state is TicketState.HELD else None,
            heartbeat_at=t.heartbeat_at,
            fence=t.fence,
        )

    def pause_view(self, now: float) -> wire.Pause | None:
        return self.pause.wire() if self.pause is not None and self.paused(now) else None

    def lane_reply(
        self, t: Ticket, now: float, *, caller_owns: bool, duplicate: bool
    ) -> wire.LaneReply:
        return wire.LaneReply(
            coordinator=self.coordinator,
            lane=self.lane,
            enforced=True,
            ticket=self.ticket_view(t, now),
            granted=t.state is TicketState.HELD and caller_owns,
            duplicate=duplicate,
            owner=wire.Owner(machine_id=t.machine_id, claim_id=t.claim_id),
            pause=self.pause_view(now),
        )

    def status(self, now: float, queued_limit: int) -> wire.StatusReply:
        free = self._slot_free_times(now)
        held = sorted(self.held.values(), key=lambda t: t.fence or 0)
        queued = self.promotion_order(queued_limit)
        return wire.StatusReply(
            coordinator=self.coordinator,
            lane=self.lane,
            enforced=True,
            capacity=self.settings.capacity,
            held=[self.ticket_view(t, now, 0, free) for t in held],
            queued=[self.ticket_view(t, now, i + 1, free) for i, t in enumerate(queued)],
            queued_total=self.queued_count(),
            pause=self.pause_view(now),
            now=now,
        )

    def summary(self, now: float) -> wire.LaneSummary:
        return wire.LaneSummary(
            lane=self.lane,
            enforced=True,
            capacity=self.settings.capacity,
            held=len(self.held),
            queued=self.queued_count(),
            pause=self.pause_view(now),
        )

    # ------------------------------------------------------------------ time

    def tick(self, now: float, fx: Effects) -> None:
        """End a due pause, reap due leases and waiters, then fill capacity."""
        if self.pause is not None and now >= self.pause.until:
            ended = self.pause
            self.pause = None
            fx.changes.append(PutPause(None))
            fx.pause_changed = True
            self._incident(
                fx,
                IncidentKind.COOLDOWN_ENDED,
                ended.until,
                ended.ticket_id,
                ended.machine_id,
                {"reasonCode": ended.reason_code, "startedAt": ended.started_at},
            )
        while self.leases and self.leases[0][0] <= now:
            self._expire(self.live[self.leases[0][1]], fx)
        while self.waiters and self.waiters[0][0] <= now:
            deadline, tid = self.waiters[0]
            waiter = self.live[tid]
            self._end(waiter, Outcome.ABANDONED.value, deadline, fx)
            self._incident(
                fx,
                IncidentKind.WAITER_ABANDONED,
                deadline,
                tid,
                waiter.machine_id,
                {"waiterTimeoutSeconds": self.settings.waiter_timeout_seconds},
            )
        self._promote(now, fx)

    def _promote(self, now: float, fx: Effects) -> None:
        if self.paused(now):
            return
        while len(self.held) < self.settings.capacity and self.order:
            project = self.order[0][2]
            tid = self.queues[project][0][1]
            self._grant(self.live[tid], now, fx)

    def _grant(self, t: Ticket, now: float, fx: Effects) -> None:
        self._dequeue(t)
        self.last_fence += 1
        t.state = TicketState.HELD
        t.fence = self.last_fence
        t.held_at = now
        t.lease_expires_at = now + t.lease_seconds
        t.heartbeat_at = None
        self.held[t.ticket_id] = t
        self.leases.add((t.lease_expires_at, t.ticket_id))
        self.served[t.project] = t.fence
        self._reorder(t.project)
        fx.changes.append(PutTicket(t))
        fx.changes.append(PutProjectServed(t.project, t.fence, now))
        fx.changes.append(PutCounters(self.last_fence, self.next_seq))
        fx.woken.add(t.ticket_id)
        fx.promoted.append(t.ticket_id)

    def _expire(self, t: Ticket, fx: Effects) -> None:
        assert t.lease_expires_at is not None and t.held_at is not None
        expiry = t.lease_expires_at
        self._unindex(t)
        t.state = TicketState.EXPIRED
        t.outcome = Outcome.EXPIRED.value
        t.ended_at = expiry
        self.holds.append(max(0.0, expiry - t.held_at))
        fx.changes.append(PutTicket(t))
        fx.woken.add(t.ticket_id)
        self._count_history(fx)
        self._incident(
            fx, IncidentKind.LEASE_EXPIRED, expiry, t.ticket_id, t.machine_id, {"fence": t.fence}
        )

    def _end(self, t: Ticket, outcome: str | None, at: float, fx: Effects) -> None:
        was_held = t.state is TicketState.HELD
        self._unindex(t)
        t.state = TicketState.DONE
        t.outcome = outcome
        t.ended_at = at
        if was_held and t.held_at is not None:
            self.holds.append(max(0.0, at - t.held_at))
        fx.changes.append(PutTicket(t))
        fx.woken.add(t.ticket_id)
        self._count_history(fx)

    def _count_history(self, fx: Effects) -> None:
        self.history_count += 1
        keep = self.settings.history_retained
        if self.history_count > keep:
            fx.changes.append(PruneHistory(keep, self.history_count - keep))
            self.history_count = keep

    def _incident(
        self,
        fx: Effects,
        kind: IncidentKind,
        at: float,
        ticket_id: str | None,
        machine_id: str | None,
        detail: dict[str, Any],
    ) -> None:
        fx.changes.append(PutIncident(Incident(kind.value, at, ticket_id, machine_id, detail)))
        self.incident_count += 1
        keep = self.settings.incidents_retained
        if self.incident_count > keep:
            fx.changes.append(PruneIncidents(keep, self.incident_count - keep))
            self.incident_count = keep

    def _find(self, ticket_id: str, ended: Ticket | None) -> Ticket:
        t = self.live.get(ticket_id)
        if t is None:
            t = ended
        if t is None or t.ticket_id != ticket_id:
            raise NotFound(f"ticketId: no ticket {ticket_id!r} in lane {self.lane}")
        return t

    def _seen(self, machine_id: str, now: float) -> None:
        self.machines_seen[machine_id] = now

    # ------------------------------------------------------------------ commands

    def acquire(self, cmd: Acquire, now: float) -> tuple[wire.LaneReply, Effects]:
        fx = Effects()
        self.tick(now, fx)
        self._seen(cmd.machine_id, now)
        key = (cmd.project, cmd.scene, cmd.prompt_hash)
        tid = self.by_identity.get(key)
        if tid is not None:
            t = self.live[tid]
            # The owner is the (machineId, claimId) pair of the creating acquire; a duplicate
            # from any other pair (a claimless one from the same machine too) is a collision.
            owns = (t.machine_id, t.claim_id) == (cmd.machine_id, cmd.claim_id)
            if owns:
                self._keepalive(t, now)
            else:
                collision = {
                    "at": now,
                    "ticketId": t.ticket_id,
                    "project": t.project,
                    "scene": t.scene,
                    "promptHash": t.prompt_hash,
                    "owner": {"machineId": t.machine_id, "claimId": t.claim_id},
                    "requester": {"machineId": cmd.machine_id, "claimId": cmd.claim_id},
                    "granted": t.state is TicketState.HELD,
                }
                self.last_collision = collision
                self._incident(
                    fx,
                    IncidentKind.DUPLICATE_COLLISION,
                    now,
                    t.ticket_id,
                    cmd.machine_id,
                    collision,
                )
            return self.lane_reply(t, now, caller_owns=owns, duplicate=True), fx

        lease = cmd.lease_seconds or self.settings.default_lease_seconds
        t = Ticket(
            ticket_id=cmd.new_ticket_id,
            lane=self.lane,
            state=TicketState.QUEUED,
            machine_id=cmd.machine_id,
            claim_id=cmd.claim_id,
            project=cmd.project,
            scene=cmd.scene,
            prompt_hash=cmd.prompt_hash,
            seq=self.next_seq,
            enqueued_at=now,
            lease_seconds=lease,
            last_seen_at=now,
        )
        self.next_seq += 1
        self._index(t)
        fx.changes.append(PutTicket(t))
        fx.changes.append(PutCounters(self.last_fence, self.next_seq))
        self._promote(now, fx)
        return self.lane_reply(t, now, caller_owns=True, duplicate=False), fx

    def await_(
        self, call: TicketCall, now: float, ended: Ticket | None
    ) -> tuple[wire.LaneReply, Effects, bool]:
        """Reply, effects, and whether the caller should park (the ticket is still queued)."""
        fx = Effects()
        self.tick(now, fx)
        self._seen(call.machine_id, now)
        t = self._find(call.ticket_id, ended)
        if not is_owner(t, call.machine_id, call.claim_id):
            raise NotOwner(f"ticketId: {call.ticket_id} is owned by another driver")
        self._keepalive(t, now)
        reply = self.lane_reply(t, now, caller_owns=True, duplicate=False)
        return reply, fx, t.state is TicketState.QUEUED

    def heartbeat(
        self, cmd: Heartbeat, now: float, ended: Ticket | None
    ) -> tuple[wire.HeartbeatReply, Effects]:
        fx = Effects()
        self.tick(now, fx)
        call = cmd.call
        self._seen(call.machine_id, now)
        t = self._find(call.ticket_id, ended)
        reason: str | None = None
        if not is_owner(t, call.machine_id, call.claim_id):
            reason = "not-owner"
        elif t.state is TicketState.HELD:
            assert t.lease_expires_at is not None
            self.leases.discard((t.lease_expires_at, t.ticket_id))
            t.lease_expires_at = now + (cmd.lease_seconds or t.lease_seconds)
            if cmd.lease_seconds:
                t.lease_seconds = cmd.lease_seconds
            t.heartbeat_at = now
            self.leases.add((t.lease_expires_at, t.ticket_id))
            fx.changes.append(PutTicket(t))
        elif t.state is TicketState.QUEUED:
            self._keepalive(t, now)
            reason = "not-held"
        else:
            reason = t.state.value  # "expired" or "done"
        mine = reason != "not-owner"
        return wire.HeartbeatReply(
            coordinator=self.coordinator,
            refreshed=reason is None,
            state=t.state.value,
            lease_expires_at=t.lease_expires_at if mine and t.state is TicketState.HELD else None,
            fence=t.fence if mine else None,
            reason=reason,
        ), fx

    def release(
        self, cmd: Release, now: float, ended: Ticket | None
    ) -> tuple[wire.ReleaseReply, Effects]:
        fx = Effects()
        self.tick(now, fx)
        call = cmd.call
        self._seen(call.machine_id, now)
        t = self._find(call.ticket_id, ended)
        promoted_before = len(fx.promoted)
        released, reason = False, None
        if not is_owner(t, call.machine_id, call.claim_id):
            reason = "not-owner"
        elif t.state in (TicketState.HELD, TicketState.QUEUED):
            self._end(t, cmd.outcome, now, fx)
            t.provider_job_id = cmd.provider_job_id
            t.note = cmd.note
            released = True
            self._promote(now, fx)
        elif t.state is TicketState.EXPIRED:
            t.state = TicketState.DONE
            t.late_outcome = cmd.outcome
            t.provider_job_id = t.provider_job_id or cmd.provider_job_id
            t.note = t.note or cmd.note
            fx.changes.append(PutTicket(t))
            self._incident(
                fx,
                IncidentKind.LATE_RELEASE,
                now,
                t.ticket_id,
                call.machine_id,
                {"lateOutcome": cmd.outcome, "fence": t.fence},
            )
            reason = "expired"
        else:
            reason = "already-done"
        return wire.ReleaseReply(
            coordinator=self.coordinator,
            released=released,
            state=t.state.value,
            outcome=t.outcome,
            promoted=fx.promoted[promoted_before:],
            reason=reason,
        ), fx

    def cooldown(
        self, cmd: Cooldown, now: float, ended: Ticket | None
    ) -> tuple[wire.CooldownReply, Effects]:
        fx = Effects()
        self.tick(now, fx)
        call = cmd.call
        self._seen(call.machine_id, now)
        t = self._find(call.ticket_id, ended)
        if not is_owner(t, call.machine_id, call.claim_id):
            raise NotOwner(f"ticketId: {call.ticket_id} is owned by another driver")
        if t.state is not TicketState.HELD:
            raise TicketNotHeld(
                f"ticketId: {call.ticket_id} is {t.state.value}; only a held ticket may pause"
            )
        until = now + cmd.retry_after_seconds
        new = Pause(cmd.reason_code, now, until, call.machine_id, call.claim_id, t.ticket_id)
        extended = False
        if self.paused(now):
            assert self.pause is not None
            if until > self.pause.until:
                # The pause began when it began: an extension keeps startedAt, takes the new
                # reporter and until; when it was extended is the incident's own record.
                previous = self.pause
                new = Pause(
                    cmd.reason_code,
                    previous.started_at,
                    until,
                    call.machine_id,
                    call.claim_id,
                    t.ticket_id,
                )
                self.pause = new
                extended = True
                fx.changes.append(PutPause(new))
                fx.pause_changed = True
                self._incident(
                    fx,
                    IncidentKind.COOLDOWN_EXTENDED,
                    now,
                    t.ticket_id,
                    call.machine_id,
                    {
                        "reasonCode": cmd.reason_code,
                        "extendedAt": now,
                        "until": until,
                        "previousUntil": previous.until,
                        "startedAt": previous.started_at,
                        "retryAfterSeconds": cmd.retry_after_seconds,
                    },
                )
        else:
            self.pause = new
            fx.changes.append(PutPause(new))
            fx.pause_changed = True
            self._incident(
                fx,
                IncidentKind.COOLDOWN_STARTED,
                now,
                t.ticket_id,
                call.machine_id,
                {
                    "reasonCode": cmd.reason_code,
                    "until": until,
                    "retryAfterSeconds": cmd.retry_after_seconds,
                },
            )
        assert self.pause is not None
        reply = wire.CooldownReply(
            coordinator=self.coordinator, paused=True, extended=extended, pause=self.pause.wire()
        )
        return reply, fx

    def receipt(
        self,
        cmd: RecordReceipt,
        now: float,
        ended: Ticket | None,
        existing: Receipt | None,
    ) -> tuple[wire.ReceiptReply, Effects, bool]:
        """Reply, effects, and whether a new receipt was stored (201) or not (200)."""
        fx = Effects()
        self.tick(now, fx)
        self._seen(cmd.machine_id, now)
        t = self._find(cmd.ticket_id, ended)
        if t.machine_id != cmd.machine_id:
            raise NotHolder(
                f"machineId: {cmd.machine_id!r} is not the holder machine of {cmd.ticket_id}"
            )
        if t.held_at is None:  # held now or before (expired/done) is fine; never held is not
            raise NotHolder(
                f"ticketId: {cmd.ticket_id} never held the slot ({t.state.value}); "
                "receipts are written once it is granted"
            )
        if existing is not None:
            if existing.content_hash != cmd.content_hash:
                raise ReceiptConflict(
                    f"receiptId: {cmd.receipt_id} is already stored with another contentHash"
                )
            replay = wire.ReceiptReply(
                coordinator=self.coordinator,
                stored=False,
                replay=True,
                content_hash_verified=existing.content_hash_verified,
            )
            return replay, fx, False
        verified = cmd.computed_hash == cmd.content_hash
        rec = Receipt(
            receipt_id=cmd.receipt_id,
            ticket_id=cmd.ticket_id,
            phase=cmd.phase,
            machine_id=cmd.machine_id,
            payload_json=cmd.payload_json,
            content_hash=cmd.content_hash,
            content_hash_verified=verified,
            created_at=now,
        )
        fx.changes.append(PutReceipt(rec))
        if not verified:
            self._incident(
                fx,
                IncidentKind.RECEIPT_HASH_MISMATCH,
                now,
                cmd.ticket_id,
                cmd.machine_id,
                {
                    "receiptId": cmd.receipt_id,
                    "phase": cmd.phase,
                    "sentHash": cmd.content_hash,
                    "computedHash": cmd.computed_hash,
                },
            )
        stored = wire.ReceiptReply(
            coordinator=self.coordinator, stored=True, replay=False, content_hash_verified=verified
        )
        return stored, fx, True

    def advance(self, now: float) -> Effects:
        """The alarm: reap, end pauses and promote with no client call."""
        fx = Effects()
        self.tick(now, fx)
        return fx
