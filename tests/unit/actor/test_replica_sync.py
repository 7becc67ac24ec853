"""Replicas sharing a database (coordinator/actor/replica_sync.py), through a registry over
a real PostgreSQL database: its lanes get lock-first actors sharing the replica's
transaction slots; a notification wakes the parked awaits of its lane only, a
(re)connection every lane's; the alarm poller wakes a lane whose deadline came, whoever
armed it; the parked awaits are re-checked on a timer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from coordinator.actor import replica_sync
from coordinator.actor.locking import LockingLaneActor
from coordinator.actor.registry import LaneRegistry
from coordinator.actor.replica_sync import ReplicaSync
from coordinator.engine.commands import Acquire, TicketCall
from coordinator.engine.operations import AcquireOp, AwaitOp
from coordinator.store.postgres_db import migrate
from coordinator.store.postgres_storage import PostgresStorage
from tests.harness.clocks import TestManualClock
from tests.harness.config import make_config
from tests.unit.kit import T0

Make = Callable[[], Awaitable[LaneRegistry]]


@pytest.fixture
def clock() -> TestManualClock:
    return TestManualClock(T0)


@pytest.fixture
async def make(
    pg_dsn: str, clock: TestManualClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Make]:
    """`await make()`: a started replica (a registry) on the test's database; the alarm
    poller and the parked re-check run every 0.05 s."""
    migrate(pg_dsn)
    monkeypatch.setattr(replica_sync, "ALARM_POLL_SECONDS", 0.05)
    monkeypatch.setattr(replica_sync, "PARKED_RECHECK_SECONDS", 3600.0)
    made: list[LaneRegistry] = []

    async def new() -> LaneRegistry:
        reg = LaneRegistry(make_config(), PostgresStorage(pg_dsn), clock)
        made.append(reg)
        await reg.start()
        return reg

    yield new
    for reg in reversed(made):
        await reg.stop()


def sync(reg: LaneRegistry) -> ReplicaSync:
    up = reg.upkeep
    assert isinstance(up, ReplicaSync)
    return up


async def lane(reg: LaneRegistry, name: str) -> LockingLaneActor:
    actor = await reg.get(name, create=True)
    assert isinstance(actor, LockingLaneActor)
    return actor


def acquire(n: int, lease: float | None = None) -> AcquireOp:
    return AcquireOp(Acquire("mA", None, "p", f"s{n}", "h", lease, f"t_{n}"))


async def parked_await(actor: LockingLaneActor) -> asyncio.Future[None]:
    """t_1 held, t_2 queued: an await on t_2, parked."""
    await actor.submit(acquire(1))
    await actor.submit(acquire(2))
    parked: list[asyncio.Future[None]] = []
    reply = await actor.submit(AwaitOp(TicketCall("mA", None, "t_2")), parked)
    assert reply.ticket.state == "queued"
    [fut] = parked
    return fut


async def test_lanes_get_lock_first_actors_sharing_the_replicas_slots(make: Make) -> None:
    reg = await make()
    a, b = await lane(reg, "solo:a"), await lane(reg, "solo:b")
    assert a.txn_slots is not None and a.txn_slots is b.txn_slots
    assert not a.connected  # sessions belong to the replica's pool


async def test_a_notification_wakes_the_parked_awaits_of_its_lane_only(make: Make) -> None:
    reg = await make()
    up = sync(reg)
    a, b = await lane(reg, "solo:a"), await lane(reg, "solo:b")
    fa, fb = await parked_await(a), await parked_await(b)
    up.on_lane_notified("solo:a")
    up.on_lane_notified("solo:closed")  # a lane not open here: nothing to wake
    assert fa.done() and not fb.done()
    up.wake_all_parked()  # the LISTEN session (re)connected: every lane looks again
    assert fb.done()


async def test_the_alarm_poller_wakes_a_lane_whose_deadline_came(
    make: Make, clock: TestManualClock
) -> None:
    first = await make()
    a = await lane(first, "solo:a")
    await a.submit(acquire(1, lease=30))
    await first.stop()  # the replica that armed the deadline is gone
    other = await make()
    await asyncio.sleep(0.2)
    assert other.open_lanes() == []  # nothing due yet
    clock.advance(31)
    for _ in range(500):
        if other.open_lanes():
            break
        await asyncio.sleep(0.01)
    woken = other.open_actor("solo:a")
    assert woken is not None and woken.core is not None and woken.core.live == {}  # expired


async def test_parked_awaits_are_rechecked_on_a_timer(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_sync, "PARKED_RECHECK_SECONDS", 0.05)
    reg = await make()
    fut = await parked_await(await lane(reg, "solo:a"))
    await asyncio.wait_for(fut, 5)  # a lost notification cannot keep it parked
