"""One lane transaction, written once for every host: the coordinator's two lane actors
(coordinator/actor/pipelined.py on SQLite files, coordinator/actor/locking.py on PostgreSQL)
and the client's local queue (client/local.py). I/O-free: the host does the store calls.

    memory = LaneMemory(lane, settings, kind)        # kept by the host between transactions
    txn = LaneTransaction(memory, head)              # head: read under the lane's lock, or None
    if txn.stale:                                    # (pipelined: the host is the only writer)
        txn.adopt(snapshot, clock_now)               # load when another writer moved it on
    for op in ops:
        needs = txn.start(op, clock_now)             # its one `now`; the lane's clock (advance)
        reads = ... store.apply(txn.unwritten()); Reads.perform(store, needs) ... if needs
        outcome = txn.run(op, reads)                 # the reply, or the refusal; its effects
    writes = txn.writes()                            # None: nothing to commit
    version = <COMMIT writes>; memory.committed(version)   # or memory.forget() on failure

`locked_steps` is that loop on a store other processes write too, as the store calls it
needs (`Begin`, `Load`, `Read`, `Commit`, `Abort`), each yielded for the host to answer;
`run_locked` answers them synchronously on a `LockingStore`: the local queue runs it in its
own thread, the thread-hopping locking actor on a store thread, and the replicas' actor
(coordinator/actor/loop_locking.py) answers the lock and the commit on the event loop and the
rest on a store thread. The pipelined actor makes the same calls on
the event loop, one operation per call into a pending group, and commits groups in order
(`PipelinedStore`), the version checked at COMMIT instead of under a lock.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.engine.lane import LaneCore
from coordinator.engine.model import Change, Effects, LaneSettings, LaneSnapshot
from coordinator.engine.operations import Operation
from coordinator.engine.store import (
    NO_NEEDS,
    LaneHead,
    LockingStore,
    Needs,
    Reads,
    Writes,
    lane_now,
)
from coordinator.protocol.errors import LaneError


class LaneMemory:
    """A host's memory of one lane between transactions: the core, the lane version it is
    at, and the latest `now` the lane ran at here.

    `full_window`: a core built from the store gives every waiter a full keep-alive window
    from now (the coordinator: a restart must not abandon its waiters); False keeps each
    waiter's stored keep-alive (the local queue, whose processes only see the file)."""

    def __init__(
        self, lane: str, settings: LaneSettings, kind: str, *, full_window: bool = True
    ) -> None:
        self.lane = lane
        self.settings = settings
        self.kind = kind
        self.full_window = full_window
        self.core: LaneCore | None = None
        self.version = 0
        self.last_now: float | None = None

    def current(self, head: LaneHead | None) -> bool:
        """The core is built and (under a lock) at the version the store holds."""
        return self.core is not None and (head is None or head.version == self.version)

    def adopt(self, snap: LaneSnapshot, clock_now: float) -> None:
        """Rebuild the core from the store's state."""
        now = lane_now(clock_now, snap.last_now, self.last_now)
        start = now if self.full_window else 0.0
        self.core = LaneCore(self.lane, self.settings, snap, start, coordinator=self.kind)
        self.version = snap.version
        self.last_now = now

    def forget(self) -> None:
        """What memory holds may not be what the store holds: rebuild it before the next
        operation."""
        self.core = None

    def committed(self, version: int) -> None:
        self.version = version

    def tick(self, clock_now: float, *last: float | None) -> float:
        """The `now` of one operation: never behind a `now` the lane already ran at."""
        now = lane_now(clock_now, self.last_now, *last)
        self.last_now = now
        return now


@dataclass(slots=True)
class Outcome:
    """One operation's answer: its reply or its refusal, and (await) the ticket to park on."""

    reply: Any = None
    error: LaneError | None = None
    park: str | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.reply


@dataclass(slots=True)
class LaneTransaction:
    """The pure part of one lane transaction over `memory` (see the module docstring).

    `head` is what the store read under the lane's lock; None when the host is the lane's
    only writer (its memory is the lane: the version is checked when the group commits)."""

    memory: LaneMemory
    head: LaneHead | None = None
    fx: Effects = field(default_factory=Effects)
    _now: float = 0.0
    _written: int = 0  # changes of `fx` the store has already (`unwritten`)
    _first_seq: int | None = None  # the lane's next_seq when the first operation began

    @property
    def stale(self) -> bool:
        return not self.memory.current(self.head)

    @property
    def core(self) -> LaneCore:
        core = self.memory.core
        assert core is not None, "adopt the lane's state first"
        return core

    def adopt(self, snap: LaneSnapshot, clock_now: float) -> None:
        self.memory.adopt(snap, clock_now)

    def start(self, op: Operation[Any], clock_now: float) -> Needs:
        """Begin one operation: its `now` (read once), the lane's clock (reaps, grants, a
        pause ending: kept even when the operation is refused), and the reads it needs."""
        last = None if self.head is None else self.head.last_now
        self._now = self.memory.tick(clock_now, last)
        if self._first_seq is None:
            self._first_seq = self.core.next_seq
        self.fx.extend(self.core.advance(self._now))
        needs = op.needs(self.core)
        return needs if needs else NO_NEEDS

    def run(self, op: Operation[Any], reads: Reads) -> Outcome:
        """The operation's pure part, at the `now` of `start`."""
        try:
            result = op.run(self.core, self._now, reads)
        except LaneError as exc:  # refused before changing anything
            return Outcome(error=exc)
        self.fx.extend(result.fx)
        return Outcome(result.reply, park=result.park)

    def unwritten(self) -> list[Change]:
        """The changes the store has not been given yet (a read inside a locked transaction
        must see them); they count as given from now on."""
        out = self.fx.changes[self._written :]
        self._written = len(self.fx.changes)
        return out

    def take(self) -> Effects:
        """The effects so far, handed to the host (a pipelined actor's pending group
        gathers them); the transaction goes on with none."""
        fx, self.fx = self.fx, Effects()
        self._written = 0
        return fx

    def add(self, changes: Sequence[Change]) -> None:
        """A host's own changes, written with the transaction's (the local queue's
        keep-alives)."""
        self.fx.changes.extend(changes)

    def writes(self) -> Writes | None:
        """What to commit, or None: nothing changed and the recorded deadline stands."""
        deadline = self.core.next_deadline()
        recorded = self.head.next_deadline if self.head is not None else deadline
        if not self.fx.changes and deadline == recorded:
            return None
        assert self.memory.last_now is not None
        return Writes(self.unwritten(), deadline, self.memory.last_now, self.wakes_others())

    def wakes_others(self) -> bool:
        """Whether a parked await elsewhere (another replica) may need waking: the pause
        changed, or a ticket that was queued before this transaction left the queue. Only a
        queued ticket has parked awaits, and one this transaction created has none anywhere
        yet (its id was never committed): an acquire granted at once, a release that
        promotes nobody, a heartbeat or a receipt tell no one."""
        if self.fx.pause_changed:
            return True
        first = self._first_seq
        return first is not None and any(seq < first for seq in self.fx.dequeued)


@dataclass(slots=True)
class LockedRun:
    """A `run_locked` transaction's result. `open`: nothing was written and the
    transaction is still open — the host answers first, then ends it with `store.abort()`."""

    outcomes: list[Outcome]
    fx: Effects
    open: bool
    reloaded: bool  # the lane was rebuilt from the store (another writer had moved it on)


@dataclass(slots=True, frozen=True)
class Begin:
    """Lock the lane: `store.begin_load(load=...)` -> (LaneHead, LaneSnapshot | None)."""

    load: bool


@dataclass(slots=True, frozen=True)
class Load:
    """The lane's state under the lock: `store.load()` -> LaneSnapshot."""


@dataclass(slots=True, frozen=True)
class Read:
    """An operation's reads: `store.apply(unwritten)` first when there is any (the reads see
    the transaction's changes so far), then `Reads.perform(store, needs)` -> Reads."""

    unwritten: list[Change]
    needs: Needs


@dataclass(slots=True, frozen=True)
class Commit:
    """`store.commit(writes)` -> the lane's new version."""

    writes: Writes


@dataclass(slots=True, frozen=True)
class Abort:
    """`store.abort()` -> None; the failure that led here is raised after it."""


Step = Begin | Load | Read | Commit | Abort
LockedSteps = Generator[Step, Any, LockedRun]


def locked_steps(
    memory: LaneMemory,
    ops: Sequence[Operation[Any]],
    clock: Callable[[], float],
    *,
    expect_stale: bool = False,
    extra: Callable[[LaneTransaction], Sequence[Change]] | None = None,
) -> LockedSteps:
    """One lane transaction on a store other processes write too, as the store calls it
    needs: each `Step` is yielded, and the host sends back its answer (or throws the store's
    failure in). Lock, load when stale, the operations, COMMIT. `expect_stale`: read the lane's
    state with the lock (another writer likely moved it on). `extra`: the host's own changes,
    asked for after the operations ran. Any failure after the lock yields `Abort`, forgets the
    memory, and is raised. `run_locked` drives it synchronously; an asynchronous host drives
    the same steps with its own store calls."""
    head, snap = yield Begin(load=expect_stale or memory.core is None)
    try:
        txn = LaneTransaction(memory, head)
        reloaded = txn.stale
        if reloaded:
            if snap is None or snap.version != head.version:
                snap = yield Load()  # under the lock
            txn.adopt(snap, clock())
        outcomes = []
        for op in ops:
            needs = txn.start(op, clock())
            reads = Reads()
            if needs:
                reads = yield Read(txn.unwritten(), needs)
            outcomes.append(txn.run(op, reads))
        if extra is not None:
            txn.add(extra(txn))
        writes = txn.writes()
        if writes is None:
            return LockedRun(outcomes, txn.fx, open=True, reloaded=reloaded)
        memory.committed((yield Commit(writes)))
    except BaseException:
        yield Abort()
        memory.forget()
        raise
    return LockedRun(outcomes, txn.fx, open=False, reloaded=reloaded)


def perform(store: LockingStore, step: Step) -> Any:
    """One step, synchronously on `store` (a store thread, the local queue's thread)."""
    if isinstance(step, Begin):
        return store.begin_load(load=step.load)
    if isinstance(step, Load):
        return store.load()
    if isinstance(step, Read):
        if step.unwritten:
            store.apply(step.unwritten)
        return Reads.perform(store, step.needs)
    if isinstance(step, Commit):
        return store.commit(step.writes)
    store.abort()
    return None


def drive(steps: LockedSteps, answer: Callable[[Step], Any]) -> LockedRun:
    """Run `steps` to their end, each answered by `answer` (its failure thrown back in)."""
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
            reply = answer(step)
        except BaseException as exc:
            reply, failure = None, exc


def run_locked(
    store: LockingStore,
    memory: LaneMemory,
    ops: Sequence[Operation[Any]],
    clock: Callable[[], float],
    *,
    expect_stale: bool = False,
    extra: Callable[[LaneTransaction], Sequence[Change]] | None = None,
) -> LockedRun:
    """`locked_steps` on `store`, synchronously: the whole transaction in one call."""
    steps = locked_steps(memory, ops, clock, expect_stale=expect_stale, extra=extra)
    return drive(steps, lambda step: perform(store, step))
