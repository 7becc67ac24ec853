"""HTTP/1.1 by hand over loopback sockets: for what no HTTP client will send (malformed
requests, slowly trickled heads, idle or surplus connections) and for reading exactly what
the server wrote back."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RawReply:
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_reply(sock: socket.socket, timeout: float = 10.0) -> RawReply:
    """One reply: its head, then Content-Length bytes of body (or up to EOF)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a reply head: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    while length is None or len(body) < int(length):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawReply(status, headers, body, data)


def exchange(port: int, request: bytes, timeout: float = 10.0) -> RawReply:
    """Send `request` on a new connection and read one reply."""
    with connect(port, timeout) as sock:
        sock.sendall(request)
        return read_reply(sock, timeout)


def closed_within(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes `sock` (EOF or reset; whatever it sends first is
    read and dropped), or None if still open after `limit` seconds."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while (elapsed := time.monotonic() - start) < limit:
        try:
            if not sock.recv(65536):
                return elapsed
        except TimeoutError:
            continue
        except ConnectionResetError:
            return elapsed
    return None


def get(path: str, token: str | None = None, *, close: bool = True) -> bytes:
    """A GET request's bytes."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    conn = "Connection: close\r\n" if close else ""
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}{conn}\r\n".encode()


def post(path: str, body: bytes, token: str | None = None, **headers: str) -> bytes:
    """A POST request's bytes with Content-Type application/json (headers: Name_With=...
    becomes Name-With: ...) and Connection: close."""
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
