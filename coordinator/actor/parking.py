"""Long polls parked on a lane's tickets: a parked `await` waits on a future that a
committed change to its ticket (a grant, an end), a pause change, or a wake-up of the whole
lane (another replica's change, shutdown) resolves; the await then reads its ticket again."""

from __future__ import annotations

import asyncio

from coordinator.engine.model import Effects


class Parking:
    def __init__(self) -> None:
        self._parked: dict[str, set[asyncio.Future[None]]] = {}
        self.wakes = 0  # wake_all calls so far (a park made after one misses nothing)
        self.draining = False  # shutting down: answer now instead of parking

    def __bool__(self) -> bool:
        return bool(self._parked)

    def park(self, ticket_id: str, since: int | None = None) -> asyncio.Future[None]:
        """A future resolved when `ticket_id` may have moved. `since`: the wake count when
        the caller last read the lane — a wake-up after that resolves the future at once."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.draining or (since is not None and since != self.wakes):
            fut.set_result(None)
            return fut
        self._parked.setdefault(ticket_id, set()).add(fut)

        def _forget(f: asyncio.Future[None]) -> None:
            s = self._parked.get(ticket_id)
            if s is not None:
                s.discard(f)
                if not s:
                    del self._parked[ticket_id]

        fut.add_done_callback(_forget)
        return fut

    def wake(self, fx: Effects) -> None:
        """What a committed transaction woke: its tickets, or everyone on a pause change."""
        if fx.pause_changed:
            self.wake_all()
            return
        for tid in fx.woken:
            for f in list(self._parked.get(tid, ())):
                if not f.done():
                    f.set_result(None)

    def wake_all(self) -> None:
        self.wakes += 1
        for futs in list(self._parked.values()):
            for f in list(futs):
                if not f.done():
                    f.set_result(None)

    def drain(self) -> None:
        """Answer every parked poll now, and park no new one."""
        self.draining = True
        self.wake_all()

    def clear(self) -> None:
        self.wake_all()
        self._parked.clear()
