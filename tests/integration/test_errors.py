"""Errors (docs/protocol.md#error-codes): auth, media type, body size, schema, protocol, over
HTTP."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from coordinator.store.lock import LOCK_NAME
from tests.integration.kit import SOLO, acquire_body, assert_error, receipt_body, ticket_body

if TYPE_CHECKING:
    from tests.harness import Running

POSTS = ("acquire", "await", "heartbeat", "release", "receipt", "status", "history", "cooldown")
GETS = (
    "/v1/lanes",
    "/v1/incidents",
    "/v1/machines",
    "/v1/evidence?lane=solo:main",
    "/v1/overview",
    "/v1/dashboard",
)


def _valid(op: str, tid: str = "t_x") -> dict[str, Any]:
    """A schema-valid body for every POST endpoint (protocolVersion added by op())."""
    return {
        "acquire": acquire_body(),
        "await": ticket_body(SOLO, tid, waitSeconds=1),
        "heartbeat": ticket_body(SOLO, tid),
        "release": ticket_body(SOLO, tid),
        "receipt": receipt_body(SOLO, tid),
        "status": {"lane": SOLO},
        "history": {"lane": SOLO},
        "cooldown": ticket_body(SOLO, tid, reasonCode="provider-human-check", retryAfterSeconds=60),
    }[op]


REQUIRED = {
    "acquire": ("lane", "machineId", "project", "scene", "promptHash"),
    "await": ("lane", "machineId", "ticketId"),
    "heartbeat": ("lane", "machineId", "ticketId"),
    "release": ("lane", "machineId", "ticketId"),
    "receipt": ("lane", "machineId", "ticketId", "receiptId", "phase", "payload", "contentHash"),
    "status": ("lane",),
    "history": ("lane",),
    "cooldown": ("lane", "machineId", "ticketId", "reasonCode", "retryAfterSeconds"),
}


# ---------------------------------------------------------------- 401


@pytest.mark.parametrize(
    "auth",
    [
        None,
        "Bearer wrong-token-wrong-token-wrong-token-wrong",
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        "test-token-0123456789-abcdefghijklmnopqrstuvwxyz",  # the token without a scheme
        "Bearer test-token-0123456789-abcdefghijklmnopqrstuvwxy",  # one byte short
        "Bearer test-token-0123456789-abcdefghijklmnopqrstuvwxyzz",  # one byte long
    ],
)
async def test_every_v1_path_requires_the_bearer_token(server: Running, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    for op in POSTS:
        r = await server.op(op, _valid(op), token=None, headers=headers)
        assert_error(r, 401, "unauthorized")
        assert server.token not in r.text
    for path in GETS:
        r = await server.get(path, token=None, headers=headers)
        assert_error(r, 401, "unauthorized")
    # unknown /v1 paths are refused before anything else is said about them
    r = await server.get("/v1/nope", token=None, headers=headers)
    assert_error(r, 401, "unauthorized")
    assert nothing_written(server.data_dir)


async def test_bearer_scheme_is_case_insensitive(server: Running) -> None:
    r = await server.op(
        "status", {"lane": SOLO}, token=None, headers={"Authorization": f"bearer {server.token}"}
    )
    assert r.status == 200


async def test_a_second_token_is_accepted_while_rotating(start_server: Any) -> None:
    old, new = b"o" * 40, b"n" * 40
    server = await start_server(tokens=[old, new])
    for tok in (old, new):
        r = await server.op("status", {"lane": SOLO}, token=tok.decode())
        assert r.status == 200
    assert (await server.op("status", {"lane": SOLO})).status == 401


# ---------------------------------------------------------------- 415, 413


@pytest.mark.parametrize(
    "ctype",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_post_bodies_must_be_json(server: Running, ctype: str | None) -> None:
    for op in POSTS:
        data = json.dumps({"protocolVersion": 1, **_valid(op)}).encode()
        headers = {} if ctype is None else {"Content-Type": ctype}
        r = await server.request("POST", f"/v1/lanes/{op}", data=data, headers=headers)
        assert_error(r, 415, "unsupported-media-type", "Content-Type")


async def test_json_with_charset_is_accepted(server: Running) -> None:
    data = json.dumps({"protocolVersion": 1, "lane": SOLO}).encode()
    r = await server.request(
        "POST",
        "/v1/lanes/status",
        data=data,
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert r.status == 200, r.text


async def test_body_over_the_limit_is_413(server: Running) -> None:
    limit = server.config.max_body_bytes
    for op in POSTS:
        body = {"protocolVersion": 1, **_valid(op), "pad": "x" * limit}
        r = await server.post(f"/v1/lanes/{op}", body)
        assert_error(r, 413, "payload-too-large")


async def test_configured_body_limit_and_chunked_bodies(start_server: Any) -> None:
    server = await start_server(max_body_bytes=2048)
    body = {"protocolVersion": 1, **acquire_body(), "pad": "x" * 1500}
    assert (await server.post("/v1/lanes/acquire", body)).status == 200
    body["pad"] = "x" * 2100
    assert_error(await server.post("/v1/lanes/acquire", body), 413, "payload-too-large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the server must count
        data = json.dumps({"protocolVersion": 1, **acquire_body(prompt="c"), "pad": "y" * 4000})
        for i in range(0, len(data), 500):
            yield data[i : i + 500].encode()

    r = await server.request(
        "POST",
        "/v1/lanes/acquire",
        data=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert_error(r, 413, "payload-too-large")
    st = await server.ok("status", {"lane": SOLO})
    assert [t["promptHash"] for t in st["held"] + st["queued"]] == ["h1"]


# ---------------------------------------------------------------- 400


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"not json",
        b"{'a': 1}",
        b"\xff\xfe",
        b"[1,2]",
        b"null",
        b"42",
        b'"text"',
        b'{"a":1}{"b":2}',
    ],
)
async def test_bad_json_is_400(server: Running, raw: bytes) -> None:
    for op in POSTS:
        r = await server.request(
            "POST", f"/v1/lanes/{op}", data=raw, headers={"Content-Type": "application/json"}
        )
        assert_error(r, 400, "bad-request", "body")


@pytest.mark.parametrize("op", POSTS)
async def test_missing_fields_are_named(server: Running, op: str) -> None:
    for name in REQUIRED[op]:
        body = _valid(op)
        del body[name]
        r = await server.op(op, body)
        assert_error(r, 400, "bad-request", name)


@pytest.mark.parametrize("op", POSTS)
async def test_wrong_types_are_named(server: Running, op: str) -> None:
    for name in REQUIRED[op]:
        body = _valid(op)
        body[name] = 12345 if not isinstance(body[name], int | float) else "12345"
        r = await server.op(op, body)
        assert_error(r, 400, "bad-request", name)


async def test_unknown_fields_are_ignored(server: Running) -> None:
    r = await server.ok("acquire", acquire_body(futureField={"x": [1, 2]}, color="blue"))
    assert r["granted"] is True
    tid = r["ticket"]["ticketId"]
    r = await server.ok("heartbeat", ticket_body(SOLO, tid, extra=None))
    assert r["refreshed"] is True
    rc = await server.op("receipt", {**receipt_body(SOLO, tid), "signature": "zzz"})
    assert rc.status == 201
    r = await server.ok("status", {"lane": SOLO, "verbose": True})
    assert "verbose" not in r


@pytest.mark.parametrize("version", [2, 0, -1, "1", 1.5, None, True, [1]])
async def test_unsupported_protocol_lists_the_supported_ones(server: Running, version: Any) -> None:
    for op in POSTS:
        r = await server.post(f"/v1/lanes/{op}", {**_valid(op), "protocolVersion": version})
        assert_error(r, 400, "unsupported-protocol", "protocolVersion")
        assert "1" in r.message
        assert r.body["error"].get("supported") == [1]


async def test_missing_protocol_version_is_named(server: Running) -> None:
    for op in POSTS:
        r = await server.post(f"/v1/lanes/{op}", _valid(op))
        assert r.status == 400 and r.code in ("bad-request", "unsupported-protocol"), r.text
        assert "protocolVersion" in r.message


@pytest.mark.parametrize(
    "lane",
    [
        "solo",
        "Solo:main",
        "solo:Main",
        ":main",
        "solo:",
        "solo:main:x",
        "../x:y",
        "solo:ma in",
        "-solo:main",
        "s" * 65 + ":main",
        "solo:" + "a" * 65,
        "solo:mäin",
        "",
        "solo:main\n",  # "$" alone would accept it: the same file as solo:main, a 2nd actor
        "solo\n:main",
    ],
)
async def test_bad_lane_names_are_400_and_never_a_path(server: Running, lane: str) -> None:
    for op in POSTS:
        r = await server.op(op, {**_valid(op), "lane": lane})
        assert_error(r, 400, "bad-request", "lane")
    assert nothing_written(server.data_dir)


async def test_machine_and_claim_ids_are_validated(server: Running) -> None:
    for machine in ("", "has space", "m" * 65, "slash/y", "é", "mA\n"):
        r = await server.op("acquire", acquire_body(machine=machine))
        assert_error(r, 400, "bad-request", "machineId")
    for claim in ("", "c" * 129):
        r = await server.op("acquire", acquire_body(claim=claim))
        assert_error(r, 400, "bad-request", "claimId")
    r = await server.op("acquire", acquire_body(machine="M.a_c-1" * 9 + "X", claim="c" * 128))
    assert r.status == 200, r.text


# ---------------------------------------------------------------- 404, 403, 409


async def test_unknown_ticket_is_404_on_every_ticket_call(server: Running) -> None:
    await server.ok("acquire", acquire_body())
    for op in ("await", "heartbeat", "release", "receipt", "cooldown"):
        assert_error(await server.op(op, _valid(op, "t_unknown")), 404, "not-found", "ticketId")


async def test_unknown_path_and_wrong_method(server: Running) -> None:
    r = await server.get("/v1/nothing-here")
    assert_error(r, 404, "not-found")
    r = await server.get("/v1/lanes/acquire")
    assert_error(r, 405, "method-not-allowed", "method")
    assert r.headers["Allow"] == "POST"
    assert "Traceback" not in r.text
    for method, path, allow in (
        ("PUT", "/v1/lanes/status", "POST"),
        ("DELETE", "/v1/lanes/receipt", "POST"),
        ("POST", "/v1/lanes", "GET, HEAD"),
        ("POST", "/healthz", "GET, HEAD"),
    ):
        r = await server.request(method, path)
        assert_error(r, 405, "method-not-allowed", method)
        assert r.headers["Allow"] == allow, (method, path, r.headers)


async def test_v1_errors_carry_the_coordinator_kind(server: Running) -> None:
    """docs/protocol.md#http-api: every /v1 JSON reply carries `coordinator`, errors included."""
    for r in (
        await server.op("status", {"lane": "Bad:lane"}),
        await server.op("release", _valid("release", "t_unknown")),
        await server.get("/v1/lanes", token=None),
    ):
        assert r.body["coordinator"] == "actor-sqlite", r.text
        assert set(r.body) == {"coordinator", "error"}, r.text


async def test_protocol_version_one_point_zero_is_version_one(server: Running) -> None:
    r = await server.op("status", {"lane": SOLO, "protocolVersion": 1.0})
    assert r.status == 200, r.text
    assert_error(
        await server.op("status", {"lane": SOLO, "protocolVersion": 1.5}),
        400,
        "unsupported-protocol",
        "protocolVersion",
    )


async def test_owner_and_held_errors(server: Running) -> None:
    a = (await server.ok("acquire", acquire_body()))["ticket"]["ticketId"]
    q = (await server.ok("acquire", acquire_body(prompt="q")))["ticket"]["ticketId"]
    assert_error(await server.op("await", ticket_body(SOLO, a, "mZ", "cZ")), 403, "not-owner")
    cd = _valid("cooldown", a)
    cd["machineId"] = "mZ"
    assert_error(await server.op("cooldown", cd), 403, "not-owner")
    assert_error(await server.op("cooldown", _valid("cooldown", q)), 409, "ticket-not-held")
    r = await server.op("receipt", receipt_body(SOLO, a, machine="mZ"))
    assert_error(r, 403, "not-holder")


async def test_a_body_that_does_not_decode_is_400(server: Running) -> None:
    r = await server.request(
        "POST",
        "/v1/lanes/status",
        data=b"this is not gzip",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert_error(r, 400, "bad-request", "body")


async def test_a_compressed_bomb_is_413(server: Running) -> None:
    body = json.dumps({"protocolVersion": 1, "lane": SOLO, "pad": "x" * 5_000_000}).encode()
    packed = gzip.compress(body)
    assert len(packed) < server.config.max_body_bytes
    r = await server.request(
        "POST",
        "/v1/lanes/status",
        data=packed,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert_error(r, 413, "payload-too-large")


def nothing_written(data_dir: Path) -> bool:
    """No file in the data dir but the data dir's lock (taken at startup)."""
    return not data_dir.exists() or {p.name for p in data_dir.iterdir()} <= {LOCK_NAME}
