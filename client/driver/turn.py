"""A driver's turn on a lane (docs/protocol.md#driver-rules): acquire, wait, heartbeat, receipts,
release.

    backend = connect(load_settings())                    # one claim per process (LANE_CLAIM)
    journal = Journal.in_state_dir(load_settings().state_dir)
    async with Turn(backend, lane, project, scene, prompt_hash, journal=journal) as turn:
        status = await turn.run(submit=lambda: provider.submit(req), poll=provider.wait)
    # released: completed / failed / timeout (from `status`), failed on an exception,
    # lease-lost when the lease was lost, not-submitted after a human check

The turn, in order:
- `__aenter__` looks the window up in the journal (client/driver/journal.py). A ticket an earlier
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
- Under an in-flight hold: when that job's old ticket has ended (its lease ran out, or it
  was released `lease-lost`/`timeout`) and the lane still lists it in status `inFlight`
  (docs/protocol.md#in-flight), the turn acquires NOTHING — a new ticket would queue behind
  its own job on a one-slot lane. `turn.under_hold` is set (`turn.hold`: the listing,
  `turn.ticket_id`: the old ticket); `turn.resume(poll)` / `turn.run(...)` poll the job and
  the provider-terminal receipt on the old ticket ends the hold and promotes the next waiter
  (a reconcile when the receipt cannot be written). The exit releases nothing. With no hold
  listed the turn acquires as before.
- `__aexit__` stops the heartbeats and releases with the outcome the block implies: `completed`
  on a normal exit, `failed` on an exception, `not-submitted` on `NotSubmitted`, `lease-lost`
  when the lease was lost (always) — unless the block set `turn.outcome`; `turn.provider_job_id`
  and `turn.note` go with it. A release that fails (network) is logged; the lease then runs
  out on its own. Exceptions from the block are never swallowed.

`SyncTurn` (sync_turn.py) is the same for plain-Python drivers, on `client.sync.SyncLaneClient`.
The turn is built in layers, one module each (base.py lists them): this module adds entering
(acquire or adopt, wait for the grant) and the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from client.clock import monotonic
from client.driver.claim import claim_view
from client.driver.errors import (
    LeaseLost,
    NotGranted,
    NotSubmitted,
    ProviderHumanCheck,
    WindowBusy,
)
from client.driver.human_check import HumanCheck
from client.driver.journal import NEEDS_RECONCILE, Record, Window
from client.driver.options import WaitUpdate
from client.driver.receipts import Receipts
from client.errors import LaneClientError, NotFoundError
from client.models import LaneReply, Pause

log = logging.getLogger("lane.driver")

_ACTIVE: set[tuple[Window, str, str | None]] = set()  # (window, machine, claim) turns open


def _pause_key(p: Pause | None) -> tuple[float, float] | None:
    return None if p is None else (p.started_at, p.until)


class Turn(HumanCheck):
    """One render window's turn on a lane (see the module docstring)."""

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
        if reply is None and rec is not None and await self._try_hold(rec):
            return
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

    async def _try_hold(self, rec: Record) -> bool:
        """Resume under the in-flight hold of the window's old ticket (docs/protocol.md#in-flight):
        the lane keeps that ended ticket's slot for its job, so a new ticket would only queue
        behind this window's own job. True when the turn now resumes under the hold."""
        if not self._job_open or self._unknown or rec.ticket_id is None:
            return False
        if rec.ticket_id.startswith("unlimited-") or rec.machine_id != self.backend.machine_id:
            return False
        try:
            st = await self.backend.status(self.lane)
        except LaneClientError as exc:
            log.warning("status of %s unreadable (%s): no in-flight hold looked up",
                        self.lane, exc.code)  # fmt: skip
            return False
        hold = next((h for h in st.in_flight if h.ticket_id == rec.ticket_id), None)
        if hold is None or hold.machine_id != self.backend.machine_id:
            return False
        view = claim_view(self.backend, hold.claim_id)
        if view is None:
            return False
        self._ops, self.claim_id = view, hold.claim_id
        self.ticket_id, self.fence = rec.ticket_id, hold.fence
        self.hold, self.under_hold = hold, True
        self.attempt_id = rec.attempt_id
        self.receipts = Receipts(view, self.lane, rec.ticket_id)
        self._say(
            f"lane: {self.lane}: resuming job {rec.provider_job_id} under the in-flight hold of "
            f"ticket {rec.ticket_id} (its slot is kept for the job); no new ticket"
        )
        return True

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
        if self.under_hold:
            # the old ticket ended long ago: nothing to release; an unfinished job stays in
            # the journal (the next turn resumes it), a finished one ended the hold
            return
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


__all__ = ["Turn"]
