"""Every incident kind, recorded by the real server, carries exactly the detail its Struct in
coordinator/protocol/incident_details.py names (the OpenAPI document types `Incident` per kind
from those Structs), and `ticketId` / `machineId` are never null."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, get_args

import msgspec

from coordinator.http.openapi_schemas import variant_name
from coordinator.protocol import replies as wire
from coordinator.protocol.incident_details import DETAILS
from tests.harness import Running, StartServer, TestManualClock
from tests.harness.openapi_tools import ajv_check
from tests.integration.kit import SOLO, acquire_body, receipt_body, ticket_body


async def _every_kind(srv: Running) -> None:
    """Each of the 11 kinds at least once on SOLO (capacity 1)."""
    a = (await srv.ok("acquire", acquire_body(leaseSeconds=30)))["ticket"]["ticketId"]
    await srv.ok("acquire", acquire_body(machine="mB", claim="cB"))  # duplicate-collision
    wait = await srv.ok("acquire", acquire_body(machine="mW", claim=None, project="w"))
    cool = ticket_body(SOLO, a, reasonCode="provider-human-check")
    await srv.ok("cooldown", {**cool, "retryAfterSeconds": 30})  # cooldown-started
    await srv.ok("cooldown", {**cool, "retryAfterSeconds": 60})  # cooldown-extended
    bad = "sha256:" + "0" * 64
    await srv.ok("receipt", receipt_body(SOLO, a, payload={"k": 1}, content_hash=bad), 201)
    await srv.ok("receipt", receipt_body(SOLO, a, "provider-submitted", {"job": "j1"}), 201)
    # The waiter sends no keep-alive: abandoned; A's lease ends (expired, its job in flight:
    # in-flight-held), the pause ends (cooldown-ended).
    srv.clock.advance(100)
    await srv.ok("status", {"lane": SOLO})
    assert wait["granted"] is False
    await srv.ok("release", ticket_body(SOLO, a, outcome="timeout"))  # late-release
    await srv.ok("receipt", receipt_body(SOLO, a, "provider-terminal", {"job": "j1"}), 201)
    # in-flight-ended (the terminal receipt); now one that runs out: in-flight-expired
    b = (await srv.ok("acquire", acquire_body(prompt="h2", leaseSeconds=30)))["ticket"]["ticketId"]
    await srv.ok("receipt", receipt_body(SOLO, b, "provider-submitted", {"job": "j2"}), 201)
    srv.clock.advance(31)
    await srv.ok("status", {"lane": SOLO})
    srv.clock.advance(3600)
    await srv.ok("status", {"lane": SOLO})


async def test_every_incident_kind_has_exactly_its_documented_detail(
    start_server: StartServer, tmp_path: Path
) -> None:
    srv = await start_server(clock=TestManualClock(), waiter_timeout_seconds=60)
    await _every_kind(srv)
    r = await srv.get("/v1/incidents", params={"lane": SOLO})
    assert r.status == 200
    incidents: list[dict[str, Any]] = r.body["incidents"]
    assert {i["kind"] for i in incidents} == set(get_args(wire.IncidentKind)) == set(DETAILS)
    for incident in incidents:
        detail_type = DETAILS[incident["kind"]]
        detail = incident["detail"]
        fields = {f.encode_name for f in msgspec.structs.fields(detail_type)}
        assert set(detail) == fields, (incident["kind"], sorted(detail), sorted(fields))
        msgspec.convert(detail, detail_type)  # every value of its documented type
        assert isinstance(incident["ticketId"], str) and isinstance(incident["machineId"], str)
    # ...and the document's Incident (a oneOf, one schema per kind) takes each as exactly one
    doc = (await srv.get("/openapi.json", token=None)).body
    variants = [
        ref["$ref"].rsplit("/", 1)[1] for ref in doc["components"]["schemas"]["Incident"]["oneOf"]
    ]
    assert variants == [variant_name(k) for k in DETAILS]
    replies = [
        {"method": "GET", "path": "/v1/incidents", "status": 200, "headers": dict(r.headers),
         "contentType": r.headers["Content-Type"], "body": r.body},
    ]  # fmt: skip
    code, report = await asyncio.to_thread(ajv_check, doc, tmp_path, replies)
    assert report["errors"] == [] and code == 0
    wrong = [{**incidents[0], "detail": {"unexpected": True}}]
    replies[0]["body"] = {**r.body, "incidents": wrong}
    code, report = await asyncio.to_thread(ajv_check, doc, tmp_path, replies)
    assert code == 1, "a detail its kind does not describe is refused"
