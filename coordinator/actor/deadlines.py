"""Deadlines of lanes that are not open: one task sleeps until the earliest, then asks the
registry to wake those lanes (open them: their due leases expire, their waiters move).

At startup a lane file's recorded next deadline is read without opening the lane (one row,
read-only), so the server listens at once however many lane files it has, and a lane whose
lease ran out while the server was down is woken immediately, the others when they fall due.
Lanes that are due together (after a restart: every lane whose lease ran out while the
server was down) are woken side by side, up to `parallel` at once: opening a lane is mostly
file I/O and SQLite work that releases the GIL, so one at a time leaves the store threads
idle while the loop waits for each hop in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Awaitable, Callable

import structlog

from coordinator.clock import Clock

log = structlog.get_logger("coordinator.registry")


class LaneDeadlines:
    def __init__(
        self, clock: Clock, wake: Callable[[str], Awaitable[None]], parallel: int = 1
    ) -> None:
        self._clock = clock
        self._wake = wake
        self._heap: list[tuple[float, str]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._slots = asyncio.Semaphore(max(1, parallel))
        self._waking: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, deadline: float, lane: str) -> None:
        heapq.heappush(self._heap, (deadline, lane))
        if self._heap[0] == (deadline, lane):
            self._changed.set()  # a new earliest: the sleeper looks again

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lane-deadlines")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._waking) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
            await self._slots.acquire()  # at most `parallel` lanes being woken at once
            _, lane = heapq.heappop(self._heap)
            task = asyncio.create_task(self._wake_one(lane), name=f"lane-wake:{lane}")
            self._waking.add(task)
            task.add_done_callback(self._waking.discard)

    async def _wake_one(self, lane: str) -> None:
        try:
            await self._wake(lane)
        except Exception as exc:  # the lane's own failure is reported where it happened
            log.error("lane.wake_failed", lane=lane, error=type(exc).__name__)
        finally:
            self._slots.release()
