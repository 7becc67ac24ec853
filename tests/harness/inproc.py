"""The REAL coordinator (`create_app`, SQLite files in a temp data dir) served in-process on
127.0.0.1:<port 0>.

- `start_running(...)` serves it on the test's own event loop (async tests) and returns a
  `Running`: the URL, clock, config, data dir and an HTTP session with `op`/`ok`/`request`.
- `ThreadedCoordinator(...)` serves it on an event loop in a daemon thread, for sync code,
  blocking clients and subprocesses (CLI, drivers); `advance(s)` moves its ManualClock there.
- `AppThread(make_app)` serves any aiohttp app that way (fake servers for fail-closed tests).

Every in-process coordinator has a fault layer (innermost, so auth still applies):
`faults[path] = kind` answers that path with "404-text" (aiohttp's own 404, like an old
server), "404-json", "503" (an error body) or "drop" (connection closed without an answer);
`hits[path]` counts the requests that reached it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yarl
from aiohttp import web

from client.api import LaneClient
from coordinator.clock import Clock, ManualClock, SystemClock
from coordinator.config import Config
from coordinator.credentials import Credentials, parse_credentials
from coordinator.http.app import create_app
from coordinator.http.middleware import REGISTRY_KEY
from coordinator.http.server import LaneRunner
from tests.harness.config import TOKEN, client_env, make_config, new_token
from tests.harness.credentials import Cred, token_file_text
from tests.harness.loop import LoopThread

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FAULT_KINDS = frozenset({"404-text", "404-json", "503", "drop"})


def fault_layer(faults: dict[str, str], hits: dict[str, int]) -> Any:
    """An aiohttp middleware that counts requests per path and injects `faults[path]`."""

    @web.middleware
    async def layer(request: web.Request, handler: Handler) -> web.StreamResponse:
        hits[request.path] = hits.get(request.path, 0) + 1
        kind = faults.get(request.path)
        if kind is not None and kind not in FAULT_KINDS:
            raise AssertionError(f"unknown fault kind {kind!r} (one of {sorted(FAULT_KINDS)})")
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

    return layer


@dataclass
class Reply:
    """One HTTP answer: status, decoded JSON body (or None), raw text, headers."""

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


class Running:
    """A coordinator served on the event loop that started it (see `start_running`)."""

    def __init__(
        self,
        *,
        url: str,
        data_dir: Path,
        clock: Any,
        config: Config,
        app: web.Application,
        runner: web.AppRunner,
        tokens: list[bytes],
        faults: dict[str, str],
        hits: dict[str, int],
    ) -> None:
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.data_dir = data_dir
        self.clock = clock  # the injected clock: TestManualClock | TestSystemClock | ...
        self.config = config
        self.app = app
        self.runner = runner
        self.tokens = tokens
        self.token = tokens[0].decode()
        self.faults = faults
        self.hits = hits
        self._session: aiohttp.ClientSession | None = None

    def lane_file(self, lane: str) -> Path:
        route, account = lane.split(":")
        return self.data_dir / f"{route}+{account}.sqlite"

    @property
    def session(self) -> aiohttp.ClientSession:
        """The test's HTTP session (made on first use, closed by `stop`)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        return self._session

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.runner.cleanup()

    # ------------------------------------------------------------------ HTTP

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
        """One HTTP call; `raw_url=True` sends `path` (with its query) exactly as given.
        `token` defaults to the HTTP suites' fixed TOKEN (even when the server was started
        with other tokens: a test of rotation relies on it); None sends no Authorization."""
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

    async def ok(
        self, name: str, body: dict[str, Any], status: int = 200, **kw: Any
    ) -> dict[str, Any]:
        """op(), asserting the status; returns the JSON body (`kw`: `request`'s, a token)."""
        r = await self.op(name, body, **kw)
        assert r.status == status, (name, r.status, r.text)
        assert isinstance(r.body, dict)
        return r.body


#: The type of conftest's `start_server` fixture: `await start_server(clock=, config=, ...)`.
StartServer = Callable[..., Awaitable[Running]]


def _token_bytes(tokens: Sequence[str | bytes] | None) -> list[bytes]:
    if not tokens:
        return [TOKEN.encode()]
    return [t.encode() if isinstance(t, str) else t for t in tokens]


def _credentials(toks: list[bytes], creds: Sequence[Cred]) -> Credentials:
    """The plain tokens (admin token-1, token-2, …) and the hashed credentials, as the
    server reads a token file holding them."""
    text = token_file_text(creds, [t.decode() for t in toks])
    return Credentials(parse_credentials(text, source="the test's credentials"))


async def start_running(
    data_dir: Path,
    *,
    config: Config | None = None,
    clock: Clock | None = None,
    tokens: Sequence[str | bytes] | None = None,
    store: str | None = None,
    credentials: Sequence[Cred] = (),
) -> Running:
    """Serve the real coordinator on the running event loop; stop it with `await r.stop()`.

    Defaults: `make_config()`, the system clock, the single token TOKEN (a plain token: the
    admin credential `token-1`), SQLite lane files under `data_dir` (`store`: a postgresql://
    URL for a replica on PostgreSQL). `credentials`: named credentials accepted besides the
    tokens (tests.harness.credentials)."""
    config = config if config is not None else make_config()
    clock = clock if clock is not None else SystemClock()
    toks = _token_bytes(tokens)
    faults: dict[str, str] = {}
    hits: dict[str, int] = {}
    app = create_app(config, _credentials(toks, credentials), data_dir, clock, store=store)
    app.middlewares.append(fault_layer(faults, hits))  # innermost: auth still applies
    # what `serve` runs: its limits and error shapes
    runner = LaneRunner(app, config, kind=app[REGISTRY_KEY].kind)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = runner.addresses[0][1]
    return Running(
        url=f"http://127.0.0.1:{port}",
        data_dir=data_dir,
        clock=clock,
        config=config,
        app=app,
        runner=runner,
        tokens=toks,
        faults=faults,
        hits=hits,
    )


class AppThread:
    """Any aiohttp app on 127.0.0.1:<port 0>, served by an event loop in a daemon thread."""

    def __init__(self, make_app: Callable[[], web.Application]) -> None:
        self.thread = LoopThread()

        async def start() -> tuple[web.AppRunner, int]:
            runner = web.AppRunner(make_app(), access_log=None, handle_signals=False)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port: int = runner.addresses[0][1]
            return runner, port

        self.runner, self.port = self.thread.call(start)
        self.url = f"http://127.0.0.1:{self.port}"
        self.hits: list[str] = []  # paths asked for, where the app records them (fakes)

    def stop(self) -> None:
        if not self.thread.loop.is_closed():
            self.thread.call(self.runner.cleanup)
            self.thread.stop()


def fake_server(handler: Handler) -> AppThread:
    """An AppThread whose one catch-all route answers every method and path with `handler`."""

    def make() -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        return app

    return AppThread(make)


class ThreadedCoordinator:
    """The real coordinator served by an event loop in a daemon thread, so async tests, sync
    clients and subprocesses can all call it. Defaults: `make_config()` (the client suites pass
    `client_config()`), the system clock, a fresh random token. `stop()` at teardown."""

    def __init__(
        self,
        data_dir: Path,
        *,
        config: Config | None = None,
        clock: Clock | None = None,
        token: str | None = None,
        credentials: Sequence[Cred] = (),
    ) -> None:
        self.thread = LoopThread()
        tok = token if token is not None else new_token()
        try:
            self.server = self.thread.call(
                lambda: start_running(
                    data_dir, config=config, clock=clock, tokens=[tok], credentials=credentials
                )
            )
        except BaseException:
            self.thread.stop()
            raise
        self.url = self.server.url
        self.port = self.server.port
        self.token = tok
        self.data_dir = data_dir
        self.config = self.server.config
        self.clock: Clock = self.server.clock
        self.faults = self.server.faults  # path -> fault kind (see the module docstring)
        self.hits = self.server.hits  # path -> requests that reached the coordinator

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
        """Run the coroutine `fn()` on the coordinator's loop and wait for its result."""
        return self.thread.call(fn, timeout)

    def advance(self, seconds: float) -> None:
        """Move the ManualClock on the coordinator's loop (where its sleepers live) and give
        the woken alarms a moment to commit."""
        clock = self.clock
        assert isinstance(clock, ManualClock), "advance() needs a ManualClock"

        async def adv() -> None:
            clock.advance(seconds)
            await asyncio.sleep(0.05)

        self.thread.call(adv)

    def client(
        self, machine: str = "studio-a", claim: str | None = "claim-a", **kw: Any
    ) -> LaneClient:
        """A LaneClient on this coordinator (close it yourself)."""
        return LaneClient(self.url, self.token, machine, claim, **kw)

    def env(self, base: dict[str, str], machine: str = "studio-a") -> dict[str, str]:
        """`base` plus LANE_COORDINATOR_URL, LANE_TOKEN and LANE_MACHINE_ID for this one."""
        return client_env(base, self.url, self.token, machine)

    def lane_file(self, lane: str) -> Path:
        return self.server.lane_file(lane)

    def stop(self) -> None:
        if not self.thread.loop.is_closed():
            self.thread.call(self.server.stop)
            self.thread.stop()
