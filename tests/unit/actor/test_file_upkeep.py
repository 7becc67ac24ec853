"""One server's lane files (coordinator/actor/file_upkeep.py), through a registry over real
SQLite files: lanes over the descriptor budget let go of their file (least recently used
first), quiet lanes too, a let-go lane is opened again shortly before its alarm, and at
start a stored lane whose deadline passed is woken with no call."""

from __future__ import annotations

import asyncio

from coordinator.actor.file_upkeep import FileUpkeep
from coordinator.actor.pipelined import PipelinedLaneActor
from coordinator.actor.registry import LaneRegistry
from coordinator.constants import LANE_QUIET_SECONDS
from coordinator.engine.commands import Acquire
from coordinator.engine.operations import AcquireOp
from tests.harness.clocks import TestManualClock
from tests.unit.actor.conftest import MakeRegistry


def acquire(n: int, lease: float | None = None) -> AcquireOp:
    return AcquireOp(Acquire("mA", None, "p", f"s{n}", "h", lease, f"t_{n}"))


def upkeep(reg: LaneRegistry) -> FileUpkeep:
    up = reg.upkeep
    assert isinstance(up, FileUpkeep)
    return up


async def busy(reg: LaneRegistry, lane: str, lease: float | None = None) -> PipelinedLaneActor:
    """The lane, opened, with a held ticket (its file written: it holds its descriptors)."""
    actor = await reg.get(lane, create=True)
    assert isinstance(actor, PipelinedLaneActor)
    await actor.submit(acquire(1, lease))
    return actor


async def settled(up: FileUpkeep) -> None:
    while up.suspending:
        await asyncio.wait(set(up.suspending))


async def test_lanes_over_the_budget_let_go_least_recently_used_first(
    make_registry: MakeRegistry,
) -> None:
    reg = await make_registry()
    up = upkeep(reg)
    up.lru.budget = 2
    a, b = await busy(reg, "solo:a"), await busy(reg, "solo:b")
    await a.submit(acquire(1))  # a used again: b is the least recently used
    c = await busy(reg, "solo:c")
    await settled(up)
    assert (a.connected, b.connected, c.connected) == (True, False, True)
    assert b.core is not None and "t_1" in b.core.live  # its memory stays


async def test_quiet_lanes_let_go_of_their_file(
    make_registry: MakeRegistry, clock: TestManualClock
) -> None:
    reg = await make_registry()
    up = upkeep(reg)
    quiet = await busy(reg, "solo:quiet")
    clock.advance(LANE_QUIET_SECONDS)
    talky = await busy(reg, "solo:talky")
    await up.suspend_quiet()
    assert not quiet.connected and talky.connected
    assert reg.open_lanes() == ["solo:quiet", "solo:talky"]
    assert len(up.lru) == 1  # only talky counts against the budget


async def test_a_let_go_lane_is_opened_again_before_its_alarm(
    make_registry: MakeRegistry, clock: TestManualClock
) -> None:
    reg = await make_registry()
    actor = await busy(reg, "solo:a", lease=60)
    await actor.suspend_store()
    assert not actor.connected
    clock.advance(60 - 0.1)  # PREOPEN_SECONDS before the lease runs out
    for _ in range(500):
        if actor.connected:
            break
        await asyncio.sleep(0.002)
    assert actor.connected
    assert actor.core is not None and "t_1" in actor.core.live  # not expired yet


async def test_at_start_a_stored_lane_whose_deadline_passed_is_woken(
    make_registry: MakeRegistry, clock: TestManualClock
) -> None:
    first = await make_registry()
    await busy(first, "solo:due", lease=30)
    await busy(first, "solo:later", lease=600)
    await first.stop()
    clock.advance(60)
    second = await make_registry()
    for _ in range(500):
        if "solo:due" in second.open_lanes():
            break
        await asyncio.sleep(0.005)
    due = second.open_actor("solo:due")
    assert due is not None and due.core is not None and due.core.live == {}  # expired
    assert "solo:later" not in second.open_lanes()  # not due: only its deadline is kept
