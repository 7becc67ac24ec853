"""A peer's server process (etcd, redis-server): started in its own dir of the bench's temp
dir, its output in a log file there, ready once a probe succeeds, stopped with SIGTERM (then
SIGKILL). It runs in a session of its own, so a Ctrl-C at the terminal reaches the bench,
whose `finally` stops it; tests.harness.cleanup stops it at interpreter exit should the bench
die before that."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.peers.base import Unavailable
from tests.harness import cleanup

READY_TIMEOUT = 60.0  # seconds: the machine is shared


def binary(name: str, package: str) -> str:
    """The path of a peer's server binary; Unavailable (naming the Debian package and the
    script that installs it) when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else "")
    if not path:
        raise Unavailable(f"{name} not installed (Debian's {package}: scripts/ensure-peers.sh)")
    return path


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    def __init__(self, name: str, cmd: list[str], cwd: Path) -> None:
        self.name = name
        cwd.mkdir(parents=True, exist_ok=True)
        self.log_path = cwd / f"{name}.log"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._cleanup = cleanup.track_process(self.proc, name=f"bench peer {name}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    async def wait_ready(
        self, probe: Callable[[], Awaitable[object]], timeout: float = READY_TIMEOUT
    ) -> None:
        """Until `probe()` returns without raising; RuntimeError (with the log's tail) when
        the process exits first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.tail()}")
            try:
                await probe()
                return
            except Exception as exc:
                last = exc
            await asyncio.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:g} s ({last}): {self.tail()}")

    def stop(self) -> None:
        cleanup.end_process(self.proc, grace=10.0)
        cleanup.unregister(self._cleanup)
