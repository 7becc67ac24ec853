"""The lane registry: opens a lane's actor on first use, re-arms lanes at startup, closes
idle lanes so their store connections (and threads) are released, and, when the store is
shared by replicas (PostgreSQL), runs the two things that make replicas agree in time: the
LISTEN session (another replica's commit wakes this one's parked awaits) and the alarm
poller (a deadline armed by any replica, even a dead one, fires within ALARM_POLL_SECONDS)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from coordinator.actor.base import LaneActor
from coordinator.actor.deadlines import LaneDeadlines
from coordinator.actor.descriptors import ConnectionLru, lane_budget, open_file_limit
from coordinator.actor.locking import LockingLaneActor
from coordinator.actor.pipelined import PipelinedLaneActor
from coordinator.clock import Clock
from coordinator.config import Config
from coordinator.constants import (
    ALARM_POLL_SECONDS,
    JANITOR_INTERVAL_SECONDS,
    LANE_IDLE_CLOSE_SECONDS,
    LANE_QUIET_SECONDS,
    PARKED_RECHECK_SECONDS,
    STORE_THREADS,
)
from coordinator.engine.store import LockingStore, PipelinedStore
from coordinator.errors import StoreError
from coordinator.logs import RateLimitedLog
from coordinator.metrics import NULL_METRICS, LaneObserver
from coordinator.protocol.errors import LaneError, Unavailable
from coordinator.store.files import open_failure_reason
from coordinator.store.storage import Storage

log = structlog.get_logger("coordinator.registry")
T = TypeVar("T")


RESCAN_SECONDS = 1.0  # at the limit, the stored lanes are listed again at most once a second
READY_CHECK_SECONDS = 1.0  # /readyz probes the store at most once a second
SUSPEND_BACKLOG = 4  # lanes past the descriptor budget still closing their file, at most
REARM_BATCH = 256  # lane files whose deadline one store-thread call reads at startup
WAKE_PARALLEL = 16  # due lanes (not open) woken at once, at most a quarter of the budget


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
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="lane-store")
        self._actors: dict[str, LaneActor[Any]] = {}
        self._opening: dict[str, asyncio.Task[LaneActor[Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._firing: dict[str, asyncio.Task[None]] = {}  # lanes the alarm poller is waking
        self._failed: dict[str, str] = {}  # lane -> why its store cannot be opened or read
        self._closing = False
        self._stopped = False
        self._draining = False
        self._started = False
        self._storage_started = False
        self._ready_checked_at: float | None = None
        self._ready_probe: asyncio.Task[str | None] | None = None
        self._problem: str | None = None
        # A shared store bounds the lane transactions one replica runs at once.
        slots = storage.max_transactions
        self._txn_slots = asyncio.Semaphore(slots) if slots is not None else None
        # Lanes counted against max_lanes: those stored (read at start, re-read at the limit
        # so a removed lane frees its place) and those being created now.
        self._lane_files: set[str] = set()
        self._stored: list[str] = []
        self._scanned_at = 0.0
        self._limit_log = RateLimitedLog("lane.limit_reached")
        self._poll_failed = RateLimitedLog("lane.alarm_poll_failed")
        # Lanes holding a store connection stay under a descriptor budget (LRU); deadlines of
        # lanes not open yet (startup) are kept here until they fall due.
        self._lru = ConnectionLru(lane_budget(open_file_limit(), config.max_connections))
        self._suspending: set[asyncio.Task[None]] = set()
        self._preopening: set[asyncio.Task[None]] = set()
        parallel = min(WAKE_PARALLEL, self._lru.budget // 4)
        self._deadlines = LaneDeadlines(clock, self._fire, parallel)

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        """A storage call on a store thread (files or the network may block)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def lane_error(self, lane: str) -> str | None:
        """Why the lane's file could not be opened or read at its last attempt (None: fine)."""
        return self._failed.get(lane)

    async def known_lanes(self) -> list[str]:
        """Every stored lane, configured lane and open lane, sorted. When the store cannot
        list its lanes (the database is down), the last list it gave is used."""
        with contextlib.suppress(StoreError):
            self._stored = await self._io(self.storage.stored_lanes)
        return sorted(set(self._stored) | set(self.config.lanes) | set(self._actors))

    async def start(self) -> None:
        await self._io(self.storage.start)
        self._storage_started = True
        stored = await self._io(self.storage.stored_lanes)
        self._stored = stored
        self._lane_files = set(stored)
        self._scanned_at = time.monotonic()
        if not self.storage.shared:
            # One server: every lane's recorded deadline is read in the background, after the
            # socket listens; due lanes are woken at once, the others when they fall due.
            # Replicas: the alarm poller finds due lanes.
            log.info(
                "lanes.descriptor_budget",
                open_file_limit=open_file_limit(),
                lanes_open_at_once=self._lru.budget,
                lanes=len(stored),
            )
            self._deadlines.start()
            self._tasks.append(asyncio.create_task(self._rearm_all(stored), name="lane-rearm"))
        self._tasks.append(asyncio.create_task(self._janitor_loop(), name="lane-janitor"))
        if self.storage.shared:
            self._tasks.append(
                asyncio.create_task(
                    self.storage.listen(self.on_lane_notified, self.wake_all_parked),
                    name="lane-listen",
                )
            )
            self._tasks.append(asyncio.create_task(self._alarm_poller(), name="lane-alarms"))
            self._tasks.append(asyncio.create_task(self._parked_recheck(), name="lane-recheck"))
        self._started = True

    async def _rearm_all(self, lanes: list[str]) -> None:
        enforced = []
        for lane in lanes:
            if self.config.lane_settings(lane) is None:
                log.warning("lane.unenforced_file_ignored", lane=lane)
            else:
                enforced.append(lane)
        for i in range(0, len(enforced), REARM_BATCH):
            batch = enforced[i : i + REARM_BATCH]
            # On a thread of its own: the due lanes found so far are being opened on the store
            # threads meanwhile, and the sweep must not queue behind them.
            peeked = await asyncio.get_running_loop().run_in_executor(None, self._peek, batch)
            for lane, (known, deadline) in zip(batch, peeked, strict=True):
                if lane in self._actors:
                    continue  # opened by a call meanwhile: its own alarm is armed
                if not known:
                    await self._rearm_stored(lane)  # an older file: open it to find out
                elif deadline is not None:
                    self._deadlines.add(deadline, lane)
        log.info("lanes.rearmed", lanes=len(enforced), pending=len(self._deadlines))

    def _peek(self, lanes: list[str]) -> list[tuple[bool, float | None]]:
        return [self.storage.peek_deadline(lane) for lane in lanes]

    async def _rearm_stored(self, lane: str) -> None:
        if self.config.lane_settings(lane) is None:
            log.warning("lane.unenforced_file_ignored", lane=lane)
            return
        try:
            actor = await self.get(lane, create=False)
        except StoreError:
            return  # logged and counted by _open; every other lane is served
        if actor is not None and actor.idle():
            await self._close(lane)
        elif actor is not None:
            log.info("lane.rearmed", lane=lane, live=actor.live_count())

    async def not_ready_reason(self) -> str | None:
        """Why no change could be committed now (None: ready). The store is probed at most
        once per READY_CHECK_SECONDS (a data dir write, or a database round trip), so a
        flood of probes costs one a second; concurrent callers share one probe."""
        if self._closing or self._draining:
            return "shutting down"
        if not self._started:
            return "starting"
        now = time.monotonic()
        stale = (
            self._ready_checked_at is None or now - self._ready_checked_at >= READY_CHECK_SECONDS
        )
        if stale and self._ready_probe is None:
            self._ready_probe = asyncio.ensure_future(self._io(self.storage.problem))
        if self._ready_probe is not None:
            probe = self._ready_probe
            try:
                self._problem = await asyncio.shield(probe)
            except Exception as exc:
                self._problem = f"store check failed: {type(exc).__name__}"
            finally:
                if self._ready_probe is probe and probe.done():
                    self._ready_probe = None
                    self._ready_checked_at = time.monotonic()
        return self._problem

    def broken_lane_count(self) -> int:
        """Lanes whose file could not be opened or read at their last attempt."""
        return len(self._failed)

    async def get(self, lane: str, *, create: bool) -> LaneActor[Any] | None:
        """The lane's actor, opened on demand; None when it has no file and create is False."""
        if self._closing:
            raise Unavailable("coordinator is shutting down")
        actor = self._actors.get(lane)
        if actor is not None and not actor.closed:
            self._touched(lane)  # make room now: the call's job will hold the file
            await self._backpressure()
            return actor
        task = self._opening.get(lane)
        if task is None:
            stored = await self._io(self.storage.has_lane, lane)
            task = self._opening.get(lane)  # another call may have started it meanwhile
            actor = self._actors.get(lane)
            if actor is not None and not actor.closed:
                return actor
        if task is None:
            if not stored:
                if not create:
                    return None
                self._admit_new(lane)  # before anything is stored
            task = asyncio.create_task(self._open(lane), name=f"lane-open:{lane}")
            self._opening[lane] = task
        try:
            opened = await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(lane, None)
        await self._backpressure()
        return opened

    async def _open(self, lane: str) -> LaneActor[Any]:
        settings = self.config.lane_settings(lane)
        assert settings is not None
        self._touched(lane)  # the file opens now: it counts against the budget already
        await self._backpressure()
        store = self.storage.make_store(lane)
        actor: LaneActor[Any]
        if self.storage.shared:
            assert isinstance(store, LockingStore)
            actor = LockingLaneActor(
                lane, settings, store, self.executor, self.clock, self.metrics,
                kind=self.kind, txn_slots=self._txn_slots,
            )  # fmt: skip
        else:
            assert isinstance(store, PipelinedStore)
            actor = PipelinedLaneActor(
                lane, settings, store, self.executor, self.clock, self.metrics, kind=self.kind
            )
        if self._draining:
            actor.drain()
        try:
            await actor.start()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await actor.stop()  # closes the store
            with contextlib.suppress(Exception):
                if not await self._io(self.storage.has_lane, lane):
                    self._lane_files.discard(lane)  # nothing was stored: it takes no place
            raise self._open_failed(lane, exc) from exc
        self._actors[lane] = actor
        actor.touched = self._touched
        if not self.storage.shared:
            actor.before_alarm = self._preopen
        self._touched(lane)
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
            stored = set(self._stored)
            with contextlib.suppress(StoreError):
                stored = set(self.storage.stored_lanes())  # a cheap listing, once a second
            self._lane_files = stored | set(self._opening) | set(self._actors)
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
            log.error("lane.open_failed", lane=lane, reason=reason, **self.storage.where(lane))
        self._failed[lane] = reason
        self.metrics.lane_open_failures(len(self._failed))
        return StoreError(f"lane {lane} cannot be opened: {reason}", reason=reason)

    def _touched(self, lane: str) -> None:
        """A job for `lane`: it holds its connection now; lanes over the descriptor budget
        (least recently used first) let go of theirs."""
        if self.storage.shared:
            return
        for old in self._lru.used(lane):
            actor = self._actors.get(old)
            if actor is not None:
                task = asyncio.create_task(actor.suspend_store(), name=f"lane-suspend:{old}")
                self._suspending.add(task)
                task.add_done_callback(self._suspending.discard)

    def _preopen(self, lane: str) -> None:
        """The lane's alarm falls due in PREOPEN_SECONDS: if its file was let go of, it is
        opened again now (a job, on a store thread), so the alarm's commit does not wait for
        the file; a few at a time (a burst of alarms must not push each other out)."""
        actor = self._actors.get(lane)
        if actor is None or actor.closed or actor.connected:
            return
        if len(self._preopening) >= max(1, self._lru.budget // 4):
            return
        task = asyncio.create_task(self._reopen(actor), name=f"lane-preopen:{lane}")
        self._preopening.add(task)
        task.add_done_callback(self._preopening.discard)

    @staticmethod
    async def _reopen(actor: LaneActor[Any]) -> None:
        await actor.resume_store()

    async def _backpressure(self) -> None:
        """Lanes pushed out of the descriptor budget close their file in a job of their own;
        while more than SUSPEND_BACKLOG of those are still pending, new calls wait, so the
        files open at once stay near the budget under any load."""
        while len(self._suspending) > SUSPEND_BACKLOG:
            await asyncio.wait(set(self._suspending), return_when=asyncio.FIRST_COMPLETED)

    async def suspend_quiet(self, quiet_seconds: float = LANE_QUIET_SECONDS) -> None:
        """Lanes with no call for quiet_seconds let go of their connection (a quiet lane
        holds no descriptor); their memory and alarms stay."""
        now = self.clock.now()
        for lane, actor in list(self._actors.items()):
            if actor.connected and now - actor.last_used >= quiet_seconds:
                self._lru.forget(lane)
                await actor.suspend_store()

    async def _close(self, lane: str) -> None:
        self._lru.forget(lane)
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
                await self.suspend_quiet()
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

    # ---------------------------------------------------------------- replicas

    def on_lane_notified(self, lane: str) -> None:
        """Another replica committed a change to `lane` that may wake a parked await."""
        actor = self._actors.get(lane)
        if actor is not None:
            actor.wake_all()

    def wake_all_parked(self) -> None:
        """Every parked await reads its lane afresh (a notification may have been lost)."""
        for actor in list(self._actors.values()):
            actor.wake_all()

    async def _parked_recheck(self) -> None:
        while True:
            await asyncio.sleep(PARKED_RECHECK_SECONDS)
            self.wake_all_parked()

    async def _alarm_poller(self) -> None:
        """Wake every lane whose recorded deadline has come, whoever armed it: a lease
        expires on time even when the replica that granted it is gone. Two replicas waking
        the same lane is harmless: the second finds nothing due."""
        while True:
            await asyncio.sleep(ALARM_POLL_SECONDS)
            try:
                due = await self._io(self.storage.lanes_due, self.clock.now())
            except StoreError as exc:
                self._poll_failed(error=exc.message)
                continue
            for lane in due:
                if self._closing:
                    return
                if self.config.lane_settings(lane) is None or lane in self._firing:
                    continue
                self._firing[lane] = asyncio.create_task(self._fire(lane), name=f"alarm:{lane}")

    async def _fire(self, lane: str) -> None:
        try:
            actor = await self.get(lane, create=False)
            if actor is not None:
                await actor.tick()
        except LaneError:
            pass  # the lane answers 503 (logged where it failed); the next poll tries again
        finally:
            self._firing.pop(lane, None)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._deadlines.stop()
        for task in [*self._firing.values(), *self._suspending, *self._preopening]:
            task.cancel()
        for lane in list(self._actors):
            await self._close(lane)
        if self._storage_started:
            await self._io(self.storage.stop)
        self.executor.shutdown(wait=True)
