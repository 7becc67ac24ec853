"""The campaign's load: client tasks cycling acquire → await → heartbeat → release on a few
lanes, every attempt in one `Ledger` (tests/harness/history.py), raw aiohttp so the ledger
holds exactly what was sent and answered.

A call retries the same body (every mutation is idempotent: acquire by identity and claim,
the rest by ticket) on a refused or dropped connection, a timeout or a 503, for up to
`Settings.op_deadline` seconds; with several URLs (PostgreSQL replicas) it moves to the next
one. `Target.urls` is read at every attempt, so a test that restarts the server on a new port
just updates it. Any other answer (a 4xx, a 5xx other than 503, a body that is not JSON) is
a *problem*: the cycle is abandoned and the test fails on it.

A heartbeat that answers `expired` (a freeze longer than the lease) is a path of the
protocol, not a problem: the client releases with `lease-lost` and expects `released: false,
reason: "expired"` (or `already-done`), as a driver does.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.harness.history import LaneView, Ledger, Report, check, read_views

#: The base load: eight clients on three lanes (`solo:*` capacity 1, `duo:*` capacity 2).
BASE_LANES = ["solo:fa"] * 3 + ["solo:fb"] * 2 + ["duo:fa"] * 3


@dataclass
class Target:
    """Where the clients send: one URL (SQLite server) or several (replicas)."""

    urls: list[str]
    token: str


@dataclass
class Settings:
    op_deadline: float = 60.0  # seconds one call may keep retrying (a restart, a freeze)
    call_timeout: float = 5.0  # one attempt, an await's own wait added
    await_seconds: int = 2
    lease_seconds: float | None = None  # None: the server's default (300 s)
    hold: tuple[float, float] = (0.01, 0.08)
    backoff_max: float = 0.4


class Problem(Exception):
    """An answer a correct server never gives this client; the cycle is abandoned."""


class Client:
    """One driver cycling on its lanes (round robin), every attempt in the ledger."""

    def __init__(
        self,
        n: int,
        lanes: list[str],
        target: Target,
        ledger: Ledger,
        session: aiohttp.ClientSession,
        settings: Settings,
        seed: int,
    ) -> None:
        self.name = f"c{n}"
        self.n = n
        self.lanes = lanes
        self.target = target
        self.ledger = ledger
        self.session = session
        self.settings = settings
        self.rng = random.Random(seed)
        self.turn = n  # which URL the next call starts on
        self.cycles = 0
        self.lease_lost = 0  # cycles whose lease expired under the client (a freeze)
        self.problems: list[str] = []
        self.statuses: Counter[int | str] = Counter()

    async def call(self, lane: str, op: str, extra: dict[str, Any], wait: float = 0) -> Any:
        body = {
            "protocolVersion": 1,
            "lane": lane,
            "machineId": f"m{self.n}",
            "claimId": f"claim-{self.n}",
            **extra,
        }
        idx, self.turn = self.turn, self.turn + 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.op_deadline
        timeout = aiohttp.ClientTimeout(total=self.settings.call_timeout + wait)
        attempt = 0
        while True:
            attempt += 1
            urls = self.target.urls
            url = urls[idx % len(urls)]
            headers = {"Authorization": f"Bearer {self.target.token}"}
            entry = self.ledger.sent(self.name, op, lane, body, target=url)
            try:
                async with self.session.post(
                    f"{url}/v1/lanes/{op}", json=body, headers=headers, timeout=timeout
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self.ledger.failed(entry, type(exc).__name__)
                self.statuses[type(exc).__name__] += 1
            else:
                self.statuses[status] += 1
                try:
                    data: Any = json.loads(raw)
                except ValueError:
                    data = raw.decode(errors="replace")
                self.ledger.replied(entry, status, data)
                if 200 <= status < 300 and isinstance(data, dict):
                    return data
                if status != 503:
                    raise Problem(f"{self.name} {op} on {lane} via {url}: {status} {data}")
            if loop.time() > deadline:
                raise Problem(
                    f"{self.name} {op} on {lane}: no answer in {self.settings.op_deadline} s"
                )
            idx += 1  # the next replica, if any
            pause = min(self.settings.backoff_max, 0.02 * 2**attempt)
            await asyncio.sleep(pause * self.rng.uniform(0.5, 1.0))

    async def cycle(self, lane: str) -> None:
        s = self.settings
        identity = {"project": f"p{self.n % 3}", "scene": f"{self.n}-{self.cycles}"}
        extra: dict[str, Any] = {**identity, "promptHash": "h"}
        if s.lease_seconds is not None:
            extra["leaseSeconds"] = s.lease_seconds
        ticket = (await self.call(lane, "acquire", extra))["ticket"]
        tid = ticket["ticketId"]
        while ticket["state"] == "queued":
            wait = {"ticketId": tid, "waitSeconds": s.await_seconds}
            ticket = (await self.call(lane, "await", wait, wait=s.await_seconds))["ticket"]
        if ticket["state"] != "held":
            raise Problem(f"{self.name}: {tid} became {ticket['state']} while waiting")
        beat = await self.call(lane, "heartbeat", {"ticketId": tid})
        outcome = "completed"
        if not beat["refreshed"]:
            if beat.get("reason") != "expired":
                raise Problem(f"{self.name}: heartbeat of held {tid}: {beat}")
            outcome = "lease-lost"
        else:
            await asyncio.sleep(self.rng.uniform(*s.hold))
        rel = await self.call(lane, "release", {"ticketId": tid, "outcome": outcome})
        if rel["released"]:
            if outcome == "lease-lost":
                raise Problem(f"{self.name}: release after an expired heartbeat: {rel}")
        elif rel["reason"] == "expired":
            self.lease_lost += 1
        elif rel["reason"] != "already-done":
            raise Problem(f"{self.name}: release of {tid}: {rel}")
        self.cycles += 1

    async def run(self, stop: asyncio.Event) -> None:
        k = 0
        while not stop.is_set():
            lane = self.lanes[k % len(self.lanes)]
            k += 1
            try:
                await self.cycle(lane)
            except Problem as exc:
                self.problems.append(str(exc))
                await asyncio.sleep(0.2)


@dataclass
class Load:
    """Clients on `lanes_per_client` until `finish()`; `verify()` runs the checker."""

    target: Target
    lanes_per_client: list[list[str]]
    settings: Settings = field(default_factory=Settings)
    seed: int = 0
    ledger: Ledger = field(default_factory=Ledger)
    views: dict[str, LaneView] = field(default_factory=dict)  # the last verify's reads

    def __post_init__(self) -> None:
        self.stop = asyncio.Event()
        self.session = aiohttp.ClientSession()
        self.clients = [
            Client(n, lanes, self.target, self.ledger, self.session, self.settings, self.seed + n)
            for n, lanes in enumerate(self.lanes_per_client)
        ]
        self.tasks = [asyncio.create_task(c.run(self.stop), name=c.name) for c in self.clients]

    @classmethod
    def base(cls, target: Target, settings: Settings | None = None, seed: int = 0) -> Load:
        return cls(target, [[lane] for lane in BASE_LANES], settings or Settings(), seed)

    @property
    def lanes(self) -> set[str]:
        return {lane for lanes in self.lanes_per_client for lane in lanes}

    @property
    def cycles(self) -> int:
        return sum(c.cycles for c in self.clients)

    @property
    def problems(self) -> list[str]:
        return [p for c in self.clients for p in c.problems]

    def statuses(self) -> Counter[int | str]:
        total: Counter[int | str] = Counter()
        for c in self.clients:
            total.update(c.statuses)
        return total

    async def finish(self, timeout: float | None = None) -> None:
        """Stop after each client's current cycle (waiting at most `timeout`)."""
        self.stop.set()
        limit = timeout if timeout is not None else 2 * self.settings.op_deadline + 10
        try:
            await asyncio.wait(self.tasks, timeout=limit)
        finally:
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.session.close()

    async def verify(self, url: str | None = None, lanes: set[str] | None = None) -> Report:
        url = url or self.target.urls[0]
        self.views = await read_views(url, self.target.token, lanes or self.lanes)
        return check(self.ledger, self.views)

    def outcomes(self) -> Counter[str]:
        """The ended tickets' outcomes on the server, over every lane the last verify read."""
        return Counter(str(e.get("outcome")) for v in self.views.values() for e in v.history)
