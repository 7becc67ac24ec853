"""The turn's option types and defaults: `WaitUpdate` (what `on_wait` gets while queued) and
`human_check_cooldown_seconds()` (the default of `cooldown_seconds`: how long a provider human
check pauses the lane)."""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from client.config import DEFAULT_COOLDOWN_SECONDS, ENV_COOLDOWN, clamp_cooldown
from client.models import Pause

if TYPE_CHECKING:
    from client.config import Settings


@dataclass(frozen=True, slots=True)
class WaitUpdate:
    """What `on_wait` gets while the ticket is queued (position 1-based,
    docs/protocol.md#fairness)."""

    ticket_id: str
    position: int | None
    eta_seconds: float | None
    pause: Pause | None


def human_check_cooldown_seconds(
    settings: Settings | None = None, environ: MutableMapping[str, str] | None = None
) -> float:
    """LANE_HUMAN_CHECK_COOLDOWN_SECONDS: Settings' value, else the environment's (default
    900, clamped 30-7200; an unreadable value is the default)."""
    if settings is not None:
        return settings.human_check_cooldown_seconds
    raw = (os.environ if environ is None else environ).get(ENV_COOLDOWN)
    try:
        value = float(raw) if raw else DEFAULT_COOLDOWN_SECONDS
    except ValueError:
        value = DEFAULT_COOLDOWN_SECONDS
    if math.isnan(value):
        value = DEFAULT_COOLDOWN_SECONDS
    return clamp_cooldown(value)


__all__ = ["WaitUpdate", "human_check_cooldown_seconds"]
