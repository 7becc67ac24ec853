"""Machine presence: which computers made a signed call lately, and naming which lanes.

The store holds it (coordinator/store/presence.py: a small SQLite file in the data dir, or the
shared PostgreSQL database), so every replica lists the same machines and a restart forgets
none. `Presence` keeps this process's sightings in memory and writes them through:

- `saw` (every signed lane call) writes a (machine, lane) row at once the first time, then at
  most every SEEN_WRITE_SECONDS (a heartbeat loop does not write on every call). Writes run on
  an executor, never on the event loop, one batch at a time; a failed write is logged
  (rate-limited) and never fails a request: the row is tried again at its next sighting.
- `view` lists what the store holds (every replica's writes, at most SEEN_WRITE_SECONDS old),
  with this process's own newer sightings: the machines seen in the last
  PRESENCE_RECENT_SECONDS, the most recent first, at most MACHINES_LISTED_MAX. A store that
  cannot be read is logged (rate-limited) and the list is this process's sightings.
- `close` (app cleanup) writes what the throttle held back, then closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TypeVar

from coordinator.constants import (
    MACHINE_ONLINE_SECONDS,
    MACHINES_LISTED_MAX,
    PRESENCE_RECENT_SECONDS,
    SEEN_WRITE_SECONDS,
)
from coordinator.logs import RateLimitedLog
from coordinator.protocol.replies import Machine
from coordinator.store.presence import PresenceStore, Sighting

T = TypeVar("T")
_Key = tuple[str, str]  # (machine, lane); "" when the call named no lane


class Presence:
    def __init__(self, store: PresenceStore, executor: Executor | None = None) -> None:
        """`executor` runs the store's calls (None: a thread of this object's own)."""
        self.store = store
        self._own_executor = executor is None
        self._executor: Executor = executor or ThreadPoolExecutor(1, thread_name_prefix="presence")
        self._seen: dict[_Key, float] = {}  # this process's latest sighting of each row
        self._sent: dict[_Key, float] = {}  # the time last handed to the store for each row
        self._due: dict[_Key, float] = {}  # rows waiting for the next write
        self._writing: asyncio.Task[None] | None = None
        self._closed = False
        self._write_failed = RateLimitedLog("presence.write_failed")
        self._read_failed = RateLimitedLog("presence.read_failed")

    def saw(self, machine_id: str, now: float, lane: str | None) -> None:
        """A signed call from `machine_id` naming `lane` (on the event loop)."""
        key = (machine_id, lane or "")
        last = self._seen.get(key)
        at = now if last is None else max(last, now)
        self._seen[key] = at
        sent = self._sent.get(key)
        if self._closed or (sent is not None and at - sent < SEEN_WRITE_SECONDS):
            return
        self._sent[key] = self._due[key] = at
        if self._writing is None:
            self._writing = asyncio.get_running_loop().create_task(self._drain())

    async def flushed(self) -> None:
        """Wait until every write started so far has ended (tests; `close` does this too)."""
        while self._writing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._writing)

    async def _drain(self) -> None:
        try:
            while self._due:
                batch, self._due = self._due, {}
                await self._write(batch)
        finally:
            self._writing = None

    async def _write(self, batch: dict[_Key, float]) -> None:
        rows = [Sighting(m, lane, at) for (m, lane), at in batch.items()]
        newest = max(batch.values())
        try:
            await self._run(self.store.record, rows, newest - PRESENCE_RECENT_SECONDS)
        except Exception as exc:
            for key, at in batch.items():  # written again at the next sighting
                if self._sent.get(key) == at:
                    del self._sent[key]
            self._write_failed(store=repr(self.store), error=type(exc).__name__)
        self._forget_before(newest - PRESENCE_RECENT_SECONDS)

    def _forget_before(self, cutoff: float) -> None:
        for key in [k for k, at in self._seen.items() if at < cutoff]:
            del self._seen[key]
            self._sent.pop(key, None)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def view(self, now: float) -> list[Machine]:
        since = now - PRESENCE_RECENT_SECONDS
        latest: dict[_Key, float] = {}
        try:
            for s in await self._run(self.store.recent, since, MACHINES_LISTED_MAX):
                latest[(s.machine_id, s.lane)] = s.last_seen_at
        except Exception as exc:
            self._read_failed(store=repr(self.store), error=type(exc).__name__)
        for key, at in self._seen.items():
            if at >= since and at > latest.get(key, float("-inf")):
                latest[key] = at
        machines: dict[str, tuple[float, set[str]]] = {}
        for (machine_id, lane), at in latest.items():
            last, lanes = machines.get(machine_id, (at, set()))
            if lane:
                lanes.add(lane)
            machines[machine_id] = (max(last, at), lanes)
        rows = [
            Machine(
                machine_id=m,
                last_seen_at=last,
                online=now - last <= MACHINE_ONLINE_SECONDS,
                seconds_since_seen=round(max(0.0, now - last), 3),
                lanes=sorted(lanes),
            )
            for m, (last, lanes) in machines.items()
        ]
        rows.sort(key=lambda r: (-r.last_seen_at, r.machine_id))
        return rows[:MACHINES_LISTED_MAX]

    async def close(self) -> None:
        """Write every sighting the throttle held back, then close the store."""
        if self._closed:
            return
        self._closed = True
        await self.flushed()
        held = {k: at for k, at in self._seen.items() if self._sent.get(k) != at}
        if held:
            await self._write(held)
        with contextlib.suppress(Exception):
            await self._run(self.store.close)
        if self._own_executor:
            self._executor.shutdown(wait=False)
