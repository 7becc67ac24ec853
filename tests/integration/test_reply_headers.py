"""Reply headers of the real server: 405 with Allow, WWW-Authenticate on 401, no caching or
sniffing of /v1 JSON, and a Server header that names no Python or aiohttp version."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tests.integration.kit import SOLO, acquire_body, assert_error, receipt_body, ticket_body

if TYPE_CHECKING:
    from tests.harness import Reply, Running


def assert_neutral_server(r: Reply) -> None:
    server = r.headers.get("Server", "")
    assert "python" not in server.lower() and "aiohttp" not in server.lower(), server
    assert not any(ch.isdigit() for ch in server), server  # no version of anything


def assert_v1_json_headers(r: Reply) -> None:
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    assert r.headers.get("Cache-Control") == "no-store", (r.status, r.headers)
    assert r.headers.get("X-Content-Type-Options") == "nosniff", (r.status, r.headers)
    assert_neutral_server(r)


async def test_wrong_method_is_405_with_allow(server: Running) -> None:
    r = await server.request("GET", "/v1/lanes/acquire")
    assert_error(r, 405, "method-not-allowed", "GET")
    assert r.headers["Allow"] == "POST"
    assert r.body["coordinator"] == "actor-sqlite"
    assert_v1_json_headers(r)
    r = await server.request("PATCH", "/v1/evidence")
    assert_error(r, 405, "method-not-allowed", "PATCH")
    assert r.headers["Allow"] == "GET, HEAD"


async def test_401_says_bearer(server: Running) -> None:
    for r in (
        await server.op("status", {"lane": SOLO}, token=None),
        await server.op("status", {"lane": SOLO}, token="wrong-" + "x" * 40),
        await server.get("/v1/lanes", headers={"Authorization": "Basic dXNlcjpwdw=="}),
        await server.get("/metrics", token=None),
    ):
        assert_error(r, 401, "unauthorized")
        assert r.headers.get("WWW-Authenticate") == 'Bearer realm="lane-coordinator"', r.headers
        assert r.headers.get("Cache-Control") == "no-store"
        assert_neutral_server(r)


async def test_every_v1_json_reply_is_no_store_and_nosniff(server: Running) -> None:
    a = await server.op("acquire", acquire_body())
    tid = a["ticket"]["ticketId"]
    q = await server.op("acquire", acquire_body(machine="mQ", claim="cQ", prompt="q"))
    qid = q["ticket"]["ticketId"]
    replies = [
        a,
        q,
        await server.op("heartbeat", ticket_body(SOLO, tid)),
        await server.op("receipt", receipt_body(SOLO, tid)),  # 201
        await server.op("status", {"lane": SOLO, "includeReceipts": True}),
        await server.op("history", {"lane": SOLO}),
        await server.op("await", ticket_body(SOLO, tid, waitSeconds=1)),
        await server.get("/v1/lanes"),
        await server.get("/v1/incidents"),
        await server.get("/v1/machines"),
        await server.get("/v1/evidence", params={"lane": SOLO, "ticketId": tid}),
        # errors
        await server.op("status", {"lane": "Bad:Lane"}),  # 400
        await server.op("status", {"lane": SOLO, "protocolVersion": 9}),  # 400
        await server.op("status", {"lane": SOLO}, token=None),  # 401
        await server.op("receipt", receipt_body(SOLO, qid, machine="mQ", claim="cQ")),  # 403
        await server.op("release", ticket_body(SOLO, "t_unknown")),  # 404
        await server.get("/v1/nothing-here"),  # 404
        await server.get("/v1/lanes/status"),  # 405
        await server.op("cooldown", ticket_body(SOLO, qid, "mQ", "cQ", reasonCode=(
            "provider-human-check"), retryAfterSeconds=60)),  # 409
        await server.op("status", {"lane": SOLO, "pad": "y" * 70000}),  # 413
        await server.request("POST", "/v1/lanes/status", data=b"{}",
                             headers={"Content-Type": "text/plain"}),  # 415
    ]  # fmt: skip
    statuses = [r.status for r in replies]
    assert {200, 201, 400, 401, 403, 404, 405, 409, 413, 415} <= set(statuses), statuses
    for r in replies:
        assert r.body["coordinator"] == "actor-sqlite", r.text
        assert_v1_json_headers(r)


async def test_no_reply_names_python_or_aiohttp(server: Running) -> None:
    replies = [
        await server.get("/healthz", token=None),
        await server.get("/openapi.json", token=None),
        await server.get("/control-room", token=None),
        await server.get("/control-room/assets/control-room.js", token=None),
        await server.get("/metrics"),
        await server.get("/v1/dashboard"),  # 302
        await server.get("/nothing", token=None),  # 404 outside /v1
        await server.request("HEAD", "/healthz", token=None),
    ]
    assert [r.status for r in replies] == [200, 200, 200, 200, 200, 302, 404, 200]
    for r in replies:
        assert_neutral_server(r)
        assert r.headers.get("X-Content-Type-Options") == "nosniff", r.headers
    assert replies[4].headers.get("Cache-Control") == "no-store"  # /metrics: token-gated


async def test_a_request_the_parser_refuses_names_no_version(server: Running) -> None:
    """aiohttp answers these itself, before any route or signal of the app runs."""
    host, port = server.url.removeprefix("http://").split(":")
    for raw in (b"HELLO WORLD\r\n\r\n", b"GET /v1/lanes HTTP/9.9\r\n\r\n"):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(raw)
            await writer.drain()
            head = (await asyncio.wait_for(reader.read(4096), 10)).split(b"\r\n\r\n")[0]
        finally:
            writer.close()
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].split(" ")[1].startswith("4"), lines
        server_hdr = [ln for ln in lines[1:] if ln.lower().startswith("server:")]
        assert server_hdr == ["Server: lane-coordinator"], lines
