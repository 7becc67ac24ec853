"""The locking actor whose lane transaction waits on the event loop (PostgreSQL replicas).

A sibling of the thread-hopping `LockingLaneActor` (coordinator/actor/locking.py), with the
same batches, replies and wake-ups, for a `LoopLockingStore`: it drives the engine's
`locked_steps` (coordinator/engine/transaction.py) itself. The lock and the commit — the two
round trips of every transaction — are awaited on the loop (`begin_here`, `commit_here`:
the session's socket is watched by the loop, no store thread is taken and no thread has to
wake the loop again). The rest stays on a store thread, where a step may wait on I/O it
does not control: a lock that needs the lane's reads (a reload), a new session, an
operation's store reads, an abort, and a lock the store cannot take here (no idle session).
The lane's memory is touched only in the actor's turn, as with the thread: the mailbox loop
holds `_busy` for the whole batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.actor.locking import LockingLaneActor
from coordinator.engine.operations import Operation
from coordinator.engine.store import LoopLockingStore
from coordinator.engine.transaction import Begin, Commit, LockedRun, Step, locked_steps, perform


class LoopLockingLaneActor(LockingLaneActor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert isinstance(self.store, LoopLockingStore), "its lock and commit run on the loop"
        self._here: LoopLockingStore = self.store

    async def _transact(self, ops: list[Operation[Any]], expect_stale: bool) -> LockedRun:
        """`locked_steps`, each step answered by `_perform` (its failure thrown back in)."""
        steps = locked_steps(self.memory, ops, self.clock.now, expect_stale=expect_stale)
        reply: Any = None
        failure: BaseException | None = None
        while True:
            try:
                step = steps.send(reply) if failure is None else steps.throw(failure)
            except StopIteration as done:
                result: LockedRun = done.value
                return result
            failure = None
            try:
                reply = await self._perform(step)
            except (Exception, asyncio.CancelledError) as exc:
                reply, failure = None, exc

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Begin) and not step.load:
            head = await self._here.begin_here()
            if head is not None:
                return head, None
        elif isinstance(step, Commit):
            return await self._here.commit_here(step.writes)
        return await self._run(perform, self._here, step)
