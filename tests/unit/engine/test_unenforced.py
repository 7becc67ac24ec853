"""Replies of an unenforced lane (coordinator/engine/unenforced.py): every acquire and await
is granted at once, nothing is held, queued, paused or remembered."""

from __future__ import annotations

from coordinator.engine.commands import Acquire, TicketCall
from coordinator.engine.unenforced import (
    UNLIMITED_PREFIX,
    cooldown_reply,
    heartbeat_reply,
    history_reply,
    lane_reply,
    receipt_reply,
    release_reply,
    status_reply,
    unlimited_ticket,
)
from tests.unit.kit import T0

LANE = "free:main"
CMD = Acquire("mA", "cA", "p", "s1", "h", 30.0, "ignored")


def test_an_acquire_is_granted_at_once_with_the_callers_identity() -> None:
    reply = lane_reply(LANE, CMD, UNLIMITED_PREFIX + "1", T0, "coord")
    assert reply.granted is True and reply.enforced is False and reply.duplicate is False
    assert reply.coordinator == "coord" and reply.lane == LANE and reply.pause is None
    t = reply.ticket
    assert t.ticket_id == "unlimited-1" and t.state == "held"
    assert (t.machine_id, t.claim_id, t.project, t.scene, t.prompt_hash) == (
        "mA",
        "cA",
        "p",
        "s1",
        "h",
    )
    assert (t.position, t.eta_seconds, t.enqueued_at, t.held_at) == (0, 0.0, T0, T0)
    assert t.lease_expires_at is None and t.fence is None  # no lease, no fence
    assert (reply.owner.machine_id, reply.owner.claim_id) == ("mA", "cA")


def test_an_await_is_the_callers_and_knows_no_identity_and_is_granted_too() -> None:
    """The ticket's fields are never null (the document says so): the awaiting caller owns
    it, and its request identity reads "unknown", as evidence of an unlimited ticket does."""
    call = TicketCall("mB", None, "unlimited-2")
    t = unlimited_ticket(LANE, call, "unlimited-2", T0)
    assert (t.machine_id, t.claim_id, t.state) == ("mB", None, "held")
    assert (t.project, t.scene, t.prompt_hash) == ("unknown", "unknown", "unknown")
    assert t.enqueued_at == T0
    reply = lane_reply(LANE, call, "unlimited-2", T0, "coord")
    assert reply.granted is True and (reply.owner.machine_id, reply.owner.claim_id) == ("mB", None)


def test_the_other_calls_change_nothing() -> None:
    hb = heartbeat_reply("c")
    assert hb.refreshed is True and hb.state == "held" and hb.lease_expires_at is None
    rel = release_reply("failed", "c")
    assert rel.released is True and rel.state == "done" and rel.outcome == "failed"
    assert rel.promoted == []
    cd = cooldown_reply("c")
    assert cd.paused is False and cd.extended is False and cd.pause is None
    rc = receipt_reply("c")
    assert rc.stored is False and rc.replay is False and rc.content_hash_verified is None


def test_status_and_history_are_empty() -> None:
    st = status_reply(LANE, T0, "c")
    assert st.enforced is False and st.capacity is None
    assert (st.held, st.queued, st.queued_total, st.now) == ([], [], 0, T0)
    h = history_reply(LANE, 500, "c")
    assert (h.entries, h.counts, h.retained, h.retained_limit) == ([], {}, 0, 500)
    assert h.enforced is False
