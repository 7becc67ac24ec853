"""The ETA's inputs and arithmetic (docs/protocol.md#fairness): the lane's measured holds —
lane-wide and per project — and the simulation that turns the slots' free times and the
queue ahead into a queued ticket's wait. Pure; `LaneQueue` keeps one `HoldSamples` per lane."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence

from coordinator.constants import ETA_HOLD_SAMPLE_SIZE, ETA_HOLD_WINDOW


class HoldSamples:
    """The lane's last ETA_HOLD_WINDOW measured holds, (project, seconds), the oldest first:
    the lane's hold is the mean of the last ETA_HOLD_SAMPLE_SIZE of them, a project's the mean
    of its own last ETA_HOLD_SAMPLE_SIZE within the window (the lane's when it has none).
    Kept incrementally; a core rebuilt from the store's rows (the same window) has the same."""

    def __init__(self, recent: Iterable[tuple[str, float]], default: float) -> None:
        self.default = default
        self._window: deque[tuple[str, float]] = deque()
        self._lane: deque[float] = deque(maxlen=ETA_HOLD_SAMPLE_SIZE)
        self._projects: dict[str, deque[float]] = {}
        self._in_window: dict[str, int] = {}  # project -> its holds in the window
        self._means: dict[str, float] = {}  # project -> its hold, until the next add
        self._lane_mean: float | None = None
        for project, seconds in recent:
            self.add(project, seconds)

    def add(self, project: str, seconds: float) -> None:
        """A hold measured (a held ticket ended): it joins the window, the oldest leaves."""
        self._means.clear()
        self._lane_mean = None
        if len(self._window) == ETA_HOLD_WINDOW:
            old, _ = self._window.popleft()
            n = self._in_window[old]
            if n <= ETA_HOLD_SAMPLE_SIZE:  # the project's samples are all its window holds
                self._projects[old].popleft()
            if n == 1:
                del self._in_window[old], self._projects[old]
            else:
                self._in_window[old] = n - 1
        self._window.append((project, seconds))
        self._lane.append(seconds)
        self._in_window[project] = self._in_window.get(project, 0) + 1
        samples = self._projects.get(project)
        if samples is None:
            samples = self._projects[project] = deque(maxlen=ETA_HOLD_SAMPLE_SIZE)
        samples.append(seconds)

    def recent(self) -> list[tuple[str, float]]:
        """The window, the oldest hold first."""
        return list(self._window)

    def lane(self) -> float:
        """The lane's hold: the mean of its last holds, else the configured default."""
        if self._lane_mean is None:
            self._lane_mean = sum(self._lane) / len(self._lane) if self._lane else self.default
        return self._lane_mean

    def project(self, project: str) -> float:
        """A project's hold: the mean of its last holds in the window, else the lane's
        (each mean worked out once between two holds: a status reads it per ticket)."""
        mean = self._means.get(project)
        if mean is None:
            samples = self._projects.get(project)
            mean = sum(samples) / len(samples) if samples else self.lane()
            self._means[project] = mean
        return mean


def free_times(taken: list[float], capacity: int) -> list[float]:
    """One figure per slot, ascending: the seconds until it is free. `taken`: each slot
    taker's (a held ticket, an in-flight job); a slot nobody takes is free now (0); with more
    takers than slots (capacity lowered), a slot frees only once enough of them have ended,
    so the smallest surplus figures are dropped."""
    cap = max(capacity, 1)
    taken = sorted(taken)
    extra = max(0, len(taken) - cap)
    return [0.0] * max(0, cap - len(taken)) + taken[extra:]


def waits(free: Sequence[float], holds: Sequence[float], count: int, tail: float) -> list[float]:
    """The waits of the first `count` queued tickets, in promotion order: each takes the slot
    that frees first and holds it for its own estimate (`holds`: those of the first tickets,
    at most ETA_SIMULATED_TICKETS); every ticket after those holds `tail` (the lane's hold).
    Never decreasing: a slot is given back later than it was taken."""
    slots = list(free)
    heapq.heapify(slots)
    out: list[float] = []
    for hold in holds[:count]:
        at = heapq.heappop(slots)
        out.append(at)
        heapq.heappush(slots, at + hold)
    out.extend(kth_grant(slots, k, tail) for k in range(count - len(out)))
    return out


def wait_at(free: Sequence[float], ahead: Sequence[float], position: int, tail: float) -> float:
    """The wait of the queued ticket at `position` (1-based) alone: `waits(...)[position - 1]`
    without the others (`ahead`: the holds of the first tickets ahead of it, at most
    ETA_SIMULATED_TICKETS)."""
    slots = list(free)
    heapq.heapify(slots)
    simulated = ahead[: position - 1]
    for hold in simulated:
        heapq.heappush(slots, heapq.heappop(slots) + hold)
    return kth_grant(slots, position - 1 - len(simulated), tail)


def kth_grant(slots: Sequence[float], k: int, hold: float) -> float:
    """The k-th (0-based) grant when the slots free at `slots` and every ticket holds `hold`:
    the k-th smallest of the merged progressions slot + j × hold (what a simulation of k + 1
    tickets gives), level by level — level L holds the slots' L-th turns, in the order of
    their offsets within a hold."""
    base = min(slots)
    if k <= 0 or hold <= 0:
        return base
    turns = []  # (the level of the slot's first turn, its offset within that level)
    for s in slots:
        level = int((s - base) // hold)
        turns.append((level, s - base - level * hold))
    turns.sort()
    level, active, left = 0, 0, k
    while True:
        while active < len(turns) and turns[active][0] <= level:
            active += 1
        nxt = turns[active][0] if active < len(turns) else None
        if nxt is None or left < (nxt - level) * active:
            level += left // active
            offsets = sorted(off for _, off in turns[:active])
            return base + offsets[left % active] + level * hold
        left -= (nxt - level) * active
        level = nxt
