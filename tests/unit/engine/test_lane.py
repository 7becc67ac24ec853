"""LaneCore (coordinator/engine/lane.py) driven directly with explicit `now` values."""

from __future__ import annotations

import pytest

from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    Reconcile,
    RecordReceipt,
    Release,
    TicketCall,
)
from coordinator.engine.lane import LaneCore, is_owner
from coordinator.engine.model import (
    IncidentKind,
    LaneSnapshot,
    Outcome,
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
from coordinator.protocol.errors import (
    NotFound,
    NotHolder,
    NotOwner,
    ReceiptConflict,
    TicketNotHeld,
)
from tests.unit.kit import LANE, T0, Harness, as_wire, make_settings

# What a core built without a host (the lane actor and the local queue name theirs) says in
# `coordinator` on every top-level reply.
HOST = {"coordinator": ""}

HASH_A = "sha256:" + "a" * 64
HASH_B = "sha256:" + "b" * 64


# ---------------------------------------------------------------- capacity


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_capacity_fills_and_no_more(capacity: int) -> None:
    h = Harness(capacity)
    replies = [h.acquire(f"p{i}") for i in range(capacity + 2)]
    granted = [r["granted"] for r in replies]
    assert granted == [True] * capacity + [False, False]
    assert [r["ticket"]["state"] for r in replies] == ["held"] * capacity + ["queued"] * 2
    assert [r["ticket"]["fence"] for r in replies[:capacity]] == list(range(1, capacity + 1))
    assert len(h.held()) == capacity
    assert h.core.queued_count() == 2
    # The first queued ticket is next; releasing one holder promotes exactly it.
    first_queued = replies[capacity]["ticket"]["ticketId"]
    rel = h.later(5).release(replies[0]["ticket"]["ticketId"])
    assert rel["released"] is True
    assert rel["promoted"] == [first_queued]
    assert h.t(first_queued).state is TicketState.HELD
    assert h.t(first_queued).held_at == T0 + 5
    assert h.t(first_queued).fence == capacity + 1
    assert len(h.held()) == capacity


def test_grant_writes_ticket_project_and_counters() -> None:
    h = Harness(1)
    r = h.acquire("proj")
    tid = r["ticket"]["ticketId"]
    kinds = [type(c) for c in h.last.changes]
    assert PutTicket in kinds and PutProjectServed in kinds and PutCounters in kinds
    served = [c for c in h.last.changes if isinstance(c, PutProjectServed)]
    assert served == [PutProjectServed("proj", 1, T0)]
    counters = [c for c in h.last.changes if isinstance(c, PutCounters)]
    assert counters[-1] == PutCounters(last_fence=1, next_seq=2)
    assert h.last.promoted == [tid]
    assert tid in h.last.woken
    assert r["ticket"]["leaseExpiresAt"] == T0 + 300
    assert r["ticket"]["heldAt"] == T0
    assert r["ticket"]["enqueuedAt"] == T0
    assert r["owner"] == {"machineId": "mA", "claimId": "cA"}
    assert r["enforced"] is True and r["lane"] == LANE and r["pause"] is None


def test_lease_seconds_from_acquire_or_default() -> None:
    h = Harness(2, lease=120.0)
    a = h.acquire("a")
    b = h.acquire("b", lease=45.0)
    assert a["ticket"]["leaseExpiresAt"] == T0 + 120
    assert b["ticket"]["leaseExpiresAt"] == T0 + 45


# ---------------------------------------------------- fairness (docs/protocol.md#fairness)


def _spec_example() -> tuple[Harness, dict[str, str]]:
    h = Harness(1)
    ids = {"A0": h.tid("A")}  # only A has ever been granted
    for name in ["A1", "A2", "B1", "C1", "B2"]:
        h.later(1)
        ids[name] = h.tid(name[0])
    return h, ids


def test_spec_section3_example_order_and_positions() -> None:
    h, ids = _spec_example()
    name = {v: k for k, v in ids.items()}
    assert h.held() == {ids["A0"]}
    assert [name[t] for t in h.order()] == ["B1", "C1", "A1", "B2", "A2"]
    expected_pos = {"B1": 1, "C1": 2, "A1": 3, "B2": 4, "A2": 5}
    for n, pos in expected_pos.items():
        assert h.core.position(h.t(ids[n])) == pos, n
        assert h.view(ids[n])["position"] == pos, n
    status = as_wire(h.core.status(h.now, 100))
    assert [q["ticketId"] for q in status["queued"]] == h.order()
    assert [q["position"] for q in status["queued"]] == [1, 2, 3, 4, 5]
    assert [x["ticketId"] for x in status["held"]] == [ids["A0"]]
    assert status["held"][0]["position"] == 0

    # A0 released: B1 is granted.
    rel = h.later(10).release(ids["A0"])
    assert rel["promoted"] == [ids["B1"]]
    assert [name[t] for t in h.order()] == ["C1", "A1", "B2", "A2"]
    # B1 released: C1 comes next (it was never served; A was, and B just was).
    rel = h.later(10).release(ids["B1"])
    assert rel["promoted"] == [ids["C1"]]
    assert [name[t] for t in h.order()] == ["A1", "B2", "A2"]
    rel = h.later(10).release(ids["C1"])
    assert rel["promoted"] == [ids["A1"]]
    rel = h.later(10).release(ids["A1"])
    assert rel["promoted"] == [ids["B2"]]
    rel = h.later(10).release(ids["B2"])
    assert rel["promoted"] == [ids["A2"]]
    fences = [h.t(ids[n]).fence for n in ["A0", "B1", "C1", "A1", "B2", "A2"]]
    assert fences == [1, 2, 3, 4, 5, 6]


def test_tie_between_never_served_projects_goes_to_oldest_enqueued() -> None:
    h = Harness(1)
    holder = h.tid("Z")
    y = h.later(1).tid("Y")
    x = h.later(1).tid("X")  # enqueued after Y
    assert h.order() == [y, x]
    assert h.later(1).release(holder)["promoted"] == [y]


def test_fifo_within_a_project() -> None:
    h = Harness(1)
    holder = h.tid("P")
    q = [h.later(1).tid("P") for _ in range(4)]
    assert h.order() == q
    assert [h.core.position(h.t(t)) for t in q] == [1, 2, 3, 4]
    for t in q:
        h.later(1).release(h.held().pop())
        assert h.held() == {t}
    assert holder not in h.core.live


def test_position_zero_for_held_and_none_when_ended() -> None:
    h = Harness(1)
    a = h.tid("a")
    b = h.tid("b")
    assert h.core.position(h.t(a)) == 0
    v = h.view(a)
    assert v["position"] == 0 and v["etaSeconds"] == 0.0
    assert h.view(b)["position"] == 1
    h.release(a)
    v = h.view(a)
    assert v["state"] == "done" and v["position"] is None and v["etaSeconds"] is None
    assert v["leaseExpiresAt"] is None


# ---------------------------------------------------------------- ETA


def test_eta_default_hold_without_history() -> None:
    h = Harness(1, hold=300.0)
    h.tid("a")
    q = [h.tid(f"q{i}") for i in range(3)]
    assert [h.view(t)["etaSeconds"] for t in q] == [300.0, 600.0, 900.0]
    # 100 s into the hold, the slot frees 100 s sooner.
    h.later(100)
    assert [h.view(t)["etaSeconds"] for t in q] == [200.0, 500.0, 800.0]
    # An overdue holder frees "now": never a negative wait.
    h.later(1000)
    assert h.view(q[0])["etaSeconds"] == 0.0


def test_eta_uses_measured_mean_after_releases() -> None:
    h = Harness(1, hold=300.0)
    a = h.tid("a")
    b = h.tid("b")
    h.later(100).release(a)  # hold 100; b held from T0+100
    c = h.tid("c")
    h.later(200).release(b)  # hold 200; c held from T0+300
    d = h.tid("d")
    e = h.tid("e")
    assert h.t(c).state is TicketState.HELD
    assert h.core.hold_estimate() == pytest.approx(150.0)
    assert h.view(d)["etaSeconds"] == pytest.approx(150.0)
    assert h.view(e)["etaSeconds"] == pytest.approx(300.0)


def test_eta_counts_expired_holds_as_measured() -> None:
    h = Harness(1, hold=300.0)
    a = h.tid("a", lease=60.0)
    h.advance(T0 + 60)
    assert h.t(a).state is TicketState.EXPIRED
    assert h.core.hold_estimate() == pytest.approx(60.0)


def test_eta_from_snapshot_recent_holds() -> None:
    snap = LaneSnapshot(recent_holds=[("p", 10.0), ("q", 30.0)])
    h = Harness(1, snapshot=snap)
    assert h.core.hold_estimate() == pytest.approx(20.0)


def test_eta_with_lane_clock_starting_at_zero() -> None:
    """held_at == 0.0 is a real time, not "unknown" (regression: `held_at or now`)."""
    h = Harness(1, now=0.0, hold=300.0)
    h.tid("a")
    b = h.tid("b")
    h.at(100.0)
    assert h.view(b)["etaSeconds"] == pytest.approx(200.0)


def test_eta_capacity_two_slots_and_waves() -> None:
    h = Harness(2, hold=100.0)
    h.tid("a")
    h.later(40).tid("b")  # slot frees at +100 (a) and +140 (b)
    q = [h.tid(f"q{i}") for i in range(4)]
    etas = [h.view(t)["etaSeconds"] for t in q]
    # a has 60 s left, b has 100 s left; then waves of 100 s.
    assert etas == [60.0, 100.0, 160.0, 200.0]


def test_eta_never_decreases_with_position() -> None:
    for capacity in (1, 2, 3):
        h = Harness(capacity, hold=90.0)
        for i in range(capacity):
            h.later(17 * i).tid(f"h{i}")
        for i in range(12):
            h.tid(f"p{i % 4}")
        h.later(33)
        status = as_wire(h.core.status(h.now, 100))
        etas = [q["etaSeconds"] for q in status["queued"]]
        assert len(etas) == 12
        assert etas == sorted(etas), (capacity, etas)
        # The per-ticket view agrees with the status list.
        for q in status["queued"]:
            assert h.view(q["ticketId"])["etaSeconds"] == q["etaSeconds"]
            assert h.view(q["ticketId"])["position"] == q["position"]


def test_eta_includes_remaining_pause() -> None:
    h = Harness(1, hold=300.0)
    a = h.tid("a")
    b = h.tid("b")
    assert h.view(b)["etaSeconds"] == 300.0
    h.later(10).cooldown(a, 900)
    # The pause runs 900 s from T0+10, then the slot has 290 s of its hold left.
    assert h.view(b)["etaSeconds"] == pytest.approx(900 + 290)
    h.later(100)
    assert h.view(b)["etaSeconds"] == pytest.approx(800 + 190)
    # Acquire while paused: queued, pause attached, ETA includes it.
    r = h.acquire("c")
    assert r["ticket"]["state"] == "queued" and r["granted"] is False
    assert r["pause"] is not None and r["pause"]["until"] == T0 + 910
    assert r["ticket"]["etaSeconds"] >= 800


# ---------------------------------------------------------------- dedupe


def test_owner_repeat_gets_same_ticket() -> None:
    h = Harness(1)
    first = h.acquire("p", "s", "h")
    seq = h.core.next_seq
    again = h.later(3).acquire("p", "s", "h")
    assert again["ticket"]["ticketId"] == first["ticket"]["ticketId"]
    assert again["duplicate"] is True and first["duplicate"] is False
    assert again["granted"] is True
    assert h.core.next_seq == seq  # no new ticket
    assert not any(isinstance(c, PutTicket) for c in h.last.changes)
    assert h.incidents(h.last) == []


def test_owner_repeat_while_queued_is_not_granted_and_keeps_alive() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    h.tid("x")
    q = h.acquire("p", "s", "h")
    tid = q["ticket"]["ticketId"]
    again = h.later(500).acquire("p", "s", "h")
    assert again["ticket"]["ticketId"] == tid and again["duplicate"] is True
    assert again["granted"] is False and again["ticket"]["state"] == "queued"
    h.advance(T0 + 1099)
    assert h.t(tid).state is TicketState.QUEUED


def test_non_owner_never_granted_and_collision_recorded() -> None:
    h = Harness(1)
    mine = h.acquire("p", "s", "h", machine="mA", claim="cA")
    tid = mine["ticket"]["ticketId"]
    theirs = h.later(1).acquire("p", "s", "h", machine="mB", claim="cB")
    assert theirs["ticket"]["ticketId"] == tid
    assert theirs["duplicate"] is True
    assert theirs["granted"] is False
    assert theirs["ticket"]["state"] == "held"
    assert theirs["owner"] == {"machineId": "mA", "claimId": "cA"}
    assert h.incidents(h.last) == [IncidentKind.DUPLICATE_COLLISION.value]
    coll = h.core.last_collision
    assert coll is not None
    assert coll["ticketId"] == tid
    assert coll["owner"] == {"machineId": "mA", "claimId": "cA"}
    assert coll["requester"] == {"machineId": "mB", "claimId": "cB"}
    assert coll["granted"] is True
    # Same computer, another driver (claim named and different): not the owner either.
    other_claim = h.acquire("p", "s", "h", machine="mA", claim="cZ")
    assert other_claim["granted"] is False and other_claim["ticket"]["ticketId"] == tid
    assert h.incidents(h.last) == [IncidentKind.DUPLICATE_COLLISION.value]
    # A claimless acquire from the owner's machine is not the creating pair either.
    claimless = h.acquire("p", "s", "h", machine="mA", claim=None)
    assert claimless["granted"] is False and claimless["ticket"]["ticketId"] == tid
    assert h.incidents(h.last) == [IncidentKind.DUPLICATE_COLLISION.value]


def test_non_owner_of_queued_duplicate_is_not_granted_after_promotion() -> None:
    h = Harness(1)
    holder = h.tid("x")
    tid = h.acquire("p", "s", "h", machine="mA", claim="cA")["ticket"]["ticketId"]
    h.later(1).release(holder)
    assert h.t(tid).state is TicketState.HELD
    r = h.acquire("p", "s", "h", machine="mB", claim="cB")
    assert r["ticket"]["ticketId"] == tid and r["granted"] is False
    r = h.acquire("p", "s", "h", machine="mA", claim="cA")
    assert r["granted"] is True


def test_non_owner_duplicate_does_not_keep_waiter_alive() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    h.tid("x")
    tid = h.acquire("p", "s", "h", machine="mA")["ticket"]["ticketId"]
    h.later(500).acquire("p", "s", "h", machine="mB", claim="cB")
    h.advance(T0 + 600)
    assert h.t(tid).state is TicketState.DONE
    assert h.t(tid).outcome == Outcome.ABANDONED.value


def test_identity_reusable_after_ticket_ends() -> None:
    h = Harness(1)
    a = h.acquire("p", "s", "h")["ticket"]["ticketId"]
    h.later(1).release(a)
    r = h.acquire("p", "s", "h")
    assert r["duplicate"] is False and r["ticket"]["ticketId"] != a
    assert r["granted"] is True


def test_identity_is_the_triple() -> None:
    h = Harness(5)
    ids = {
        h.acquire("p", "s", "h")["ticket"]["ticketId"],
        h.acquire("p", "s", "h2")["ticket"]["ticketId"],
        h.acquire("p", "s2", "h")["ticket"]["ticketId"],
        h.acquire("p2", "s", "h")["ticket"]["ticketId"],
    }
    assert len(ids) == 4


# ---------------------------------------------------------------- owner rule


def _ticket(machine: str, claim: str | None) -> Ticket:
    return Ticket(
        ticket_id="t_x", lane=LANE, state=TicketState.HELD, machine_id=machine,
        claim_id=claim, project="p", scene="s", prompt_hash="h", seq=1, enqueued_at=T0,
        lease_seconds=60, last_seen_at=T0,
    )  # fmt: skip


def test_owner_rule_function() -> None:
    t = _ticket("mA", "cA")
    assert is_owner(t, "mA", "cA")
    assert is_owner(t, "mA", None)  # no claim named: the machine alone decides
    assert not is_owner(t, "mA", "cB")
    assert not is_owner(t, "mB", "cA")
    assert not is_owner(t, "mB", None)
    unclaimed = _ticket("mA", None)
    assert is_owner(unclaimed, "mA", None)
    assert not is_owner(unclaimed, "mA", "cA")  # a named claim must equal the ticket's
    assert not is_owner(unclaimed, "mB", None)


@pytest.mark.parametrize(
    ("machine", "claim", "owner"),
    [("mA", "cA", True), ("mA", None, True), ("mA", "cB", False), ("mB", "cA", False),
     ("mB", None, False)],
)  # fmt: skip
def test_owner_rule_on_every_ticket_call(machine: str, claim: str | None, owner: bool) -> None:
    h = Harness(1)
    tid = h.tid("p", machine="mA", claim="cA")
    no_claim = claim is None
    hb = h.heartbeat(tid, machine=machine, claim=claim, no_claim=no_claim)
    assert hb["refreshed"] is owner
    assert hb["reason"] == (None if owner else "not-owner")
    if owner:
        h.await_(tid, machine=machine, claim=claim, no_claim=no_claim)
        assert h.cooldown(tid, 60, machine=machine, claim=claim, no_claim=no_claim)["paused"]
    else:
        with pytest.raises(NotOwner):
            h.await_(tid, machine=machine, claim=claim, no_claim=no_claim)
        with pytest.raises(NotOwner):
            h.cooldown(tid, 60, machine=machine, claim=claim, no_claim=no_claim)
    rel = h.release(tid, machine=machine, claim=claim, no_claim=no_claim)
    assert rel["released"] is owner
    assert rel["reason"] == (None if owner else "not-owner")
    assert h.t(tid).state is (TicketState.DONE if owner else TicketState.HELD)


def test_hand_release_from_same_machine_unwedges_killed_driver() -> None:
    h = Harness(1)
    tid = h.tid("p", machine="mA", claim="dead-driver")
    waiter = h.tid("q", machine="mB", claim="cB")
    rel = h.later(5).release(tid, None, machine="mA", no_claim=True)
    assert rel["released"] is True and rel["outcome"] is None
    assert rel["promoted"] == [waiter]


# ---------------------------------------------------------------- await


def test_await_parks_only_while_queued_and_keeps_alive() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    a = h.tid("a")
    b = h.tid("b")
    reply, park = h.later(500).await_(b)
    assert park is True and reply["ticket"]["state"] == "queued" and reply["granted"] is False
    assert reply["duplicate"] is False
    h.advance(T0 + 1099)
    assert h.t(b).state is TicketState.QUEUED
    h.release(a)
    reply, park = h.await_(b)
    assert park is False and reply["granted"] is True and reply["ticket"]["state"] == "held"
    with pytest.raises(NotFound):
        h.core.await_(h.call("t_nope", "mA", "cA"), h.now, None)


# ---------------------------------------------------------------- heartbeat


def test_heartbeat_refreshes_held_lease() -> None:
    h = Harness(1, lease=300.0)
    tid = h.tid("p")
    hb = h.later(100).heartbeat(tid)
    assert hb == HOST | {
        "refreshed": True, "state": "held", "leaseExpiresAt": T0 + 400, "fence": 1,
        "reason": None,
    }  # fmt: skip
    assert h.t(tid).heartbeat_at == T0 + 100
    assert any(isinstance(c, PutTicket) for c in h.last.changes)
    hb = h.later(100).heartbeat(tid, lease=30.0)
    assert hb["leaseExpiresAt"] == T0 + 230
    # The new lease length sticks for later heartbeats that name none.
    hb = h.later(10).heartbeat(tid)
    assert hb["leaseExpiresAt"] == T0 + 240
    # The alarm follows the refreshed lease, not the original one.
    assert h.core.next_deadline() == T0 + 240
    h.advance(T0 + 239.999)
    assert h.t(tid).state is TicketState.HELD
    h.advance(T0 + 240)
    assert h.t(tid).state is TicketState.EXPIRED


def test_heartbeat_not_held_keeps_waiter_alive() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    h.tid("a")
    b = h.tid("b")
    hb = h.later(500).heartbeat(b)
    assert hb == HOST | {
        "refreshed": False, "state": "queued", "leaseExpiresAt": None, "fence": None,
        "reason": "not-held",
    }  # fmt: skip
    h.advance(T0 + 1099.9)
    assert h.t(b).state is TicketState.QUEUED
    h.advance(T0 + 1100)
    assert h.t(b).state is TicketState.DONE and h.t(b).outcome == "abandoned"


def test_heartbeat_expired_done_not_owner_and_unknown() -> None:
    h = Harness(2, lease=60.0)
    a = h.tid("a")
    b = h.tid("b")
    h.advance(T0 + 60)  # both expire
    assert h.heartbeat(a)["reason"] == "expired"
    hb = h.heartbeat(a)
    assert hb["refreshed"] is False and hb["state"] == "expired"
    assert hb["leaseExpiresAt"] is None and hb["fence"] == 1
    h.release(b)  # late release: expired -> done
    hb = h.heartbeat(b)
    assert hb["reason"] == "done" and hb["state"] == "done"
    c = h.tid("c")
    hb = h.heartbeat(c, machine="mB", claim="cB")
    assert hb["reason"] == "not-owner" and hb["refreshed"] is False
    assert hb["fence"] is None and hb["leaseExpiresAt"] is None  # nothing leaks to a stranger
    with pytest.raises(NotFound):
        h.core.heartbeat(Heartbeat(h.call("t_missing", "mA", "cA"), None), h.now, None)


def test_heartbeat_at_exact_expiry_is_too_late() -> None:
    h = Harness(1, lease=60.0)
    tid = h.tid("p")
    hb = h.at(T0 + 60).heartbeat(tid)
    assert hb["reason"] == "expired"


# ---------------------------------------------------------------- release


def test_release_held_promotes_and_records() -> None:
    h = Harness(1)
    a = h.tid("a")
    b = h.tid("b")
    rel = h.later(42).release(a, "failed", provider_job_id="job-1", note="oops")
    assert rel == HOST | {
        "released": True, "state": "done", "outcome": "failed", "promoted": [b], "reason": None,
    }  # fmt: skip
    t = h.t(a)
    assert t.ended_at == T0 + 42 and t.provider_job_id == "job-1" and t.note == "oops"
    assert t.late_outcome is None
    assert h.t(b).state is TicketState.HELD and h.t(b).held_at == T0 + 42
    assert a not in h.core.live and a in h.last.woken and b in h.last.woken


def test_release_queued_ends_it_without_taking_a_slot() -> None:
    h = Harness(1)
    a = h.tid("a")
    b = h.tid("b")
    c = h.tid("c")
    rel = h.later(5).release(b, "not-submitted")
    assert rel["released"] is True and rel["state"] == "done" and rel["promoted"] == []
    assert h.t(b).outcome == "not-submitted" and h.t(b).held_at is None
    assert h.order() == [c]
    assert h.core.position(h.t(c)) == 1
    assert h.release(a)["promoted"] == [c]


def test_release_of_expired_keeps_expired_outcome() -> None:
    h = Harness(1, lease=60.0)
    a = h.tid("a")
    h.advance(T0 + 60)
    rel = h.later(30).release(a, "completed", provider_job_id="job-9", note="late")
    assert rel == HOST | {
        "released": False, "state": "done", "outcome": "expired", "promoted": [],
        "reason": "expired",
    }  # fmt: skip
    t = h.t(a)
    assert t.state is TicketState.DONE
    assert t.outcome == "expired" and t.late_outcome == "completed"
    assert t.ended_at == T0 + 60  # the reap time stays the end of the hold
    assert t.provider_job_id == "job-9" and t.note == "late"
    assert h.incidents(h.last) == [IncidentKind.LATE_RELEASE.value]
    # A second late release: already done.
    rel = h.release(a, "failed")
    assert rel["reason"] == "already-done" and h.t(a).late_outcome == "completed"


def test_release_already_done_changes_nothing() -> None:
    h = Harness(1)
    a = h.tid("a")
    h.release(a, "completed")
    rel = h.later(5).release(a, "failed", note="again")
    assert rel == HOST | {
        "released": False, "state": "done", "outcome": "completed", "promoted": [],
        "reason": "already-done",
    }  # fmt: skip
    assert h.last.changes == []
    assert h.t(a).note is None


def test_release_not_owner_changes_nothing() -> None:
    h = Harness(1)
    a = h.tid("a")
    b = h.tid("b")
    rel = h.release(a, "completed", machine="mB", claim="cB")
    assert rel == HOST | {
        "released": False, "state": "held", "outcome": None, "promoted": [],
        "reason": "not-owner",
    }  # fmt: skip
    assert h.last.changes == []
    assert h.t(a).state is TicketState.HELD and h.t(b).state is TicketState.QUEUED


def test_release_unknown_ticket_is_not_found() -> None:
    h = Harness(1)
    with pytest.raises(NotFound) as exc:
        h.core.release(Release(h.call("t_zz", "mA", None), None, None, None), h.now, None)
    assert "ticketId" in exc.value.message


# ---------------------------------------------------------------- cooldown


def test_cooldown_by_holder_pauses_and_records() -> None:
    h = Harness(1)
    a = h.tid("a")
    r = h.later(10).cooldown(a, 600)
    assert r == HOST | {
        "paused": True,
        "extended": False,
        "pause": {
            "reasonCode": "provider-human-check", "startedAt": T0 + 10, "until": T0 + 610,
            "machineId": "mA", "claimId": "cA", "ticketId": a, "credential": None,
        },
    }  # fmt: skip
    assert h.incidents(h.last) == [IncidentKind.COOLDOWN_STARTED.value]
    assert next(c for c in h.last.changes if isinstance(c, PutPause)).pause is not None
    assert h.last.pause_changed is True
    assert h.core.paused(h.now) and h.core.next_deadline() == T0 + 300  # the lease first
    pause = h.core.pause_view(h.now)
    assert pause is not None and as_wire(pause) == r["pause"]


@pytest.mark.parametrize("state", ["queued", "done", "expired"])
def test_cooldown_needs_a_held_ticket(state: str) -> None:
    h = Harness(1, lease=60.0)
    a = h.tid("a")
    b = h.tid("b")
    target = b
    if state == "done":
        h.release(b)
    elif state == "expired":
        h.release(b)
        h.release(a)
        target = h.tid("c")
        h.advance(T0 + 60)
        assert h.t(target).state is TicketState.EXPIRED
    assert h.t(target).state.value == state
    with pytest.raises(TicketNotHeld) as exc:
        h.cooldown(target, 600)
    assert "ticketId" in exc.value.message
    assert h.core.pause is None


def test_cooldown_by_other_owner_is_refused() -> None:
    h = Harness(1)
    a = h.tid("a")
    with pytest.raises(NotOwner):
        h.cooldown(a, 600, machine="mB", claim="cB")
    assert h.core.pause is None


def test_cooldown_longer_replaces_shorter_never_trims() -> None:
    h = Harness(2)
    a = h.tid("a")
    b = h.tid("b", machine="mB", claim="cB")
    h.cooldown(a, 600)
    r = h.later(100).cooldown(b, 900)  # until T0+1000 > T0+600
    assert r["extended"] is True and r["pause"]["until"] == T0 + 1000
    assert r["pause"]["ticketId"] == b and r["pause"]["machineId"] == "mB"
    assert h.incidents(h.last) == [IncidentKind.COOLDOWN_EXTENDED.value]
    r = h.later(100).cooldown(a, 30)  # until T0+230: shorter, never trims
    assert r["extended"] is False and r["pause"]["until"] == T0 + 1000
    assert h.last.changes == [] and h.last.pause_changed is False
    r = h.cooldown(a, 800)  # until T0+1000 exactly: not longer
    assert r["extended"] is False and r["pause"]["until"] == T0 + 1000


def test_no_promotion_while_paused_and_pause_end_promotes() -> None:
    h = Harness(1, waiter=3600.0)
    a = h.tid("a")
    b = h.tid("b")
    h.later(10).cooldown(a, 600)  # until T0+610
    rel = h.later(10).release(a, "not-submitted")
    assert rel["released"] is True and rel["promoted"] == []
    assert h.held() == set()
    c = h.acquire("c")
    assert c["granted"] is False and c["ticket"]["state"] == "queued"
    assert c["pause"]["until"] == T0 + 610
    assert h.core.next_deadline() == T0 + 610
    assert h.advance(T0 + 609.999).promoted == []
    assert h.core.pause is not None
    fx = h.advance(T0 + 610)
    assert fx.promoted == [b]
    assert fx.pause_changed is True
    assert PutPause(None) in fx.changes
    assert h.incidents(fx) == [IncidentKind.COOLDOWN_ENDED.value]
    assert h.core.pause is None and h.core.pause_view(h.now) is None
    assert h.t(b).held_at == T0 + 610


def test_late_alarm_ends_pause_with_its_own_time() -> None:
    h = Harness(1)
    a = h.tid("a")
    h.cooldown(a, 60)
    fx = h.advance(T0 + 100)
    ended = [c.incident for c in fx.changes if hasattr(c, "incident")]
    assert [i.kind for i in ended] == [IncidentKind.COOLDOWN_ENDED.value]
    assert ended[0].at == T0 + 60


# ---------------------------------------------------------------- alarm


def test_lease_reaped_exactly_at_expiry() -> None:
    h = Harness(1, lease=60.0)
    a = h.tid("a")
    b = h.tid("b")
    assert h.core.next_deadline() == T0 + 60
    fx = h.advance(T0 + 59.999)
    assert fx.changes == [] and h.t(a).state is TicketState.HELD
    fx = h.advance(T0 + 60)
    t = h.t(a)
    assert t.state is TicketState.EXPIRED and t.outcome == "expired" and t.ended_at == T0 + 60
    assert fx.promoted == [b] and h.t(b).held_at == T0 + 60
    assert IncidentKind.LEASE_EXPIRED.value in h.incidents(fx)


def test_late_alarm_keeps_original_expiry() -> None:
    h = Harness(1, lease=60.0)
    a = h.tid("a")
    b = h.tid("b")
    fx = h.advance(T0 + 500)
    assert h.t(a).ended_at == T0 + 60
    assert fx.promoted == [b]
    assert h.t(b).held_at == T0 + 500  # granted when the alarm ran


def test_reaping_in_order_several_leases() -> None:
    h = Harness(3, lease=300.0)
    x = h.tid("x", lease=30)
    y = h.tid("y", lease=20)
    z = h.tid("z", lease=100)
    h.advance(T0 + 50)
    assert h.t(x).ended_at == T0 + 30 and h.t(y).ended_at == T0 + 20
    assert h.t(z).state is TicketState.HELD
    assert h.core.next_deadline() == T0 + 100


def test_waiter_abandoned_after_timeout() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    h.tid("a")
    b = h.tid("b")
    assert h.core.next_deadline() == T0 + 600
    h.advance(T0 + 599.999)
    assert h.t(b).state is TicketState.QUEUED
    fx = h.advance(T0 + 600)
    t = h.t(b)
    assert t.state is TicketState.DONE and t.outcome == "abandoned" and t.ended_at == T0 + 600
    assert h.incidents(fx) == [IncidentKind.WAITER_ABANDONED.value]
    assert b not in h.core.live and h.order() == []


@pytest.mark.parametrize("how", ["acquire", "await", "heartbeat"])
def test_waiter_kept_alive(how: str) -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    h.tid("a")
    b = h.acquire("b", "s", "h")["ticket"]["ticketId"]
    h.at(T0 + 500)
    if how == "acquire":
        h.acquire("b", "s", "h")
    elif how == "await":
        h.await_(b)
    else:
        h.heartbeat(b)
    assert h.core.next_deadline() == T0 + 1100
    h.advance(T0 + 1000)
    assert h.t(b).state is TicketState.QUEUED
    h.advance(T0 + 1100)
    assert h.t(b).state is TicketState.DONE and h.t(b).outcome == "abandoned"


def test_held_ticket_is_never_abandoned() -> None:
    h = Harness(1, waiter=60.0, lease=3600.0)
    a = h.tid("a")
    h.advance(T0 + 1000)
    assert h.t(a).state is TicketState.HELD


def test_restart_gives_waiters_a_fresh_window_and_keeps_fences() -> None:
    h = Harness(1, waiter=600.0, lease=3600.0)
    a = h.tid("a")
    b = h.tid("b")
    live = [h.t(a), h.t(b)]
    snap = LaneSnapshot(live=live, last_fence=h.core.last_fence, next_seq=h.core.next_seq,
                        project_served=dict(h.core.served))  # fmt: skip
    later = T0 + 5000
    core = LaneCore(LANE, make_settings(1, waiter=600.0, lease=3600.0), snap, later)
    assert core.next_deadline() == T0 + 3600  # the lease (already due) comes first
    fx = core.advance(later)
    assert h.t(a).state is TicketState.EXPIRED and h.t(a).ended_at == T0 + 3600
    assert fx.promoted == [b] and h.t(b).fence == 2


# ---------------------------------------------------------------- fences


def test_fences_strictly_increase_and_never_repeat() -> None:
    h = Harness(2, lease=60.0)
    for round_ in range(10):
        for i in range(3):
            h.tid(f"p{i}")
        if round_ % 2:
            h.advance(h.now + 60)  # the alarm expires the holders and promotes
        for t in sorted(h.core.live):
            if t in h.core.live:
                h.release(t)
        h.later(1)
    # Every grant, in order, as the store would persist it.
    grants = [c.fence for c in h.changes if isinstance(c, PutProjectServed)]
    assert len(grants) == 30  # each of the 30 tickets was granted exactly once
    assert grants == list(range(1, 31))
    assert h.core.last_fence == 30
    fences = [t.fence for t in h.tickets.values()]
    assert sorted(f for f in fences if f is not None) == grants


def test_fences_continue_from_snapshot() -> None:
    h = Harness(1, snapshot=LaneSnapshot(last_fence=41, next_seq=7))
    r = h.acquire("p")
    assert r["ticket"]["fence"] == 42
    assert h.t(r["ticket"]["ticketId"]).seq == 7


# ---------------------------------------------------------------- receipts


def _existing(h: Harness, tid: str, content_hash: str, verified: bool | None) -> Receipt:
    return Receipt(
        receipt_id=f"{tid}:lease-acquired:{content_hash.removeprefix('sha256:')[:16]}",
        ticket_id=tid, phase="lease-acquired", machine_id="mA", payload_json="{}",
        content_hash=content_hash, content_hash_verified=verified, created_at=T0,
    )  # fmt: skip


def test_receipt_new_replay_conflict() -> None:
    h = Harness(1)
    a = h.tid("a")
    reply, stored = h.receipt(a, content_hash=HASH_A)
    assert stored is True
    assert reply == HOST | {"stored": True, "replay": False, "contentHashVerified": True}
    puts = [c.receipt for c in h.last.changes if isinstance(c, PutReceipt)]
    assert len(puts) == 1 and puts[0].content_hash == HASH_A and puts[0].created_at == T0
    assert puts[0].content_hash_verified is True
    assert h.incidents(h.last) == []

    reply, stored = h.receipt(a, content_hash=HASH_A, existing=_existing(h, a, HASH_A, True))
    assert stored is False
    assert reply == HOST | {"stored": False, "replay": True, "contentHashVerified": True}
    assert h.last.changes == []
    # An old row stored before verdicts replays with null.
    reply, _ = h.receipt(a, content_hash=HASH_A, existing=_existing(h, a, HASH_A, None))
    assert reply["contentHashVerified"] is None

    with pytest.raises(ReceiptConflict):
        h.receipt(a, content_hash=HASH_B, existing=_existing(h, a, HASH_A, True))


def test_receipt_hash_mismatch_stored_and_flagged() -> None:
    h = Harness(1)
    a = h.tid("a")
    reply, stored = h.receipt(a, content_hash=HASH_A, computed_hash=HASH_B)
    assert stored is True
    assert reply == HOST | {"stored": True, "replay": False, "contentHashVerified": False}
    puts = [c.receipt for c in h.last.changes if isinstance(c, PutReceipt)]
    assert puts[0].content_hash == HASH_A and puts[0].content_hash_verified is False
    assert h.incidents(h.last) == [IncidentKind.RECEIPT_HASH_MISMATCH.value]


def test_receipt_from_another_machine_is_not_holder() -> None:
    h = Harness(1)
    a = h.tid("a")
    with pytest.raises(NotHolder) as exc:
        h.receipt(a, machine="mB")
    assert "machineId" in exc.value.message
    assert h.last.changes == []


def test_receipt_for_ended_ticket_is_accepted() -> None:
    h = Harness(1)
    a = h.tid("a")
    h.release(a)
    reply, stored = h.receipt(a, phase="provider-terminal")
    assert stored is True and reply["stored"] is True


# ---------------------------------------------------------------- retention


def test_history_pruned_beyond_retention() -> None:
    h = Harness(1, history=3)
    for i in range(3):
        h.release(h.tid(f"p{i}"))
        assert not any(isinstance(c, PruneHistory) for c in h.last.changes)
    h.release(h.tid("p3"))
    assert PruneHistory(3) in h.last.changes
    # Expiry counts too.
    h.tid("p4", lease=20)
    fx = h.advance(h.now + 20)
    assert PruneHistory(3) in fx.changes
    assert h.core.history_count == 3


def test_history_count_from_snapshot() -> None:
    h = Harness(1, history=3, snapshot=LaneSnapshot(history_count=3))
    h.release(h.tid("p"))
    assert PruneHistory(3) in h.last.changes


def test_incidents_pruned_beyond_retention() -> None:
    h = Harness(2, incidents=2)
    a = h.tid("a", "s", prompt="h")
    for i in range(2):
        h.acquire("a", "s", "h", machine=f"m{i}", claim=None)
        assert not any(isinstance(c, PruneIncidents) for c in h.last.changes)
    h.acquire("a", "s", "h", machine="m9", claim=None)
    assert PruneIncidents(2) in h.last.changes
    assert h.t(a).state is TicketState.HELD


# ---------------------------------------------------------------- reads


def test_status_and_summary_shapes() -> None:
    h = Harness(1)
    a = h.tid("a")
    b = h.tid("b")
    s = as_wire(h.core.status(h.now, 100))
    assert s["capacity"] == 1 and s["enforced"] is True and s["queuedTotal"] == 1
    assert [x["ticketId"] for x in s["held"]] == [a]
    assert [x["ticketId"] for x in s["queued"]] == [b]
    assert s["pause"] is None and s["now"] == h.now
    assert as_wire(h.core.summary(h.now)) == {
        "lane": LANE, "enforced": True, "capacity": 1, "held": 1, "queued": 1, "pause": None,
    }  # fmt: skip
    # queued_limit caps the list, not queuedTotal.
    for i in range(5):
        h.tid(f"q{i}")
    s = as_wire(h.core.status(h.now, 3))
    assert len(s["queued"]) == 3 and s["queuedTotal"] == 6


def test_idle_lane() -> None:
    h = Harness(1)
    assert h.core.is_idle() and h.core.next_deadline() is None
    a = h.tid("a")
    assert not h.core.is_idle()
    h.release(a)
    assert h.core.is_idle()


# ------------------------------------------ credentials (docs/protocol.md#credentials)


def _puts(fx_changes: list[object]) -> list[tuple[str, str | None]]:
    return [(c.ticket.ticket_id, c.by) for c in fx_changes if isinstance(c, PutTicket)]


def _core(capacity: int = 1, in_flight: float = 0.0) -> LaneCore:
    return LaneCore(LANE, make_settings(capacity, in_flight=in_flight), LaneSnapshot(), T0)


def _acquire(core: LaneCore, tid: str, machine: str, cred: str | None, now: float = T0) -> None:
    core.acquire(Acquire(machine, None, "p", tid, "h", None, tid, cred), now)


def test_an_acquire_records_its_credential_and_the_grant_names_none() -> None:
    core = _core()
    reply, fx = core.acquire(Acquire("mA", "cA", "p", "s", "h", None, "t1", "studio-a"), T0)
    assert core.live["t1"].credential == "studio-a"
    assert as_wire(reply)["ticket"]["credential"] == "studio-a"
    assert _puts(list(fx.changes)) == [("t1", "studio-a"), ("t1", None)]  # made, then granted


def test_a_release_records_the_credential_that_made_the_ticket_done() -> None:
    core = _core()
    _acquire(core, "t1", "mA", "studio-a")
    _acquire(core, "t2", "mB", "studio-b")
    reply, fx = core.release(
        Release(TicketCall("mA", None, "t1", "ops"), None, None, None), T0 + 1, None
    )
    assert reply.promoted == ["t2"]
    ended = next(c.ticket for c in fx.changes if isinstance(c, PutTicket) and c.by == "ops")
    assert (ended.ticket_id, ended.credential, ended.released_by) == ("t1", "studio-a", "ops")
    assert ("t2", None) in _puts(list(fx.changes))  # the promotion is the lane's own


def test_incidents_name_the_calls_credential_and_the_clocks_none() -> None:
    core = _core()
    _acquire(core, "t1", "mA", "studio-a")
    call = TicketCall("mA", None, "t1", "studio-a")
    _, fx = core.cooldown(Cooldown(call, "provider-human-check", 60), T0 + 1, None)
    [started] = [c.incident for c in fx.changes if isinstance(c, PutIncident)]
    assert (started.kind, started.credential) == (IncidentKind.COOLDOWN_STARTED, "studio-a")
    assert core.pause is not None and core.pause.credential == "studio-a"
    fx = core.advance(T0 + 62)
    [ended] = [c.incident for c in fx.changes if isinstance(c, PutIncident)]
    assert (ended.kind, ended.credential) == (IncidentKind.COOLDOWN_ENDED, None)


def test_an_admin_reconcile_waives_the_owner_rule() -> None:
    core = _core(in_flight=600.0)
    _acquire(core, "t1", "mA", "studio-a")
    rc = RecordReceipt("mA", None, "t1", "t1:provider-submitted:0", "provider-submitted",
                       "{}", HASH_A, HASH_A, "studio-a")  # fmt: skip
    core.receipt(rc, T0 + 1, None, None)
    core.release(
        Release(TicketCall("mA", None, "t1", "studio-a"), "lease-lost", None, None), T0 + 2, None
    )
    assert core.in_flight["t1"].holds_in_flight
    other = TicketCall("ops-laptop", None, "t1", "ops")
    with pytest.raises(NotOwner):
        core.reconcile(Reconcile(other, "completed", None, None), T0 + 3, None)
    reply, fx = core.reconcile(Reconcile(other, "completed", None, None, admin=True), T0 + 3, None)
    assert reply.reconciled is True
    [inc] = [c.incident for c in fx.changes if isinstance(c, PutIncident)]
    assert (inc.kind, inc.machine_id, inc.credential) == ("in-flight-ended", "ops-laptop", "ops")
