"""The await rule once for both hosts (coordinator/engine/long_poll.py): answer when the
ticket is no longer queued, the pause changed, or the time is up; a host with nothing to
wait for answers at once."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.engine.long_poll import long_poll
from coordinator.protocol.replies import Pause


@dataclass(frozen=True)
class Ticket:
    state: str


@dataclass(frozen=True)
class Reply:
    """What the rule reads of a LaneReply."""

    ticket: Ticket
    pause: Pause | None = None


def reply(state: str, pause: Pause | None = None) -> Reply:
    return Reply(Ticket(state), pause)


PAUSE = Pause(
    reason_code="provider-human-check", started_at=1.0, until=2.0, machine_id="m", ticket_id="t_1"
)


class Script:
    """Replies in order; counts waits; `expire_after` looks make the time run out."""

    def __init__(self, *replies: Reply, waits: bool = True, expire_after: int = 99) -> None:
        self.replies = list(replies)
        self.looks = 0
        self.waits = 0
        self.can_wait = waits
        self.expire_after = expire_after

    async def look(self) -> Reply:
        self.looks += 1
        return self.replies.pop(0)

    async def wait(self) -> bool:
        self.waits += 1
        return self.can_wait

    def expired(self) -> bool:
        return self.looks >= self.expire_after


async def test_a_held_ticket_is_answered_at_once() -> None:
    s = Script(reply("held"))
    assert (await long_poll(s.look, s.wait, s.expired)).ticket.state == "held"
    assert (s.looks, s.waits) == (1, 0)


async def test_a_queued_ticket_is_looked_at_again_until_granted() -> None:
    s = Script(reply("queued"), reply("queued"), reply("held"))
    assert (await long_poll(s.look, s.wait, s.expired)).ticket.state == "held"
    assert (s.looks, s.waits) == (3, 2)


async def test_a_pause_change_answers_while_still_queued() -> None:
    s = Script(reply("queued"), reply("queued", PAUSE), reply("held"))
    got = await long_poll(s.look, s.wait, s.expired)
    assert got.ticket.state == "queued" and got.pause == PAUSE
    assert s.looks == 2


async def test_the_time_up_answers_with_one_last_look() -> None:
    s = Script(reply("queued"), reply("queued"), reply("held"), expire_after=1)
    got = await long_poll(s.look, s.wait, s.expired)
    assert got.ticket.state == "queued" and s.looks == 1  # expired before any wait
    s = Script(reply("queued"), reply("queued"))

    async def wait_then_expire() -> bool:
        s.expire_after = 0  # the time ran out while waiting
        return True

    got = await long_poll(s.look, wait_then_expire, s.expired)
    assert got.ticket.state == "queued" and s.looks == 2  # the last look after the wait


async def test_nothing_to_wait_for_answers_the_current_reply() -> None:
    s = Script(reply("queued"), reply("held"), waits=False)
    assert (await long_poll(s.look, s.wait, s.expired)).ticket.state == "queued"
    assert (s.looks, s.waits) == (1, 1)
