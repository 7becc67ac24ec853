"""A small harness that drives LaneCore directly with explicit `now` values.

It plays the actor's part: mints ticket ids, remembers every ticket the core ever wrote
(so a call on an ended ticket can pass it as `ended`, as the actor does after loading it
from the store), and collects the changes each call returned.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

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
from coordinator.engine.model import (
    Change,
    Effects,
    LaneSettings,
    LaneSnapshot,
    PutIncident,
    PutTicket,
    Receipt,
    Ticket,
)

LANE = "solo:main"
T0 = 1_764_450_000.0


def as_wire(reply: msgspec.Struct) -> dict[str, Any]:
    """A core reply (a protocol Struct) as the JSON object it is on the wire."""
    out: dict[str, Any] = msgspec.to_builtins(reply)
    return out


def make_settings(
    capacity: int = 1,
    *,
    lease: float = 300.0,
    waiter: float = 600.0,
    hold: float = 300.0,
    history: int = 5000,
    incidents: int = 2000,
    in_flight: float = 0.0,
) -> LaneSettings:
    return LaneSettings(
        capacity=capacity,
        default_lease_seconds=lease,
        waiter_timeout_seconds=waiter,
        default_hold_seconds=hold,
        history_retained=history,
        incidents_retained=incidents,
        in_flight_hold_seconds=in_flight,
    )


class Harness:
    def __init__(
        self,
        capacity: int = 1,
        *,
        now: float = T0,
        snapshot: LaneSnapshot | None = None,
        actor_style: bool = False,
        **settings: Any,
    ) -> None:
        # actor_style: run `advance(now)` before every operation, as the lane actor and the
        # local queue do (so an operation that raises cannot lose what the tick changed).
        self.actor_style = actor_style
        self.now = now
        self.core = LaneCore(
            LANE, make_settings(capacity, **settings), snapshot or LaneSnapshot(), now
        )
        self.tickets: dict[str, Ticket] = {}
        self._ids = itertools.count(1)
        self.last: Effects = Effects()
        self.changes: list[Change] = []

    # -------------------------------------------------------------- plumbing

    def at(self, now: float) -> Harness:
        assert now >= self.now, "time never goes back"
        self.now = now
        return self

    def later(self, seconds: float) -> Harness:
        return self.at(self.now + seconds)

    def _begin(self) -> None:
        self.last = Effects()
        if self.actor_style:
            self._record(self.core.advance(self.now))

    def _record(self, fx: Effects) -> Effects:
        if fx is not self.last:
            self.last.extend(fx)
        self.changes.extend(fx.changes)
        for ch in fx.changes:
            if isinstance(ch, PutTicket):
                self.tickets[ch.ticket.ticket_id] = ch.ticket
        return fx

    def t(self, ticket_id: str) -> Ticket:
        return self.tickets[ticket_id]

    def incidents(self, fx: Effects | None = None) -> list[str]:
        src = self.changes if fx is None else fx.changes
        return [ch.incident.kind for ch in src if isinstance(ch, PutIncident)]

    # -------------------------------------------------------------- commands

    def acquire(
        self,
        project: str = "p",
        scene: str | None = None,
        prompt: str = "h",
        *,
        machine: str = "mA",
        claim: str | None = "cA",
        lease: float | None = None,
    ) -> dict[str, Any]:
        self._begin()
        n = next(self._ids)
        cmd = Acquire(
            machine_id=machine,
            claim_id=claim,
            project=project,
            scene=scene if scene is not None else f"s{n}",
            prompt_hash=prompt,
            lease_seconds=lease,
            new_ticket_id=f"t_{n:04d}",
        )
        reply, fx = self.core.acquire(cmd, self.now)
        self._record(fx)
        return as_wire(reply)

    def tid(self, project: str = "p", scene: str | None = None, **kw: Any) -> str:
        """Acquire and return the ticket id."""
        reply = self.acquire(project, scene, **kw)
        return str(reply["ticket"]["ticketId"])

    def call(self, ticket_id: str, machine: str, claim: str | None) -> TicketCall:
        return TicketCall(machine_id=machine, claim_id=claim, ticket_id=ticket_id)

    def owner_of(self, ticket_id: str) -> tuple[str, str | None]:
        t = self.tickets[ticket_id]
        return t.machine_id, t.claim_id

    def _who(
        self, ticket_id: str, machine: str | None, claim: str | None, default_claim: bool
    ) -> TicketCall:
        self._begin()
        om, oc = self.owner_of(ticket_id)
        m = om if machine is None else machine
        c = (oc if default_claim else None) if claim is None else claim
        return self.call(ticket_id, m, c)

    def await_(
        self,
        ticket_id: str,
        *,
        machine: str | None = None,
        claim: str | None = None,
        no_claim: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        call = self._who(ticket_id, machine, claim, not no_claim)
        reply, fx, park = self.core.await_(call, self.now, self.tickets.get(ticket_id))
        self._record(fx)
        return as_wire(reply), park

    def heartbeat(
        self,
        ticket_id: str,
        *,
        machine: str | None = None,
        claim: str | None = None,
        no_claim: bool = False,
        lease: float | None = None,
    ) -> dict[str, Any]:
        call = self._who(ticket_id, machine, claim, not no_claim)
        reply, fx = self.core.heartbeat(
            Heartbeat(call, lease), self.now, self.tickets.get(ticket_id)
        )
        self._record(fx)
        return as_wire(reply)

    def release(
        self,
        ticket_id: str,
        outcome: str | None = "completed",
        *,
        machine: str | None = None,
        claim: str | None = None,
        no_claim: bool = False,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        call = self._who(ticket_id, machine, claim, not no_claim)
        reply, fx = self.core.release(
            Release(call, outcome, provider_job_id, note), self.now, self.tickets.get(ticket_id)
        )
        self._record(fx)
        return as_wire(reply)

    def reconcile(
        self,
        ticket_id: str,
        outcome: str = "completed",
        *,
        machine: str | None = None,
        claim: str | None = None,
        no_claim: bool = False,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        call = self._who(ticket_id, machine, claim, not no_claim)
        reply, fx = self.core.reconcile(
            Reconcile(call, outcome, provider_job_id, note), self.now, self.tickets.get(ticket_id)
        )
        self._record(fx)
        return as_wire(reply)

    def cooldown(
        self,
        ticket_id: str,
        seconds: float,
        *,
        machine: str | None = None,
        claim: str | None = None,
        no_claim: bool = False,
    ) -> dict[str, Any]:
        call = self._who(ticket_id, machine, claim, not no_claim)
        reply, fx = self.core.cooldown(
            Cooldown(call, "provider-human-check", seconds), self.now, self.tickets.get(ticket_id)
        )
        self._record(fx)
        return as_wire(reply)

    def receipt(
        self,
        ticket_id: str,
        *,
        machine: str | None = None,
        phase: str = "lease-acquired",
        content_hash: str = "sha256:" + "a" * 64,
        computed_hash: str | None = None,
        existing: Receipt | None = None,
        payload_json: str = "{}",
    ) -> tuple[dict[str, Any], bool]:
        self._begin()
        t = self.tickets[ticket_id]
        cmd = RecordReceipt(
            machine_id=t.machine_id if machine is None else machine,
            claim_id=t.claim_id,
            ticket_id=ticket_id,
            receipt_id=f"{ticket_id}:{phase}:{content_hash.removeprefix('sha256:')[:16]}",
            phase=phase,
            payload_json=payload_json,
            content_hash=content_hash,
            computed_hash=content_hash if computed_hash is None else computed_hash,
        )
        reply, fx, stored = self.core.receipt(cmd, self.now, t, existing)
        self._record(fx)
        return as_wire(reply), stored

    def advance(self, now: float) -> Effects:
        self.at(now)
        self.last = Effects()
        fx = self.core.advance(now)
        self._record(fx)
        return fx

    # -------------------------------------------------------------- reads

    def order(self) -> list[str]:
        return [t.ticket_id for t in self.core.promotion_order(10_000)]

    def held(self) -> set[str]:
        return set(self.core.held)

    def view(self, ticket_id: str) -> dict[str, Any]:
        return as_wire(self.core.ticket_view(self.tickets[ticket_id], self.now))
