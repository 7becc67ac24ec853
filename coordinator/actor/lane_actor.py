"""One actor per lane: the only code that touches a lane's core and store.

Every operation is a job. A job submitted while the actor is free runs at once in the
caller's task (no mailbox hop); otherwise it waits in the mailbox, which the actor drains in
batches. Each job reads `now` once, runs an engine operation (`Ctx.perform`), and its changes
join the pending group; one lane transaction (one fsync) commits a group, and only then are
its replies released and its waiters woken. Commits are pipelined: while one group commits,
the next one is built in memory. A SQLite group is written on the event loop and only its
COMMIT runs on a commit thread, shared by every lane (coordinator/actor/committer.py). A job
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
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, cast

import structlog

from coordinator.actor import committer
from coordinator.actor.commit_log import report_group
from coordinator.actor.committer import Prepares
from coordinator.actor.descriptors import PREOPEN_SECONDS
from coordinator.actor.jobs import Ctx, Job, Pending, StaleLane, noop_job
from coordinator.clock import Clock
from coordinator.constants import COORDINATOR_KIND, MAILBOX_BATCH_MAX
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Change, Effects, LaneSettings
from coordinator.engine.store import LaneStore, lane_now
from coordinator.metrics import NULL_METRICS, LaneObserver
from coordinator.protocol.errors import LaneError, Unavailable
from coordinator.store.files import failure_reason

T = TypeVar("T")
log = structlog.get_logger("coordinator.actor")


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
        self._pending: list[Pending] = []
        self._committing: asyncio.Future[None] | None = None
        self._broken = False  # a commit failed: memory must be rebuilt before the next job
        self._parked: dict[str, set[asyncio.Future[None]]] = {}
        self.last_used = 0.0
        self.closed = False
        self.draining = False  # shutting down: long polls answer now instead of parking
        self.touched: Callable[[str], None] | None = None  # told of every job (the registry)
        self.before_alarm: Callable[[str], None] | None = None  # the registry: pre-opens the file
        # A job runs in its caller's task when the actor is free (no mailbox hop); `_busy`
        # while one runs (inline or in the loop), `_free` wakes the loop waiting for it.
        # Only the pipelined actor: a lock-first batch (SharedLaneActor) stays batched.
        self._inline = type(self)._run_batch is LaneActor._run_batch
        self._busy = False
        self._free: asyncio.Future[None] | None = None
        # A store that writes a group on the loop and COMMITs it on a store thread (SQLite).
        self._prepares = cast(Prepares, store) if hasattr(store, "prepare_group") else None
        self._committer: committer.Committer | None = None  # this loop's (committer.py)

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

    async def suspend_store(self) -> None:
        """Let go of the lane's store connection (descriptors, page cache) while the lane is
        quiet: its memory and its alarm stay; the next job opens the file again. Runs as a
        job, after every pending commit, so the connection is never used concurrently."""
        if self.closed:  # not `connected`: a job queued before this one may open it yet
            return
        used = self.last_used

        async def job(ctx: Ctx) -> None:
            await ctx.actor._barrier()
            await ctx.actor._run(ctx.actor.store.suspend)
            ctx.actor.last_used = used  # suspending is not a use

        with contextlib.suppress(LaneError):
            await self.submit(job, touch=False)

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

    async def submit(self, job: Job, *, touch: bool = True) -> Any:
        if self.closed:
            raise Unavailable("lane is closing; retry")
        if touch and self.touched is not None:
            self.touched(self.lane)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if (
            self._inline
            and not self._busy
            and self._free is None
            and self._loop_task is not None
            and self._mailbox.empty()
        ):
            await self._inline_job(job, fut)
        else:
            self._mailbox.put_nowait((job, fut))  # unbounded: never waits
        return await fut

    async def _inline_job(self, job: Job, fut: asyncio.Future[Any]) -> None:
        """The actor is free: run the job in the caller's task, as a batch of one (its
        commit still joins the pending group while another is in flight)."""
        self._busy = True
        try:
            await self._run_batch([(job, fut)])
        finally:
            self._busy = False
            self._kick()  # also when the caller was cancelled mid-job
            if self.core is not None:
                self._rearm()
            if self._free is not None and not self._free.done():
                self._free.set_result(None)  # the loop took a job meanwhile: its turn

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
            while self._busy:  # a job runs inline in its caller's task: after it
                self._free = asyncio.get_running_loop().create_future()
                await self._free
            self._free = None
            self._busy = True
            try:
                if item is None:
                    with contextlib.suppress(LaneError):
                        await self._barrier()
                    return
                batch = [item]
                while len(batch) < MAILBOX_BATCH_MAX and not self._mailbox.empty():
                    nxt = self._mailbox.get_nowait()
                    if nxt is None:
                        self._mailbox.put_nowait(None)  # stop after this batch
                        break
                    batch.append(nxt)
                await self._run_batch(batch)
                self._rearm()
            finally:
                self._busy = False

    async def _run_batch(self, batch: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        """Run the jobs in memory into the pending group and start its commit (pipelined)."""
        for job, fut in batch:
            if self._broken and not await self._recover():
                self._settle([Pending(fut, error=Unavailable("lane store unavailable"))])
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
        pending = Pending(fut)
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
        args = (self._version, fx.changes, self.core.next_deadline(), self._last_now)
        self._committing = asyncio.get_running_loop().create_future()
        started = time.perf_counter()  # a duration, not the wall clock

        def done(version: int | None, error: BaseException | None) -> None:
            self._commit_done(fx, pending, started, version, error)

        # SQLite: the group is written here, on the loop (page-cache work), and only its
        # COMMIT (the WAL's write and fsync) runs on a store thread: fewer GIL hand-offs.
        # Stores without it, or a lane whose connection is closed: all on a store thread.
        # Either way on a store thread with every other lane's commits (committer.py).
        prepared = None
        if self._prepares is not None:
            try:
                prepared = self._prepares.prepare_group(*args)
            except Exception as exc:  # nothing was written: the group fails as a commit would
                done(None, exc)
                return
        commits = self._committer
        if commits is None:
            commits = self._committer = committer.for_loop(asyncio.get_running_loop())
        if prepared is None:
            commits.submit(self._write, args, done)
        elif not prepared[0]:
            done(None, StaleLane(f"lane {self.lane} is at version {prepared[1]}, not {args[0]}"))
        else:
            assert self._prepares is not None
            commits.submit(self._prepares.commit_prepared, (prepared[1],), done)

    def _write(
        self, version: int, changes: list[Change], next_deadline: float | None, last_now: float
    ) -> int:
        """One lane transaction on the store thread: the group's changes, or none of them."""
        commit_group = getattr(self.store, "commit_group", None)
        if commit_group is not None:  # SQLite: the same transaction in fewer statements
            ok, found = commit_group(version, changes, next_deadline, last_now)
            if not ok:
                raise StaleLane(f"lane {self.lane} is at version {found}, not {version}")
            return int(found)
        head = self.store.begin()
        try:
            if head.version != version:  # single server: never; replicas: reload and retry
                raise StaleLane(f"lane {self.lane} is at version {head.version}, not {version}")
            self.store.apply(changes)
            return self.store.finish(next_deadline, last_now)
        except BaseException:
            self.store.abort()
            raise

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
                self._version = version
                self._committed(fx, pending, time.perf_counter() - started)
                self._kick()
                return
            log.error(
                "lane.commit_failed",
                lane=self.lane,
                error=type(error).__name__,
                reason=failure_reason(error),
            )
            self._broken = True
            err = Unavailable("lane store unavailable; the change was not applied")
            for p in [*pending, *self._pending]:
                p.error, p.result = err, None
            self._settle([*pending, *self._pending])
            self._pending, self._pending_fx = [], Effects()
            self._wake_all()
        finally:
            if committing is not None and not committing.done():
                committing.set_result(None)  # `_barrier` and `_recover` look again

    def _committed(self, fx: Effects, pending: list[Pending], seconds: float) -> None:
        """A group is durable: count and log it, release its replies, wake its waiters."""
        report_group(self, fx, len(pending), seconds)
        self._settle(pending)
        self._wake(fx)

    @staticmethod
    def _settle(pending: list[Pending]) -> None:
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
            log.error(
                "lane.reload_failed",
                lane=self.lane,
                error=type(exc).__name__,
                reason=failure_reason(exc),
            )
            return False
        finally:
            self._wake_all()
        self._broken = False
        return True

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
        armed = self._alarm_at
        if self._alarm_task is not None and armed is not None:
            if deadline is None or deadline >= armed:
                return  # the armed alarm comes first; when it fires, it looks again
            self._alarm_task.cancel()
            self._alarm_task = None
        self._alarm_at = deadline
        if deadline is not None and not self.closed:
            self._alarm_task = asyncio.create_task(
                self._alarm(deadline), name=f"lane-alarm:{self.lane}"
            )

    async def _alarm(self, deadline: float) -> None:
        if self.before_alarm is not None:  # shortly before, a file let go of is opened again
            await self.clock.sleep_until(deadline - PREOPEN_SECONDS)
            self.before_alarm(self.lane)
        await self.clock.sleep_until(deadline)
        self._alarm_task = None
        self._alarm_at = None
        if self.closed or self.core is None:
            return
        due = self.core.next_deadline()
        if due is None or due > self.clock.now():
            self._rearm()  # armed early (the deadline moved later or went): nothing is due
            return
        with contextlib.suppress(LaneError):
            await self.submit(noop_job)
