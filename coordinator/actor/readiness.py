"""/readyz: whether a change could be committed now. The store is probed (a data dir write,
or a database round trip) on a store thread at most once per READY_CHECK_SECONDS, so a flood
of probes costs one a second; concurrent callers share one probe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

READY_CHECK_SECONDS = 1.0  # /readyz probes the store at most once a second


class Readiness:
    def __init__(self, probe: Callable[[], Awaitable[str | None]]) -> None:
        self._probe = probe  # the store's problem (None: fine), on a store thread
        self._checked_at: float | None = None
        self._running: asyncio.Task[str | None] | None = None
        self._problem: str | None = None

    async def problem(self) -> str | None:
        """The store's problem as last probed (probing again when the last is stale)."""
        now = time.monotonic()
        stale = self._checked_at is None or now - self._checked_at >= READY_CHECK_SECONDS
        if stale and self._running is None:
            self._running = asyncio.ensure_future(self._probe())
        if self._running is not None:
            probe = self._running
            try:
                self._problem = await asyncio.shield(probe)
            except Exception as exc:
                self._problem = f"store check failed: {type(exc).__name__}"
            finally:
                if self._running is probe and probe.done():
                    self._running = None
                    self._checked_at = time.monotonic()
        return self._problem
