"""A lane's slots: grants, and the in-flight jobs that keep a slot after their ticket ended
(docs/protocol.md#in-flight). Pure, like the rest of the core; `LaneCore` builds on it."""

from __future__ import annotations

from typing import Any

from coordinator.engine.lane_views import LaneViews
from coordinator.engine.model import (
    Effects,
    Incident,
    IncidentKind,
    PruneIncidents,
    PutCounters,
    PutIncident,
    PutProjectServed,
    PutTicket,
    ReceiptPhase,
    Ticket,
    TicketState,
)


class LaneSlots(LaneViews):
    """Who takes the lane's slots: held tickets and in-flight jobs (capacity counts both)."""

    def _promote(self, now: float, fx: Effects) -> None:
        if self.paused(now):
            return
        while self.slots_taken() < self.settings.capacity and self.order:
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
        fx.dequeued.append(t.seq)
        # its ETA error (a ticket granted by the acquire that makes it has no first ETA yet:
        # that acquire counts it, engine/lane.py)
        self._count_eta_error(t)

    def _incident(
        self,
        fx: Effects,
        kind: IncidentKind,
        at: float,
        ticket_id: str | None,
        machine_id: str | None,
        detail: dict[str, Any],
        by: str | None = None,
    ) -> None:
        """`by`: the credential whose call caused it (None: the lane's clock)."""
        incident = Incident(kind.value, at, ticket_id, machine_id, detail, by)
        fx.changes.append(PutIncident(incident))
        self.incident_count += 1
        keep = self.settings.incidents_retained
        if self.incident_count > keep:
            fx.changes.append(PruneIncidents(keep, self.incident_count - keep))
            self.incident_count = keep

    def _leave_in_flight(self, t: Ticket, at: float, fx: Effects, by: str | None = None) -> None:
        """A held ticket ended at `at` (expired, or released lease-lost / timeout): while it
        has a provider-submitted receipt and no provider-terminal one, its job may still run
        on the account, so it keeps a slot until submittedAt + in_flight_hold_seconds
        (docs/protocol.md#in-flight). An end past that leaves none."""
        hold = self.settings.in_flight_hold_seconds
        if hold <= 0 or t.submitted_at is None or t.terminal_at is not None:
            return
        until = t.submitted_at + hold
        if at >= until:
            return
        t.in_flight_until = until
        t.in_flight_ended = None
        self._hold(t)
        fx.changes.append(PutTicket(t, by))
        self._incident(
            fx,
            IncidentKind.IN_FLIGHT_HELD,
            at,
            t.ticket_id,
            t.machine_id,
            {
                "fence": t.fence,
                "outcome": t.outcome,
                "submittedAt": t.submitted_at,
                "holdUntil": until,
            },
            by,
        )

    def _end_in_flight(
        self,
        t: Ticket,
        how: str,
        at: float,
        machine_id: str | None,
        kind: IncidentKind,
        fx: Effects,
        by: str | None = None,
    ) -> None:
        """The ticket's in-flight job ends (`how`: receipt, reconciled:<outcome>, expired);
        its slot is free (the caller promotes)."""
        assert t.in_flight_until is not None
        self._unhold(t)
        t.in_flight_ended = how
        fx.changes.append(PutTicket(t, by))
        fx.woken.add(t.ticket_id)
        self._incident(
            fx,
            kind,
            at,
            t.ticket_id,
            machine_id if machine_id is not None else t.machine_id,
            {"fence": t.fence, "ended": how, "holdUntil": t.in_flight_until},
            by,
        )

    def _receipt_phase(
        self, t: Ticket, phase: str, now: float, fx: Effects, by: str | None = None
    ) -> None:
        """What the in-flight rule keeps of a new receipt: on a held ticket, when its job was
        submitted (the latest submit) and whether it ended; on an ended ticket whose job holds
        a slot, provider-terminal ends that hold (docs/protocol.md#in-flight)."""
        if phase == ReceiptPhase.PROVIDER_TERMINAL.value and t.holds_in_flight:
            t.terminal_at = now
            self._end_in_flight(t, "receipt", now, None, IncidentKind.IN_FLIGHT_ENDED, fx, by)
            self._promote(now, fx)
        elif t.ticket_id in self.live:
            if phase == ReceiptPhase.PROVIDER_SUBMITTED.value:
                t.submitted_at = now
            elif phase == ReceiptPhase.PROVIDER_TERMINAL.value:
                t.terminal_at = now
            else:
                return
            fx.changes.append(PutTicket(t, by))

    @staticmethod
    def _hold_state(t: Ticket) -> str:
        if t.in_flight_ended is not None:
            return f"its hold already ended: {t.in_flight_ended}"
        if t.state in (TicketState.QUEUED, TicketState.HELD):
            return f"it is {t.state.value}"
        return f"it ended {t.outcome or 'with no outcome'} without a job in flight"
