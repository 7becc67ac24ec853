"""GET /openapi.json: a valid OpenAPI 3.1 document, generated from the server's own
msgspec schemas, that covers every route the aiohttp router serves."""

from __future__ import annotations

from typing import Any

import msgspec
from conftest import Running
from openapi_spec_validator import validate

from coordinator.http import schemas as S
from coordinator.http.openapi import Overview

SPEC_ERROR_CODES = {
    "bad-request", "unsupported-protocol", "unauthorized", "not-owner", "not-holder",
    "not-found", "method-not-allowed", "ticket-not-held", "receipt-conflict", "payload-too-large",
    "unsupported-media-type", "unavailable",
}  # fmt: skip


async def fetch_doc(srv: Running) -> dict[str, Any]:
    r = await srv.get("/openapi.json", token=None)  # public: it describes, it holds no data
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert isinstance(r.body, dict)
    return r.body


def router_routes(srv: Running) -> set[tuple[str, str]]:
    out = set()
    for route in srv.app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        out.add((route.method.lower(), route.resource.canonical))
    return out


def doc_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m, p) for p, item in doc["paths"].items() for m in item}


async def test_document_is_valid_openapi_3_1(server: Running) -> None:
    doc = await fetch_doc(server)
    assert doc["openapi"].startswith("3.1")
    validate(doc)  # raises on any violation of the OpenAPI 3.1 schema


async def test_every_registered_route_is_documented(server: Running) -> None:
    doc = await fetch_doc(server)
    served = router_routes(server)
    v1 = {r for r in served if r[1].startswith("/v1")}
    assert len(v1) >= 13  # 8 POST operations + 5 GET reads
    missing = v1 - doc_routes(doc)
    assert not missing, f"/v1 routes the document lacks: {sorted(missing)}"
    # ...and it documents nothing the server does not serve. (The control room's static
    # assets are the only routes deliberately left out.)
    assert doc_routes(doc) <= served
    undocumented = {r for r in served - doc_routes(doc) if not r[1].startswith("/control-room/")}
    assert not undocumented


async def test_request_bodies_are_the_server_schemas(server: Running) -> None:
    doc = await fetch_doc(server)
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
            assert r.status == 401 and r.code == "unauthorized", (method, path, r.status)
            assert "401" in op["responses"]
            error = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}


async def test_overview_reply_is_exactly_its_documented_schema(server: Running) -> None:
    """A real GET /v1/overview reply, with every list non-empty, decodes strictly (no field
    the document lacks, every documented type) into the schema the document publishes."""
    base = {"protocolVersion": 1, "lane": "solo:main", "machineId": "mA", "claimId": "cA"}
    ids = {"project": "p", "scene": "s"}
    done = (await server.op("acquire", {**base, **ids, "promptHash": "h0"})).body["ticket"]
    await server.op("release", {**base, "ticketId": done["ticketId"], "outcome": "completed"})
    held = (await server.op("acquire", {**base, **ids, "promptHash": "h1"})).body["ticket"]
    await server.op("acquire", {**base, **ids, "promptHash": "h2", "machineId": "mB"})
    tid = held["ticketId"]
    body = {**base, "ticketId": tid, "reasonCode": "provider-human-check"}
    await server.op("cooldown", {**body, "retryAfterSeconds": 60})
    bad = "sha256:" + "0" * 64
    receipt = {**base, "ticketId": tid, "phase": "lease-acquired", "payload": {}}
    receipt["receiptId"] = f"{tid}:lease-acquired:{'0' * 16}"
    r = await server.op("receipt", {**receipt, "contentHash": bad})
    assert r.status == 201, r.text

    doc = await fetch_doc(server)
    op = doc["paths"]["/v1/overview"]["get"]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/Overview"
    assert {p["name"] for p in op["parameters"]} == {
        "history", "queued", "receipts", "incidents", "lane", "project", "limit",
    }  # fmt: skip
    _, generated = msgspec.json.schema_components(
        [Overview], ref_template="#/components/schemas/{name}"
    )
    for name, schema in generated.items():
        assert doc["components"]["schemas"][name] == schema, name

    r = await server.get("/v1/overview", params={"lane": "solo:main"})
    assert r.status == 200, r.text
    reply = msgspec.json.decode(r.text.encode(), type=Overview)
    [lane] = reply.lanes
    assert lane.held and lane.queued and lane.pause and lane.history.entries
    assert lane.recent_receipts and lane.receipt_mismatches and lane.projects == ["p"]
    assert reply.incidents and reply.machines and reply.log.entries
