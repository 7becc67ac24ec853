"""Deadlines of lanes that are not open (coordinator/actor/deadlines.py): one task sleeps
until the earliest, wakes the due lanes (up to `parallel` at once), and looks again when
an earlier deadline is added; a lane whose wake fails does not stop the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import structlog

from coordinator.actor.deadlines import LaneDeadlines
from tests.harness.clocks import TestManualClock

T0 = 1_764_450_000.0


class Waker:
    """The registry's `wake`: records lanes; a lane in `hold` waits for `release`."""

    def __init__(self) -> None:
        self.woken: list[str] = []
        self.hold: set[str] = set()
        self.release = asyncio.Event()
        self.fail: set[str] = set()
        self.running = 0
        self.most = 0

    async def __call__(self, lane: str) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if lane in self.hold:
                await self.release.wait()
            if lane in self.fail:
                raise OSError("cannot open")
            self.woken.append(lane)
        finally:
            self.running -= 1


async def until(cond: object, what: str) -> None:
    for _ in range(500):
        if callable(cond) and cond():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(what)


@pytest.fixture
async def clock() -> TestManualClock:
    return TestManualClock(T0)


@pytest.fixture
async def waker() -> Waker:
    return Waker()


@pytest.fixture
async def deadlines(clock: TestManualClock, waker: Waker) -> AsyncIterator[LaneDeadlines]:
    d = LaneDeadlines(clock, waker, parallel=2)
    d.start()
    yield d
    waker.release.set()
    await d.stop()


async def test_lanes_are_woken_when_their_deadline_comes_earliest_first(
    deadlines: LaneDeadlines, clock: TestManualClock, waker: Waker
) -> None:
    deadlines.add(T0 + 20, "b")
    deadlines.add(T0 + 10, "a")
    deadlines.add(T0 - 5, "due")  # due already: woken at once
    await until(lambda: waker.woken == ["due"], "the due lane was not woken")
    assert len(deadlines) == 2
    await clock.until_sleeping(T0 + 10)
    clock.advance(10)
    await until(lambda: waker.woken == ["due", "a"], "a was not woken")
    await asyncio.sleep(0.01)
    assert waker.woken == ["due", "a"]  # b is not due yet
    clock.advance(10)
    await until(lambda: waker.woken == ["due", "a", "b"], "b was not woken")
    assert len(deadlines) == 0


async def test_an_earlier_deadline_added_while_sleeping_is_looked_at(
    deadlines: LaneDeadlines, clock: TestManualClock, waker: Waker
) -> None:
    deadlines.add(T0 + 100, "late")
    await clock.until_sleeping(T0 + 100)
    deadlines.add(T0 + 5, "early")
    await clock.until_sleeping(T0 + 5)
    clock.advance(5)
    await until(lambda: waker.woken == ["early"], "the earlier deadline was not woken")


async def test_due_lanes_are_woken_side_by_side_up_to_parallel(
    deadlines: LaneDeadlines, waker: Waker
) -> None:
    waker.hold = {"a", "b", "c"}
    for lane in "abcd":
        deadlines.add(T0 - 1, lane)
    await until(lambda: waker.running == 2, "two lanes were not woken at once")
    await asyncio.sleep(0.01)
    assert waker.most == 2 and len(deadlines) == 2  # the others wait for a slot
    waker.release.set()
    await until(lambda: sorted(waker.woken) == ["a", "b", "c", "d"], "not all were woken")


async def test_a_failing_wake_does_not_stop_the_others(
    deadlines: LaneDeadlines, waker: Waker
) -> None:
    waker.fail = {"broken"}
    with structlog.testing.capture_logs() as logs:
        deadlines.add(T0 - 2, "broken")
        deadlines.add(T0 - 1, "fine")
        await until(lambda: waker.woken == ["fine"], "the lane after a failure was not woken")
    failed = [e for e in logs if e["event"] == "lane.wake_failed"]
    assert [(e["lane"], e["error"]) for e in failed] == [("broken", "OSError")]
