"""Fixtures for the client tests, thin over tests/harness: the real coordinator in a loop
thread (so async library tests and blocking CLI subprocesses can both call it), fake servers
for the fail-closed causes, and a clean environment for `lane` subprocesses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.client.kit import STUDIO_B
from tests.harness import (
    AppThread,
    TestManualClock,
    ThreadedCoordinator,
    clean_env,
    client_config,
    fake_coordinator,
)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[ThreadedCoordinator]:
    """A fresh real coordinator (system clock) with routes render/self-test/drill capacity 1,
    lane render:wide capacity 2, and route `free` unenforced; its token is an admin's, and the
    driver credential STUDIO_B (tests/client/kit.py) is accepted too."""
    s = ThreadedCoordinator(
        tmp_path / "coordinator-data", config=client_config(), credentials=[STUDIO_B]
    )
    yield s
    s.stop()


@pytest.fixture
def manual_coordinator(tmp_path: Path) -> Iterator[ThreadedCoordinator]:
    """The same with a ManualClock (`advance(s)` moves it)."""
    s = ThreadedCoordinator(
        tmp_path / "coordinator-data", config=client_config(), clock=TestManualClock()
    )
    yield s
    s.stop()


@pytest.fixture
def fake() -> Iterator[Callable[[str], AppThread]]:
    """fake(kind): a fake server (tests.harness.fakes): 'unauthorized', 'garbage', 'local',
    'postgres', 'forbidden', 'error500'; stopped at teardown."""
    made: list[AppThread] = []

    def build(kind: str) -> AppThread:
        s = fake_coordinator(kind)
        made.append(s)
        return s

    yield build
    for s in made:
        s.stop()


@pytest.fixture
def lane_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment for `lane`: private HOME/config/state dirs, no keyring, no LANE_*."""
    return clean_env(tmp_path)
