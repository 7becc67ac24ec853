"""Credentials against the real server (docs/protocol.md#credentials): a hashed line and a plain
token both sign in; what each role may call (403 role-forbidden outside it, before the body is
read); a driver bound to one machine may name no other (403 machine-mismatch); an admin acts
for any machine; public paths stay public; GET /v1/whoami; every row a write makes names its
credential. The scripted day with every row checked, and the grep for secrets:
tests/acceptance/test_audit_day.py; a revocation on replicas:
tests/replicas/test_credentials_replicas.py."""

from __future__ import annotations

from typing import Any

from coordinator.protocol import requests as S
from tests.harness import TOKEN, Running, StartServer
from tests.harness.credentials import Cred
from tests.integration.kit import (
    SOLO,
    acquire_body,
    assert_error,
    receipt_body,
    ticket_body,
)

READER = Cred("control-room", "reader")
STUDIO_A = Cred("studio-a", "driver", "mA")  # bound to machine mA
ANY_DRIVER = Cred("render-farm", "driver")  # any machine
OPS = Cred("ops", "admin")
WRITES = ("acquire", "await", "heartbeat", "release", "receipt", "cooldown", "reconcile")
GETS = ("/v1/lanes", "/v1/incidents", "/v1/machines", "/v1/overview", "/v1/whoami")


async def _server(start_server: StartServer) -> Running:
    return await start_server(credentials=[READER, STUDIO_A, ANY_DRIVER, OPS])


def _full_body(ticket_id: str, machine: str = "mA") -> dict[str, Any]:
    """A body every operation accepts (so a refusal is about the credential, not the body)."""
    return {
        **acquire_body(SOLO, machine, None),
        **receipt_body(SOLO, ticket_id, machine=machine, claim=None),
        "outcome": "completed",
        "reasonCode": "provider-human-check",
        "retryAfterSeconds": 60,
        "waitSeconds": 1,
    }


async def test_whoami_names_the_presented_credential(start_server: StartServer) -> None:
    srv = await _server(start_server)
    for cred, can_write in ((READER, False), (STUDIO_A, True), (OPS, True)):
        r = await srv.get("/v1/whoami", token=cred.token)
        assert r.status == 200, r.text
        assert r.body == {
            "coordinator": "actor-sqlite",
            "name": cred.name,
            "role": cred.role,
            "machine": cred.machine,
            "canWrite": can_write,
        }
    plain = await srv.get("/v1/whoami")  # the plain TOKEN line: admin, named token-1
    assert (plain["name"], plain["role"], plain["canWrite"]) == ("token-1", "admin", True)
    assert_error(await srv.get("/v1/whoami", token="x" * 43), 401, "unauthorized")


async def test_a_reader_reads_everything_and_writes_nothing(start_server: StartServer) -> None:
    srv = await _server(start_server)
    tid = (await srv.ok("acquire", acquire_body()))["ticket"]["ticketId"]
    for path in GETS:
        assert (await srv.get(path, token=READER.token)).status == 200, path
    ev = await srv.get("/v1/evidence", params={"lane": SOLO}, token=READER.token)
    assert ev.status == 200
    assert (await srv.get("/metrics", token=READER.token)).status == 200
    r = await srv.get("/v1/dashboard", token=READER.token)
    assert r.status == 302
    for name in ("status", "history"):
        r = await srv.op(name, {"lane": SOLO, "machineId": "anything"}, token=READER.token)
        assert r.status == 200, r.text
    before = await srv.ok("status", {"lane": SOLO, "includeReceipts": True})
    for name in WRITES:
        r = await srv.op(name, _full_body(tid), token=READER.token)
        assert_error(r, 403, "role-forbidden")
        assert "'control-room' (role reader)" in r.message and "driver or admin" in r.message
        # refused before the body is read: an unreadable body changes nothing
        raw = await srv.request(
            "POST", f"/v1/lanes/{name}", data=b"{not json", token=READER.token,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        assert_error(raw, 403, "role-forbidden")
    assert await srv.ok("status", {"lane": SOLO, "includeReceipts": True}) == before
    # no lane was made by the refused acquire on another lane
    r = await srv.op("acquire", acquire_body("duo:main"), token=READER.token)
    assert_error(r, 403, "role-forbidden")
    assert "duo:main" not in [x["lane"] for x in (await srv.get("/v1/lanes"))["lanes"]]


async def test_a_bound_driver_may_name_no_other_machine(start_server: StartServer) -> None:
    srv = await _server(start_server)
    mine = await srv.ok("acquire", acquire_body(SOLO, "mA", "cA"), token=STUDIO_A.token)
    tid = mine["ticket"]["ticketId"]
    assert mine["granted"] is True and mine["ticket"]["credential"] == "studio-a"
    before = await srv.ok("status", {"lane": SOLO})
    for name in sorted(S.SCHEMAS):
        r = await srv.op(name, _full_body(tid, machine="mB"), token=STUDIO_A.token)
        assert_error(r, 403, "machine-mismatch", "machineId")
        assert "bound to machine 'mA'" in r.message and "'mB'" in r.message
    assert await srv.ok("status", {"lane": SOLO}) == before
    # its own machine, or no machineId on a read: allowed
    assert (await srv.op("status", {"lane": SOLO}, token=STUDIO_A.token)).status == 200
    hb = await srv.ok("heartbeat", ticket_body(SOLO, tid), token=STUDIO_A.token)
    assert hb["refreshed"] is True
    machines = (await srv.get("/v1/machines"))["machines"]
    assert [m["machineId"] for m in machines] == ["mA"]  # the refused calls marked no mB


async def test_an_unbound_driver_and_an_admin_act_for_any_machine(
    start_server: StartServer,
) -> None:
    srv = await _server(start_server)
    for cred, machine in ((ANY_DRIVER, "mB"), (OPS, "mC")):
        body = acquire_body(SOLO, machine, None, prompt=machine)
        tid = (await srv.ok("acquire", body, token=cred.token))["ticket"]["ticketId"]
        r = await srv.ok("release", ticket_body(SOLO, tid, machine, None), token=cred.token)
        assert r["released"] is True


async def test_public_paths_stay_public(start_server: StartServer) -> None:
    srv = await _server(start_server)
    for path in ("/healthz", "/readyz", "/openapi.json", "/control-room"):
        for token in (None, READER.token, "wrong-" + "x" * 40):
            assert (await srv.get(path, token=token)).status == 200, (path, token)
    assert_error(await srv.get("/v1/lanes", token=None), 401, "unauthorized")
    assert_error(await srv.get("/metrics", token="wrong-" + "x" * 40), 401, "unauthorized")


async def test_an_unknown_route_is_the_routers_answer_for_any_role(
    start_server: StartServer,
) -> None:
    srv = await _server(start_server)
    assert_error(await srv.get("/v1/nothing", token=READER.token), 404, "not-found")
    r = await srv.get("/v1/lanes/acquire", token=READER.token)
    assert_error(r, 405, "method-not-allowed")


async def test_every_write_records_its_credential(start_server: StartServer) -> None:
    """Tickets, receipts, incidents, the pause and render-log rows name the credential of
    the call that wrote them; what the lane's clock did names none."""
    srv = await _server(start_server)
    a = await srv.ok("acquire", acquire_body(SOLO, "mA", "cA"), token=STUDIO_A.token)
    tid = a["ticket"]["ticketId"]
    b = await srv.ok("acquire", acquire_body(SOLO, "mB", "cB", prompt="b"), token=ANY_DRIVER.token)
    await srv.ok("acquire", acquire_body(SOLO, "mB", "cB"), token=ANY_DRIVER.token)  # collision
    bad = receipt_body(SOLO, tid, content_hash="sha256:" + "0" * 64)
    await srv.ok("receipt", bad, 201, token=STUDIO_A.token)
    cd = ticket_body(SOLO, tid, reasonCode="provider-human-check", retryAfterSeconds=60)
    pause = (await srv.ok("cooldown", cd, token=STUDIO_A.token))["pause"]
    assert pause["credential"] == "studio-a"
    st = await srv.ok("status", {"lane": SOLO, "includeReceipts": True})
    assert st["pause"]["credential"] == "studio-a"
    assert [t["credential"] for t in st["held"] + st["queued"]] == ["studio-a", "render-farm"]
    assert [r["credential"] for r in st["recentReceipts"]] == ["studio-a"]
    # the hand release of B's queued ticket by an operator
    hand = ticket_body(SOLO, b["ticket"]["ticketId"], "mB", None)
    await srv.ok("release", hand, token=OPS.token)
    await srv.ok("release", ticket_body(SOLO, tid, outcome="not-submitted"), token=STUDIO_A.token)
    log = {e["ticketId"]: e for e in (await srv.ok("history", {"lane": SOLO}))["entries"]}
    assert (log[tid]["credential"], log[tid]["releasedBy"]) == ("studio-a", "studio-a")
    b_row = log[b["ticket"]["ticketId"]]
    assert (b_row["credential"], b_row["releasedBy"]) == ("render-farm", "ops")
    incidents = (await srv.get("/v1/incidents", params={"lane": SOLO}))["incidents"]
    by_kind = {i["kind"]: i["credential"] for i in incidents}
    assert by_kind == {
        "duplicate-collision": "render-farm",
        "receipt-hash-mismatch": "studio-a",
        "provider-cooldown-started": "studio-a",
    }
    ev = await srv.get("/v1/evidence", params={"lane": SOLO, "ticketId": tid})
    job = ev.body["jobEvidence"]
    assert job["identity"]["credential"] == "studio-a"
    assert job["receipts"]["lease-acquired"][0]["credential"] == "studio-a"
    ov = await srv.get("/v1/overview")
    assert {e["ticketId"]: e["releasedBy"] for e in ov.body["log"]["entries"]} == {
        tid: "studio-a",
        b["ticket"]["ticketId"]: "ops",
    }
    assert [r["credential"] for r in ov.body["lanes"][0]["recentReceipts"]] == ["studio-a"]
    # the pause ends on the lane's clock: its incident names no credential
    srv.clock.advance(61)
    await srv.ok("status", {"lane": SOLO})
    incidents = (await srv.get("/v1/incidents", params={"lane": SOLO}))["incidents"]
    [ended] = [i for i in incidents if i["kind"] == "provider-cooldown-ended"]
    assert ended["credential"] is None


async def test_a_reaped_lease_names_no_credential(server: Running) -> None:
    tid = (await server.ok("acquire", acquire_body(leaseSeconds=15)))["ticket"]["ticketId"]
    server.clock.advance(16)
    [row] = (await server.ok("history", {"lane": SOLO}))["entries"]
    assert row["ticketId"] == tid and row["outcome"] == "expired"
    assert (row["credential"], row["releasedBy"]) == ("token-1", None)
    incidents = (await server.get("/v1/incidents", params={"lane": SOLO}))["incidents"]
    assert [(i["kind"], i["credential"]) for i in incidents] == [("lease-expired", None)]
    # a late release by the owner: it made the ticket done, so it is recorded as such
    await server.ok("release", ticket_body(SOLO, tid, outcome="completed"), token=TOKEN)
    [row] = (await server.ok("history", {"lane": SOLO}))["entries"]
    assert (row["outcome"], row["lateOutcome"], row["releasedBy"]) == (
        "expired",
        "completed",
        "token-1",
    )
