"""The load generator of the peer table, the same for every system (its own client adapter
under bench/peers/base.py's Client):

- throughput: L lanes × C clients, each client cycling acquire → (wait until held) →
  release for `seconds`. A cycle counts when its release returned inside the timed window,
  so on 1 lane × 16 clients only granted cycles count: each one waited its turn. Server CPU
  is read from /proc at the window's two ends (the system's own pids, per component) and
  divided by the cycles.
- hand-off: a holder (client 0) and a waiter (client 1, on replica 2 of a two-replica
  system) whose wait is parked; ms from sending the holder's release to the waiter's wait
  returning held."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.common import BenchError
from bench.peers.base import Client, System, cpu_delta


@dataclass(frozen=True, slots=True)
class Round:
    per_second: float
    cycles: int
    cpu_ms: dict[str, float]  # component -> ms of CPU per cycle


async def cycle(c: Client, lane: str, i: int) -> None:
    hold = await c.acquire(lane, i)
    if not hold.held:
        await c.wait(hold)
    await c.release(hold)


def _first(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def throughput(system: System, lanes: list[str], per_lane: int, seconds: float) -> Round:
    """len(lanes) × per_lane clients cycle for `seconds` (after one warm-up cycle each, which
    opens every connection and creates every lane)."""
    n = len(lanes) * per_lane
    clients = list(await asyncio.gather(*(system.client(k) for k in range(n))))
    plan = [(clients[i], lanes[i // per_lane]) for i in range(n)]
    done: list[float] = []
    try:
        await asyncio.gather(*(cycle(c, lane, -1) for c, lane in plan))
        t0 = time.perf_counter()
        stop_at = t0 + seconds

        async def worker(c: Client, lane: str) -> None:
            i = 0
            while time.perf_counter() < stop_at:
                await cycle(c, lane, i)
                done.append(time.perf_counter())
                i += 1

        try:
            async with asyncio.TaskGroup() as tg:
                cpu0 = system.cpu()
                for c, lane in plan:
                    tg.create_task(worker(c, lane))
                await asyncio.sleep(seconds)
                cpu1, t1 = system.cpu(), time.perf_counter()
        except BaseExceptionGroup as group:
            raise _first(group) from None
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    count = sum(1 for t in done if t <= t1)
    if not count:
        raise BenchError(f"{system.key}: no cycle completed in {seconds:g} s")
    cpu = cpu_delta(cpu0, cpu1)
    return Round(count / (t1 - t0), count, {k: v / count * 1000 for k, v in cpu.items()})


async def handoff(system: System, lane: str, samples: int) -> list[float]:
    holder, waiter = await system.client(0), await system.client(1)
    gaps: list[float] = []
    try:
        for i in range(samples):
            a = await holder.acquire(lane, i)
            if not a.held:
                raise BenchError(f"{system.key} {lane}: the holder was not granted")
            b = await waiter.acquire(lane, i)
            if b.held:
                raise BenchError(f"{system.key} {lane}: the waiter was granted beside the holder")
            parked = asyncio.create_task(waiter.wait(b))
            await asyncio.sleep(system.park_seconds)
            if parked.done():
                await parked  # raises its error; returning early is an error too
                raise BenchError(f"{system.key} {lane}: the waiter was held before the release")
            t0 = time.perf_counter()
            await holder.release(a)
            await parked
            gaps.append((time.perf_counter() - t0) * 1000)
            await waiter.release(b)
    finally:
        await asyncio.gather(holder.close(), waiter.close(), return_exceptions=True)
    return gaps
