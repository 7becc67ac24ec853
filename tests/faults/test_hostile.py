"""(h) Hostile bodies and headers interleaved with the load: oversized and compressed-bomb
bodies, JSON nested thousands deep (also as a receipt payload), duplicate keys, broken gzip
and deflate, codings the server does not decode, bad tokens on every kind of route, oversized
and too many headers, broken framing. Sent over raw sockets (no HTTP client would send most
of them), in random order, while eight clients cycle.

Every answer is a 4xx in the JSON error shape (never a 5xx, never a dropped connection), no
answer and no log line carries the request's bytes (a marker in each hostile request is
looked for), the log holds no traceback, and the load checks clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import random
import secrets
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.kit import assert_clean, assert_no_traceback, pick, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import StartCoordinator, make_config
from tests.harness.load import Target

MARKER = "HOSTILE" + secrets.token_hex(6)  # in every hostile request; echoed nowhere
# A 404 never names the request path (test_404_and_405_echo_no_request_bytes, below)


@dataclass
class Hostile:
    name: str
    raw: bytes
    expect: frozenset[int]  # the 4xx statuses that are right for it


def _req(
    method: str,
    path: str,
    body: bytes = b"",
    token: str | None = None,
    headers: dict[str, str] | None = None,
    *,
    length: bool = True,
    version: str = "HTTP/1.1",
) -> bytes:
    lines = [f"{method} {path} {version}", "Host: x", f"X-Marker: {MARKER}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body and "Content-Type" not in (headers or {}):
        lines.append("Content-Type: application/json")
    if length and (body or method == "POST"):
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _body(lane: str = "solo:fa", /, **extra: Any) -> bytes:
    return json.dumps({"protocolVersion": 1, "lane": lane, "note": MARKER, **extra}).encode()


def hostile_requests(token: str) -> list[Hostile]:
    acq = "/v1/lanes/acquire"
    ident = {"machineId": "evil", "project": MARKER, "scene": "1", "promptHash": "h"}
    deep_obj = ('{"a":' * 3000 + "{}" + "}" * 3000).encode()
    rid = f"t_x:lease-acquired:{'0' * 16}"
    deep_receipt = (
        '{"protocolVersion":1,"lane":"solo:fa","machineId":"evil","ticketId":"t_x",'
        f'"receiptId":"{rid}","phase":"lease-acquired","contentHash":"sha256:{"0" * 64}",'
        '"payload":' + '{"a":' * 200 + f'"{MARKER}"' + "}" * 200 + "}"
    ).encode()
    bomb = gzip.compress(b'{"protocolVersion":1,"pad":"' + b" " * 8_000_000 + b'"}')
    junk_gzip = MARKER.encode() + b"\x1f\x8b\x08\x00garbage"
    post, get = "POST", "GET"
    gz, dfl = {"Content-Encoding": "gzip"}, {"Content-Encoding": "deflate"}
    m = MARKER.encode()
    h: list[Hostile] = []

    def add(name: str, expect: set[int], raw: bytes) -> None:
        h.append(Hostile(name, raw, frozenset(expect)))

    add("oversized body", {413}, _req(post, acq, _body(pad="x" * 70_000), token))
    add("gzip bomb (8 MB decoded)", {413}, _req(post, acq, bomb, token, gz))
    add("JSON array 5000 deep", {400}, _req(post, acq, b"[" * 5000 + b"]" * 5000, token))
    add("JSON object 3000 deep", {400}, _req(post, acq, deep_obj, token))
    add("receipt payload 200 deep", {400}, _req(post, "/v1/lanes/receipt", deep_receipt, token))
    dup = b'{"protocolVersion":1,"lane":"solo:fa","lane":"solo:fb","x":"' + m + b'"}'
    add("duplicate key", {400}, _req(post, "/v1/lanes/status", dup, token))
    dup_z = zlib.compress(b'{"protocolVersion":1,"protocolVersion":1,"lane":"solo:fa"}')
    add("deflate of a duplicate key", {400}, _req(post, "/v1/lanes/status", dup_z, token, dfl))
    add("broken gzip", {400}, _req(post, acq, junk_gzip, token, gz))
    add("broken gzip, no token", {401}, _req(post, acq, junk_gzip, None, gz))
    add("broken deflate", {400}, _req(post, acq, junk_gzip, token, dfl))
    br = {"Content-Encoding": "br"}
    add("br coding", {415}, _req(post, acq, b"\x0b\x02\x80" + m, token, br))
    add("zstd coding", {415}, _req(post, acq, m, token, {"Content-Encoding": "zstd"}))
    twice = gzip.compress(gzip.compress(_body(**ident)))
    add("two codings", {415}, _req(post, acq, twice, token, {"Content-Encoding": "gzip, gzip"}))
    pad = {"X-Pad": MARKER + "y" * 100_000}
    add("header of 100 KB", {400}, _req(get, "/v1/lanes", b"", token, pad))
    many = {f"X-H{i}": MARKER for i in range(200)}
    add("200 headers", {400}, _req(get, "/v1/lanes", b"", token, many))
    long_line = "/v1/lanes?q=" + MARKER + "z" * 20_000
    add("request line of 20 KB", {400}, _req(get, long_line, b"", token))
    bad_utf8 = b'{"protocolVersion":1,"lane":"solo:\xff\xfe' + m + b'"}'
    add("invalid UTF-8", {400}, _req(post, "/v1/lanes/status", bad_utf8, token))
    add("not JSON", {400}, _req(post, acq, m, token))
    add("empty body", {400, 415}, _req(post, acq, b"", token))
    add("top-level array", {400}, _req(post, acq, b"[" + json.dumps(MARKER).encode() + b"]", token))
    nan = b'{"protocolVersion":1,"lane":"solo:fa","leaseSeconds":NaN,"project":"' + m + b'"}'
    add("NaN", {400}, _req(post, acq, nan, token))
    huge = b'{"protocolVersion":1,"lane":"solo:fa","leaseSeconds":' + b"9" * 400 + b"}"
    add("integer of 400 digits", {400}, _req(post, acq, huge, token))
    types = json.dumps({"protocolVersion": "1", "lane": 5, "machineId": [MARKER]}).encode()
    add("wrong types", {400}, _req(post, acq, types, token))
    add("hostile lane name", {400}, _req(post, acq, _body("solo:../" + MARKER, **ident), token))
    add(
        "lane with a line break", {400}, _req(post, acq, _body("solo:a\n" + MARKER, **ident), token)
    )
    long_id = _body(machineId="evil", ticketId=MARKER * 600)
    add("ticketId of 10 KB", {400}, _req(post, "/v1/lanes/heartbeat", long_id, token))
    plain = {"Content-Type": "text/plain"}
    add("text/plain body", {400, 415}, _req(post, acq, _body(**ident), token, plain))
    for cl in ("-1", "abc"):
        raw = _req(post, acq, b"", token, {"Content-Length": cl}, length=False)
        add(f"Content-Length: {cl}", {400}, raw)
    chunked = {"Transfer-Encoding": "chunked"}
    raw = _req(post, acq, b"zz\r\n" + m + b"\r\n0\r\n\r\n", token, chunked, length=False)
    add("bad chunk", {400}, raw)
    both = {**chunked, "Content-Length": "5"}
    raw = _req(post, acq, b"5\r\nhello\r\n0\r\n\r\n", token, both, length=False)
    add("chunked and Content-Length", {400}, raw)
    add("HTTP/9.9", {400, 505}, _req(get, "/v1/lanes", b"", token, version="HTTP/9.9"))
    add("not HTTP", {400}, f"{MARKER} /\r\n\r\n".encode())
    add("NUL in the path", {400, 404}, _req(get, "/v1/lanes%00" + MARKER, b"", token))
    add("unknown route", {404, 405}, _req(post, "/v1/lanes/" + MARKER, _body(), token))
    add("wrong method", {404, 405}, _req("DELETE", "/v1/lanes", b"", token))
    bad_tokens = {
        "no token": None,
        "wrong token": "wrong-" + MARKER,
        "token with a suffix": token + MARKER,
        "token of 5000 bytes": MARKER * 300,
        "non-ASCII token": "\xff\xfe" + MARKER,
        "two tokens": f"{token},{MARKER}",
    }
    routes = [
        ("GET", "/v1/lanes", b""),
        ("GET", "/v1/overview", b""),
        ("GET", "/metrics", b""),
        ("POST", "/v1/lanes/status", _body()),
        ("POST", acq, _body(**ident)),
    ]
    for label, bad in bad_tokens.items():
        for method, path, body in routes:
            raw = _req(method, path, body, bad)
            add(f"{label}: {method} {path}", {401}, raw)
    for method, path, body in routes[:2]:
        raw = _req(method, path, body, None, {"Authorization": "Basic " + MARKER})
        add(f"Basic scheme: {method} {path}", {401}, raw)
    return h


async def exchange(port: int, raw: bytes, timeout: float = 20.0) -> tuple[int | None, bytes]:
    """Send `raw` on a new connection, read to EOF: (status, whole reply); None: no reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    try:
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(raw)
            await writer.drain()
        data = b""
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            async with asyncio.timeout(timeout):
                while chunk := await reader.read(65536):
                    data += chunk
    finally:
        writer.close()
    if not data.startswith(b"HTTP/1."):
        return None, data
    return int(data.split(b" ", 2)[1]), data


def _error_shape(reply: bytes) -> bool:
    head, _, body = reply.partition(b"\r\n\r\n")
    if b"application/json" not in head.lower():
        return False
    try:
        got = json.loads(body)
    except ValueError:
        return False
    return isinstance(got, dict) and isinstance(got.get("error"), dict) and "code" in got["error"]


@pytest.mark.fault("(h) hostile bodies and headers interleaved with the load")
async def test_hostile_input_under_load(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    s = seed()
    rng = random.Random(s)
    srv = start_coordinator(tmp_path / "data", config=make_config())
    target = Target([srv.url], srv.token)
    catalogue = hostile_requests(srv.token)
    rounds = pick(2, 10)
    load = base_load(target, seed=s)
    answers: list[tuple[Hostile, int | None, bytes]] = []
    try:
        await asyncio.sleep(1.0)
        for _ in range(rounds):
            for h in rng.sample(catalogue, len(catalogue)):
                status, reply = await exchange(srv.port, h.raw)
                answers.append((h, status, reply))
                await asyncio.sleep(rng.uniform(0.0, 0.05))
        await asyncio.sleep(1.0)
    finally:
        await load.finish()
    report = await load.verify()
    await asyncio.sleep(0.3)  # the last log lines
    statuses = Counter(st for _, st, _ in answers)
    fives = [(h.name, st) for h, st, _ in answers if st is None or st >= 500]
    wrong = sorted({(h.name, st) for h, st, _ in answers if st not in h.expect})
    shapeless = sorted({h.name for h, st, r in answers if st is not None and not _error_shape(r)})
    echoed = sorted({h.name for h, _, r in answers if MARKER.encode() in r})
    row.report(report)
    row.note(
        f"{len(answers)} hostile requests ({len(catalogue)} kinds × {rounds}) answered "
        f"{dict(sorted(statuses.items(), key=str))}; 5xx or no answer {len(fives)}, "
        f"unexpected status {len(wrong)}, not the JSON error shape {len(shapeless)}, request "
        f"bytes echoed {len(echoed)}, in the log "
        f"{int(MARKER in srv.text)}; seed {s}"
    )
    assert_clean(report, load, [srv])
    assert not fives, fives[:10]
    assert not wrong, wrong
    assert not shapeless, shapeless
    assert not echoed, [(h.name, r[:600]) for h, _, r in answers if h.name in echoed][:2]
    assert MARKER not in srv.text, "request bytes in the log"
    assert_no_traceback([srv])


@pytest.mark.fault("(h2) a 404 or 405 echoes no request bytes")
async def test_404_and_405_echo_no_request_bytes(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    srv = start_coordinator(tmp_path / "data", config=make_config())
    cases = {
        "GET /<marker>, no token": _req("GET", "/" + MARKER, b"", None),
        "GET /v1/<marker>": _req("GET", "/v1/" + MARKER, b"", srv.token),
        "POST /v1/lanes/<marker>": _req("POST", "/v1/lanes/" + MARKER, _body(), srv.token),
        "<marker> /v1/lanes": _req(MARKER, "/v1/lanes", b"", srv.token),
    }
    echoed = {}
    for name, raw in cases.items():
        status, reply = await exchange(srv.port, raw)
        assert status is not None and 400 <= status < 500, (name, status, reply[:300])
        if MARKER.encode() in reply:
            echoed[name] = reply.partition(b"\r\n\r\n")[2][:160].decode(errors="replace")
    row.note(f"{len(echoed)} of {len(cases)} echo the request: {echoed}")
    assert_no_traceback([srv])
    assert not echoed, echoed
