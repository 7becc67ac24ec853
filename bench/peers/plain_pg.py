"""The plain-PostgreSQL recipe in the peer table: what a team writes in an afternoon on the
database it already runs. One row per lane holding a count of holders (`sem`), a session per
client (asyncpg, which prepares each statement once per session), on the shared cluster
(bench/peers/pg_shared.py: fsync on, synchronous_commit on).

- acquire: BEGIN; SELECT holders, capacity … FOR UPDATE; below capacity UPDATE holders + 1
  and COMMIT, else ROLLBACK (a COMMIT would wait for the WAL flush of the row lock: 15 of
  them per hand-off on 1 lane × 16). Held or not — there is no queue.
- wait: LISTEN on the lane's channel (once per session), then try again on every NOTIFY:
  every waiter of the lane wakes (a thundering herd) and reads the row without a lock; those
  that see a free slot race for the row lock, and the winner is whoever gets there first
  (without that read, 15 losers queue on the row lock in front of the holder's next
  release, and 1 lane × 16 falls to a few dozen cycles/s). A 1 s timeout on the wait is
  the belt and braces a team adds against a missed NOTIFY (the catch-up loop; idle here, as
  LISTEN comes before the retry).
- release: BEGIN; UPDATE holders − 1; SELECT pg_notify(channel, ''); COMMIT — a NOTIFY on
  every release, as the recipe cannot know whether anyone waits (PostgreSQL serializes the
  commits that NOTIFY on one global lock)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import asyncpg

from bench.peers.base import CAPACITY, Client, Hold, System
from bench.peers.pg_shared import SharedPostgres

CATCH_UP_SECONDS = 1.0
LOCK = "SELECT holders, capacity FROM sem WHERE lane = $1 FOR UPDATE"
PEEK = "SELECT holders < capacity FROM sem WHERE lane = $1"
CREATE = "INSERT INTO sem (lane, capacity) VALUES ($1, $2) ON CONFLICT DO NOTHING"
SCHEMA = """
CREATE TABLE IF NOT EXISTS sem (
  lane text PRIMARY KEY,
  holders integer NOT NULL DEFAULT 0 CHECK (holders >= 0),
  capacity integer NOT NULL
)
"""

NOTES = (
    "no queue: on each NOTIFY every waiter of the lane races for the row lock, first come "
    "first served (a herd; a slow client can starve); no lease, so a holder that dies keeps "
    "its slot until someone fixes the count by hand; no fences, no request identity, no "
    "audit, no pause, no ETA; wake-ups by LISTEN/NOTIFY with a 1 s catch-up timeout as a "
    "belt (idle here); every release NOTIFYs, whether or not anyone waits"
)


def channel(lane: str) -> str:
    return f"sem:{lane}"


class PlainPgClient(Client):
    def __init__(self, conn: Any, capacity: int = CAPACITY) -> None:
        self.conn = conn
        self.capacity = capacity
        self._woken: dict[str, asyncio.Event] = {}

    async def _try(self, lane: str) -> bool:
        """One transaction: lock the lane's row; take a slot and COMMIT, or ROLLBACK (nothing
        changed, so nothing to wait for on disk) when it is full."""
        tx = self.conn.transaction()
        await tx.start()
        try:
            row = await self.conn.fetchrow(LOCK, lane)
            if row is None:  # the lane's first use
                await self.conn.execute(CREATE, lane, self.capacity)
                row = await self.conn.fetchrow(LOCK, lane)
            if row["holders"] >= row["capacity"]:
                await tx.rollback()
                return False
            await self.conn.execute("UPDATE sem SET holders = holders + 1 WHERE lane = $1", lane)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        return True

    async def acquire(self, lane: str, i: int) -> Hold:
        return Hold(lane, lane, await self._try(lane))

    async def _listen(self, lane: str) -> asyncio.Event:
        woken = self._woken.get(lane)
        if woken is None:
            woken = self._woken[lane] = asyncio.Event()

            def on_notify(*_: object) -> None:
                woken.set()

            await self.conn.add_listener(channel(lane), on_notify)
        return woken

    async def wait(self, hold: Hold) -> None:
        woken = await self._listen(hold.lane)
        while not hold.held:
            woken.clear()
            # test and test-and-set: the row lock only when an unlocked read sees a free slot
            free = await self.conn.fetchval(PEEK, hold.lane)
            hold.held = bool(free) and await self._try(hold.lane)
            if not hold.held:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), CATCH_UP_SECONDS)

    async def release(self, hold: Hold) -> None:
        if not hold.held:
            return  # no queue: a waiter that gives up leaves nothing behind
        async with self.conn.transaction():
            await self.conn.execute(
                "UPDATE sem SET holders = holders - 1 WHERE lane = $1", hold.lane
            )
            await self.conn.execute("SELECT pg_notify($1, '')", channel(hold.lane))

    async def close(self) -> None:
        await self.conn.close()


class PlainPostgres(System):
    key = "plain-pg"
    title = "PostgreSQL alone (a holders-count row per lane, LISTEN/NOTIFY)"
    notes = NOTES

    def __init__(self, pg: SharedPostgres) -> None:
        self.pg = pg
        self.dsn = ""

    async def start(self, tmp: Path) -> None:
        self.dsn = await self.pg.plain_dsn()
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(SCHEMA)
        finally:
            await conn.close()

    async def client(self, k: int) -> Client:
        return PlainPgClient(await asyncpg.connect(self.dsn))

    def pids(self) -> dict[str, list[int]]:
        return {"server": self.pg.pids()}

    async def stop(self) -> None:
        return None  # the shared cluster stops with the run
