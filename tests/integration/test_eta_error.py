"""The ETA error against the real server (docs/protocol.md#eta-error): a lane driven with
known hold durations — holders that keep the slot for a set time, a pause, an in-flight job —
on a ManualClock; the render log's `etaFirstSeconds` / `waitSeconds` are what the test did,
and status and the overview report `etaError` as computed from them; it survives a restart
and a kill -9 of the real `lane-coordinator serve`.
`run_scenario` is shared with tests/replicas/test_eta_error_replicas.py (two replicas)."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import Running, StartCoordinator, StartServer, TestManualClock, make_config
from tests.integration.kit import SOLO, acquire_body, receipt_body, ticket_body

DEFAULT_HOLD = 300.0  # the config's default_hold_seconds: the ETA's basis before any hold
IN_FLIGHT_HOLD = 1800.0  # the default in_flight_hold_seconds


def by_rank(errors: Sequence[float]) -> dict[str, Any] | None:
    """etaError as the contract defines it, the slow way: nearest rank over the sorted
    errors (⌈n/2⌉-th and ⌈0.9 n⌉-th)."""
    if not errors:
        return None
    s = sorted(errors)
    n = len(s)
    median, p90 = s[math.ceil(n / 2) - 1], s[math.ceil(0.9 * n) - 1]
    return {"grants": n, "medianSeconds": median, "p90Seconds": p90}


@dataclass
class Known:
    """What the test itself did: when it acquired each ticket, the ETA the acquire answered,
    and the moment it made the call (or moved the clock to the moment) that granted it."""

    lane: str
    enqueued: dict[str, float] = field(default_factory=dict)
    first_eta: dict[str, float] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # grant order

    def grant(self, tid: str, at: float) -> None:
        self.granted[tid] = at
        self.order.append(tid)

    def errors(self) -> list[float]:
        return [
            round(abs(self.first_eta[t] - (self.granted[t] - self.enqueued[t])), 3)
            for t in self.order
        ]


async def run_scenario(srvs: Sequence[Running], clock: TestManualClock, lane: str) -> Known:
    """Six grants on a one-slot lane, the calls taking turns over `srvs`: granted at once;
    two waiters behind a 120 s and a 200 s hold; one behind a pause; one behind an in-flight
    job that ends on its provider-terminal receipt; one behind a 100 s hold."""
    known = Known(lane)
    n = 0

    def srv() -> Running:
        nonlocal n
        n += 1
        return srvs[n % len(srvs)]

    t0 = clock.now()

    async def at(offset: float) -> float:
        clock.set(t0 + offset)
        return clock.now()

    async def acquire(machine: str, project: str) -> dict[str, Any]:
        body = acquire_body(lane, machine, f"c{machine}", project, f"s-{machine}", machine)
        reply: dict[str, Any] = await srv().ok("acquire", {**body, "leaseSeconds": 3600})
        t: dict[str, Any] = reply["ticket"]
        known.enqueued[t["ticketId"]] = clock.now()
        known.first_eta[t["ticketId"]] = t["etaSeconds"]
        if reply["granted"]:
            known.grant(t["ticketId"], clock.now())
        return t

    async def release(t: dict[str, Any], outcome: str = "completed") -> list[str]:
        body = ticket_body(lane, t["ticketId"], t["machineId"], t["claimId"], outcome=outcome)
        promoted: list[str] = (await srv().ok("release", body))["promoted"]
        for tid in promoted:
            known.grant(tid, clock.now())
        return promoted

    async def receipt(t: dict[str, Any], phase: str) -> None:
        body = receipt_body(lane, t["ticketId"], phase, {"p": phase}, t["machineId"], None)
        await srv().ok("receipt", body, 201)

    await at(0)
    a = await acquire("mA", "p1")
    assert a["state"] == "held" and known.first_eta[a["ticketId"]] == 0.0
    await at(10)
    b = await acquire("mB", "p2")
    assert b["etaSeconds"] == DEFAULT_HOLD - 10  # the held slot frees after the default hold
    await at(20)
    c = await acquire("mC", "p3")
    assert c["etaSeconds"] == DEFAULT_HOLD - 20 + DEFAULT_HOLD  # and one more wave
    await at(120)  # A held 120 s
    assert await release(a) == [b["ticketId"]]
    await at(320)  # B held 200 s
    assert await release(b) == [c["ticketId"]]
    await at(330)  # C reports a human check: the lane pauses 60 s
    cooldown = ticket_body(lane, c["ticketId"], "mC", "cmC")
    await srv().ok(
        "cooldown", {**cooldown, "reasonCode": "provider-human-check", "retryAfterSeconds": 60}
    )
    await at(340)
    d = await acquire("mD", "p1")
    # the pause left (50 s) + C's slot: the lane's mean hold (120, 200: 160 s; C's project has
    # none yet) less the 20 s C held it
    assert d["etaSeconds"] == 50 + 160 - 20
    await at(350)
    assert await release(c) == []  # paused: nobody is promoted
    await at(390)  # the pause ends: the alarm (or the next call) grants D at 390
    st = await srv().ok("status", {"lane": lane})
    assert [t["ticketId"] for t in st["held"]] == [d["ticketId"]]
    assert st["held"][0]["heldAt"] == clock.now()
    known.grant(d["ticketId"], clock.now())
    await at(395)
    await receipt(d, "provider-submitted")
    await at(400)  # D's driver loses its lease: the job may still run until 395 + 1800
    assert await release(d, "lease-lost") == []
    await at(410)
    e = await acquire("mE", "p2")
    assert e["etaSeconds"] == 395 + IN_FLIGHT_HOLD - 410  # the slot frees at holdUntil
    await at(500)  # D's resumed driver saw the job end: E is granted at once
    await receipt(d, "provider-terminal")
    st = await srv().ok("status", {"lane": lane})
    assert [t["ticketId"] for t in st["held"]] == [e["ticketId"]]
    known.grant(e["ticketId"], clock.now())
    await at(510)
    f = await acquire("mF", "p3")
    assert f["etaSeconds"] == 200 - 10  # E's slot: its project's hold (B's 200 s) less 10 s
    await at(600)  # E held 100 s
    assert await release(e) == [f["ticketId"]]
    return known


async def assert_reported(srv: Running, known: Known) -> dict[str, Any]:
    """The render log's rows and status/overview's etaError are what the test did."""
    errors = known.errors()
    assert len(errors) == 6 and errors[0] == 0.0
    hist = await srv.ok("history", {"lane": known.lane})
    rows = {r["ticketId"]: r for r in hist["entries"]}
    assert len(rows) == 5  # every grant but the last holder's has ended
    for tid, row in rows.items():
        assert row["etaFirstSeconds"] == known.first_eta[tid]
        assert row["waitSeconds"] == known.granted[tid] - known.enqueued[tid]
    want = by_rank(errors)
    st = await srv.ok("status", {"lane": known.lane})
    assert st["etaError"] == want
    ov = await srv.get("/v1/overview", params={"lane": known.lane})
    [lane] = [x for x in ov.body["lanes"] if x["lane"] == known.lane]
    assert lane["etaError"] == want
    [log_row] = [r for r in ov.body["log"]["entries"] if r["ticketId"] == known.order[1]]
    assert (log_row["etaFirstSeconds"], log_row["waitSeconds"]) == (290.0, 110.0)
    assert want is not None
    return want


async def test_the_reported_eta_error_is_what_happened(server: Running) -> None:
    assert (await server.ok("status", {"lane": SOLO}))["etaError"] is None  # no grant yet
    known = await run_scenario([server], server.clock, SOLO)
    # by hand: |0−0|, |290−110|, |580−300|, |190−50|, |1785−90|, |190−90|
    assert known.errors() == [0.0, 180.0, 280.0, 140.0, 1695.0, 100.0]
    want = await assert_reported(server, known)
    assert want == {"grants": 6, "medianSeconds": 140.0, "p90Seconds": 1695.0}


async def test_the_eta_error_survives_a_restart(start_server: StartServer, tmp_path: Path) -> None:
    clock = TestManualClock()
    data = tmp_path / "data"
    first = await start_server(clock=clock, data_dir=data)
    known = await run_scenario([first], clock, SOLO)
    want = await assert_reported(first, known)
    await first.stop()
    second = await start_server(clock=clock, data_dir=data)
    assert (await second.ok("status", {"lane": SOLO}))["etaError"] == want
    # and it carries on: one more grant, at once (error 0)
    f = known.order[-1]
    await second.ok("release", ticket_body(SOLO, f, "mF", "cmF", outcome="completed"))
    body = acquire_body(SOLO, "mG", "cG", "p9", "s9", "g")
    assert (await second.ok("acquire", body))["granted"] is True
    assert (await second.ok("status", {"lane": SOLO}))["etaError"] == by_rank(
        [*known.errors(), 0.0]
    )


async def test_an_unenforced_lane_has_no_eta_error(server: Running) -> None:
    await server.ok("acquire", acquire_body("free:main"))
    assert (await server.ok("status", {"lane": "free:main"}))["etaError"] is None
    ov = await server.get("/v1/overview")
    assert {x["lane"]: x["etaError"] for x in ov.body["lanes"]}.get("free:main") is None


def test_the_eta_error_survives_kill_9(start_coordinator: StartCoordinator, tmp_path: Path) -> None:
    """The real `lane-coordinator serve`, real time: three grants (at once, and two waiters
    promoted by releases), then SIGKILL; the restarted server reports the same etaError,
    which is what the acquires answered against the waits the grants had."""
    config = make_config(routes={"solo": 1})
    srv = start_coordinator(tmp_path / "data", config=config)
    tickets = []
    for m, project in (("mA", "p1"), ("mB", "p2"), ("mC", "p3")):
        body = acquire_body(SOLO, m, f"c{m}", project, f"s-{m}", m, leaseSeconds=600)
        tickets.append(srv.op("acquire", body)["ticket"])
    a, b, c = tickets
    assert [t["state"] for t in tickets] == ["held", "queued", "queued"]
    for holder in (a, b):
        time.sleep(0.2)
        body = ticket_body(SOLO, holder["ticketId"], holder["machineId"], holder["claimId"])
        srv.op("release", {**body, "outcome": "completed"})
    [held] = srv.status(SOLO)["held"]
    assert held["ticketId"] == c["ticketId"]
    by_id = {r["ticketId"]: r for r in srv.history(SOLO)["entries"]}
    ra, rb = by_id[a["ticketId"]], by_id[b["ticketId"]]
    assert (ra["etaFirstSeconds"], rb["etaFirstSeconds"]) == (0.0, b["etaSeconds"])
    assert rb["waitSeconds"] == round(ra["endedAt"] - b["enqueuedAt"], 3)  # A's release
    errors = [round(abs(r["etaFirstSeconds"] - r["waitSeconds"]), 3) for r in (ra, rb)]
    c_wait = round(held["heldAt"] - c["enqueuedAt"], 3)
    errors.append(round(abs(c["etaSeconds"] - c_wait), 3))
    want = by_rank(errors)
    assert want is not None and want["grants"] == 3 and want["p90Seconds"] > 200  # ~300 s off
    assert srv.status(SOLO)["etaError"] == want
    assert srv.kill9() == -signal.SIGKILL
    again = start_coordinator(tmp_path / "data", config=config)
    assert again.status(SOLO)["etaError"] == want
