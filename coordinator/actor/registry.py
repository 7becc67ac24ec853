"""The lane registry: opens a lane's actor on first use, re-arms lanes at startup,
and closes idle lanes so their store connections (and threads) are released."""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from coordinator.actor.lane_actor import LaneActor
from coordinator.clock import Clock
from coordinator.config import Config
from coordinator.constants import JANITOR_INTERVAL_SECONDS, LANE_IDLE_CLOSE_SECONDS, STORE_THREADS
from coordinator.errors import ConfigError, StoreError, Unavailable
from coordinator.logs import RateLimitedLog
from coordinator.metrics import NULL_METRICS, LaneObserver
from coordinator.names import lane_file_name, lane_from_file_name
from coordinator.store.files import (
    data_dir_unwritable,
    is_empty_file,
    make_private_dir,
    open_failure_reason,
)
from coordinator.store.lock import DataDirLock
from coordinator.store.sqlite import SqliteLaneStore

log = structlog.get_logger("coordinator.registry")

RESCAN_SECONDS = 1.0  # at the limit, the data dir is listed again at most once a second
READY_CHECK_SECONDS = 1.0  # /readyz probes the data dir at most once a second


class LaneRegistry:
    def __init__(
        self, config: Config, data_dir: Path, clock: Clock, metrics: LaneObserver = NULL_METRICS
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.clock = clock
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="lane-store")
        self._actors: dict[str, LaneActor] = {}
        self._opening: dict[str, asyncio.Task[LaneActor]] = {}
        self._janitor: asyncio.Task[None] | None = None
        self._failed: dict[str, str] = {}  # lane -> why its file cannot be opened or read
        self._closing = False
        self._draining = False
        self._started = False
        self._ready_checked_at: float | None = None
        self._unwritable: str | None = None
        self._lock = DataDirLock(data_dir)
        # Lanes counted against max_lanes: those with a file (read at start, re-read at the
        # limit so a removed file frees its place) and those being created now.
        self._lane_files: set[str] = set()
        self._scanned_at = 0.0
        self._limit_log = RateLimitedLog("lane.limit_reached")

    def path_for(self, lane: str) -> Path:
        return self.data_dir / lane_file_name(lane)

    def lanes_on_disk(self) -> list[str]:
        """Lanes with a file; a 0-byte file (an older version's failed first open) is not
        one: its lane has no file yet, and the next acquire replaces it atomically."""
        out = []
        for p in sorted(self.data_dir.iterdir()):
            lane = lane_from_file_name(p.name)
            if lane is not None and p.is_file() and not is_empty_file(p):
                out.append(lane)
        return out

    def _has_file(self, lane: str) -> bool:
        path = self.path_for(lane)
        return path.exists() and not is_empty_file(path)

    def lane_error(self, lane: str) -> str | None:
        """Why the lane's file could not be opened or read at its last attempt (None: fine)."""
        return self._failed.get(lane)

    def known_lanes(self) -> list[str]:
        return sorted(set(self.lanes_on_disk()) | set(self.config.lanes) | set(self._actors))

    async def start(self) -> None:
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data dir: {self.data_dir} exists and is not a directory")
        if self.data_dir.is_dir() and self.data_dir.stat().st_mode & 0o077:
            # Its lane files are 0600 anyway; the directory's mode is the operator's choice.
            log.warning("data_dir.not_private", data_dir=str(self.data_dir), hint="chmod 700")
        make_private_dir(self.data_dir)
        self._lock.acquire()
        self._lane_files = set(self.lanes_on_disk())
        self._scanned_at = time.monotonic()
        for p in sorted(self.data_dir.iterdir()):
            if lane_from_file_name(p.name) is not None and is_empty_file(p):
                log.warning("lane.empty_file_ignored", file=p.name, hint="no lane yet")
        for lane in self.lanes_on_disk():
            if self.config.lane_settings(lane) is None:
                log.warning("lane.unenforced_file_ignored", lane=lane)
                continue
            try:
                actor = await self.get(lane, create=False)
            except StoreError:
                continue  # logged and counted by _open; every other lane is served
            if actor is not None and actor.idle():
                await self._close(lane)
            elif actor is not None:
                log.info("lane.rearmed", lane=lane, live=len(actor.core.live) if actor.core else 0)
        self._janitor = asyncio.create_task(self._janitor_loop(), name="lane-janitor")
        self._started = True

    def not_ready_reason(self) -> str | None:
        """Why no change could be committed now (None: ready). The data dir write probe is
        cached for READY_CHECK_SECONDS, so a flood of probes costs one write a second."""
        if self._closing or self._draining:
            return "shutting down"
        if not self._started:
            return "starting"
        now = time.monotonic()
        if self._ready_checked_at is None or now - self._ready_checked_at >= READY_CHECK_SECONDS:
            self._unwritable = data_dir_unwritable(self.data_dir)
            self._ready_checked_at = now
        return self._unwritable

    def broken_lane_count(self) -> int:
        """Lanes whose file could not be opened or read at their last attempt."""
        return len(self._failed)

    async def get(self, lane: str, *, create: bool) -> LaneActor | None:
        """The lane's actor, opened on demand; None when it has no file and create is False."""
        if self._closing:
            raise Unavailable("coordinator is shutting down")
        actor = self._actors.get(lane)
        if actor is not None and not actor.closed:
            return actor
        task = self._opening.get(lane)
        if task is None:
            if not self._has_file(lane):
                if not create:
                    return None
                self._admit_new(lane)  # before any file is made
            task = asyncio.create_task(self._open(lane), name=f"lane-open:{lane}")
            self._opening[lane] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(lane, None)

    async def _open(self, lane: str) -> LaneActor:
        settings = self.config.lane_settings(lane)
        assert settings is not None
        store = SqliteLaneStore(self.path_for(lane), lane)
        actor = LaneActor(lane, settings, store, self.executor, self.clock, self.metrics)
        if self._draining:
            actor.drain()
        try:
            await actor.start()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await actor.stop()  # closes the store
            if not self._has_file(lane):
                self._lane_files.discard(lane)  # no file was made: it takes no place
            raise self._open_failed(lane, exc) from exc
        self._actors[lane] = actor
        if self._failed.pop(lane, None) is not None:
            self.metrics.lane_open_failures(len(self._failed))
        log.info("lane.opened", lane=lane)
        return actor

    def lane_count(self) -> int:
        """Lanes counted against max_lanes: lanes with a file and configured lanes, once each."""
        return len(self._lane_files | self.config.lanes.keys())

    def _admit_new(self, lane: str) -> None:
        """A lane with no file is about to be made: refuse it (503) when max_lanes lanes are
        counted already. A configured lane, or one counted already, is always admitted."""
        if lane in self._lane_files or lane in self.config.lanes:
            return
        limit = self.config.max_lanes
        if self.lane_count() >= limit and time.monotonic() - self._scanned_at >= RESCAN_SECONDS:
            self._lane_files = set(self.lanes_on_disk()) | set(self._opening) | set(self._actors)
            self._scanned_at = time.monotonic()
        if self.lane_count() >= limit:
            self.metrics.lane_limit_refused()
            self._log_limit(limit)
            raise Unavailable(
                f"lane limit reached: max_lanes = {limit}; raise it in the config "
                "or remove unused lane files"
            )
        self._lane_files.add(lane)

    def _log_limit(self, limit: int) -> None:
        self._limit_log(max_lanes=limit, lanes=self.lane_count())

    def _open_failed(self, lane: str, exc: Exception) -> StoreError:
        """Record, log and count a lane whose file cannot be opened or read; the file is left
        exactly as it is. Its operations answer 503 with the reason; other lanes go on."""
        reason = open_failure_reason(exc)
        if self._failed.get(lane) != reason:  # log each new reason once, not every request
            log.error("lane.open_failed", lane=lane, file=self.path_for(lane).name, reason=reason)
        self._failed[lane] = reason
        self.metrics.lane_open_failures(len(self._failed))
        return StoreError(f"lane {lane} cannot be opened: {reason}", reason=reason)

    async def _close(self, lane: str) -> None:
        actor = self._actors.pop(lane, None)
        if actor is not None:
            await actor.stop()
            log.info("lane.closed", lane=lane)

    async def close_idle(self, idle_seconds: float = LANE_IDLE_CLOSE_SECONDS) -> None:
        now = self.clock.now()
        for lane, actor in list(self._actors.items()):
            if actor.idle() and now - actor.last_used >= idle_seconds:
                await self._close(lane)

    async def _janitor_loop(self) -> None:
        while True:
            await asyncio.sleep(JANITOR_INTERVAL_SECONDS)
            try:
                await self.close_idle()
            except Exception as exc:
                log.error("lane.janitor_failed", error=type(exc).__name__)

    def drain(self) -> None:
        """Shutdown has begun (the listener is closed): parked long polls answer at once
        with the ticket's current state, so in-flight requests finish inside the grace period
        and the lanes are then closed cleanly."""
        self._draining = True
        for actor in self._actors.values():
            actor.drain()

    def open_lanes(self) -> list[str]:
        return sorted(self._actors)

    async def stop(self) -> None:
        self._closing = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        for lane in list(self._actors):
            await self._close(lane)
        self.executor.shutdown(wait=True)
        self._lock.release()
