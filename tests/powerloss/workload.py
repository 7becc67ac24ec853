"""The load the power-loss tests run: client tasks cycling acquire → await → heartbeat →
release, every attempt in one `Ledger` (tests/harness/history.py), raw aiohttp so the ledger
holds exactly what was sent and answered.

A call retries the same body (every mutation is idempotent: acquire by identity and claim,
the rest by ticket) on a refused or dropped connection, a timeout or a 503, until
`op_deadline`; `Target.url` is read at every attempt, so the test restarts the server on a
new port and just sets it. Any other answer (a 4xx, another 5xx, a body that is not JSON) is
a *problem*: the cycle is abandoned and the test fails on it. `Target.lanes` is read at each
cycle, so a test can move the clients to new lanes (a new lane is a new file).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.harness.history import Ledger


@dataclass
class Target:
    url: str
    token: str
    lanes: list[str]  # client n works on lanes[n % len(lanes)]


class Problem(Exception):
    """An answer a correct server never gives this client."""


@dataclass
class Client:
    n: int
    target: Target
    ledger: Ledger
    session: aiohttp.ClientSession
    rng: random.Random
    op_deadline: float = 30.0
    cycles: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"c{self.n}"

    async def call(self, lane: str, op: str, extra: dict[str, Any], wait: float = 0) -> Any:
        body = {"protocolVersion": 1, "lane": lane, "machineId": f"m{self.n}", **extra}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.op_deadline
        timeout = aiohttp.ClientTimeout(total=5.0 + wait)
        attempt = 0
        while True:
            attempt += 1
            url = self.target.url
            headers = {"Authorization": f"Bearer {self.target.token}"}
            entry = self.ledger.sent(self.name, op, lane, body, target=url)
            try:
                async with self.session.post(
                    f"{url}/v1/lanes/{op}", json=body, headers=headers, timeout=timeout
                ) as resp:
                    raw, status = await resp.read(), resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self.ledger.failed(entry, type(exc).__name__)
            else:
                try:
                    data: Any = json.loads(raw)
                except ValueError:
                    data = raw.decode(errors="replace")
                self.ledger.replied(entry, status, data)
                if 200 <= status < 300 and isinstance(data, dict):
                    return data
                if status != 503:
                    raise Problem(f"{self.name} {op} on {lane}: {status} {data}")
            if loop.time() > deadline:
                raise Problem(f"{self.name} {op} on {lane}: no answer in {self.op_deadline} s")
            await asyncio.sleep(min(0.2, 0.01 * 2**attempt) * self.rng.uniform(0.5, 1.0))

    async def cycle(self, lane: str) -> None:
        identity = {"project": f"p{self.n % 3}", "scene": f"{self.n}-{self.cycles}"}
        acquired = await self.call(
            lane, "acquire", {**identity, "claimId": f"claim-{self.n}", "promptHash": "h"}
        )
        ticket = acquired["ticket"]
        tid = ticket["ticketId"]
        while ticket["state"] == "queued":
            wait = {"ticketId": tid, "waitSeconds": 1}
            ticket = (await self.call(lane, "await", wait, wait=1))["ticket"]
        if ticket["state"] != "held":
            raise Problem(f"{self.name}: {tid} became {ticket['state']} while waiting")
        beat = await self.call(lane, "heartbeat", {"ticketId": tid})
        if not beat.get("refreshed"):
            raise Problem(f"{self.name}: heartbeat of held {tid}: {beat}")
        await asyncio.sleep(self.rng.uniform(0.0, 0.03))
        rel = await self.call(lane, "release", {"ticketId": tid, "outcome": "completed"})
        if not rel.get("released") and rel.get("reason") != "already-done":
            raise Problem(f"{self.name}: release of {tid}: {rel}")
        self.cycles += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            lanes = self.target.lanes
            try:
                await self.cycle(lanes[self.n % len(lanes)])
            except Problem as exc:
                self.problems.append(str(exc))
                await asyncio.sleep(0.2)


class Load:
    """`clients` tasks on `target` until `finish()`."""

    def __init__(self, target: Target, clients: int, ledger: Ledger, seed: int = 0) -> None:
        self.stop = asyncio.Event()
        self.session = aiohttp.ClientSession()
        self.clients = [
            Client(n, target, ledger, self.session, random.Random(seed * 1000 + n))
            for n in range(clients)
        ]
        self.tasks = [asyncio.create_task(c.run(self.stop)) for c in self.clients]

    @property
    def cycles(self) -> int:
        return sum(c.cycles for c in self.clients)

    @property
    def problems(self) -> list[str]:
        return [p for c in self.clients for p in c.problems]

    async def finish(self, timeout: float = 60.0) -> None:
        """Stop after each client's current cycle."""
        self.stop.set()
        try:
            await asyncio.wait_for(asyncio.gather(*self.tasks), timeout)
        finally:
            await self.abort()

    async def abort(self) -> None:
        """Stop now (cycles cut short)."""
        self.stop.set()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()
