"""A driver's turn on a lane (SPEC §8): acquire, wait, heartbeat, receipts, release.

    backend = connect(load_settings())                    # one claim per process (LANE_CLAIM)
    journal = Journal.in_state_dir(load_settings().state_dir)
    async with Turn(backend, lane, project, scene, prompt_hash, journal=journal) as turn:
        status = await turn.run(submit=lambda: provider.submit(req), poll=provider.wait)
    # released: completed / failed / timeout (from `status`), failed on an exception,
    # lease-lost when the lease was lost, not-submitted after a human check

The turn, in order:
- `__aenter__` looks the window up in the journal (client/journal.py). A ticket an earlier
  driver process of this computer left live (it crashed) is *adopted*: the turn heartbeats it
  under the claim recorded with it, so a restarted driver never queues behind its own dead
  predecessor. Otherwise it acquires (with this process's claim) and long-polls `await` until
  granted; `on_wait` is called when the position or the pause changes. A live ticket for the
  same window owned by another driver raises `WindowBusy` (never waited on, never granted).
- While held, a background task heartbeats every `heartbeat_interval` seconds (default and
  maximum: a third of the lease). `refreshed: false` three times in a row (after the first
  refusal the next two come `refusal_retry_seconds` apart, so a lost lease is confirmed fast)
  means the lease is LOST: heartbeats stop, `turn.lease_lost` is set, `turn.needs` and the
  journal say `rerender:lease-lost`, `turn.lost` (an asyncio.Event) is set, `turn.check()`
  and `turn.submit()` raise `LeaseLost`, `turn.poll()`/`resume()`/`guard()` cancel the poll
  they are running and raise `LeaseLost`, and the exit releases with `lease-lost` (and
  raises `LeaseLost` even when the block itself ended normally). Nothing is ever resubmitted
  by the turn. The block's own task is NOT cancelled unless
  `cancel_on_lease_lost=True` (then it gets a CancelledError at its current await, which the
  exit turns into `LeaseLost`): cancelling provider code mid-call can lose a job id, so the
  default is cooperative — call `turn.check()` or use `turn.guard()` around long waits.
- A network error on a heartbeat (unreachable, timeout, 5xx, malformed reply, or the
  PreProviderError those become under LANE_REQUIRED=1) is not a refusal: it is logged and
  retried on the next tick, and the refusal streak is unchanged. But once no heartbeat has
  been confirmed for a whole lease (measured on this computer's monotonic clock from the last
  refreshed heartbeat), the coordinator has reaped the lease by definition: that, too, is a
  lost lease (reason `unconfirmed`).
- `await turn.human_check()`: reports `provider-human-check` on the held ticket for
  LANE_HUMAN_CHECK_COOLDOWN_SECONDS (default 900, clamped 30-7200), prints one line saying
  this machine paused the lane, then releases with `not-submitted`. A 404 from a coordinator
  too old to have the cooldown endpoint is a logged warning, not a failure (the release still
  happens). A `ProviderHumanCheck` raised out of the block does the same automatically.
- `await turn.submit(fn)` records phase `submitting` (on disk) before calling `fn()`, then
  `submitted` with the job id `fn` returned (and a provider-submitted receipt). If `fn` raises
  `NotSubmitted` (the provider certainly refused: e.g. `ProviderHumanCheck`) the window goes
  back to `acquired`. If it raises anything else, or is cancelled, whether the provider
  accepted the job is UNKNOWN: the journal says `submit-unknown`, the turn refuses any new
  submit (`ReconcileRequired`) and the ticket is KEPT — the exit neither releases it nor
  reports `failed`; heartbeats stop and the lease runs out unless a later turn on the same
  window adopts it. What the caller does: call `await turn.reconcile(find)` where
  `find()` asks the provider whether it has the job (by your own idempotency key or request
  hash) and returns its id or None — an id makes the window `submitted` (then
  `turn.resume(poll)`), None makes it `acquired` again (you may submit). `turn.run(...,
  reconcile=find)` does this for you, also when a restarted driver finds the window in
  `submit-unknown` (or in `submitting`: it died mid-submit).
- A restarted driver whose journal says `submitted` (or `lease-lost` with a job id) and no
  terminal phase gets `turn.pending` set: `await turn.resume(poll)` polls that job instead of
  submitting again (`turn.submit` raises `AlreadySubmitted`).
- `__aexit__` stops the heartbeats and releases with the outcome the block implies: `completed`
  on a normal exit, `failed` on an exception, `not-submitted` on `NotSubmitted`, `lease-lost`
  when the lease was lost (always) — unless the block set `turn.outcome`; `turn.provider_job_id`
  and `turn.note` go with it. A release that fails (network) is logged; the lease then runs
  out on its own. Exceptions from the block are never swallowed.

`SyncTurn` is the same for plain-Python drivers, on `client.sync.SyncLaneClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, TypeVar

from client.clock import monotonic
from client.config import DEFAULT_COOLDOWN_SECONDS, ENV_COOLDOWN, clamp_cooldown
from client.errors import LaneClientError, NotFoundError
from client.journal import (
    NEEDS_LEASE_LOST,
    NEEDS_RECONCILE,
    Journal,
    Record,
    Window,
    new_attempt_id,
)
from client.models import CooldownReply, HeartbeatReply, LaneReply, Pause, ReleaseReply
from client.receipts import Receipts
from coordinator.constants import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from client.api import LaneBackend
    from client.config import Settings
    from client.sync import SyncLaneClient

log = logging.getLogger("lane.driver")

T = TypeVar("T")

REFUSALS_TO_LOSE: Final = 3
#: How a polled provider job may end (the release outcome is the same word).
POLL_STATUSES: Final = frozenset({"completed", "failed", "timeout"})
MAX_NOTE: Final = 500
MAX_JOB_ID: Final = 256

_ACTIVE: set[tuple[Window, str, str | None]] = set()  # (window, machine, claim) turns open


# ---------------------------------------------------------------- errors


class DriverError(Exception):
    """A turn could not go on (see the subclasses)."""


class LeaseLost(DriverError):
    """The coordinator no longer holds this ticket for this driver: stop, never resubmit."""

    def __init__(self, ticket_id: str | None, reason: str | None) -> None:
        self.ticket_id = ticket_id
        self.reason = reason
        super().__init__(
            f"lease lost on ticket {ticket_id} ({reason}): the window needs "
            f"{NEEDS_LEASE_LOST}; nothing may be submitted on this slot"
        )


class WindowBusy(DriverError):
    """Another driver (another claim or computer) owns a live ticket for this exact window."""

    def __init__(self, message: str, reply: LaneReply | None = None) -> None:
        self.reply = reply
        super().__init__(message)


class NotGranted(DriverError):
    """The ticket ended, or `max_wait` passed, before it was granted."""


class TurnNotHeld(DriverError):
    """The turn holds no ticket (not entered yet, or already released)."""


class ReconcileRequired(DriverError):
    """An earlier submit's fate is unknown: `await turn.reconcile(find)` before submitting."""


class AlreadySubmitted(DriverError):
    """A provider job of this window is in flight: resume (poll) it, never submit again."""

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id
        super().__init__(
            f"provider job {job_id} of this window has no terminal state: "
            "resume it (turn.resume(poll)) instead of submitting again"
        )


class NotSubmitted(Exception):
    """Raise from a submit function when the provider certainly did NOT accept the job."""


class ProviderHumanCheck(NotSubmitted):
    """The provider showed a human check (Turnstile, ...): out of the block, the turn reports
    the cooldown on its held ticket and releases `not-submitted`."""


# ---------------------------------------------------------------- helpers


@dataclass(frozen=True, slots=True)
class WaitUpdate:
    """What `on_wait` gets while the ticket is queued (position 1-based, SPEC §3)."""

    ticket_id: str
    position: int | None
    eta_seconds: float | None
    pause: Pause | None


def human_check_cooldown_seconds(
    settings: Settings | None = None, environ: MutableMapping[str, str] | None = None
) -> float:
    """LANE_HUMAN_CHECK_COOLDOWN_SECONDS: Settings' value, else the environment's (default
    900, clamped 30-7200; an unreadable value is the default)."""
    if settings is not None:
        return settings.human_check_cooldown_seconds
    raw = (os.environ if environ is None else environ).get(ENV_COOLDOWN)
    try:
        value = float(raw) if raw else DEFAULT_COOLDOWN_SECONDS
    except ValueError:
        value = DEFAULT_COOLDOWN_SECONDS
    if math.isnan(value):
        value = DEFAULT_COOLDOWN_SECONDS
    return clamp_cooldown(value)


def claim_view(backend: LaneBackend, claim_id: str | None) -> LaneBackend | None:
    """The backend speaking as `claim_id` (None when it cannot: no `with_claim`)."""
    if claim_id == backend.claim_id:
        return backend
    make = getattr(backend, "with_claim", None)
    if make is None:
        return None
    view: LaneBackend = make(claim_id)
    return view


def _pause_key(p: Pause | None) -> tuple[float, float] | None:
    return None if p is None else (p.started_at, p.until)


# ---------------------------------------------------------------- the turn


class Turn:
    """One render window's turn on a lane (see the module docstring)."""

    def __init__(
        self,
        backend: LaneBackend,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        heartbeat_interval: float | None = None,
        refusal_retry_seconds: float | None = None,
        journal: Journal | None = None,
        on_wait: Callable[[WaitUpdate], None] | None = None,
        wait_seconds: float = 30.0,
        max_wait: float | None = None,
        cooldown_seconds: float | None = None,
        settings: Settings | None = None,
        receipts: bool = True,
        cancel_on_lease_lost: bool = False,
        stream: IO[str] | None = None,
    ) -> None:
        if not backend.claim_id:
            raise ValueError(
                "a driver needs a claim (one per driver process): use "
                "client.config.connect(load_settings()), "
                "which mints one per process (LANE_CLAIM)"
            )
        if not lease_seconds > 0:
            raise ValueError("lease_seconds: must be positive")
        third = lease_seconds / 3
        interval = third if heartbeat_interval is None else float(heartbeat_interval)
        if not 0 < interval <= third:
            raise ValueError(
                f"heartbeat_interval: must be > 0 and at most a third of the lease ({third:g} s)"
            )
        self.backend = backend
        self.window = Window(lane, project, scene, prompt_hash)
        self.lane = lane
        self.lease_seconds = float(lease_seconds)
        self.heartbeat_interval = interval
        self.refusal_retry_seconds = (
            min(interval, 5.0) if refusal_retry_seconds is None else float(refusal_retry_seconds)
        )
        self.journal = journal
        self.on_wait = on_wait
        self.wait_seconds = wait_seconds
        self.max_wait = max_wait
        self.cooldown_seconds = (
            clamp_cooldown(cooldown_seconds)
            if cooldown_seconds is not None
            else human_check_cooldown_seconds(settings)
        )
        self.write_receipts = receipts
        self.cancel_on_lease_lost = cancel_on_lease_lost
        self._stream = stream

        # what the caller may set before the block ends
        self.outcome: str | None = None
        self.provider_job_id: str | None = None
        self.note: str | None = None

        # state, readable by the caller
        self.reply: LaneReply | None = None
        #: one id per attempt at this window, kept across a crash/resume (journal): give it
        #: to the provider as an idempotency key / metadata so `reconcile` can find the job
        self.attempt_id: str = new_attempt_id()
        self.ticket_id: str | None = None
        self.claim_id: str | None = backend.claim_id  # the claim the ticket is held under
        self.fence: int | None = None
        self.lease_expires_at: float | None = None
        self.granted = False
        self.adopted = False
        self.pending: Record | None = None  # unfinished work an earlier attempt left
        self.lease_lost = False
        self.lease_lost_reason: str | None = None
        self.needs: str | None = None
        self.refusals = 0  # consecutive refused heartbeats
        self.heartbeats_sent = 0
        self.heartbeat_errors = 0
        self.human_checked = False
        self.cooldown_reply: CooldownReply | None = None
        self.released = False
        self.release_reply: ReleaseReply | None = None
        self.release_error: LaneClientError | None = None
        self.kept_ticket = False  # exit left the ticket held (submit-unknown)
        self.receipts: Receipts | None = None
        self.lost = asyncio.Event()

        self._ops: LaneBackend = backend
        self._unknown = False  # a submit's fate is unknown (unreconciled)
        self._job_open = False  # a job of this window has no terminal state
        self._submitting = False
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._block_task: asyncio.Task[Any] | None = None
        self._cancelled_for_loss = False
        self._exiting = False
        self._confirmed_until = math.inf
        self._registered = False
        self._key = (self.window, backend.machine_id, backend.claim_id)

    def __repr__(self) -> str:
        return (
            f"Turn(lane={self.lane!r}, ticket={self.ticket_id!r}, fence={self.fence}, "
            f"granted={self.granted}, lease_lost={self.lease_lost})"
        )

    @property
    def record(self) -> Record | None:
        """This window's journal row (None without a journal)."""
        return self.journal.get(self.window) if self.journal is not None else None

    @property
    def out(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stderr

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    # ------------------------------------------------------------ enter

    async def __aenter__(self) -> Turn:
        if self._key in _ACTIVE:
            raise WindowBusy(f"this process already has a turn open for {self.window}")
        _ACTIVE.add(self._key)
        self._registered = True
        try:
            await self._enter()
        except BaseException as exc:
            try:
                if self.granted:  # failed after the grant: never leave the ticket behind
                    await self._exit(exc)
            finally:
                self._unregister()
            raise
        self._block_task = asyncio.current_task()
        return self

    def _unregister(self) -> None:
        if self._registered:
            _ACTIVE.discard(self._key)
            self._registered = False

    async def _enter(self) -> None:
        rec = self.journal.get(self.window) if self.journal is not None else None
        if rec is not None and rec.phase == "submitting":
            # the process that recorded it died during the provider call: fate unknown
            rec = self._journal_update(phase="submit-unknown", needs=NEEDS_RECONCILE) or rec
        if rec is not None and rec.unfinished:
            self.pending = rec
            self._unknown = rec.unknown
            self._job_open = rec.job_in_flight
            self.provider_job_id = rec.provider_job_id
            log.info(
                "window %s: an earlier attempt left %s (job %s)",
                self.window,
                rec.phase,
                rec.provider_job_id,
            )
        reply = await self._try_adopt(rec) if rec is not None else None
        if reply is None:
            reply = await self.backend.acquire(
                self.lane, *self.window[1:], lease_seconds=self.lease_seconds
            )
            me = (self.backend.machine_id, self.backend.claim_id)
            if reply.duplicate and (reply.owner.machine_id, reply.owner.claim_id) != me:
                raise WindowBusy(
                    f"ticket {reply.ticket_id} for this window is live and owned by machine "
                    f"{reply.owner.machine_id!r} claim {reply.owner.claim_id!r}; if that driver "
                    f"is dead, release it by hand from that machine: "
                    f"lane release --lane {self.lane} --ticket {reply.ticket_id}",
                    reply,
                )
            self._ops = self.backend
            self.claim_id = self.backend.claim_id
        self.reply = reply
        self.ticket_id = reply.ticket_id
        if self.journal is not None:
            started = self.journal.start(
                self.window,
                ticket_id=reply.ticket_id,
                machine_id=self._ops.machine_id,
                claim_id=self.claim_id,
                fence=reply.ticket.fence,
                keep_job=self.pending is not None,
            )
            self.attempt_id = started.attempt_id
        try:
            reply = await self._wait_for_grant(reply)
        except BaseException:
            await self._abandon_wait()
            raise
        self._granted(reply)
        if self.write_receipts:
            assert self.receipts is not None
            try:
                await self.receipts.lease_acquired(
                    prompt_hash=self.window.prompt_hash,
                    fence=self.fence,
                    lease_seconds=self.lease_seconds,
                )
            except ValueError as exc:  # e.g. a promptHash that looks like a prompt
                log.warning("lease-acquired receipt not written: %s", exc)

    async def _try_adopt(self, rec: Record) -> LaneReply | None:
        """Take over the ticket an earlier driver process of this computer left live."""
        if not rec.ticket_may_be_live or rec.ticket_id is None:
            return None
        if rec.ticket_id.startswith("unlimited-"):
            return None  # unenforced lane: the coordinator never held it
        if rec.machine_id != self.backend.machine_id or not rec.claim_id:
            return None
        view = claim_view(self.backend, rec.claim_id)
        if view is None:
            return None
        sent = monotonic()
        try:
            hb = await view.heartbeat(self.lane, rec.ticket_id, self.lease_seconds)
        except NotFoundError:
            return None
        if hb.reason not in (None, "not-held"):
            return None  # expired / done / not-owner: that ticket is over
        self._ops, self.claim_id, self.adopted = view, rec.claim_id, True
        self.ticket_id = rec.ticket_id
        log.info("adopted ticket %s (claim %s) left live by an earlier run", rec.ticket_id,
                 rec.claim_id)  # fmt: skip
        if hb.refreshed:
            self._confirmed_until = sent + self.lease_seconds
            # a held ticket: `await` answers at once with the full reply
            return await view.await_ticket(self.lane, rec.ticket_id, 1)
        # still queued: this is the first long poll of the wait for its grant
        return await view.await_ticket(self.lane, rec.ticket_id, self.wait_seconds)

    async def _wait_for_grant(self, reply: LaneReply) -> LaneReply:
        deadline = None if self.max_wait is None else monotonic() + self.max_wait
        last: tuple[int | None, tuple[float, float] | None] | None = None
        announced: tuple[float, float] | None = None
        while not reply.granted:
            state = reply.ticket.state
            if state == "held":
                raise WindowBusy(f"ticket {reply.ticket_id} is held but not by this driver", reply)
            if state != "queued":
                raise NotGranted(f"ticket {reply.ticket_id} ended ({state}) before its grant")
            key = (reply.ticket.position, _pause_key(reply.pause))
            if key != last:
                last = key
                if reply.pause is not None and _pause_key(reply.pause) != announced:
                    announced = _pause_key(reply.pause)
                    self._say(
                        f"lane: {self.lane} paused — {reply.pause.reason_code} reported by "
                        f"{reply.pause.machine_id}; waiting (position {reply.ticket.position})"
                    )
                if self.on_wait is not None:
                    self.on_wait(
                        WaitUpdate(
                            reply.ticket_id,
                            reply.ticket.position,
                            reply.ticket.eta_seconds,
                            reply.pause,
                        )
                    )
            step = self.wait_seconds
            if deadline is not None:
                left = deadline - monotonic()
                if left <= 0:
                    raise NotGranted(
                        f"ticket {reply.ticket_id} still queued after {self.max_wait:g} s"
                    )
                step = max(1.0, min(step, left))
            reply = await self._ops.await_ticket(self.lane, reply.ticket_id, step)
            self.reply = reply
        return reply

    async def _abandon_wait(self) -> None:
        """Waiting failed or was cancelled: give the queued ticket back (best effort)."""
        if self.ticket_id is None:
            return
        with contextlib.suppress(LaneClientError, asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(
                self._ops.release(self.lane, self.ticket_id, "abandoned"), timeout=5.0
            )
        if self.journal is not None and self.pending is None:
            self._journal_update(phase="terminal", outcome="abandoned")

    def _granted(self, reply: LaneReply) -> None:
        self.reply = reply
        self.granted = True
        self.fence = reply.ticket.fence
        self.lease_expires_at = reply.ticket.lease_expires_at
        t = reply.ticket
        lease = self.lease_seconds
        if t.lease_expires_at is not None and t.held_at is not None:
            lease = t.lease_expires_at - t.held_at
        # the grant (or the adopting heartbeat) happened a moment ago; keep a 10 % margin
        self._confirmed_until = monotonic() + lease * 0.9
        self._journal_update(fence=self.fence)
        self.receipts = Receipts(self._ops, self.lane, reply.ticket_id)
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat_loop(), name=f"lane-heartbeat-{reply.ticket_id}"
        )

    # ------------------------------------------------------------ heartbeats

    async def _heartbeat_loop(self) -> None:
        assert self.ticket_id is not None
        delay = self.heartbeat_interval
        while True:
            await asyncio.sleep(delay)
            sent = monotonic()
            try:
                hb: HeartbeatReply = await self._ops.heartbeat(
                    self.lane, self.ticket_id, self.lease_seconds
                )
            except NotFoundError:
                hb = HeartbeatReply(
                    coordinator="", refreshed=False, state="done", reason="not-found"
                )
            except Exception as exc:  # network, 5xx, malformed, fail-closed: not a refusal
                self.heartbeat_errors += 1
                if monotonic() >= self._confirmed_until:
                    self._lose("unconfirmed")
                    return
                code = exc.code if isinstance(exc, LaneClientError) else type(exc).__name__
                log.warning(
                    "heartbeat for %s failed (%s): not a refusal, retrying in %g s",
                    self.ticket_id,
                    code,
                    self.heartbeat_interval,
                )
                delay = self.heartbeat_interval
                continue
            self.heartbeats_sent += 1
            if hb.refreshed:
                self.refusals = 0
                self._confirmed_until = sent + self.lease_seconds
                self.lease_expires_at = hb.lease_expires_at
                if hb.fence is not None:
                    self.fence = hb.fence
                delay = self.heartbeat_interval
                continue
            self.refusals += 1
            log.warning(
                "heartbeat for %s refused (%s), %d in a row",
                self.ticket_id,
                hb.reason,
                self.refusals,
            )
            if self.refusals >= REFUSALS_TO_LOSE:
                self._lose(hb.reason or "refused")
                return
            delay = self.refusal_retry_seconds

    def _lose(self, reason: str) -> None:
        if self.lease_lost:
            return
        self.lease_lost = True
        self.lease_lost_reason = reason
        self.needs = NEEDS_LEASE_LOST
        rec = self.record
        if rec is not None:
            keep = rec.phase in ("submitting", "submit-unknown", "terminal")
            self._journal_update(phase=None if keep else "lease-lost", needs=NEEDS_LEASE_LOST)
        self.lost.set()
        self._say(
            f"lane: lease lost on {self.lane} (ticket {self.ticket_id}, {reason}): stopping; "
            f"window marked needs {NEEDS_LEASE_LOST}; nothing will be resubmitted"
        )
        task = self._block_task
        if (
            self.cancel_on_lease_lost
            and task is not None
            and not task.done()
            and not self._exiting
            and task is not asyncio.current_task()  # check() in the block raises instead
        ):
            self._cancelled_for_loss = True
            task.cancel()

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is None:
            return
        if task is asyncio.current_task():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # ------------------------------------------------------------ checks

    def check(self) -> None:
        """Raise LeaseLost when the lease is lost (or unconfirmed for a whole lease),
        TurnNotHeld when nothing is held. Cheap: call it between provider steps."""
        live = not self.lease_lost and self.granted and not self.released
        if live and monotonic() >= self._confirmed_until:
            self._lose("unconfirmed")
        if self.lease_lost:
            raise LeaseLost(self.ticket_id, self.lease_lost_reason)
        if not self.granted:
            raise TurnNotHeld("the turn holds no ticket yet")
        if self.released:
            raise TurnNotHeld(f"ticket {self.ticket_id} was already released")

    async def guard(self, aw: Awaitable[T]) -> T:
        """Await `aw`, cancelling it and raising LeaseLost if the lease is lost first."""
        try:
            self.check()
        except BaseException:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise
        task = asyncio.ensure_future(aw)
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            done, _ = await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            lost.cancel()
            raise
        if task in done:
            lost.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise LeaseLost(self.ticket_id, self.lease_lost_reason)

    # ------------------------------------------------------------ provider steps

    def _journal_update(self, **fields: Any) -> Record | None:
        if self.journal is None:
            return None
        try:
            return self.journal.update(self.window, **fields)
        except KeyError:
            return None

    def _begin_submit(self) -> None:
        self.check()
        if self._unknown:
            raise ReconcileRequired(
                "an earlier submit of this window has an unknown fate: "
                "await turn.reconcile(find) first"
            )
        if self._job_open:
            raise AlreadySubmitted(self.provider_job_id)
        if self._submitting:
            raise DriverError("a submit of this turn is already running")
        self._submitting = True
        self._journal_update(phase="submitting")

    def _submit_not_accepted(self) -> None:
        self._submitting = False
        self._journal_update(phase="lease-lost" if self.lease_lost else "acquired")

    def _submit_failed(self, exc: BaseException) -> None:
        self._submitting = False
        self._unknown = True
        self._journal_update(phase="submit-unknown", needs=self.needs or NEEDS_RECONCILE)
        log.warning(
            "submit on ticket %s raised %s: whether the provider accepted the job is unknown; "
            "the ticket is kept until reconciled (turn.reconcile)",
            self.ticket_id,
            type(exc).__name__,
        )

    def _end_submit(self, job_id: str) -> str:
        self._submitting = False
        if not isinstance(job_id, str) or not 1 <= len(job_id) <= MAX_JOB_ID:
            self._unknown = True
            self._journal_update(phase="submit-unknown", needs=self.needs or NEEDS_RECONCILE)
            raise ValueError("the submit function must return the provider job id (1-256 chars)")
        self.provider_job_id = job_id
        self._job_open = True
        self._journal_update(
            phase="lease-lost" if self.lease_lost else "submitted", provider_job_id=job_id
        )
        return job_id

    async def _receipt_submitted(self, job_id: str) -> None:
        if self.write_receipts and self.receipts is not None:
            await self.receipts.provider_submitted(job_id)

    async def submit(self, fn: Callable[[], Awaitable[str]]) -> str:
        """Call the provider's submit (`fn()` returns the job id) with the journal on disk
        first; see the module docstring for what a raising `fn` means."""
        self._begin_submit()
        try:
            job_id = await fn()
        except NotSubmitted:
            self._submit_not_accepted()
            raise
        except BaseException as exc:
            self._submit_failed(exc)
            raise
        self._end_submit(job_id)
        await self._receipt_submitted(job_id)
        return job_id

    async def reconcile(self, find: Callable[[], Awaitable[str | None]]) -> str | None:
        """Settle an unknown submit: `find()` asks the provider and returns the job id it has
        for this window, or None when it has none. Returns what `find` returned."""
        if not self._unknown:
            return self.provider_job_id if self._job_open else None
        job_id = await find()
        self._settle_unknown(job_id)
        if job_id is not None:
            await self._receipt_submitted(job_id)
        return job_id

    def _settle_unknown(self, job_id: str | None) -> None:
        self._unknown = False
        if job_id is not None:
            self._end_submit(job_id)
            if not self.lease_lost:
                self._journal_update(clear_needs=True)
            log.info("reconciled: the provider has job %s for this window", job_id)
        else:
            self.provider_job_id = None
            self._job_open = False
            if self.lease_lost:
                self._journal_update(phase="lease-lost")
            else:
                self._journal_update(phase="acquired", clear_needs=True)
            log.info("reconciled: the provider has no job for this window; it may be submitted")
        self.pending = self.record

    async def references_applied(
        self,
        reference_hashes: list[str] | tuple[str, ...],
        *,
        required_slots: int | None = None,
        provider_media_ids: list[str] | tuple[str, ...] = (),
    ) -> None:
        """Write the references-applied receipt (sha256 of each reference, slot order)."""
        if self.receipts is None:
            raise TurnNotHeld("the turn holds no ticket yet")
        await self.receipts.references_applied(
            reference_hashes, required_slots=required_slots, provider_media_ids=provider_media_ids
        )

    async def terminal(self, status: str, *, output_hashes: tuple[str, ...] = ()) -> None:
        """Record how the provider job ended (journal, provider-terminal receipt) and make it
        the release outcome unless the caller set one."""
        if status not in POLL_STATUSES:
            raise ValueError(f"status: must be one of {', '.join(sorted(POLL_STATUSES))}")
        self._job_open = False
        if self.outcome is None:
            self.outcome = status
        clear = status == "completed" and not self.lease_lost
        self._journal_update(phase="terminal", outcome=status, clear_needs=clear)
        self.pending = None
        if self.write_receipts and self.receipts is not None:
            await self.receipts.provider_terminal(
                self.provider_job_id, status, output_hashes=output_hashes
            )

    async def poll(self, poll: Callable[[str], Awaitable[str]], job_id: str | None = None) -> str:
        """`poll(job_id)` waits for the job and returns completed/failed/timeout; it is
        cancelled (LeaseLost) if the lease is lost first. Records the terminal state."""
        job = job_id or self.provider_job_id
        if job is None:
            raise DriverError("nothing was submitted in this turn: no job to poll")
        self.check()
        status = await self.guard(poll(job))
        await self.terminal(status)
        return status

    async def resume(self, poll: Callable[[str], Awaitable[str]]) -> str:
        """Poll the job an earlier attempt of this window submitted (never submit again)."""
        job = self._resumable_job()
        log.info("resuming provider job %s of %s; not submitting again", job, self.window)
        return await self.poll(poll, job)

    def _resumable_job(self) -> str:
        if self._unknown:
            raise ReconcileRequired("reconcile the unknown submit before resuming")
        if not self._job_open or self.provider_job_id is None:
            raise DriverError("no provider job of this window is in flight")
        self.check()
        if not self.lease_lost:
            self._journal_update(phase="submitted")
        return self.provider_job_id

    @property
    def resumable(self) -> bool:
        """A job of this window is in flight (from an earlier attempt): resume, not submit."""
        return self._job_open and not self._unknown

    @property
    def needs_reconcile(self) -> bool:
        return self._unknown

    async def run(
        self,
        submit: Callable[[], Awaitable[str]],
        poll: Callable[[str], Awaitable[str]],
        reconcile: Callable[[], Awaitable[str | None]] | None = None,
    ) -> str:
        """The whole provider flow, crash-safe: reconcile an unknown submit, resume a job in
        flight, or submit; then poll to a terminal status, which is returned."""
        if self._unknown:
            if reconcile is None:
                raise ReconcileRequired(
                    "this window has a submit of unknown fate: pass reconcile= to run()"
                )
            await self.reconcile(reconcile)
        if self._job_open:
            return await self.resume(poll)
        await self.submit(submit)
        return await self.poll(poll)

    # ------------------------------------------------------------ human check, release

    async def human_check(self, retry_after_seconds: float | None = None) -> CooldownReply | None:
        """Pause the lane for everyone (cooldown on the held ticket), then release
        `not-submitted`. Returns the cooldown reply (None when the coordinator refused or is
        too old: a warning, not a failure)."""
        if self.ticket_id is None or not self.granted:
            raise TurnNotHeld("a human check needs the held ticket")
        if self.released:
            raise TurnNotHeld(f"ticket {self.ticket_id} was already released")
        seconds = clamp_cooldown(
            self.cooldown_seconds if retry_after_seconds is None else retry_after_seconds
        )
        reply: CooldownReply | None = None
        try:
            reply = await self._ops.cooldown(self.lane, self.ticket_id, seconds)
        except LaneClientError as exc:
            if exc.status == 404:
                log.warning(
                    "the coordinator answered the cooldown with 404: it is too old to pause "
                    "the lane for other computers (redeploy it); releasing as not-submitted"
                )
            else:
                log.warning("cooldown on %s failed (%s); releasing anyway", self.ticket_id, exc)
        self.cooldown_reply = reply
        self.human_checked = True
        if reply is not None and reply.paused and reply.pause is not None:
            self._say(
                f"lane: this machine ({self._ops.machine_id}) paused lane {self.lane} for "
                f"{seconds:g} s (provider human check on ticket {self.ticket_id}); every "
                "computer waits until it ends"
            )
        await self._stop_heartbeat()
        outcome = "lease-lost" if self.lease_lost else "not-submitted"
        self.outcome = outcome
        await self._release(outcome)
        self._job_open = False
        self._journal_update(phase="terminal", outcome=outcome)
        return reply

    async def _release(self, outcome: str) -> ReleaseReply | None:
        assert self.ticket_id is not None
        note = self.note[:MAX_NOTE] if self.note else None
        try:
            reply = await self._ops.release(
                self.lane, self.ticket_id, outcome, self.provider_job_id, note
            )
        except LaneClientError as exc:
            self.release_error = exc
            log.warning(
                "release of %s (%s) failed (%s); the lease runs out on its own",
                self.ticket_id,
                outcome,
                exc.code,
            )
            return None
        self.released = True
        self.release_reply = reply
        if not reply.released and reply.reason not in (None, "expired", "already-done"):
            log.warning("release of %s answered %s", self.ticket_id, reply.reason)
        return reply

    def _exit_outcome(self, exc: BaseException | None) -> str:
        if self.lease_lost:
            return "lease-lost"
        if self.outcome is not None:
            return self.outcome
        if exc is None:
            return "completed"
        if isinstance(exc, NotSubmitted):
            return "not-submitted"
        return "failed"

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exiting = True
        try:
            await self._exit(exc)
        finally:
            self._unregister()
        if self._cancelled_for_loss and isinstance(exc, asyncio.CancelledError):
            task = self._block_task
            if task is not None:
                task.uncancel()
            raise LeaseLost(self.ticket_id, self.lease_lost_reason) from None
        if exc is None and self.lease_lost:
            # never let a block that lost its lease read as a success
            raise LeaseLost(self.ticket_id, self.lease_lost_reason)

    async def _exit(self, exc: BaseException | None) -> None:
        await self._stop_heartbeat()
        if isinstance(exc, ProviderHumanCheck) and not self.released and not self.lease_lost:
            await self.human_check()
        if self.released:
            return
        if self.ticket_id is None:
            return
        if self._unknown and not self.lease_lost:
            self.kept_ticket = True
            self._say(
                f"lane: ticket {self.ticket_id} kept (submit of unknown fate): reconcile "
                "before any new submit; its lease runs out unless the next turn adopts it"
            )
            return
        outcome = self._exit_outcome(exc)
        if self.note is None and isinstance(exc, asyncio.CancelledError):
            self.note = "cancelled"
        await self._release(outcome)
        if self.lease_lost:
            self._journal_update(outcome="lease-lost")
        elif self._job_open and exc is not None:
            # the job may still be running: a later turn resumes (polls) it
            self._journal_update(outcome=outcome)
        elif not self._unknown:
            self._job_open = False
            self._journal_update(phase="terminal", outcome=outcome)


# ---------------------------------------------------------------- the sync facade


class SyncTurn:
    """`Turn` for plain (non-async) drivers, on a `SyncLaneClient` (its loop thread runs the
    turn and its heartbeats; your provider functions run in YOUR thread).

        with SyncLaneClient.from_settings() as lane:
            with SyncTurn(lane, lane_name, project, scene, prompt_hash, journal=j) as turn:
                status = turn.run(submit=lambda: provider.submit(req), poll=provider.wait)

    A sync provider call cannot be cancelled: on a lost lease `poll` cannot stop your
    function, so call `turn.check()` (raises LeaseLost) inside long loops. `on_wait` runs on
    the loop thread. `cancel_on_lease_lost` is not available here.
    """

    def __init__(
        self,
        client: SyncLaneClient,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("cancel_on_lease_lost"):
            raise ValueError("cancel_on_lease_lost: not available on SyncTurn")
        self._client = client

        async def make() -> Turn:
            return Turn(client.backend, lane, project, scene, prompt_hash, **kwargs)

        self.turn: Turn = client.run(make())

    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        async def call() -> T:
            return fn(*args)

        return self._client.run(call())

    def _await(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._client.run(coro)

    def __enter__(self) -> SyncTurn:
        self._await(self.turn.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._await(self.turn.__aexit__(exc_type, exc, tb))

    def __repr__(self) -> str:
        return f"Sync{self.turn!r}"

    # caller-settable fields and state
    @property
    def outcome(self) -> str | None:
        return self.turn.outcome

    @outcome.setter
    def outcome(self, value: str | None) -> None:
        self.turn.outcome = value

    @property
    def provider_job_id(self) -> str | None:
        return self.turn.provider_job_id

    @provider_job_id.setter
    def provider_job_id(self, value: str | None) -> None:
        self.turn.provider_job_id = value

    @property
    def note(self) -> str | None:
        return self.turn.note

    @note.setter
    def note(self, value: str | None) -> None:
        self.turn.note = value

    @property
    def ticket_id(self) -> str | None:
        return self.turn.ticket_id

    @property
    def fence(self) -> int | None:
        return self.turn.fence

    @property
    def lease_lost(self) -> bool:
        return self.turn.lease_lost

    @property
    def needs(self) -> str | None:
        return self.turn.needs

    @property
    def pending(self) -> Record | None:
        return self.turn.pending

    @property
    def resumable(self) -> bool:
        return self.turn.resumable

    @property
    def receipts(self) -> Receipts | None:
        return self.turn.receipts

    def check(self) -> None:
        self._on_loop(self.turn.check)

    def submit(self, fn: Callable[[], str]) -> str:
        self._on_loop(self.turn._begin_submit)
        try:
            job_id = fn()
        except NotSubmitted:
            self._on_loop(self.turn._submit_not_accepted)
            raise
        except BaseException as exc:
            self._on_loop(self.turn._submit_failed, exc)
            raise
        self._on_loop(self.turn._end_submit, job_id)
        self._await(self.turn._receipt_submitted(job_id))
        return job_id

    def reconcile(self, find: Callable[[], str | None]) -> str | None:
        if not self.turn.needs_reconcile:
            return self.turn.provider_job_id if self.turn.resumable else None
        job_id = find()
        self._on_loop(self.turn._settle_unknown, job_id)
        if job_id is not None:
            self._await(self.turn._receipt_submitted(job_id))
        return job_id

    def poll(self, poll: Callable[[str], str], job_id: str | None = None) -> str:
        job = job_id or self.turn.provider_job_id
        if job is None:
            raise DriverError("nothing was submitted in this turn: no job to poll")
        self.check()
        status = poll(job)
        self._await(self.turn.terminal(status))
        self.check()
        return status

    def resume(self, poll: Callable[[str], str]) -> str:
        job = self._on_loop(self.turn._resumable_job)
        return self.poll(poll, job)

    def run(
        self,
        submit: Callable[[], str],
        poll: Callable[[str], str],
        reconcile: Callable[[], str | None] | None = None,
    ) -> str:
        if self.turn.needs_reconcile:
            if reconcile is None:
                raise ReconcileRequired(
                    "this window has a submit of unknown fate: pass reconcile= to run()"
                )
            self.reconcile(reconcile)
        if self.turn.resumable:
            return self.resume(poll)
        self.submit(submit)
        return self.poll(poll)

    def references_applied(self, reference_hashes: list[str] | tuple[str, ...], **kw: Any) -> None:
        self._await(self.turn.references_applied(reference_hashes, **kw))

    def human_check(self, retry_after_seconds: float | None = None) -> CooldownReply | None:
        return self._await(self.turn.human_check(retry_after_seconds))


__all__ = [
    "POLL_STATUSES",
    "REFUSALS_TO_LOSE",
    "AlreadySubmitted",
    "DriverError",
    "LeaseLost",
    "NotGranted",
    "NotSubmitted",
    "ProviderHumanCheck",
    "ReconcileRequired",
    "SyncTurn",
    "Turn",
    "TurnNotHeld",
    "WaitUpdate",
    "WindowBusy",
    "claim_view",
    "human_check_cooldown_seconds",
]
