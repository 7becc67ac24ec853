"""The lane actor for a store other processes write too (PostgreSQL replicas).

Commit pipelining cannot survive there: another replica may take the lane between two
groups. Each batch of the mailbox is one lane transaction, run lock-first: `begin` locks the
lane and reads its version; when another replica wrote since, the lane is reloaded inside the
transaction; then the jobs run (their reads inside the transaction too), the changes are
written with the lane's next deadline and last `now`, COMMIT, and only then are the replies
released. A batch whose changes may wake a parked await elsewhere (a promotion, a pause
change) sends a NOTIFY with its commit; `now` never runs behind the lane's `last_now`, so a
lane's clock never runs back across replicas with skewed clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog

from coordinator.actor.jobs import Ctx, Job, Pending
from coordinator.actor.lane_actor import LaneActor
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Change, Effects, LaneSnapshot
from coordinator.engine.store import LaneHead, lane_now
from coordinator.protocol.errors import LaneError, Unavailable
from coordinator.store.files import failure_reason

log = structlog.get_logger("coordinator.actor")


class SharedLaneActor(LaneActor):
    txn_slots: asyncio.Semaphore | None = None  # bounds the lane transactions open at once
    _expect_stale = False  # the next `begin` reads the lane too (another replica writes it)

    async def _run_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        slots = self.txn_slots
        if slots is None:
            await self._locked_txn(batch)
            return
        async with slots:
            await self._locked_txn(batch)

    async def _locked_txn(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        """One lane transaction for a batch: lock, reload when another writer moved the lane
        on, run the jobs, write, COMMIT; then the replies. Any failure answers the whole
        batch 503 and nothing of it is kept (the lane is reloaded by the next batch). A batch
        that writes nothing answers before its ROLLBACK: it read committed state under the
        lock, and nothing of it waits for the transaction's end."""
        started = time.perf_counter()
        expect_stale = self._expect_stale or self._broken or self.core is None
        try:
            head, snap = await self._run(self._begin, expect_stale)
        except Exception as exc:
            log.error(
                "lane.begin_failed",
                lane=self.lane,
                error=type(exc).__name__,
                reason=failure_reason(exc),
            )
            self._fail_batch(batch, Unavailable("lane store unavailable; retry"))
            return
        self.in_transaction = True
        read_only = False
        try:
            stale = head.version != self._version or self._broken or self.core is None
            self._expect_stale = stale  # another replica writes this lane: read it up front
            if stale:
                if snap is None or snap.version != head.version:
                    snap = await self._run(self.store.load)  # what the lock protects
                self._adopt(snap)
                self._broken = False
            self._last_now = lane_now(self.clock.now(), self._last_now, head.last_now)
            for job, fut in batch:
                await self._execute_locked(job, fut)
            fx, pending = self._pending_fx, self._pending
            self._pending_fx, self._pending = Effects(), []
            assert self.core is not None and self._last_now is not None
            deadline = self.core.next_deadline()
            if fx.changes or deadline != head.next_deadline:
                notify = bool(fx.woken) or fx.pause_changed
                self._version = await self._run(
                    self._commit, fx.changes, deadline, self._last_now, notify
                )
            else:
                read_only = True
                self._version = head.version
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._run(self.store.abort)
            self.in_transaction = False
            log.error(
                "lane.commit_failed",
                lane=self.lane,
                error=type(exc).__name__,
                reason=failure_reason(exc),
            )
            self._broken = True
            self._pending, self._pending_fx = [], Effects()
            self._fail_batch(
                batch, Unavailable("lane store unavailable; the change was not applied")
            )
            self._wake_all()
            return
        self.in_transaction = False
        self._committed(fx, pending, time.perf_counter() - started)
        if read_only:  # nothing to commit: the lock goes with the ROLLBACK, after the replies
            try:
                await self._run(self.store.abort)
            except Exception as exc:  # the store dropped the session: the next batch opens one
                log.error("lane.abort_failed", lane=self.lane, error=type(exc).__name__)

    def _adopt(self, snap: LaneSnapshot) -> None:
        """Rebuild the core from a snapshot read inside the lane transaction."""
        now = lane_now(self.clock.now(), snap.last_now, self._last_now)
        self.core = LaneCore(self.lane, self.settings, snap, now, coordinator=self.kind)
        self._version = snap.version
        self._last_now = now

    def _begin(self, expect_stale: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        """`begin`; when another writer likely moved the lane on, the lane's state is read in
        the same round trip (a PostgreSQL store's `begin_load`)."""
        begin_load = getattr(self.store, "begin_load", None)
        if begin_load is None:
            return self.store.begin(), None
        head, snap = begin_load(load=expect_stale)
        return head, snap

    def _commit(
        self, changes: list[Change], next_deadline: float | None, last_now: float, notify: bool
    ) -> int:
        commit = getattr(self.store, "commit", None)
        if commit is not None:  # PostgreSQL: the writes and COMMIT in one round trip
            return int(commit(changes, next_deadline, last_now, notify))
        self.store.apply(changes)
        return self.store.finish(next_deadline, last_now, notify)

    def wake_all(self) -> None:
        """Another replica changed the lane (or a notification may have been lost): the next
        transaction reads the lane in the same round trip as its lock."""
        self._expect_stale = True
        super().wake_all()

    async def _execute_locked(self, job: Job, fut: asyncio.Future[Any]) -> None:
        """One job inside the lane transaction; a defect (any error but a LaneError) aborts
        the whole batch."""
        now = lane_now(self.clock.now(), self._last_now)
        self._last_now = now
        self.last_used = now
        ctx = Ctx(self, now)
        assert self.core is not None
        self._pending_fx.extend(self.core.advance(now))
        pending = Pending(fut)
        try:
            pending.result = await job(ctx)
        except LaneError as exc:
            pending.error = exc
        self._pending_fx.extend(ctx.fx)
        self._pending.append(pending)

    def _fail_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]], err: LaneError) -> None:
        self._settle([Pending(fut, error=err) for _, fut in batch])
