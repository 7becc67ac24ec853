"""The await rule, written once for both hosts that answer a long poll (the coordinator's
service, coordinator/service.py, and the client's local queue, client/local.py): look at the
ticket; while it is still queued, wait for a reason to look again (a wake-up from a commit,
or a poll interval) and look again; answer as soon as the ticket is no longer queued, the
lane's pause started, ended or changed, or the time is up (docs/protocol.md#await)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar


class _Ticket(Protocol):
    @property
    def state(self) -> str: ...


class AwaitReply(Protocol):
    """What the rule reads of an await's reply (`coordinator.protocol.replies.LaneReply`)."""

    @property
    def ticket(self) -> _Ticket: ...

    @property
    def pause(self) -> object: ...


R = TypeVar("R", bound=AwaitReply)


async def long_poll(
    look: Callable[[], Awaitable[R]],
    wait: Callable[[], Awaitable[bool]],
    expired: Callable[[], bool],
) -> R:
    """`look()`: one await operation. `wait()`: wait for a reason to look again, at most
    until the time is up; False when there is nothing to wait for (the host answers now:
    not parked, or shutting down). `expired()`: the time is up."""
    reply = await look()
    pause = reply.pause
    while reply.ticket.state == "queued" and not expired():
        if not await wait():
            break
        if expired():
            return await look()
        reply = await look()
        if reply.pause != pause:
            break
    return reply
