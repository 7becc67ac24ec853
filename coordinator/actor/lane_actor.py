"""One actor per lane: the only code that touches a lane's core and store.

Every operation is a job in the lane's mailbox. The actor drains the mailbox in
batches: each job reads `now` once, runs an engine operation (`Ctx.perform`), and its
changes join the pending group; one lane transaction (begin / apply / finish, one fsync)
commits a group, and only then are its replies released and its waiters woken. Commits are
pipelined: while one group commits on a store thread, the next one is built in memory. A job
that must read the store first commits what is pending, so reads see every acknowledged
change. A commit that finds the lane's version moved (another writer) fails like a store
error: the group answers 503 and the lane is reloaded.

A store that other processes write too (PostgreSQL replicas) uses SharedLaneActor
(coordinator/actor/shared_actor.py): lock-first batches instead of pipelining.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from coordinator.clock import Clock
from coordinator.constants import COORDINATOR_KIND, MAILBOX_BATCH_MAX
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import (
    Change,
    Effects,
    LaneSettings,
    PutIncident,
    PutPause,
    PutReceipt,
    PutTicket,
)
from coordinator.engine.operations import Operation, Result
from coordinator.engine.store import LaneStore, Reads, lane_now
from coordinator.errors import LaneError, StoreError, Unavailable
from coordinator.metrics import NULL_METRICS, LaneObserver

T = TypeVar("T")
R = TypeVar("R")
log = structlog.get_logger("coordinator.actor")


@dataclass(slots=True)
class Ctx:
    """What a job sees: the core, the one `now` of this operation, and a store reader."""

    actor: LaneActor
    now: float
    fx: Effects = field(default_factory=Effects)

    @property
    def core(self) -> LaneCore:
        assert self.actor.core is not None
        return self.actor.core

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.actor.in_transaction:  # shared mode reads inside the lane transaction
            await self.actor._barrier()
        return await self.actor._run(fn, *args)

    async def perform(self, op: Operation[R]) -> Result[R]:
        """Run an engine operation: its store reads (only when it needs any: a read waits
        for the pending group's commit), then its pure part; its effects join the group."""
        needs = op.needs(self.core)
        reads = await self.read(Reads.perform, self.actor.store, needs) if needs else Reads()
        result = op.run(self.core, self.now, reads)
        self.fx.extend(result.fx)
        return result

    def park(self, ticket_id: str) -> asyncio.Future[None]:
        return self.actor._park(ticket_id)


Job = Callable[[Ctx], Awaitable[Any]]


def operation_job(op: Operation[Any], parked: list[asyncio.Future[None]] | None = None) -> Job:
    """A job that performs `op` and answers its reply; with `parked`, a long poll parks on
    the ticket the operation names (inside the job, so no wake-up is lost)."""

    async def job(ctx: Ctx) -> Any:
        result = await ctx.perform(op)
        if result.park is not None and parked is not None:
            parked.append(ctx.park(result.park))
        return result.reply

    return job


class StaleLane(StoreError):
    """The lane's stored version is not the one this actor built its memory from."""


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


class LaneActor:
    def __init__(
        self,
        lane: str,
        settings: LaneSettings,
        store: LaneStore,
        executor: Executor,
        clock: Clock,
        metrics: LaneObserver = NULL_METRICS,
        *,
        kind: str = COORDINATOR_KIND,
    ) -> None:
        self.lane = lane
        self.kind = kind
        self.in_transaction = False  # a job's reads run inside the lane transaction (shared)
        self.settings = settings
        self.store = store
        self.executor = executor
        self.clock = clock
        self.metrics = metrics
        self.core: LaneCore | None = None
        self._version = 0  # the lane version the core was loaded at / last committed
        self._last_now: float | None = None  # the latest `now` a job of this lane ran at
        self._mailbox: asyncio.Queue[tuple[Job, asyncio.Future[Any]] | None] = asyncio.Queue()
        self._loop_task: asyncio.Task[None] | None = None
        self._alarm_task: asyncio.Task[None] | None = None
        self._alarm_at: float | None = None
        self._pending_fx = Effects()
        self._pending: list[_Pending] = []
        self._committing: asyncio.Future[None] | None = None
        self._broken = False  # a commit failed: memory must be rebuilt before the next job
        self._parked: dict[str, set[asyncio.Future[None]]] = {}
        self.last_used = 0.0
        self.closed = False
        self.draining = False  # shutting down: long polls answer now instead of parking

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self._run(self.store.open)
        await self._load()
        self.last_used = self.clock.now()
        self._loop_task = asyncio.create_task(self._loop(), name=f"lane-actor:{self.lane}")
        # Leases that ran out while we were down are reaped at their original expiry now.
        await self.submit(noop_job)

    async def _load(self) -> None:
        snapshot = await self._run(self.store.load)
        now = lane_now(self.clock.now(), snapshot.last_now, self._last_now)
        self.core = LaneCore(self.lane, self.settings, snapshot, now, coordinator=self.kind)
        self._version = snapshot.version
        self._last_now = now

    async def stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._alarm_task is not None:
            self._alarm_task.cancel()
        if self._loop_task is not None:
            await self._mailbox.put(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for futs in self._parked.values():
            for f in futs:
                if not f.done():
                    f.set_result(None)
        self._parked.clear()
        await self._run(self.store.close)

    def drain(self) -> None:
        """Shutdown has begun: answer every parked long poll now, and park no new one."""
        self.draining = True
        self._wake_all()

    def idle(self) -> bool:
        return (
            self.core is not None
            and self.core.is_idle()
            and not self._parked
            and self._mailbox.empty()
            and self._committing is None
            and not self._pending
        )

    # ---------------------------------------------------------------- API

    async def submit(self, job: Job) -> Any:
        if self.closed:
            raise Unavailable("lane is closing; retry")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._mailbox.put((job, fut))
        return await fut

    # ---------------------------------------------------------------- internals

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)

    def _park(self, ticket_id: str) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.draining:
            fut.set_result(None)
            return fut
        self._parked.setdefault(ticket_id, set()).add(fut)

        def _forget(f: asyncio.Future[None]) -> None:
            s = self._parked.get(ticket_id)
            if s is not None:
                s.discard(f)
                if not s:
                    del self._parked[ticket_id]

        fut.add_done_callback(_forget)
        return fut

    async def _loop(self) -> None:
        while True:
            item = await self._mailbox.get()
            if item is None:
                with contextlib.suppress(LaneError):
                    await self._barrier()
                return
            batch = [item]
            while len(batch) < MAILBOX_BATCH_MAX and not self._mailbox.empty():
                nxt = self._mailbox.get_nowait()
                if nxt is None:
                    await self._mailbox.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            await self._run_batch(batch)
            self._rearm()

    async def _run_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        """Run the jobs in memory into the pending group and start its commit (pipelined)."""
        for job, fut in batch:
            if self._broken and not await self._recover():
                self._settle([_Pending(fut, error=Unavailable("lane store unavailable"))])
                continue
            await self._execute(job, fut)
        self._kick()

    async def _execute(self, job: Job, fut: asyncio.Future[Any]) -> None:
        now = lane_now(self.clock.now(), self._last_now)  # the lane's clock never runs back
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
        except Exception as exc:  # a defect: answer 503, rebuild the lane from its file
            log.error("lane.job_failed", lane=self.lane, error=type(exc).__name__)
            pending.error = Unavailable("internal error; the lane was reloaded from its file")
            self._pending.append(pending)
            with contextlib.suppress(LaneError):
                await self._barrier()  # what earlier jobs changed is sound: commit it
            self._broken = True
            await self._recover()
            return
        if self._broken:
            # A commit failed while this job ran: what it saw is not what the file holds.
            pending.error = Unavailable("lane store unavailable; retry")
            pending.result = None
            self._settle([pending])
            return
        self._pending_fx.extend(ctx.fx)
        self._pending.append(pending)

    # ---------------------------------------------------------------- group commit
    #
    # Pipelined: while one group commits on a store thread, the loop keeps running jobs in
    # memory into the next group; when the commit ends, the next group (everything that
    # accumulated meanwhile) is committed at once. Replies and wake-ups are released only
    # after their own group's COMMIT, and groups commit in order on one connection, so a
    # reply never shows state that is not yet durable.

    def _kick(self) -> None:
        """Start committing the pending group unless a commit is already in flight."""
        if self._committing is not None or self._broken:
            return
        if not self._pending and not self._pending_fx.changes:
            return
        fx, pending = self._pending_fx, self._pending
        self._pending_fx, self._pending = Effects(), []
        if not fx.changes:
            # Nothing to write and nothing in flight: what these jobs saw is durable already.
            self._settle(pending)
            self._wake(fx)
            return
        assert self.core is not None and self._last_now is not None
        head = (self._version, self.core.next_deadline(), self._last_now)
        self._committing = asyncio.ensure_future(self._commit(fx, pending, *head))

    def _write(
        self, version: int, changes: list[Change], next_deadline: float | None, last_now: float
    ) -> int:
        """One lane transaction on the store thread: the group's changes, or none of them."""
        head = self.store.begin()
        try:
            if head.version != version:  # single server: never; replicas: reload and retry
                raise StaleLane(f"lane {self.lane} is at version {head.version}, not {version}")
            self.store.apply(changes)
            return self.store.finish(next_deadline, last_now)
        except BaseException:
            self.store.abort()
            raise

    async def _commit(
        self,
        fx: Effects,
        pending: list[_Pending],
        version: int,
        next_deadline: float | None,
        last_now: float,
    ) -> None:
        started = time.perf_counter()  # a duration, not the wall clock
        try:
            self._version = await self._run(
                self._write, version, fx.changes, next_deadline, last_now
            )
        except Exception as exc:
            log.error("lane.commit_failed", lane=self.lane, error=type(exc).__name__)
            self._broken = True
            err = Unavailable("lane store unavailable; the change was not applied")
            for p in [*pending, *self._pending]:
                p.error, p.result = err, None
            self._settle([*pending, *self._pending])
            self._pending, self._pending_fx = [], Effects()
            self._wake_all()
            return
        finally:
            self._committing = None
        self._committed(fx, pending, time.perf_counter() - started)
        self._kick()

    def _committed(self, fx: Effects, pending: list[_Pending], seconds: float) -> None:
        """A group is durable: count and log it, release its replies, wake its waiters."""
        self._observe(fx, len(pending), seconds)
        last_put = {
            ch.ticket.ticket_id: i for i, ch in enumerate(fx.changes) if isinstance(ch, PutTicket)
        }
        for i, ch in enumerate(fx.changes):
            if not isinstance(ch, PutTicket) or last_put[ch.ticket.ticket_id] == i:
                _log_change(self.lane, ch)
        self._observe(None)
        self._settle(pending)
        self._wake(fx)

    @staticmethod
    def _settle(pending: list[_Pending]) -> None:
        for p in pending:
            if p.future.done():
                continue
            if p.error is not None:
                p.future.set_exception(p.error)
            else:
                p.future.set_result(p.result)

    async def _barrier(self) -> None:
        """Commit everything pending and wait until it is durable (reads, shutdown)."""
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
        self._pending, self._pending_fx = [], Effects()
        try:
            await self._load()
        except Exception as exc:
            log.error("lane.reload_failed", lane=self.lane, error=type(exc).__name__)
            return False
        finally:
            self._wake_all()
        self._broken = False
        return True

    def _observe(self, fx: Effects | None, operations: int = 0, seconds: float = 0.0) -> None:
        """Tell the metrics observer what was committed (fx) or, with None, how the lane
        stands now. Its failure is logged and never fails a reply."""
        try:
            if fx is not None:
                self.metrics.committed(self.lane, fx, operations, seconds)
            elif self.core is not None:
                c = self.core
                paused = c.paused(self.clock.now())
                self.metrics.lane_state(self.lane, len(c.held), c.queued_count(), paused)
        except Exception as exc:
            log.error("lane.metrics_failed", lane=self.lane, error=type(exc).__name__)

    def _wake(self, fx: Effects) -> None:
        if fx.pause_changed:
            self._wake_all()
            return
        for tid in fx.woken:
            for f in list(self._parked.get(tid, ())):
                if not f.done():
                    f.set_result(None)

    def wake_all(self) -> None:
        """Every parked await of this lane reads the lane again (another replica changed it,
        or a notification may have been lost)."""
        self._wake_all()

    def _wake_all(self) -> None:
        for futs in list(self._parked.values()):
            for f in list(futs):
                if not f.done():
                    f.set_result(None)

    def _rearm(self) -> None:
        assert self.core is not None
        deadline = self.core.next_deadline()
        if deadline == self._alarm_at and self._alarm_task is not None:
            return
        if self._alarm_task is not None:
            self._alarm_task.cancel()
            self._alarm_task = None
        self._alarm_at = deadline
        if deadline is not None and not self.closed:
            self._alarm_task = asyncio.create_task(
                self._alarm(deadline), name=f"lane-alarm:{self.lane}"
            )

    async def _alarm(self, deadline: float) -> None:
        await self.clock.sleep_until(deadline)
        self._alarm_task = None
        self._alarm_at = None
        if not self.closed:
            with contextlib.suppress(LaneError):
                await self.submit(noop_job)


async def noop_job(ctx: Ctx) -> None:
    """Nothing but the lane's clock: whatever fell due (expiries, pauses) is done."""
    return None


def _log_change(lane: str, ch: Any) -> None:
    if isinstance(ch, PutTicket):
        t = ch.ticket
        log.info(
            "lane.ticket",
            lane=lane,
            ticket=t.ticket_id,
            machine=t.machine_id,
            claim=t.claim_id,
            state=t.state.value,
            fence=t.fence,
            outcome=t.outcome,
        )
    elif isinstance(ch, PutPause):
        log.info("lane.pause", lane=lane, until=ch.pause.until if ch.pause else None)
    elif isinstance(ch, PutReceipt):
        r = ch.receipt
        log.info(
            "lane.receipt",
            lane=lane,
            ticket=r.ticket_id,
            machine=r.machine_id,
            phase=r.phase,
            verified=r.content_hash_verified,
        )
    elif isinstance(ch, PutIncident):
        i = ch.incident
        log.info("lane.incident", lane=lane, kind=i.kind, ticket=i.ticket_id, machine=i.machine_id)
