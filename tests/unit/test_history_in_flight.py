"""Rule (f) of the recorded-history checker (tests/harness/in_flight.py) on hand-built histories
of a 1-slot lane: A holds t1, records provider-submitted, and its lease expires at T0 + 15
with the job in flight; B waits with t2. The good history holds A's slot until A's
provider-terminal receipt at T0 + 40 and grants B then: it passes. Broken ones fail for the
right reason: B granted at the expiry while the server kept no hold (holds off), B granted
while the server's own hold was still on, a wrong holdUntil, a hold for a job that had ended,
a hold still on after its terminal receipt, an acknowledged receipt the server does not have.
"""

from __future__ import annotations

from typing import Any

from tests.harness.history import LaneView, Ledger, Report, check

T0 = 1_800_000_000.0  # server time
LANE = "solo:main"
HOLD = 1800.0
SUBMITTED_AT = T0 + 5
EXPIRY = T0 + 15
TERMINAL_AT = T0 + 40


def receipt(tid: str, phase: str, at: float) -> dict[str, Any]:
    return {"receiptId": f"{tid}:{phase}:0123456789abcdef", "phase": phase, "createdAt": at}


class Story:
    """The ledger (what A and B sent and were told) and the server's records of one run."""

    def __init__(self, b_granted_at: float) -> None:
        self.ledger = Ledger(clock=lambda: 0.0)
        self.b_granted_at = b_granted_at
        self.ack(1, "A", "acquire", {"ticket": self.t1("held")}, machineId="A", scene="a")
        self.ack(2, "B", "acquire", {"ticket": self.t2("queued")}, machineId="B", scene="b")
        rid = receipt("t1", "provider-submitted", 0)["receiptId"]
        self.ack(3, "A", "receipt", {"stored": True, "replay": False}, 201, ticketId="t1",
                 receiptId=rid, phase="provider-submitted")  # fmt: skip
        self.ack(50, "B", "await", {"ticket": self.t2("held")}, ticketId="t2")
        self.t1_row: dict[str, Any] = {
            "ticketId": "t1", "fence": 1, "heldAt": T0, "endedAt": EXPIRY, "outcome": "expired",
            "lateOutcome": None, "inFlightUntil": SUBMITTED_AT + HOLD, "inFlightEnded": "receipt",
        }  # fmt: skip
        self.receipts = {
            "t1": [
                receipt("t1", "provider-submitted", SUBMITTED_AT),
                receipt("t1", "provider-terminal", TERMINAL_AT),
            ]
        }
        self.in_flight: list[dict[str, Any]] = []

    def t1(self, state: str) -> dict[str, Any]:
        return {"ticketId": "t1", "state": state, "fence": 1, "heldAt": T0,
                "leaseExpiresAt": EXPIRY}  # fmt: skip

    def t2(self, state: str) -> dict[str, Any]:
        held = state == "held"
        return {"ticketId": "t2", "state": state, "fence": 2 if held else None,
                "heldAt": self.b_granted_at if held else None,
                "leaseExpiresAt": self.b_granted_at + 300 if held else None}  # fmt: skip

    def ack(
        self, at: float, client: str, op: str, reply: dict[str, Any], status: int = 200,
        **body: Any,
    ) -> None:  # fmt: skip
        e = self.ledger.sent(client, op, LANE, {"lane": LANE, **body}, at=at)
        self.ledger.replied(e, status, reply, at=at + 0.01)

    def run(self, hold_seconds: float | None = HOLD) -> Report:
        status = {
            "lane": LANE, "enforced": True, "capacity": 1, "now": T0 + 3600, "queued": [],
            "queuedTotal": 0, "held": [self.t2("held")], "inFlight": self.in_flight,
        }  # fmt: skip
        history = {"entries": [self.t1_row], "retained": 1}
        v = LaneView.from_replies(status, history, self.receipts, hold_seconds)
        return check(self.ledger, [v])


def good() -> Story:
    return Story(b_granted_at=TERMINAL_AT)  # the terminal receipt's commit promotes B


def test_a_hold_until_the_terminal_receipt_passes() -> None:
    report = good().run()
    assert report.ok, report.explain()
    assert report.in_flight == 1 and "in-flight holds 1" in report.summary("good")


def test_a_grant_at_the_expiry_while_the_job_is_in_flight_fails_holds_off() -> None:
    """The server kept no hold (in_flight_hold_seconds 0 there) and granted B at A's expiry:
    B's submit would land on an account still running A's job."""
    s = Story(b_granted_at=EXPIRY)
    s.t1_row.update(inFlightUntil=None, inFlightEnded=None)
    report = s.run()
    assert not report.ok
    assert any("the server kept no in-flight hold (hold 1800 s)" in v for v in report.violations)
    assert any(
        f"ticket t2 was granted at {EXPIRY} (fence 2) while held + in-flight jobs filled the "
        "lane (capacity 1): held [], in flight ['t1']" in v
        for v in report.violations
    ), report.violations


def test_a_grant_inside_the_servers_own_hold_fails_whatever_the_hold_setting() -> None:
    for hold_seconds in (HOLD, None):  # None: the test does not know the lane's setting
        s = Story(b_granted_at=T0 + 20)
        report = s.run(hold_seconds)
        assert report.violations == [
            f"{LANE}: ticket t2 was granted at {T0 + 20} (fence 2) while held + in-flight jobs "
            "filled the lane (capacity 1): held [], in flight ['t1']"
        ], (hold_seconds, report.violations)


def test_a_wrong_hold_until_fails() -> None:
    s = good()
    s.t1_row["inFlightUntil"] = EXPIRY + HOLD  # counted from the end, not from the submit
    report = s.run()
    assert any(f"holdUntil {EXPIRY + HOLD}, expected {SUBMITTED_AT + HOLD}" in v
               for v in report.violations), report.violations  # fmt: skip


def test_a_hold_for_a_job_that_had_ended_fails() -> None:
    s = good()
    s.receipts["t1"][1]["createdAt"] = T0 + 10  # provider-terminal before the expiry
    report = s.run()
    assert any("for a job its receipts do not show in flight" in v for v in report.violations)


def test_a_hold_still_on_after_its_terminal_receipt_fails() -> None:
    s = good()
    s.t1_row["inFlightEnded"] = None
    s.in_flight = [{"ticketId": "t1", "holdUntil": SUBMITTED_AT + HOLD}]
    report = s.run()
    assert any("still holds its slot after its provider-terminal receipt" in v
               for v in report.violations), report.violations  # fmt: skip


def test_an_acknowledged_receipt_missing_on_the_server_is_lost() -> None:
    s = good()
    s.receipts["t1"] = s.receipts["t1"][1:]  # provider-submitted gone
    report = s.run()
    assert report.lost == 1 and "is not among ticket t1's receipts" in report.lost_details[0]


def test_a_hold_that_ran_to_hold_until_passes_and_a_grant_after_it_too() -> None:
    s = Story(b_granted_at=SUBMITTED_AT + HOLD)
    s.receipts["t1"] = s.receipts["t1"][:1]  # no terminal receipt: the alarm ended the hold
    s.t1_row["inFlightEnded"] = "expired"
    report = s.run()
    assert report.ok, report.explain()
