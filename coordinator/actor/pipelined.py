"""The lane actor for a store this process alone writes (the coordinator's SQLite lane
files): group commit, pipelined.

A call submitted while the actor is free runs at once in the caller's task (no mailbox hop);
otherwise it waits in the mailbox, which the actor drains in batches. Each operation is one
step of the lane transaction (coordinator/engine/transaction.py) run in memory; its changes
join the pending group; one COMMIT (one fsync) makes a group durable, and only then are its
replies released and its waiters woken. While one group commits, the next is built. A group
is written on the event loop and only its COMMIT runs on a commit thread shared by every lane
(coordinator/actor/committer.py). An operation that must read the store first commits what
is pending, so reads see every acknowledged change. A commit that finds the lane's version
moved (another writer) fails like a store error: the group answers 503 and the lane is
rebuilt from its file.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from coordinator.actor import committer
from coordinator.actor.base import Call, LaneActor, Pending
from coordinator.engine.model import Effects
from coordinator.engine.store import Group, PipelinedStore, Reads
from coordinator.engine.transaction import LaneTransaction, Outcome
from coordinator.protocol.errors import LaneError, Unavailable

log = structlog.get_logger("coordinator.actor")


class PipelinedLaneActor(LaneActor[PipelinedStore]):
    _pending_fx: Effects
    _pending: list[Pending]
    _committing: asyncio.Future[None] | None = None
    _broken = False  # a commit failed: memory must be rebuilt before the next operation
    _committer: committer.Committer | None = None  # this loop's (committer.py)

    def _group_reset(self) -> None:
        self._pending_fx, self._pending = Effects(), []

    async def start(self) -> None:
        self._group_reset()
        await super().start()

    # ---------------------------------------------------------------- LaneActor

    async def _enqueue(self, call: Call) -> None:
        if (
            not self._busy
            and self._free is None
            and self._loop_task is not None
            and self._mailbox.empty()
        ):
            await self._inline(call)
        else:
            self._mailbox.put_nowait(call)  # unbounded: never waits

    async def _inline(self, call: Call) -> None:
        """The actor is free: run the call in the caller's task, as a batch of one (its
        commit still joins the pending group while another is in flight)."""
        self._busy = True
        try:
            await self._run_batch([call])
        finally:
            self._busy = False
            self._kick()  # also when the caller was cancelled mid-call
            self._rearm()
            if self._free is not None and not self._free.done():
                self._free.set_result(None)  # the loop took a call meanwhile: its turn

    async def _run_batch(self, batch: list[Call]) -> None:
        """Run the calls in memory into the pending group and start its commit."""
        for call in batch:
            if self._broken and not await self._recover():
                self._settle([Pending(call.future, error=Unavailable("lane store unavailable"))])
                continue
            if call.chore is not None:
                await self._run_chore(call)
            else:
                await self._execute(call)
        self._kick()

    def _settled(self) -> bool:
        return self._committing is None and not self._pending

    async def suspend_store(self) -> None:
        """Close the lane's file while the lane is quiet: its memory and its alarm stay; the
        next call opens the file again."""
        await self._chore(lambda: self._run(self.store.suspend))

    async def resume_store(self) -> None:
        await self._chore(lambda: self._run(self.store.resume))

    # ---------------------------------------------------------------- one operation

    async def _run_chore(self, call: Call) -> None:
        assert call.chore is not None
        pending = Pending(call.future)
        try:
            await self._barrier()
            await call.chore()
        except LaneError as exc:
            pending.error = exc
        except Exception as exc:  # a store error: the next operation finds out again
            pending.error = Unavailable(f"lane store unavailable ({type(exc).__name__})")
        self._settle([pending])

    async def _execute(self, call: Call) -> None:
        assert call.op is not None
        txn = LaneTransaction(self.memory)
        try:
            needs = txn.start(call.op, self.clock.now())
            self.last_used = self.memory.last_now or self.last_used
            self._pending_fx.extend(txn.take())  # the lane's clock: kept even if refused
            reads = Reads()
            if needs:
                await self._barrier()  # reads see every acknowledged change
                reads = await self._run(Reads.perform, self.store, needs)
            outcome = txn.run(call.op, reads)
        except LaneError as exc:  # the store could not be read: this call answers 503
            outcome = Outcome(error=exc)
        except Exception as exc:  # a defect: answer 503, rebuild the lane from its file
            log.error("lane.job_failed", lane=self.lane, error=type(exc).__name__)
            err = Unavailable("internal error; the lane was reloaded from its file")
            self._pending.append(Pending(call.future, error=err))
            with contextlib.suppress(LaneError):
                await self._barrier()  # what earlier operations changed is sound: commit it
            self._broken = True
            await self._recover()
            return
        if self._broken:
            # A commit failed while this operation ran: what it saw is not what the file holds.
            self._settle([Pending(call.future, error=Unavailable("lane store unavailable; retry"))])
            return
        self._pending_fx.extend(txn.take())
        self._pending.append(self._hold(call, outcome))

    # ---------------------------------------------------------------- group commit
    #
    # Pipelined: while one group commits on a commit thread, the loop keeps running
    # operations in memory into the next group; when the commit ends, the next group
    # (everything that accumulated meanwhile) is committed at once. Replies and wake-ups
    # are released only after their own group's COMMIT, and groups commit in order on one
    # connection, so a reply never shows state that is not yet durable.

    def _kick(self) -> None:
        """Start committing the pending group unless a commit is already in flight."""
        if self._committing is not None or self._broken:
            return
        if not self._pending and not self._pending_fx.changes:
            return
        fx, pending = self._pending_fx, self._pending
        self._group_reset()
        if not fx.changes:
            # Nothing to write and nothing in flight: what these calls saw is durable already.
            self._settle(pending)
            self.parking.wake(fx)
            return
        core = self.memory.core
        assert core is not None and self.memory.last_now is not None
        group = Group(self.memory.version, fx.changes, core.next_deadline(), self.memory.last_now)
        self._committing = asyncio.get_running_loop().create_future()
        started = time.perf_counter()  # a duration, not the wall clock

        def done(version: int | None, error: BaseException | None) -> None:
            self._commit_done(fx, pending, started, version, error)

        # The group is written here, on the loop (page-cache work), and only its COMMIT (the
        # WAL's write and fsync) runs on a commit thread: fewer GIL hand-offs. A lane whose
        # file is closed, read-only or locked by another process commits it all there.
        try:
            prepared = self.store.prepare_group(group)
        except Exception as exc:  # nothing was written: the group fails as a commit would
            done(None, exc)
            return
        commits = self._committer
        if commits is None:
            commits = self._committer = committer.for_loop(asyncio.get_running_loop())
        if prepared:
            commits.submit(self.store.commit_prepared, (group,), done)
        else:
            commits.submit(self.store.commit_group, (group,), done)

    def _commit_done(
        self,
        fx: Effects,
        pending: list[Pending],
        started: float,
        version: int | None,
        error: BaseException | None,
    ) -> None:
        """On the loop, once the group's transaction ended: release it, commit the next."""
        committing, self._committing = self._committing, None
        try:
            if error is None and version is not None:
                self.memory.committed(version)
                self._release(fx, pending, time.perf_counter() - started)
                self._kick()
                return
            self._log_failure("lane.commit_failed", error)
            self._broken = True
            err = Unavailable("lane store unavailable; the change was not applied")
            failed = [*pending, *self._pending]
            for p in failed:
                p.error, p.result = err, None
            self._settle(failed)
            self._group_reset()
            self.parking.wake_all()
        finally:
            if committing is not None and not committing.done():
                committing.set_result(None)  # `_barrier` and `_recover` look again

    async def _barrier(self) -> None:
        """Commit everything pending and wait until it is durable (reads, chores, stop)."""
        while True:
            if self._committing is not None:
                await asyncio.shield(self._committing)
                continue
            if self._broken or (not self._pending and not self._pending_fx.changes):
                break
            self._kick()
        if self._broken:
            raise Unavailable("lane store unavailable; retry")

    async def _recover(self) -> bool:
        """After a failed commit: drop the memory that diverged and rebuild it from the file.

        False while the file cannot be read; the lane stays broken and answers 503."""
        while self._committing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._committing)
        self._group_reset()
        try:
            await self._reload()
        except Exception as exc:
            self._log_failure("lane.reload_failed", exc)
            return False
        finally:
            self.parking.wake_all()
        self._broken = False
        return True
