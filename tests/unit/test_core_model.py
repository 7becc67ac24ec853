"""LaneCore against a simple reference model (hypothesis RuleBasedStateMachine).

The model is written straight from docs/protocol.md (docs/protocol.md#ticket-lifecycle,
docs/protocol.md#fairness, docs/protocol.md#http-api) with no indexes: the promotion order is
simulated from scratch every time ("least recently served project first", ties to the oldest
enqueued ticket, FIFO within a project). Each rule runs the same operation on the core and on the
model and compares every visible outcome; the invariants check the core's state against the model
after every step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from coordinator.engine.lane import LaneCore
from coordinator.engine.model import LaneSnapshot, TicketState
from coordinator.protocol.errors import NotOwner, TicketNotHeld

from .kit import LANE, Harness, as_wire

WAITER = 50.0
LEASE = 60.0
HISTORY = 5

PROJECTS = st.sampled_from(["A", "B", "C", "D", "E"])
SCENES = st.sampled_from(["s1", "s2"])
PROMPTS = st.sampled_from(["h1", "h2"])
MACHINES = st.sampled_from(["m1", "m2"])
CLAIMS = st.sampled_from(["c1", "c2", None])
LEASES = st.sampled_from([None, 20.0, 150.0])
# Operations mostly arrive at the same moment (so queues build up); alarms move time on.
STEPS = st.one_of(st.just(0.0), st.sampled_from([1.0, 5.0, 10.0, 20.0, 30.0, 60.0]))
ALARM_STEPS = st.sampled_from([1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 200.0])
CALLERS = st.sampled_from(["owner", "owner", "owner-noclaim", "other-claim", "other-machine"])
OUTCOMES = st.sampled_from([None, "completed", "failed", "not-submitted"])


@dataclass
class MTicket:
    tid: str
    machine: str
    claim: str | None
    project: str
    identity: tuple[str, str, str]
    seq: int
    lease: float
    last_seen: float
    state: str = "queued"
    lease_exp: float | None = None
    fence: int | None = None
    held_at: float | None = None
    outcome: str | None = None
    late_outcome: str | None = None


def owns(t: MTicket, machine: str, claim: str | None) -> bool:
    if machine != t.machine:
        return False
    return claim is None or claim == t.claim


class Model:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tickets: dict[str, MTicket] = {}
        self.served: dict[str, int] = {}
        self.last_fence = 0
        self.seq = 0
        self.pause_until: float | None = None

    def by_state(self, state: str) -> list[MTicket]:
        return [t for t in self.tickets.values() if t.state == state]

    def live_identity(self, identity: tuple[str, str, str]) -> MTicket | None:
        for t in self.tickets.values():
            if t.state in ("queued", "held") and t.identity == identity:
                return t
        return None

    def paused(self, now: float) -> bool:
        return self.pause_until is not None and now < self.pause_until

    def order(self) -> list[str]:
        """docs/protocol.md#fairness, simulated grant by grant."""
        queues: dict[str, list[MTicket]] = {}
        for t in sorted(self.by_state("queued"), key=lambda x: x.seq):
            queues.setdefault(t.project, []).append(t)
        served = dict(self.served)
        fence = self.last_fence
        out: list[str] = []
        while queues:
            # never served = served longest ago (fences start at 1)
            project = min(queues, key=lambda p: (served.get(p, 0), queues[p][0].seq))
            out.append(queues[project].pop(0).tid)
            if not queues[project]:
                del queues[project]
            fence += 1
            served[project] = fence
        return out

    def promote(self, now: float) -> list[str]:
        out: list[str] = []
        if self.paused(now):
            return out
        while len(self.by_state("held")) < self.capacity:
            order = self.order()
            if not order:
                break
            t = self.tickets[order[0]]
            self.last_fence += 1
            t.state, t.fence, t.held_at = "held", self.last_fence, now
            t.lease_exp = now + t.lease
            self.served[t.project] = t.fence
            out.append(t.tid)
        return out

    def tick(self, now: float) -> tuple[list[str], bool]:
        """(promoted, whether the lane was paused when it tried to promote)."""
        if self.pause_until is not None and now >= self.pause_until:
            self.pause_until = None
        for t in self.by_state("held"):
            assert t.lease_exp is not None
            if t.lease_exp <= now:
                t.state, t.outcome = "expired", "expired"
        for t in self.by_state("queued"):
            if t.last_seen + WAITER <= now:
                t.state, t.outcome = "done", "abandoned"
        return self.promote(now), self.paused(now)

    def keepalive(self, t: MTicket, now: float) -> None:
        if t.state == "queued":
            t.last_seen = max(t.last_seen, now)


class LaneMachine(RuleBasedStateMachine):
    h: Harness
    model: Model

    @initialize(capacity=st.integers(min_value=1, max_value=3))
    def setup(self, capacity: int) -> None:
        self.h = Harness(
            capacity, lease=LEASE, waiter=WAITER, hold=50.0, history=HISTORY, actor_style=True
        )
        self.model = Model(capacity)
        self.fences: list[int] = []

    # ---------------------------------------------------------------- helpers

    def _step(self, dt: float) -> tuple[list[str], bool]:
        self.h.later(dt)
        return self.model.tick(self.h.now)

    def _check_promoted(self, expected: list[str], paused: bool) -> None:
        got = self.h.last.promoted
        assert got == expected, (got, expected)
        if paused:
            assert got == [], "promotion while paused"
        for tid in got:
            fence = self.h.t(tid).fence
            assert fence is not None
            assert not self.fences or fence == self.fences[-1] + 1, (self.fences, fence)
            self.fences.append(fence)

    def _caller(self, t: MTicket, who: str) -> tuple[str, str | None, bool]:
        """(machine, claim, no_claim) for the kind of caller drawn."""
        if who == "owner":
            return t.machine, t.claim, t.claim is None
        if who == "owner-noclaim":
            return t.machine, None, True
        if who == "other-claim":
            return t.machine, "c-other", False
        return "m-other", t.claim, t.claim is None

    def _pick(self, data: st.DataObject) -> MTicket:
        tid = data.draw(st.sampled_from(sorted(self.model.tickets)), label="ticket")
        return self.model.tickets[tid]

    def has_tickets(self) -> bool:
        return bool(self.model.tickets)

    # ---------------------------------------------------------------- rules

    @rule(
        dt=STEPS, machine=MACHINES, claim=CLAIMS, project=PROJECTS, scene=SCENES,
        prompt=PROMPTS, lease=LEASES,
    )  # fmt: skip
    def acquire(
        self,
        dt: float,
        machine: str,
        claim: str | None,
        project: str,
        scene: str,
        prompt: str,
        lease: float | None,
    ) -> None:
        promoted, paused = self._step(dt)
        m = self.model
        now = self.h.now
        existing = m.live_identity((project, scene, prompt))
        reply = self.h.acquire(project, scene, prompt, machine=machine, claim=claim, lease=lease)
        tid = reply["ticket"]["ticketId"]
        if existing is not None:
            # An acquire's owner is the exact (machineId, claimId) pair that created it.
            mine = (existing.machine, existing.claim) == (machine, claim)
            if mine:
                m.keepalive(existing, now)
            assert reply["duplicate"] is True
            assert tid == existing.tid
            assert reply["granted"] is (existing.state == "held" and mine)
            assert reply["owner"] == {"machineId": existing.machine, "claimId": existing.claim}
        else:
            m.seq += 1
            m.tickets[tid] = MTicket(
                tid, machine, claim, project, (project, scene, prompt), m.seq,
                lease or LEASE, now,
            )  # fmt: skip
            promoted += m.promote(now)
            assert reply["duplicate"] is False
            assert reply["granted"] is (m.tickets[tid].state == "held")
        assert reply["ticket"]["state"] == m.tickets[tid].state
        assert (reply["pause"] is not None) is m.paused(now)
        self._check_promoted(promoted, paused)

    @rule(machine=MACHINES, claim=CLAIMS, project=PROJECTS, scene=SCENES, prompt=PROMPTS)
    def acquire_same_moment(
        self, machine: str, claim: str | None, project: str, scene: str, prompt: str
    ) -> None:
        self.acquire(0.0, machine, claim, project, scene, prompt, None)

    @precondition(has_tickets)
    @rule(data=st.data(), dt=STEPS, who=CALLERS, outcome=OUTCOMES)
    def release(self, data: st.DataObject, dt: float, who: str, outcome: str | None) -> None:
        promoted, paused = self._step(dt)
        self._release(self._pick(data), who, outcome, promoted, paused)

    def _release(
        self, t: MTicket, who: str, outcome: str | None, promoted: list[str], paused: bool
    ) -> None:
        machine, claim, no_claim = self._caller(t, who)
        reply = self.h.release(t.tid, outcome, machine=machine, claim=claim, no_claim=no_claim)
        now = self.h.now
        expected: tuple[bool, str | None]
        if not owns(t, machine, claim):
            expected = (False, "not-owner")
        elif t.state in ("queued", "held"):
            t.state, t.outcome = "done", outcome
            promoted += self.model.promote(now)
            expected = (True, None)
        elif t.state == "expired":
            t.state, t.late_outcome = "done", outcome
            expected = (False, "expired")
        else:
            expected = (False, "already-done")
        assert (reply["released"], reply["reason"]) == expected
        assert reply["state"] == t.state and reply["outcome"] == t.outcome
        assert self.h.t(t.tid).late_outcome == t.late_outcome
        self._check_promoted(promoted, paused)

    @precondition(has_tickets)
    @rule(data=st.data(), dt=STEPS, who=CALLERS, lease=LEASES)
    def heartbeat(self, data: st.DataObject, dt: float, who: str, lease: float | None) -> None:
        promoted, paused = self._step(dt)
        self._heartbeat(self._pick(data), who, lease, promoted, paused)

    def _heartbeat(
        self, t: MTicket, who: str, lease: float | None, promoted: list[str], paused: bool
    ) -> None:
        machine, claim, no_claim = self._caller(t, who)
        reply = self.h.heartbeat(
            t.tid, machine=machine, claim=claim, no_claim=no_claim, lease=lease
        )
        now = self.h.now
        reason: str | None
        if not owns(t, machine, claim):
            reason = "not-owner"
        elif t.state == "held":
            t.lease_exp = now + (lease or t.lease)
            t.lease = lease or t.lease
            reason = None
        elif t.state == "queued":
            self.model.keepalive(t, now)
            reason = "not-held"
        else:
            reason = t.state
        assert reply["reason"] == reason
        assert reply["refreshed"] is (reason is None)
        if reason is None:
            assert reply["leaseExpiresAt"] == t.lease_exp and reply["fence"] == t.fence
        self._check_promoted(promoted, paused)

    @precondition(has_tickets)
    @rule(data=st.data(), dt=STEPS, who=CALLERS)
    def await_(self, data: st.DataObject, dt: float, who: str) -> None:
        promoted, paused = self._step(dt)
        t = self._pick(data)
        machine, claim, no_claim = self._caller(t, who)
        if not owns(t, machine, claim):
            with pytest.raises(NotOwner):
                self.h.await_(t.tid, machine=machine, claim=claim, no_claim=no_claim)
        else:
            reply, park = self.h.await_(t.tid, machine=machine, claim=claim, no_claim=no_claim)
            self.model.keepalive(t, self.h.now)
            assert park is (t.state == "queued")
            assert reply["ticket"]["state"] == t.state
            assert reply["granted"] is (t.state == "held")
        self._check_promoted(promoted, paused)

    @precondition(has_tickets)
    @rule(
        data=st.data(), dt=STEPS, who=CALLERS,
        seconds=st.sampled_from([30.0, 45.0, 100.0, 300.0]),
    )  # fmt: skip
    def cooldown(self, data: st.DataObject, dt: float, who: str, seconds: float) -> None:
        promoted, paused = self._step(dt)
        self._cooldown(self._pick(data), who, seconds, promoted, paused)

    def _cooldown(
        self, t: MTicket, who: str, seconds: float, promoted: list[str], paused: bool
    ) -> None:
        machine, claim, no_claim = self._caller(t, who)
        m = self.model
        now = self.h.now
        if not owns(t, machine, claim):
            with pytest.raises(NotOwner):
                self.h.cooldown(t.tid, seconds, machine=machine, claim=claim, no_claim=no_claim)
        elif t.state != "held":
            with pytest.raises(TicketNotHeld):
                self.h.cooldown(t.tid, seconds, machine=machine, claim=claim, no_claim=no_claim)
        else:
            reply = self.h.cooldown(t.tid, seconds, machine=machine, claim=claim, no_claim=no_claim)
            until = now + seconds
            extended = False
            if m.paused(now):
                assert m.pause_until is not None
                if until > m.pause_until:
                    m.pause_until, extended = until, True
            else:
                m.pause_until = until
            assert reply["paused"] is True and reply["extended"] is extended
            assert reply["pause"]["until"] == m.pause_until
        self._check_promoted(promoted, paused)

    # Targeted rules: the holder/waiter acting as itself (the common driver path).

    def has_held(self) -> bool:
        return bool(self.model.by_state("held"))

    def has_queued(self) -> bool:
        return bool(self.model.by_state("queued"))

    def _pick_in(self, data: st.DataObject, state: str) -> MTicket:
        tids = sorted(t.tid for t in self.model.by_state(state))
        return self.model.tickets[data.draw(st.sampled_from(tids), label=state)]

    @precondition(has_held)
    @rule(data=st.data(), seconds=st.sampled_from([30.0, 45.0, 100.0, 300.0]))
    def holder_cooldown(self, data: st.DataObject, seconds: float) -> None:
        promoted, paused = self._step(0.0)
        self._cooldown(self._pick_in(data, "held"), "owner", seconds, promoted, paused)

    @precondition(has_held)
    @rule(data=st.data(), outcome=OUTCOMES)
    def holder_release(self, data: st.DataObject, outcome: str | None) -> None:
        promoted, paused = self._step(0.0)
        self._release(self._pick_in(data, "held"), "owner", outcome, promoted, paused)

    @precondition(has_queued)
    @rule(data=st.data())
    def waiter_keepalive(self, data: st.DataObject) -> None:
        promoted, paused = self._step(0.0)
        self._heartbeat(self._pick_in(data, "queued"), "owner", None, promoted, paused)

    @rule(dt=ALARM_STEPS)
    def alarm(self, dt: float) -> None:
        """The actor's alarm: wake at every deadline up to now + dt."""
        target = self.h.now + dt
        while True:
            d = self.h.core.next_deadline()
            if d is None or d > target:
                break
            self.h.advance(max(d, self.h.now))
            promoted, paused = self.model.tick(self.h.now)
            self._check_promoted(promoted, paused)
            self.check_against_model()
        self.h.advance(target)
        promoted, paused = self.model.tick(target)
        self._check_promoted(promoted, paused)

    @rule(dt=ALARM_STEPS)
    def late_alarm(self, dt: float) -> None:
        """One late tick (a busy or restarted server): due leases keep their own expiry."""
        self.h.advance(self.h.now + dt)
        promoted, paused = self.model.tick(self.h.now)
        self._check_promoted(promoted, paused)
        for t in self.model.by_state("expired"):
            assert self.h.t(t.tid).ended_at == t.lease_exp

    @rule(dt=STEPS)
    def restart(self, dt: float) -> None:
        """Rebuild the core from what a store would load: the same order and fences."""
        self.h.later(dt)
        now = self.h.now
        core = self.h.core
        live = [dataclasses.replace(t) for t in core.live.values()]
        snap = LaneSnapshot(
            live=live,
            last_fence=core.last_fence,
            next_seq=core.next_seq,
            project_served=dict(core.served),
            pause=core.pause,
            history_count=core.history_count,
        )
        self.h.core = LaneCore(LANE, core.settings, snap, now)
        for t in live:
            self.h.tickets[t.ticket_id] = t
        for mt in self.model.by_state("queued"):
            mt.last_seen = max(mt.last_seen, now)  # a restart grants a fresh keep-alive window
        # The reloaded lane's alarm fires at once (anything already due is reaped).
        self.h.advance(now)
        promoted, paused = self.model.tick(now)
        self._check_promoted(promoted, paused)

    # ---------------------------------------------------------------- invariants

    @invariant()
    def check_against_model(self) -> None:
        core, m, now = self.h.core, self.model, self.h.now
        # capacity never exceeded
        assert len(core.held) <= m.capacity
        # at most one live ticket per identity
        identities = [t.identity for t in core.live.values()]
        assert len(identities) == len(set(identities))
        # held set, fences, leases
        held = {t.tid: t for t in m.by_state("held")}
        assert set(core.held) == set(held)
        for tid, mt in held.items():
            ct = core.held[tid]
            assert (ct.fence, ct.lease_expires_at) == (mt.fence, mt.lease_exp)
        assert core.last_fence == m.last_fence
        # every ticket's state
        for tid, mt in m.tickets.items():
            assert self.h.t(tid).state == TicketState(mt.state), tid
            assert self.h.t(tid).outcome == mt.outcome, tid
        # the queue is the model's §3 order; positions are 1..n along it
        order = m.order()
        got = [t.ticket_id for t in core.promotion_order(10_000)]
        assert got == order
        assert [core.position(core.live[tid]) for tid in order] == list(range(1, len(order) + 1))
        for tid in held:
            assert core.position(core.held[tid]) == 0
        # the pause
        assert core.paused(now) is m.paused(now)
        # ETA never decreases along the order and includes the pause
        status = as_wire(core.status(now, 10_000))
        etas = [q["etaSeconds"] for q in status["queued"]]
        assert etas == sorted(etas)
        if m.paused(now) and etas:
            assert m.pause_until is not None
            assert etas[0] >= round(m.pause_until - now, 3) - 1e-6
        assert [q["position"] for q in status["queued"]] == list(range(1, len(order) + 1))

    @invariant()
    def fences_strictly_increase(self) -> None:
        assert all(a < b for a, b in zip(self.fences, self.fences[1:], strict=False))
        fences = [t.fence for t in self.h.tickets.values() if t.fence is not None]
        assert len(fences) == len(set(fences))

    @invariant()
    def granted_head_of_order_when_capacity_free(self) -> None:
        """With a free slot and no pause, nothing may stay queued (the head would be granted)."""
        core, now = self.h.core, self.h.now
        if not core.paused(now) and len(core.held) < self.model.capacity:
            assert core.queued_count() == 0


LaneMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLaneModel = LaneMachine.TestCase
