"""One lane's state machine. Pure: every method takes `now` and returns reply + Effects."""

from __future__ import annotations

from typing import cast

from coordinator.engine import commands
from coordinator.engine.lane_slots import LaneSlots
from coordinator.engine.model import (
    IN_FLIGHT_OUTCOMES,
    IN_FLIGHT_TERMINAL_OUTCOMES,
    Effects,
    IncidentKind,
    Outcome,
    Pause,
    PruneHistory,
    PutCounters,
    PutPause,
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
    NotInFlight,
    NotOwner,
    ReceiptConflict,
    TicketNotHeld,
)


def is_owner(ticket: Ticket, machine_id: str, claim_id: str | None) -> bool:
    """The owner rule (docs/protocol.md#owner-rule): a named claim must equal the ticket's; else the
    machine decides."""
    if ticket.machine_id != machine_id:
        return False
    return claim_id is None or claim_id == ticket.claim_id


class LaneCore(LaneSlots):
    """One lane's live state and rules.

    Calling convention (the actor and the local queue both follow it): for each operation,
    read `now` once, call `advance(now)` and keep its effects, then call the operation with
    the same `now`. An operation may raise a LaneError (not-found, not-owner, ...); it does
    so before changing anything, but time-driven changes (reaps, grants, a pause ending)
    belong to `advance` and must be persisted even when the operation is refused.

    Replies are protocol Structs (`coordinator.protocol.replies`); `coordinator` is the kind
    of host the core answers for ("actor-sqlite" in the server, "local-sqlite" in the
    client's local queue), which every top-level reply names. The state, indexes and queue
    math are `LaneQueue`'s (coordinator/engine/lane_queue.py), the reply views `LaneViews`'s
    (coordinator/engine/lane_views.py).
    """

    # ------------------------------------------------------------------ time

    def tick(self, now: float, fx: Effects) -> None:
        """End a due pause, reap due leases and waiters, then fill capacity."""
        if self.pause is not None and now >= self.pause.until:
            ended = self.pause
            self._set_pause(None, fx)
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
        while self.hold_ends and self.hold_ends[0][0] <= now:
            until, tid = self.hold_ends[0]
            self._end_in_flight(
                self.in_flight[tid], "expired", until, None, IncidentKind.IN_FLIGHT_EXPIRED, fx
            )
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

    def _set_pause(self, pause: Pause | None, fx: Effects) -> None:
        self.pause = pause
        fx.changes.append(PutPause(pause))
        fx.pause_changed = True

    def _expire(self, t: Ticket, fx: Effects) -> None:
        assert t.lease_expires_at is not None and t.held_at is not None
        expiry = t.lease_expires_at
        self._unindex(t)
        t.state = TicketState.EXPIRED
        t.outcome = Outcome.EXPIRED.value
        t.ended_at = expiry
        self.hold_samples.add(t.project, max(0.0, expiry - t.held_at))
        fx.changes.append(PutTicket(t))
        fx.woken.add(t.ticket_id)
        self._count_history(fx)
        self._incident(
            fx, IncidentKind.LEASE_EXPIRED, expiry, t.ticket_id, t.machine_id, {"fence": t.fence}
        )
        self._leave_in_flight(t, expiry, fx)

    def _end(
        self, t: Ticket, outcome: str | None, at: float, fx: Effects, by: str | None = None
    ) -> None:
        was_held = t.state is TicketState.HELD
        self._unindex(t)
        t.state = TicketState.DONE
        t.outcome = outcome
        t.ended_at = at
        if was_held and t.held_at is not None:
            self.hold_samples.add(t.project, max(0.0, at - t.held_at))
        fx.changes.append(PutTicket(t, by))
        fx.woken.add(t.ticket_id)
        if not was_held:
            fx.dequeued.append(t.seq)
        self._count_history(fx)
        if was_held and outcome in IN_FLIGHT_OUTCOMES:
            self._leave_in_flight(t, at, fx, by)

    def _count_history(self, fx: Effects) -> None:
        self.history_count += 1
        keep = self.settings.history_retained
        if self.history_count > keep:
            fx.changes.append(PruneHistory(keep, self.history_count - keep))
            self.history_count = keep

    def _begin(
        self, machine_id: str, ticket_id: str, now: float, ended: Ticket | None
    ) -> tuple[Effects, Ticket]:
        """A call on a ticket starts so: advance to `now`, note the machine, find the ticket
        (live, else `ended` as the store read it; not-found otherwise)."""
        fx = Effects()
        self.tick(now, fx)
        self._seen(machine_id, now)
        return fx, self._find(ticket_id, ended)

    def _find(self, ticket_id: str, ended: Ticket | None) -> Ticket:
        t = self.live.get(ticket_id) or self.in_flight.get(ticket_id)
        if t is None:
            t = ended
        if t is None or t.ticket_id != ticket_id:
            raise NotFound(f"ticketId: no ticket {ticket_id!r} in lane {self.lane}")
        return t

    # ------------------------------------------------------------------ commands

    def acquire(self, cmd: commands.Acquire, now: float) -> tuple[wire.LaneReply, Effects]:
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
                    cmd.credential,
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
            credential=cmd.credential,
        )
        self.next_seq += 1
        self._index(t)
        fx.changes.append(PutTicket(t, cmd.credential))
        fx.changes.append(PutCounters(self.last_fence, self.next_seq))
        self._promote(now, fx)
        reply = self.lane_reply(t, now, caller_owns=True, duplicate=False)
        # the ETA this ticket was first given, written with its row (docs/protocol.md#eta-error)
        t.eta_first_seconds = reply.ticket.eta_seconds
        if t.state is TicketState.HELD:  # granted at once: a grant with 0 given, 0 waited
            self._count_eta_error(t)
        return reply, fx

    def await_(
        self, call: commands.TicketCall, now: float, ended: Ticket | None
    ) -> tuple[wire.LaneReply, Effects, bool]:
        """Reply, effects, and whether the caller should park (the ticket is still queued)."""
        fx, t = self._begin(call.machine_id, call.ticket_id, now, ended)
        if not is_owner(t, call.machine_id, call.claim_id):
            raise NotOwner(f"ticketId: {call.ticket_id} is owned by another driver")
        self._keepalive(t, now)
        reply = self.lane_reply(t, now, caller_owns=True, duplicate=False)
        return reply, fx, t.state is TicketState.QUEUED

    def heartbeat(
        self, cmd: commands.Heartbeat, now: float, ended: Ticket | None
    ) -> tuple[wire.HeartbeatReply, Effects]:
        call = cmd.call
        fx, t = self._begin(call.machine_id, call.ticket_id, now, ended)
        reason: wire.HeartbeatReason | None = None
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
            fx.changes.append(PutTicket(t, call.credential))
        elif t.state is TicketState.QUEUED:
            self._keepalive(t, now)
            reason = "not-held"
        else:
            reason = "expired" if t.state is TicketState.EXPIRED else "done"
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
        self, cmd: commands.Release, now: float, ended: Ticket | None
    ) -> tuple[wire.ReleaseReply, Effects]:
        call = cmd.call
        fx, t = self._begin(call.machine_id, call.ticket_id, now, ended)
        promoted_before = len(fx.promoted)
        released = False
        reason: wire.ReleaseReason | None = None
        owner = is_owner(t, call.machine_id, call.claim_id)
        if owner and t.holds_in_flight and cmd.outcome in IN_FLIGHT_TERMINAL_OUTCOMES:
            # a late release that says the job ended reconciles its in-flight job (the
            # contract's values; `lateOutcome` keeps that it came as a release)
            how = f"reconciled:{cmd.outcome}"
            kind = IncidentKind.IN_FLIGHT_ENDED
            self._end_in_flight(t, how, now, call.machine_id, kind, fx, call.credential)
            self._promote(now, fx)
        if not owner:
            reason = "not-owner"
        elif t.state in (TicketState.HELD, TicketState.QUEUED):
            t.released_by = call.credential
            self._end(t, cmd.outcome, now, fx, call.credential)
            t.provider_job_id = cmd.provider_job_id
            t.note = cmd.note
            released = True
            self._promote(now, fx)
        elif t.state is TicketState.EXPIRED:
            t.state = TicketState.DONE
            t.late_outcome = cmd.outcome
            t.released_by = call.credential
            t.provider_job_id = t.provider_job_id or cmd.provider_job_id
            t.note = t.note or cmd.note
            fx.changes.append(PutTicket(t, call.credential))
            self._incident(
                fx,
                IncidentKind.LATE_RELEASE,
                now,
                t.ticket_id,
                call.machine_id,
                {"lateOutcome": cmd.outcome, "fence": t.fence},
                call.credential,
            )
            reason = "expired"
        else:
            reason = "already-done"
        return wire.ReleaseReply(
            coordinator=self.coordinator,
            released=released,
            state=t.state.value,
            outcome=cast("wire.Outcome | None", t.outcome),
            promoted=fx.promoted[promoted_before:],
            reason=reason,
        ), fx

    def cooldown(
        self, cmd: commands.Cooldown, now: float, ended: Ticket | None
    ) -> tuple[wire.CooldownReply, Effects]:
        call = cmd.call
        fx, t = self._begin(call.machine_id, call.ticket_id, now, ended)
        if not is_owner(t, call.machine_id, call.claim_id):
            raise NotOwner(f"ticketId: {call.ticket_id} is owned by another driver")
        if t.state is not TicketState.HELD:
            raise TicketNotHeld(
                f"ticketId: {call.ticket_id} is {t.state.value}; only a held ticket may pause"
            )
        until = now + cmd.retry_after_seconds
        reporter = (call.machine_id, call.claim_id, t.ticket_id, call.credential)
        previous = self.pause if self.paused(now) else None
        extended = False
        if previous is None:
            self._set_pause(Pause(cmd.reason_code, now, until, *reporter), fx)
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
                call.credential,
            )
        elif until > previous.until:
            # The pause began when it began: an extension keeps startedAt, takes the new
            # reporter and until; when it was extended is the incident's own record.
            self._set_pause(Pause(cmd.reason_code, previous.started_at, until, *reporter), fx)
            extended = True
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
                call.credential,
            )
        assert self.pause is not None
        reply = wire.CooldownReply(
            coordinator=self.coordinator, paused=True, extended=extended, pause=self.pause.wire()
        )
        return reply, fx

    def receipt(
        self,
        cmd: commands.RecordReceipt,
        now: float,
        ended: Ticket | None,
        existing: Receipt | None,
    ) -> tuple[wire.ReceiptReply, Effects, bool]:
        """Reply, effects, and whether a new receipt was stored (201) or not (200)."""
        fx, t = self._begin(cmd.machine_id, cmd.ticket_id, now, ended)
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
            credential=cmd.credential,
        )
        fx.changes.append(PutReceipt(rec))
        self._receipt_phase(t, cmd.phase, now, fx, cmd.credential)
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
                cmd.credential,
            )
        stored = wire.ReceiptReply(
            coordinator=self.coordinator, stored=True, replay=False, content_hash_verified=verified
        )
        return stored, fx, True

    def reconcile(
        self, cmd: commands.Reconcile, now: float, ended: Ticket | None
    ) -> tuple[wire.ReconcileReply, Effects]:
        """End an ended ticket's in-flight job by hand (docs/protocol.md#reconcile): its
        owner (or an admin credential, for any machine's ticket) says how the provider job
        ended; the next waiters are promoted."""
        call = cmd.call
        fx, t = self._begin(call.machine_id, call.ticket_id, now, ended)
        if not cmd.admin and not is_owner(t, call.machine_id, call.claim_id):
            raise NotOwner(f"ticketId: {call.ticket_id} is owned by another driver")
        if not t.holds_in_flight:
            raise NotInFlight(
                f"ticketId: {call.ticket_id} holds no in-flight slot ({self._hold_state(t)})"
            )
        before = len(fx.promoted)
        t.provider_job_id = t.provider_job_id or cmd.provider_job_id
        t.note = t.note or cmd.note
        how = f"reconciled:{cmd.outcome}"
        kind = IncidentKind.IN_FLIGHT_ENDED
        self._end_in_flight(t, how, now, call.machine_id, kind, fx, call.credential)
        self._promote(now, fx)
        return wire.ReconcileReply(
            coordinator=self.coordinator, reconciled=True, promoted=fx.promoted[before:]
        ), fx

    def advance(self, now: float) -> Effects:
        """The alarm: reap, end pauses and promote with no client call."""
        fx = Effects()
        self.tick(now, fx)
        return fx
