"""Ports for the transport failures: one nobody listens on, one that never answers."""

from __future__ import annotations

import socket


def refused_port() -> int:
    """A port nothing listens on (bound, then closed): connection refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def silent_socket() -> socket.socket:
    """A listening socket that accepts connections (kernel backlog) and never answers; close
    it when done (`.getsockname()[1]` is its port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock
