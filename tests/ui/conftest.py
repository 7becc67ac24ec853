"""Browser-test fixtures: a real coordinator subprocess on loopback, seeded over HTTP, and
Debian's chromium driven by Playwright (sync API). Run with `pytest -p no:asyncio tests/ui`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_room_seed import Seeded, free_port, seed, start_coordinator, wait_healthy
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"


def pytest_addoption(parser: pytest.Parser) -> None:
    """These tests run with `-p no:asyncio` (Playwright's sync API wants no event loop), but
    pytest-aiohttp stays loaded and reads pytest-asyncio's `asyncio_mode` option when it
    configures itself; give it a value when pytest-asyncio is not there to own it."""
    with contextlib.suppress(ValueError):  # raised when pytest-asyncio is loaded and owns it
        parser.addoption("--asyncio-mode", dest="asyncio_mode", default="strict")
    for name in ("asyncio_mode", "asyncio_default_fixture_loop_scope"):
        with contextlib.suppress(ValueError):
            parser.addini(name, "owned by pytest-asyncio (absent in the browser-test run)")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    tmp = tmp_path_factory.mktemp("coordinator")
    proc, base, token, _log = start_coordinator(tmp)
    try:
        yield seed(base, token)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def timeline_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A coordinator whose ManualClock walked three hours of holds (see the script's doc)."""
    tmp = tmp_path_factory.mktemp("timeline-demo")
    token = secrets.token_urlsafe(36)
    port = free_port()
    log = tmp / "demo.log"
    script = Path(__file__).with_name("timeline_demo_server.py")
    env = {**os.environ, "LANE_COORDINATOR_TOKEN": token}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(port), str(tmp / "data")],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log)
        # healthy means listening; READY means the scenario is fully seeded
        deadline = time.monotonic() + 120
        while b"READY" not in log.read_bytes():
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield base, token
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    assert os.path.exists(CHROMIUM), "install Debian's chromium: apt-get install -y chromium"
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    b = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    ctx.set_default_timeout(20_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()
