"""An event loop in a daemon thread, for sync code (blocking clients, subprocess drivers,
Playwright's sync API) that needs a coordinator or an async client running beside it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class LoopThread:
    """`call(fn)` runs the coroutine `fn()` on the loop thread and waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 60) -> T:
        async def wrap() -> T:
            return await fn()

        fut: Future[T] = asyncio.run_coroutine_threadsafe(wrap(), self.loop)
        return fut.result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
