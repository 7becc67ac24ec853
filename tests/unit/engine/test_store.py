"""The store contract's pure parts (coordinator/engine/store.py): an operation's `now`, the
reads an operation declares (`Needs`) and `Reads.perform`, against a fake store that records
its calls. (The contract itself runs on both real stores in tests/store_pg.)"""

from __future__ import annotations

from typing import Any, cast

from coordinator.engine.model import Incident, Receipt, Ticket, TicketState
from coordinator.engine.store import NO_NEEDS, LaneHead, LaneStore, Needs, Reads, lane_now
from tests.unit.kit import LANE, T0

TICKET = Ticket("t1", LANE, TicketState.DONE, "mA", None, "p", "s", "h", 1, T0, 60.0, T0)
RECEIPT = Receipt("r1", "t1", "lease-acquired", "mA", "{}", "sha256:x", True, T0)
INCIDENT = Incident("lease-expired", T0, "t1", "mA", {})


class FakeStore:
    """Answers every read with a fixed record, and records what was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        self._call("get_ticket", ticket_id)
        return TICKET

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        self._call("get_receipt", receipt_id)
        return RECEIPT

    def recent_receipts(self, limit: int) -> list[Receipt]:
        self._call("recent_receipts", limit)
        return [RECEIPT]

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        self._call("receipts_for_ticket", ticket_id)
        return [RECEIPT, RECEIPT]

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        self._call("history", limit, project)
        return [TICKET]

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        self._call("incidents", limit)
        return [(1, INCIDENT)]


def test_lane_now_is_the_clock_never_behind_what_the_lane_ran_at() -> None:
    assert lane_now(T0) == T0
    assert lane_now(T0, None) == T0
    assert lane_now(T0, T0 + 5) == T0 + 5  # a clock behind the lane's last `now`
    assert lane_now(T0 + 9, T0 + 5, None, T0 + 7) == T0 + 9


def test_needs_is_true_when_anything_is_asked() -> None:
    assert not NO_NEEDS
    assert not Needs()
    assert Needs(ticket="t1")
    assert Needs(recent_receipts=0)  # a limit of 0 is still a read asked for
    assert Needs(history=(10, None))


def test_a_head_has_no_deadline_unless_recorded() -> None:
    assert LaneHead(version=3, last_now=None).next_deadline is None


def test_perform_reads_nothing_when_nothing_is_needed() -> None:
    store = FakeStore()
    reads = Reads.perform(cast(LaneStore, store), NO_NEEDS)
    assert store.calls == []
    assert reads.ticket is None and reads.receipt is None
    assert reads.history == [] and reads.incidents == [] and reads.recent_receipts == []


def test_perform_makes_each_read_asked_for_with_its_arguments() -> None:
    store = FakeStore()
    needs = Needs(
        ticket="t1",
        receipt="r1",
        recent_receipts=5,
        receipts_for_ticket="t1",
        history=(20, "p"),
        incidents=7,
    )
    reads = Reads.perform(cast(LaneStore, store), needs)
    assert store.calls == [
        ("get_ticket", ("t1",)),
        ("get_receipt", ("r1",)),
        ("recent_receipts", (5,)),
        ("receipts_for_ticket", ("t1",)),
        ("history", (20, "p")),
        ("incidents", (7,)),
    ]
    assert reads.ticket is TICKET and reads.receipt is RECEIPT
    assert reads.recent_receipts == [RECEIPT] and len(reads.receipts_for_ticket) == 2
    assert reads.history == [TICKET] and reads.incidents == [(1, INCIDENT)]


def test_perform_reads_only_what_is_asked() -> None:
    store = FakeStore()
    reads = Reads.perform(cast(LaneStore, store), Needs(history=(3, None)))
    assert store.calls == [("history", (3, None))]
    assert reads.ticket is None and reads.receipts_for_ticket == []
