"""What both lane actors share (coordinator/actor/base.py), on a PipelinedLaneActor over a
real SQLite lane file: parked long polls and what wakes them (their ticket's change,
wake_all, drain, stop), the alarm (a lease expires with no call; the registry is told
shortly before), idleness, and a stopped actor refusing calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coordinator.actor.descriptors import PREOPEN_SECONDS
from coordinator.actor.pipelined import PipelinedLaneActor
from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.operations import AcquireOp, AwaitOp, ReleaseOp, StatusOp
from coordinator.protocol.errors import Unavailable
from coordinator.store.sqlite import SqliteLaneStore
from tests.harness.clocks import TestManualClock
from tests.unit.kit import LANE, T0, make_settings

LEASE = 300.0


@pytest.fixture
def clock() -> TestManualClock:
    return TestManualClock(T0)


@pytest.fixture
async def actor(tmp_path: Path, clock: TestManualClock) -> AsyncIterator[PipelinedLaneActor]:
    executor = ThreadPoolExecutor(2)
    store = SqliteLaneStore(tmp_path / "solo+main.sqlite", LANE)
    a = PipelinedLaneActor(LANE, make_settings(capacity=1, lease=LEASE), store, executor, clock)
    await a.start()
    try:
        yield a
    finally:
        await a.stop()
        executor.shutdown()


def acquire(n: int) -> AcquireOp:
    return AcquireOp(Acquire("mA", None, "p", f"s{n}", "h", None, f"t_{n}"))


def release(tid: str) -> ReleaseOp:
    return ReleaseOp(Release(TicketCall("mA", None, tid), "completed", None, None))


async def park(a: PipelinedLaneActor, tid: str) -> asyncio.Future[None]:
    """An await on a queued ticket: its parked future."""
    parked: list[asyncio.Future[None]] = []
    reply = await a.submit(AwaitOp(TicketCall("mA", None, tid)), parked)
    assert reply.ticket.state == "queued"
    [fut] = parked
    return fut


async def two(a: PipelinedLaneActor) -> None:
    """t_1 held, t_2 and t_3 queued behind it."""
    for n in (1, 2, 3):
        await a.submit(acquire(n))


async def test_a_parked_await_wakes_when_its_ticket_changes_only(
    actor: PipelinedLaneActor,
) -> None:
    await two(actor)
    f2, f3 = await park(actor, "t_2"), await park(actor, "t_3")
    await asyncio.sleep(0.01)
    assert not f2.done() and not f3.done()
    await actor.submit(release("t_1"))  # t_2 is granted: its waiter wakes, t_3's does not
    assert f2.done() and not f3.done()
    assert not actor.idle()  # a parked await
    await actor.submit(release("t_2"))
    assert f3.done()


async def test_wake_all_and_drain_answer_every_parked_await(actor: PipelinedLaneActor) -> None:
    await two(actor)
    f2, f3 = await park(actor, "t_2"), await park(actor, "t_3")
    actor.wake_all()
    assert f2.done() and f3.done()
    again = await park(actor, "t_2")
    assert not again.done()
    actor.drain()
    assert again.done()
    assert (await park(actor, "t_3")).done()  # draining: no new park waits


async def test_an_expired_lease_is_reaped_by_the_alarm_with_no_call(
    actor: PipelinedLaneActor, clock: TestManualClock
) -> None:
    told: list[str] = []
    actor.before_alarm = told.append
    await actor.submit(acquire(1))
    await clock.until_sleeping(T0 + LEASE - PREOPEN_SECONDS)
    clock.advance(LEASE - PREOPEN_SECONDS)
    await clock.until_sleeping(T0 + LEASE)
    assert told == [LANE]  # told shortly before (the registry pre-opens the file)
    clock.advance(PREOPEN_SECONDS)
    for _ in range(200):
        if actor.core is not None and not actor.core.live:
            break
        await asyncio.sleep(0.005)
    st = await actor.submit(StatusOp(10))
    assert st.held == [] and actor.idle()


async def test_an_earlier_deadline_rearms_the_alarm(
    actor: PipelinedLaneActor, clock: TestManualClock
) -> None:
    await actor.submit(acquire(1))
    assert actor._alarm_at == T0 + LEASE
    await actor.submit(release("t_1"))
    assert actor._alarm_at == T0 + LEASE  # a later or no deadline: the armed alarm stands
    clock.advance(10)
    short = AcquireOp(Acquire("mA", None, "p", "s9", "h", 30.0, "t_9"))
    await actor.submit(short)
    assert actor._alarm_at == T0 + 10 + 30  # an earlier one replaces it


async def test_a_stopped_actor_wakes_its_parked_awaits_and_refuses_calls(
    actor: PipelinedLaneActor,
) -> None:
    await two(actor)
    f2 = await park(actor, "t_2")
    await actor.stop()
    assert f2.done() and actor.closed
    with pytest.raises(Unavailable):
        await actor.submit(StatusOp(10))
    await actor.stop()  # stopping again is a no-op


async def test_calls_tell_the_registry_and_chores_do_not_count_as_use(
    actor: PipelinedLaneActor, clock: TestManualClock
) -> None:
    touched: list[str] = []
    actor.touched = touched.append
    await actor.submit(StatusOp(10))
    assert touched == [LANE] and actor.last_used == T0
    clock.advance(50)
    await actor.suspend_store()  # a chore: not a use of the lane
    assert touched == [LANE] and actor.last_used == T0
    assert not actor.connected
    await actor.submit(StatusOp(10), touch=False)
    assert touched == [LANE] and actor.last_used == T0 + 50
    assert not actor.connected  # answered from memory
    await actor.resume_store()
    assert actor.connected
