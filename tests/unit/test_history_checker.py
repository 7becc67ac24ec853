"""The recorded-history checker (tests/harness/history.py) on small hand-built ledgers and
server views: a consistent history passes (retries, a 503 and a refused connection, an expired
lease released late, a lease still held); each broken one fails for the right reason: a
duplicate fence, more holders than capacity (in server time, and in real time on the ledger's
clock), a lost acknowledged acquire, release and heartbeat, a revived ticket, a ticket back to
queued, fences out of grant order or with a gap, a lane nobody read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.harness.history import LaneView, Ledger, Report, check

T0 = 1_800_000_000.0  # server time
SOLO, DUO = "solo:main", "duo:main"


def ticket(
    tid: str, state: str, *, fence: int | None = None, held: float | None = None, lease: float = 300
) -> dict[str, Any]:
    return {
        "ticketId": tid,
        "state": state,
        "fence": fence,
        "heldAt": held,
        "leaseExpiresAt": None if held is None else held + lease,
    }


def row(
    tid: str,
    fence: int | None,
    held: float | None,
    ended: float,
    outcome: str | None = "completed",
    late: str | None = None,
) -> dict[str, Any]:
    return {
        "ticketId": tid,
        "fence": fence,
        "heldAt": held,
        "endedAt": ended,
        "outcome": outcome,
        "lateOutcome": late,
    }


def view(
    lane: str,
    capacity: int,
    history: list[dict[str, Any]],
    held: list[dict[str, Any]] | None = None,
    queued: list[dict[str, Any]] | None = None,
) -> LaneView:
    status = {
        "lane": lane,
        "enforced": True,
        "capacity": capacity,
        "held": held or [],
        "queued": queued or [],
        "queuedTotal": len(queued or []),
        "now": T0 + 1000,
    }
    return LaneView.from_replies(status, {"entries": history, "retained": len(history)})


class Script:
    """Builds a ledger on a hand-moved clock: each call is sent at `at` and answered 0.01 s
    later (ledger time, which is not server time)."""

    def __init__(self) -> None:
        self.ledger = Ledger(clock=lambda: 0.0)

    def ack(
        self,
        at: float,
        client: str,
        op: str,
        lane: str,
        reply: dict[str, Any],
        status: int = 200,
        **body: Any,
    ) -> None:
        e = self.ledger.sent(client, op, lane, {"lane": lane, **body}, target="r1", at=at)
        self.ledger.replied(e, status, reply, at=at + 0.01)

    def fail(self, at: float, client: str, op: str, lane: str, **body: Any) -> None:
        e = self.ledger.sent(client, op, lane, {"lane": lane, **body}, target="r2", at=at)
        self.ledger.failed(e, "ClientConnectorError", at=at + 0.01)

    def acquire(self, at: float, client: str, lane: str, t: dict[str, Any]) -> None:
        self.ack(at, client, "acquire", lane, {"ticket": t}, machineId=client, scene=at)

    def await_(self, at: float, client: str, lane: str, t: dict[str, Any]) -> None:
        reply = {"ticket": t}
        self.ack(at, client, "await", lane, reply, machineId=client, ticketId=t["ticketId"])

    def heartbeat(
        self, at: float, client: str, lane: str, tid: str, fence: int, lease_until: float
    ) -> None:
        reply = {
            "refreshed": True,
            "state": "held",
            "leaseExpiresAt": lease_until,
            "fence": fence,
            "reason": None,
        }
        self.ack(at, client, "heartbeat", lane, reply, machineId=client, ticketId=tid)

    def release(
        self, at: float, client: str, lane: str, tid: str, reason: str | None = None
    ) -> None:
        reply = {"released": reason is None, "state": "done", "outcome": "completed"}
        reply["reason"] = reason
        self.ack(
            at, client, "release", lane, reply, machineId=client, ticketId=tid, outcome="completed"
        )


@dataclass
class Base:
    """A consistent history on a capacity-1 lane: A holds t1 (fence 1) while B waits with
    t2; A heartbeats and releases, B is promoted (fence 2), releases, and retries its
    release (already-done); a 503 and a refused connection in between acknowledge nothing."""

    script: Script
    history: list[dict[str, Any]]

    def run(self) -> Report:
        return check(self.script.ledger, [view(SOLO, 1, self.history)])


def base(t2_fence: int = 2) -> Base:
    s = Script()
    s.acquire(1, "A", SOLO, ticket("t1", "held", fence=1, held=T0))
    s.fail(1.5, "B", "acquire", SOLO, machineId="B", scene=2)
    s.ack(1.7, "B", "acquire", SOLO, {"coordinator": "x", "error": {}}, status=503)
    s.acquire(2, "B", SOLO, ticket("t2", "queued"))
    s.heartbeat(3, "A", SOLO, "t1", 1, T0 + 310)
    s.release(4, "A", SOLO, "t1")
    s.await_(5, "B", SOLO, ticket("t2", "held", fence=t2_fence, held=T0 + 5))
    s.release(6, "B", SOLO, "t2")
    s.release(7, "B", SOLO, "t2", reason="already-done")
    hist = [row("t2", t2_fence, T0 + 5, T0 + 8), row("t1", 1, T0, T0 + 5)]
    return Base(s, hist)


def test_a_consistent_history_passes() -> None:
    report = base().run()
    assert report.ok, report.explain()
    assert (report.sent, report.acknowledged, report.unacknowledged) == (9, 7, 2)
    assert (report.lost, report.tickets, report.grants) == (0, 2, 2)
    assert report.max_holders == {SOLO: 1}
    assert "lost 0, violations 0" in report.summary("base")


def test_expired_lease_released_late_and_a_lease_still_held_pass() -> None:
    s = Script()
    s.acquire(1, "A", DUO, ticket("t1", "held", fence=1, held=T0, lease=20))
    s.acquire(2, "B", DUO, ticket("t2", "held", fence=2, held=T0 + 1))
    s.acquire(3, "C", DUO, ticket("t3", "queued"))
    # t1's lease ran out at T0 + 20 and was reaped; t3 was promoted then; A releases late
    s.release(30, "A", DUO, "t1", reason="expired")
    s.await_(31, "C", DUO, ticket("t3", "held", fence=3, held=T0 + 20))
    s.release(32, "B", DUO, "t2")
    history = [row("t2", 2, T0 + 1, T0 + 32), row("t1", 1, T0, T0 + 20, "expired", "completed")]
    held = [{**ticket("t3", "held", fence=3, held=T0 + 20)}]
    report = check(s.ledger, [view(DUO, 2, history, held=held)])
    assert report.ok, report.explain()
    assert report.max_holders == {DUO: 2}


def test_a_duplicate_fence_fails() -> None:
    b = base()
    b.history[0]["fence"] = 1  # t2 on record with t1's fence
    report = b.run()
    assert any("duplicate fence 1" in v for v in report.violations), report.violations
    assert any("t2 was seen with fences [1, 2]" in v for v in report.violations)


def test_more_holders_than_capacity_fails() -> None:
    b = base()
    b.history[1]["endedAt"] = T0 + 6  # t1 ended after t2's grant at T0 + 5
    report = b.run()
    assert any("2 holders at server time" in v for v in report.violations), report.violations
    assert report.max_holders == {SOLO: 2}


def test_overlapping_holders_in_real_time_fail() -> None:
    """The server's times are consistent, but B was told it holds t2 before A even sent its
    release of t1: two holders at once on a capacity-1 lane."""
    b = base()
    b.script.await_(3.5, "B", SOLO, ticket("t2", "held", fence=2, held=T0 + 5))
    report = b.run()
    assert any("2 clients held at once" in v for v in report.violations), report.violations


def test_a_lost_acknowledged_acquire_fails() -> None:
    b = base()
    del b.history[0]  # t2 is nowhere on the server
    report = b.run()
    assert report.lost == 1, report.explain()
    assert "ticket t2 is not on the server" in report.lost_details[0]
    assert not report.ok


def test_a_lost_acknowledged_release_fails() -> None:
    b = base()
    b.history[0]["outcome"] = "failed"
    report = b.run()
    assert report.lost == 1, report.explain()
    assert "the server's row reads 'failed'" in report.lost_details[0]


def test_a_release_of_a_ticket_the_server_still_holds_is_lost() -> None:
    b = base()
    del b.history[0]
    held = [ticket("t2", "held", fence=2, held=T0 + 5)]
    report = check(b.script.ledger, [view(SOLO, 1, b.history, held=held)])
    assert report.lost == 2, report.explain()  # the release and its retry
    assert all("still has the ticket held" in d for d in report.lost_details)


def test_a_lost_acknowledged_heartbeat_fails() -> None:
    """A was told its lease runs to T0 + 310; the server reaped it at its first expiry."""
    b = base()
    b.script.heartbeat(8, "A", SOLO, "t3", 3, T0 + 310)
    b.script.acquire(7.5, "A", SOLO, ticket("t3", "held", fence=3, held=T0 + 9))
    b.history.insert(0, row("t3", 3, T0 + 9, T0 + 309, "expired"))
    report = b.run()
    assert report.lost == 1, report.explain()
    assert "extended t3's lease" in report.lost_details[0]


def test_an_acknowledged_grant_the_server_never_made_is_lost() -> None:
    b = base()
    b.history[0] = row("t2", None, None, T0 + 8, "abandoned")
    report = b.run()
    assert any("never held" in d for d in report.lost_details), report.explain()


def test_a_revived_ticket_fails() -> None:
    b = base()
    b.script.heartbeat(8, "A", SOLO, "t1", 1, T0 + 320)  # after t1's release was answered
    report = b.run()
    assert any("ticket t1 revived" in v for v in report.violations), report.violations


def test_a_ticket_the_server_lists_live_after_an_acknowledged_end_fails() -> None:
    b = base()
    del b.history[0]
    queued = [ticket("t2", "queued")]
    report = check(b.script.ledger, [view(SOLO, 1, b.history, queued=queued)])
    assert any("server lists it queued" in v for v in report.violations), report.violations


def test_a_ticket_back_to_queued_fails() -> None:
    b = base()
    b.script.await_(5.5, "B", SOLO, ticket("t2", "queued"))
    report = b.run()
    assert any("t2 went back to queued" in v for v in report.violations), report.violations


def test_concurrent_replies_are_not_ordered() -> None:
    """An await sent before the release's reply arrived may still show the ticket held."""
    b = base()
    b.script.heartbeat(4.005, "A", SOLO, "t1", 1, T0 + 310)  # sent before 4.01
    report = b.run()
    assert report.ok, report.explain()


def test_fences_out_of_grant_order_fail() -> None:
    s = Script()
    s.acquire(1, "A", DUO, ticket("t1", "held", fence=2, held=T0))
    s.acquire(2, "B", DUO, ticket("t2", "held", fence=1, held=T0 + 1))
    report = check(
        s.ledger, [view(DUO, 2, [row("t2", 1, T0 + 1, T0 + 3), row("t1", 2, T0, T0 + 4)])]
    )
    assert any("fences do not increase" in v for v in report.violations), report.violations


def test_a_fence_gap_fails() -> None:
    report = base(t2_fence=3).run()  # fence 2 issued, on record nowhere
    assert report.violations == [
        f"{SOLO}: fences [2] were issued (the lane is at fence 3) but no ticket on record "
        "or acknowledged holds them"
    ]


def test_a_lane_without_a_view_fails() -> None:
    b = base()
    report = check(b.script.ledger, [])
    assert report.violations == [f"{SOLO}: no server view of this lane to check against"]


def test_ledger_counts_by_moment() -> None:
    b = base()
    ledger = b.script.ledger
    assert ledger.acknowledged_after(4.5) == 3
    assert ledger.unavailable_between(1, 2) == 2
    assert ledger.lanes == {SOLO}


# ------------------------------------------------ (f) credentials (docs/protocol.md#credentials)


def _credential_day(made_by: str, released_by: str) -> Report:
    """c1 acquires and releases t1 as `studio-a`; the server's row names `made_by` and
    `released_by`."""
    led = Ledger(clock=lambda: 0.0)
    t = ticket("t1", "held", fence=1, held=T0)
    e = led.sent("c1", "acquire", SOLO, {"lane": SOLO}, at=1, credential="studio-a")
    led.replied(e, 200, {"ticket": t, "duplicate": False}, at=1.01)
    body = {"lane": SOLO, "ticketId": "t1", "outcome": "completed"}
    e = led.sent("c1", "release", SOLO, body, at=2, credential="studio-a")
    reply = {"released": True, "state": "done", "outcome": "completed", "reason": None}
    led.replied(e, 200, reply, at=2.01)
    unchecked = led.sent("c2", "acquire", SOLO, {"lane": SOLO}, at=3)  # no credential known
    led.replied(unchecked, 200, {"ticket": ticket("t2", "queued"), "duplicate": False}, at=3.01)
    r1 = {**row("t1", 1, T0, T0 + 5), "credential": made_by, "releasedBy": released_by}
    queued = [{**ticket("t2", "queued"), "credential": "someone-else"}]
    return check(led, [view(SOLO, 1, [r1], queued=queued)])


def test_rows_naming_the_attempts_credentials_pass() -> None:
    report = _credential_day("studio-a", "studio-a")
    assert report.ok, report.explain()


def test_a_row_naming_another_credential_fails() -> None:
    report = _credential_day("studio-b", "ops")
    assert not report.ok
    text = report.explain()
    assert "made t1 with credential 'studio-a'; the server's row names 'studio-b'" in text
    assert "released t1 with credential 'studio-a'; the server's row names releasedBy 'ops'" in text
    assert "t2" not in text  # recorded without a credential: not checked
