"""The SQLite lane store's lane transaction and write path (`SqliteTransaction`, which
`SqliteLaneStore` builds on): the locking transaction (begin_load / apply / commit / abort)
of the client's local queue, and the lane actor's pipelined group commit in as few
statements, and as few GIL hand-offs, as it takes.

Every statement run on a store thread is a GIL hand-off (the sqlite3 module lets go of the
GIL around each step and must take it back from the busy event loop), so:
- the write path keeps statements few and cheap: consecutive new tickets are one
  `executemany`, a ticket whose row exists a plain `UPDATE`, the lane's counters one
  statement and only those that changed, and the head is checked and raised in one
  conditional `UPDATE` instead of a read at `begin`, an update and a read at `finish`;
- the actor prepares a group on the event loop (`prepare_group`: BEGIN IMMEDIATE, the head,
  the changes: page-cache work on a connection that is open, no I/O that waits on the disk)
  and only `commit_prepared` — the COMMIT, where the WAL is written and fsynced — runs on a
  store thread. The reply still leaves only after that COMMIT (durability is unchanged). A
  lane whose connection is closed, or whose write lock another process holds, commits the
  whole group on a store thread instead (`commit_group`)."""

from __future__ import annotations

import contextlib
import sqlite3
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from coordinator.constants import STORE_BUSY_TIMEOUT_MS
from coordinator.engine.model import (
    Change,
    LaneSnapshot,
    PruneHistory,
    PruneIncidents,
    PruneMachinesSeen,
    PutCounters,
    PutIncident,
    PutMachineSeen,
    PutPause,
    PutProjectServed,
    PutReceipt,
    PutTicket,
)
from coordinator.engine.store import (
    Group,
    LaneHead,
    LockingStore,
    PipelinedStore,
    StaleLane,
    Writes,
)
from coordinator.errors import StoreError
from coordinator.store.reads import SQLITE_READS
from coordinator.store.rows import (
    INCIDENT_COLUMNS,
    PAUSE_COLUMNS,
    RECEIPT_COLUMNS,
    SQLITE_SEEN_PRUNE,
    SQLITE_SEEN_UPSERT,
    TICKET_UPDATE,
    TICKET_UPSERT,
    coalesce,
    incident_values,
    pause_values,
    receipt_values,
    ticket_update_values,
    ticket_values,
)


# The head: version + 1, the next deadline, the latest `now` (never back), only if the lane is
# at the version given: one statement (no row changed: another writer moved the lane on).
# (`UPDATE … RETURNING` measured 3× slower than this and a read.)
def _marks(columns: str) -> str:
    """One "?" per column of a column list."""
    return ", ".join("?" * (columns.count(",") + 1))


HEAD_UPDATE = (
    "UPDATE lane_head SET version = version + 1, next_deadline = ?, "
    "last_now = max(coalesce(last_now, ?), ?) WHERE id = 1 AND version = ?"
)
_META_UPSERT = " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
_COUNTERS_BOTH = "INSERT INTO meta (key, value) VALUES ('last_fence', ?), ('next_seq', ?)"
_COUNTER_ONE = "INSERT INTO meta (key, value) VALUES (?, ?)"
_PROJECT_UPSERT = (
    "INSERT INTO projects (project, last_fence, last_granted_at) VALUES (?, ?, ?) "
    "ON CONFLICT (project) DO UPDATE SET last_fence = excluded.last_fence, "
    "last_granted_at = excluded.last_granted_at"
)
_PAUSE_INSERT = f"INSERT INTO pause (id, {PAUSE_COLUMNS}) VALUES (1, {_marks(PAUSE_COLUMNS)})"
_RECEIPT_INSERT = f"INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES ({_marks(RECEIPT_COLUMNS)})"
_INCIDENT_INSERT = f"INSERT INTO incidents ({INCIDENT_COLUMNS}) VALUES ({_marks(INCIDENT_COLUMNS)})"
_OLDEST_ENDED = SQLITE_READS.oldest_ended
_PRUNE_RECEIPTS = f"DELETE FROM receipts WHERE ticket_id IN ({_OLDEST_ENDED})"
_PRUNE_TICKETS = f"DELETE FROM tickets WHERE ticket_id IN ({_OLDEST_ENDED})"
_PRUNE_INCIDENTS = (
    "DELETE FROM incidents WHERE id IN (SELECT id FROM incidents ORDER BY id ASC LIMIT ?)"
)

Counters = tuple[int, int]  # (last_fence, next_seq)


class SqliteTransaction(PipelinedStore, LockingStore):
    """The lane transaction of one lane file (the base of SqliteLaneStore, which gives the
    connection (`_conn`), `lane` and `_head`), in both modes: pipelined for the
    coordinator's lane actor (this process is the lane's only writer), locking for the
    client's local queue (processes on one computer share the file; BEGIN IMMEDIATE
    serializes them). Calls are serialized per lane by the caller."""

    lane: str
    _db: sqlite3.Connection | None
    _busy_timeout_ms: int = STORE_BUSY_TIMEOUT_MS
    # (version, counters): the counters the file holds at that version, so a commit writes
    # only those that changed; and the transaction's own (its version: `_txn_version`).
    _counters: tuple[int, Counters] | None = None
    _txn_counters: Counters | None = None
    _txn_version: int | None = None
    _nowait: sqlite3.Connection | None = None  # busy_timeout 0 there (`prepare_group`)
    _read_only = False  # SqliteLaneStore: opened read-only on a full disk (`begin` reopens)

    @property
    @abstractmethod
    def _conn(self) -> sqlite3.Connection:
        """The lane file's open connection (opened again if it was closed as quiet)."""

    @abstractmethod
    def _head(self) -> LaneHead:
        """The `lane_head` row (StoreError when the file has none)."""

    @abstractmethod
    def _load(self) -> LaneSnapshot:
        """The lane's state, read inside the open transaction."""

    # ---------------------------------------------------------------- LockingStore

    def begin_load(self, *, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        db = self._conn
        if db.in_transaction:
            raise StoreError(f"lane store for {self.lane}: a transaction is already open")
        try:
            self._wait_for_locks(db)
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"lane store for {self.lane} is busy") from exc
        try:
            head = self._head()
            snap = self._load() if load else None
        except BaseException:
            self.abort()
            raise
        self._began(head.version)
        return head, snap

    def apply(self, changes: Sequence[Change]) -> None:
        if not self._conn.in_transaction:
            raise StoreError(f"lane store for {self.lane}: apply outside a transaction")
        try:
            self._txn_counters = write_changes(self._conn, changes, self._txn_counters)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc

    def commit(self, writes: Writes) -> int:
        """The changes, the head, COMMIT (`notify` is for stores shared by replicas: one
        file has one server)."""
        db = self._conn
        version = self._txn_version  # read by `begin_load`, under the write lock
        if not db.in_transaction or version is None:
            raise StoreError(f"lane store for {self.lane}: commit outside a transaction")
        with self.rolled_back_on_error(sqlite3.Error, self._cannot_commit):
            self.apply(writes.changes)
            if not self._raise_head(db, version, writes.next_deadline, writes.last_now):
                raise StoreError(f"lane store for {self.lane}: its lane_head row moved")
            db.execute("COMMIT")
        return self._committed(version + 1)

    @property
    def _cannot_commit(self) -> str:
        return f"cannot commit to lane store for {self.lane}"

    def abort(self) -> None:
        db = self._db
        if db is not None and db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")

    # ---------------------------------------------------------------- PipelinedStore

    def commit_group(self, group: Group) -> int:
        """`begin_load` (it waits for another process's lock, and reopens a lane opened
        read-only on a full disk), the group, COMMIT."""
        head = self.begin()
        if head.version != group.version:
            self.abort()
            raise _stale(self.lane, head.version, group.version)
        self._prepare(self._conn, group)
        return self.commit_prepared(group)

    def prepare_group(self, group: Group) -> bool:
        """On the event loop: BEGIN IMMEDIATE (never waiting for the lock: the connection's
        busy_timeout is 0 from its first prepared group on, until a store-thread transaction
        sets it back), the head, the changes. False when it cannot be done here — the
        connection is closed (reopening it is file I/O), it was opened read-only (a full
        disk), or another process holds the lane's write lock: nothing was started."""
        db = self._db
        if db is None or db.in_transaction or self._read_only:
            return False
        if self._nowait is not db:  # once per connection: toggling it costs every statement
            db.execute("PRAGMA busy_timeout = 0")
            self._nowait = db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False  # locked (by another process): wait for it on a store thread
        self._prepare(db, group)
        return True

    def commit_prepared(self, group: Group) -> int:
        """COMMIT what `prepare_group` wrote (on a store thread: the WAL's write and fsync);
        on any error nothing of it is kept."""
        with self.rolled_back_on_error(sqlite3.Error, self._cannot_commit):
            self._conn.execute("COMMIT")
        return self._committed(group.version + 1)

    def _prepare(self, db: sqlite3.Connection, group: Group) -> None:
        """Inside a transaction just begun: the head (only if at the group's version), the
        changes; StaleLane (rolled back) when another writer moved the lane on."""
        try:
            if not self._raise_head(db, group.version, group.next_deadline, group.last_now):
                found = self._head().version
                raise _stale(self.lane, found, group.version)
            self._began(group.version)
            self.apply(group.changes)
        except BaseException:
            self.abort()
            raise

    def _raise_head(
        self, db: sqlite3.Connection, version: int, next_deadline: float | None, last_now: float
    ) -> bool:
        """version + 1, the next deadline and the latest `now`, if the lane is at `version`."""
        try:
            moved = db.execute(HEAD_UPDATE, (next_deadline, last_now, last_now, version))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to lane store for {self.lane}") from exc
        return moved.rowcount == 1

    def _wait_for_locks(self, db: sqlite3.Connection) -> None:
        """A store-thread transaction waits for another process's lock again (busy_timeout),
        which `prepare_group` turned off on this connection."""
        if self._nowait is db:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            self._nowait = None

    def _began(self, version: int) -> None:
        """A transaction began at `version`: the counters the file holds, if known."""
        self._txn_version = version
        known = self._counters
        self._txn_counters = known[1] if known is not None and known[0] == version else None

    def _committed(self, version: int) -> int:
        self._txn_version = None
        counters = self._txn_counters
        self._counters = None if counters is None else (version, counters)
        return version


def _stale(lane: str, found: int, expected: int) -> StaleLane:
    return StaleLane(f"lane {lane} is at version {found}, not {expected}")


def write_changes(
    db: sqlite3.Connection, changes: Sequence[Change], stored: Counters | None
) -> Counters | None:
    """Write a group's changes in order, inside the caller's transaction. `stored`: the
    counters the file holds (None: unknown), so only a counter that changed is written, and
    a ticket whose seq is below the stored next_seq (its row exists) is an UPDATE, not the
    insert-or-update (a third cheaper). Returns the counters the file holds after them."""
    in_file = stored[1] if stored is not None else 0  # tickets with a lower seq have a row
    inserts: list[tuple[Any, ...]] = []
    for ch in coalesce(changes) if len(changes) > 1 else changes:
        if type(ch) is PutTicket:
            t = ch.ticket
            if t.seq >= in_file:
                inserts.append(ticket_values(t))
                continue
            if inserts:
                _insert_tickets(db, inserts)
                inserts = []
            if db.execute(TICKET_UPDATE, ticket_update_values(t)).rowcount != 1:
                db.execute(TICKET_UPSERT, ticket_values(t))  # gone (pruned): as before
            continue
        if inserts:  # consecutive new tickets: one statement, written in their order
            _insert_tickets(db, inserts)
            inserts = []
        if type(ch) is PutCounters:
            stored = _counters(db, ch, stored)
        elif type(ch) is PutProjectServed:
            db.execute(_PROJECT_UPSERT, (ch.project, ch.fence, ch.at))
        elif type(ch) is PutMachineSeen:
            db.execute(SQLITE_SEEN_UPSERT, (ch.machine_id, ch.at))
        elif type(ch) is PruneMachinesSeen:
            db.execute(SQLITE_SEEN_PRUNE, (ch.before,))
        else:
            _other(db, ch)
    if inserts:
        _insert_tickets(db, inserts)
    return stored


def _insert_tickets(db: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    if len(rows) == 1:
        db.execute(TICKET_UPSERT, rows[0])
    else:
        db.executemany(TICKET_UPSERT, rows)


def _counters(db: sqlite3.Connection, ch: PutCounters, stored: Counters | None) -> Counters:
    fence, seq = ch.last_fence, ch.next_seq
    if stored is None or (stored[0] != fence and stored[1] != seq):
        db.execute(_COUNTERS_BOTH + _META_UPSERT, (str(fence), str(seq)))
    elif stored[0] != fence:
        db.execute(_COUNTER_ONE + _META_UPSERT, ("last_fence", str(fence)))
    elif stored[1] != seq:
        db.execute(_COUNTER_ONE + _META_UPSERT, ("next_seq", str(seq)))
    return (fence, seq)


def _other(db: sqlite3.Connection, ch: Change) -> None:
    """The changes that are rare on the hot path: pauses, receipts, incidents, prunes."""
    if isinstance(ch, PutPause):
        db.execute("DELETE FROM pause")
        if ch.pause is not None:
            db.execute(_PAUSE_INSERT, pause_values(ch.pause))
    elif isinstance(ch, PutReceipt):
        db.execute(_RECEIPT_INSERT, receipt_values(ch.receipt))
    elif isinstance(ch, PutIncident):
        i = ch.incident
        db.execute(_INCIDENT_INSERT, incident_values(i))
    elif isinstance(ch, PruneHistory):
        db.execute(_PRUNE_RECEIPTS, (ch.excess,))
        db.execute(_PRUNE_TICKETS, (ch.excess,))
    elif isinstance(ch, PruneIncidents):
        db.execute(_PRUNE_INCIDENTS, (ch.excess,))
