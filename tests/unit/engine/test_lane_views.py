"""A lane's replies built from its state (coordinator/engine/lane_views.py): a ticket's view
by state, the pause while it lasts, the lane reply, status and the lane summary — on a
`LaneViews` loaded from a snapshot (no operation runs)."""

from __future__ import annotations

from coordinator.engine.lane_views import LaneViews
from coordinator.engine.model import LaneSnapshot, Pause, Ticket, TicketState
from tests.unit.kit import LANE, T0, make_settings

HOLD = 100.0


def _t(tid: str, seq: int, state: TicketState, project: str = "p") -> Ticket:
    t = Ticket(tid, LANE, state, "mA", "cA", project, f"s{seq}", "h", seq, T0, 60.0, T0)
    if state is TicketState.HELD:
        t.held_at, t.lease_expires_at, t.fence = T0, T0 + 60, seq
    if state is TicketState.DONE:
        t.held_at, t.ended_at, t.fence, t.outcome = T0, T0 + 1, seq, "completed"
    return t


def _views(*live: Ticket, capacity: int = 2, pause: Pause | None = None) -> LaneViews:
    snap = LaneSnapshot(live=list(live), last_fence=10, next_seq=20, pause=pause)
    return LaneViews(LANE, make_settings(capacity, hold=HOLD), snap, T0, coordinator="coord")


HELD_A = _t("h1", 1, TicketState.HELD)
HELD_B = _t("h2", 2, TicketState.HELD)
Q1 = _t("q1", 3, TicketState.QUEUED)
Q2 = _t("q2", 4, TicketState.QUEUED, project="other")


def test_a_queued_ticket_shows_its_place_and_eta() -> None:
    v = _views(HELD_A, HELD_B, Q1, Q2)
    now = T0 + 40
    first, second = v.ticket_view(Q1, now), v.ticket_view(Q2, now)
    assert (first.position, second.position) == (1, 2)
    # both slots free after HOLD - 40 s held; neither has a lease deadline shown
    assert first.eta_seconds == second.eta_seconds == HOLD - 40
    assert first.lease_expires_at is None and first.state == "queued"


def test_a_held_ticket_is_at_place_zero_and_shows_its_lease() -> None:
    view = _views(HELD_A).ticket_view(HELD_A, T0 + 1)
    assert (view.position, view.eta_seconds) == (0, 0.0)
    assert view.lease_expires_at == T0 + 60 and view.fence == 1


def test_an_ended_ticket_has_no_place_eta_or_lease() -> None:
    done = _t("d1", 5, TicketState.DONE)
    view = _views().ticket_view(done, T0 + 2)
    assert view.position is None and view.eta_seconds is None and view.lease_expires_at is None
    assert view.state == "done"


def test_the_pause_is_shown_only_while_it_lasts() -> None:
    pause = Pause("provider-human-check", T0, T0 + 30, "mA", "cA", "h1")
    v = _views(HELD_A, pause=pause)
    shown = v.pause_view(T0 + 29)
    assert shown is not None and shown.until == T0 + 30
    assert v.pause_view(T0 + 30) is None
    assert _views().pause_view(T0) is None


def test_the_lane_reply_grants_only_a_held_ticket_to_its_owner() -> None:
    v = _views(HELD_A, Q1, capacity=1)
    mine = v.lane_reply(HELD_A, T0, caller_owns=True, duplicate=True)
    assert mine.granted is True and mine.duplicate is True and mine.enforced is True
    assert (mine.coordinator, mine.lane) == ("coord", LANE)
    assert (mine.owner.machine_id, mine.owner.claim_id) == ("mA", "cA")
    assert v.lane_reply(HELD_A, T0, caller_owns=False, duplicate=False).granted is False
    assert v.lane_reply(Q1, T0, caller_owns=True, duplicate=False).granted is False


def test_status_lists_held_by_fence_and_queued_in_grant_order() -> None:
    v = _views(HELD_B, HELD_A, Q1, Q2)
    st = v.status(T0 + 10, queued_limit=10)
    assert [t.ticket_id for t in st.held] == ["h1", "h2"]
    assert [(t.ticket_id, t.position) for t in st.queued] == [("q1", 1), ("q2", 2)]
    assert (st.capacity, st.queued_total, st.now, st.pause) == (2, 2, T0 + 10, None)


def test_status_lists_at_most_the_limit_but_counts_every_queued_ticket() -> None:
    st = _views(HELD_A, Q1, Q2).status(T0, queued_limit=1)
    assert [t.ticket_id for t in st.queued] == ["q1"]
    assert st.queued_total == 2


def test_the_summary_counts_held_and_queued() -> None:
    s = _views(HELD_A, Q1, Q2, capacity=3).summary(T0)
    assert (s.lane, s.capacity, s.held, s.queued, s.enforced) == (LANE, 3, 1, 2, True)
