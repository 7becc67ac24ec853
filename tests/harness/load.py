"""The one load generator of the fault tests: client tasks cycling acquire → await →
heartbeat → release against a coordinator, every attempt in one `Ledger`
(tests/harness/history.py), raw aiohttp so the ledger holds exactly what was sent and
answered. Its users: the fault campaign (tests/faults/load.py), power loss
(tests/powerloss/workload.py) and replica failover (tests/acceptance/test_failover.py).

A call retries the same body (every mutation is idempotent: acquire by identity and claim,
the rest by ticket) on a refused or dropped connection, a timeout or a 503, for up to
`Settings.op_deadline` seconds; with several URLs (PostgreSQL replicas) each call starts on
the URL after the one the client's previous call started on, and each retry moves to the
next. `Target.urls` is read at every attempt, so a test that restarts the server on a new
port just sets it. Any other answer (a 4xx, a 5xx other than 503, a body that is not a JSON
object, a reply without the fields the protocol promises) is a *problem*: the cycle is
abandoned, the problem kept in `Client.problems`, and the test fails on it.

A lease that expires under the client (a heartbeat answering `refreshed: false, reason:
expired`, a release answering `reason: expired`, a waiter whose grant expired before its
await saw it) is a problem too, unless the load is made
with `lease_loss=True` (the fault campaign freezes the server longer than a lease): then it
is a path of the protocol, handled as a driver does: the client releases with `lease-lost`
and expects `released: false, reason: "expired"` (or `already-done`), counted in
`Client.lease_lost`.

Each client works on its own list of lanes (round robin, one lane a cycle), read at each
cycle: `Load.move(...)` puts the clients on new lanes (a new lane is a new file).

Provider jobs (`Settings.jobs`, the fraction of cycles that submit one; nothing is called):
once held, the client records `provider-submitted` on its ticket, then the job ends one of
three ways, each ending with the `provider-terminal` receipt a driver writes when its poll
sees the job end: while the lease is held (terminal, then release `completed`: no hold);
after a release `lease-lost` (`lease_lost_jobs`: the lane keeps the slot for the job — an
in-flight hold, docs/protocol.md#in-flight — until the terminal receipt a moment later); or
after the lease ran out with nobody heartbeating it (`abandon_jobs`, with a short
`lease_seconds`, at most `max_abandons` per client, always client 0's first job: the expiry
leaves a hold; the client writes the terminal receipt a second after the expiry, or at once
when the load stops, then releases late). A terminal receipt that could not be written is
retried before the client's next cycle and once more as it stops. The checker's rule (f)
judges the holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
import rfc8785

from tests.harness.history import LaneView, Ledger, Report, check, read_views
from tests.harness.in_flight import SUBMITTED, TERMINAL


@dataclass
class Target:
    """Where the clients send: one URL (a SQLite server) or several (replicas)."""

    urls: list[str]
    token: str
    # the name of the credential the token is, recorded with every attempt (the history
    # checker's rule (f)); "token-1": a token file of one plain token names it so
    credential: str | None = "token-1"


@dataclass(frozen=True)
class Settings:
    op_deadline: float = 60.0  # seconds one call may keep retrying (a restart, a freeze)
    call_timeout: float = 5.0  # one attempt, an await's own wait added
    backoff: float = 0.02  # the pause after attempt k: min(backoff_max, backoff * 2**k),
    backoff_max: float = 0.4  # times a random 0.5 to 1
    await_seconds: int = 2
    lease_seconds: float | None = None  # None: the server's default (300 s)
    hold: tuple[float, float] = (0.01, 0.08)  # seconds a client holds its lease (uniform)
    jobs: float = 0.0  # the fraction of cycles that submit a provider job (receipts)
    lease_lost_jobs: float = 0.35  # of those: released lease-lost, then provider-terminal
    abandon_jobs: float = 0.0  # of those: the lease left to run out (needs lease_seconds)
    max_abandons: int = 1  # per client (each blocks its lane for a lease)


class Problem(Exception):
    """An answer a correct server never gives this client; the cycle is abandoned."""


def decode(raw: bytes) -> Any:
    """A reply's body: its JSON, else its text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def answer(status: int, data: Any, what: str) -> dict[str, Any] | None:
    """What a reply (`decode`d) means to a client: the answer when it is a 2xx with a JSON
    object; None for a 503 (the same body again, after a pause); anything else raises a
    `Problem` about `what` (the call)."""
    if 200 <= status < 300 and isinstance(data, dict):
        return data
    if status != 503:
        raise Problem(f"{what}: {status} {data}")
    return None


def spread(lanes: list[str], clients: int) -> list[list[str]]:
    """`clients` clients on `lanes`, client n on lanes[n % len(lanes)]."""
    return [[lanes[n % len(lanes)]] for n in range(clients)]


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
        *,
        lease_loss: bool,
        jobs: bool = True,
    ) -> None:
        self.name = f"c{n}"
        self.submits = jobs  # this client's cycles may submit provider jobs (`Settings.jobs`)
        self.n = n
        self.lanes = lanes  # read at each cycle
        self.target = target
        self.ledger = ledger
        self.session = session
        self.settings = settings
        self.lease_loss = lease_loss
        self.rng = random.Random(seed)
        self.turn = n  # which URL the next call starts on
        self.cycles = 0
        self.lease_lost = 0  # cycles whose lease expired under the client (a freeze)
        self.problems: list[str] = []
        self.jobs = 0  # provider-submitted receipts acknowledged
        self.holds = 0  # of those jobs: released lease-lost, or lease left to expire
        self.abandons = 0  # jobs whose lease was left to run out (tried)
        self.expired_jobs = 0  # of those, the lease did run out (the late release says so)
        self.owed: list[tuple[str, str, str]] = []  # (lane, ticket, job): terminal not written
        self.stop = asyncio.Event()

    async def call(
        self, lane: str, op: str, extra: dict[str, Any], wait: float = 0
    ) -> dict[str, Any]:
        body = {
            "protocolVersion": 1,
            "lane": lane,
            "machineId": f"m{self.n}",
            "claimId": f"claim-{self.n}",
            **extra,
        }
        s = self.settings
        idx, self.turn = self.turn, self.turn + 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.op_deadline
        timeout = aiohttp.ClientTimeout(total=s.call_timeout + wait)
        attempt = 0
        while True:
            attempt += 1
            urls = self.target.urls
            url = urls[idx % len(urls)]
            headers = {"Authorization": f"Bearer {self.target.token}"}
            entry = self.ledger.sent(
                self.name, op, lane, body, target=url, credential=self.target.credential
            )
            try:
                async with self.session.post(
                    f"{url}/v1/lanes/{op}", json=body, headers=headers, timeout=timeout
                ) as resp:
                    raw = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self.ledger.failed(entry, type(exc).__name__)
            else:
                data = decode(raw)
                self.ledger.replied(entry, status, data)
                reply = answer(status, data, f"{self.name} {op} on {lane} via {url}")
                if reply is not None:
                    return reply
            if loop.time() > deadline:
                raise Problem(f"{self.name} {op} on {lane}: no answer in {s.op_deadline} s")
            idx += 1  # the next replica, if any
            pause = min(s.backoff_max, s.backoff * 2**attempt)
            await asyncio.sleep(pause * self.rng.uniform(0.5, 1.0))

    async def receipt(self, lane: str, tid: str, phase: str, payload: dict[str, Any]) -> None:
        """Record a receipt (ids only); a replay of the same one answers 200."""
        h = "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
        body = {"ticketId": tid, "receiptId": f"{tid}:{phase}:{h[7:23]}", "phase": phase,
                "payload": payload, "contentHash": h}  # fmt: skip
        reply = await self.call(lane, "receipt", body)
        if reply.get("stored") is not True and reply.get("replay") is not True:
            raise Problem(f"{self.name}: receipt {phase} of {tid}: {reply}")

    async def settle(self) -> None:
        """Write the provider-terminal receipts still owed (a job whose end was seen)."""
        while self.owed:
            lane, tid, job = self.owed[0]
            await self.receipt(lane, tid, TERMINAL, {"providerJobId": job, "status": "completed"})
            self.owed.pop(0)

    async def _release(
        self, lane: str, tid: str, outcome: str, *, late: bool = False
    ) -> dict[str, Any]:
        """Release; `released: false` is fine when the ticket is over, or when the lease had
        run out and that may happen (`late`: left to expire; a load with `lease_loss`)."""
        rel = await self.call(lane, "release", {"ticketId": tid, "outcome": outcome})
        if rel.get("released") is True or rel.get("reason") == "already-done":
            return rel
        if rel.get("reason") == "expired" and (late or self.lease_loss):
            return rel
        raise Problem(f"{self.name}: release {outcome} of {tid}: {rel}")

    async def job(self, lane: str, tid: str) -> None:
        """A held ticket's provider job (see the module docstring)."""
        s = self.settings
        job = f"job-{self.n}-{self.cycles}"
        await self.receipt(lane, tid, SUBMITTED, {"providerJobId": job})
        self.jobs += 1
        way = self.rng.random()
        first = self.n == 0 and self.jobs == 1 and s.abandon_jobs > 0  # c0's first: always
        if (
            s.lease_seconds is not None
            and self.abandons < s.max_abandons
            and (way < s.abandon_jobs or first)
        ):
            self.abandons += 1
            # nobody heartbeats: the lease runs out, the lane keeps the slot for the job
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), s.lease_seconds + 1.0)
            self.owed.append((lane, tid, job))
            await self.settle()
            rel = await self._release(lane, tid, "completed", late=True)  # as a resumed driver
            if rel.get("reason") == "expired":
                self.expired_jobs += 1
                self.holds += 1
            return
        if way < s.abandon_jobs + s.lease_lost_jobs:
            rel = await self._release(lane, tid, "lease-lost")
            if rel.get("released") is True:
                self.holds += 1
            await asyncio.sleep(self.rng.uniform(*s.hold))  # the job, polled after the loss
            self.owed.append((lane, tid, job))
            await self.settle()
            return
        await asyncio.sleep(self.rng.uniform(*s.hold))
        self.owed.append((lane, tid, job))
        await self.settle()
        rel = await self._release(lane, tid, "completed")
        if rel.get("released") is not True and rel.get("reason") == "expired":
            self.lease_lost += 1

    def _ticket(self, reply: dict[str, Any]) -> dict[str, Any]:
        ticket = reply.get("ticket")
        if not isinstance(ticket, dict) or not isinstance(ticket.get("ticketId"), str):
            raise Problem(f"{self.name}: a reply without a ticket: {reply}")
        return ticket

    async def cycle(self, lane: str) -> None:
        s = self.settings
        identity = {"project": f"p{self.n % 3}", "scene": f"{self.n}-{self.cycles}"}
        extra: dict[str, Any] = {**identity, "promptHash": "h"}
        if s.lease_seconds is not None:
            extra["leaseSeconds"] = s.lease_seconds
        ticket = self._ticket(await self.call(lane, "acquire", extra))
        tid = ticket["ticketId"]
        while ticket.get("state") == "queued":
            wait = {"ticketId": tid, "waitSeconds": s.await_seconds}
            ticket = self._ticket(await self.call(lane, "await", wait, wait=s.await_seconds))
        if ticket.get("state") == "expired" and self.lease_loss:
            # granted just before the server froze, reaped on resume before this await saw
            # the grant: the lease ran out under its holder, as a frozen heartbeat's does
            self.lease_lost += 1
            self.cycles += 1
            return
        if ticket.get("state") != "held":
            raise Problem(f"{self.name}: {tid} became {ticket.get('state')} while waiting")
        beat = await self.call(lane, "heartbeat", {"ticketId": tid})
        outcome = "completed"
        if beat.get("refreshed") is not True:
            if not (self.lease_loss and beat.get("reason") == "expired"):
                raise Problem(f"{self.name}: heartbeat of held {tid}: {beat}")
            outcome = "lease-lost"
        elif self.submits and self.rng.random() < s.jobs:
            await self.job(lane, tid)
            self.cycles += 1
            return
        else:
            await asyncio.sleep(self.rng.uniform(*s.hold))
        rel = await self.call(lane, "release", {"ticketId": tid, "outcome": outcome})
        if rel.get("released") is True:
            if outcome == "lease-lost":
                raise Problem(f"{self.name}: release after an expired heartbeat: {rel}")
        elif self.lease_loss and rel.get("reason") == "expired":
            self.lease_lost += 1
        elif rel.get("reason") != "already-done":
            raise Problem(f"{self.name}: release of {tid}: {rel}")
        self.cycles += 1

    async def run(self, stop: asyncio.Event) -> None:
        self.stop = stop
        k = 0
        while not stop.is_set():
            lane = self.lanes[k % len(self.lanes)]
            k += 1
            try:
                await self.settle()
                await self.cycle(lane)
            except Problem as exc:
                self.problems.append(str(exc))
                await asyncio.sleep(0.2)
        try:
            await self.settle()
        except Problem as exc:
            self.problems.append(str(exc))


class Load:
    """One client per entry of `lanes_per_client` (its lanes), started at once (in a running
    event loop), until `finish()` or `abort()`; `verify()` runs the checker. `ledger`: a
    ledger of the test's own (a new one by default); client n's random choices come from
    seed + n."""

    def __init__(
        self,
        target: Target,
        lanes_per_client: list[list[str]],
        settings: Settings | None = None,
        *,
        seed: int = 0,
        ledger: Ledger | None = None,
        lease_loss: bool = False,
        hold_seconds: float | None = None,
        job_clients: int | None = None,
    ) -> None:
        """`hold_seconds`: the lanes' in_flight_hold_seconds, for the checker (rule (f));
        `job_clients`: only the first that many clients submit provider jobs (all: None)."""
        self.target = target
        self.hold_seconds = hold_seconds
        self.settings = settings or Settings()
        self.ledger = ledger if ledger is not None else Ledger()
        self.views: dict[str, LaneView] = {}  # the last verify's reads
        self.stop = asyncio.Event()
        self.session = aiohttp.ClientSession()
        self.clients = [
            Client(
                n,
                lanes,
                target,
                self.ledger,
                self.session,
                self.settings,
                seed + n,
                lease_loss=lease_loss,
                jobs=job_clients is None or n < job_clients,
            )
            for n, lanes in enumerate(lanes_per_client)
        ]
        self.tasks = [asyncio.create_task(c.run(self.stop), name=c.name) for c in self.clients]

    def move(self, lanes_per_client: list[list[str]]) -> None:
        """Each client's next cycle goes to its new lanes."""
        assert len(lanes_per_client) == len(self.clients), "one entry a client"
        for c, lanes in zip(self.clients, lanes_per_client, strict=True):
            c.lanes = lanes

    @property
    def lanes(self) -> set[str]:
        """The lanes the clients are on now."""
        return {lane for c in self.clients for lane in c.lanes}

    @property
    def cycles(self) -> int:
        return sum(c.cycles for c in self.clients)

    @property
    def problems(self) -> list[str]:
        return [p for c in self.clients for p in c.problems]

    async def finish(self, timeout: float | None = None) -> list[str]:
        """Stop after each client's current cycle, waiting at most `timeout` (by default
        2 × op_deadline + 10 s), then cancel any client still running; returns the names of
        those cut short. An exception other than a `Problem` that ended a client is raised."""
        self.stop.set()
        limit = timeout if timeout is not None else 2 * self.settings.op_deadline + 10
        try:
            _, pending = await asyncio.wait(self.tasks, timeout=limit)
        finally:
            await self.abort()
        for t in self.tasks:
            if t not in pending and not t.cancelled() and (exc := t.exception()) is not None:
                raise exc
        return sorted(t.get_name() for t in pending)

    async def abort(self) -> None:
        """Stop now (cycles cut short)."""
        self.stop.set()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()

    async def verify(self, url: str | None = None, lanes: set[str] | None = None) -> Report:
        """The checker over `lanes` (the clients' by default) as read through `url` (the
        first target by default)."""
        url = url or self.target.urls[0]
        # receipts are read for the tickets that may have left a hold (read_views): rule (f)
        # checks the acknowledged receipts of those
        self.views = await read_views(
            url, self.target.token, lanes or self.lanes, hold_seconds=self.hold_seconds
        )
        return check(self.ledger, self.views)

    @property
    def jobs(self) -> int:
        """Provider jobs submitted (acknowledged provider-submitted receipts)."""
        return sum(c.jobs for c in self.clients)

    @property
    def abandoned(self) -> int:
        """Of those, jobs whose lease was left to run out after the submit (and did)."""
        return sum(c.expired_jobs for c in self.clients)

    @property
    def holds(self) -> int:
        """Of those, jobs whose ticket ended while they ran (released lease-lost, or left to
        expire): each leaves an in-flight hold."""
        return sum(c.holds for c in self.clients)

    def outcomes(self) -> Counter[str]:
        """The ended tickets' outcomes on the server, over every lane the last verify read."""
        return Counter(str(e.get("outcome")) for v in self.views.values() for e in v.history)
