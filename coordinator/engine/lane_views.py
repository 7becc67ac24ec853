"""The protocol views of a lane's state: a ticket, the pause, the lane reply, status and
the lane summary (`coordinator.protocol.replies` Structs)."""

from __future__ import annotations

from coordinator.engine.lane_queue import LaneQueue
from coordinator.engine.model import Ticket, TicketState
from coordinator.protocol import replies as wire


class LaneViews(LaneQueue):
    """A lane's replies, built from its state and queue math (`LaneQueue`)."""

    def ticket_view(
        self,
        t: Ticket,
        now: float,
        position: int | None = None,
        eta_seconds: float | None = None,
    ) -> wire.Ticket:
        pos: int | None
        eta: float | None
        if t.state is TicketState.QUEUED:
            pos = self.position(t) if position is None else position
            eta = self.eta(pos, now) if eta_seconds is None else eta_seconds
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
            credential=t.credential,
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
        held = sorted(self.held.values(), key=lambda t: t.fence or 0)
        queued = self.promotion_order(queued_limit)
        etas = self.etas(queued, now)
        return wire.StatusReply(
            coordinator=self.coordinator,
            lane=self.lane,
            enforced=True,
            capacity=self.settings.capacity,
            held=[self.ticket_view(t, now, 0) for t in held],
            queued=[self.ticket_view(t, now, i + 1, etas[i]) for i, t in enumerate(queued)],
            queued_total=self.queued_count(),
            pause=self.pause_view(now),
            now=now,
            in_flight=[self.in_flight_view(t) for t in self.in_flight_jobs()],
            eta_error=self.eta_errors.summary(),
        )

    def in_flight_jobs(self) -> list[Ticket]:
        """The in-flight jobs, the first to end first."""
        return [self.in_flight[tid] for _until, tid in self.hold_ends]

    @staticmethod
    def in_flight_view(t: Ticket) -> wire.InFlightJob:
        assert t.submitted_at is not None and t.ended_at is not None
        assert t.in_flight_until is not None
        return wire.InFlightJob(
            ticket_id=t.ticket_id,
            fence=t.fence,
            machine_id=t.machine_id,
            claim_id=t.claim_id,
            project=t.project,
            scene=t.scene,
            submitted_at=t.submitted_at,
            since=t.ended_at,
            hold_until=t.in_flight_until,
            credential=t.credential,
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
