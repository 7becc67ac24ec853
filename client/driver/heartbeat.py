"""Keeping the lease (docs/protocol.md#driver-rules): `LeaseKeeper` heartbeats the held ticket in
the background, decides when the lease is lost, stops the block's provider steps when it is
(`check()`, `guard()`), and gives the ticket back (`_release`).

- A background task heartbeats every `heartbeat_interval` seconds (default and maximum: a
  third of the lease). `refreshed: false` three times in a row (after the first refusal the
  next two come `refusal_retry_seconds` apart, so a lost lease is confirmed fast) means the
  lease is LOST: heartbeats stop, `turn.lease_lost` is set, `turn.needs` and the journal say
  `rerender:lease-lost`, `turn.lost` (an asyncio.Event) is set and one line is printed.
  With `cancel_on_lease_lost=True` the block's task is cancelled too.
- A network error on a heartbeat (unreachable, timeout, 5xx, malformed reply, or the
  PreProviderError those become under LANE_REQUIRED=1) is not a refusal: it is logged and
  retried on the next tick, and the refusal streak is unchanged. But once no heartbeat has
  been confirmed for a whole lease (this computer's monotonic clock, from the last refreshed
  heartbeat), the coordinator has reaped the lease by definition: that, too, is a lost lease
  (reason `unconfirmed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Final, TypeVar

from client.clock import monotonic
from client.driver.base import TurnBase
from client.driver.errors import LeaseLost, TurnNotHeld
from client.driver.journal import NEEDS_LEASE_LOST
from client.errors import LaneClientError, NotFoundError
from client.models import HeartbeatReply, ReleaseReply

log = logging.getLogger("lane.driver")

T = TypeVar("T")

REFUSALS_TO_LOSE: Final = 3
MAX_NOTE: Final = 500


class LeaseKeeper(TurnBase):
    """The heartbeat loop, lease loss, `check()`/`guard()` and the release of a turn."""

    async def _heartbeat_loop(self) -> None:
        assert self.ticket_id is not None
        delay = self.heartbeat_interval
        while True:
            await asyncio.sleep(delay)
            sent = monotonic()
            hb: HeartbeatReply | None  # None: the ticket is not found (a refusal)
            try:
                hb = await self._ops.heartbeat(self.lane, self.ticket_id, self.lease_seconds)
            except NotFoundError:
                hb = None
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
            if hb is not None and hb.refreshed:
                self.refusals = 0
                self._confirmed_until = sent + self.lease_seconds
                self.lease_expires_at = hb.lease_expires_at
                if hb.fence is not None:
                    self.fence = hb.fence
                delay = self.heartbeat_interval
                continue
            reason = "not-found" if hb is None else hb.reason
            self.refusals += 1
            log.warning(
                "heartbeat for %s refused (%s), %d in a row",
                self.ticket_id,
                reason,
                self.refusals,
            )
            if self.refusals >= REFUSALS_TO_LOSE:
                self._lose(reason or "refused")
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
        if not self.granted and not self.under_hold:
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


__all__ = ["MAX_NOTE", "REFUSALS_TO_LOSE", "LeaseKeeper"]
