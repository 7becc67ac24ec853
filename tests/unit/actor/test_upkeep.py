"""The store mode's background work (coordinator/actor/upkeep.py): an Upkeep's spawned
tasks end with `stop`; each mode supplies the rest (tests/unit/actor/test_file_upkeep.py,
tests/unit/actor/test_replica_sync.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from coordinator.actor.base import LaneActor
from coordinator.actor.registry import LaneRegistry
from coordinator.actor.upkeep import Upkeep
from coordinator.engine.model import LaneSettings


class Minimal(Upkeep):
    """An upkeep that only spawns a task at start."""

    def make_actor(self, lane: str, settings: LaneSettings) -> LaneActor[Any]:
        raise AssertionError("this test opens no lane")

    def start(self, stored: list[str]) -> None:
        self._spawn(asyncio.sleep(3600), "forever")
        self._spawn(asyncio.sleep(0), "brief")

    def touched(self, lane: str) -> None:
        return None

    async def backpressure(self) -> None:
        return None

    def closed(self, lane: str) -> None:
        return None

    async def housekeep(self) -> None:
        return None


async def test_stop_cancels_and_awaits_every_spawned_task() -> None:
    lanes = cast(LaneRegistry, object())
    up = Minimal(lanes)
    assert up.lanes is lanes
    up.start([])
    tasks = list(up.tasks)
    assert [t.get_name() for t in tasks] == ["forever", "brief"]
    await asyncio.sleep(0.01)
    await up.stop()
    assert up.tasks == []
    assert all(t.done() for t in tasks) and tasks[0].cancelled()
    await up.stop()  # again: nothing left to stop


def test_a_mode_supplies_every_abstract_method() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Upkeep(cast(LaneRegistry, object()))  # type: ignore[abstract]
