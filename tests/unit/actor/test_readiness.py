"""/readyz's store probe (coordinator/actor/readiness.py): at most one probe a second,
shared by concurrent callers; a probe that fails is a problem, not an error."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from coordinator.actor import readiness
from coordinator.actor.readiness import READY_CHECK_SECONDS, Readiness


class Probe:
    def __init__(self) -> None:
        self.calls = 0
        self.answer: str | None = None
        self.fail = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> str | None:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise OSError("no route")
        return self.answer


@pytest.fixture
def monotonic(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The module's monotonic clock (not the event loop's), moved by the test: now[0]."""
    now = [1000.0]
    monkeypatch.setattr(readiness, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


async def test_the_store_is_probed_at_most_once_a_second(monotonic: list[float]) -> None:
    probe = Probe()
    ready = Readiness(probe)
    assert await ready.problem() is None
    probe.answer = "disk full"
    assert await ready.problem() is None  # the last probe is fresh: not probed again
    assert probe.calls == 1
    monotonic[0] += READY_CHECK_SECONDS
    assert await ready.problem() == "disk full"
    assert probe.calls == 2


async def test_concurrent_callers_share_one_probe(monotonic: list[float]) -> None:
    probe = Probe()
    probe.gate.clear()
    probe.answer = "read-only"
    ready = Readiness(probe)
    callers = [asyncio.ensure_future(ready.problem()) for _ in range(5)]
    await asyncio.sleep(0.01)
    probe.gate.set()
    assert await asyncio.gather(*callers) == ["read-only"] * 5
    assert probe.calls == 1


async def test_a_failing_probe_is_a_problem(monotonic: list[float]) -> None:
    probe = Probe()
    probe.fail = True
    ready = Readiness(probe)
    assert await ready.problem() == "store check failed: OSError"
    probe.fail = False
    monotonic[0] += READY_CHECK_SECONDS
    assert await ready.problem() is None  # probed again: fine now
