"""Deadlines of lanes that are not open: one task sleeps until the earliest, then asks the
registry to wake those lanes (open them: their due leases expire, their waiters move).

At startup a lane file's recorded next deadline is read without opening the lane (one row,
read-only), so the server listens at once however many lane files it has, and a lane whose
lease ran out while the server was down is woken immediately, the others when they fall due.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Awaitable, Callable

from coordinator.clock import Clock


class LaneDeadlines:
    def __init__(self, clock: Clock, wake: Callable[[str], Awaitable[None]]) -> None:
        self._clock = clock
        self._wake = wake
        self._heap: list[tuple[float, str]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, deadline: float, lane: str) -> None:
        heapq.heappush(self._heap, (deadline, lane))
        if self._heap[0] == (deadline, lane):
            self._changed.set()  # a new earliest: the sleeper looks again

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lane-deadlines")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if not self._heap:
                self._changed.clear()
                await self._changed.wait()
                continue
            deadline = self._heap[0][0]
            if deadline > self._clock.now():
                self._changed.clear()
                sleeper = asyncio.ensure_future(self._clock.sleep_until(deadline))
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    await asyncio.wait({sleeper, changed}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
                    changed.cancel()
                continue
            _, lane = heapq.heappop(self._heap)
            await self._wake(lane)
