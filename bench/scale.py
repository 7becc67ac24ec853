"""Scale shapes, each on a fresh SQLite server: memory and file descriptors with many lanes
each holding a live ticket (then quiet for a while), and many busy lanes under a small
open-file limit (`ulimit -n`, soft and hard, set in the server's preexec_fn)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import Api, Tally, bounded, fd_count, rss_mb, session, ticket_id
from bench.servers import running, start_coordinator, write_config

CREATE_CLIENTS = 8  # lanes are created by 8 concurrent clients
QUIET_FD_SLACK = 10  # "a quiet lane holds no fd": at most this many above the idle baseline


async def hold_one(api: Api, lane: str, lease: float = 3600) -> str:
    """A live held ticket on `lane` (creating the lane); returns its ticket id."""
    r = await api.post(
        "acquire",
        lane=lane,
        machineId="H",
        project="h",
        scene="s",
        promptHash="hold",
        leaseSeconds=lease,
    )
    return ticket_id(r)


@dataclass(frozen=True, slots=True)
class Memory:
    lanes: int
    base_rss: float
    base_fds: int
    rss: float  # MB with every lane holding a live ticket
    fds: int
    quiet_rss: float
    quiet_fds: int
    quiet_seconds: float  # how long the lanes were left quiet before quiet_fds was read


async def memory_and_fds(tmp: Path, n: int, quiet_seconds: float) -> Memory:
    cfg = write_config(tmp / "memory.toml", max_lanes=max(1000, 2 * n))
    with running(start_coordinator(tmp, "memory", cfg)) as srv:
        await asyncio.sleep(1.0)
        base_rss, base_fds = rss_mb(srv.pid), fd_count(srv.pid)
        async with session() as s:
            api = Api(s, srv.url)
            lanes = [f"bench:mem-{i}" for i in range(n)]
            await bounded(CREATE_CLIENTS, lambda lane: hold_one(api, lane), lanes)
        await asyncio.sleep(1.0)  # the server sees our connections closed
        rss, fds = rss_mb(srv.pid), fd_count(srv.pid)
        began = time.monotonic()
        while time.monotonic() - began < quiet_seconds:
            if fd_count(srv.pid) <= base_fds + QUIET_FD_SLACK:
                break
            await asyncio.sleep(1.0)
        waited = time.monotonic() - began
        return Memory(n, base_rss, base_fds, rss, fds, rss_mb(srv.pid), fd_count(srv.pid), waited)


@dataclass(frozen=True, slots=True)
class FdLimit:
    lanes: int
    limit: int
    requests: int
    errors: int
    peak_fds: int
    alive: bool
    examples: list[str]  # the first few distinct errors


async def busy_under_fd_limit(
    tmp: Path, n: int, limit: int, rounds: int, clients: int = 32
) -> FdLimit:
    """n lanes each with a live ticket, then `rounds` acquire+release cycles on every lane by
    `clients` concurrent clients, then the holders released; every non-2xx reply and every
    failed request counts as an error."""
    cfg = write_config(tmp / "fdlimit.toml", max_lanes=max(1000, 2 * n))
    peak = 0
    with running(start_coordinator(tmp, "fdlimit", cfg, nofile=limit)) as srv:

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, fd_count(srv.pid))
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        try:
            async with session() as s:
                t = Tally(Api(s, srv.url))
                lanes = [f"bench:fd-{i}" for i in range(n)]
                held: dict[str, str] = {}

                async def hold(lane: str) -> None:
                    r = await t.call(
                        "acquire",
                        lane=lane,
                        machineId="H",
                        project="h",
                        scene="s",
                        promptHash="hold",
                        leaseSeconds=3600,
                    )
                    if r:
                        held[lane] = ticket_id(r)

                async def busy(lane_round: tuple[str, int]) -> None:
                    lane, k = lane_round
                    r = await t.call(
                        "acquire",
                        lane=lane,
                        machineId="W",
                        project="w",
                        scene="s",
                        promptHash=f"w{k}",
                    )
                    if r:
                        await t.call(
                            "release",
                            lane=lane,
                            machineId="W",
                            ticketId=ticket_id(r),
                            outcome="completed",
                        )

                async def unhold(lane: str) -> None:
                    if lane in held:
                        await t.call(
                            "release",
                            lane=lane,
                            machineId="H",
                            ticketId=held[lane],
                            outcome="completed",
                        )

                await bounded(clients, hold, lanes)
                for k in range(rounds):
                    await bounded(clients, busy, [(lane, k) for lane in lanes])
                await bounded(clients, unhold, lanes)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        alive = srv.proc.poll() is None
    return FdLimit(n, limit, t.requests, t.errors, peak, alive, t.examples)
