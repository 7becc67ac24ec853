"""The lane actor for a store other processes write too (PostgreSQL replicas).

Commit pipelining cannot survive there: another replica may take the lane between two
groups. Each batch of the mailbox is one lane transaction, run lock-first by the engine's
`run_locked` on a store thread (coordinator/engine/transaction.py): lock the lane and read
its version; when another replica wrote since, reload it inside the transaction; run the
operations (their reads inside the transaction too); write the changes with the lane's next
deadline and last `now`; COMMIT; only then are the replies released. A batch whose changes
may wake a parked await elsewhere (a ticket queued before it was promoted or ended, a
pause change) sends a NOTIFY with its commit. A batch that writes nothing answers before its
ROLLBACK: it read committed state under the lock, and nothing of it waits for the
transaction's end.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from coordinator.actor.base import Call, LaneActor, Pending
from coordinator.engine.operations import Operation
from coordinator.engine.store import LockingStore
from coordinator.engine.transaction import LockedRun, run_locked
from coordinator.protocol.errors import Unavailable

log = structlog.get_logger("coordinator.actor")


class LockingLaneActor(LaneActor[LockingStore]):
    txn_slots: asyncio.Semaphore | None = None  # bounds one replica's open transactions
    _expect_stale = False  # the next transaction reads the lane with its lock

    # ---------------------------------------------------------------- LaneActor

    async def _enqueue(self, call: Call) -> None:
        self._mailbox.put_nowait(call)  # a lock-first batch stays batched: never inline

    async def _run_batch(self, batch: list[Call]) -> None:
        if self.txn_slots is None:
            await self._transaction(batch)
            return
        async with self.txn_slots:
            await self._transaction(batch)

    async def _barrier(self) -> None:
        return None  # every batch is committed before its replies: nothing is pending

    def _settled(self) -> bool:
        return True

    async def suspend_store(self) -> None:
        return None  # sessions belong to the replica's pool, not to a lane

    async def resume_store(self) -> None:
        return None

    def wake_all(self) -> None:
        """Another replica changed the lane (or a notification may have been lost): the next
        transaction reads the lane in the same round trip as its lock."""
        self._expect_stale = True
        super().wake_all()

    # ---------------------------------------------------------------- one transaction

    def _locked(self, ops: list[Operation[Any]], expect_stale: bool) -> LockedRun:
        """On a store thread: the engine's lane transaction."""
        return run_locked(self.store, self.memory, ops, self.clock.now, expect_stale=expect_stale)

    async def _transact(self, ops: list[Operation[Any]], expect_stale: bool) -> LockedRun:
        """The lane transaction: here, whole on a store thread."""
        return await self._run(self._locked, ops, expect_stale)

    async def _transaction(self, batch: list[Call]) -> None:
        """One lane transaction for a batch. Any failure answers the whole batch 503 and
        nothing of it is kept (the next batch reloads the lane)."""
        started = time.perf_counter()
        wakes = self.parking.wakes
        ops = [call.op for call in batch if call.op is not None]
        assert len(ops) == len(batch), "a shared lane has no chores"
        try:
            done = await self._transact(ops, self._expect_stale)
        except Exception as exc:
            self._log_failure("lane.commit_failed", exc)
            self._expect_stale = True
            err = Unavailable("lane store unavailable; the change was not applied")
            self._settle([Pending(call.future, error=err) for call in batch])
            self.parking.wake_all()
            return
        # Another replica writes this lane: read it with the next lock too.
        self._expect_stale = done.reloaded or wakes != self.parking.wakes
        self.last_used = self.memory.last_now or self.last_used
        held = [self._hold(c, o, wakes) for c, o in zip(batch, done.outcomes, strict=True)]
        self._release(done.fx, held, time.perf_counter() - started)
        if done.open:  # nothing to commit: the lock goes with the ROLLBACK, after the replies
            try:
                await self._run(self.store.abort)
            except Exception as exc:  # the store dropped the session: the next batch opens one
                log.error("lane.abort_failed", lane=self.lane, error=type(exc).__name__)
