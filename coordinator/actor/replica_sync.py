"""Replicas sharing a database (PostgreSQL): lock-first actors, and the two things that make
replicas agree in time — the LISTEN session (another replica's commit wakes this one's
parked awaits; every (re)connection wakes them all) and the alarm poller (a deadline armed
by any replica, even a dead one, fires within ALARM_POLL_SECONDS) — plus a periodic re-check
of parked awaits in case a notification was lost."""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.actor.base import LaneActor
from coordinator.actor.locking import LockingLaneActor
from coordinator.actor.loop_locking import LoopLockingLaneActor
from coordinator.actor.upkeep import Lanes, Upkeep
from coordinator.constants import ALARM_POLL_SECONDS, PARKED_RECHECK_SECONDS
from coordinator.engine.model import LaneSettings
from coordinator.engine.store import LockingStore, LoopLockingStore
from coordinator.errors import StoreError
from coordinator.logs import RateLimitedLog


class ReplicaSync(Upkeep):
    def __init__(self, lanes: Lanes) -> None:
        super().__init__(lanes)
        slots = lanes.storage.max_transactions  # lane transactions one replica runs at once
        self._txn_slots = asyncio.Semaphore(slots) if slots is not None else None
        self._firing: dict[str, asyncio.Task[None]] = {}  # lanes the poller is waking
        self._poll_failed = RateLimitedLog("lane.alarm_poll_failed")

    def make_actor(self, lane: str, settings: LaneSettings) -> LaneActor[Any]:
        r = self.lanes
        store = r.storage.make_store(lane)
        assert isinstance(store, LockingStore), "a shared store locks its lanes"
        # a store whose lock and commit can wait on the loop gets the actor that does so
        cls = LoopLockingLaneActor if isinstance(store, LoopLockingStore) else LockingLaneActor
        actor = cls(lane, settings, store, r.executor, r.clock, r.metrics, kind=r.kind)
        actor.txn_slots = self._txn_slots
        return actor

    def start(self, stored: list[str]) -> None:
        listen = self.lanes.storage.listen(self.on_lane_notified, self.wake_all_parked)
        self._spawn(listen, "lane-listen")
        self._spawn(self._alarm_poller(), "lane-alarms")
        self._spawn(self._parked_recheck(), "lane-recheck")

    def touched(self, lane: str) -> None:
        return None  # sessions belong to the replica's pool: no descriptor per lane

    async def backpressure(self) -> None:
        return None

    def closed(self, lane: str) -> None:
        return None

    async def housekeep(self) -> None:
        return None

    async def stop(self) -> None:
        await super().stop()
        for task in self._firing.values():
            task.cancel()

    def on_lane_notified(self, lane: str) -> None:
        """Another replica committed a change to `lane` that may wake a parked await."""
        actor = self.lanes.open_actor(lane)
        if actor is not None:
            actor.wake_all()

    def wake_all_parked(self) -> None:
        """Every parked await reads its lane afresh (a notification may have been lost)."""
        for actor in self.lanes.open_actors():
            actor.wake_all()

    async def _parked_recheck(self) -> None:
        while True:
            await asyncio.sleep(PARKED_RECHECK_SECONDS)
            self.wake_all_parked()

    async def _alarm_poller(self) -> None:
        """Wake every lane whose recorded deadline has come, whoever armed it: a lease
        expires on time even when the replica that granted it is gone. Two replicas waking
        the same lane is harmless: the second finds nothing due."""
        r = self.lanes
        while True:
            await asyncio.sleep(ALARM_POLL_SECONDS)
            try:
                due = await r.io(r.storage.lanes_due, r.clock.now())
            except StoreError as exc:
                self._poll_failed(error=exc.message)
                continue
            for lane in due:
                if r.closing:
                    return
                if r.config.lane_settings(lane) is None or lane in self._firing:
                    continue
                self._firing[lane] = asyncio.create_task(self._fire(lane), name=f"alarm:{lane}")

    async def _fire(self, lane: str) -> None:
        try:
            await self.lanes.wake(lane)
        finally:
            self._firing.pop(lane, None)
