"""Replies for an unenforced lane (docs/protocol.md#unenforced): no capacity, no state, no store —
every acquire is granted at once and nothing is remembered."""

from __future__ import annotations

from typing import cast

from coordinator.engine.commands import Acquire, TicketCall
from coordinator.protocol import replies as wire

UNLIMITED_PREFIX = "unlimited-"


def unlimited_ticket(
    lane: str, cmd: Acquire | TicketCall, ticket_id: str, now: float
) -> wire.Ticket:
    """The acquire's ticket; for an await (a TicketCall) the caller owns it, and its request
    identity reads "unknown": an unenforced lane remembers nothing (evidence reads the same)."""
    identity = cmd if isinstance(cmd, Acquire) else None
    return wire.Ticket(
        ticket_id=ticket_id,
        lane=lane,
        state="held",
        machine_id=cmd.machine_id,
        claim_id=cmd.claim_id,
        project=identity.project if identity else wire.UNKNOWN,
        scene=identity.scene if identity else wire.UNKNOWN,
        prompt_hash=identity.prompt_hash if identity else wire.UNKNOWN,
        position=0,
        eta_seconds=0.0,
        enqueued_at=now,
        held_at=now,
        lease_expires_at=None,
        heartbeat_at=None,
        fence=None,
        credential=cmd.credential if cmd else None,
    )


def lane_reply(
    lane: str, cmd: Acquire | TicketCall, ticket_id: str, now: float, coordinator: str
) -> wire.LaneReply:
    """acquire (an Acquire) and await (its TicketCall) on an unenforced lane: always granted."""
    ticket = unlimited_ticket(lane, cmd, ticket_id, now)
    return wire.LaneReply(
        coordinator=coordinator,
        lane=lane,
        enforced=False,
        ticket=ticket,
        granted=True,
        duplicate=False,
        owner=wire.Owner(machine_id=ticket.machine_id, claim_id=ticket.claim_id),
        pause=None,
    )


def heartbeat_reply(coordinator: str) -> wire.HeartbeatReply:
    return wire.HeartbeatReply(
        coordinator=coordinator,
        refreshed=True,
        state="held",
        lease_expires_at=None,
        fence=None,
        reason=None,
    )


def release_reply(outcome: str | None, coordinator: str) -> wire.ReleaseReply:
    return wire.ReleaseReply(
        coordinator=coordinator,
        released=True,
        state="done",
        outcome=cast("wire.ReleaseOutcome | None", outcome),
        promoted=[],
        reason=None,
    )


def cooldown_reply(coordinator: str) -> wire.CooldownReply:
    return wire.CooldownReply(coordinator=coordinator, paused=False, extended=False, pause=None)


def receipt_reply(coordinator: str) -> wire.ReceiptReply:
    return wire.ReceiptReply(
        coordinator=coordinator, stored=False, replay=False, content_hash_verified=None
    )


def status_reply(lane: str, now: float, coordinator: str) -> wire.StatusReply:
    return wire.StatusReply(
        coordinator=coordinator,
        lane=lane,
        enforced=False,
        capacity=None,
        held=[],
        queued=[],
        queued_total=0,
        pause=None,
        now=now,
    )


def history_reply(lane: str, retained_limit: int, coordinator: str) -> wire.HistoryReply:
    return wire.HistoryReply(
        coordinator=coordinator,
        lane=lane,
        enforced=False,
        entries=[],
        counts={},
        retained=0,
        retained_limit=retained_limit,
    )
