"""The servers the bench measures, each its own process on a loopback port the OS picks:
`lane-coordinator serve` (SQLite lane files or a PostgreSQL store) and the bare aiohttp
handler (bench/bare_server.py). Both print "... listening on http://HOST:PORT"; the time from
spawn to that line is the time-to-listen. Output goes to a log file in the bench's temp dir
(its tail is quoted when a server fails to start)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.common import TOKEN

START_TIMEOUT = 600.0  # a restart over 10,000 lane files may take long: that is a figure
STORE_ENV = "LANE_COORDINATOR_STORE"  # never inherited: each server is told its store
LISTENING = " listening on http://"
REPO = Path(__file__).resolve().parents[1]  # `-m bench.bare_server` runs from here


def write_config(path: Path, *, max_lanes: int = 1000, max_connections: int = 1000) -> Path:
    """The bench's config: route `bench` with capacity 1 (every lane is `bench:<name>`)."""
    path.write_text(
        "default_lease_seconds = 300\n"
        f"max_lanes = {max_lanes}\n"
        f"max_connections = {max_connections}\n"
        '[routes."bench"]\ncapacity = 1\n'
    )
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != STORE_ENV}
    env["LANE_COORDINATOR_TOKEN"] = TOKEN
    return env


def _nofile(n: int) -> Callable[[], None]:
    def limit() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return limit


class ServerProcess:
    """A server process whose merged output is followed (see the module docstring)."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, nofile: int | None) -> None:
        self.name = name
        self.log_path = log_path
        self.url = ""
        self._log = log_path.open("a", encoding="utf-8")
        self._tail: list[str] = []
        self._listening = threading.Event()
        self.spawned_at = time.monotonic()
        self.listened_at = 0.0
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_nofile(nofile) if nofile is not None else None,
        )
        self._reader = threading.Thread(target=self._read, name=f"bench-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._tail = [*self._tail[-39:], line.rstrip("\n")]
            if not self.url and LISTENING in line:
                self.listened_at = time.monotonic()
                self.url = "http://" + line.split(LISTENING, 1)[1].split()[0].rstrip("/")
                self._listening.set()
        self._listening.set()

    def wait_listening(self, timeout: float = START_TIMEOUT) -> float:
        """Wait for the listening line; returns seconds from spawn to it."""
        if not self._listening.wait(timeout) or not self.url:
            self.kill()
            tail = "\n".join(self._tail[-15:])
            raise RuntimeError(f"{self.name} did not start listening:\n{tail}")
        return self.listened_at - self.spawned_at

    def tail(self, lines: int = 10) -> str:
        return "\n".join(self._tail[-lines:])

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM and wait (SIGKILL after `timeout`); returns seconds until it exited."""
        began = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)
        self._log.close()
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def coordinator_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "coordinator.cli", *args]


def start_coordinator(
    tmp: Path,
    name: str,
    config: Path,
    *,
    data_dir: Path | None = None,
    store: str | None = None,
    nofile: int | None = None,
    wait: bool = True,
) -> ServerProcess:
    """`lane-coordinator serve` on 127.0.0.1, port 0: on lane files in `data_dir` (default
    tmp/<name>-data) or, with `store`, on that PostgreSQL URL."""
    args = ["serve", "--host", "127.0.0.1", "--port", "0", "--config", str(config)]
    args += ["--log-level", "warning"]
    if store is not None:
        args += ["--store", store]
    else:
        args += ["--data-dir", str(data_dir or tmp / f"{name}-data")]
    srv = ServerProcess(name, coordinator_cmd(*args), tmp / f"{name}.log", nofile)
    if wait:
        srv.wait_listening()
    return srv


def start_bare(tmp: Path) -> ServerProcess:
    cmd = [sys.executable, "-m", "bench.bare_server", "0"]
    srv = ServerProcess("bare", cmd, tmp / "bare.log", None)
    srv.wait_listening()
    return srv


@contextlib.contextmanager
def running(srv: ServerProcess) -> Iterator[ServerProcess]:
    """Stop the server on leaving, whatever happened."""
    try:
        yield srv
    finally:
        srv.stop()


def migrate(tmp: Path, store: str) -> None:
    """`lane-coordinator migrate --store URL` (raises with its output when it fails)."""
    done = subprocess.run(
        coordinator_cmd("migrate", "--store", store),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    (tmp / "migrate.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"migrate exited {done.returncode}: {done.stderr.strip()[-500:]}")
