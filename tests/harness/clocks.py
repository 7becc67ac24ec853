"""Clocks for in-process coordinators: the coordinator's own Manual/System clocks, plus a watch
on their sleepers so a test can wait until a long poll or an alarm is parked."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable

from coordinator.clock import ManualClock, SystemClock


class _SleepWatch:
    """Counts the clock's pending sleepers by deadline, so a test can wait until a long
    poll is parked (its timer sleeps until `now + waitSeconds`)."""

    def _watch_init(self) -> None:
        self.sleeping: Counter[float] = Counter()
        self._changed = asyncio.Event()

    async def _watched(self, deadline: float, inner: Callable[[], Awaitable[None]]) -> None:
        self.sleeping[deadline] += 1
        self._changed.set()
        try:
            await inner()
        finally:
            self.sleeping[deadline] -= 1
            if self.sleeping[deadline] <= 0:
                del self.sleeping[deadline]

    async def until_sleeping(
        self, deadline: float, *, slack: float = 0.0, count: int = 1, timeout: float = 10.0
    ) -> None:
        """Wait (real time, bounded) until `count` sleepers wait for a deadline in
        [deadline, deadline + slack]."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._sleeping_between(deadline, deadline + slack) < count:
            self._changed.clear()
            left = end - loop.time()
            if left <= 0:
                raise AssertionError(
                    f"no {count} sleeper(s) for {deadline}; sleeping: {dict(self.sleeping)}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 0.05))

    def _sleeping_between(self, lo: float, hi: float) -> int:
        return sum(n for d, n in self.sleeping.items() if lo <= d <= hi)


class TestManualClock(_SleepWatch, ManualClock):
    """A ManualClock (time moves only with `advance`/`set`) whose sleepers are watched."""

    __test__ = False

    def __init__(self, start: float = 1_764_450_000.0) -> None:
        ManualClock.__init__(self, start)
        self._watch_init()

    async def sleep_until(self, deadline: float) -> None:
        await self._watched(deadline, lambda: ManualClock.sleep_until(self, deadline))


class TestSystemClock(_SleepWatch, SystemClock):
    """The system clock, with its sleepers watched."""

    __test__ = False

    def __init__(self) -> None:
        self._watch_init()

    async def sleep_until(self, deadline: float) -> None:
        await self._watched(deadline, lambda: SystemClock.sleep_until(self, deadline))


class FakeClock:
    """A callable wall clock (epoch seconds) that moves only when told: the `clock=` of
    `LocalQueue`, which reads time by calling it. `clock.now += 16` moves it."""

    def __init__(self, now: float = 1_764_450_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
