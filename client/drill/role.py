"""`lane drill --role a|b`: the two-computer acceptance drill of docs/protocol.md#acceptance-drill
(no provider, no credits).

Two processes — normally two computers — run the seven steps together on a dedicated test lane
(default `drill:acceptance`; `main-unlimited` and LANE_ACCOUNT's account are refused whatever the
flags say). They find each other and keep step **through the coordinator itself**: on the
barrier lane `<route>:<account>-barrier` (same enforced route) each role says "I reached point
P" by acquiring a ticket with the identity

    project = lane-drill-<run id>     scene = <point>:<role>     promptHash = <data or "-">

and the other role polls `status` (live tickets) and `history` (released ones) for it. Role A
mints the run id and announces it (`hello:a`); role B joins the newest live announcement. A
role that fails posts `abort:<role>` so its partner stops at once instead of waiting. Data the
other role must check (a ticket id, a lease expiry, a receipt id) travels in the promptHash.
Barrier tickets use a long lease (kept alive in the background) and every ticket the drill made
— drill and barrier — is released at the end, also after a failure, SIGINT or SIGTERM.

Steps (each printed as a PASS/FAIL line with the ticket ids and timings this role observed):
1. A acquires `shared-queue-drill-a` → granted.
2. B acquires `shared-queue-drill-b` → queued at position 1.
3. A and B acquire `shared-queue-race` at an agreed instant → one canonical ticket on both
   sides; (3b) once it is held only its owner is granted, the other is told who owns it.
4. A releases its exact ticket → B's request is held; B learns it from a parked long poll.
5. B (the holder machine) records a receipt (201), replays it (200, replay) and sends the same
   receiptId with other content (409 receipt-conflict); A sees exactly the first one.
6. A short lease (15 s) stops heartbeating → the alarm promotes B's parked waiter after expiry
   with no other call on the lane.
7. A acquires a 15 s lease, records `provider-submitted` on it (a simulated job) and stops
   heartbeating; after the expiry B's waiting request is NOT promoted (the lane keeps the slot
   for the job still in flight: status `inFlight`); A's `provider-terminal` receipt then
   promotes it at once. A coordinator with in-flight holds off for the lane fails this step.
8. (`--partition` only) B holds a 15 s lease and heartbeats; B's network is cut, the lease
   expires and A is promoted by the alarm; B's network returns, B reads `refreshed: false`
   three times, parks as lease-lost, and its late release cannot overwrite `expired`
   (history: outcome expired + lateOutcome lease-lost). The cut and the restore are done by
   whoever runs the drill when the `ACTION:` lines say so (scripts/drill-netns.sh does it).

This module: `DrillRole`, one role's client, tickets, barrier, preflight, rendezvous and
cleanup. The steps are functions of a role in steps_1_4.py, steps_5_6.py, step_7.py and
partition.py (step 8); run.py runs them (`run_drill`); barrier.py is the rendezvous.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

import aiohttp

from client.api import LaneClient
from client.clock import monotonic, wall
from client.config import Settings
from client.drill.barrier import Barrier
from client.drill.common import (
    DRILL_LEASE_SECONDS,
    DRILL_PROJECT,
    KEEPALIVE_INTERVAL,
    STEP_TITLES,
    WORDING,
    DrillFailed,
    DrillRefusedError,
    StepResult,
    expect,
    release_each,
)
from client.drill.refusals import lane_refusal
from client.errors import LaneClientError
from client.models import HistoryEntry, LaneReply, ReleaseReply, Ticket


class DrillRole:
    """One role of the drill: its client, its tickets, its barrier, its steps."""

    def __init__(
        self,
        settings: Settings,
        lane: str,
        barrier_lane: str,
        role: str,
        *,
        timeout: float,
        partition: bool,
        session: aiohttp.ClientSession,
        emit: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.lane = lane
        self.barrier_lane = barrier_lane
        self.role = role
        self.me = role.upper()
        self.timeout = timeout
        self.partition = partition
        self.steps_total = 8 if partition else 7
        self.session = session
        self.emit = emit
        self.client = LaneClient(
            settings.url or "",
            settings.token or "",
            settings.machine_id or "",
            settings.claim_id,
            timeout=settings.timeout,
            required=True,
            session=session,
        )
        self.keep: dict[tuple[str, str], float] = {}
        self.barrier = Barrier(self.client, barrier_lane, role, timeout, self.keep)
        self.made: dict[str, str] = {}  # drill ticket id -> request (scene)
        self.results: list[StepResult] = []
        self.offset = 0.0  # coordinator clock - local clock
        self.prompt_hash = ""
        self.partner_machine: str | None = None
        self.partner_claim: str | None = None
        self.ids: dict[str, str] = {}
        self.numbers: dict[str, float] = {}

    # ------------------------------------------------------------------ helpers

    @property
    def run_id(self) -> str:
        return self.barrier.run_id

    def coord_now(self) -> float:
        return wall() + self.offset

    def report(self, res: StepResult) -> None:
        self.results.append(res)
        title = STEP_TITLES.get(res.step, res.step)
        tag = "PASS" if res.ok else "FAIL"
        self.emit(f"{tag}  step {res.step}/{self.steps_total}  [{self.me}] {title} — {res.detail}")

    def note(self, text: str) -> None:
        self.emit(f"      [{self.me}] {text}")

    async def acquire(self, scene: str, lease: float) -> LaneReply:
        r = await self.client.acquire(self.lane, DRILL_PROJECT, scene, self.prompt_hash, lease)
        if r.owner.machine_id == self.client.machine_id and r.owner.claim_id == (
            self.client.claim_id
        ):
            if r.ticket_id not in self.made:
                self.made[r.ticket_id] = scene
            if lease == DRILL_LEASE_SECONDS and r.ticket.state in ("queued", "held"):
                self.keep[(self.lane, r.ticket_id)] = lease
        return r

    async def release(self, tid: str, outcome: str = "not-submitted") -> ReleaseReply:
        self.keep.pop((self.lane, tid), None)
        return await self.client.release(self.lane, tid, outcome, None, "lane drill")

    async def release_expected(self, tid: str, what: str) -> ReleaseReply:
        """Release `tid` (`what` names it in the failure): a step fails unless it is released."""
        rel = await self.release(tid)
        expect(rel.released, f"release of {what} refused: {rel.reason}")
        return rel

    async def timed_acquire(self, scene: str) -> tuple[LaneReply, float]:
        """Acquire `scene` with the drill lease: (the reply, seconds the call took)."""
        t0 = monotonic()
        r = await self.acquire(scene, DRILL_LEASE_SECONDS)
        return r, monotonic() - t0

    async def keepalive(self) -> None:
        """Heartbeat barrier tickets (and held/queued drill tickets registered for it)."""
        while True:
            await asyncio.sleep(KEEPALIVE_INTERVAL)
            for (lane, tid), lease in list(self.keep.items()):
                with contextlib.suppress(LaneClientError):
                    await self.client.heartbeat(lane, tid, lease)

    async def sync_clock(self) -> None:
        best: tuple[float, float] | None = None
        for _ in range(3):
            t0 = wall()
            st = await self.client.status(self.barrier_lane)
            t1 = wall()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, st.now - (t0 + t1) / 2)
        assert best is not None
        self.offset = best[1]

    async def await_until_not_queued(self, tid: str, limit: float) -> tuple[LaneReply, int]:
        """Long-poll `await` until the ticket is no longer queued; (reply, number of calls)."""
        deadline = monotonic() + limit
        calls = 0
        while True:
            wait_s = max(1.0, min(60.0, deadline - monotonic()))
            r = await self.client.await_ticket(self.lane, tid, wait_s)
            calls += 1
            if r.ticket.state != "queued" or monotonic() >= deadline:
                return r, calls

    async def history_entry(self, tid: str) -> HistoryEntry | None:
        h = await self.client.history(self.lane, limit=200, project=DRILL_PROJECT)
        for e in h.entries:
            if e.ticket_id == tid:
                return e
        return None

    def live_of_run(self, tickets: list[Ticket]) -> list[Ticket]:
        return [
            t for t in tickets if t.project == DRILL_PROJECT and t.prompt_hash == self.prompt_hash
        ]

    # ------------------------------------------------------------------ preflight

    async def preflight(self) -> str:
        st = await self.client.status(self.lane)
        refusal = lane_refusal(st, self.lane, WORDING)
        if refusal is not None:
            raise DrillRefusedError(message=refusal)
        sb = await self.client.status(self.barrier_lane)
        if not sb.enforced:
            raise DrillRefusedError(
                message=f"the barrier lane {self.barrier_lane} is unenforced; give it a "
                "capacity (same route as the drill lane)"
            )
        await self.sync_clock()
        return f"{st.coordinator}, {self.lane} enforced, capacity 1"

    async def rendezvous(self) -> None:
        me = self.client
        hello = f"{me.machine_id}|{self.steps_total}"
        if self.role == "a":
            st = await me.status(self.lane)
            busy = [*st.held, *st.queued]
            expect(
                not busy and st.pause is None,
                f"{self.lane} is not idle ({len(st.held)} held, {len(st.queued)} queued"
                f"{', paused' if st.pause else ''}: "
                + ", ".join(f"{t.ticket_id} by {t.machine_id}" for t in busy)
                + "); a killed earlier run's drill tickets expire within "
                f"{DRILL_LEASE_SECONDS:g} s",
            )
            self.barrier.run_id = uuid.uuid4().hex[:12]
            self.prompt_hash = f"drill-{self.run_id}"
            await self.barrier.signal("hello", hello)
            self.note(
                f"run {self.run_id} announced on {self.barrier_lane}; waiting for role B "
                f"(up to {self.timeout:g} s)"
            )
            sig = await self.barrier.wait("hello", "arrive (start `lane drill --role b`)")
        else:
            self.note(f"looking for role A's announcement on {self.barrier_lane}")
            run_id, sig = await self.barrier.find_announcement(self.coord_now() - self.timeout)
            self.barrier.run_id = run_id
            self.prompt_hash = f"drill-{run_id}"
            await self.barrier.signal("hello", hello)
        self.partner_machine, self.partner_claim = sig.machine_id, sig.claim_id
        steps = sig.data.rsplit("|", 1)[-1]
        expect(
            steps == str(self.steps_total),
            f"role A runs {steps} steps, this role {self.steps_total}: give --partition to both "
            "roles or to neither (and run the same lane version on both computers)",
        )
        expect(
            sig.machine_id != me.machine_id,
            f"both roles run as machine {me.machine_id!r}: set a distinct LANE_MACHINE_ID on "
            "each computer",
        )
        self.note(
            f"run {self.run_id}: partner {self.barrier.other.upper()} is machine "
            f"{sig.machine_id} (claim {sig.claim_id})"
        )

    # ------------------------------------------------------------------ clean up

    async def finish(self, ok: bool) -> tuple[bool, str]:
        """Release every drill ticket, sync with the partner (on success), verify, release
        every barrier ticket. (cleanup ok, detail)"""
        released, problems = await release_each(list(self.made), self.release)
        after = ""
        if self.run_id:
            with contextlib.suppress(LaneClientError):
                if ok:
                    await self.barrier.signal("cleaned")
                    with contextlib.suppress(DrillFailed):
                        await self.barrier.wait("cleaned", "release its drill tickets")
                else:
                    await self.barrier.signal("abort", "see its output")
            try:
                st = await self.client.status(self.lane)
            except LaneClientError as exc:
                problems.append(f"status after the drill: {exc}")
            else:
                left = self.live_of_run([*st.held, *st.queued])
                if ok and left:
                    problems.append(
                        "still live on the drill lane: "
                        + ", ".join(f"{t.ticket_id} ({t.state})" for t in left)
                    )
                after = f"{len(left)} live drill tickets of this run left on {self.lane}"
                if left:
                    after += (
                        " (" + ", ".join(f"{t.ticket_id} by {t.machine_id}" for t in left) + ")"
                    )
        b_released, b_problems = await self.barrier.release_all()
        problems += b_problems
        detail = (
            f"released {released} of {len(self.made)} drill tickets and {b_released} of "
            f"{len(self.barrier.made)} barrier tickets"
        )
        if after:
            detail += f"; {after}"
        if problems:
            detail += f"; problems: {'; '.join(problems)}"
        return not problems, detail


__all__ = ["DrillRole"]
