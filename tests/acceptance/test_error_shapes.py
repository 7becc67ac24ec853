"""Every error the real process sends is the protocol's JSON shape, those aiohttp's own HTTP
parser raises included (an oversized header, a bad request line, bad chunking): 400
bad-request with a fixed message that never echoes the request. Content-Encoding problems
are JSON errors too (415 for a coding the server does not decode, 400 for data that does not
decode), and a request without a valid token is refused 401 before its body is decoded.
None of it writes a traceback: at most one rate-limited warning line per kind."""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Iterator

import pytest

from tests.harness import CoordinatorProcess, make_config
from tests.harness.rawhttp import RawReply, connect, exchange, get, post

MARKER = "Echo-Me-Not-" + "q" * 24  # if a reply or the log shows it, the request was echoed
STATUS = b'{"protocolVersion":1,"lane":"solo:main"}'


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(tmp_path_factory.mktemp("shapes") / "data", config=make_config())
    yield proc
    proc.stop()


def assert_shape(reply: RawReply, status: int, code: str) -> str:
    """The error shape with this status and code; returns the message."""
    assert reply.status == status, reply.raw[:500]
    assert reply.headers["content-type"].startswith("application/json"), reply.raw[:500]
    body = reply.json
    assert set(body) == {"coordinator", "error"}, body
    assert body["coordinator"] == "actor-sqlite"
    assert set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message: str = body["error"]["message"]
    assert message and MARKER not in message
    assert MARKER.encode() not in reply.raw
    return message


def quiet_log(srv: CoordinatorProcess, start: int) -> list[str]:
    """The log lines since `start`, checked: no traceback, no echo of the request."""
    lines = srv.lines[start:]
    text = "\n".join(lines)
    assert "Traceback" not in text and 'File "' not in text, text[-3000:]
    assert "Unhandled exception" not in text and MARKER not in text, text[-3000:]
    return lines


def count(lines: list[str], event: str) -> int:
    return sum(1 for ln in lines if f'"event": "{event}"' in ln)


# ---------------------------------------------------------------- the parser's refusals

MALFORMED = {
    "a 100 KB header": (
        b"GET /v1/lanes HTTP/1.1\r\nHost: x\r\nX-Pad: "
        + MARKER.encode()
        + b"y" * 100_000
        + b"\r\n\r\n"
    ),
    "a too long request line": (
        b"GET /v1/lanes?x=" + MARKER.encode() + b"A" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    ),
    "not HTTP": MARKER.encode() + b" WORLD\r\n\r\n",
    "an unknown HTTP version": b"GET /v1/lanes HTTP/9.9\r\n\r\n",
    "a bad Content-Length": (
        b"POST /v1/lanes/status HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + MARKER.encode()
        + b"\r\n\r\n"
    ),
    "bad chunking": (
        b"POST /v1/lanes/status HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + MARKER.encode() + b"\r\nabc\r\n0\r\n\r\n"
    ),
    "too many headers": (
        b"GET /v1/lanes HTTP/1.1\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(300)) + b"\r\n"
    ),
    "an Expect the server cannot meet": (
        b"POST /v1/lanes/status HTTP/1.1\r\nHost: x\r\nExpect: " + MARKER.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    ),
}


def test_requests_the_parser_refuses_get_the_error_shape(srv: CoordinatorProcess) -> None:
    start = len(srv.lines)
    for what, raw in MALFORMED.items():
        reply = exchange(srv.port, raw)
        message = assert_shape(reply, 400, "bad-request")
        assert message.startswith(("request:", "body:", "Expect:")), (what, message)
    long_header = assert_shape(exchange(srv.port, MALFORMED["a 100 KB header"]), 400, "bad-request")
    assert "longer than 8190 bytes" in long_header
    assert len(exchange(srv.port, MALFORMED["a 100 KB header"]).raw) < 1000  # nothing echoed
    ok = exchange(srv.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert ok.status == 200  # still serving
    lines = quiet_log(srv, start)
    assert count(lines, "http.malformed_request") <= 1  # rate-limited: one line a minute


# ---------------------------------------------------------------- content encodings


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd", "gzip, br", "bogus"])
def test_without_a_token_the_body_is_never_decoded(srv: CoordinatorProcess, coding: str) -> None:
    """401 before the body is looked at, whatever its coding; no traceback per request."""
    start = len(srv.lines)
    for _ in range(3):
        raw = post("/v1/lanes/status", b"this is not " + MARKER.encode(), Content_Encoding=coding)
        assert_shape(exchange(srv.port, raw), 401, "unauthorized")
    lines = quiet_log(srv, start)
    assert count(lines, "http.unauthorized") <= 1


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, deflate", "x-" + MARKER])
def test_a_coding_the_server_does_not_decode_is_415(srv: CoordinatorProcess, coding: str) -> None:
    start = len(srv.lines)
    raw = post("/v1/lanes/status", STATUS, srv.token, Content_Encoding=coding)
    message = assert_shape(exchange(srv.port, raw), 415, "unsupported-media-type")
    assert message.startswith("Content-Encoding:"), message
    quiet_log(srv, start)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", b"this is not gzip " + MARKER.encode()),
        ("gzip", gzip.compress(STATUS)[:-9]),  # cut short
        ("gzip", gzip.compress(STATUS) + b"trailing"),
        ("deflate", b"this is not deflate"),
    ],
    ids=["gzip-garbage", "gzip-cut-short", "gzip-trailing-bytes", "deflate-garbage"],
)
def test_data_that_does_not_decode_is_400(
    srv: CoordinatorProcess, coding: str, data: bytes
) -> None:
    start = len(srv.lines)
    raw = post("/v1/lanes/status", data, srv.token, Content_Encoding=coding)
    message = assert_shape(exchange(srv.port, raw), 400, "bad-request")
    assert message.startswith("body:"), message
    quiet_log(srv, start)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", gzip.compress(STATUS)),
        ("x-gzip", gzip.compress(STATUS)),
        ("deflate", zlib.compress(STATUS)),
        ("identity", STATUS),
    ],
    ids=["gzip", "x-gzip", "deflate", "identity"],
)
def test_supported_codings_are_decoded(srv: CoordinatorProcess, coding: str, data: bytes) -> None:
    raw = post("/v1/lanes/status", data, srv.token, Content_Encoding=coding)
    reply = exchange(srv.port, raw)
    assert reply.status == 200, reply.raw[:500]
    assert reply.json["lane"] == "solo:main"


def test_a_compressed_body_over_the_limit_once_decoded_is_413(srv: CoordinatorProcess) -> None:
    big = STATUS[:-1] + b',"pad":"' + b"x" * 200_000 + b'"}'
    raw = post("/v1/lanes/status", gzip.compress(big), srv.token, Content_Encoding="gzip")
    assert_shape(exchange(srv.port, raw), 413, "payload-too-large")


# ---------------------------------------------------------------- duplicate keys


def test_a_duplicate_key_is_400_not_the_last_value(srv: CoordinatorProcess) -> None:
    body = b'{"protocolVersion":1,"lane":"solo:main","lane":"duo:main"}'
    message = assert_shape(
        exchange(srv.port, post("/v1/lanes/status", body, srv.token)), 400, "bad-request"
    )
    assert "duplicate key 'lane'" in message


def test_a_client_gone_mid_body_is_not_an_internal_error(srv: CoordinatorProcess) -> None:
    start = len(srv.lines)
    head = post("/v1/lanes/status", b"x" * 100, srv.token)[:-100]
    with connect(srv.port) as sock:
        sock.sendall(head + b'{"protocolVersion":1,')
        time.sleep(0.3)  # the handler is reading the body
    time.sleep(0.5)
    assert exchange(srv.port, get("/healthz")).status == 200
    lines = quiet_log(srv, start)
    assert count(lines, "http.internal_error") == 0, lines
