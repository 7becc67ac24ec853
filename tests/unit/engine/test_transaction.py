"""The lane transaction (coordinator/engine/transaction.py): LaneMemory, LaneTransaction and
`run_locked` on a fake LockingStore that records its calls — lock, load when stale, the
operations (their reads after the transaction's earlier changes were applied), COMMIT; the
read-only path left open for the host; a failure rolled back with the memory forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from coordinator.engine.commands import Acquire, Cooldown, Release, TicketCall
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import (
    Change,
    Incident,
    LaneSnapshot,
    PutCounters,
    PutTicket,
    Receipt,
    Ticket,
    TicketState,
)
from coordinator.engine.operations import (
    TICK,
    AcquireOp,
    CooldownOp,
    Operation,
    ReleaseOp,
    Result,
    StatusOp,
)
from coordinator.engine.store import NO_NEEDS, LaneHead, LockingStore, Needs, Reads, Writes
from coordinator.engine.transaction import LaneMemory, LaneTransaction, Outcome, run_locked
from coordinator.errors import StoreError
from coordinator.protocol.errors import NotFound
from tests.unit.kit import LANE, T0, make_settings

KIND = "actor-test"


class FakeLockingStore(LockingStore):
    """One lane's store in memory: the head another writer may move on (`head`,
    `snapshot`), the tickets written (`tickets`: what `get_ticket` answers), and a log of
    every transaction call."""

    def __init__(self) -> None:
        self.lane = LANE
        self.head = LaneHead(0, None, None)
        self.snapshot = LaneSnapshot()
        self.tickets: dict[str, Ticket] = {}
        self.log: list[str] = []
        self.commits: list[tuple[list[Change], float | None, float, bool]] = []
        self.fail_commit = False
        self.open_txn = False

    # the transaction
    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        assert not self.open_txn, "a transaction is already open"
        self.log.append(f"begin(load={load})")
        self.open_txn = True
        return self.head, (self.snapshot if load else None)

    def load(self) -> LaneSnapshot:
        self.log.append("load")
        return self.snapshot

    def _write(self, changes: Sequence[Change]) -> None:
        for ch in changes:
            if isinstance(ch, PutTicket):
                self.tickets[ch.ticket.ticket_id] = ch.ticket

    def apply(self, changes: Sequence[Change]) -> None:
        assert self.open_txn
        self.log.append(f"apply({len(changes)})")
        self._write(changes)

    def commit(self, writes: Writes) -> int:
        assert self.open_txn
        self.log.append("commit")
        if self.fail_commit:
            raise StoreError("disk on fire")
        self._write(writes.changes)
        self.commits.append(
            (list(writes.changes), writes.next_deadline, writes.last_now, writes.notify)
        )
        self.head = LaneHead(self.head.version + 1, writes.last_now, writes.next_deadline)
        self.open_txn = False
        return self.head.version

    def abort(self) -> None:
        self.log.append("abort")
        self.open_txn = False

    # the rest of a LaneStore
    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    @property
    def connected(self) -> bool:
        return False

    def suspend(self) -> None:
        return None

    def resume(self) -> None:
        return None

    def get_ticket(self, ticket_id: str) -> Ticket | None:
        self.log.append(f"get_ticket({ticket_id})")
        return self.tickets.get(ticket_id)

    def get_receipt(self, receipt_id: str) -> Receipt | None:
        return None

    def recent_receipts(self, limit: int) -> list[Receipt]:
        return []

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]:
        return []

    def history(self, limit: int, project: str | None) -> list[Ticket]:
        return []

    def history_count(self) -> int:
        return 0

    def incidents(self, limit: int) -> list[tuple[int, Incident]]:
        return []


class Clock:
    """The `clock` callable of run_locked: counts its reads."""

    def __init__(self, now: float = T0) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class Boom:
    """An operation whose pure part fails with a defect (not a refusal)."""

    creates = False

    def needs(self, core: LaneCore) -> Needs:
        return NO_NEEDS

    def run(self, core: LaneCore, now: float, reads: Reads) -> Result[None]:
        raise RuntimeError("a defect")


def memory(*, full_window: bool = True) -> LaneMemory:
    return LaneMemory(LANE, make_settings(capacity=1), KIND, full_window=full_window)


def acquire(n: int) -> AcquireOp:
    return AcquireOp(Acquire("mA", "cA", "p", f"s{n}", "h", None, f"t_{n}"))


def release(tid: str) -> ReleaseOp:
    return ReleaseOp(Release(TicketCall("mA", "cA", tid), "completed", None, None))


STATUS = StatusOp(10)


def queued(tid: str, seq: int, last_seen_at: float) -> Ticket:
    return Ticket(
        tid, LANE, TicketState.QUEUED, "mA", "cA", "p", f"s{seq}", "h", seq, last_seen_at,
        300.0, last_seen_at,
    )  # fmt: skip


def run(
    store: FakeLockingStore, mem: LaneMemory, ops: Sequence[Operation[Any]], clock: Clock, **kw: Any
) -> Any:
    return run_locked(store, mem, ops, clock, **kw)


# ---------------------------------------------------------------- run_locked: the steps


def test_a_first_transaction_locks_and_loads_in_one_call_runs_and_commits() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    done = run(store, mem, [acquire(1)], clock)
    # A memory with no core asks for the lane's state with the lock; nothing else is read.
    assert store.log == ["begin(load=True)", "commit"]
    assert done.reloaded and not done.open
    [outcome] = done.outcomes
    assert outcome.error is None and outcome.reply.ticket.state == "held"
    [(changes, deadline, last_now, notify)] = store.commits
    assert any(isinstance(c, PutTicket) and c.ticket.ticket_id == "t_1" for c in changes)
    assert deadline == T0 + 300  # the lease's expiry
    assert last_now == T0
    assert not notify  # a ticket granted at once has no parked await anywhere
    assert mem.version == 1 and mem.core is not None and "t_1" in mem.core.live
    assert done.fx.changes == changes


def test_a_current_memory_takes_the_lock_without_loading() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    store.log.clear()
    done = run(store, mem, [release("t_1")], clock)
    assert store.log == ["begin(load=False)", "commit"]
    assert not done.reloaded
    assert done.outcomes[0].reply.released is True
    assert mem.version == 2


def test_a_lane_another_writer_moved_on_is_loaded_under_the_lock() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    # Another replica released t_1 and committed twice meanwhile.
    store.head = LaneHead(3, T0 + 1, None)
    store.snapshot = LaneSnapshot(version=3, last_now=T0 + 1, next_seq=2, last_fence=1)
    store.log.clear()
    done = run(store, mem, [STATUS], clock)
    assert store.log == ["begin(load=False)", "load"]  # read-only: left open (see below)
    assert done.reloaded
    assert mem.version == 3 and mem.core is not None and mem.core.live == {}
    assert done.outcomes[0].reply.now == T0 + 1  # the lane's last `now`, not the clock


def test_expect_stale_reads_the_lane_with_the_lock() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    store.head = LaneHead(3, T0, None)
    store.snapshot = LaneSnapshot(version=3, last_now=T0, next_seq=2, last_fence=1)
    store.log.clear()
    done = run(store, mem, [STATUS], clock, expect_stale=True)
    assert store.log == ["begin(load=True)"]  # one round trip: no separate load
    assert done.reloaded and mem.version == 3


def test_a_snapshot_read_at_another_version_than_the_head_is_loaded_again() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    store.head = LaneHead(4, T0, None)
    store.snapshot = LaneSnapshot(version=3, last_now=T0)  # not the head's version
    run(store, mem, [STATUS], clock)
    assert store.log == ["begin(load=True)", "load"]


def test_a_read_only_transaction_is_left_open_for_the_host_to_end() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    store.log.clear()
    done = run(store, mem, [STATUS, TICK], clock)
    assert done.open and not done.reloaded
    assert store.log == ["begin(load=False)"]  # neither COMMIT nor ROLLBACK yet
    assert store.open_txn
    assert [h.ticket_id for h in done.outcomes[0].reply.held] == ["t_1"]
    assert mem.version == 1


def test_a_recorded_deadline_that_no_longer_stands_is_committed_without_changes() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [STATUS], clock)  # the lane's memory is built (an empty lane)
    store.abort()
    store.head = LaneHead(0, T0, T0 + 999)  # the last commit recorded a deadline
    done = run(store, mem, [STATUS], clock)
    assert not done.open
    assert store.commits == [([], None, T0, False)]


def test_reads_see_the_changes_the_transaction_made_before_them() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    done = run(store, mem, [acquire(1), release("t_1"), release("t_1")], clock)
    # The second release reads the ended ticket: the transaction's changes are applied first.
    assert store.log == ["begin(load=True)", "apply(8)", "get_ticket(t_1)", "commit"]
    first, second = done.outcomes[1].reply, done.outcomes[2].reply
    assert first.released is True
    assert second.released is False and second.reason == "already-done"
    # What was applied is not written twice: the commit has only what came after.
    [(changes, _, _, _)] = store.commits
    assert len(done.fx.changes) == 8 + len(changes)


def test_a_refusal_answers_its_operation_and_the_others_go_on() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    done = run(store, mem, [release("t_9"), acquire(1)], clock)
    refused, granted = done.outcomes
    assert isinstance(refused.error, NotFound)
    with pytest.raises(NotFound):
        refused.result()
    assert granted.result().ticket.state == "held"
    assert store.log[-1] == "commit"


def test_a_failing_operation_rolls_back_and_forgets_the_memory() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    store.log.clear()
    with pytest.raises(RuntimeError, match="a defect"):
        run(store, mem, [acquire(2), Boom()], clock)
    assert store.log == ["begin(load=False)", "abort"]
    assert mem.core is None and not store.open_txn
    # The next transaction rebuilds the lane from the store, with its lock.
    store.snapshot = LaneSnapshot(version=1, last_now=T0)
    store.log.clear()
    run(store, mem, [STATUS], clock)
    assert store.log[0] == "begin(load=True)"


def test_a_failing_commit_rolls_back_and_forgets_the_memory() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    store.fail_commit = True
    with pytest.raises(StoreError):
        run(store, mem, [acquire(1)], clock)
    assert store.log == ["begin(load=True)", "commit", "abort"]
    assert mem.core is None and mem.version == 0


def test_extra_changes_are_asked_for_after_the_operations_and_committed_with_them() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    seen: list[list[str]] = []
    extra = PutCounters(7, 9)

    def host(txn: LaneTransaction) -> list[Change]:
        seen.append(list(txn.core.live))
        return [extra]

    done = run(store, mem, [acquire(1)], clock, extra=host)
    assert seen == [["t_1"]]  # after the acquire ran
    assert store.commits[0][0][-1] is extra
    # A read-only batch with host changes commits them.
    store.log.clear()
    done = run(store, mem, [STATUS], clock, extra=host)
    assert not done.open and store.log == ["begin(load=False)", "commit"]
    assert store.commits[-1][0] == [extra]


# ---------------------------------------------------------------- now, memory, windows


def test_now_never_runs_back_behind_the_lane_or_the_memory() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock(T0)
    store.head = LaneHead(0, T0 + 50, None)
    store.snapshot = LaneSnapshot(last_now=T0 + 50)  # another replica's clock is ahead
    done = run(store, mem, [acquire(1)], clock)
    assert done.outcomes[0].reply.ticket.enqueued_at == T0 + 50
    assert store.commits[0][2] == T0 + 50
    assert mem.tick(T0) == T0 + 50  # the memory's last `now`
    assert mem.tick(T0 + 60, T0 + 70, None) == T0 + 70  # a head's `now` ahead too
    assert mem.tick(T0 + 80) == T0 + 80


def test_each_operation_reads_the_clock_once() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [STATUS, STATUS, STATUS], clock)
    assert clock.reads == 1 + 3  # the load, then one `now` per operation


def test_full_window_gives_a_loaded_waiter_a_whole_keepalive_window() -> None:
    snap = LaneSnapshot(live=[queued("t_w", 1, T0)], next_seq=2, last_now=T0)
    later = T0 + 10_000  # far beyond the 600 s waiter timeout
    full = memory(full_window=True)
    full.adopt(snap, later)
    assert full.core is not None and full.core.next_deadline() == later + 600
    snap = LaneSnapshot(live=[queued("t_w", 1, T0)], next_seq=2, last_now=T0)
    kept = memory(full_window=False)
    kept.adopt(snap, later)
    assert kept.core is not None and kept.core.next_deadline() == T0 + 600
    assert kept.core.advance(later).changes  # abandoned at once
    assert "t_w" not in kept.core.live


def test_memory_is_current_only_at_the_version_the_store_holds() -> None:
    mem = memory()
    assert not mem.current(None)  # no core yet
    mem.adopt(LaneSnapshot(version=2), T0)
    assert mem.current(None)  # the only writer: its memory is the lane
    assert mem.current(LaneHead(2, None))
    assert not mem.current(LaneHead(3, None))
    mem.committed(3)
    assert mem.current(LaneHead(3, None))
    mem.forget()
    assert not mem.current(LaneHead(3, None))


# ---------------------------------------------------------------- LaneTransaction alone


def test_a_transaction_without_a_head_hands_its_effects_over() -> None:
    """The pipelined host: no head (its memory is the lane), effects taken op by op."""
    mem = memory()
    mem.adopt(LaneSnapshot(), T0)
    txn = LaneTransaction(mem)
    assert not txn.stale
    op = acquire(1)
    assert txn.start(op, T0) is NO_NEEDS
    outcome = txn.run(op, Reads())
    assert outcome == Outcome(outcome.reply) and outcome.park is None
    fx = txn.take()
    assert [type(c).__name__ for c in fx.changes].count("PutTicket") >= 1
    assert txn.fx.changes == [] and txn.unwritten() == []
    # Nothing changed since the take and the deadline is the memory's own: nothing to write.
    assert txn.writes() is None
    txn.add([PutCounters(1, 2)])
    writes = txn.writes()
    assert writes is not None and writes.changes == [PutCounters(1, 2)]
    assert writes.next_deadline == T0 + 300 and writes.last_now == T0 and not writes.notify


def test_unwritten_gives_each_change_once() -> None:
    mem = memory()
    mem.adopt(LaneSnapshot(), T0)
    txn = LaneTransaction(mem)
    txn.start(acquire(1), T0)
    txn.run(acquire(1), Reads())
    first = txn.unwritten()
    assert first and txn.unwritten() == []
    txn.start(release("t_1"), T0 + 1)
    txn.run(release("t_1"), Reads())
    assert txn.unwritten() == txn.fx.changes[len(first) :]


# ---------------------------------------------------------------- whom a commit tells


def notified(store: FakeLockingStore) -> bool:
    return store.commits[-1][3]


def test_a_commit_tells_other_replicas_only_when_a_ticket_queued_before_it_left_the_queue() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1)], clock)
    assert not notified(store)  # granted at once: nobody can be parked on it
    run(store, mem, [acquire(2)], clock)
    assert not notified(store)  # queued: nothing left the queue
    run(store, mem, [release("t_1")], clock)
    assert notified(store)  # t_2, queued before, was promoted: its await may be parked
    run(store, mem, [release("t_2")], clock)
    assert not notified(store)  # a held ticket ended and nobody waited


def test_a_queued_ticket_created_and_promoted_in_one_transaction_tells_no_one() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1), acquire(2), release("t_1")], clock)
    assert mem.core is not None and mem.core.live["t_2"].state is TicketState.HELD
    assert not notified(store)


def test_a_queued_ticket_released_or_a_pause_tells_other_replicas() -> None:
    store, mem, clock = FakeLockingStore(), memory(), Clock()
    run(store, mem, [acquire(1), acquire(2)], clock)
    run(store, mem, [release("t_2")], clock)  # a waiter gave up: its parked await answers
    assert notified(store)
    pause = CooldownOp(Cooldown(TicketCall("mA", "cA", "t_1"), "rate-limited", 60.0))
    run(store, mem, [pause], clock)
    assert notified(store)
