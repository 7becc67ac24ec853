"""LoopLockingLaneActor (coordinator/actor/loop_locking.py) on a real PostgreSQL database:
a transaction on a current memory locks and commits on the event loop's thread, with no
store-thread call; a reload, an operation's reads and an abort run on a store thread; with
no idle session the lock falls back to the store thread; a failed commit answers 503, ends
the transaction and the next one reloads; two actors on a lane still see each other."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.actor.loop_locking import LoopLockingLaneActor
from coordinator.clock import ManualClock
from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.model import LaneSnapshot
from coordinator.engine.operations import AcquireOp, ReleaseOp, StatusOp
from coordinator.engine.store import LaneHead, Writes
from coordinator.errors import StoreError
from coordinator.protocol.errors import Unavailable
from coordinator.store.postgres import PostgresLaneStore
from coordinator.store.postgres_db import ConnectionPool, migrate
from tests.unit.kit import LANE, make_settings


class Recorded(PostgresLaneStore):
    """A real lane store that notes each transaction call and where it ran ("loop": the
    event loop's thread, "thread": a store thread)."""

    def __init__(self, dsn: str, pool: ConnectionPool, loop_thread: int) -> None:
        super().__init__(dsn, LANE, source=pool)
        self.loop_thread = loop_thread
        self.calls: list[str] = []
        self.fail_commit = False

    def _note(self, name: str) -> None:
        where = "loop" if threading.get_ident() == self.loop_thread else "thread"
        self.calls.append(f"{name}@{where}")

    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        self._note(f"begin_load({load})")
        return super().begin_load(load=load)

    async def begin_here(self) -> LaneHead | None:
        head = await super().begin_here()
        self._note("begin_here" if head is not None else "begin_here:none")
        return head

    def commit(self, writes: Writes) -> int:
        self._note("commit")
        return super().commit(writes)

    async def commit_here(self, writes: Writes) -> int:
        self._note("commit_here")
        if self.fail_commit:
            self.fail_commit = False
            raise StoreError("disk on fire")
        return await super().commit_here(writes)

    def abort(self) -> None:
        if self._txn is not None:
            self._note("abort")
        super().abort()


Make = Callable[..., Awaitable[tuple[LoopLockingLaneActor, Recorded]]]


@pytest.fixture
async def make(pg_dsn: str) -> AsyncIterator[Make]:
    """`await make(max_idle=8)`: a started actor on the lane, its store on a pool of its own
    (a replica)."""
    migrate(pg_dsn)
    executor = ThreadPoolExecutor(4)
    clock = ManualClock()
    started: list[tuple[LoopLockingLaneActor, ConnectionPool]] = []

    async def new(max_idle: int = 8) -> tuple[LoopLockingLaneActor, Recorded]:
        pool = ConnectionPool(pg_dsn, max_idle)
        store = Recorded(pg_dsn, pool, threading.get_ident())
        actor = LoopLockingLaneActor(LANE, make_settings(capacity=1), store, executor, clock)
        await actor.start()
        started.append((actor, pool))
        return actor, store

    yield new
    for actor, pool in started:
        await actor.stop()
        pool.close()
    executor.shutdown()


def acquire(n: int, machine: str = "mA") -> AcquireOp:
    return AcquireOp(Acquire(machine, None, "p", f"s{n}", "h", None, f"t_{n}"))


def release(tid: str) -> ReleaseOp:
    return ReleaseOp(Release(TicketCall("mA", None, tid), "completed", None, None))


async def test_a_current_lane_locks_and_commits_on_the_loop(make: Make) -> None:
    actor, store = await make()
    assert (await actor.submit(acquire(1))).ticket.state == "held"
    store.calls.clear()
    assert (await actor.submit(release("t_1"))).released is True
    assert (await actor.submit(acquire(2))).ticket.state == "held"
    assert store.calls == ["begin_here@loop", "commit_here@loop"] * 2


async def test_a_new_lanes_row_and_a_read_only_end_are_made_on_a_store_thread(
    make: Make,
) -> None:
    actor, store = await make()
    await actor.submit(acquire(1))
    assert store.calls[1:] == [  # [0]: the start's load of the lane, outside a transaction
        "begin_here:none@loop",  # the start's tick: the lane has no row yet ...
        "begin_load(False)@thread",  # ... which begin_load creates,
        "abort@thread",  # but the tick changed nothing: its ROLLBACK takes the row back
        "begin_here:none@loop",  # the acquire: still no row
        "begin_load(False)@thread",
        "commit_here@loop",  # committed with its row
    ]
    store.calls.clear()
    st = await actor.submit(StatusOp(10))
    assert [t.ticket_id for t in st.held] == ["t_1"]
    await actor.submit(acquire(2))  # after the read-only batch's ROLLBACK
    assert store.calls[:2] == ["begin_here@loop", "abort@thread"]


async def test_without_an_idle_session_the_lock_is_taken_on_a_store_thread(make: Make) -> None:
    actor, store = await make(max_idle=0)  # every session is closed when put back
    await actor.submit(acquire(1))
    store.calls.clear()
    assert (await actor.submit(release("t_1"))).released is True
    assert store.calls == ["begin_here:none@loop", "begin_load(False)@thread", "commit_here@loop"]


async def test_a_failed_commit_answers_503_ends_the_transaction_and_reloads(
    make: Make,
) -> None:
    actor, store = await make()
    await actor.submit(acquire(1))
    store.fail_commit = True
    with pytest.raises(Unavailable):
        await actor.submit(release("t_1"))
    assert store.calls[-2:] == ["commit_here@loop", "abort@thread"]
    assert not store._in_transaction()
    store.calls.clear()
    # nothing of it was kept: the lane is read again and t_1 is still held
    assert (await actor.submit(release("t_1"))).released is True
    assert store.calls[0] == "begin_load(True)@thread"


async def test_two_actors_on_one_lane_see_each_others_changes(make: Make) -> None:
    a, _ = await make()
    b, _ = await make()
    assert (await a.submit(acquire(1))).ticket.state == "held"
    queued = await b.submit(acquire(2, machine="mB"))
    assert queued.ticket.state == "queued" and queued.ticket.position == 1
    released = await a.submit(release("t_1"))
    assert released.promoted == ["t_2"]
    st = await b.submit(StatusOp(10))
    assert [t.ticket_id for t in st.held] == ["t_2"]
