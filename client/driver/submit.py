"""The provider steps of a turn, crash-safe (docs/protocol.md#driver-rules): `ProviderSteps` submits
with the journal on disk first, reconciles a submit of unknown fate, polls (cancelled on a lost
lease), resumes a job an earlier attempt left in flight, and writes the provider receipts.

- `await turn.submit(fn)` records phase `submitting` (on disk) before calling `fn()`, then
  `submitted` with the job id `fn` returned (and a provider-submitted receipt). If `fn` raises
  `NotSubmitted` (the provider certainly refused: e.g. `ProviderHumanCheck`) the window goes
  back to `acquired`. If it raises anything else, or is cancelled, whether the provider
  accepted the job is UNKNOWN: the journal says `submit-unknown`, the turn refuses any new
  submit (`ReconcileRequired`) and the ticket is KEPT (see turn.py's exit).
- `await turn.reconcile(find)`: `find()` asks the provider whether it has the job (by your own
  idempotency key or request hash) and returns its id or None — an id makes the window
  `submitted` (then `turn.resume(poll)`), None makes it `acquired` again (you may submit).
- `turn.pending` set (a restarted driver whose journal says `submitted`, or `lease-lost` with
  a job id): `await turn.resume(poll)` polls that job; `turn.submit` raises `AlreadySubmitted`.
- `turn.under_hold` (the job's old ticket ended and the lane keeps its slot as an in-flight
  hold, docs/protocol.md#in-flight): `resume`/`poll` write the provider-terminal receipt on
  that OLD ticket, which ends the hold (or reconcile it when the receipt cannot be written);
  `turn.submit` raises `TurnNotHeld` once the job ended (the turn holds no ticket).
- `turn.run(submit=, poll=, reconcile=)` does all of this in order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from client.driver.errors import (
    AlreadySubmitted,
    DriverError,
    NotSubmitted,
    ReconcileRequired,
    TurnNotHeld,
)
from client.driver.heartbeat import LeaseKeeper
from client.driver.journal import NEEDS_RECONCILE
from client.errors import LaneClientError, NotInFlightError

log = logging.getLogger("lane.driver")

#: How a polled provider job may end (the release outcome is the same word).
POLL_STATUSES: Final = frozenset({"completed", "failed", "timeout"})
MAX_JOB_ID: Final = 256


class ProviderSteps(LeaseKeeper):
    """submit / reconcile / poll / resume / run, and the receipts they write."""

    def _begin_submit(self) -> None:
        self.check()
        if self._unknown:
            raise ReconcileRequired(
                "an earlier submit of this window has an unknown fate: "
                "await turn.reconcile(find) first"
            )
        if self._job_open:
            raise AlreadySubmitted(self.provider_job_id)
        if self.under_hold:
            raise TurnNotHeld(
                f"this turn resumed a job under ticket {self.ticket_id}'s in-flight hold and "
                "holds no ticket: open a new turn to submit again"
            )
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
        written = None
        if self.write_receipts and self.receipts is not None:
            written = await self.receipts.provider_terminal(
                self.provider_job_id, status, output_hashes=output_hashes
            )
        if self.under_hold and written is None:
            await self._reconcile_hold(status)

    async def _reconcile_hold(self, status: str) -> None:
        """The provider-terminal receipt that ends the old ticket's hold was not written
        (receipts off, or dropped): end the hold with reconcile instead (best effort; the
        hold runs out at its holdUntil otherwise)."""
        assert self.ticket_id is not None
        outcome = "completed" if status == "completed" else "failed"
        note = None if status != "timeout" else "provider job timed out"
        try:
            await self._ops.reconcile(
                self.lane, self.ticket_id, outcome, self.provider_job_id, note
            )
        except NotInFlightError:
            pass  # the hold already ended (its receipt did arrive, or holdUntil passed)
        except LaneClientError as exc:
            log.warning(
                "in-flight hold of %s not ended (%s); it ends at its holdUntil",
                self.ticket_id,
                exc.code,
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


__all__ = ["MAX_JOB_ID", "POLL_STATUSES", "ProviderSteps"]
