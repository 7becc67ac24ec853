"""Connection limits of the real `lane-coordinator serve`, with real sockets on loopback and
short configured timeouts: a request head trickled in (slowloris) or never sent is closed
after header_timeout_seconds, an idle kept-alive connection after keepalive_timeout_seconds,
a body sent too slowly is answered 400 after body_timeout_seconds, a connection over
max_connections is answered 503 and closed at once, and accept() failing with EMFILE logs
one warning line, not a traceback per attempt."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from coordinator.config import Config, parse_config
from coordinator.errors import ConfigError
from coordinator.logs import RateLimitedLog
from tests.harness import CoordinatorProcess, make_config
from tests.harness.rawhttp import closed_within, connect, exchange, get, post, read_reply

HEADER_TIMEOUT = 1.0
KEEPALIVE_TIMEOUT = 3.0
BODY_TIMEOUT = 2.0


def no_traceback(srv: CoordinatorProcess) -> None:
    log = srv.text
    assert "Traceback" not in log and 'File "' not in log, log[-3000:]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    tmp = tmp_path_factory.mktemp("limits")
    config = make_config(
        header_timeout_seconds=HEADER_TIMEOUT,
        keepalive_timeout_seconds=KEEPALIVE_TIMEOUT,
        body_timeout_seconds=BODY_TIMEOUT,
    )
    proc = CoordinatorProcess(tmp / "data", config=config)
    yield proc
    proc.stop()
    no_traceback(proc)


# ---------------------------------------------------------------- request heads


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    srv: CoordinatorProcess,
) -> None:
    with connect(srv.port) as sock:
        took = closed_within(sock, 8)
    assert took is not None, "an idle new connection was never closed"
    assert HEADER_TIMEOUT * 0.5 <= took <= HEADER_TIMEOUT + 2.5, took


def test_a_trickled_request_head_is_closed_within_the_header_timeout(
    srv: CoordinatorProcess,
) -> None:
    """Slowloris: a header line every 0.2 s, never the blank line that ends the head."""
    start = time.monotonic()
    closed = None
    with connect(srv.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.2)
        for i in range(40):  # 8 s at most
            try:
                sock.sendall(b"X-Slow-%d: y\r\n" % i)
                if not sock.recv(4096):
                    closed = time.monotonic() - start
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = time.monotonic() - start
                break
    assert closed is not None, "a trickled head kept its connection for 8 s"
    assert closed <= HEADER_TIMEOUT + 2.5, closed


def test_the_next_head_on_a_kept_alive_connection_has_the_same_deadline(
    srv: CoordinatorProcess,
) -> None:
    with connect(srv.port) as sock:
        sock.sendall(get("/healthz", close=False))
        assert read_reply(sock).status == 200
        sock.sendall(b"GET /heal")  # and nothing more
        took = closed_within(sock, 8)
    assert took is not None
    assert took < KEEPALIVE_TIMEOUT - 0.5, took  # the header deadline, not the idle one


def test_heads_sent_in_time_are_served(srv: CoordinatorProcess) -> None:
    with connect(srv.port) as sock:
        for i in range(3):  # three requests, each head in pieces but in time
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            time.sleep(0.2)
            sock.sendall(b"Host: x\r\n\r\n")
            reply = read_reply(sock)
            assert reply.status == 200 and reply.json == {"ok": True}, i


# ---------------------------------------------------------------- idle and bodies


def test_an_idle_kept_alive_connection_is_closed_after_the_keepalive_timeout(
    srv: CoordinatorProcess,
) -> None:
    with connect(srv.port) as sock:
        sock.sendall(get("/healthz", close=False))
        assert read_reply(sock).status == 200
        took = closed_within(sock, KEEPALIVE_TIMEOUT + 5)
    assert took is not None, "an idle kept-alive connection was never closed"
    assert KEEPALIVE_TIMEOUT - 1.5 <= took <= KEEPALIVE_TIMEOUT + 2.5, took


def test_a_body_sent_too_slowly_is_400(srv: CoordinatorProcess) -> None:
    head = post("/v1/lanes/status", b"x" * 100, srv.token)[:-100]  # the head only
    start = time.monotonic()
    with connect(srv.port) as sock:
        sock.sendall(head + b'{"protocolVersion":1,')
        reply = read_reply(sock, timeout=BODY_TIMEOUT + 8)
    took = time.monotonic() - start
    assert reply.status == 400, reply.raw
    assert reply.json["error"] == {
        "code": "bad-request",
        "message": f"body: not received within {BODY_TIMEOUT:g} s",
    }
    assert BODY_TIMEOUT - 0.5 <= took <= BODY_TIMEOUT + 3, took


# ---------------------------------------------------------------- the maximum


def test_connections_over_the_maximum_are_refused_at_once(tmp_path: Path) -> None:
    config = make_config(max_connections=3, header_timeout_seconds=30.0)
    srv = CoordinatorProcess(tmp_path / "data", config=config)
    try:
        held = [connect(srv.port) for _ in range(3)]
        time.sleep(0.3)  # accepted and counted
        for _ in range(5):
            with connect(srv.port) as extra:
                start = time.monotonic()
                reply = read_reply(extra, timeout=5)
                assert closed_within(extra, 5) is not None
            assert time.monotonic() - start < 2
            assert reply.status == 503, reply.raw
            assert reply.headers["content-type"] == "application/json"
            assert reply.headers["connection"] == "close"
            body = reply.json
            assert body["coordinator"] == "actor-sqlite"
            assert body["error"]["code"] == "unavailable"
            assert "maximum of 3" in body["error"]["message"]
        held.pop().close()
        time.sleep(0.3)
        ok = exchange(srv.port, get("/healthz"))  # a freed place is served again
        assert ok.status == 200
        for sock in held:
            sock.close()
    finally:
        srv.stop()
    no_traceback(srv)
    [line] = srv.events("http.connection_refused")  # five refusals, one rate-limited line
    assert line["level"] == "warning" and line["limit"] == 3


# ---------------------------------------------------------------- EMFILE

# `serve` with a hard open-file limit of 64 (it cannot raise it), so accept() runs out.
LOW_NOFILE = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
    "from coordinator.cli import main; sys.exit(main())"
)


def test_accept_out_of_descriptors_logs_one_line_not_a_traceback_per_attempt(
    tmp_path: Path,
) -> None:
    config = make_config(header_timeout_seconds=60.0)
    srv = CoordinatorProcess(
        tmp_path / "data", config=config, command=[sys.executable, "-c", LOW_NOFILE]
    )
    conns: list[socket.socket] = []
    try:
        for _ in range(90):  # beyond the 64 descriptors: the kernel queues the rest
            conns.append(connect(srv.port))
        time.sleep(3.5)  # asyncio retries accept() every second
        for sock in conns:
            sock.close()
        conns.clear()
        time.sleep(1.5)
        ok = exchange(srv.port, get("/healthz"))  # serving again once descriptors are free
        assert ok.status == 200
    finally:
        for sock in conns:
            sock.close()
        srv.stop()
    no_traceback(srv)
    assert "socket.accept() out of system resource" not in srv.text
    [line] = srv.events("http.accept_failed")
    assert line["level"] == "warning" and line["error"] == "EMFILE"
    [limit] = srv.events("http.open_file_limit")  # said once at startup, with the numbers
    assert limit["limit"] == 64


# ---------------------------------------------------------------- the settings


def test_the_limits_have_safe_defaults() -> None:
    cfg = Config()
    assert cfg.max_connections == 1000
    assert cfg.header_timeout_seconds == 10.0
    assert cfg.body_timeout_seconds == 30.0
    assert cfg.keepalive_timeout_seconds == 75.0
    assert parse_config({}) == cfg


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_connections", 0),
        ("max_connections", 1.5),
        ("max_connections", 100_001),
        ("header_timeout_seconds", 0),
        ("header_timeout_seconds", 301),
        ("body_timeout_seconds", 0.5),
        ("keepalive_timeout_seconds", 3601),
        ("keepalive_timeout_seconds", True),
    ],
)
def test_limits_out_of_range_are_refused(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({key: value})


def test_limits_are_read_from_the_config_file() -> None:
    raw = {
        "max_connections": 50,
        "header_timeout_seconds": 2,
        "body_timeout_seconds": 5.5,
        "keepalive_timeout_seconds": 20,
    }
    cfg = parse_config(raw)
    assert (cfg.max_connections, cfg.header_timeout_seconds) == (50, 2.0)
    assert (cfg.body_timeout_seconds, cfg.keepalive_timeout_seconds) == (5.5, 20.0)


def test_a_recurring_warning_is_one_line_per_interval_with_a_count() -> None:
    now = [100.0]
    warn = RateLimitedLog("test.event", interval=60.0, clock=lambda: now[0])
    with structlog.testing.capture_logs() as logged:
        assert warn(remote="a") is True  # the first one is said at once
        for _ in range(5):
            now[0] += 1
            assert warn(remote="b") is False
        now[0] += 60
        assert warn(remote="c") is True
    assert [(e["event"], e["count"], e["remote"]) for e in logged] == [
        ("test.event", 1, "a"),
        ("test.event", 6, "c"),  # five held back, and this one
    ]
    assert all(e["log_level"] == "warning" for e in logged)
