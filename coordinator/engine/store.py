"""The store contract every host relies on (SQLite and PostgreSQL stores), built around a
LANE TRANSACTION:

    head = store.begin()           # lock the lane, read its version and last `now`
    if head.version != cached:     # another writer (process, replica) moved the lane on
        snapshot = store.load()    # rebuild the core from the store
    store.apply(changes)           # write one operation's (or one group's) changes
    version = store.finish(next_deadline, last_now)   # COMMIT; the lane's new version

`abort()` ends a transaction that writes nothing (or failed). A PostgreSQL store does
`SELECT ... FOR UPDATE` on the lane row in `begin`, and writes the changes, version + 1,
next_deadline and last_now before COMMIT in `finish`.

The reads (`get_ticket` ... `incidents`) run inside or outside a transaction; they see every
finished transaction. `Reads.perform` turns an operation's declared `Needs` into those calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.engine.model import Change, Incident, LaneSnapshot, Receipt, Ticket


@dataclass(slots=True, frozen=True)
class LaneHead:
    """What `begin` reads under the lane's lock: every `finish` adds 1 to `version`;
    `last_now` is the latest `now` a finished transaction ran at (None: never);
    `next_deadline` is what the last `finish` recorded (the alarm pollers read it)."""

    version: int
    last_now: float | None
    next_deadline: float | None = None


def lane_now(clock_now: float, *last: float | None) -> float:
    """The `now` of one operation: the clock, never behind a `now` the lane already ran at
    (a replica's clock, or this computer's after an adjustment, may be behind)."""
    return max([clock_now, *(t for t in last if t is not None)])


class LaneStore(Protocol):
    """Synchronous calls, one at a time per lane (the actor runs them on a store thread)."""

    def open(self) -> None: ...

    def close(self) -> None: ...

    @property
    def connected(self) -> bool:
        """The store holds descriptors of its own for this lane (a SQLite lane file)."""
        ...

    def suspend(self) -> None:
        """Let go of this lane's descriptors until the next call (a quiet lane); no-op for a
        store without per-lane descriptors."""
        ...

    # ---------------------------------------------------------------- the lane transaction

    def begin(self) -> LaneHead:
        """Start the lane's write transaction: lock the lane, read its head."""
        ...

    def load(self) -> LaneSnapshot:
        """The lane's whole state (its `version` and `last_now` included); inside a
        transaction it is that transaction's view."""
        ...

    def apply(self, changes: Sequence[Change]) -> None:
        """Write changes inside the transaction `begin` started (nothing durable yet)."""
        ...

    def finish(self, next_deadline: float | None, last_now: float, notify: bool = False) -> int:
        """Record the lane's next deadline and last `now`, add 1 to its version and COMMIT:
        every change applied since `begin` is durable, or (on an error) none is. Returns the
        new version. `notify`: tell other processes serving the lane (replicas) that a parked
        await may need waking, once committed (a store without them ignores it)."""
        ...

    def abort(self) -> None:
        """Roll the transaction back (nothing applied since `begin` is kept); no-op outside."""
        ...

    # ---------------------------------------------------------------- reads

    def get_ticket(self, ticket_id: str) -> Ticket | None: ...

    def get_receipt(self, receipt_id: str) -> Receipt | None: ...

    def recent_receipts(self, limit: int) -> list[Receipt]: ...

    def receipts_for_ticket(self, ticket_id: str) -> list[Receipt]: ...

    def history(self, limit: int, project: str | None) -> list[Ticket]: ...

    def history_count(self) -> int: ...

    def incidents(self, limit: int) -> list[tuple[int, Incident]]: ...


@dataclass(slots=True, frozen=True)
class Needs:
    """The store reads an operation needs before its pure part can run (None: not needed)."""

    ticket: str | None = None  # an ended ticket (the id is not live)
    receipt: str | None = None  # a stored receipt by id
    recent_receipts: int | None = None  # the newest n receipts
    receipts_for_ticket: str | None = None
    history: tuple[int, str | None] | None = None  # (limit, project)
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
    incidents: list[tuple[int, Incident]] = field(default_factory=list)

    @staticmethod
    def perform(store: LaneStore, needs: Needs) -> Reads:
        """Every read `needs` asks for, synchronously (the actor calls this on its store
        thread, the local queue in its own thread)."""
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
        if needs.incidents is not None:
            out.incidents = store.incidents(needs.incidents)
        return out
