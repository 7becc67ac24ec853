"""What both lane actors are made of: one actor per lane is the only code that touches the
lane's memory and store, running its operations one lane transaction at a time
(coordinator/engine/transaction.py).

`LaneActor` is the part they share — the mailbox and its batches, parked long polls, the
alarm, start and stop — and the abstract methods each supplies:
- `PipelinedLaneActor` (coordinator/actor/pipelined.py): a store this process alone writes
  (SQLite lane files): operations run in memory into a pending group, groups commit in order
  on commit threads while the next is built;
- `LockingLaneActor` (coordinator/actor/locking.py): a store replicas share (PostgreSQL):
  each batch of the mailbox is one lane transaction, locked first, on a store thread; what
  replicas run is its `LoopLockingLaneActor` (coordinator/actor/loop_locking.py), whose lock
  and commit wait on the event loop.

A reply leaves only after the change it tells of is committed; waiters parked on a ticket
are woken once what woke them is committed."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from coordinator.actor.commit_log import report_group
from coordinator.actor.descriptors import PREOPEN_SECONDS
from coordinator.actor.parking import Parking
from coordinator.clock import Clock
from coordinator.constants import COORDINATOR_KIND, MAILBOX_BATCH_MAX
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Effects, LaneSettings
from coordinator.engine.operations import TICK, Operation
from coordinator.engine.store import LaneStore
from coordinator.engine.transaction import LaneMemory, Outcome
from coordinator.metrics import NULL_METRICS, LaneObserver
from coordinator.protocol.errors import LaneError, Unavailable
from coordinator.store.files import failure_reason

T = TypeVar("T")
log = structlog.get_logger("coordinator.actor")
S = TypeVar("S", bound=LaneStore)


@dataclass(slots=True)
class Call:
    """One mailbox entry: an operation, or a `chore` (store housekeeping the actor runs
    alone, after every pending commit); `parked` receives a long poll's parked future."""

    future: asyncio.Future[Any]
    op: Operation[Any] | None = None
    parked: list[asyncio.Future[None]] | None = None
    chore: Callable[[], Awaitable[None]] | None = None


@dataclass(slots=True)
class Pending:
    """A reply held until the transaction it belongs to is committed."""

    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


class LaneActor(ABC, Generic[S]):
    def __init__(
        self,
        lane: str,
        settings: LaneSettings,
        store: S,
        executor: Executor,
        clock: Clock,
        metrics: LaneObserver = NULL_METRICS,
        *,
        kind: str = COORDINATOR_KIND,
    ) -> None:
        self.lane = lane
        self.kind = kind
        self.settings = settings
        self.store = store
        self.executor = executor
        self.clock = clock
        self.metrics = metrics
        self.memory = LaneMemory(lane, settings, kind)
        self._mailbox: asyncio.Queue[Call | None] = asyncio.Queue()
        self._loop_task: asyncio.Task[None] | None = None
        self._alarm_task: asyncio.Task[None] | None = None
        self._alarm_at: float | None = None
        self.parking = Parking()
        self.last_used = 0.0
        self.closed = False
        self.touched: Callable[[str], None] | None = None  # told of every call (the registry)
        self.before_alarm: Callable[[str], None] | None = None  # the registry: pre-opens the file
        # `_busy` while a batch runs (in the mailbox loop, or inline in a caller's task);
        # `_free` wakes the loop waiting for an inline batch to end.
        self._busy = False
        self._free: asyncio.Future[None] | None = None

    # ---------------------------------------------------------------- what each actor supplies

    @abstractmethod
    async def _enqueue(self, call: Call) -> None:
        """Take a call: into the mailbox, or run it at once."""

    @abstractmethod
    async def _run_batch(self, batch: list[Call]) -> None:
        """Run a batch of calls taken from the mailbox; settle or hold their futures."""

    @abstractmethod
    async def _barrier(self) -> None:
        """Wait until everything run so far is committed (Unavailable if it cannot be)."""

    @abstractmethod
    def _settled(self) -> bool:
        """No commit is in flight and no reply is held."""

    @abstractmethod
    async def suspend_store(self) -> None:
        """Let go of the lane's store descriptors while the lane is quiet."""

    @abstractmethod
    async def resume_store(self) -> None:
        """Take the lane's store descriptors again if they were let go of."""

    # ---------------------------------------------------------------- lifecycle

    @property
    def core(self) -> LaneCore | None:
        return self.memory.core

    @property
    def connected(self) -> bool:
        """The lane holds store descriptors of its own (an open SQLite file)."""
        return self.store.connected

    def live_count(self) -> int:
        core = self.memory.core
        return 0 if core is None else len(core.live)

    async def start(self) -> None:
        await self._run(self.store.open)
        await self._reload()
        self.last_used = self.clock.now()
        self._loop_task = asyncio.create_task(self._loop(), name=f"lane-actor:{self.lane}")
        # Leases that ran out while we were down are reaped at their original expiry now.
        await self.tick()

    async def _reload(self) -> None:
        """Rebuild the lane's memory from its store."""
        snapshot = await self._run(self.store.load)
        self.memory.adopt(snapshot, self.clock.now())

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
        self.parking.clear()
        await self._run(self.store.close)

    def drain(self) -> None:
        """Shutdown has begun: answer every parked long poll now, and park no new one."""
        self.parking.drain()

    def idle(self) -> bool:
        core = self.memory.core
        return (
            not self._busy
            and core is not None
            and core.is_idle()
            and not self.parking
            and self._mailbox.empty()
            and self._settled()
        )

    # ---------------------------------------------------------------- API

    async def submit(
        self,
        op: Operation[T],
        parked: list[asyncio.Future[None]] | None = None,
        *,
        touch: bool = True,
    ) -> T:
        """Run `op` in the lane; its reply once committed. With `parked`, a long poll's
        future is added there when the operation names a ticket to park on."""
        return await self._call(Call(self._future(), op, parked), touch=touch)  # type: ignore[no-any-return]

    async def tick(self) -> None:
        """The lane's clock: whatever fell due is done (a refusal of the lane is dropped:
        its reason is logged where it failed)."""
        with contextlib.suppress(LaneError):
            await self.submit(TICK)

    async def _chore(self, chore: Callable[[], Awaitable[None]]) -> None:
        """Store housekeeping run alone by the actor; not a use of the lane."""
        if self.closed:
            return
        used = self.last_used
        with contextlib.suppress(LaneError):
            await self._call(Call(self._future(), chore=chore), touch=False)
        self.last_used = used

    async def _call(self, call: Call, *, touch: bool) -> Any:
        if self.closed:
            raise Unavailable("lane is closing; retry")
        if touch and self.touched is not None:
            self.touched(self.lane)
        await self._enqueue(call)
        return await call.future

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def wake_all(self) -> None:
        """Every parked await of this lane reads the lane again (another replica changed it,
        or a notification may have been lost)."""
        self.parking.wake_all()

    # ---------------------------------------------------------------- the mailbox

    async def _loop(self) -> None:
        while True:
            item = await self._mailbox.get()
            while self._busy:  # a batch runs inline in its caller's task: after it
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

    def _log_failure(self, event: str, exc: BaseException | None) -> None:
        """A store failure of this lane, logged with its short cause (never the driver's
        text)."""
        log.error(event, lane=self.lane, error=type(exc).__name__, reason=failure_reason(exc))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """A store call on a store thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # ---------------------------------------------------------------- replies and wake-ups

    def _hold(self, call: Call, outcome: Outcome, wakes: int | None = None) -> Pending:
        """An operation's outcome as a reply held until its commit; a long poll parks on
        the ticket it names. `wakes`: the wake_all count when the operation's transaction
        began — a wake-up since then (a notification) reaches the new park at once."""
        if call.parked is not None and outcome.park is not None:
            call.parked.append(self.parking.park(outcome.park, wakes))
        return Pending(call.future, outcome.reply, outcome.error)

    def _release(self, fx: Effects, pending: list[Pending], seconds: float) -> None:
        """A transaction is committed: count and log it, release its replies, wake its
        waiters."""
        report_group(self, fx, len(pending), seconds)
        self._settle(pending)
        self.parking.wake(fx)

    @staticmethod
    def _settle(pending: list[Pending]) -> None:
        for p in pending:
            if p.future.done():
                continue
            if p.error is not None:
                p.future.set_exception(p.error)
            else:
                p.future.set_result(p.result)

    # ---------------------------------------------------------------- the alarm

    def _rearm(self) -> None:
        core = self.memory.core
        if core is None:
            return
        deadline = core.next_deadline()
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
        if self.closed:
            return
        # Whatever is due now is done (an alarm armed early finds nothing: the batch's end
        # arms it again for the deadline that stands).
        await self.tick()
