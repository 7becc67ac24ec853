"""GET /openapi.json: a valid OpenAPI 3.1 document, generated from the protocol's msgspec
Structs (the request bodies the server validates, the replies it encodes), that covers every
route the aiohttp router serves and every status each route answers."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, get_args

import msgspec
from openapi_spec_validator import validate

from coordinator.http.openapi_schemas import OVERRIDDEN
from coordinator.protocol import replies as wire
from coordinator.protocol import requests as S
from tests.harness import Running, StartServer
from tests.harness.credentials import Cred

SPEC_ERROR_CODES = {
    "bad-request", "unsupported-protocol", "unauthorized", "not-owner", "not-holder",
    "not-found", "method-not-allowed", "ticket-not-held", "receipt-conflict", "payload-too-large",
    "unsupported-media-type", "unavailable", "not-in-flight", "role-forbidden",
    "machine-mismatch",
}  # fmt: skip
READER = Cred("control-room", "reader")
BOUND = Cred("studio-a", "driver", "mA")


async def fetch_doc(srv: Running) -> dict[str, Any]:
    r = await srv.get("/openapi.json", token=None)  # public: it describes, it holds no data
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert isinstance(r.body, dict)
    return r.body


def router_routes(srv: Running) -> set[tuple[str, str]]:
    """Every (method, path) the router serves, HEAD included (aiohttp adds it beside GET)."""
    out = set()
    for route in srv.app.router.routes():
        if route.resource is None:
            continue
        out.add((route.method.lower(), route.resource.canonical))
    return out


def doc_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m, p) for p, item in doc["paths"].items() for m in item}


async def test_document_is_valid_openapi_3_1(server: Running) -> None:
    doc = await fetch_doc(server)
    assert doc["openapi"].startswith("3.1")
    # raises on any violation of the OpenAPI 3.1 schema (seconds of CPU: off the server's loop)
    await asyncio.to_thread(validate, doc)


async def test_every_registered_route_is_documented(server: Running) -> None:
    doc = await fetch_doc(server)
    served = router_routes(server)
    v1 = {r for r in served if r[1].startswith("/v1")}
    assert len(v1) >= 13  # 8 POST operations + 5 GET reads
    missing = v1 - doc_routes(doc)
    assert not missing, f"/v1 routes the document lacks: {sorted(missing)}"
    # ...and it documents exactly what the server serves: HEAD beside every GET, the control
    # room's assets too.
    assert doc_routes(doc) == served
    assert ("head", "/healthz") in served and ("get", "/control-room/assets/{name}") in served
    # Redocly's no-path-trailing-slash is off for the one page a browser link asks for with a
    # trailing slash (tools/openapi/redocly.yaml); no other path ends in "/".
    assert [p for p in doc["paths"] if p.endswith("/")] == ["/control-room/"]


async def test_every_method_a_path_refuses_is_a_documented_405_with_its_allow(
    server: Running,
) -> None:
    """Every operation declares 405 with the exact Allow the server sends for that path, and
    the server answers another method so (POST paths: GET; GET paths: POST)."""
    doc = await fetch_doc(server)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            allow = op["responses"]["405"]["headers"]["Allow"]
            assert allow["required"] is True, (method, path)
            expected = allow["schema"]["const"]
            assert expected == ("POST" if "post" in item else "GET, HEAD"), path
        other = "GET" if "post" in item else "POST"
        concrete = path.replace("{name}", "control-room.css")
        r = await server.request(other, concrete)
        assert r.status == 405 and r.code == "method-not-allowed", (other, path, r.status)
        assert r.headers["Allow"] == expected, path
        declared = next(iter(item))  # the body is the one each operation declares for 405
        assert_documented(doc, declared, path, 405, r.text)
        assert ("coordinator" in r.body) == path.startswith("/v1"), path


async def test_head_is_the_get_without_a_body(server: Running) -> None:
    """aiohttp answers HEAD on every GET path with the GET's status and headers and no body;
    the document declares each HEAD with the GET's statuses and no content."""
    doc = await fetch_doc(server)
    for path, item in doc["paths"].items():
        if "get" not in item:
            continue
        head, get = item["head"], item["get"]
        assert set(head["responses"]) == set(get["responses"]), path
        assert all("content" not in r for r in head["responses"].values()), path
        assert head["security"] == get["security"], path
        concrete = path.replace("{name}", "control-room.css")
        g = await server.request("GET", concrete)
        h = await server.request("HEAD", concrete)
        assert h.status == g.status and str(h.status) in head["responses"], path
        assert h.text == "", path
        assert h.headers.get("Content-Type") == g.headers.get("Content-Type"), path


async def test_every_operation_but_the_redirect_declares_a_2xx(server: Running) -> None:
    """Redocly's operation-2xx-response rule is off (tools/openapi/redocly.yaml) for the one
    operation that has none by contract, GET/HEAD /v1/dashboard (302); this is the rule for
    every other one."""
    doc = await fetch_doc(server)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            has_2xx = any(code.startswith("2") for code in op["responses"])
            assert has_2xx == (path != "/v1/dashboard"), (method, path)
    for item in doc["paths"].values():  # a GET read has no protocolVersion to refuse
        if "400" in item.get("get", {}).get("responses", {}):
            assert "unsupported-protocol" not in item["get"]["responses"]["400"]["description"]
    r = await server.request("GET", "/v1/dashboard")
    assert r.status == 302 and r.headers["Location"] == "/control-room"
    dashboard = doc["paths"]["/v1/dashboard"]["get"]["responses"]["302"]
    assert (
        r.headers["Content-Type"].startswith("text/plain") and "text/plain" in dashboard["content"]
    )
    assert r.text in dashboard["content"]["text/plain"]["schema"]["examples"]


async def test_request_bodies_are_the_server_schemas(server: Running) -> None:
    doc = await fetch_doc(server)
    # msgspec's schema of every body is CPU on a loaded machine: off the loop
    await asyncio.to_thread(_assert_request_schemas, doc)


def _assert_request_schemas(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    _, generated = msgspec.json.schema_components(
        list(S.SCHEMAS.values()), ref_template="#/components/schemas/{name}"
    )
    for name, cls in S.SCHEMAS.items():
        op = doc["paths"][f"/v1/lanes/{name}"]["post"]
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{cls.__name__}"
        assert schemas[cls.__name__] == generated[cls.__name__]
        assert {"protocolVersion", "lane"} <= set(schemas[cls.__name__]["required"])
    error = schemas["ErrorDetail"]["properties"]["code"]["enum"]
    assert set(error) == SPEC_ERROR_CODES


def sample(prop: dict[str, Any]) -> Any:
    """A valid value for a property of the generated schema."""
    if "anyOf" in prop:
        return sample(next(p for p in prop["anyOf"] if p.get("type") != "null"))
    if "enum" in prop:
        return prop["enum"][0]
    kind = prop.get("type")
    if kind == "string":
        if "sha256" in prop.get("pattern", ""):
            return "sha256:" + "0" * 64
        if "pattern" in prop:
            return "m1"
        return "x" * max(1, prop.get("minLength", 1))
    if kind in ("integer", "number"):
        return prop.get("minimum", 1)
    if kind == "object":
        return {}
    if kind == "boolean":
        return False
    raise AssertionError(f"no sample for {prop}")


async def test_required_fields_match_what_the_server_enforces(server: Running) -> None:
    """Fill a body one 'F: required' answer at a time: the server asks exactly for the
    fields the document lists as required."""
    doc = await fetch_doc(server)
    schemas = doc["components"]["schemas"]
    for name, cls in S.SCHEMAS.items():
        schema = schemas[cls.__name__]
        body: dict[str, Any] = {"protocolVersion": 1, "lane": "solo:main"}
        asked: set[str] = set()
        for _ in range(20):
            r = await server.op(name, body)
            message = r.message if r.status == 400 and r.code == "bad-request" else ""
            if not message.endswith(": required"):
                break
            field = message.removesuffix(": required")
            assert field in schema["properties"], (name, field)
            asked.add(field)
            body[field] = sample(schema["properties"][field])
        assert asked == set(schema["required"]) - {"protocolVersion", "lane"}, name
        assert r.status != 500


async def test_documented_security_is_enforced(server: Running) -> None:
    doc = await fetch_doc(server)
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, item in doc["paths"].items():
        for method, op in item.items():
            needs_token = op["security"] == [{"bearerAuth": []}]
            assert needs_token == (path.startswith("/v1") or path == "/metrics"), path
            if not needs_token:
                continue
            r = await server.request(method.upper(), path, token=None)
            assert r.status == 401, (method, path, r.status)
            assert method == "head" or r.code == "unauthorized", (method, path)
            assert "401" in op["responses"]
            assert op["responses"]["401"]["headers"]["WWW-Authenticate"]["required"] is True
            if method == "head":
                continue
            error = op["responses"]["401"]["content"]["application/json"]["schema"]
            name = "ErrorReply" if path.startswith("/v1") else "PlainErrorReply"
            assert error == {"$ref": f"#/components/schemas/{name}"}


def reply_struct(doc: dict[str, Any], method: str, path: str, status: int) -> type[wire.Wire]:
    """The protocol Struct the document names for this route's reply with this status."""
    responses = doc["paths"][path][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {path} answered an undocumented {status}"
    ref = responses[str(status)]["content"]["application/json"]["schema"]["$ref"]
    cls = getattr(wire, ref.rsplit("/", 1)[1])
    assert isinstance(cls, type) and issubclass(cls, wire.Wire)
    return cls


def assert_documented(doc: dict[str, Any], method: str, path: str, status: int, raw: str) -> None:
    """The reply is exactly its documented Struct: it decodes (every type as the Struct, hence
    as its published schema, says) and survives the round trip unchanged (no field the Struct
    lacks, none of the fields the schema requires left out)."""
    cls = reply_struct(doc, method, path, status)
    body = msgspec.json.decode(raw.encode())
    again = msgspec.to_builtins(msgspec.json.decode(raw.encode(), type=cls))
    assert again == body, f"{method} {path} {status}: not exactly {cls.__name__}"


async def test_reply_schemas_are_the_protocol_structs(server: Running) -> None:
    """Every reply component is msgspec's schema of the protocol Struct, with `required`
    listing every field the server always sends (all but the UNSET ones) and `coordinator`
    the closed set of kinds; Incident is one schema per kind (test_incident_details.py)."""
    doc = await fetch_doc(server)
    # msgspec's schema of every reply is seconds of CPU on a loaded machine: off the loop
    await asyncio.to_thread(_assert_reply_schemas, doc)


def _assert_reply_schemas(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    _, generated = msgspec.json.schema_components(
        list(wire.REPLIES), ref_template="#/components/schemas/{name}"
    )
    for name, schema in generated.items():
        if name in OVERRIDDEN:
            continue
        published = copy.deepcopy(schemas[name])
        cls = getattr(wire, name)
        sent = [
            f.encode_name for f in msgspec.structs.fields(cls) if f.default is not msgspec.UNSET
        ]
        assert published.pop("required", []) == sent, name
        schema.pop("required", None)
        kind = published["properties"].get("coordinator")
        if kind is not None:
            assert kind.pop("enum") == ["actor-sqlite", "actor-postgres", "local-sqlite"], name
            kind.pop("description")
        assert published == schema, name
    incident = schemas["Incident"]["oneOf"]
    assert len(incident) == len(get_args(wire.IncidentKind)) == len(OVERRIDDEN) - 1
    status = schemas["StatusReply"]
    assert "recentReceipts" in status["properties"]
    assert "recentReceipts" not in status["required"]  # only with includeReceipts
    assert "unreadableReceipts" not in status["properties"]  # the client's own count
    assert "receiptId" not in schemas["ReceiptReply"]["properties"]  # the client's own record


async def test_every_reply_is_exactly_its_documented_schema(start_server: StartServer) -> None:
    """Real replies of every route, with every list non-empty, are exactly the Struct the
    document names for their status (errors included)."""
    server = await start_server(credentials=[READER, BOUND])
    base = {"protocolVersion": 1, "lane": "solo:main", "machineId": "mA", "claimId": "cA"}
    ids = {"project": "p", "scene": "s"}
    doc = await fetch_doc(server)

    async def op(name: str, body: dict[str, Any], **kw: Any) -> Any:
        r = await server.op(name, body, **kw)
        assert_documented(doc, "POST", f"/v1/lanes/{name}", r.status, r.text)
        return r

    done = (await op("acquire", {**base, **ids, "promptHash": "h0"})).body["ticket"]
    await op("release", {**base, "ticketId": done["ticketId"], "outcome": "completed"})
    held = (await op("acquire", {**base, **ids, "promptHash": "h1"})).body["ticket"]
    await op("acquire", {**base, **ids, "promptHash": "h2", "machineId": "mB"})
    await op("acquire", {**base, **ids, "promptHash": "h1", "machineId": "mB"})  # collision
    tid = held["ticketId"]
    body = {**base, "ticketId": tid, "reasonCode": "provider-human-check"}
    await op("cooldown", {**body, "retryAfterSeconds": 60})
    await op("heartbeat", {**base, "ticketId": tid})
    await op("await", {**base, "ticketId": tid, "waitSeconds": 1})
    bad = "sha256:" + "0" * 64
    receipt = {**base, "ticketId": tid, "phase": "lease-acquired", "payload": {"k": [1, None]}}
    receipt["receiptId"] = f"{tid}:lease-acquired:{'0' * 16}"
    assert (await op("receipt", {**receipt, "contentHash": bad})).status == 201
    assert (await op("receipt", {**receipt, "contentHash": bad})).status == 200
    assert (await op("receipt", {**receipt, "contentHash": "sha256:" + "1" * 64})).status == 409
    assert (await op("await", {**base, "ticketId": "t_none"})).status == 404
    late = {**body, "ticketId": done["ticketId"], "retryAfterSeconds": 60}
    assert (await op("cooldown", late)).status == 409  # done: ticket-not-held
    assert (await op("cooldown", {**late, "ticketId": tid, "machineId": "mB"})).status == 403
    rec = {**base, "ticketId": done["ticketId"], "outcome": "completed"}
    assert (await op("reconcile", rec)).status == 409  # done, no job in flight
    other = {**rec, "machineId": "mB"}
    assert (await op("reconcile", other, token=BOUND.token)).status == 403  # machine-mismatch
    for name in sorted(S.SCHEMAS):  # the reader: a write is role-forbidden
        body = {**base, **ids, "promptHash": "h9", "ticketId": tid, **rec, "limit": 1}
        code = (await op(name, body, token=READER.token)).status
        assert code == (200 if name in ("status", "history") else 403), name
        # machine-mismatch (or 400 where the body lacks a field): documented either way
        await op(name, {**body, "machineId": "mB"}, token=BOUND.token)
    assert (await op("reconcile", {**rec, "ticketId": "t_none"})).status == 404
    assert (await op("acquire", {**base, "protocolVersion": 2})).status == 400
    for include in (False, True):
        await op("status", {**base, "includeReceipts": include})
    await op("history", {**base})
    free = {**base, "lane": "free:main"}
    await op("acquire", {**free, **ids, "promptHash": "h"})
    await op("status", {**free, "includeReceipts": True})

    reads: list[tuple[str, dict[str, str]]] = [
        ("/v1/lanes", {}),
        ("/v1/incidents", {}),
        ("/v1/incidents", {"lane": ""}),
        ("/v1/machines", {}),
        ("/v1/evidence", {"lane": "solo:main"}),
        ("/v1/evidence", {"lane": "solo:main", "ticketId": tid}),
        ("/v1/evidence", {"lane": "solo:main", "ticketId": "t_none"}),
        ("/v1/evidence", {}),
        ("/v1/overview", {}),
        ("/v1/overview", {"lane": "solo:main", "project": "p"}),
        ("/v1/overview", {"limit": "0"}),
        ("/v1/whoami", {}),
    ]
    for path, params in reads:
        r = await server.get(path, params=params)
        assert_documented(doc, "GET", path, r.status, r.text)
    r = await server.get("/v1/lanes", token=None)
    assert_documented(doc, "GET", "/v1/lanes", r.status, r.text)
    r = await server.get("/healthz", token=None)
    assert_documented(doc, "GET", "/healthz", r.status, r.text)
    r = await server.get("/readyz", token=None)
    assert_documented(doc, "GET", "/readyz", r.status, r.text)

    r = await server.get("/v1/overview", params={"lane": "solo:main"})
    reply = msgspec.json.decode(r.text.encode(), type=wire.Overview)
    [lane] = [x for x in reply.lanes if x.lane == "solo:main"]
    assert lane.held and lane.queued and lane.pause and lane.history.entries and lane.eta_error
    assert lane.recent_receipts and lane.receipt_mismatches and lane.projects == ["p"]
    assert reply.incidents and reply.machines and reply.log.entries
    ev = await server.get("/v1/evidence", params={"lane": "solo:main", "ticketId": tid})
    evidence = msgspec.json.decode(ev.text.encode(), type=wire.EvidenceReply)
    assert evidence.coordinator_evidence.collision is not None
    assert evidence.job_evidence is not None and evidence.job_evidence.found


async def test_overview_parameters_are_documented(server: Running) -> None:
    doc = await fetch_doc(server)
    op = doc["paths"]["/v1/overview"]["get"]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/Overview"
    assert {p["name"] for p in op["parameters"]} == {
        "history", "queued", "receipts", "incidents", "lane", "project", "limit",
    }  # fmt: skip
