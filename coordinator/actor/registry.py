"""The lane registry: opens a lane's actor on first use (within max_lanes), closes idle
lanes so their store connections are released, and shuts them down cleanly. What a store
mode adds — its kind of actor and its background work — is its `Upkeep`
(coordinator/actor/upkeep.py): `FileUpkeep` for one server's lane files, `ReplicaSync` for
replicas sharing a database. Readiness is coordinator/actor/readiness.py, the lane limit
coordinator/actor/lane_limit.py. No store call runs on the event loop: each is on a store
thread (`io`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from coordinator.actor.base import LaneActor
from coordinator.actor.file_upkeep import FileUpkeep
from coordinator.actor.lane_limit import LaneLimit
from coordinator.actor.readiness import Readiness
from coordinator.actor.replica_sync import ReplicaSync
from coordinator.actor.upkeep import Upkeep
from coordinator.clock import Clock
from coordinator.config import Config
from coordinator.constants import JANITOR_INTERVAL_SECONDS, LANE_IDLE_CLOSE_SECONDS, STORE_THREADS
from coordinator.errors import StoreError
from coordinator.metrics import NULL_METRICS, LaneObserver
from coordinator.protocol.errors import LaneError, Unavailable
from coordinator.store.files import open_failure_reason
from coordinator.store.storage import Storage

log = structlog.get_logger("coordinator.registry")
T = TypeVar("T")


class LaneRegistry:
    def __init__(
        self, config: Config, storage: Storage, clock: Clock, metrics: LaneObserver = NULL_METRICS
    ) -> None:
        self.config = config
        self.storage = storage
        self.kind = storage.kind
        self.clock = clock
        self.metrics = metrics
        # A shared store's transaction may wait for another replica's lock on a store
        # thread: one thread per transaction it may run at once, and two for the rest.
        threads = max(STORE_THREADS, (storage.max_transactions or 0) + 2)  # + probes, polls
        self.executor: Executor = ThreadPoolExecutor(threads, thread_name_prefix="lane-store")
        self._actors: dict[str, LaneActor[Any]] = {}
        self._opening: dict[str, asyncio.Task[LaneActor[Any]]] = {}
        self._janitor: asyncio.Task[None] | None = None
        self._failed: dict[str, str] = {}  # lane -> why its store cannot be opened or read
        self.closing = False
        self._stopped = False
        self._draining = False
        self._started = False
        self._storage_started = False
        self.limit = LaneLimit(config, metrics, lambda: self.io(storage.stored_lanes))
        self._readiness = Readiness(lambda: self.io(storage.problem))
        self.upkeep: Upkeep = ReplicaSync(self) if storage.shared else FileUpkeep(self)

    async def io(self, fn: Callable[..., T], *args: Any) -> T:
        """A storage call on a store thread (files or the network may block)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self.io(self.storage.start)
        self._storage_started = True
        stored = await self.io(self.storage.stored_lanes)
        self.limit.listed(stored)
        self.upkeep.start(stored)
        self._janitor = asyncio.create_task(self._janitor_loop(), name="lane-janitor")
        self._started = True

    def drain(self) -> None:
        """Shutdown has begun (the listener is closed): parked long polls answer at once
        with the ticket's current state, so in-flight requests finish inside the grace period
        and the lanes are then closed cleanly."""
        self._draining = True
        for actor in self._actors.values():
            actor.drain()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.closing = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        await self.upkeep.stop()
        for lane in list(self._actors):
            await self.close(lane)
        if self._storage_started:
            await self.io(self.storage.stop)
        self.executor.shutdown(wait=True)

    # ---------------------------------------------------------------- reads

    def lane_error(self, lane: str) -> str | None:
        """Why the lane's file could not be opened or read at its last attempt (None: fine)."""
        return self._failed.get(lane)

    def broken_lane_count(self) -> int:
        """Lanes whose file could not be opened or read at their last attempt."""
        return len(self._failed)

    async def known_lanes(self) -> list[str]:
        """Every stored lane, configured lane and open lane, sorted. When the store cannot
        list its lanes (the database is down), the last list it gave is used."""
        with contextlib.suppress(StoreError):
            self.limit.listed(await self.io(self.storage.stored_lanes))
        return sorted(set(self.limit.stored) | set(self.config.lanes) | set(self._actors))

    async def not_ready_reason(self) -> str | None:
        """Why no change could be committed now (None: ready)."""
        if self.closing or self._draining:
            return "shutting down"
        if not self._started:
            return "starting"
        return await self._readiness.problem()

    def open_lanes(self) -> list[str]:
        return sorted(self._actors)

    def open_actor(self, lane: str) -> LaneActor[Any] | None:
        """The lane's actor if it is open now (nothing is opened)."""
        return self._actors.get(lane)

    def open_actors(self) -> list[LaneActor[Any]]:
        return list(self._actors.values())

    # ---------------------------------------------------------------- opening and closing

    async def get(self, lane: str, *, create: bool) -> LaneActor[Any] | None:
        """The lane's actor, opened on demand; None when it has no file and create is False."""
        if self.closing:
            raise Unavailable("coordinator is shutting down")
        actor = self._actors.get(lane)
        if actor is not None and not actor.closed:
            self._touched(lane)  # make room now: the call will hold the file
            await self.upkeep.backpressure()
            return actor
        task = self._opening.get(lane)
        if task is None:
            stored = await self.io(self.storage.has_lane, lane)
            task = self._opening.get(lane)  # another call may have started it meanwhile
            actor = self._actors.get(lane)
            if actor is not None and not actor.closed:
                return actor
        if task is None:
            if not stored:
                if not create:
                    return None
                await self.limit.admit(lane, [*self._opening, *self._actors])
                # (admitting may have waited for a listing: another call may have opened it)
                actor = self._actors.get(lane)
                if actor is not None and not actor.closed:
                    return actor
            task = self._opening.get(lane)
            if task is None:
                task = asyncio.create_task(self._open(lane), name=f"lane-open:{lane}")
                self._opening[lane] = task
        try:
            opened = await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(lane, None)
        await self.upkeep.backpressure()
        return opened

    async def wake(self, lane: str) -> None:
        """Whatever fell due in the lane is done (its deadline came): opened if it is not."""
        try:
            actor = await self.get(lane, create=False)
            if actor is not None:
                await actor.tick()
        except LaneError:
            pass  # the lane answers 503 (logged where it failed); it is woken again later

    async def _open(self, lane: str) -> LaneActor[Any]:
        settings = self.config.lane_settings(lane)
        assert settings is not None
        self._touched(lane)  # the file opens now: it counts against the budget already
        await self.upkeep.backpressure()
        actor = self.upkeep.make_actor(lane, settings)
        if self._draining:
            actor.drain()
        try:
            await actor.start()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await actor.stop()  # closes the store
            with contextlib.suppress(Exception):
                if not await self.io(self.storage.has_lane, lane):
                    self.limit.forget(lane)  # nothing was stored: it takes no place
            raise self._open_failed(lane, exc) from exc
        self._actors[lane] = actor
        actor.touched = self._touched
        self._touched(lane)
        if self._failed.pop(lane, None) is not None:
            self.metrics.lane_open_failures(len(self._failed))
        log.info("lane.opened", lane=lane)
        return actor

    def _open_failed(self, lane: str, exc: Exception) -> StoreError:
        """Record, log and count a lane whose file cannot be opened or read; the file is left
        exactly as it is. Its operations answer 503 with the reason; other lanes go on."""
        reason = open_failure_reason(exc)
        if self._failed.get(lane) != reason:  # log each new reason once, not every request
            log.error("lane.open_failed", lane=lane, reason=reason, **self.storage.where(lane))
        self._failed[lane] = reason
        self.metrics.lane_open_failures(len(self._failed))
        return StoreError(f"lane {lane} cannot be opened: {reason}", reason=reason)

    def _touched(self, lane: str) -> None:
        self.upkeep.touched(lane)

    async def close(self, lane: str) -> None:
        self.upkeep.closed(lane)
        actor = self._actors.pop(lane, None)
        if actor is not None:
            await actor.stop()
            log.info("lane.closed", lane=lane)

    async def close_idle(self, idle_seconds: float = LANE_IDLE_CLOSE_SECONDS) -> None:
        now = self.clock.now()
        for lane, actor in list(self._actors.items()):
            if actor.idle() and now - actor.last_used >= idle_seconds:
                await self.close(lane)

    async def _janitor_loop(self) -> None:
        while True:
            await asyncio.sleep(JANITOR_INTERVAL_SECONDS)
            try:
                await self.close_idle()
                await self.upkeep.housekeep()
            except Exception as exc:
                log.error("lane.janitor_failed", error=type(exc).__name__)
