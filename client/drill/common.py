"""What every part of `lane drill` shares: its constants and step titles, its errors, the
small check helpers, `drill_lanes` (the drill lane and its barrier lane, refused by the
shared rules in refusals.py), and what the self-test uses too: `route_and_account` (the lane
the flags name) and `release_each` (the clean-up)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from client.config import Settings
from client.drill.refusals import Wording, refuse_real_account
from client.errors import BadRequestError, LaneClientError, PreProviderError, is_transient
from client.models import ReleaseReply
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import parse_lane

DEFAULT_DRILL_LANE = "drill:acceptance"
DEFAULT_PARTNER_TIMEOUT = 120.0  # seconds a role waits for its partner at any one point
BARRIER_SUFFIX = "-barrier"
DRILL_PROJECT = "lane-drill"
BARRIER_PROJECT_PREFIX = "lane-drill-"
DRILL_LEASE_SECONDS = 60.0  # a killed run's drill tickets clear within a minute
BARRIER_LEASE_SECONDS = 900.0  # "long": barrier tickets live for the whole run
SHORT_LEASE_SECONDS = 15.0  # steps 6, 7 and 8 (the protocol's minimum lease)
KEEPALIVE_INTERVAL = 20.0  # heartbeat of barrier (and held drill) tickets
POLL_INTERVAL = 0.25  # barrier polling
HISTORY_EVERY = 4  # every Nth poll also reads history (signals already released)
RACE_LEAD_SECONDS = 1.5  # A announces the race instant this far ahead (coordinator time)
MAX_PROMOTION_LATENESS = 10.0  # alarm promotion later than this after expiry is a failure
IN_FLIGHT_WATCH_SECONDS = 5.0  # step 7: B must stay queued this long after A's lease expired
PARTITION_HEARTBEAT_INTERVAL = 2.0
PARTITION_CALL_TIMEOUT = 3.0
LEASE_LOST_AFTER = 3  # refreshed:false answers in a row (docs/protocol.md#driver-rules)
EXIT_OK, EXIT_FAIL, EXIT_PRE_PROVIDER, EXIT_INTERRUPTED = 0, 1, 3, 130

STEP_TITLES = {
    "0": "preflight and rendezvous",
    "1": "A acquires shared-queue-drill-a → granted",
    "2": "B acquires distinct shared-queue-drill-b → queued at position 1",
    "3": "A and B race for shared-queue-race → one canonical ticket",
    "3b": "race ticket held → only its owner is granted",
    "4": "A releases its exact ticket → B's request is held",
    "5": "receipt recorded, replayed (idempotent), conflicting content → 409",
    "6": "short lease stops heartbeating → alarm promotes its waiter after expiry",
    "7": "provider-submitted lease expires → waiter NOT promoted; provider-terminal promotes it",
    "8": "B's link cut while holding → A promoted; B lease-lost; late release keeps expired",
}


class DrillRefusedError(LaneClientError):
    """The drill will not run here: production account, unenforced lane, not shared."""

    default_code = "drill-refused"


class DrillFailed(Exception):
    """One step's check failed (the message says what was expected and what was seen)."""


class PartnerTimeout(DrillFailed):
    pass


class PartnerAborted(DrillFailed):
    pass


WORDING = Wording(
    tool="drill",
    subject="the drill",
    refused=DrillRefusedError,
    production_advice=f"use a dedicated drill lane such as {DEFAULT_DRILL_LANE}",
    lane_account_advice=f"use a dedicated drill lane such as {DEFAULT_DRILL_LANE}",
    not_shared="the coordinator reports {kind!r}, not a shared kind {kinds}: "
    "the drill needs the shared coordinator",
    unenforced="{lane} is unenforced here (its route has no capacity configured); the drill "
    f'needs an enforced lane with capacity 1, e.g. {DEFAULT_DRILL_LANE} with [routes."drill"] '
    "capacity = 1",
    not_capacity_one="{lane} has capacity {capacity}; the drill needs capacity 1",
)


@dataclass(slots=True)
class StepResult:
    step: str
    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def route_and_account(
    lane: str | None, route: str | None, account: str | None, default: tuple[str, str]
) -> tuple[str, str]:
    """The (route, account) of `--lane route:account` when given, else of --route/--account,
    each defaulting to `default`'s."""
    if lane:
        try:
            return parse_lane(lane)
        except LaneError as exc:
            raise BadRequestError(message=exc.message) from None
    return route or default[0], account or default[1]


def drill_lanes(
    lane: str | None, route: str | None, account: str | None, settings: Settings
) -> tuple[str, str]:
    """(drill lane, barrier lane); refuses production accounts whatever the flags say."""
    if lane and (route or account):
        raise BadRequestError(message="give --lane route:account, or --route/--account, not both")
    d_route, d_acct = DEFAULT_DRILL_LANE.split(":")
    route_v, acct = route_and_account(lane, route, account, (d_route, d_acct))
    name = f"{route_v}:{acct}"
    barrier = f"{name}{BARRIER_SUFFIX}"
    for candidate in (name, barrier):
        try:
            parse_lane(candidate)
        except LaneError as exc:
            raise BadRequestError(message=f"{candidate}: {exc.message}") from None
    refuse_real_account(acct, settings, WORDING)
    return name, barrier


async def release_each(
    tickets: Iterable[str], release: Callable[[str], Awaitable[ReleaseReply]]
) -> tuple[int, list[str]]:
    """Clean up: `release` every ticket. (How many are released or were already over, one
    problem line per ticket that is not.)"""
    released, problems = 0, []
    for tid in tickets:
        try:
            r = await release(tid)
        except LaneClientError as exc:
            problems.append(f"{tid}: {exc}")
            continue
        if r.released or r.reason in ("already-done", "expired"):
            released += 1
        else:
            problems.append(f"{tid}: {r.reason}")
    return released, problems


def unwrap(exc: LaneClientError) -> LaneClientError:
    """The coordinator's own answer behind a fail-closed wrapper (403 becomes pre-provider)."""
    if isinstance(exc, PreProviderError) and exc.underlying is not None:
        return exc.underlying
    return exc


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def expect(cond: bool, detail: str) -> None:
    if not cond:
        raise DrillFailed(detail)


__all__ = [
    "BARRIER_LEASE_SECONDS",
    "BARRIER_PROJECT_PREFIX",
    "BARRIER_SUFFIX",
    "DEFAULT_DRILL_LANE",
    "DEFAULT_PARTNER_TIMEOUT",
    "DRILL_LEASE_SECONDS",
    "DRILL_PROJECT",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PRE_PROVIDER",
    "HISTORY_EVERY",
    "IN_FLIGHT_WATCH_SECONDS",
    "KEEPALIVE_INTERVAL",
    "LEASE_LOST_AFTER",
    "MAX_PROMOTION_LATENESS",
    "PARTITION_CALL_TIMEOUT",
    "PARTITION_HEARTBEAT_INTERVAL",
    "POLL_INTERVAL",
    "RACE_LEAD_SECONDS",
    "SHORT_LEASE_SECONDS",
    "STEP_TITLES",
    "WORDING",
    "DrillFailed",
    "DrillRefusedError",
    "PartnerAborted",
    "PartnerTimeout",
    "StepResult",
    "drill_lanes",
    "expect",
    "is_transient",
    "ms",
    "release_each",
    "route_and_account",
    "unwrap",
]
