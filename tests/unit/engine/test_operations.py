"""The lane operations written once for every host (coordinator/engine/operations.py): what
each one asks the store for (`needs`), its pure part (`run`) on a real `LaneCore` with the
reads handed in, the reply for a lane with no store yet (`detached`), and the evidence."""

from __future__ import annotations

import pytest

from coordinator.constants import EVIDENCE_RECENT_SECONDS
from coordinator.engine.commands import Acquire, RecordReceipt, TicketCall
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import (
    LaneSnapshot,
    PutMachineSeen,
    PutReceipt,
    Receipt,
    ReceiptPhase,
    Ticket,
    TicketState,
)
from coordinator.engine.operations import (
    AcquireOp,
    AwaitOp,
    EvidenceOp,
    HistoryOp,
    ReceiptOp,
    StatusOp,
    coordinator_evidence,
    detached,
    unknown_job,
)
from coordinator.engine.store import NO_NEEDS, Needs, Reads
from coordinator.protocol.errors import NotFound
from coordinator.protocol.replies import UNKNOWN
from tests.unit.kit import LANE, T0, make_settings

HASH = "sha256:" + "b" * 64


def _core(capacity: int = 1) -> LaneCore:
    return LaneCore(LANE, make_settings(capacity), LaneSnapshot(), T0, coordinator="coord")


def _acquire(core: LaneCore, n: int, machine: str = "mA", now: float = T0) -> str:
    op = AcquireOp(Acquire(machine, "cA", "p", f"s{n}", "h", None, f"t_{n}"))
    return op.run(core, now, Reads()).reply.ticket.ticket_id


def _receipt_cmd(ticket_id: str) -> RecordReceipt:
    return RecordReceipt("mA", "cA", ticket_id, "r1", "lease-acquired", "{}", HASH, HASH)


def test_only_acquire_creates_a_lane() -> None:
    assert AcquireOp(Acquire("m", None, "p", "s", "h", None, "t")).creates is True
    assert AwaitOp(TicketCall("m", None, "t")).creates is False
    assert StatusOp(10).creates is False and EvidenceOp(None).creates is False


def test_an_acquire_is_answered_with_its_machine_written() -> None:
    core = _core()
    res = AcquireOp(Acquire("mA", "cA", "p", "s1", "h", None, "t_1")).run(core, T0, Reads())
    assert res.reply.granted is True and res.park is None
    assert [c for c in res.fx.changes if isinstance(c, PutMachineSeen)] == [
        PutMachineSeen("mA", T0)
    ]


def test_a_ticket_call_reads_the_ticket_only_once_it_left_the_live_set() -> None:
    core = _core()
    tid = _acquire(core, 1)
    assert AwaitOp(TicketCall("mA", "cA", tid)).needs(core) == NO_NEEDS
    assert AwaitOp(TicketCall("mA", "cA", "t_gone")).needs(core) == Needs(ticket="t_gone")


def test_an_await_parks_on_a_queued_ticket_only() -> None:
    core = _core(capacity=1)
    held, queued = _acquire(core, 1), _acquire(core, 2)
    waiting = AwaitOp(TicketCall("mA", "cA", queued)).run(core, T0 + 1, Reads())
    assert waiting.park == queued and waiting.reply.granted is False
    granted = AwaitOp(TicketCall("mA", "cA", held)).run(core, T0 + 1, Reads())
    assert granted.park is None and granted.reply.granted is True


def test_a_receipt_needs_the_stored_receipt_and_is_201_when_new_200_when_replayed() -> None:
    core = _core()
    tid = _acquire(core, 1)
    op = ReceiptOp(_receipt_cmd(tid))
    assert op.needs(core) == Needs(ticket=None, receipt="r1")
    status, reply = (res := op.run(core, T0 + 1, Reads())).reply
    assert status == 201 and reply.stored is True
    stored = [c.receipt for c in res.fx.changes if isinstance(c, PutReceipt)]
    assert len(stored) == 1 and stored[0].receipt_id == "r1"
    status, reply = op.run(core, T0 + 2, Reads(receipt=stored[0])).reply
    assert status == 200 and reply.replay is True and reply.stored is False


def test_status_asks_for_receipts_only_when_it_lists_them() -> None:
    core = _core()
    _acquire(core, 1)
    assert StatusOp(10).needs(core) == NO_NEEDS
    assert StatusOp(10, receipts=3).needs(core) == Needs(recent_receipts=3)
    r = Receipt("r9", "t_1", "lease-acquired", "mA", '{"k":2}', HASH, True, T0)
    reply = StatusOp(10, receipts=3).run(core, T0, Reads(recent_receipts=[r])).reply
    assert isinstance(reply.receipts, list)
    assert [x.payload for x in reply.receipts] == [{"k": 2}]
    assert len(reply.held) == 1


def test_history_counts_the_rows_it_was_given() -> None:
    core = _core()
    op = HistoryOp(limit=50, project="p")
    assert op.needs(core) == Needs(history=(50, "p"))
    done = Ticket("t_9", LANE, TicketState.DONE, "mA", None, "p", "s", "h", 9, T0, 60.0, T0)
    done.outcome, done.ended_at = "failed", T0 + 1
    reply = op.run(core, T0 + 2, Reads(history=[done, done])).reply
    assert reply.counts == {"failed": 2} and len(reply.entries) == 2
    assert reply.retained_limit == core.settings.history_retained


def test_evidence_of_a_ticket_groups_its_receipts_by_phase() -> None:
    core = _core()
    tid = _acquire(core, 1)
    op = EvidenceOp(tid)
    assert op.needs(core) == Needs(ticket=None, receipts_for_ticket=tid)
    mine = Receipt("r1", tid, "lease-acquired", "mA", "{}", HASH, True, T0)
    other = Receipt("r2", "t_other", "provider-submitted", "mA", "{}", HASH, True, T0)
    job = op.run(core, T0 + 1, Reads(receipts_for_ticket=[mine, other])).reply.job_evidence
    assert job is not None and job.found is True and job.state == "held"
    assert isinstance(job.receipts["lease-acquired"], list)
    assert job.receipts["provider-submitted"] == UNKNOWN  # another ticket's receipt is ignored
    assert job.complete is False


def test_evidence_of_an_unknown_ticket_is_all_unknown() -> None:
    job = unknown_job("t_x")
    assert job.found is False and job.identity == UNKNOWN and job.complete is False
    assert set(job.receipts) == {p.value for p in ReceiptPhase}
    reply = EvidenceOp("t_x").run(_core(), T0, Reads()).reply
    assert reply.job_evidence == job
    assert EvidenceOp(None).needs(_core()) == NO_NEEDS


def test_machines_seen_are_listed_newest_first_within_the_hour() -> None:
    core = _core(capacity=3)
    _acquire(core, 1, machine="old", now=T0)
    _acquire(core, 2, machine="mB", now=T0 + 10)
    _acquire(core, 3, machine="mC", now=T0 + 20)
    ev = coordinator_evidence(core, T0 + 20)
    assert [m.machine_id for m in ev.machines_seen] == ["mC", "mB", "old"]
    later = coordinator_evidence(core, T0 + EVIDENCE_RECENT_SECONDS + 5)
    assert [m.machine_id for m in later.machines_seen] == ["mC", "mB"]
    assert later.distinct_machines == 2 and later.collision is None


def test_a_lane_with_no_store_answers_from_an_empty_core() -> None:
    settings = make_settings(2)
    status = detached(StatusOp(10), LANE, settings, T0, "coord")
    assert status.held == [] and status.queued_total == 0 and status.capacity == 2
    with pytest.raises(NotFound):
        detached(AwaitOp(TicketCall("mA", None, "t_1")), LANE, settings, T0, "coord")
