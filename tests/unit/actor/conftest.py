"""A lane registry over real SQLite lane files (tests/unit/actor/test_registry.py and
test_file_upkeep.py): `make_registry(**config)` starts one on a data dir under tmp_path,
with a TestManualClock; every registry made is stopped at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from coordinator.actor.registry import LaneRegistry
from coordinator.store.sqlite_storage import SqliteStorage
from tests.harness.clocks import TestManualClock
from tests.harness.config import make_config
from tests.unit.kit import T0

MakeRegistry = Callable[..., Awaitable[LaneRegistry]]


@pytest.fixture
def clock() -> TestManualClock:
    return TestManualClock(T0)


@pytest.fixture
async def make_registry(tmp_path: Path, clock: TestManualClock) -> AsyncIterator[MakeRegistry]:
    made: list[LaneRegistry] = []

    async def make(*, start: bool = True, **config: object) -> LaneRegistry:
        reg = LaneRegistry(make_config(**config), SqliteStorage(tmp_path / "data"), clock)
        made.append(reg)
        if start:
            await reg.start()
        return reg

    yield make
    for reg in reversed(made):
        await reg.stop()
