"""The drill's rendezvous, through the coordinator itself: on the barrier lane
`<route>:<account>-barrier` each role says "I reached point P" by acquiring a ticket with the
identity

    project = lane-drill-<run id>     scene = <point>:<role>     promptHash = <data or "-">

and the other role polls `status` (live tickets) and `history` (released ones) for it. Role A
mints the run id and announces it (`hello:a`); role B joins the newest live announcement. A
role that fails posts `abort:<role>` so its partner stops at once instead of waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from client.api import SHARED_KINDS, LaneClient
from client.clock import monotonic
from client.drill.common import (
    BARRIER_LEASE_SECONDS,
    BARRIER_PROJECT_PREFIX,
    HISTORY_EVERY,
    POLL_INTERVAL,
    PartnerAborted,
    PartnerTimeout,
    expect,
    is_transient,
    release_each,
)
from client.errors import LaneClientError
from client.models import LaneReply, ReleaseReply

T = TypeVar("T")


@dataclass(slots=True)
class Signal:
    """A partner's barrier ticket: what it said (promptHash) and who said it."""

    data: str
    machine_id: str | None
    claim_id: str | None
    enqueued_at: float | None
    live: bool


class Barrier:
    """Rendezvous through the coordinator: signals are barrier-lane tickets (module doc)."""

    def __init__(
        self,
        client: LaneClient,
        lane: str,
        role: str,
        timeout: float,
        keep: dict[tuple[str, str], float],
    ) -> None:
        self.client = client
        self.lane = lane
        self.role = role
        self.other = "b" if role == "a" else "a"
        self.timeout = timeout
        self.run_id = ""
        self.made: list[str] = []
        self._keep = keep  # (lane, ticket id) -> lease, kept alive in the background
        self.transient_errors = 0

    @property
    def project(self) -> str:
        return BARRIER_PROJECT_PREFIX + self.run_id

    async def retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, retried through transient failures (a cut link) until the timeout."""
        deadline = monotonic() + self.timeout
        while True:
            try:
                return await call()
            except LaneClientError as exc:
                if not is_transient(exc) or monotonic() >= deadline:
                    raise
                self.transient_errors += 1
            await asyncio.sleep(POLL_INTERVAL * 4)

    async def signal(self, point: str, data: str = "-") -> str:
        """Say "I reached `point`" (idempotent: a retry converges on the same ticket)."""
        data = (data or "-")[:128]
        scene = f"{point}:{self.role}"

        async def acquire() -> LaneReply:
            return await self.client.acquire(
                self.lane, self.project, scene, data, BARRIER_LEASE_SECONDS
            )

        r = await self.retrying(acquire)
        if r.ticket_id not in self.made:
            self.made.append(r.ticket_id)
            self._keep[(self.lane, r.ticket_id)] = BARRIER_LEASE_SECONDS
        return r.ticket_id

    async def lookup(self, scenes: set[str], with_history: bool) -> dict[str, Signal]:
        st = await self.client.status(self.lane)
        expect(st.coordinator in SHARED_KINDS, f"coordinator is {st.coordinator!r}")
        found: dict[str, Signal] = {}
        for t in (*st.held, *st.queued):
            if t.project == self.project and t.scene in scenes:
                found[t.scene] = Signal(
                    t.prompt_hash or "-", t.machine_id, t.claim_id, t.enqueued_at, True
                )
        if with_history and not scenes <= set(found):
            h = await self.client.history(self.lane, limit=500, project=self.project)
            for e in h.entries:
                if e.scene in scenes and e.scene not in found:
                    found[e.scene] = Signal(
                        e.prompt_hash, e.machine_id, e.claim_id, e.enqueued_at, False
                    )
        return found

    async def wait(self, point: str, what: str, timeout: float | None = None) -> Signal:
        """The partner's signal for `point`; fails on the partner's abort or after the timeout."""
        want, abort = f"{point}:{self.other}", f"abort:{self.other}"
        limit = self.timeout if timeout is None else timeout
        deadline = monotonic() + limit
        polls, last_error = 0, ""
        while True:
            try:
                found = await self.lookup({want, abort}, with_history=polls % HISTORY_EVERY == 0)
                last_error = ""
            except LaneClientError as exc:
                if not is_transient(exc):
                    raise
                self.transient_errors += 1
                found, last_error = {}, str(exc)
            polls += 1
            if abort in found:
                raise PartnerAborted(f"partner {self.other.upper()} gave up: {found[abort].data}")
            if want in found:
                return found[want]
            if monotonic() >= deadline:
                extra = f"; last error: {last_error}" if last_error else ""
                raise PartnerTimeout(
                    f"partner {self.other.upper()} did not {what} within {limit:g} s "
                    f"(run {self.run_id}, barrier lane {self.lane}){extra}"
                )
            await asyncio.sleep(POLL_INTERVAL)

    async def find_announcement(self, since: float) -> tuple[str, Signal]:
        """B: the newest live `hello:a` no B has joined yet, enqueued after `since`."""
        deadline = monotonic() + self.timeout
        while True:
            try:
                st = await self.client.status(self.lane)
            except LaneClientError as exc:
                if not is_transient(exc):
                    raise
                st = None
            if st is not None:
                joined = {
                    t.project for t in (*st.held, *st.queued) if t.scene == f"hello:{self.role}"
                }
                best: tuple[str, Signal] | None = None
                for t in (*st.held, *st.queued):
                    if (
                        t.scene == f"hello:{self.other}"
                        and t.project is not None
                        and t.project.startswith(BARRIER_PROJECT_PREFIX)
                        and t.project not in joined
                        and (t.enqueued_at or 0.0) >= since
                        and (best is None or (t.enqueued_at or 0.0) > (best[1].enqueued_at or 0.0))
                    ):
                        sig = Signal(
                            t.prompt_hash or "-", t.machine_id, t.claim_id, t.enqueued_at, True
                        )
                        best = (t.project[len(BARRIER_PROJECT_PREFIX) :], sig)
                if best is not None:
                    return best
            if monotonic() >= deadline:
                raise PartnerTimeout(
                    f"no drill announcement from role A on {self.lane} within "
                    f"{self.timeout:g} s: start `lane drill --role a` on the other computer "
                    "(within the timeout)"
                )
            await asyncio.sleep(POLL_INTERVAL)

    async def release_all(self) -> tuple[int, list[str]]:
        async def release(tid: str) -> ReleaseReply:
            self._keep.pop((self.lane, tid), None)
            return await self.client.release(self.lane, tid, "not-submitted", None, "lane drill")

        return await release_each(self.made, release)


__all__ = ["Barrier", "Signal"]
