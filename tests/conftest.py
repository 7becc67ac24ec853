"""Shared fixtures: the REAL coordinator (create_app) on a loopback TCP port.

`server` runs it with an observable ManualClock (tests move time with
`server.clock.advance(s)`); `real_server` runs it with the system clock. Both use a
temp data dir with real SQLite files. `server.op("acquire", {...})` POSTs
/v1/lanes/acquire with the bearer token and `protocolVersion: 1` added.

Lanes of the default config: `solo:main` (capacity 1), `duo:main` (capacity 2), and
`free:main` (route without a capacity: unenforced, SPEC §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web

from coordinator.clock import Clock, ManualClock, SystemClock
from coordinator.config import Config
from coordinator.http.app import create_app

TOKEN = "test-token-0123456789-abcdefghijklmnopqrstuvwxyz"  # 48 bytes


def make_config(**overrides: Any) -> Config:
    cfg = Config(routes={"solo": 1, "duo": 2}, lanes={})
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


class _SleepWatch:
    """Counts the clock's pending sleepers by deadline, so a test can wait until a long
    poll is parked (its timer sleeps until `now + waitSeconds`)."""

    def _watch_init(self) -> None:
        self.sleeping: Counter[float] = Counter()
        self._changed = asyncio.Event()

    async def _watched(self, deadline: float, inner: Callable[[], Awaitable[None]]) -> None:
        self.sleeping[deadline] += 1
        self._changed.set()
        try:
            await inner()
        finally:
            self.sleeping[deadline] -= 1
            if self.sleeping[deadline] <= 0:
                del self.sleeping[deadline]

    async def until_sleeping(
        self, deadline: float, *, slack: float = 0.0, count: int = 1, timeout: float = 10.0
    ) -> None:
        """Wait (real time, bounded) until `count` sleepers wait for a deadline in
        [deadline, deadline + slack]."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._sleeping_between(deadline, deadline + slack) < count:
            self._changed.clear()
            left = end - loop.time()
            if left <= 0:
                raise AssertionError(
                    f"no {count} sleeper(s) for {deadline}; sleeping: {dict(self.sleeping)}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 0.05))

    def _sleeping_between(self, lo: float, hi: float) -> int:
        return sum(n for d, n in self.sleeping.items() if lo <= d <= hi)


class TestManualClock(_SleepWatch, ManualClock):
    __test__ = False

    def __init__(self, start: float = 1_764_450_000.0) -> None:
        ManualClock.__init__(self, start)
        self._watch_init()

    async def sleep_until(self, deadline: float) -> None:
        await self._watched(deadline, lambda: ManualClock.sleep_until(self, deadline))


class TestSystemClock(_SleepWatch, SystemClock):
    __test__ = False

    def __init__(self) -> None:
        self._watch_init()

    async def sleep_until(self, deadline: float) -> None:
        await self._watched(deadline, lambda: SystemClock.sleep_until(self, deadline))


@dataclass
class Reply:
    status: int
    body: Any  # decoded JSON, or None
    text: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    @property
    def code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            code = self.body["error"].get("code")
            return code if isinstance(code, str) else None
        return None

    @property
    def message(self) -> str:
        return str(self.body["error"]["message"])


@dataclass
class Running:
    url: str
    data_dir: Path
    clock: Any  # TestManualClock | TestSystemClock
    config: Config
    app: web.Application
    session: aiohttp.ClientSession
    token: str = TOKEN

    def lane_file(self, lane: str) -> Path:
        route, account = lane.split(":")
        return self.data_dir / f"{route}+{account}.sqlite"

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: Any = None,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        allow_redirects: bool = False,
        raw_url: bool = False,
    ) -> Reply:
        """One HTTP call; `raw_url=True` sends `path` (with its query) exactly as given."""
        hdrs = dict(headers or {})
        if token is not None:
            hdrs.setdefault("Authorization", f"Bearer {token}")
        if json_body is not None:
            data = json.dumps(json_body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        url = yarl.URL(self.url + path, encoded=True) if raw_url else self.url + path
        async with self.session.request(
            method,
            url,
            data=data,
            headers=hdrs,
            params=params,
            allow_redirects=allow_redirects,
        ) as resp:
            text = await resp.text(errors="replace")
            try:
                body = json.loads(text) if text else None
            except ValueError:
                body = None
            return Reply(resp.status, body, text, dict(resp.headers))

    async def post(self, path: str, body: Any, **kw: Any) -> Reply:
        return await self.request("POST", path, json_body=body, **kw)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.request("GET", path, **kw)

    async def op(self, name: str, body: dict[str, Any], **kw: Any) -> Reply:
        """POST /v1/lanes/<name> with protocolVersion 1 (unless the body names one)."""
        return await self.post(f"/v1/lanes/{name}", {"protocolVersion": 1, **body}, **kw)

    async def ok(self, name: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        """op(), asserting the status; returns the JSON body."""
        r = await self.op(name, body)
        assert r.status == status, (name, r.status, r.text)
        assert isinstance(r.body, dict)
        return r.body


StartServer = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    """Factory: `await start_server(clock=, config=|**config_overrides, data_dir=, tokens=)`.

    Every server started is stopped at teardown."""
    runners: list[tuple[web.AppRunner, aiohttp.ClientSession]] = []

    async def start(
        clock: Clock | None = None,
        config: Config | None = None,
        data_dir: Path | None = None,
        tokens: list[bytes] | None = None,
        **config_overrides: Any,
    ) -> Running:
        clock = clock if clock is not None else TestManualClock()
        config = config if config is not None else make_config(**config_overrides)
        data_dir = data_dir if data_dir is not None else tmp_path / f"data{len(runners)}"
        app = create_app(config, tokens or [TOKEN.encode()], data_dir, clock)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        runners.append((runner, session))
        return Running(f"http://127.0.0.1:{port}", data_dir, clock, config, app, session)

    yield start
    for runner, session in reversed(runners):
        await session.close()
        await runner.cleanup()


@pytest.fixture
async def server(start_server: StartServer) -> Running:
    """The real server with a TestManualClock (time moves only with clock.advance)."""
    return await start_server(clock=TestManualClock())


@pytest.fixture
async def real_server(start_server: StartServer) -> Running:
    """The real server with the system clock (for latency measurements)."""
    return await start_server(clock=TestSystemClock())
