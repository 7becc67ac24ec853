"""The restart shape: N lanes with a live ticket each on a fresh SQLite server (created by 8
concurrent clients), some of whose leases fall due while the server is down; then a restart
over the same data dir: the time from spawn to listening, and the time until every alarm that
fell due meanwhile has fired.

Every lane gets a holder (lease 3600 s). Every tenth lane also gets a queued waiter, and just
before the stop its holder heartbeats with leaseSeconds 15 (the minimum), so those leases
expire about 15 s later, while the server is down (the bench waits until the last one is
past). After the restart, `lanes_expiries_total` in /metrics (leases reaped by the alarm, a
counter that starts at 0 with the process) is polled until it reaches the number of leases
that fell due: polling /metrics opens no lane, so the alarms fire on their own. It is polled
every POLL_SECONDS: one render with ~1,000 lanes open costs the server ~26 ms of its event
loop, so polling every 50 ms took about half the loop (and 3 s of CPU) from what is measured."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common import Api, Tally, bounded, session, ticket_id
from bench.report import note
from bench.servers import running, start_coordinator, write_config

CREATE_CLIENTS = 8
DUE_EVERY = 10  # one lane in ten has a lease falling due while the server is down
MIN_LEASE = 15.0
EXPIRIES = "lanes_expiries_total"
POLL_SECONDS = 0.25  # the fired figure is late by at most this much
STALL_SECONDS = 30.0  # after listening: no further due alarm fired for this long, stop waiting


@dataclass(frozen=True, slots=True)
class Restart:
    lanes: int
    created: int  # lanes holding a live ticket before the stop
    errors: int  # failed requests while creating them
    example: str  # the first error, if any
    create_seconds: float
    due: int  # leases that fell due while the server was down
    downtime: float  # from the end of the stop to the restart's spawn
    listen: float  # spawn -> listening, seconds
    fired: float | None  # spawn -> every due alarm fired (None: the count stalled short)
    fired_count: int


async def _populate(url: str, name: str, n: int) -> tuple[Tally, int, list[float], float]:
    """Create the lanes; returns (tally, lanes created, due expiries, creation seconds)."""
    async with session() as s:
        t = Tally(Api(s, url))
        holders: dict[int, str] = {}

        async def create(i: int) -> None:
            lane = f"bench:{name}-{i}"
            r = await t.call(
                "acquire",
                lane=lane,
                machineId="H",
                project="h",
                scene="s",
                promptHash="hold",
                leaseSeconds=3600,
            )
            if not r:
                return
            holders[i] = ticket_id(r)
            if i % DUE_EVERY == 0:
                await t.call(
                    "acquire", lane=lane, machineId="W", project="w", scene="s", promptHash="w"
                )

        began = time.monotonic()
        await bounded(CREATE_CLIENTS, create, range(n))
        created = time.monotonic() - began
        note(f"{name}: {len(holders)} lanes in {created:.1f} s, {t.errors} errors")

        async def shorten(i: int) -> float | None:
            r = await t.call(
                "heartbeat",
                lane=f"bench:{name}-{i}",
                machineId="H",
                ticketId=holders[i],
                leaseSeconds=MIN_LEASE,
            )
            expires = r.get("leaseExpiresAt")
            return float(expires) if isinstance(expires, int | float) else None

        due = [i for i in holders if i % DUE_EVERY == 0]
        expiries = [e for e in await bounded(CREATE_CLIENTS, shorten, due) if e is not None]
    return t, len(holders), expiries, created


async def restart_shape(tmp: Path, name: str, n: int) -> Restart:
    cfg = write_config(tmp / f"{name}.toml", max_lanes=2 * n + 100)
    data = tmp / f"{name}-data"
    with running(start_coordinator(tmp, name, cfg, data_dir=data)) as srv:
        tally, created, expiries, create_seconds = await _populate(srv.url, name, n)
        srv.stop()  # SIGTERM: a graceful stop, as an operator's restart
    stopped = time.time()
    due = sum(1 for e in expiries if e > stopped)  # fell due while down
    if due < len(expiries):
        note(f"{name}: {len(expiries) - due} leases fell due before the stop finished")
    # down until the last shortened lease is past, and longer than a lease (15 s) in any case
    wait = max(max(expiries, default=stopped) + 1.0, stopped + MIN_LEASE + 1.0) - time.time()
    note(f"{name}: down; waiting {max(0.0, wait):.1f} s for {due} leases to fall due")
    await asyncio.sleep(max(0.0, wait))
    downtime = time.time() - stopped  # until the restart is spawned
    srv2 = start_coordinator(tmp, f"{name}-restart", cfg, data_dir=data, wait=False)
    with running(srv2):
        listen = await asyncio.to_thread(srv2.wait_listening)
        fired: float | None = None
        count = 0
        async with session() as s:
            api = Api(s, srv2.url)
            changed = time.monotonic()  # give up once the count stalls for STALL_SECONDS
            while time.monotonic() - changed < STALL_SECONDS:
                seen = count
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    count = int(await api.metric(EXPIRIES) or 0)
                if count >= due:
                    fired = time.monotonic() - srv2.spawned_at
                    break
                if count != seen:
                    changed = time.monotonic()
                await asyncio.sleep(POLL_SECONDS)
    example = tally.examples[0] if tally.examples else ""
    return Restart(
        n, created, tally.errors, example, create_seconds, due, downtime, listen, fired, count
    )
