"""Throughput shapes: acquire+release cycles/s with L lanes × C clients each, and the server's
CPU per cycle (/proc/PID/stat utime+stime over the timed window, so the figure does not depend
on the load generator's share of the cores). The same load generator (one aiohttp session,
one connection per client) drives the coordinator and the bare handler; rounds alternate
bare, coordinator, bare, coordinator... and each side keeps its best round."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.common import Api, bounded, cpu_seconds, session, ticket_id
from bench.servers import ServerProcess


@dataclass(frozen=True, slots=True)
class Cycles:
    per_second: float
    cpu_ms: float  # server CPU per cycle, ms
    cycles: int


async def cycle(api: Api, lane: str, worker: str, i: int) -> None:
    """One acquire (a new identity each time) and the release of that ticket (held, or still
    queued when other clients share the lane)."""
    a = await api.post(
        "acquire", lane=lane, machineId=worker, project="p", scene="s", promptHash=f"{worker}-{i}"
    )
    await api.post(
        "release", lane=lane, machineId=worker, ticketId=ticket_id(a), outcome="completed"
    )


async def run_cycles(
    srv: ServerProcess, lanes: list[str], clients_per_lane: int, seconds: float
) -> Cycles:
    """len(lanes) × clients_per_lane clients cycle until `seconds` have passed."""
    async with session() as s:
        api = Api(s, srv.url)
        workers = [(lane, f"m{k}") for lane in lanes for k in range(clients_per_lane)]
        # warm up: every client once (opens or creates each lane, fills the connection pool)
        await bounded(len(workers), lambda w: cycle(api, w[0], w[1], -1), workers)
        stop_at = time.perf_counter() + seconds

        async def worker(lane: str, machine: str) -> int:
            n = 0
            while time.perf_counter() < stop_at:
                await cycle(api, lane, machine, n)
                n += 1
            return n

        cpu0, t0 = cpu_seconds(srv.pid), time.perf_counter()
        counts = await asyncio.gather(*(worker(lane, m) for lane, m in workers))
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(srv.pid) - cpu0
    n = sum(counts)
    return Cycles(n / elapsed, cpu / n * 1000 if n else float("nan"), n)


async def compare(
    bare: ServerProcess,
    target: ServerProcess,
    lanes: list[str],
    clients_per_lane: int,
    seconds: float,
    rounds: int,
) -> tuple[Cycles, Cycles]:
    """(bare's best round, target's best round) for the same shape."""
    best_bare: Cycles | None = None
    best: Cycles | None = None
    for _ in range(max(1, rounds)):
        b = await run_cycles(bare, lanes, clients_per_lane, seconds)
        t = await run_cycles(target, lanes, clients_per_lane, seconds)
        if best_bare is None or b.per_second > best_bare.per_second:
            best_bare = b
        if best is None or t.per_second > best.per_second:
            best = t
    assert best_bare is not None and best is not None
    return best_bare, best


def lanes(prefix: str, n: int) -> list[str]:
    """n lane names of the `bench` route: bench:<prefix>-0 ..."""
    return [f"bench:{prefix}-{i}" for i in range(n)]
