"""What a store mode adds to the lane registry (coordinator/actor/registry.py), as one
abstract base: the actor its lanes get, and the background work that keeps those lanes
right — for one server's lane files `FileUpkeep` (coordinator/actor/file_upkeep.py), for
replicas sharing a database `ReplicaSync` (coordinator/actor/replica_sync.py)."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from coordinator.actor.base import LaneActor
from coordinator.clock import Clock
from coordinator.config import Config
from coordinator.engine.model import LaneSettings
from coordinator.metrics import LaneObserver
from coordinator.store.storage import Storage

T = TypeVar("T")


class Lanes(Protocol):
    """What an upkeep uses of the lane registry (coordinator/actor/registry.py)."""

    config: Config
    storage: Storage
    clock: Clock
    metrics: LaneObserver
    executor: Executor
    kind: str
    closing: bool

    async def io(self, fn: Callable[..., T], *args: Any) -> T: ...

    def open_actor(self, lane: str) -> LaneActor[Any] | None: ...

    def open_actors(self) -> list[LaneActor[Any]]: ...

    async def get(self, lane: str, *, create: bool) -> LaneActor[Any] | None: ...

    async def wake(self, lane: str) -> None: ...

    async def close(self, lane: str) -> None: ...


class Upkeep(ABC):
    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes
        self.tasks: list[asyncio.Task[None]] = []

    @abstractmethod
    def make_actor(self, lane: str, settings: LaneSettings) -> LaneActor[Any]:
        """A new (not started) actor for `lane`, on a store of this mode."""

    @abstractmethod
    def start(self, stored: list[str]) -> None:
        """Begin the background work; `stored`: the lanes the store holds now."""

    @abstractmethod
    def touched(self, lane: str) -> None:
        """A call for `lane` is about to run (it may hold the lane's descriptors)."""

    @abstractmethod
    async def backpressure(self) -> None:
        """Wait while the lanes' housekeeping is too far behind to take another call."""

    @abstractmethod
    def closed(self, lane: str) -> None:
        """The lane's actor was closed."""

    @abstractmethod
    async def housekeep(self) -> None:
        """The janitor's periodic round (after idle lanes were closed)."""

    def _spawn(self, coro: Any, name: str) -> None:
        self.tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self) -> None:
        """End the background work."""
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks.clear()
