"""The lane's domain records (coordinator/engine/model.py): ticket states and outcomes, a
ticket's identity, a pause as the wire shows it, merging effects, snapshot defaults."""

from __future__ import annotations

from coordinator.engine.model import (
    LIVE_STATES,
    RELEASE_OUTCOMES,
    TERMINAL_STATES,
    Effects,
    LaneSnapshot,
    Outcome,
    Pause,
    PruneHistory,
    PruneIncidents,
    PutCounters,
    PutPause,
    Ticket,
    TicketState,
)
from tests.unit.kit import LANE, T0


def _ticket(**kw: object) -> Ticket:
    fields: dict[str, object] = {
        "ticket_id": "t_0001",
        "lane": LANE,
        "state": TicketState.QUEUED,
        "machine_id": "mA",
        "claim_id": "cA",
        "project": "p",
        "scene": "s1",
        "prompt_hash": "h",
        "seq": 1,
        "enqueued_at": T0,
        "lease_seconds": 60.0,
        "last_seen_at": T0,
    }
    fields.update(kw)
    return Ticket(**fields)  # type: ignore[arg-type]


def test_live_and_terminal_states_split_every_state() -> None:
    assert set(TicketState) == LIVE_STATES | TERMINAL_STATES
    assert not LIVE_STATES & TERMINAL_STATES
    assert TicketState.HELD in LIVE_STATES and TicketState.EXPIRED in TERMINAL_STATES


def test_a_caller_may_release_with_every_outcome_but_expired() -> None:
    assert "expired" not in RELEASE_OUTCOMES
    assert set(RELEASE_OUTCOMES) == {o.value for o in Outcome} - {"expired"}
    assert RELEASE_OUTCOMES[0] == "completed"


def test_identity_is_project_scene_and_prompt_hash() -> None:
    a = _ticket()
    assert a.identity == ("p", "s1", "h")
    # the machine, the claim and the id are not part of it: a duplicate is the same job
    assert _ticket(ticket_id="t_2", machine_id="mB", claim_id=None).identity == a.identity
    assert _ticket(scene="s2").identity != a.identity


def test_a_pause_on_the_wire_carries_every_field() -> None:
    p = Pause("provider-human-check", T0, T0 + 60, "mA", None, "t_0001")
    w = p.wire()
    assert (w.reason_code, w.started_at, w.until) == ("provider-human-check", T0, T0 + 60)
    assert (w.machine_id, w.claim_id, w.ticket_id) == ("mA", None, "t_0001")


def test_effects_extend_keeps_order_and_merges_the_rest() -> None:
    a = Effects(changes=[PutCounters(1, 2)], woken={"t1"}, promoted=["t1"])
    b = Effects(
        changes=[PutPause(None), PruneHistory(keep=5)],
        woken={"t2"},
        pause_changed=True,
        promoted=["t2"],
    )
    a.extend(b)
    assert a.changes == [PutCounters(1, 2), PutPause(None), PruneHistory(keep=5)]
    assert a.woken == {"t1", "t2"}
    assert a.pause_changed is True
    assert a.promoted == ["t1", "t2"]
    a.extend(Effects())  # an empty one changes nothing, and never clears pause_changed
    assert a.pause_changed is True and len(a.changes) == 3


def test_prunes_delete_one_row_unless_told_more() -> None:
    assert PruneHistory(keep=10).excess == 1
    assert PruneIncidents(keep=10, excess=3).excess == 3


def test_snapshots_do_not_share_their_collections() -> None:
    a, b = LaneSnapshot(), LaneSnapshot()
    a.live.append(_ticket())
    a.project_served["p"] = 1
    a.machines_seen["mA"] = T0
    assert b.live == [] and b.project_served == {} and b.machines_seen == {}
    assert (b.last_fence, b.next_seq, b.version, b.last_now) == (0, 1, 0, None)
