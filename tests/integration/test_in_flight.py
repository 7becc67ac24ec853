"""In-flight provider jobs against the real server (docs/protocol.md#in-flight): a ticket that
ends after its provider-submitted receipt keeps its slot until the job is known to have ended
or its hold runs out; each way a hold ends; reconcile and its refusals; a restart and a
kill -9 keep the hold with its holdUntil."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Running, StartServer, TestManualClock
from tests.harness.credentials import Cred
from tests.integration.kit import (
    DUO,
    SOLO,
    acquire_body,
    assert_error,
    receipt_body,
    ticket_body,
)

HOLD = 1800.0  # the default in_flight_hold_seconds
DRIVER = Cred("any-driver", "driver")  # not bound to a machine


async def _submitted_and_waiting(srv: Running, lane: str = SOLO) -> tuple[str, str, float]:
    """A holds the slot on a 30 s lease and records provider-submitted; B waits. Returns
    (A, B, submittedAt)."""
    a = (await srv.ok("acquire", acquire_body(lane, leaseSeconds=30)))["ticket"]["ticketId"]
    b_reply = await srv.ok("acquire", acquire_body(lane, "mB", "cB", project="p2"))
    assert b_reply["granted"] is False
    submitted_at = srv.clock.now()
    await srv.ok("receipt", receipt_body(lane, a, "provider-submitted", {"job": "j1"}), 201)
    return a, b_reply["ticket"]["ticketId"], submitted_at


async def _status(srv: Running, lane: str = SOLO) -> dict[str, Any]:
    return await srv.ok("status", {"lane": lane})


async def _row(srv: Running, ticket_id: str, lane: str = SOLO) -> dict[str, Any]:
    entries = (await srv.ok("history", {"lane": lane}))["entries"]
    rows: list[dict[str, Any]] = [e for e in entries if e["ticketId"] == ticket_id]
    assert len(rows) == 1
    return rows[0]


async def _incidents(srv: Running, lane: str = SOLO) -> list[str]:
    r = await srv.get("/v1/incidents", params={"lane": lane})
    assert r.status == 200
    return [i["kind"] for i in r.body["incidents"]]


async def test_an_expired_lease_with_a_submitted_job_blocks_the_waiter_until_terminal(
    server: Running,
) -> None:
    a, b, submitted = await _submitted_and_waiting(server)
    server.clock.advance(31)  # A's lease expired: the job may still run
    st = await _status(server)
    assert st["held"] == [] and [t["ticketId"] for t in st["queued"]] == [b]
    [job] = st["inFlight"]
    assert job == {
        "ticketId": a,
        "fence": 1,
        "machineId": "mA",
        "claimId": "cA",
        "project": "p1",
        "scene": "s1",
        "submittedAt": submitted,
        "since": submitted + 30,
        "holdUntil": submitted + HOLD,
        "credential": "token-1",
    }
    queued = st["queued"][0]
    assert queued["etaSeconds"] == pytest.approx(submitted + HOLD - server.clock.now(), abs=0.01)
    row = await _row(server, a)
    assert row["outcome"] == "expired" and row["inFlightUntil"] == submitted + HOLD
    assert row["inFlightEnded"] is None
    assert "in-flight-held" in await _incidents(server)
    # A's resumed driver saw the job end: its provider-terminal receipt frees the slot at once
    await server.ok("receipt", receipt_body(SOLO, a, "provider-terminal", {"done": 1}), 201)
    st = await _status(server)
    assert [t["ticketId"] for t in st["held"]] == [b] and st["inFlight"] == []
    assert (await _row(server, a))["inFlightEnded"] == "receipt"
    assert "in-flight-ended" in await _incidents(server)


@pytest.mark.parametrize("outcome", ["lease-lost", "timeout"])
async def test_a_release_lease_lost_or_timeout_holds_then_reconcile_promotes(
    server: Running, outcome: str
) -> None:
    a, b, _ = await _submitted_and_waiting(server)
    rel = await server.ok("release", ticket_body(SOLO, a, outcome=outcome))
    assert rel["released"] is True and rel["promoted"] == []
    assert [j["ticketId"] for j in (await _status(server))["inFlight"]] == [a]
    body = ticket_body(SOLO, a, outcome="completed", providerJobId="job-7", note="seen")
    r = await server.ok("reconcile", body)
    assert r == {"coordinator": "actor-sqlite", "reconciled": True, "promoted": [b]}
    row = await _row(server, a)
    assert row["inFlightEnded"] == "reconciled:completed" and row["providerJobId"] == "job-7"
    assert row["outcome"] == outcome
    assert (await _status(server))["inFlight"] == []


async def test_a_late_release_with_a_terminal_outcome_ends_the_hold(server: Running) -> None:
    a, b, _ = await _submitted_and_waiting(server)
    server.clock.advance(31)
    assert (await _status(server))["held"] == []
    rel = await server.ok("release", ticket_body(SOLO, a, outcome="completed"))
    assert (rel["released"], rel["reason"], rel["promoted"]) == (False, "expired", [b])
    row = await _row(server, a)
    assert row["lateOutcome"] == "completed" and row["inFlightEnded"] == "reconciled:completed"


async def test_a_late_hand_release_keeps_the_hold(server: Running) -> None:
    a, _, _ = await _submitted_and_waiting(server)
    server.clock.advance(31)
    rel = await server.ok("release", ticket_body(SOLO, a, claim=None))  # no outcome
    assert rel["promoted"] == []
    assert [j["ticketId"] for j in (await _status(server))["inFlight"]] == [a]


async def test_the_alarm_ends_the_hold_at_hold_until_and_grants_a_parked_waiter(
    server: Running,
) -> None:
    a, b, submitted = await _submitted_and_waiting(server)
    server.clock.advance(31)
    assert (await _status(server))["inFlight"] != []
    # B keeps waiting (its keep-alive) until just before holdUntil, then parks an await
    while server.clock.now() < submitted + HOLD - 60:
        server.clock.advance(min(300, submitted + HOLD - 60 - server.clock.now()))
        await server.ok("heartbeat", ticket_body(SOLO, b, "mB", "cB"))
    task = asyncio.create_task(server.op("await", ticket_body(SOLO, b, "mB", "cB", waitSeconds=60)))
    await asyncio.sleep(0.1)
    assert not task.done()
    server.clock.advance(submitted + HOLD - server.clock.now())  # no call: the alarm fires
    r = await asyncio.wait_for(task, 10)
    assert r.status == 200 and r.body["granted"] is True
    assert (await _row(server, a))["inFlightEnded"] == "expired"
    assert "in-flight-expired" in await _incidents(server)


async def test_no_hold_without_a_submit_after_terminal_past_hold_until_or_when_off(
    start_server: StartServer,
) -> None:
    srv = await start_server(clock=TestManualClock())
    # no provider-submitted receipt: the waiter is granted at the expiry
    a = (await srv.ok("acquire", acquire_body(leaseSeconds=30)))["ticket"]["ticketId"]
    await srv.ok("acquire", acquire_body(machine="mB", claim="cB", project="p2"))
    await srv.ok("receipt", receipt_body(SOLO, a, "lease-acquired"), 201)
    srv.clock.advance(31)
    st = await _status(srv)
    assert st["inFlight"] == [] and len(st["held"]) == 1
    # a lane whose route turns holds off
    off = await start_server(clock=TestManualClock(), route_holds={"solo": 0.0})
    a, b, _ = await _submitted_and_waiting(off)
    off.clock.advance(31)
    st = await _status(off)
    assert st["inFlight"] == [] and [t["ticketId"] for t in st["held"]] == [b]
    # the lease ends after holdUntil (a 20 s hold for this lane)
    short = await start_server(clock=TestManualClock(), lane_holds={SOLO: 20.0})
    await _submitted_and_waiting(short)
    short.clock.advance(31)
    assert (await _status(short))["inFlight"] == []


async def test_capacity_counts_held_and_in_flight(server: Running) -> None:
    a = (await server.ok("acquire", acquire_body(DUO, leaseSeconds=30)))["ticket"]["ticketId"]
    await server.ok("acquire", acquire_body(DUO, project="p2", leaseSeconds=3600))
    c = (await server.ok("acquire", acquire_body(DUO, "mC", "cC", project="p3")))["ticket"]
    await server.ok("receipt", receipt_body(DUO, a, "provider-submitted"), 201)
    server.clock.advance(31)
    st = await _status(server, DUO)
    assert len(st["held"]) == 1 and len(st["inFlight"]) == 1
    assert [t["ticketId"] for t in st["queued"]] == [c["ticketId"]]


async def test_reconcile_refusals_change_nothing(start_server: StartServer) -> None:
    server = await start_server(credentials=[DRIVER])
    a, b, _ = await _submitted_and_waiting(server)
    # held, queued: no hold
    for tid, who in ((a, ("mA", "cA")), (b, ("mB", "cB"))):
        r = await server.op("reconcile", ticket_body(SOLO, tid, *who, outcome="completed"))
        assert_error(r, 409, "not-in-flight")
    r = await server.op("reconcile", ticket_body(SOLO, "t_unknown", outcome="failed"))
    assert_error(r, 404, "not-found")
    await server.ok("release", ticket_body(SOLO, a, outcome="lease-lost"))
    before = await _status(server)
    # another machine, or another claim, through a driver credential (an admin may
    # reconcile any machine's ticket: test_an_admin_reconciles_any_machines_ticket)
    driver = {"token": DRIVER.token}
    r = await server.op(
        "reconcile", ticket_body(SOLO, a, "mB", "cB", outcome="completed"), **driver
    )
    assert_error(r, 403, "not-owner")
    body = ticket_body(SOLO, a, claim="other", outcome="completed")
    assert_error(await server.op("reconcile", body, **driver), 403, "not-owner")
    for bad in ("expired", "done", None, 1):
        r = await server.op("reconcile", ticket_body(SOLO, a, outcome=bad))
        assert_error(r, 400, "bad-request", "outcome")
    r = await server.op("reconcile", ticket_body(SOLO, a))
    assert_error(r, 400, "bad-request", "outcome")
    after = await _status(server)
    assert after["inFlight"] == before["inFlight"] != [] and after["held"] == []
    assert (await _row(server, a))["inFlightEnded"] is None
    r = await server.op("reconcile", ticket_body(SOLO, a, outcome="not-found"))
    assert r.status == 200 and r.body["promoted"] == [b]
    r = await server.op("reconcile", ticket_body(SOLO, a, outcome="not-found"))
    assert_error(r, 409, "not-in-flight")  # its hold already ended


async def test_an_admin_reconciles_any_machines_ticket(start_server: StartServer) -> None:
    """docs/protocol.md#reconcile: the ticket's machine, or an admin credential for any
    machine's ticket (the plain TOKEN is the admin `token-1`); the hold's end names it."""
    server = await start_server(credentials=[DRIVER])
    a, b, _ = await _submitted_and_waiting(server)
    await server.ok("release", ticket_body(SOLO, a, outcome="lease-lost"))
    body = ticket_body(SOLO, a, "ops-laptop", None, outcome="completed")
    assert_error(await server.op("reconcile", body, token=DRIVER.token), 403, "not-owner")
    r = await server.ok("reconcile", body)
    assert r["reconciled"] is True and r["promoted"] == [b]
    assert (await _row(server, a))["inFlightEnded"] == "reconciled:completed"
    inc = await server.get("/v1/incidents", params={"lane": SOLO})
    [ended] = [i for i in inc.body["incidents"] if i["kind"] == "in-flight-ended"]
    assert (ended["machineId"], ended["credential"]) == ("ops-laptop", "token-1")


async def test_the_hold_survives_a_restart_with_its_hold_until(
    start_server: StartServer, tmp_path: Path
) -> None:
    clock = TestManualClock()
    data = tmp_path / "data"
    first = await start_server(clock=clock, data_dir=data)
    a, b, submitted = await _submitted_and_waiting(first)
    clock.advance(31)
    assert (await _status(first))["inFlight"] != []
    await first.stop()
    second = await start_server(clock=clock, data_dir=data)
    st = await _status(second)
    assert [j["holdUntil"] for j in st["inFlight"]] == [submitted + HOLD]
    assert st["held"] == []
    await second.ok("reconcile", ticket_body(SOLO, a, outcome="failed"))
    assert [t["ticketId"] for t in (await _status(second))["held"]] == [b]


async def test_unenforced_lanes_keep_no_holds(server: Running) -> None:
    r = await server.op("reconcile", ticket_body("free:main", "t_x", outcome="completed"))
    assert_error(r, 409, "not-in-flight")
    st = await _status(server, "free:main")
    assert st["inFlight"] == []


async def test_metrics_count_in_flight_jobs(server: Running) -> None:
    await _submitted_and_waiting(server)
    server.clock.advance(31)
    await _status(server)
    text = (await server.get("/metrics")).text
    assert f'lanes_in_flight{{lane="{SOLO}"}} 1.0' in text
    assert "lanes_all_in_flight 1.0" in text
