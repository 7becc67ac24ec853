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

from coordinator.actor.lane_actor import Ctx, Job, LaneActor, _Pending
from coordinator.engine.model import Change, Effects
from coordinator.engine.store import lane_now
from coordinator.errors import LaneError, Unavailable
from coordinator.store.files import failure_reason

log = structlog.get_logger("coordinator.actor")


class SharedLaneActor(LaneActor):
    txn_slots: asyncio.Semaphore | None = None  # bounds the lane transactions open at once

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
        batch 503 and nothing of it is kept (the lane is reloaded by the next batch)."""
        started = time.perf_counter()
        try:
            head = await self._run(self.store.begin)
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
        try:
            if head.version != self._version or self._broken or self.core is None:
                await self._load()  # inside the transaction: what the lock protects
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
                    self._apply_finish, fx.changes, deadline, self._last_now, notify
                )
            else:
                await self._run(self.store.abort)  # read-only: nothing to commit
                self._version = head.version
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._run(self.store.abort)
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
        finally:
            self.in_transaction = False
        self._committed(fx, pending, time.perf_counter() - started)

    def _apply_finish(
        self, changes: list[Change], next_deadline: float | None, last_now: float, notify: bool
    ) -> int:
        self.store.apply(changes)
        return self.store.finish(next_deadline, last_now, notify)

    async def _execute_locked(self, job: Job, fut: asyncio.Future[Any]) -> None:
        """One job inside the lane transaction; a defect (any error but a LaneError) aborts
        the whole batch."""
        now = lane_now(self.clock.now(), self._last_now)
        self._last_now = now
        self.last_used = now
        ctx = Ctx(self, now)
        assert self.core is not None
        self._pending_fx.extend(self.core.advance(now))
        pending = _Pending(fut)
        try:
            pending.result = await job(ctx)
        except LaneError as exc:
            pending.error = exc
        self._pending_fx.extend(ctx.fx)
        self._pending.append(pending)

    def _fail_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]], err: LaneError) -> None:
        self._settle([_Pending(fut, error=err) for _, fut in batch])
