"""The lane-refusal rules `lane drill` and `lane self-test` share, written once here:

- never the production account (`main-unlimited`) nor this computer's LANE_ACCOUNT (the
  account real renders use), whatever --lane/--route/--account say: refused before anything
  is acquired;
- only against the shared coordinator: no LANE_COORDINATOR_URL is a pre-provider error, and
  a coordinator that reports another kind is refused;
- only on an enforced lane (its route has a capacity) with capacity 1.

Each tool says them in its own words (`Wording`), so its messages stay its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from client.api import SHARED_KINDS
from client.errors import LaneClientError, PreProviderError

if TYPE_CHECKING:
    from client.config import Settings
    from client.models import StatusReply

FORBIDDEN_ACCOUNTS: Final = frozenset({"main-unlimited"})


@dataclass(frozen=True, slots=True)
class Wording:
    """How one tool words the shared rules. The templates take `{lane}`, `{kind}` (the kind
    the coordinator reported), `{kinds}` (the shared kinds) and `{capacity}`."""

    tool: str  # "<tool> refuses account 'x': ..."
    subject: str  # "<subject> needs the shared coordinator: LANE_COORDINATOR_URL is unset"
    refused: type[LaneClientError]  # raised for a refused account
    production_advice: str  # after "it is the production account; "
    lane_account_advice: str  # after "it is this computer's LANE_ACCOUNT (...); "
    not_shared: str
    unenforced: str
    not_capacity_one: str


def refuse_real_account(account: str, settings: Settings, wording: Wording) -> None:
    """Raise `wording.refused` when `account` is the production account or this computer's
    LANE_ACCOUNT."""
    if account in FORBIDDEN_ACCOUNTS:
        raise wording.refused(
            message=f"{wording.tool} refuses account {account!r}: it is the production "
            f"account; {wording.production_advice}"
        )
    if settings.account and account == settings.account:
        raise wording.refused(
            message=f"{wording.tool} refuses account {account!r}: it is this computer's "
            f"LANE_ACCOUNT (the account real renders use); {wording.lane_account_advice}"
        )


def require_shared_url(settings: Settings, wording: Wording) -> None:
    """A PreProviderError when no shared coordinator is configured (never the local queue)."""
    if not settings.url:
        raise PreProviderError(
            f"{wording.subject} needs the shared coordinator: LANE_COORDINATOR_URL is unset"
        )


def lane_refusal(status: StatusReply, lane: str, wording: Wording) -> str | None:
    """Why the lane whose status this is may not be used (not the shared coordinator,
    unenforced, capacity other than 1), in the tool's words; None when it may."""
    if status.coordinator not in SHARED_KINDS:
        return wording.not_shared.format(kind=status.coordinator, kinds=sorted(SHARED_KINDS))
    if not status.enforced:
        return wording.unenforced.format(lane=lane)
    if status.capacity != 1:
        return wording.not_capacity_one.format(lane=lane, capacity=status.capacity)
    return None


__all__ = [
    "FORBIDDEN_ACCOUNTS",
    "Wording",
    "lane_refusal",
    "refuse_real_account",
    "require_shared_url",
]
