"""One server's lane files (SQLite): pipelined actors, and what keeps many lane files cheap.

- A descriptor budget: lanes holding their file open stay under it (least recently used
  first let go of theirs, in a call of their own; while more than SUSPEND_BACKLOG of those
  are pending, new calls wait), and quiet lanes let go of theirs; a lane's file is opened
  again shortly before its alarm, so the alarm's commit does not wait for it.
- Startup: every lane file's recorded next deadline is read in the background, after the
  socket listens; due lanes are woken at once, the others when they fall due
  (coordinator/actor/deadlines.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from coordinator.actor.base import LaneActor
from coordinator.actor.deadlines import LaneDeadlines
from coordinator.actor.descriptors import ConnectionLru, lane_budget, open_file_limit
from coordinator.actor.pipelined import PipelinedLaneActor
from coordinator.actor.upkeep import Lanes, Upkeep
from coordinator.constants import LANE_QUIET_SECONDS
from coordinator.engine.model import LaneSettings
from coordinator.engine.store import PipelinedStore
from coordinator.errors import StoreError

log = structlog.get_logger("coordinator.registry")

SUSPEND_BACKLOG = 4  # lanes past the descriptor budget still closing their file, at most
REARM_BATCH = 256  # lane files whose deadline one store-thread call reads at startup
WAKE_PARALLEL = 16  # due lanes (not open) woken at once, at most a quarter of the budget


class FileUpkeep(Upkeep):
    def __init__(self, lanes: Lanes) -> None:
        super().__init__(lanes)
        self.lru = ConnectionLru(lane_budget(open_file_limit(), lanes.config.max_connections))
        self.suspending: set[asyncio.Task[None]] = set()
        self._preopening: set[asyncio.Task[None]] = set()
        parallel = min(WAKE_PARALLEL, self.lru.budget // 4)
        self._deadlines = LaneDeadlines(lanes.clock, lanes.wake, parallel)

    def make_actor(self, lane: str, settings: LaneSettings) -> LaneActor[Any]:
        r = self.lanes
        store = r.storage.make_store(lane)
        assert isinstance(store, PipelinedStore), "one server's lane files are pipelined"
        actor = PipelinedLaneActor(
            lane, settings, store, r.executor, r.clock, r.metrics, kind=r.kind
        )
        actor.before_alarm = self._preopen
        return actor

    def start(self, stored: list[str]) -> None:
        log.info(
            "lanes.descriptor_budget",
            open_file_limit=open_file_limit(),
            lanes_open_at_once=self.lru.budget,
            lanes=len(stored),
        )
        self._deadlines.start()
        self._spawn(self._rearm_all(stored), "lane-rearm")

    async def stop(self) -> None:
        await super().stop()
        await self._deadlines.stop()
        for task in [*self.suspending, *self._preopening]:
            task.cancel()

    # ---------------------------------------------------------------- the descriptor budget

    def touched(self, lane: str) -> None:
        """A call for `lane`: it holds its file now; lanes over the descriptor budget (least
        recently used first) let go of theirs."""
        for old in self.lru.used(lane):
            actor = self.lanes.open_actor(old)
            if actor is not None:
                task = asyncio.create_task(actor.suspend_store(), name=f"lane-suspend:{old}")
                self.suspending.add(task)
                task.add_done_callback(self.suspending.discard)

    async def backpressure(self) -> None:
        while len(self.suspending) > SUSPEND_BACKLOG:
            await asyncio.wait(set(self.suspending), return_when=asyncio.FIRST_COMPLETED)

    def closed(self, lane: str) -> None:
        self.lru.forget(lane)

    async def housekeep(self) -> None:
        await self.suspend_quiet()

    async def suspend_quiet(self, quiet_seconds: float = LANE_QUIET_SECONDS) -> None:
        """Lanes with no call for quiet_seconds let go of their file (a quiet lane holds no
        descriptor); their memory and alarms stay."""
        now = self.lanes.clock.now()
        for actor in self.lanes.open_actors():
            if actor.connected and now - actor.last_used >= quiet_seconds:
                self.lru.forget(actor.lane)
                await actor.suspend_store()

    def _preopen(self, lane: str) -> None:
        """The lane's alarm falls due in PREOPEN_SECONDS: if its file was let go of, it is
        opened again now (on a store thread), a few at a time (a burst of alarms must not
        push each other out)."""
        actor = self.lanes.open_actor(lane)
        if actor is None or actor.closed or actor.connected:
            return
        if len(self._preopening) >= max(1, self.lru.budget // 4):
            return
        task = asyncio.create_task(actor.resume_store(), name=f"lane-preopen:{lane}")
        self._preopening.add(task)
        task.add_done_callback(self._preopening.discard)

    # ---------------------------------------------------------------- startup

    async def _rearm_all(self, lanes: list[str]) -> None:
        enforced = []
        for lane in lanes:
            if self.lanes.config.lane_settings(lane) is None:
                log.warning("lane.unenforced_file_ignored", lane=lane)
            else:
                enforced.append(lane)
        for i in range(0, len(enforced), REARM_BATCH):
            batch = enforced[i : i + REARM_BATCH]
            # On a thread of its own: the due lanes found so far are being opened on the store
            # threads meanwhile, and the sweep must not queue behind them.
            peeked = await asyncio.get_running_loop().run_in_executor(None, self._peek, batch)
            for lane, (known, deadline) in zip(batch, peeked, strict=True):
                if self.lanes.open_actor(lane) is not None:
                    continue  # opened by a call meanwhile: its own alarm is armed
                if not known:
                    await self._rearm_stored(lane)  # an older file: open it to find out
                elif deadline is not None:
                    self._deadlines.add(deadline, lane)
        log.info("lanes.rearmed", lanes=len(enforced), pending=len(self._deadlines))

    def _peek(self, lanes: list[str]) -> list[tuple[bool, float | None]]:
        return [self.lanes.storage.peek_deadline(lane) for lane in lanes]

    async def _rearm_stored(self, lane: str) -> None:
        try:
            actor = await self.lanes.get(lane, create=False)
        except StoreError:
            return  # logged and counted by the registry; every other lane is served
        if actor is not None and actor.idle():
            await self.lanes.close(lane)
        elif actor is not None:
            log.info("lane.rearmed", lane=lane, live=actor.live_count())
