"""LockingLaneActor (coordinator/actor/locking.py) on a real PostgreSQL database: each batch
is one lock-first lane transaction. Two actors on one lane behave like two replicas; a
read-only batch answers and then rolls back; a wake-up that came while a transaction ran on
the store thread reaches the await that transaction parks; a failed transaction answers its
whole batch 503 and the next one reloads the lane."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.actor.locking import LockingLaneActor
from coordinator.clock import ManualClock
from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.model import LaneSnapshot
from coordinator.engine.operations import AcquireOp, AwaitOp, ReleaseOp, StatusOp
from coordinator.engine.store import LaneHead, Writes
from coordinator.errors import StoreError
from coordinator.protocol.errors import Unavailable
from coordinator.store.postgres import PostgresLaneStore
from coordinator.store.postgres_db import migrate
from tests.unit.kit import LANE, make_settings

STATUS = StatusOp(10)


class GatedStore(PostgresLaneStore):
    """A real PostgreSQL lane store whose next `begin_load` or `abort` can be held on the
    store thread, and whose next commit can be made to fail."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, LANE)
        self.begin_gate = threading.Event()
        self.begin_gate.set()
        self.began = threading.Event()
        self.abort_gate = threading.Event()
        self.abort_gate.set()
        self.aborting = threading.Event()
        self.fail_commit = False
        self.loads: list[bool] = []  # `load` of each begin_load

    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        out = super().begin_load(load=load)
        self.loads.append(load)
        self.began.set()
        assert self.begin_gate.wait(10)
        return out

    def commit(self, writes: Writes) -> int:
        if self.fail_commit:
            self.fail_commit = False
            raise StoreError("disk on fire")
        return super().commit(writes)

    def abort(self) -> None:
        if self._txn is not None:
            self.aborting.set()
            assert self.abort_gate.wait(10)
        super().abort()


Make = Callable[[], Awaitable[tuple[LockingLaneActor, GatedStore]]]


@pytest.fixture
async def make(pg_dsn: str) -> AsyncIterator[Make]:
    """`await make()`: a started actor on the lane, on a store of its own (a replica)."""
    migrate(pg_dsn)
    executor = ThreadPoolExecutor(4)
    clock = ManualClock()
    started: list[tuple[LockingLaneActor, GatedStore]] = []

    async def new() -> tuple[LockingLaneActor, GatedStore]:
        store = GatedStore(pg_dsn)
        actor = LockingLaneActor(LANE, make_settings(capacity=1), store, executor, clock)
        await actor.start()
        started.append((actor, store))
        return actor, store

    yield new
    for actor, store in started:
        store.begin_gate.set()
        store.abort_gate.set()
        await actor.stop()
    executor.shutdown()


def acquire(n: int, machine: str = "mA") -> AcquireOp:
    return AcquireOp(Acquire(machine, None, "p", f"s{n}", "h", None, f"t_{n}"))


def release(tid: str, machine: str = "mA") -> ReleaseOp:
    return ReleaseOp(Release(TicketCall(machine, None, tid), "completed", None, None))


def await_(tid: str, machine: str = "mA") -> AwaitOp:
    return AwaitOp(TicketCall(machine, None, tid))


async def on_thread(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 10)


async def test_two_actors_on_one_lane_see_each_others_changes(make: Make) -> None:
    a, _ = await make()
    b, b_store = await make()
    held = await a.submit(acquire(1))
    assert held.ticket.state == "held"
    # b's memory was built before a's change: its next transaction finds the version moved
    # on under the lock, reloads, and answers from what a committed.
    queued = await b.submit(acquire(2, machine="mB"))
    assert queued.ticket.state == "queued" and queued.ticket.position == 1
    assert b.core is not None and set(b.core.live) == {"t_1", "t_2"}
    released = await a.submit(release("t_1"))
    assert released.released is True and released.promoted == ["t_2"]  # a reloaded too
    st = await b.submit(STATUS)
    assert [t.ticket_id for t in st.held] == ["t_2"] and st.queued == []
    # b's start (its tick) and acquire locked without reading the lane (the head told it
    # was stale: a second read); having reloaded once, it reads the lane with its next lock.
    assert b_store.loads == [False, False, True]


async def test_a_read_only_batch_answers_then_rolls_back(make: Make) -> None:
    a, store = await make()
    await a.submit(acquire(1))
    store.abort_gate.clear()
    store.aborting.clear()
    reply = await asyncio.wait_for(a.submit(STATUS), 10)  # answered while the lock is held
    await on_thread(store.aborting)
    assert [t.ticket_id for t in reply.held] == ["t_1"]
    assert store._in_transaction()  # the ROLLBACK is still to come
    store.abort_gate.set()
    b, _ = await make()  # another replica takes the lane's lock once it is rolled back
    assert [t.ticket_id for t in (await b.submit(STATUS)).held] == ["t_1"]
    assert not store._in_transaction()


async def test_a_batch_is_one_transaction(make: Make) -> None:
    a, store = await make()
    await a.submit(STATUS)
    store.begin_gate.clear()
    store.began.clear()
    first = asyncio.ensure_future(a.submit(acquire(1)))
    await on_thread(store.began)  # the first call's transaction holds the lane
    rest = [asyncio.ensure_future(a.submit(acquire(n))) for n in range(2, 6)]
    await asyncio.sleep(0.05)
    before = len(store.loads)
    store.begin_gate.set()
    replies = await asyncio.gather(first, *rest)
    assert [r.ticket.ticket_id for r in replies] == ["t_1", "t_2", "t_3", "t_4", "t_5"]
    assert len(store.loads) == before + 1  # the four that queued up: one more transaction


async def test_a_wake_while_the_transaction_ran_reaches_the_await_it_parks(make: Make) -> None:
    a, store = await make()
    await a.submit(acquire(1))
    await a.submit(acquire(2))  # queued behind t_1
    # Without a wake-up, the await parks and stays parked.
    parked: list[asyncio.Future[None]] = []
    reply = await a.submit(await_("t_2"), parked)
    assert reply.ticket.state == "queued"
    [fut] = parked
    await asyncio.sleep(0.05)
    assert not fut.done()
    # A wake-up (another replica's NOTIFY) while the next await's transaction runs on the
    # store thread: its park is woken at once, it looks again.
    store.begin_gate.clear()
    store.began.clear()
    parked = []
    pending = asyncio.ensure_future(a.submit(await_("t_2"), parked))
    await on_thread(store.began)
    a.wake_all()
    store.begin_gate.set()
    reply = await pending
    assert reply.ticket.state == "queued"
    [woken] = parked
    assert woken.done()


async def test_a_wake_makes_the_next_transaction_read_the_lane_with_its_lock(
    make: Make,
) -> None:
    a, store = await make()
    await a.submit(STATUS)
    assert store.loads[-1] is False
    a.wake_all()
    await a.submit(STATUS)
    assert store.loads[-1] is True
    await a.submit(STATUS)  # nothing had moved the lane on: the head is enough again
    assert store.loads[-1] is False


async def test_a_failed_commit_answers_the_batch_503_and_the_next_one_reloads(
    make: Make,
) -> None:
    a, store = await make()
    await a.submit(acquire(1))
    store.fail_commit = True
    with pytest.raises(Unavailable):
        await a.submit(acquire(2))
    assert a.core is None  # forgotten: what memory holds may not be what the store holds
    st = await a.submit(STATUS)
    assert store.loads[-1] is True
    assert [t.ticket_id for t in st.held] == ["t_1"] and st.queued == []
    again = await a.submit(acquire(2))
    assert again.ticket.state == "queued" and again.duplicate is False


async def test_txn_slots_bound_the_transactions_an_actor_runs(pg_dsn: str) -> None:
    migrate(pg_dsn)
    executor = ThreadPoolExecutor(2)
    slots = asyncio.Semaphore(1)
    a = LockingLaneActor(
        LANE, make_settings(), PostgresLaneStore(pg_dsn, LANE), executor, ManualClock()
    )
    a.txn_slots = slots
    await a.start()
    try:
        await slots.acquire()  # another lane's transaction holds the only slot
        pending = asyncio.ensure_future(a.submit(STATUS))
        await asyncio.sleep(0.1)
        assert not pending.done()
        slots.release()
        assert (await asyncio.wait_for(pending, 10)).held == []
    finally:
        await a.stop()
        executor.shutdown()
