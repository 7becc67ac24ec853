"""The store contract every host relies on, built around a LANE TRANSACTION: lock (or
check) the lane's version, load the lane when another writer moved it on, apply pure
operations, write their changes with the lane's next deadline and last `now`, COMMIT.
coordinator/engine/transaction.py runs those steps for every host; a store supplies them in
one of two modes, each an abstract base:

- `LockingStore` (PostgreSQL replicas; the client's local queue on a SQLite file): other
  processes write the lane too, so a transaction locks first. `begin_load` locks the lane and
  reads its head (and, asked to, the lane's whole state in the same round trip); `apply`
  writes changes inside the transaction; `commit` writes the rest, version + 1, the next
  deadline and last `now`, and COMMITs; `abort` rolls back.
- `PipelinedStore` (the coordinator's SQLite lane files): this process is the lane's only
  writer, so groups of operations are built in memory and committed in order, the next
  built while one commits. `prepare_group` writes a group on the event loop (or says it
  cannot be done there), `commit_prepared` COMMITs it on a store thread, `commit_group` does
  both on a store thread; each checks the lane is still at the version the group was built
  from (`StaleLane` otherwise: nothing is written).

Both are a `LaneStore`: open/close, letting go of descriptors while quiet, `load`, and the
reads (`get_ticket` ... `incidents`), which see every finished transaction. `Reads.perform`
turns an operation's declared `Needs` into those calls.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from coordinator.engine.model import Change, Incident, LaneSnapshot, Receipt, Ticket
from coordinator.errors import StoreError


@dataclass(slots=True, frozen=True)
class LaneHead:
    """What `begin_load` reads under the lane's lock: every commit adds 1 to `version`;
    `last_now` is the latest `now` a finished transaction ran at (None: never);
    `next_deadline` is what the last commit recorded (the alarm pollers read it)."""

    version: int
    last_now: float | None
    next_deadline: float | None = None


def lane_now(clock_now: float, *last: float | None) -> float:
    """The `now` of one operation: the clock, never behind a `now` the lane already ran at
    (a replica's clock, or this computer's after an adjustment, may be behind)."""
    return max([clock_now, *(t for t in last if t is not None)])


class StaleLane(StoreError):
    """The lane's stored version is not the one the group was built from (another writer
    moved it on): nothing of the group was written."""


class LaneStore(ABC):
    """One lane's store. Synchronous calls, one at a time per lane (hosts run them on a
    store thread)."""

    lane: str

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def connected(self) -> bool:
        """The store holds descriptors of its own for this lane (a SQLite lane file)."""

    @abstractmethod
    def suspend(self) -> None:
        """Let go of this lane's descriptors until the next call (a quiet lane)."""

    @abstractmethod
    def resume(self) -> None:
        """Take this lane's descriptors again now, if `suspend` let go of them."""

    @abstractmethod
    def load(self) -> LaneSnapshot:
        """The lane's whole state (its `version` and `last_now` included); inside a
        transaction it is that transaction's view."""

    # ---------------------------------------------------------------- reads

    @abstractmethod
    def get_ticket(self, ticket_id: str) -> Ticket | None: ...

    @abstractmethod
    def get_receipt(self, receipt_id: str) -> Receipt | None: ...

    @abstractmethod
    def recent_receipts(self, limit: int) -> list[Receipt]: ...

    @abstractmethod
    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]: ...

    @abstractmethod
    def history(self, limit: int, project: str | None) -> list[Ticket]: ...

    @abstractmethod
    def history_count(self) -> int: ...

    @abstractmethod
    def incidents(self, limit: int) -> list[tuple[int, Incident]]: ...


@dataclass(slots=True, frozen=True)
class Writes:
    """What a locking transaction commits: its changes, the lane's next deadline and latest
    `now`, and whether other processes serving the lane should be told (a wake-up, a pause)."""

    changes: Sequence[Change]
    next_deadline: float | None
    last_now: float
    notify: bool = False


class LockingStore(LaneStore):
    """A lane other processes write too: each transaction locks the lane first."""

    @abstractmethod
    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        """Start the lane's write transaction: lock the lane, read its head; with `load`
        (the caller expects another writer moved the lane on), also the lane's whole state
        under the lock (what `load` would return next), else None."""

    @abstractmethod
    def apply(self, changes: Sequence[Change]) -> None:
        """Write changes inside the transaction (nothing durable yet; reads in the same
        transaction see them)."""

    @abstractmethod
    def commit(self, writes: Writes) -> int:
        """Write the changes, the lane's next deadline and last `now`, add 1 to its version
        and COMMIT: everything applied since `begin_load` is durable, or (on an error) none
        of it is. Returns the new version. `writes.notify`: tell the other processes
        serving the lane (replicas) that a parked await may need waking, once committed."""

    @abstractmethod
    def abort(self) -> None:
        """Roll the transaction back (nothing since `begin_load` is kept); no-op outside."""

    def driver_reason(self, exc: Exception) -> str | None:
        """A short cause of a driver error, safe to log (no secret in it); None: the log
        reads one from the error chain (coordinator/store/files.py, open_failure_reason)."""
        return None

    @contextlib.contextmanager
    def rolled_back_on_error(
        self, driver_error: type[Exception] | tuple[type[Exception], ...], message: str
    ) -> Iterator[None]:
        """Inside the transaction: any failure rolls it back (and is raised); a driver's
        error is raised as StoreError(message), never with the driver's own text (its
        `reason`, for the log, is `driver_reason`)."""
        try:
            yield
        except driver_error as exc:
            self.abort()
            raise StoreError(message, reason=self.driver_reason(exc)) from exc
        except BaseException:
            self.abort()
            raise

    def begin(self) -> LaneHead:
        """`begin_load` without the lane's state."""
        return self.begin_load(load=False)[0]

    def finish(self, next_deadline: float | None, last_now: float, notify: bool = False) -> int:
        """`commit` of what `apply` wrote."""
        return self.commit(Writes([], next_deadline, last_now, notify))


class LoopLockingStore(LockingStore):
    """A LockingStore whose lock and commit can also run on the event loop, waiting on its
    socket instead of holding a store thread (PostgreSQL); everything else stays on a
    store thread."""

    @abstractmethod
    async def begin_here(self) -> LaneHead | None:
        """`begin_load(load=False)` on the event loop. None when it cannot be done there
        without waiting I/O of its own (no idle session to use): nothing was started, the
        host calls `begin_load` on a store thread. On a failure the transaction is gone (its
        session dropped) and the error raised, as `begin_load`'s."""

    @abstractmethod
    async def commit_here(self, writes: Writes) -> int:
        """`commit` on the event loop; on a failure the transaction is still open: the host
        ends it with `abort` (on a store thread)."""


@dataclass(slots=True, frozen=True)
class Group:
    """One group commit of a pipelined lane: the version it was built from, its changes,
    the lane's next deadline and latest `now` after it."""

    version: int
    changes: Sequence[Change]
    next_deadline: float | None
    last_now: float


class PipelinedStore(LaneStore):
    """A lane this process alone writes: groups are committed in order, one at a time."""

    @abstractmethod
    def prepare_group(self, group: Group) -> bool:
        """On the event loop, when it costs no waiting I/O: start the group's transaction
        and write it (COMMIT comes with `commit_prepared`). False: nothing was started
        (the file is closed, read-only, or locked by another process): `commit_group` on
        a store thread. `StaleLane` when the lane is not at `group.version`."""

    @abstractmethod
    def commit_prepared(self, group: Group) -> int:
        """COMMIT what `prepare_group` wrote (a store thread); the lane's new version."""

    @abstractmethod
    def commit_group(self, group: Group) -> int:
        """The whole group in one transaction on a store thread (may wait for another
        process's lock, or reopen the file); the new version, or `StaleLane`."""


@dataclass(slots=True, frozen=True)
class Needs:
    """The store reads an operation needs before its pure part can run (None: not needed)."""

    ticket: str | None = None  # an ended ticket (the id is not live)
    receipt: str | None = None  # a stored receipt by id
    recent_receipts: int | None = None  # the newest n receipts
    receipts_for_ticket: str | None = None
    history: tuple[int, str | None] | None = None  # (limit, project)
    log: tuple[int, str | None] | None = None  # a second history read (limit, project)
    incidents: int | None = None  # the newest n incidents

    def __bool__(self) -> bool:
        return any(getattr(self, f) is not None for f in self.__slots__)


NO_NEEDS = Needs()


@dataclass(slots=True)
class Reads:
    """What the store answered to `Needs` (empty for what was not asked)."""

    ticket: Ticket | None = None
    receipt: Receipt | None = None
    recent_receipts: list[Receipt] = field(default_factory=list)
    receipts_for_ticket: list[Receipt] = field(default_factory=list)
    history: list[Ticket] = field(default_factory=list)
    log: list[Ticket] = field(default_factory=list)
    incidents: list[tuple[int, Incident]] = field(default_factory=list)

    @staticmethod
    def perform(store: LaneStore, needs: Needs) -> Reads:
        """Every read `needs` asks for, synchronously (on a store thread)."""
        out = Reads()
        if needs.ticket is not None:
            out.ticket = store.get_ticket(needs.ticket)
        if needs.receipt is not None:
            out.receipt = store.get_receipt(needs.receipt)
        if needs.recent_receipts is not None:
            out.recent_receipts = store.recent_receipts(needs.recent_receipts)
        if needs.receipts_for_ticket is not None:
            out.receipts_for_ticket = store.receipts_for_ticket(needs.receipts_for_ticket)
        if needs.history is not None:
            out.history = store.history(*needs.history)
        if needs.log is not None:
            out.log = store.history(*needs.log)
        if needs.incidents is not None:
            out.incidents = store.incidents(needs.incidents)
        return out
