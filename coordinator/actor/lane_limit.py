"""max_lanes: how many lanes may exist at once. A lane with no store yet is admitted (before
anything of it is stored) only while fewer lanes are counted; configured lanes, and lanes
counted already, are always admitted. The count is the stored lanes (listed at start, and
again — on a store thread, at most once a RESCAN_SECONDS — when the limit is reached, so a
removed lane frees its place) and the lanes being created now."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

from coordinator.config import Config
from coordinator.errors import StoreError
from coordinator.logs import RateLimitedLog
from coordinator.metrics import LaneObserver
from coordinator.protocol.errors import Unavailable

RESCAN_SECONDS = 1.0  # at the limit, the stored lanes are listed again at most once a second


class LaneLimit:
    def __init__(
        self,
        config: Config,
        metrics: LaneObserver,
        list_stored: Callable[[], Awaitable[list[str]]],
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._list_stored = list_stored  # the store's lanes, listed on a store thread
        self._counted: set[str] = set()
        self._stored: list[str] = []  # the last listing
        self._scanned_at = 0.0
        self._log = RateLimitedLog("lane.limit_reached")

    @property
    def stored(self) -> list[str]:
        """The stored lanes as last listed."""
        return self._stored

    def listed(self, stored: list[str]) -> None:
        """A fresh listing of the stored lanes (start, /v1/lanes)."""
        self._stored = stored
        self._counted |= set(stored)
        self._scanned_at = time.monotonic()

    def count(self) -> int:
        """Lanes counted against max_lanes: lanes stored and configured lanes, once each."""
        return len(self._counted | self._config.lanes.keys())

    def forget(self, lane: str) -> None:
        """A lane whose creation stored nothing takes no place."""
        self._counted.discard(lane)

    async def admit(self, lane: str, busy: Iterable[str]) -> None:
        """Admit a lane about to be made, or refuse it (503 `unavailable`). `busy`: lanes
        open or opening now (they count whatever the listing says)."""
        if lane in self._counted or lane in self._config.lanes:
            return
        limit = self._config.max_lanes
        if self.count() >= limit and time.monotonic() - self._scanned_at >= RESCAN_SECONDS:
            self._scanned_at = time.monotonic()
            stored = set(self._stored)
            with contextlib.suppress(StoreError):
                stored = set(await self._list_stored())
            self._counted = stored | set(busy)
            self._stored = sorted(stored)
        if lane in self._counted:
            return  # counted meanwhile (another call made it)
        if self.count() >= limit:
            self._metrics.lane_limit_refused()
            self._log(max_lanes=limit, lanes=self.count())
            raise Unavailable(
                f"lane limit reached: max_lanes = {limit}; raise it in the config "
                "or remove unused lane files"
            )
        self._counted.add(lane)
