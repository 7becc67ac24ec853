"""The turn's state: `TurnBase` validates the options and holds everything a caller may read
or set (see client/driver/turn.py for what a turn does). The layers on top of it, each in its
own module:

    TurnBase        base.py         options, state, journal writes, the one-line notices
    LeaseKeeper     heartbeat.py    heartbeat loop, lease lost, check(), guard(), release
    ProviderSteps   submit.py       crash-safe submit, reconcile, poll, resume, run
    HumanCheck      human_check.py  cooldown on the held ticket, release not-submitted
    Turn            turn.py         acquire or adopt, wait for the grant, exit
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Unpack

from client.config import clamp_cooldown
from client.driver.journal import Changes, Journal, Record, Window, new_attempt_id
from client.driver.options import WaitUpdate, human_check_cooldown_seconds
from client.driver.receipts import Receipts
from client.errors import LaneClientError
from client.models import CooldownReply, InFlightJob, LaneReply, ReleaseReply
from coordinator.protocol.constants import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from client.api import LaneBackend
    from client.config import Settings


class TurnBase:
    """A turn's options and state (the behaviour is in the layers above, see the module
    docstring). Its constructor is `Turn`'s: `Turn(backend, lane, project, scene, prompt_hash,
    *, lease_seconds=..., ...)`."""

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
        #: resumed under the in-flight hold of the window's old (ended) ticket: no new ticket,
        #: the job is polled and its provider-terminal receipt ends the hold
        #: (docs/protocol.md#in-flight); `hold` is that ticket's entry in status `inFlight`
        self.under_hold = False
        self.hold: InFlightJob | None = None
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
            f"granted={self.granted}, lease_lost={self.lease_lost}"
            + (", under_hold=True" if self.under_hold else "")
            + ")"
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

    def _journal_update(self, **changes: Unpack[Changes]) -> Record | None:
        """`Journal.update` on this window (nothing without a journal or its row)."""
        if self.journal is None:
            return None
        try:
            return self.journal.update(self.window, **changes)
        except KeyError:
            return None


__all__ = ["TurnBase"]
