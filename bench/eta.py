"""Shape 10: how far the ETA is off on a mixed workload (docs/protocol.md#eta-error).

The real coordinator (create_app, SQLite lane files, HTTP on loopback) in this process, on a
ManualClock: hours of renders in seconds of real time, every figure exact. One lane of
capacity 2; jobs of two projects arrive at random (a seeded Poisson process near full load):
short renders (60–240 s) and long ones (300–900 s); twice a holder reports a human check
(a 600 s pause) and gives its slot back. The bench records what it did — when each ticket
was acquired, the ETA the acquire answered, when the grant came — and compares the lane's
own `etaError` (its last 100 grants) with its own count of the same grants.

The row: the lane's median and p90 error; beside it the same over every grant and over the
grants that had to wait (etaFirstSeconds > 0). PASS when the lane's figure is the bench's."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.context import Context
from bench.settings import Settings

if TYPE_CHECKING:
    from tests.harness.inproc import Running

LANE = "eta:mixed"
CAPACITY = 2
SHORT = (60.0, 240.0)  # the film project's holds (s)
LONG = (300.0, 900.0)  # the ad project's
LOAD = 0.95  # arrival rate as a share of what two slots can serve
PAUSE_SECONDS = 600.0
WINDOW = 100  # the contract's last 100 grants
SEED = 20251129


def rows(s: Settings) -> list[tuple[str, str, str]]:
    return [
        (
            "10",
            f"ETA error, {s.eta_jobs} jobs: 2 projects, holds 60–900 s, 2 pauses, capacity 2",
            "lane's etaError = the bench's own count",
        )
    ]


@dataclass(slots=True)
class Job:
    n: int
    project: str
    hold: float
    pauses: bool = False  # reports a human check when granted, gives the slot back
    ticket: dict[str, Any] = field(default_factory=dict)
    enqueued: float = 0.0
    first_eta: float = 0.0
    granted: float | None = None

    @property
    def error(self) -> float:
        assert self.granted is not None
        return round(abs(self.first_eta - round(self.granted - self.enqueued, 3)), 3)


def nearest_rank(values: list[float], percent: int) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(percent * len(s) / 100)) - 1] if s else float("nan")


def _jobs(n: int) -> list[tuple[float, Job]]:
    """(arrival offset, job): a seeded mix of the two projects, Poisson arrivals."""
    rng = random.Random(SEED)
    mean_hold = (sum(SHORT) + sum(LONG)) / 4
    gap = mean_hold / CAPACITY / LOAD
    t, out = 0.0, []
    pausing = {n // 3, 2 * n // 3}
    for i in range(n):
        t += rng.expovariate(1 / gap)
        film = rng.random() < 0.5
        hold = rng.uniform(*(SHORT if film else LONG))
        job = Job(i, "studio-film" if film else "studio-ad", round(hold, 1), i in pausing)
        out.append((round(t, 1), job))
    return out


class Workload:
    """Drives the lane: one event at a time, the clock set to its moment first."""

    def __init__(self, srv: Running, n: int) -> None:
        self.srv = srv
        self.t0 = srv.clock.now()
        self.events: list[tuple[float, int, str, Job | None]] = []
        self.seq = 0
        self.jobs: list[Job] = []
        self.by_ticket: dict[str, Job] = {}
        self.grants: list[Job] = []  # in grant order
        for at, job in _jobs(n):
            self.jobs.append(job)
            self.push(self.t0 + at, "arrive", job)

    def push(self, at: float, kind: str, job: Job | None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, job))

    async def call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.srv.ok(op, {"lane": LANE, **body}, 201 if op == "receipt" else 200)

    def _owner(self, job: Job) -> dict[str, Any]:
        t = job.ticket
        return {"machineId": t["machineId"], "claimId": t["claimId"], "ticketId": t["ticketId"]}

    async def run(self) -> None:
        while self.events:
            at, _, kind, job = heapq.heappop(self.events)
            self.srv.clock.set(at)
            if kind == "arrive":
                assert job is not None
                reply = await self.call(
                    "acquire",
                    {
                        "machineId": f"rig-{job.n % 5}",
                        "claimId": f"job-{job.n}",
                        "project": job.project,
                        "scene": f"s{job.n}",
                        "promptHash": f"h{job.n}",
                        "leaseSeconds": 3600,
                    },
                )
                job.ticket = reply["ticket"]
                job.enqueued = at
                job.first_eta = float(job.ticket["etaSeconds"])
                self.by_ticket[job.ticket["ticketId"]] = job
            elif kind == "release":
                assert job is not None
                outcome = "not-submitted" if job.pauses else "completed"
                await self.call("release", {**self._owner(job), "outcome": outcome})
            await self._new_grants(at)

    async def _new_grants(self, now: float) -> None:
        """Whoever the lane granted since the last event was granted now (the event's
        moment: a pause's end is an event of its own)."""
        st = await self.call("status", {})
        for t in st["held"]:
            job = self.by_ticket[t["ticketId"]]
            if job.granted is not None:
                continue
            assert t["heldAt"] == now, (t, now)
            job.granted = now
            self.grants.append(job)
            if job.pauses:  # a human check: the lane pauses, the slot is given back
                body = {**self._owner(job), "reasonCode": "provider-human-check"}
                cd = await self.call("cooldown", {**body, "retryAfterSeconds": PAUSE_SECONDS})
                self.push(cd["pause"]["until"], "pause-ends", None)
                self.push(now + 30.0, "release", job)
            else:
                self.push(now + job.hold, "release", job)


def _summary(errors: list[float]) -> str:
    return (
        f"median {nearest_rank(errors, 50):,.0f} s, p90 {nearest_rank(errors, 90):,.0f} s "
        f"(n={len(errors)})"
    )


async def measure(tmp: Path, n: int) -> tuple[dict[str, Any] | None, Workload]:
    from coordinator.config import Config
    from tests.harness.clocks import TestManualClock
    from tests.harness.inproc import start_running

    config = Config(
        routes={"eta": CAPACITY},
        lanes={},
        waiter_timeout_seconds=86400,
        default_hold_seconds=300,
    )
    srv = await start_running(tmp / "eta-data", config=config, clock=TestManualClock())
    try:
        work = Workload(srv, n)
        await work.run()
        st = await srv.ok("status", {"lane": LANE})
        reported: dict[str, Any] | None = st["etaError"]
    finally:
        await srv.stop()
    return reported, work


async def shape10(ctx: Context) -> None:
    [(key, shape, target)] = rows(ctx.s)
    reported, work = await measure(ctx.tmp, ctx.s.eta_jobs)
    errors = [j.error for j in work.grants]
    last = errors[-WINDOW:]
    own = {
        "grants": len(last),
        "medianSeconds": nearest_rank(last, 50),
        "p90Seconds": nearest_rank(last, 90),
    }
    waited = [j.error for j in work.grants if j.first_eta > 0]
    holds = [j.hold for j in work.grants if not j.pauses]
    mean_wait = sum(round(j.granted - j.enqueued, 3) for j in work.grants if j.granted) / len(
        work.grants
    )
    if reported is None:
        result = "no etaError reported"
    else:
        result = (
            f"last {reported['grants']}: median {reported['medianSeconds']:,.0f} s, "
            f"p90 {reported['p90Seconds']:,.0f} s; all grants {_summary(errors)}; "
            f"queued ones {_summary(waited)}; mean hold {sum(holds) / len(holds):,.0f} s, "
            f"mean wait {mean_wait:,.0f} s"
        )
    ctx.report.row(key, shape, result, target, reported == own)
