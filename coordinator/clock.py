"""The injected clock: the only place the coordinator reads the wall clock (lanes through
the `Clock` they are given; log timestamps through `SystemClock`). Durations and throttles
(`time.perf_counter`, `time.monotonic`) are not wall-clock reads."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds (UTC) with a fraction."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once now() >= deadline."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        while True:
            delay = deadline - time.time()
            if delay <= 0:
                return
            await asyncio.sleep(delay)


class ManualClock:
    """A clock that moves only when told to; sleepers wake when advanced past their deadline."""

    def __init__(self, start: float = 1_764_450_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._counter), fut))
        await fut

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    def set(self, when: float) -> None:
        self._now = max(self._now, when)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
