"""What a driver's turn raises (client/driver/turn.py): `DriverError` and its subclasses, and
`NotSubmitted`/`ProviderHumanCheck`, which a submit function raises itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.driver.journal import NEEDS_LEASE_LOST

if TYPE_CHECKING:
    from client.models import LaneReply


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


__all__ = [
    "AlreadySubmitted",
    "DriverError",
    "LeaseLost",
    "NotGranted",
    "NotSubmitted",
    "ProviderHumanCheck",
    "ReconcileRequired",
    "TurnNotHeld",
    "WindowBusy",
]
