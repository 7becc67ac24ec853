"""Machine presence: which computers made a signed call recently (kept in memory)."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.constants import MACHINE_ONLINE_SECONDS
from coordinator.protocol.replies import Machine


@dataclass(slots=True)
class _Seen:
    last_seen_at: float
    lanes: set[str] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)


class Presence:
    def __init__(self) -> None:
        self._machines: dict[str, _Seen] = {}

    def saw(self, machine_id: str, now: float, lane: str | None, claim_id: str | None) -> None:
        seen = self._machines.get(machine_id)
        if seen is None:
            seen = self._machines[machine_id] = _Seen(now)
        seen.last_seen_at = max(seen.last_seen_at, now)
        if lane:
            seen.lanes.add(lane)
        if claim_id:
            seen.claims.add(claim_id)
            if len(seen.claims) > 32:  # bounded: a long-running server sees many claims
                seen.claims.pop()

    def view(self, now: float) -> list[Machine]:
        rows = [
            Machine(
                machine_id=m,
                last_seen_at=s.last_seen_at,
                online=now - s.last_seen_at <= MACHINE_ONLINE_SECONDS,
                seconds_since_seen=round(max(0.0, now - s.last_seen_at), 3),
                lanes=sorted(s.lanes),
            )
            for m, s in self._machines.items()
        ]
        rows.sort(key=lambda r: r.last_seen_at, reverse=True)
        return rows
