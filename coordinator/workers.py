"""`serve --workers N` on the PostgreSQL store: N replica processes of one host on one port.

Each worker is a whole replica — `serve --reuse-port` with the same arguments otherwise: its
own event loop, sessions, LISTEN session and alarm poller on the one database, exactly like
the replicas of the templated unit (deploy/lane-coordinator@.service) — and the kernel
spreads new connections over them (SO_REUSEPORT). One Python process runs its event loop on
one core; N workers use N (docs/performance.md#more-cores-workers).

This process only starts them and passes signals on: SIGTERM and SIGINT stop every worker
(each drains as a replica does), SIGHUP makes each re-read its token file. When a worker
exits on its own, the others are stopped and this process exits non-zero, so a service
manager restarts the whole set. `--port 0` is resolved here first: a socket bound to a free
port with SO_REUSEPORT (never listening, so it takes no connection) is kept open while the
workers run, and every worker binds that port.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
from types import FrameType


def worker_args(args: argparse.Namespace, port: int) -> list[str]:
    """The `serve` arguments of one worker: the same as ours, one process, the port shared."""
    out = ["serve", "--host", args.host, "--port", str(port), "--reuse-port"]
    out += ["--log-level", args.log_level]
    for flag, value in (
        ("--data-dir", args.data_dir),
        ("--store", args.store),
        ("--config", args.config),
        ("--token-file", args.token_file),
    ):
        if value is not None:
            out += [flag, str(value)]
    return out


def _reserve(host: str, port: int) -> tuple[socket.socket | None, int]:
    """(None, port) for a given port; for port 0 a bound socket on a free port and its
    number. Raises OSError when it cannot be bound."""
    if port != 0:
        return None, port
    family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except BaseException:
        sock.close()
        raise
    return sock, int(sock.getsockname()[1])


def run_workers(args: argparse.Namespace) -> int:
    """Start `args.workers` workers and supervise them (see the module docstring); returns
    this process's exit code."""
    reserved, port = _reserve(args.host, args.port)
    cmd = [sys.executable, "-m", "coordinator.cli", *worker_args(args, port)]
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def send(sig: int) -> None:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)

    def on_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        send(signal.SIGTERM)

    def on_hup(signum: int, frame: FrameType | None) -> None:
        send(signal.SIGHUP)

    old = {s: signal.signal(s, on_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hup)
    code = 0
    try:
        procs.extend(subprocess.Popen(cmd) for _ in range(args.workers))
        alive = {p.pid: p for p in procs}
        while alive:
            pid, status = os.wait()
            p = alive.pop(pid, None)
            if p is None:
                continue
            p.returncode = os.waitstatus_to_exitcode(status)
            if p.returncode != 0 and code == 0:
                code = p.returncode if p.returncode > 0 else 1
            if not stopping:  # a worker ended on its own: end the set
                stopping = True
                code = code or 1
                send(signal.SIGTERM)
    finally:
        send(signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=60)
        for s, handler in old.items():
            signal.signal(s, handler)
        if reserved is not None:
            reserved.close()
    return code
