"""docs/protocol.md#control-room-reads (GET), over HTTP against the real server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.integration.kit import (
    DUO,
    FREE,
    PHASES,
    SOLO,
    acquire_body,
    assert_error,
    receipt_body,
    ticket_body,
)

if TYPE_CHECKING:
    from tests.harness import Running


async def _tid(server: Running, **kw: Any) -> str:
    r = await server.ok("acquire", acquire_body(**kw))
    tid: str = r["ticket"]["ticketId"]
    return tid


async def test_lanes_lists_every_known_lane(server: Running) -> None:
    a = await _tid(server)
    await _tid(server, prompt="q")
    await _tid(server, lane=DUO, prompt="d")
    await server.ok(
        "cooldown",
        ticket_body(SOLO, a, reasonCode="provider-human-check", retryAfterSeconds=60),
    )
    r = await server.get("/v1/lanes")
    assert r.status == 200 and r["coordinator"] == "actor-sqlite"
    lanes = {x["lane"]: x for x in r["lanes"]}
    assert {SOLO, DUO} <= set(lanes)
    assert lanes[SOLO]["capacity"] == 1 and lanes[SOLO]["held"] == 1
    assert lanes[SOLO]["queued"] == 1 and lanes[SOLO]["pause"]["ticketId"] == a
    assert lanes[DUO]["capacity"] == 2 and lanes[DUO]["held"] == 1
    assert lanes[DUO]["queued"] == 0 and lanes[DUO]["pause"] is None


async def test_incidents_filter_and_limit(server: Running) -> None:
    a = await _tid(server, leaseSeconds=15)
    await _tid(server, lane=DUO, prompt="d", leaseSeconds=15)
    server.clock.advance(15)  # both leases are reaped by the alarm
    r = await server.get("/v1/incidents")
    assert r.status == 200 and r["coordinator"] == "actor-sqlite"
    assert {(i["lane"], i["kind"]) for i in r["incidents"]} == {
        (SOLO, "lease-expired"),
        (DUO, "lease-expired"),
    }
    r = await server.get("/v1/incidents", params={"lane": SOLO})
    [inc] = r["incidents"]
    assert inc["ticketId"] == a and inc["machineId"] == "mA" and inc["lane"] == SOLO
    assert inc["at"] == server.clock.now()  # the lease's original expiry
    r = await server.get("/v1/incidents", params={"limit": "1"})
    assert len(r["incidents"]) == 1
    for params, name in (
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"limit": "100000"}, "limit"),
        ({"lane": "../etc:passwd"}, "lane"),
        ({"lane": "solo"}, "lane"),
    ):
        assert_error(await server.get("/v1/incidents", params=params), 400, "bad-request", name)
    r = await server.get("/v1/incidents", params={"lane": FREE})
    assert r.status == 200 and r["incidents"] == []


async def test_machines_online_for_180_seconds_after_a_named_call(server: Running) -> None:
    await _tid(server, machine="mA")
    await server.ok("status", {"lane": SOLO, "machineId": "mWatcher"})
    server.clock.advance(100)
    await _tid(server, machine="mB", prompt="b")
    r = await server.get("/v1/machines")
    assert r.status == 200 and r["coordinator"] == "actor-sqlite"
    seen = {m["machineId"]: m for m in r["machines"]}
    assert set(seen) == {"mA", "mB", "mWatcher"}
    assert all(m["online"] for m in seen.values())
    server.clock.advance(80)  # mA: exactly 180 s
    seen = {m["machineId"]: m for m in (await server.get("/v1/machines"))["machines"]}
    assert seen["mA"]["online"] is True
    server.clock.advance(1)  # 181 s
    seen = {m["machineId"]: m for m in (await server.get("/v1/machines"))["machines"]}
    assert seen["mA"]["online"] is False and seen["mWatcher"]["online"] is False
    assert seen["mB"]["online"] is True
    server.clock.advance(100)
    seen = {m["machineId"]: m for m in (await server.get("/v1/machines"))["machines"]}
    assert not any(m["online"] for m in seen.values())


async def test_a_rejected_call_does_not_mark_a_machine_online(server: Running) -> None:
    r = await server.op("status", {"lane": SOLO, "machineId": "mGhost"}, token="w" * 48)
    assert r.status == 401
    r = await server.get("/v1/machines")
    assert "mGhost" not in {m["machineId"] for m in r["machines"]}


async def test_evidence_is_for_the_exact_ticket_only(server: Running) -> None:
    t1 = await _tid(server, lane=DUO, project="P", scene="S", prompt="one")
    t2 = await _tid(
        server, lane=DUO, project="P", scene="S", prompt="two", machine="mB", claim="cB"
    )
    for phase in ("lease-acquired", "provider-submitted"):
        r = await server.op("receipt", receipt_body(DUO, t1, phase=phase, payload={"x": phase}))
        assert r.status == 201
    for phase in PHASES:  # t2 has every phase: none of it may leak into t1's evidence
        r = await server.op("receipt", receipt_body(DUO, t2, phase=phase, machine="mB", claim="cB"))
        assert r.status == 201
    r = await server.get("/v1/evidence", params={"lane": DUO, "ticketId": t1})
    assert r.status == 200 and r["coordinator"] == "actor-sqlite"
    job = r["jobEvidence"]
    assert job["ticketId"] == t1
    assert job["identity"]["project"] == "P" and job["identity"]["promptHash"] == "one"
    rec = job["receipts"]
    assert set(rec) == set(PHASES)
    assert rec["references-applied"] == "unknown" and rec["provider-terminal"] == "unknown"
    for phase in ("lease-acquired", "provider-submitted"):
        assert [x["ticketId"] for x in rec[phase]] == [t1]
        assert rec[phase][0]["payload"] == {"x": phase}
    assert t2 not in r.text
    coord = r["coordinatorEvidence"]
    assert {m["machineId"] for m in coord["machinesSeen"]} == {"mA", "mB"}


async def test_evidence_for_an_unknown_ticket_reads_unknown(server: Running) -> None:
    t1 = await _tid(server)
    await server.op("receipt", receipt_body(SOLO, t1))
    r = await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": "t_missing"})
    assert r.status == 200
    job = r["jobEvidence"]
    assert job["ticketId"] == "t_missing"
    assert job["identity"] == "unknown"
    assert job["receipts"] == dict.fromkeys(PHASES, "unknown")
    assert t1 not in str(job)


async def test_evidence_collision_names_both_owners(server: Running) -> None:
    t = await _tid(server, machine="mA", claim="cA", prompt="shared")
    await server.ok("acquire", acquire_body(machine="mB", claim="cB", prompt="shared"))
    r = await server.get("/v1/evidence", params={"lane": SOLO})
    coll = r["coordinatorEvidence"]["collision"]
    assert coll["ticketId"] == t
    assert coll["owner"] == {"machineId": "mA", "claimId": "cA"}
    assert coll["requester"] == {"machineId": "mB", "claimId": "cB"}
    assert r["jobEvidence"] is None


async def test_evidence_requires_a_valid_lane(server: Running) -> None:
    assert_error(await server.get("/v1/evidence"), 400, "bad-request", "lane")
    r = await server.get("/v1/evidence", params={"lane": "a/b:c"})
    assert_error(r, 400, "bad-request", "lane")


async def test_dashboard_redirects_when_authenticated(server: Running) -> None:
    r = await server.get("/v1/dashboard")
    assert r.status == 302
    location = r.headers["Location"]
    page = await server.get(location, token=None)
    assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    assert_error(await server.get("/v1/dashboard", token=None), 401, "unauthorized")


async def test_healthz_is_public_and_holds_no_queue_data(server: Running) -> None:
    await _tid(server)
    for token in (None, "wrong" * 10):
        r = await server.get("/healthz", token=token)
        assert r.status == 200 and r.body == {"ok": True}
