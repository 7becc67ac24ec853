"""Requests the HTTP parser itself refuses (not even HTTP, an oversized request line or
header, a bad Content-Length) against the real process: a 400, one log line each, no
traceback and no echo of the request in the log, and the server keeps serving."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.harness import CoordinatorProcess, write_token_file

TOKEN = "malformed-token-0123456789-abcdefghijklmnopqrstu"
SECRETISH = "Bearer-looking-" + "s" * 40

RAW_REQUESTS = [
    b"HELLO WORLD\r\n\r\n",
    b"GET /v1/lanes?x=" + SECRETISH.encode() + b"A" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /v1/lanes HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"y" * 9000 + b"\r\n\r\n",
    b"POST /v1/lanes/status HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /v1/lanes HTTP/9.9\r\n\r\n",
]


def test_malformed_http_is_refused_without_a_traceback(tmp_path: Path) -> None:
    write_token_file(tmp_path / "token", TOKEN)
    (tmp_path / "c.toml").write_text("[routes.solo]\ncapacity = 1\n", encoding="utf-8")
    srv = CoordinatorProcess(tmp_path / "data", tmp_path / "token", tmp_path / "c.toml")
    try:
        host, port = srv.url.removeprefix("http://").split(":")
        for raw in RAW_REQUESTS:
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(raw)
                reply = conn.recv(200)
            assert reply.split(b"\r\n", 1)[0].split(b" ")[1][:1] == b"4", (raw[:40], reply)
        status, body = srv.request("GET", "/v1/lanes", TOKEN)
        assert status == 200 and body["coordinator"] == "actor-sqlite"
        time.sleep(0.3)  # let the log lines land
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
        srv.stop()
    log = "\n".join(srv.lines)
    assert "Traceback" not in log and 'File "' not in log, log[-3000:]
    assert SECRETISH not in log
    assert "malformed HTTP request" in log
