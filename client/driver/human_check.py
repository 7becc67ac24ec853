"""The provider human check (docs/protocol.md#driver-rules): `HumanCheck.human_check()` reports
`provider-human-check` on the held ticket for LANE_HUMAN_CHECK_COOLDOWN_SECONDS (default 900,
clamped 30-7200; `human_check_cooldown_seconds()` in options.py), prints one line saying this
machine paused the lane, then releases with `not-submitted`. A 404 from a coordinator too old
to have the cooldown endpoint is a logged warning, not a failure (the release still happens).
A `ProviderHumanCheck` raised out of the block does the same automatically (turn.py's exit).
"""

from __future__ import annotations

import logging

from client.config import clamp_cooldown
from client.driver.errors import TurnNotHeld
from client.driver.submit import ProviderSteps
from client.errors import LaneClientError
from client.models import CooldownReply

log = logging.getLogger("lane.driver")


class HumanCheck(ProviderSteps):
    """`human_check()`: pause the lane for every computer, then release not-submitted."""

    async def human_check(self, retry_after_seconds: float | None = None) -> CooldownReply | None:
        """Pause the lane for everyone (cooldown on the held ticket), then release
        `not-submitted`. Returns the cooldown reply (None when the coordinator refused or is
        too old: a warning, not a failure)."""
        if self.ticket_id is None or not self.granted:
            raise TurnNotHeld("a human check needs the held ticket")
        if self.released:
            raise TurnNotHeld(f"ticket {self.ticket_id} was already released")
        seconds = clamp_cooldown(
            self.cooldown_seconds if retry_after_seconds is None else retry_after_seconds
        )
        reply: CooldownReply | None = None
        try:
            reply = await self._ops.cooldown(self.lane, self.ticket_id, seconds)
        except LaneClientError as exc:
            if exc.status == 404:
                log.warning(
                    "the coordinator answered the cooldown with 404: it is too old to pause "
                    "the lane for other computers (redeploy it); releasing as not-submitted"
                )
            else:
                log.warning("cooldown on %s failed (%s); releasing anyway", self.ticket_id, exc)
        self.cooldown_reply = reply
        self.human_checked = True
        if reply is not None and reply.paused and reply.pause is not None:
            self._say(
                f"lane: this machine ({self._ops.machine_id}) paused lane {self.lane} for "
                f"{seconds:g} s (provider human check on ticket {self.ticket_id}); every "
                "computer waits until it ends"
            )
        await self._stop_heartbeat()
        outcome = "lease-lost" if self.lease_lost else "not-submitted"
        self.outcome = outcome
        await self._release(outcome)
        self._job_open = False
        self._journal_update(phase="terminal", outcome=outcome)
        return reply


__all__ = ["HumanCheck"]
