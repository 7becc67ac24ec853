"""Fixtures for the driver tests, thin over tests/harness (helpers in kit.py): the real
coordinator on loopback in a loop thread with a ManualClock and a temp data dir, LaneClients
closed at teardown, a journal in a temp state dir, and a clean environment for driver
subprocesses."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from client.api import LaneClient
from client.driver.journal import JOURNAL_FILE, Journal
from tests.harness import TestManualClock, ThreadedCoordinator, clean_env, client_config


@pytest.fixture
def coord(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ThreadedCoordinator]:
    """The real coordinator (ManualClock: time moves only with coord.advance). Routes
    `drill` and `render` have capacity 1; route `free` is unenforced (client_config()).
    A test marked `no_in_flight_holds` runs it with in_flight_hold_seconds = 0."""
    config = client_config()
    if request.node.get_closest_marker("no_in_flight_holds") is not None:
        config.in_flight_hold_seconds = 0.0
    c = ThreadedCoordinator(tmp_path / "coordinator-data", config=config, clock=TestManualClock())
    yield c
    c.stop()


@pytest.fixture
async def clients(coord: ThreadedCoordinator) -> AsyncIterator[Callable[..., LaneClient]]:
    """clients(machine, claim, **kw) -> a LaneClient on `coord`, closed at teardown."""
    made: list[LaneClient] = []

    def make(machine: str = "studio-a", claim: str | None = "claim-a", **kw: Any) -> LaneClient:
        c = coord.client(machine, claim, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "lane-state"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture
def journal(state_dir: Path) -> Iterator[Journal]:
    j = Journal(state_dir / JOURNAL_FILE)
    yield j
    j.close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path)


@pytest.fixture
def no_lane_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LANE_* variable from the developer's shell leaks into a test."""
    for k in list(os.environ):
        if k.startswith("LANE_"):
            monkeypatch.delenv(k)
