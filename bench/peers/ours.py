"""Ours in the peer table: `lane-coordinator serve` on SQLite lane files, and on PostgreSQL
with one replica and with two (clients alternate replicas; the hand-off holds on replica 1
and waits on replica 2); and the bare FIFO baseline (bench/peers/fifo_server.py), which
speaks the same three calls. One HTTP client adapter drives them all: acquire (a new identity
each time), await until held (parked long polls), release with outcome completed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp

from bench.common import CLIENT_TIMEOUT, Api, BenchError, ticket_id
from bench.peers.base import Client, Hold, System
from bench.peers.pg_shared import SharedPostgres
from bench.servers import ServerProcess, start_coordinator, write_config

AWAIT_SECONDS = 60  # one parked await at most; the shapes' waits are far shorter

OURS_NOTES = (
    "the whole contract: a queue with project round-robin (FIFO within a project), fences, "
    "request identity (a retried acquire converges on one ticket), owner rule, render log, "
    "receipts and incidents (audit), ETA, pauses; each lane's alarm fires at its next deadline "
    "(lease expiry, abandoned waiters, a pause's end), no catch-up loop: a parked await is "
    "answered by the release's own commit"
)
PG_NOTES = (
    OURS_NOTES + "; across replicas a commit NOTIFYs only when a ticket queued before it was "
    "granted or ended, or a pause changed; the other replica's LISTEN session re-reads the "
    "lane at once; a once-a-second poll of due deadlines is only the backstop for a lane "
    "whose actor is on another replica"
)


class LaneApiClient(Client):
    def __init__(self, api: Api, machine: str) -> None:
        self.api = api
        self.machine = machine

    async def acquire(self, lane: str, i: int) -> Hold:
        r = await self.api.post(
            "acquire",
            lane=lane,
            machineId=self.machine,
            project="p",
            scene="s",
            promptHash=f"{self.machine}-{i}",
        )
        return Hold(lane, ticket_id(r), bool(r.get("granted")))

    async def wait(self, hold: Hold) -> None:
        while not hold.held:
            r = await self.api.post(
                "await",
                lane=hold.lane,
                machineId=self.machine,
                ticketId=hold.token,
                waitSeconds=AWAIT_SECONDS,
            )
            state = (r.get("ticket") or {}).get("state")
            if state != "queued" and not r.get("granted"):
                raise BenchError(f"{hold.lane}: {hold.token} ended {state} while waiting")
            hold.held = bool(r.get("granted"))

    async def release(self, hold: Hold) -> None:
        await self.api.post(
            "release",
            lane=hold.lane,
            machineId=self.machine,
            ticketId=hold.token,
            outcome="completed",
        )


class HttpLanes(System):
    """A system of one or more HTTP servers speaking acquire/await/release."""

    def __init__(self) -> None:
        self.servers: list[ServerProcess] = []
        self._session: aiohttp.ClientSession | None = None

    async def _open_session(self) -> None:
        """One session, one connection per concurrent request (as bench/common.py's)."""
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=CLIENT_TIMEOUT)

    async def client(self, k: int) -> Client:
        assert self._session is not None, "not started"
        return LaneApiClient(Api(self._session, self.servers[k % len(self.servers)].url), f"m{k}")

    def pids(self) -> dict[str, list[int]]:
        return {"server": [s.pid for s in self.servers]}

    async def _close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stop(self) -> None:
        await self._close_session()
        for srv in self.servers:
            await asyncio.to_thread(srv.stop)
        self.servers = []


class Fifo(HttpLanes):
    key = "fifo"
    title = "bare aiohttp, in-memory FIFO semaphore, no storage"
    notes = (
        "the floor: FIFO only; nothing survives a restart, no lease or expiry (a dead holder "
        "keeps its slot for ever), no identity, fences or audit; wake-ups are futures in "
        "the process"
    )

    async def start(self, tmp: Path) -> None:
        cmd = [sys.executable, "-m", "bench.peers.fifo_server", "0", "1"]
        srv = ServerProcess("peer-fifo", cmd, tmp / "peer-fifo.log", None)
        self.servers = [srv]
        await asyncio.to_thread(srv.wait_listening)
        await self._open_session()


class OursSqlite(HttpLanes):
    key = "sqlite"
    title = "ours, SQLite (synchronous=FULL)"
    notes = OURS_NOTES

    async def start(self, tmp: Path) -> None:
        config = write_config(tmp / "peer-sqlite.toml", max_lanes=5000, max_connections=4000)
        srv = await asyncio.to_thread(start_coordinator, tmp, "peer-sqlite", config)
        self.servers = [srv]
        await self._open_session()


class OursPostgres(HttpLanes):
    """n replicas on the shared cluster; the cluster's CPU is shown beside ours."""

    notes = PG_NOTES

    def __init__(self, pg: SharedPostgres, replicas: int) -> None:
        super().__init__()
        self.pg = pg
        self.n = replicas
        self.key = f"pg{replicas}"
        self.title = f"ours, PostgreSQL ({'one replica' if replicas == 1 else '2 replicas'})"
        self.park_seconds = 0.05 if replicas > 1 else 0.02  # the await parks on replica 2

    async def start(self, tmp: Path) -> None:
        self.servers = await self.pg.ours(tmp, self.n)
        await self._open_session()

    def pids(self) -> dict[str, list[int]]:
        return {"server": [s.pid for s in self.servers], "postgres": self.pg.pids()}

    async def stop(self) -> None:
        await self._close_session()
        self.servers = []  # the replicas are the shared cluster's: it stops them
