"""LaneSlots (coordinator/engine/lane_slots.py): grants, and the in-flight jobs that keep a slot
after their ticket ended (docs/protocol.md#in-flight), driven through LaneCore with explicit
`now` values."""

from __future__ import annotations

import pytest

from coordinator.engine.commands import Reconcile
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import IncidentKind, LaneSnapshot, PutTicket, TicketState
from coordinator.protocol.errors import NotFound, NotInFlight, NotOwner
from tests.unit.kit import LANE, T0, Harness, make_settings

HOLD = 500.0


def _submitted(h: Harness, lease: float = 30.0, **kw: object) -> tuple[str, str]:
    """A holder whose job was submitted (lease `lease`) and a waiter behind it."""
    a = h.tid("p", lease=lease)
    b = h.tid("q", machine="mB", claim="cB")
    h.receipt(a, phase="provider-submitted")
    return a, b


def test_an_expired_ticket_with_a_submitted_job_keeps_its_slot_until_hold_until() -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.advance(T0 + 31)  # the lease expired at T0 + 30
    assert h.t(a).state is TicketState.EXPIRED
    assert h.held() == set(), "nothing promoted while the in-flight job fills the lane"
    assert set(h.core.in_flight) == {a}
    assert h.t(a).in_flight_until == T0 + HOLD
    assert IncidentKind.IN_FLIGHT_HELD.value in h.incidents()
    assert h.core.next_deadline() == T0 + HOLD
    job = h.core.status(h.now, 10).in_flight[0]
    assert (job.ticket_id, job.submitted_at, job.since, job.hold_until) == (
        a,
        T0,
        T0 + 30,
        T0 + HOLD,
    )
    # the ETA counts the job's slot as freeing at holdUntil
    assert h.view(b)["etaSeconds"] == HOLD - 31
    h.advance(T0 + HOLD)  # the alarm reaches holdUntil
    assert h.held() == {b}
    assert h.t(a).in_flight_ended == "expired"
    assert IncidentKind.IN_FLIGHT_EXPIRED.value in h.incidents(h.last)
    assert not h.core.in_flight


@pytest.mark.parametrize("outcome", ["lease-lost", "timeout"])
def test_a_release_lease_lost_or_timeout_with_a_submitted_job_holds(outcome: str) -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.later(5)
    reply = h.release(a, outcome)
    assert reply["released"] is True and reply["promoted"] == []
    assert set(h.core.in_flight) == {a} and h.held() == set()
    assert h.t(b).state is TicketState.QUEUED


@pytest.mark.parametrize("outcome", ["completed", "failed", "not-submitted", "slot-busy", None])
def test_other_releases_leave_no_hold(outcome: str | None) -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    reply = h.release(a, outcome)
    assert reply["promoted"] == [b]
    assert not h.core.in_flight


def test_no_hold_without_submit_with_terminal_when_off_or_when_past_hold_until() -> None:
    # no provider-submitted receipt
    h = Harness(1, in_flight=HOLD)
    a = h.tid("p", lease=30)
    h.tid("q", machine="mB", claim="cB")
    h.advance(T0 + 31)
    assert not h.core.in_flight and len(h.held()) == 1
    # a provider-terminal receipt too
    h = Harness(1, in_flight=HOLD)
    a, _ = _submitted(h)
    h.receipt(a, phase="provider-terminal", content_hash="sha256:" + "c" * 64)
    h.advance(T0 + 31)
    assert not h.core.in_flight
    # holds off for the route
    h = Harness(1, in_flight=0)
    _submitted(h)
    h.advance(T0 + 31)
    assert not h.core.in_flight
    # the lease ends after holdUntil
    h = Harness(1, in_flight=20)
    _submitted(h)
    h.advance(T0 + 31)
    assert not h.core.in_flight
    assert IncidentKind.IN_FLIGHT_HELD.value not in h.incidents()


def test_hold_until_counts_from_the_latest_submit() -> None:
    h = Harness(1, in_flight=HOLD)
    a, _ = _submitted(h, lease=100)
    h.later(50).receipt(a, phase="provider-submitted", content_hash="sha256:" + "d" * 64)
    assert h.t(a).submitted_at == T0 + 50
    h.advance(T0 + 101)
    assert h.t(a).in_flight_until == T0 + 50 + HOLD


def test_a_terminal_receipt_on_the_ended_ticket_ends_the_hold_and_promotes() -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.advance(T0 + 31)
    h.at(T0 + 40)
    reply, stored = h.receipt(a, phase="provider-terminal", content_hash="sha256:" + "c" * 64)
    assert stored and reply["stored"] is True
    assert h.held() == {b} and b in h.last.promoted
    assert h.t(a).in_flight_ended == "receipt"
    assert IncidentKind.IN_FLIGHT_ENDED.value in h.incidents(h.last)


@pytest.mark.parametrize("outcome", ["completed", "failed", "not-found"])
def test_reconcile_ends_the_hold_and_promotes(outcome: str) -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.advance(T0 + 31)
    reply = h.reconcile(a, outcome, provider_job_id="job-1", note="seen in the dashboard")
    assert reply["reconciled"] is True and reply["promoted"] == [b]
    assert h.t(a).in_flight_ended == f"reconciled:{outcome}"
    assert h.t(a).provider_job_id == "job-1"


def test_reconcile_refusals_change_nothing() -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    with pytest.raises(NotInFlight):
        h.reconcile(a)  # held
    with pytest.raises(NotInFlight):
        h.reconcile(b)  # queued
    h.advance(T0 + 31)
    with pytest.raises(NotOwner):
        h.reconcile(a, machine="mB", claim="cB")
    with pytest.raises(NotOwner):
        h.reconcile(a, claim="another-claim")
    with pytest.raises(NotFound):
        h.core.reconcile(
            Reconcile(h.call("t_nope", "mA", None), "completed", None, None), h.now, None
        )
    assert set(h.core.in_flight) == {a} and h.held() == set()
    reply = h.reconcile(a, no_claim=True)  # the machine alone, as a hand release
    assert reply["promoted"] == [b]
    with pytest.raises(NotInFlight):
        h.reconcile(a)  # it already ended


@pytest.mark.parametrize("outcome", ["completed", "failed", "not-submitted", "slot-busy"])
def test_a_late_release_with_a_terminal_outcome_ends_the_hold(outcome: str) -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.advance(T0 + 31)
    reply = h.release(a, outcome)
    assert reply["released"] is False and reply["reason"] == "expired"
    assert reply["promoted"] == [b]
    assert h.t(a).late_outcome == outcome
    assert h.t(a).in_flight_ended == f"reconciled:{outcome}"


@pytest.mark.parametrize("outcome", ["lease-lost", "timeout", None])
def test_a_late_release_without_a_terminal_outcome_keeps_the_hold(outcome: str | None) -> None:
    h = Harness(1, in_flight=HOLD)
    a, _ = _submitted(h)
    h.advance(T0 + 31)
    reply = h.release(a, outcome)
    assert reply["promoted"] == [] and set(h.core.in_flight) == {a}
    assert h.t(a).state is TicketState.DONE and h.t(a).late_outcome == outcome


def test_another_machines_late_release_keeps_the_hold() -> None:
    h = Harness(1, in_flight=HOLD)
    a, _ = _submitted(h)
    h.advance(T0 + 31)
    reply = h.release(a, "completed", machine="mB", claim="cB")
    assert reply["reason"] == "not-owner" and set(h.core.in_flight) == {a}


def test_capacity_counts_held_and_in_flight() -> None:
    h = Harness(2, in_flight=HOLD)
    a = h.tid("p", lease=30)
    h.tid("p2", lease=300)
    h.receipt(a, phase="provider-submitted")
    c = h.tid("q", machine="mB", claim="cB")
    h.advance(T0 + 31)
    assert h.t(c).state is TicketState.QUEUED
    assert h.core.slots_taken() == 2
    assert h.core.status(h.now, 10).in_flight[0].ticket_id == a


def test_a_snapshot_with_an_in_flight_job_rebuilds_the_hold() -> None:
    h = Harness(1, in_flight=HOLD)
    a, b = _submitted(h)
    h.advance(T0 + 31)
    snap = LaneSnapshot(
        live=[h.t(b)],
        in_flight=[h.t(a)],
        last_fence=h.core.last_fence,
        next_seq=h.core.next_seq,
    )
    core = LaneCore(LANE, make_settings(1, in_flight=HOLD), snap, T0 + 32)
    assert set(core.in_flight) == {a} and core.next_deadline() is not None
    assert not core.held
    fx = core.advance(T0 + HOLD)
    assert b in fx.promoted
    ended = [c.ticket for c in fx.changes if isinstance(c, PutTicket)]
    assert any(t.ticket_id == a and t.in_flight_ended == "expired" for t in ended)


def test_an_ended_hold_is_not_rebuilt_and_a_lane_with_a_hold_is_not_idle() -> None:
    h = Harness(1, in_flight=HOLD)
    a = h.tid("p", lease=30)
    h.receipt(a, phase="provider-submitted")
    h.advance(T0 + 31)
    assert not h.core.is_idle()
    h.reconcile(a)
    assert h.core.is_idle()
    core = LaneCore(LANE, make_settings(1), LaneSnapshot(in_flight=[h.t(a)]), T0 + 40)
    assert not core.in_flight
