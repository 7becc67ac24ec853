"""The client tests' fixtures, loaded by each test module with
`pytest_plugins = ["lane_fixtures"]` (a rootless tests/client/conftest.py would take the
module name `conftest` that tests/ops imports from tests/conftest.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from lane_testkit import REPO, Server, fake_server, start_coordinator, stop_server

from coordinator.clock import ManualClock


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Server]:
    """A fresh real coordinator (system clock) with routes render/self-test/drill capacity 1,
    lane render:wide capacity 2, and route `free` unenforced."""
    s = start_coordinator(tmp_path)
    yield s
    stop_server(s)


@pytest.fixture
def manual_coordinator(tmp_path: Path) -> Iterator[Server]:
    s = start_coordinator(tmp_path, ManualClock())
    yield s
    stop_server(s)


@pytest.fixture
def fake() -> Iterator[Callable[[str], Server]]:
    """fake(kind): 'unauthorized' (401 for everything), 'garbage' (200 HTML),
    'local' (valid-looking replies that say coordinator=local-sqlite), 'postgres' (the same
    status shape saying coordinator=actor-postgres), 'forbidden' (403 HTML), 'error500' (500
    JSON error)."""
    made: list[Server] = []

    def build(kind: str) -> Server:
        async def handler(request: web.Request) -> web.StreamResponse:
            if kind == "unauthorized":
                return web.json_response(
                    {"error": {"code": "unauthorized", "message": "Authorization: bad"}},
                    status=401,
                )
            if kind == "garbage":
                return web.Response(text="<html><body>502 gateway oops</body></html>",
                                    content_type="text/html")  # fmt: skip
            if kind == "forbidden":
                return web.Response(text="forbidden by proxy", status=403)
            if kind == "error500":
                return web.json_response(
                    {"error": {"code": "unavailable", "message": "internal"}}, status=503
                )
            body = await request.json() if request.can_read_body else {}
            lane = body.get("lane", "render:main")
            return web.json_response(
                {
                    "coordinator": "actor-postgres" if kind == "postgres" else "local-sqlite",
                    "lane": lane,
                    "enforced": True,
                    "capacity": 1,
                    "held": [],
                    "queued": [],
                    "pause": None,
                    "now": 1.0,
                }
            )

        s = fake_server(handler)
        made.append(s)
        return s

    yield build
    for s in made:
        stop_server(s)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A socket that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def refused_port() -> int:
    """A port nothing listens on (bound, then closed): connection refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


# ---------------------------------------------------------------- CLI subprocesses


@pytest.fixture
def lane_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment for `lane`: private HOME/config/state dirs, no keyring, no LANE_*."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LANE_") and k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")
    }
    env.update(
        HOME=str(home),
        LANE_CONFIG_DIR=str(tmp_path / "lane-config"),
        LANE_STATE_DIR=str(tmp_path / "lane-state"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    return env
