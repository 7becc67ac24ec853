"""Latency shapes: the hand-off (a release until the next waiter's parked await returns
granted, on one server or across two replicas) and alarm lateness (a lease's expiry until the
waiter behind it learns of its promotion, with many lanes armed at once)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import Api, BenchError, bounded, session, ticket_id
from bench.report import note


async def _await_granted(api: Api, lane: str, machine: str, tid: str) -> dict[str, Any]:
    """Park awaits on the ticket until it is no longer queued; BenchError unless granted."""
    while True:
        r = await api.post("await", lane=lane, machineId=machine, ticketId=tid, waitSeconds=60)
        ticket = r.get("ticket") or {}
        if ticket.get("state") != "queued":
            break
    if not r.get("granted"):
        raise BenchError(f"{lane}: the waiter was not granted: {ticket}")
    return r


async def handoff(
    hold_url: str, wait_url: str, lane: str, samples: int, park_seconds: float = 0.01
) -> list[float]:
    """ms from sending the holder's release (to `hold_url`) to the waiter's parked await (on
    `wait_url`, the same server or another replica) returning granted."""
    out: list[float] = []
    async with session() as s:
        hold, wait = Api(s, hold_url), Api(s, wait_url)
        for i in range(samples):
            a = await hold.post(
                "acquire", lane=lane, machineId="A", project="a", scene="s", promptHash=f"a{i}"
            )
            if not a.get("granted"):
                raise BenchError(f"{lane}: the holder was not granted: {a.get('ticket')}")
            b = await wait.post(
                "acquire", lane=lane, machineId="B", project="b", scene="s", promptHash=f"b{i}"
            )
            tb = ticket_id(b)
            waiter = asyncio.create_task(_await_granted(wait, lane, "B", tb))
            await asyncio.sleep(park_seconds)  # let the await park
            t0 = time.perf_counter()
            await hold.post(
                "release", lane=lane, machineId="A", ticketId=ticket_id(a), outcome="completed"
            )
            await waiter
            out.append((time.perf_counter() - t0) * 1000)
            await wait.post("release", lane=lane, machineId="B", ticketId=tb, outcome="completed")
    return out


async def alarm_lateness(
    url: str, lanes: int, spread_seconds: float, create_clients: int = 8
) -> tuple[list[float], list[float]]:
    """ms from each lease's leaseExpiresAt to its waiter's parked await returning granted, and
    (from the ticket's heldAt) to the promotion as the server recorded it.

    The lanes are created first (a cycle each, by `create_clients` clients: creating a lane
    file is not what is measured). Then every lane gets a holder (leaseSeconds 15, the
    minimum, never heartbeated) and a waiter whose await is parked, the holders acquired
    evenly over `spread_seconds` (well under 15 s), so that every lane is armed before the
    first lease expires and the expiries fall at spread times."""
    async with session() as s:
        api = Api(s, url)
        names = [f"bench:alarm-{i}" for i in range(lanes)]

        async def create(lane: str) -> None:
            r = await api.post(
                "acquire", lane=lane, machineId="C", project="c", scene="s", promptHash="c"
            )
            await api.post(
                "release", lane=lane, machineId="C", ticketId=ticket_id(r), outcome="completed"
            )

        await bounded(create_clients, create, names)
        began = time.monotonic()

        async def one(i: int) -> tuple[float, float]:
            await asyncio.sleep(i * spread_seconds / lanes)
            lane = names[i]
            a = await api.post(
                "acquire",
                lane=lane,
                machineId="A",
                project="a",
                scene="s",
                promptHash="a",
                leaseSeconds=15,
            )
            b = await api.post(
                "acquire", lane=lane, machineId="B", project="b", scene="s", promptHash="b"
            )
            expires = float(a["ticket"]["leaseExpiresAt"])
            armed.append(time.monotonic() - began)
            r = await _await_granted(api, lane, "B", ticket_id(b))
            observed = (time.time() - expires) * 1000
            held_at = r["ticket"].get("heldAt")
            promoted = (float(held_at) - expires) * 1000 if held_at else float("nan")
            return observed, promoted

        armed: list[float] = []
        both = await asyncio.gather(*(one(i) for i in range(lanes)))
        if armed and max(armed) > 14:
            note(f"alarm lateness: arming took {max(armed):.1f} s, past the first expiry")
    return [o for o, _ in both], [p for _, p in both]
