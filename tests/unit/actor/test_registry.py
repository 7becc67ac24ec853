"""The lane registry (coordinator/actor/registry.py) over real SQLite lane files: lanes are
opened on first use (once, however many callers), within max_lanes; idle lanes are closed;
a lane whose file cannot be opened is recorded and refused, the others served; readiness
follows start and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.operations import AcquireOp, ReleaseOp, StatusOp
from coordinator.errors import StoreError
from coordinator.protocol.errors import Unavailable
from tests.harness.clocks import TestManualClock
from tests.unit.actor.conftest import MakeRegistry

STATUS = StatusOp(10)


def acquire(n: int) -> AcquireOp:
    return AcquireOp(Acquire("mA", None, "p", f"s{n}", "h", None, f"t_{n}"))


def release(tid: str) -> ReleaseOp:
    return ReleaseOp(Release(TicketCall("mA", None, tid), "completed", None, None))


async def test_readiness_follows_start_and_shutdown(make_registry: MakeRegistry) -> None:
    reg = await make_registry(start=False)
    assert await reg.not_ready_reason() == "starting"
    await reg.start()
    assert await reg.not_ready_reason() is None
    reg.drain()
    assert await reg.not_ready_reason() == "shutting down"


async def test_a_lane_is_opened_once_on_first_use(make_registry: MakeRegistry) -> None:
    reg = await make_registry()
    assert await reg.get("solo:a", create=False) is None  # no file, not created
    assert reg.open_lanes() == []
    actors = await asyncio.gather(*(reg.get("solo:a", create=True) for _ in range(5)))
    first = actors[0]
    assert first is not None and all(a is first for a in actors)
    assert reg.open_lanes() == ["solo:a"] and reg.open_actor("solo:a") is first
    await first.submit(acquire(1))
    assert await reg.get("solo:a", create=False) is first
    assert await reg.known_lanes() == ["solo:a"]


async def test_new_lanes_beyond_max_lanes_are_refused(make_registry: MakeRegistry) -> None:
    reg = await make_registry(max_lanes=2)
    for lane in ("solo:a", "solo:b"):
        actor = await reg.get(lane, create=True)
        assert actor is not None
        await actor.submit(acquire(1))
    with pytest.raises(Unavailable, match="max_lanes"):
        await reg.get("solo:c", create=True)
    assert reg.open_lanes() == ["solo:a", "solo:b"]


async def test_idle_lanes_are_closed_busy_ones_kept(
    make_registry: MakeRegistry, clock: TestManualClock
) -> None:
    reg = await make_registry()
    busy, quiet = await reg.get("solo:busy", create=True), await reg.get("solo:quiet", create=True)
    assert busy is not None and quiet is not None
    await busy.submit(acquire(1))
    await quiet.submit(acquire(1))
    await quiet.submit(release("t_1"))
    await reg.close_idle(idle_seconds=60)
    assert reg.open_lanes() == ["solo:busy", "solo:quiet"]  # not idle long enough yet
    clock.advance(60)
    await reg.close_idle(idle_seconds=60)
    assert reg.open_lanes() == ["solo:busy"] and quiet.closed
    reopened = await reg.get("solo:quiet", create=False)  # its file is still there
    assert reopened is not None and reopened is not quiet
    assert (await reopened.submit(STATUS)).held == []


async def test_a_lane_whose_file_cannot_be_opened_is_recorded_and_refused(
    make_registry: MakeRegistry,
) -> None:
    reg = await make_registry()
    path = reg.storage.where("solo:bad")["file"]
    data = reg.storage.data_dir  # type: ignore[attr-defined]
    (data / path).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="solo:bad cannot be opened"):
        await reg.get("solo:bad", create=False)
    assert reg.lane_error("solo:bad") is not None and reg.broken_lane_count() == 1
    assert reg.open_lanes() == []
    good = await reg.get("solo:good", create=True)  # other lanes are served
    assert good is not None
    (data / path).unlink()  # the operator removed the file: the lane opens afresh
    assert await reg.get("solo:bad", create=True) is not None
    assert reg.lane_error("solo:bad") is None and reg.broken_lane_count() == 0


async def test_wake_opens_a_stored_lane_and_does_what_fell_due(
    make_registry: MakeRegistry, clock: TestManualClock
) -> None:
    reg = await make_registry()
    actor = await reg.get("solo:a", create=True)
    assert actor is not None
    await actor.submit(acquire(1))
    await reg.close("solo:a")
    assert reg.open_lanes() == []
    clock.advance(301)  # the lease ran out while the lane was closed
    await reg.wake("solo:a")
    woken = reg.open_actor("solo:a")
    assert woken is not None and woken.core is not None and woken.core.live == {}
    await reg.wake("solo:never")  # no file: nothing opened
    assert reg.open_lanes() == ["solo:a"]


async def test_stop_closes_every_lane_and_refuses_more(make_registry: MakeRegistry) -> None:
    reg = await make_registry()
    actor = await reg.get("solo:a", create=True)
    assert actor is not None
    await reg.stop()
    assert actor.closed and reg.open_lanes() == []
    with pytest.raises(Unavailable):
        await reg.get("solo:a", create=True)
    await reg.stop()  # again: nothing to do
