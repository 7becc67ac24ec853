"""The client's one place that reads clocks (wall time for the local queue, monotonic for waits)."""

from __future__ import annotations

import time


def wall() -> float:
    """Epoch seconds (UTC) with a fraction — the unit every lane reply uses."""
    return time.time()


def monotonic() -> float:
    """Seconds from an arbitrary origin, never going backwards: deadlines and countdowns."""
    return time.monotonic()
