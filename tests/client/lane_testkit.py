"""Test kit for the client tests: the REAL coordinator (create_app) on 127.0.0.1:<port 0>
in its own thread and loop, so async library tests and blocking CLI subprocesses can both
call it; small fake servers for the fail-closed causes; `lane` subprocess helpers."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from loopthread import LoopThread

from coordinator.clock import Clock, ManualClock
from coordinator.config import Config
from coordinator.http.app import create_app

REPO = Path(__file__).resolve().parents[2]
LANE_BIN = Path(sys.executable).parent / "lane"

ROUTES = {"render": 1, "self-test": 1, "drill": 1}
LANES = {"render:wide": 2}
UNENFORCED_LANE = "free:main"


@dataclass
class Server:
    url: str
    port: int
    runner: web.AppRunner
    thread: LoopThread
    token: str = ""
    data_dir: Path | None = None
    clock: Clock | None = None
    hits: list[str] = field(default_factory=list)

    def advance(self, seconds: float) -> None:
        """Move a ManualClock (on the server's loop, where its sleepers live)."""
        assert isinstance(self.clock, ManualClock)
        clock = self.clock

        async def adv() -> None:
            clock.advance(seconds)
            await asyncio.sleep(0.05)

        self.thread.call(adv)


def serve_app(make_app: Callable[[], web.Application]) -> tuple[LoopThread, web.AppRunner, int]:
    lt = LoopThread()

    async def start() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return runner, port

    runner, port = lt.call(start)
    return lt, runner, port


def stop_server(s: Server) -> None:
    s.thread.call(s.runner.cleanup)
    s.thread.stop()


def start_coordinator(tmp: Path, clock: Clock | None = None) -> Server:
    token = secrets.token_urlsafe(32)
    data = tmp / "coordinator-data"
    config = Config(routes=dict(ROUTES), lanes=dict(LANES))
    lt, runner, port = serve_app(lambda: create_app(config, [token.encode()], data, clock))
    return Server(f"http://127.0.0.1:{port}", port, runner, lt, token, data, clock)


def fake_server(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Server:
    def make() -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        return app

    lt, runner, port = serve_app(make)
    return Server(f"http://127.0.0.1:{port}", port, runner, lt)


def shared_env(base: dict[str, str], server: Server, machine: str = "studio-a") -> dict[str, str]:
    env = dict(base)
    env.update(
        LANE_COORDINATOR_URL=server.url,
        LANE_TOKEN=server.token,
        LANE_MACHINE_ID=machine,
    )
    return env


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def lane(*args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120) -> Run:
    """Run the installed `lane` console script."""
    p = subprocess.run(
        [str(LANE_BIN), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )
    return Run(p.returncode, p.stdout, p.stderr)
