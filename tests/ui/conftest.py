"""Browser-test fixtures: a real coordinator subprocess on loopback, seeded over HTTP, the
timeline demo coordinator on a loop thread (both from tests/ui/kit.py over tests/harness), and
Debian's chromium driven by Playwright (sync API). Run with `pytest -p no:asyncio tests/ui`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from tests.ui.kit import UI_READER, Seeded, seed, start_timeline_demo, start_ui_coordinator

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


@pytest.fixture(scope="session")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    proc = start_ui_coordinator(tmp_path_factory.mktemp("coordinator"))
    try:
        yield seed(proc.url, proc.token)
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def timeline_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A coordinator whose ManualClock walked three hours of holds (kit.walk_timeline)."""
    demo = start_timeline_demo(tmp_path_factory.mktemp("timeline-demo"))
    try:
        yield demo.url, UI_READER.token  # the page only reads
    finally:
        demo.stop()


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
