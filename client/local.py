"""`LocalQueue`: the single-computer queue — the coordinator's own `LaneCore` run in-process
against SQLite files in the state dir. Correct for many processes on ONE computer; never a
cross-machine protocol (a synced or network state dir is refused).

Layout and rules (docs/client.md, "Local queue"):
- One SQLite file per lane in the state dir, named like the coordinator's data dir
  (`route+account.sqlite`), with the coordinator's schema and migrations.
- Every operation is one lane transaction, the engine's `run_locked`
  (coordinator/engine/transaction.py) on the lane file as a `LockingStore`: `begin_load`
  (BEGIN IMMEDIATE: serializes writers across processes) reads the lane's version; the
  lane's memory kept from this queue's previous call is reused when the version is
  unchanged, else rebuilt from the file; the lane's clock (reap expired leases and abandoned
  waiters, end a due pause, promote — kept even when the operation itself is refused), the
  engine operation, the keep-alives due, `commit` (version + 1). An operation that changed
  nothing ends its transaction without a new version.
- `now` is the clock, never behind the latest `now` the lane ran at (`lane_now`).
- Waiter keep-alives are written to the file (at most every KEEPALIVE_PERSIST_SECONDS per
  ticket), because other processes only see the file; a keep-alive not written is not kept
  in memory either, so a kept core behaves exactly like one rebuilt from the file.
- Every lane has capacity 1 unless `LANE_LOCAL_CAPACITY` (or `capacity=`) says otherwise.
- `await` polls the file every `poll_interval` seconds (there are no cross-process wakeups).
- Replies say `coordinator: "local-sqlite"`; there are no receipts: `receipt` answers
  `stored: false`, and status has no receipt keys.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from client.api import LOCAL_KIND
from client.backend import BackendBase
from client.clock import monotonic, wall
from client.errors import (
    BadRequestError,
    ConfigError,
    LaneClientError,
    UnavailableError,
    error_for,
)
from client.local_fs import check_state_dir
from coordinator import constants as C
from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    Reconcile,
    Release,
    TicketCall,
)
from coordinator.engine.long_poll import long_poll
from coordinator.engine.model import Change, LaneSettings, LaneSnapshot, PutTicket, TicketState
from coordinator.engine.operations import (
    AcquireOp,
    AwaitOp,
    CooldownOp,
    HeartbeatOp,
    HistoryOp,
    Operation,
    ReconcileOp,
    ReleaseOp,
    StatusOp,
    detached,
)
from coordinator.engine.transaction import LaneMemory, LaneTransaction, run_locked
from coordinator.errors import StoreError
from coordinator.protocol import constants as P
from coordinator.protocol import requests as S
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import MACHINE_RE, lane_file_name, new_ticket_id
from coordinator.protocol.receipts import check_receipt_id
from coordinator.protocol.replies import (
    LaneReply,
    ReceiptReply,
)
from coordinator.store.sqlite import SqliteLaneStore

DEFAULT_LOCAL_CAPACITY = 1
LOCAL_AWAIT_POLL_SECONDS = 0.2
KEEPALIVE_PERSIST_SECONDS = 10.0
LOCAL_BUSY_TIMEOUT_MS = 30_000

T = TypeVar("T")
R = TypeVar("R")
B = TypeVar("B", bound=S.Base)


def _validate(schema: type[B], body: dict[str, Any]) -> B:
    """The coordinator's own request validation, so local and shared refuse the same input."""
    try:
        return S.validate(body, schema)
    except LaneError as exc:
        raise BadRequestError(message=exc.message) from None


def _client_error(exc: LaneError) -> LaneClientError:
    return error_for(exc.code, exc.status, exc.message)


class _LocalMemory(LaneMemory):
    """A lane's memory kept between calls (used while the file is at its version), with
    each live ticket's `last_seen_at` as the file holds it (`persisted`): a keep-alive the
    keep-alive rule does not write is taken back, as a rebuild from the file would."""

    def __init__(self, lane: str, settings: LaneSettings) -> None:
        # full_window=False: keep each waiter's stored keep-alive (the coordinator's
        # "restart grants a full window" rule would make local waiters immortal)
        super().__init__(lane, settings, LOCAL_KIND, full_window=False)
        self.persisted: dict[str, float] = {}

    def adopt(self, snap: LaneSnapshot, clock_now: float) -> None:
        super().adopt(snap, clock_now)
        self.persisted = {t.ticket_id: t.last_seen_at for t in snap.live}


class LocalQueue(BackendBase):
    """The local single-computer queue (see the module docstring)."""

    kind = LOCAL_KIND

    def __init__(
        self,
        state_dir: Path | str,
        machine_id: str,
        claim_id: str | None = None,
        *,
        capacity: int = DEFAULT_LOCAL_CAPACITY,
        default_lease_seconds: float = P.DEFAULT_LEASE_SECONDS,
        waiter_timeout_seconds: float = C.DEFAULT_WAITER_TIMEOUT_SECONDS,
        default_hold_seconds: float = C.DEFAULT_HOLD_SECONDS,
        history_retained: int = C.DEFAULT_HISTORY_RETAINED,
        poll_interval: float = LOCAL_AWAIT_POLL_SECONDS,
        clock: Callable[[], float] = wall,
        mounts_text: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).expanduser()
        if not MACHINE_RE.match(machine_id or ""):
            raise ConfigError(message="LANE_MACHINE_ID: must be 1-64 of [A-Za-z0-9._-]")
        if claim_id is not None and not 1 <= len(claim_id) <= P.MAX_CLAIM_CHARS:
            raise ConfigError(message=f"LANE_CLAIM: must be 1-{P.MAX_CLAIM_CHARS} characters")
        if capacity < 1:
            raise ConfigError(message="LANE_LOCAL_CAPACITY: must be at least 1")
        check_state_dir(self.state_dir, mounts_text)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(
                message=f"LANE_STATE_DIR: cannot create {self.state_dir}: {exc.strerror}"
            ) from None
        self.machine_id = machine_id
        self.claim_id = claim_id
        self.capacity = capacity
        self.poll_interval = poll_interval
        self._clock = clock
        self._settings = LaneSettings(
            capacity=capacity,
            default_lease_seconds=default_lease_seconds,
            waiter_timeout_seconds=waiter_timeout_seconds,
            default_hold_seconds=default_hold_seconds,
            history_retained=history_retained,
            incidents_retained=C.INCIDENTS_RETAINED,
        )
        self._stores: dict[str, SqliteLaneStore] = {}
        self._kept: dict[str, _LocalMemory] = {}
        self.reuse_core = True  # False: rebuild the core from the file on every call
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"LocalQueue(state_dir={str(self.state_dir)!r}, machine_id={self.machine_id!r}, "
            f"claim_id={self.claim_id!r}, capacity={self.capacity})"
        )

    def path_for(self, lane: str) -> Path:
        try:
            return self.state_dir / lane_file_name(lane)
        except LaneError as exc:
            raise BadRequestError(message=exc.message) from None

    def with_claim(self, claim_id: str | None) -> LocalQueue:
        """A sibling on the same state dir, files and lock that sends another claim (None: the
        machine-only owner rule). Close this queue, not the sibling (client/driver/claim.py)."""
        sibling = copy.copy(self)
        sibling.claim_id = claim_id
        return sibling

    async def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._kept.clear()

    # ------------------------------------------------------------------ engine

    def _store(self, lane: str) -> SqliteLaneStore:
        store = self._stores.get(lane)
        if store is None:
            store = SqliteLaneStore(
                self.path_for(lane), lane, busy_timeout_ms=LOCAL_BUSY_TIMEOUT_MS
            )
            store.open()
            self._stores[lane] = store
        return store

    def _run_sync(self, lane: str, op: Operation[T]) -> T:
        with self._lock:
            if not op.creates and lane not in self._stores and not self.path_for(lane).exists():
                # only acquire creates a lane file (as on the coordinator)
                return self._detached(lane, op)
            try:
                return self._transaction(lane, op)
            except StoreError as exc:
                raise UnavailableError(message=f"local queue store: {exc.message}") from None
            except LaneError as exc:  # refused, after the lane's time-driven changes committed
                raise _client_error(exc) from None

    def _detached(self, lane: str, op: Operation[T]) -> T:
        try:
            return detached(op, lane, self._settings, self._clock(), LOCAL_KIND)
        except LaneError as exc:
            raise _client_error(exc) from None

    def _transaction(self, lane: str, op: Operation[T]) -> T:
        """One lane transaction (coordinator/engine/transaction.py `run_locked`): lock,
        (re)load when the file moved on, the operation and the keep-alives due, COMMIT. A
        refusal (LaneError) is raised after COMMIT; any other failure rolls back and forgets
        the kept memory."""
        store = self._store(lane)
        memory = self._kept.pop(lane, None) or _LocalMemory(lane, self._settings)
        if not self.reuse_core:
            memory.forget()
        done = run_locked(
            store, memory, [op], self._clock, extra=lambda txn: self._keepalives(txn, memory)
        )
        if done.open:
            store.abort()  # nothing written: no new version
        for ch in done.fx.changes:
            if isinstance(ch, PutTicket):
                memory.persisted[ch.ticket.ticket_id] = ch.ticket.last_seen_at
        live = memory.core.live if memory.core is not None else {}
        memory.persisted = {t: at for t, at in memory.persisted.items() if t in live}
        self._kept[lane] = memory
        return done.outcomes[0].result()  # type: ignore[no-any-return]

    @staticmethod
    def _keepalives(txn: LaneTransaction, memory: _LocalMemory) -> list[Change]:
        """Waiter keep-alives are written at most every KEEPALIVE_PERSIST_SECONDS per ticket
        (other processes see only the file); one not written is taken back in memory."""
        core = txn.core
        written = {ch.ticket.ticket_id for ch in txn.fx.changes if isinstance(ch, PutTicket)}
        out: list[Change] = []
        for tid, t in core.live.items():
            at = memory.persisted.get(tid)
            if t.state is not TicketState.QUEUED or tid in written or at is None:
                continue
            if t.last_seen_at - at >= KEEPALIVE_PERSIST_SECONDS:
                out.append(PutTicket(t))
            elif t.last_seen_at != at:
                core.restore_keepalive(tid, at)
        return out

    async def _run(self, lane: str, op: Operation[T]) -> T:
        return await asyncio.to_thread(self._run_sync, lane, op)

    # ------------------------------------------------------------------ operations

    async def _send(self, op: str, lane: str, body: dict[str, Any], reply: type[R]) -> R:
        """The body checked by the coordinator's own request schema, then the engine
        operation (`_OPERATIONS`) in one lane transaction."""
        schema, operation = _OPERATIONS[op]
        result = await self._run(lane, operation(_validate(schema, body)))
        assert isinstance(result, reply)
        return result

    async def _await(self, lane: str, body: dict[str, Any]) -> LaneReply:
        """Polls the file every `poll_interval` s until the ticket is no longer queued, the
        pause starts/ends/changes, or `wait_seconds` pass (docs/protocol.md#await semantics)."""
        b = _validate(S.AwaitBody, body)
        deadline = monotonic() + b.wait_seconds
        op = AwaitOp(_ticket_call(b))

        async def wait() -> bool:
            await asyncio.sleep(min(self.poll_interval, max(0.0, deadline - monotonic())))
            return True

        return await long_poll(lambda: self._run(lane, op), wait, lambda: monotonic() >= deadline)

    async def _receipt(self, lane: str, body: dict[str, Any]) -> ReceiptReply:
        """The local queue keeps no receipts: validated like the coordinator, never stored."""
        b = _validate(S.ReceiptBody, body)
        try:
            check_receipt_id(b.receipt_id, b.ticket_id, b.phase)
        except LaneError as exc:
            raise BadRequestError(message=exc.message) from None
        return ReceiptReply(
            coordinator=LOCAL_KIND, stored=False, replay=False, content_hash_verified=None
        )


def _ticket_call(b: S.TicketBody) -> TicketCall:
    return TicketCall(b.machine_id, b.claim_id, b.ticket_id)


def _acquire(b: S.AcquireBody) -> AcquireOp:
    token = new_ticket_id()
    return AcquireOp(
        Acquire(b.machine_id, b.claim_id, b.project, b.scene, b.prompt_hash, b.lease_seconds, token)
    )


# Each operation answered by `_send`: its request schema and the engine operation for a
# checked body. Status reaps and promotes like the coordinator but never has receipt keys.
_OPERATIONS: dict[str, tuple[type[Any], Callable[[Any], Operation[Any]]]] = {
    "acquire": (S.AcquireBody, _acquire),
    "heartbeat": (
        S.HeartbeatBody,
        lambda b: HeartbeatOp(Heartbeat(_ticket_call(b), b.lease_seconds)),
    ),
    "release": (
        S.ReleaseBody,
        lambda b: ReleaseOp(Release(_ticket_call(b), b.outcome, b.provider_job_id, b.note)),
    ),
    "reconcile": (
        S.ReconcileBody,
        lambda b: ReconcileOp(Reconcile(_ticket_call(b), b.outcome, b.provider_job_id, b.note)),
    ),
    "cooldown": (
        S.CooldownBody,
        lambda b: CooldownOp(Cooldown(_ticket_call(b), b.reason_code, b.retry_after_seconds)),
    ),
    "status": (S.StatusBody, lambda b: StatusOp(P.STATUS_QUEUED_LIMIT)),
    "history": (S.HistoryBody, lambda b: HistoryOp(b.limit, b.project)),
}
