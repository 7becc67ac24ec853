"""Test kit for the driver tests: the REAL coordinator (`create_app`) on 127.0.0.1:<port 0>
in its own thread and event loop (so async tests, SyncTurn tests and subprocess drivers can all
call it), with a ManualClock moved by `coord.advance(s)` and a switchable fault layer that
imitates an old coordinator (404 on one path) or a broken network (503, dropped connection)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from loopthread import LoopThread

from client.api import LaneClient
from coordinator.clock import Clock, ManualClock
from coordinator.config import Config
from coordinator.http.app import create_app

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

ROUTES = {"drill": 1, "render": 1}
LANE = "drill:example"
OTHER_LANE = "render:main"
FREE_LANE = "free:main"  # route without a capacity: unenforced


@dataclass
class Coord:
    url: str
    token: str
    clock: Clock
    data_dir: Path
    runner: web.AppRunner
    thread: LoopThread
    #: path -> fault kind: "404-text" (aiohttp's own 404, like an old server), "404-json",
    #: "503" (SPEC error body), "drop" (connection closed without an answer)
    faults: dict[str, str] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    def advance(self, seconds: float) -> None:
        """Move the ManualClock on the server's loop (where its sleepers live)."""
        clock = self.clock
        assert isinstance(clock, ManualClock)

        async def adv() -> None:
            clock.advance(seconds)
            await asyncio.sleep(0.05)

        self.thread.call(adv)

    def client(
        self, machine: str = "studio-a", claim: str | None = "claim-a", **kw: Any
    ) -> LaneClient:
        return LaneClient(self.url, self.token, machine, claim, **kw)

    def env(self, base: dict[str, str], machine: str = "studio-a") -> dict[str, str]:
        env = dict(base)
        env.update(LANE_COORDINATOR_URL=self.url, LANE_TOKEN=self.token, LANE_MACHINE_ID=machine)
        return env

    def stop(self) -> None:
        self.thread.call(self.runner.cleanup)
        self.thread.stop()


def start_coordinator(data_dir: Path, clock: Clock | None = None) -> Coord:
    token = secrets.token_urlsafe(32)
    config = Config(routes=dict(ROUTES), lanes={})
    faults: dict[str, str] = {}
    hits: dict[str, int] = {}

    @web.middleware
    async def fault_layer(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        hits[request.path] = hits.get(request.path, 0) + 1
        kind = faults.get(request.path)
        if kind == "404-text":
            return web.Response(status=404, text="404: Not Found")
        if kind == "404-json":
            body = {"error": {"code": "not-found", "message": f"{request.path}: no such route"}}
            return web.json_response(body, status=404)
        if kind == "503":
            body = {"error": {"code": "unavailable", "message": "injected fault"}}
            return web.json_response(body, status=503)
        if kind == "drop":
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("injected drop")
        return await handler(request)

    lt = LoopThread()

    async def start() -> tuple[web.AppRunner, int]:
        app = create_app(config, [token.encode()], data_dir, clock)
        app.middlewares.append(fault_layer)  # innermost: auth still applies
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port: int = runner.addresses[0][1]
        return runner, port

    runner, port = lt.call(start)
    return Coord(
        f"http://127.0.0.1:{port}", token, clock or ManualClock(), data_dir, runner, lt,
        faults, hits,
    )  # fmt: skip


def clean_env(tmp: Path) -> dict[str, str]:
    """An environment for driver subprocesses: private HOME/config/state, no keyring, no
    LANE_* from the developer's shell."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LANE_") and k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")
    }
    env.update(
        HOME=str(home),
        LANE_CONFIG_DIR=str(tmp / "lane-config"),
        LANE_STATE_DIR=str(tmp / "lane-state"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    return env


def last_json(stdout: str) -> dict[str, Any]:
    line = [ln for ln in stdout.splitlines() if ln.startswith("{")][-1]
    out: dict[str, Any] = json.loads(line)
    return out


async def wait_until(pred: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    """Poll `pred` (real time, generous bound: the machine is shared)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what or pred}")
        await asyncio.sleep(0.01)


class FakeProvider:
    """An in-memory provider for library tests: counts submits and polls."""

    def __init__(self, status: str = "completed") -> None:
        self.status = status
        self.submits: list[str] = []
        self.polls: list[str] = []
        self.finds = 0

    async def submit(self) -> str:
        job = f"job-{len(self.submits) + 1}"
        self.submits.append(job)
        return job

    async def poll(self, job_id: str) -> str:
        self.polls.append(job_id)
        return self.status

    def submit_sync(self) -> str:
        job = f"job-{len(self.submits) + 1}"
        self.submits.append(job)
        return job

    def poll_sync(self, job_id: str) -> str:
        self.polls.append(job_id)
        return self.status


class Recording:
    """A LaneBackend wrapper (every call goes to the real backend) that records heartbeat
    answers, and can send receipts elsewhere (`receipts_to`)."""

    def __init__(self, inner: Any, receipts_to: Any = None, log: list[Any] | None = None) -> None:
        self.inner = inner
        self.receipts_to = receipts_to
        self.heartbeats: list[Any] = [] if log is None else log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def kind(self) -> str:
        return str(self.inner.kind)

    @property
    def machine_id(self) -> str:
        return str(self.inner.machine_id)

    @property
    def claim_id(self) -> str | None:
        return self.inner.claim_id  # type: ignore[no-any-return]

    async def heartbeat(self, *a: Any, **k: Any) -> Any:
        try:
            r = await self.inner.heartbeat(*a, **k)
        except Exception as exc:
            self.heartbeats.append(exc)
            raise
        self.heartbeats.append(r)
        return r

    async def receipt(self, *a: Any, **k: Any) -> Any:
        target = self.receipts_to if self.receipts_to is not None else self.inner
        return await target.receipt(*a, **k)

    def with_claim(self, claim: str | None) -> Recording:
        return Recording(self.inner.with_claim(claim), self.receipts_to, self.heartbeats)

    def refusals(self) -> list[str | None]:
        return [h.reason for h in self.heartbeats if hasattr(h, "refreshed") and not h.refreshed]
