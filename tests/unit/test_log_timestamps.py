"""Log lines' `timestamp` (coordinator/logs.py): ISO-8601 UTC as structlog's
TimeStamper(fmt="iso", utc=True) writes it, read from the wall clock it is given."""

from __future__ import annotations

import pytest

from coordinator.logs import _iso_stamper

T = 1_764_450_000.0  # 2025-11-29T21:00:00Z


@pytest.mark.parametrize(
    ("at", "stamp"),
    [
        (T, "2025-11-29T21:00:00Z"),  # a whole second: no fraction
        (T + 1.25, "2025-11-29T21:00:01.250000Z"),
        (T + 59.9999996, "2025-11-29T21:01:00Z"),  # rounded up into the next second
        (T + 86_400.5, "2025-11-30T21:00:00.500000Z"),
    ],
)
def test_the_stamp_is_iso_utc_from_the_wall_clock_given(at: float, stamp: str) -> None:
    stamper = _iso_stamper(lambda: at)
    assert stamper(None, "info", {"event": "x"})["timestamp"] == stamp


def test_the_cached_second_moves_with_the_clock() -> None:
    now = [T + 0.5]
    stamper = _iso_stamper(lambda: now[0])
    assert stamper(None, "info", {})["timestamp"] == "2025-11-29T21:00:00.500000Z"
    now[0] = T + 3600.5
    assert stamper(None, "info", {})["timestamp"] == "2025-11-29T22:00:00.500000Z"
