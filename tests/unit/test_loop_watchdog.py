"""The event-loop watchdog (tests/harness/watchdog.py, run by conftest's `start_server`): a
callback or a handler that blocks the loop with `time.sleep(0.5)` is caught and named, with the
line it blocked in; awaiting is no blocking; a test opted out with `allow_loop_blocking` is left
alone. The last two run a small pytest session with the real conftest (tests.harness.inner):
the watchdog must fail that inner test."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from tests.harness.inner import InnerRun
from tests.harness.watchdog import (
    DEFAULT_THRESHOLD,
    LOOP_BLOCK_ENV,
    LoopBlocked,
    LoopWatchdog,
    threshold_from_env,
)


def blocking_callback() -> None:
    time.sleep(0.5)  # the deliberate blocking call


def test_a_blocking_callback_is_caught_and_named() -> None:
    loop = asyncio.new_event_loop()
    try:
        with LoopWatchdog(loop, threshold=0.1) as dog:
            loop.call_soon(blocking_callback)
            loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        loop.close()
    [block] = dog.blocks
    assert block.seconds + block.waited >= 0.45
    assert "blocking_callback" in block.callback
    assert block.where.startswith('File "tests/unit/test_loop_watchdog.py"'), block.where
    assert "time.sleep(0.5)" in block.where
    with pytest.raises(LoopBlocked, match=r"blocked the event loop 0\.\d+ s .*blocking_callback"):
        dog.check()
    assert dog.blocks == []  # check() reports each block once


def test_a_blocking_task_step_is_named_by_its_coroutine() -> None:
    async def handler_like() -> None:
        await asyncio.sleep(0)
        time.sleep(0.5)  # blocks inside a task step
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    try:
        with LoopWatchdog(loop, threshold=0.1) as dog:
            loop.run_until_complete(handler_like())
    finally:
        loop.close()
    [block] = dog.blocks
    assert "handler_like" in block.callback
    assert "time.sleep(0.5)" in block.where


def test_awaiting_is_not_blocking() -> None:
    async def waits() -> None:
        await asyncio.sleep(0.5)
        await asyncio.gather(*(asyncio.sleep(0.01) for _ in range(100)))

    loop = asyncio.new_event_loop()
    try:
        with LoopWatchdog(loop, threshold=0.1) as dog:
            loop.run_until_complete(waits())
    finally:
        loop.close()
    assert dog.blocks == []


def test_other_loops_are_not_watched() -> None:
    watched, other = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        with LoopWatchdog(watched, threshold=0.1) as dog:
            other.call_soon(blocking_callback)
            other.run_until_complete(asyncio.sleep(0.01))
    finally:
        watched.close()
        other.close()
    assert dog.blocks == []


def test_steps_inside_excusing_are_kept_apart() -> None:
    async def start_like() -> None:
        with dog.excusing():  # as start_server does around a coordinator's start
            time.sleep(0.5)
            await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    try:
        with LoopWatchdog(loop, threshold=0.1) as dog:
            loop.run_until_complete(start_like())
    finally:
        loop.close()
    assert dog.blocks == []
    [block] = dog.excused
    assert "start_like" in block.callback


def test_the_threshold_comes_from_the_environment() -> None:
    assert threshold_from_env({}) == DEFAULT_THRESHOLD == 0.25
    assert threshold_from_env({LOOP_BLOCK_ENV: "0.5"}) == 0.5
    assert threshold_from_env({LOOP_BLOCK_ENV: "off"}) is None
    assert threshold_from_env({LOOP_BLOCK_ENV: "0"}) is None


INNER_TEST = """
import time

import pytest

from tests.harness import StartServer, TestManualClock
from tests.integration.kit import acquire_body


class BlockingClock(TestManualClock):
    \"\"\"Its next now() after `arm()` sleeps 0.5 s: a blocking call inside a handler.\"\"\"

    armed = False

    def now(self) -> float:
        if self.armed:
            self.armed = False
            time.sleep(0.5)  # the deliberate blocking call
        return super().now()


async def acquire_with_a_blocking_handler(start_server: StartServer) -> None:
    clock = BlockingClock()
    srv = await start_server(clock=clock)
    clock.armed = True
    await srv.ok("acquire", acquire_body())
    assert not clock.armed  # the handler did call it


async def test_blocked(start_server: StartServer) -> None:
    await acquire_with_a_blocking_handler(start_server)


@pytest.mark.allow_loop_blocking("this test blocks on purpose (the watchdog's own test)")
async def test_blocked_on_purpose(start_server: StartServer) -> None:
    await acquire_with_a_blocking_handler(start_server)


async def test_not_blocked(start_server: StartServer) -> None:
    srv = await start_server()
    await srv.ok("acquire", acquire_body())
"""


def test_start_server_fails_a_test_whose_handler_blocks_the_loop(tmp_path: Path) -> None:
    run = InnerRun(
        tmp_path / "inner",
        {"test_inner.py": INNER_TEST},
        "-rA",
        "test_inner.py",
        env={LOOP_BLOCK_ENV: ""},  # the default threshold
    )
    code = run.wait(timeout=180)
    out = run.output
    assert code == 1, out  # ExitCode.TESTS_FAILED
    assert "1 failed, 2 passed" in out, out
    assert "FAILED test_inner.py::test_blocked - " in out, out
    assert "PASSED test_inner.py::test_blocked_on_purpose" in out, out
    assert "PASSED test_inner.py::test_not_blocked" in out, out
    assert "LoopBlocked: 1 step(s) blocked the event loop during the test" in out, out
    assert "RequestHandler._handle_request" in out, out  # the aiohttp handler's task step
    where = r'blocked at File "/\S+/test_inner\.py", line \d+, in now time\.sleep\(0\.5\)'
    assert re.search(where, out), out
