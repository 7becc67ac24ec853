"""How far a lane's ETAs were off (docs/protocol.md#eta-error): each grant's absolute error
|etaFirstSeconds − waitSeconds| and a lane's window of its last grants, kept incrementally
(no scan per call). Pure; `LaneQueue` keeps one per lane."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from sortedcontainers import SortedList

from coordinator.constants import ETA_ERROR_GRANTS
from coordinator.protocol import replies as wire


def wait_seconds(enqueued_at: float, held_at: float) -> float:
    """The wait a grant really had, as the render log shows it (`waitSeconds`)."""
    return round(max(0.0, held_at - enqueued_at), 3)


def grant_error(eta_first: float, enqueued_at: float, held_at: float) -> float:
    """One grant's error: |the ETA its ticket was first given − the wait it had|, in the
    render log's own rounded figures (so the rows reproduce it exactly)."""
    return round(abs(eta_first - wait_seconds(enqueued_at, held_at)), 3)


def nearest_rank(n: int, percent: int) -> int:
    """The 0-based index of the `percent`-th percentile of n sorted values, nearest rank:
    the ⌈percent/100 · n⌉-th smallest (always one of the values; n ≥ 1)."""
    return max(1, (percent * n + 99) // 100) - 1


class EtaErrors:
    """The errors of a lane's last `size` grants, in grant order, and sorted."""

    def __init__(self, errors: Iterable[float] = (), size: int = ETA_ERROR_GRANTS) -> None:
        self._recent: deque[float] = deque(maxlen=size)
        self._sorted: SortedList = SortedList()
        for e in errors:
            self.add(e)

    def add(self, error: float) -> None:
        """A grant's error (the oldest one leaves a full window)."""
        if len(self._recent) == self._recent.maxlen:
            self._sorted.remove(self._recent[0])
        self._recent.append(error)
        self._sorted.add(error)

    def recent(self) -> list[float]:
        """The window, the oldest grant first."""
        return list(self._recent)

    def summary(self) -> wire.EtaError | None:
        """`etaError` of status and the overview; None before the lane's first grant."""
        n = len(self._sorted)
        if n == 0:
            return None
        median: float = self._sorted[nearest_rank(n, 50)]
        p90: float = self._sorted[nearest_rank(n, 90)]
        return wire.EtaError(grants=n, median_seconds=median, p90_seconds=p90)
