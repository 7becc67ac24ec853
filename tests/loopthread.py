"""An event loop in a daemon thread, for sync tests that run a real server or async client.

Shared by tests/client and tests/driver (tests/ is on sys.path through its conftest.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any


class LoopThread:
    """`call(fn)` runs the coroutine `fn()` on the loop thread and waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
        async def wrap() -> Any:
            return await fn()

        fut: Future[Any] = asyncio.run_coroutine_threadsafe(wrap(), self.loop)
        return fut.result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
