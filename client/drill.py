"""`lane drill --role a|b`: the two-computer acceptance drill of SPEC §9 (no provider, no credits).

Two processes — normally two computers — run the six steps together on a dedicated test lane
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
7. (`--partition` only) B holds a 15 s lease and heartbeats; B's network is cut, the lease
   expires and A is promoted by the alarm; B's network returns, B reads `refreshed: false`
   three times, parks as lease-lost, and its late release cannot overwrite `expired`
   (history: outcome expired + lateOutcome lease-lost). The cut and the restore are done by
   whoever runs the drill when the `ACTION:` lines say so (scripts/drill-netns.sh does it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from client.api import SHARED_KINDS, LaneClient
from client.clock import monotonic, wall
from client.config import Settings
from client.errors import (
    BadRequestError,
    CoordinatorTimeoutError,
    CoordinatorUnreachableError,
    LaneClientError,
    MalformedReplyError,
    NotHolderError,
    PreProviderError,
    ReceiptConflictError,
    UnavailableError,
)
from client.models import HistoryEntry, LaneReply, ReleaseReply, Ticket
from coordinator.errors import LaneError
from coordinator.names import parse_lane

DEFAULT_DRILL_LANE = "drill:acceptance"
DEFAULT_PARTNER_TIMEOUT = 120.0  # seconds a role waits for its partner at any one point
FORBIDDEN_ACCOUNTS = frozenset({"main-unlimited"})
BARRIER_SUFFIX = "-barrier"
DRILL_PROJECT = "lane-drill"
BARRIER_PROJECT_PREFIX = "lane-drill-"
DRILL_LEASE_SECONDS = 60.0  # a killed run's drill tickets clear within a minute
BARRIER_LEASE_SECONDS = 900.0  # "long": barrier tickets live for the whole run
SHORT_LEASE_SECONDS = 15.0  # step 6 and step 7 (SPEC's minimum lease)
KEEPALIVE_INTERVAL = 20.0  # heartbeat of barrier (and held drill) tickets
POLL_INTERVAL = 0.25  # barrier polling
HISTORY_EVERY = 4  # every Nth poll also reads history (signals already released)
RACE_LEAD_SECONDS = 1.5  # A announces the race instant this far ahead (coordinator time)
MAX_PROMOTION_LATENESS = 10.0  # alarm promotion later than this after expiry is a failure
PARTITION_HEARTBEAT_INTERVAL = 2.0
PARTITION_CALL_TIMEOUT = 3.0
LEASE_LOST_AFTER = 3  # refreshed:false answers in a row (SPEC §8)
EXIT_OK, EXIT_FAIL, EXIT_PRE_PROVIDER, EXIT_INTERRUPTED = 0, 1, 3, 130

T = TypeVar("T")

STEP_TITLES = {
    "0": "preflight and rendezvous",
    "1": "A acquires shared-queue-drill-a → granted",
    "2": "B acquires distinct shared-queue-drill-b → queued at position 1",
    "3": "A and B race for shared-queue-race → one canonical ticket",
    "3b": "race ticket held → only its owner is granted",
    "4": "A releases its exact ticket → B's request is held",
    "5": "receipt recorded, replayed (idempotent), conflicting content → 409",
    "6": "short lease stops heartbeating → alarm promotes its waiter after expiry",
    "7": "B's link cut while holding → A promoted; B lease-lost; late release keeps expired",
}


class DrillRefusedError(LaneClientError):
    """The drill will not run here: production account, unenforced lane, not shared."""

    default_code = "drill-refused"


class DrillFailed(Exception):
    """One step's check failed (the message says what was expected and what was seen)."""


class PartnerTimeout(DrillFailed):
    pass


class PartnerAborted(DrillFailed):
    pass


def drill_lanes(
    lane: str | None, route: str | None, account: str | None, settings: Settings
) -> tuple[str, str]:
    """(drill lane, barrier lane); refuses production accounts whatever the flags say."""
    if lane and (route or account):
        raise BadRequestError(message="give --lane route:account, or --route/--account, not both")
    if lane:
        try:
            route_v, acct = parse_lane(lane)
        except LaneError as exc:
            raise BadRequestError(message=exc.message) from None
    else:
        d_route, d_acct = DEFAULT_DRILL_LANE.split(":")
        route_v, acct = route or d_route, account or d_acct
    name = f"{route_v}:{acct}"
    barrier = f"{name}{BARRIER_SUFFIX}"
    for candidate in (name, barrier):
        try:
            parse_lane(candidate)
        except LaneError as exc:
            raise BadRequestError(message=f"{candidate}: {exc.message}") from None
    if acct in FORBIDDEN_ACCOUNTS:
        raise DrillRefusedError(
            message=f"drill refuses account {acct!r}: it is the production account; "
            f"use a dedicated drill lane such as {DEFAULT_DRILL_LANE}"
        )
    if settings.account and acct == settings.account:
        raise DrillRefusedError(
            message=f"drill refuses account {acct!r}: it is this computer's LANE_ACCOUNT "
            f"(the account real renders use); use a dedicated drill lane such as "
            f"{DEFAULT_DRILL_LANE}"
        )
    return name, barrier


def _transient(exc: LaneClientError) -> bool:
    """A failure that says nothing about the lane (no answer, 5xx): worth retrying."""
    inner = exc.underlying if isinstance(exc, PreProviderError) else exc
    if inner is None:
        return False
    if isinstance(inner, CoordinatorUnreachableError | CoordinatorTimeoutError | UnavailableError):
        return True
    return isinstance(inner, MalformedReplyError) and inner.status >= 500


def _unwrap(exc: LaneClientError) -> LaneClientError:
    """The coordinator's own answer behind a fail-closed wrapper (403 becomes pre-provider)."""
    if isinstance(exc, PreProviderError) and exc.underlying is not None:
        return exc.underlying
    return exc


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _expect(cond: bool, detail: str) -> None:
    if not cond:
        raise DrillFailed(detail)


@dataclass(slots=True)
class Signal:
    """A partner's barrier ticket: what it said (promptHash) and who said it."""

    data: str
    machine_id: str | None
    claim_id: str | None
    enqueued_at: float | None
    live: bool


@dataclass(slots=True)
class StepResult:
    step: str
    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


class Barrier:
    """Rendezvous through the coordinator: signals are barrier-lane tickets (see module doc)."""

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
                if not _transient(exc) or monotonic() >= deadline:
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
        _expect(st.coordinator in SHARED_KINDS, f"coordinator is {st.coordinator!r}")
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
                if not _transient(exc):
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
                if not _transient(exc):
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
        released, problems = 0, []
        for tid in self.made:
            self._keep.pop((self.lane, tid), None)
            try:
                r = await self.client.release(self.lane, tid, "not-submitted", None, "lane drill")
            except LaneClientError as exc:
                problems.append(f"{tid}: {exc}")
                continue
            if r.released or r.reason in ("already-done", "expired"):
                released += 1
            else:
                problems.append(f"{tid}: {r.reason}")
        return released, problems


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
        self.steps_total = 7 if partition else 6
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
        if st.coordinator not in SHARED_KINDS:
            raise DrillRefusedError(
                message=f"the coordinator reports {st.coordinator!r}, not a shared kind "
                f"{sorted(SHARED_KINDS)}: the drill needs the shared coordinator"
            )
        if not st.enforced:
            raise DrillRefusedError(
                message=f"{self.lane} is unenforced here (its route has no capacity "
                "configured); the drill needs an enforced lane with capacity 1, e.g. "
                f'{DEFAULT_DRILL_LANE} with [routes."drill"] capacity = 1'
            )
        if st.capacity != 1:
            raise DrillRefusedError(
                message=f"{self.lane} has capacity {st.capacity}; the drill needs capacity 1"
            )
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
            _expect(
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
        _expect(
            steps == str(self.steps_total),
            f"role A runs {steps} steps, this role {self.steps_total}: give --partition to both "
            "roles or to neither",
        )
        _expect(
            sig.machine_id != me.machine_id,
            f"both roles run as machine {me.machine_id!r}: set a distinct LANE_MACHINE_ID on "
            "each computer",
        )
        self.note(
            f"run {self.run_id}: partner {self.barrier.other.upper()} is machine "
            f"{sig.machine_id} (claim {sig.claim_id})"
        )

    # ------------------------------------------------------------------ the steps

    async def step1(self) -> StepResult:
        if self.role == "a":
            t0 = monotonic()
            r = await self.acquire("shared-queue-drill-a", DRILL_LEASE_SECONDS)
            took = monotonic() - t0
            _expect(
                r.granted and r.ticket.state == "held",
                f"expected granted+held, got granted={r.granted} state={r.ticket.state} "
                f"(ticket {r.ticket_id})",
            )
            self.ids["a"] = r.ticket_id
            self.numbers["fence_a"] = float(r.ticket.fence or 0)
            await self.barrier.signal("s1", f"{r.ticket_id}|{r.ticket.fence}")
            return StepResult(
                "1",
                True,
                f"ticket {r.ticket_id} granted, fence {r.ticket.fence} ({_ms(took)})",
                {"ticketId": r.ticket_id, "fence": r.ticket.fence, "ms": took * 1000},
            )
        sig = await self.barrier.wait("s1", "finish step 1")
        tid, fence = sig.data.split("|")
        self.ids["a"], self.numbers["fence_a"] = tid, float(fence)
        st = await self.client.status(self.lane)
        held = [(t.ticket_id, t.machine_id) for t in st.held]
        _expect(
            held == [(tid, self.partner_machine)],
            f"status shows held {held}, expected only A's {tid} by {self.partner_machine}",
        )
        return StepResult(
            "1", True, f"status shows A's {tid} held by {self.partner_machine} (fence {fence})",
            {"ticketId": tid},
        )  # fmt: skip

    async def step2(self) -> StepResult:
        if self.role == "b":
            t0 = monotonic()
            r = await self.acquire("shared-queue-drill-b", DRILL_LEASE_SECONDS)
            took = monotonic() - t0
            _expect(
                not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
                f"expected queued at position 1, got state={r.ticket.state} "
                f"position={r.ticket.position} granted={r.granted} (ticket {r.ticket_id})",
            )
            self.ids["b"] = r.ticket_id
            await self.barrier.signal("s2", r.ticket_id)
            return StepResult(
                "2",
                True,
                f"ticket {r.ticket_id} queued at position 1, eta "
                f"{r.ticket.eta_seconds or 0:.0f} s ({_ms(took)})",
                {"ticketId": r.ticket_id, "ms": took * 1000},
            )
        sig = await self.barrier.wait("s2", "finish step 2")
        tid = sig.data
        self.ids["b"] = tid
        st = await self.client.status(self.lane)
        queued = [(t.ticket_id, t.position) for t in st.queued]
        _expect(queued == [(tid, 1)], f"status shows queued {queued}, expected [({tid}, 1)]")
        return StepResult("2", True, f"status shows B's {tid} queued at position 1",
                          {"ticketId": tid})  # fmt: skip

    async def step3(self) -> StepResult:
        if self.role == "a":
            go = self.coord_now() + RACE_LEAD_SECONDS
            await self.barrier.signal("s3go", f"{go:.3f}")
        else:
            go = float((await self.barrier.wait("s3go", "announce the race instant")).data)
        await asyncio.sleep(max(0.0, go - self.coord_now()))
        sent = self.coord_now()
        t0 = monotonic()
        r = await self.acquire("shared-queue-race", DRILL_LEASE_SECONDS)
        took = monotonic() - t0
        mine_owner = r.owner.machine_id == self.client.machine_id and (
            r.owner.claim_id == self.client.claim_id
        )
        await self.barrier.signal(
            "s3", f"{r.ticket_id}|{int(r.duplicate)}|{int(r.granted)}|{(sent - go) * 1000:.0f}"
        )
        sig = await self.barrier.wait("s3", "finish the race")
        o_tid, o_dup, o_granted, o_skew = sig.data.split("|")
        self.ids["race"] = r.ticket_id
        self.numbers["race_owner_is_me"] = float(mine_owner)
        _expect(
            o_tid == r.ticket_id,
            f"two tickets for one request: this role got {r.ticket_id}, the partner {o_tid}",
        )
        creators = int(not r.duplicate) + int(o_dup == "0")
        _expect(creators == 1, f"{creators} racers created the ticket; exactly one must")
        _expect(
            not r.granted and o_granted == "0",
            "a racer was granted while the lane is held by A's first ticket",
        )
        if mine_owner:
            _expect(not r.duplicate, "this role owns the race ticket but was told duplicate")
        else:
            _expect(
                r.duplicate
                and r.owner.machine_id == self.partner_machine
                and r.owner.claim_id == self.partner_claim,
                f"non-owner reply: duplicate={r.duplicate}, owner {r.owner.machine_id}/"
                f"{r.owner.claim_id}, expected the partner {self.partner_machine}",
            )
        owner = self.client.machine_id if mine_owner else self.partner_machine
        return StepResult(
            "3",
            True,
            f"one canonical ticket {r.ticket_id} on both sides, owner {owner}; this role "
            f"{'created it' if not r.duplicate else 'got duplicate=true, granted=false'} "
            f"(sent at race instant +{(sent - go) * 1000:.0f} ms, partner +{o_skew} ms; "
            f"{_ms(took)})",
            {"ticketId": r.ticket_id, "owner": owner, "duplicate": r.duplicate},
        )

    async def step4(self) -> StepResult:
        if self.role == "b":
            tid = self.ids["b"]
            t0 = monotonic()
            waiter = asyncio.create_task(self.await_until_not_queued(tid, self.timeout))
            await asyncio.sleep(0.2)  # parked before A is told to release
            await self.barrier.signal("s4ready")
            try:
                r, calls = await waiter
            finally:
                waiter.cancel()
            answered = self.coord_now()
            parked = monotonic() - t0
            _expect(
                r.granted and r.ticket.state == "held",
                f"await ended with state={r.ticket.state} granted={r.granted} after {parked:.1f} s",
            )
            expect_fence = int(self.numbers["fence_a"]) + 1
            _expect(
                r.ticket.fence == expect_fence,
                f"fence {r.ticket.fence}, expected {expect_fence} (A's fence + 1)",
            )
            lat = answered - (r.ticket.held_at or answered)
            await self.barrier.signal("s4done", f"{lat * 1000:.0f}|{r.ticket.fence}")
            self.keep[(self.lane, tid)] = DRILL_LEASE_SECONDS
            return StepResult(
                "4",
                True,
                f"B's {tid} held, fence {r.ticket.fence}: the parked await answered "
                f"{_ms(lat)} after the grant (parked {parked:.1f} s, {calls} call)",
                {"ticketId": tid, "awaitAnsweredMs": lat * 1000, "parkedSeconds": parked},
            )
        await self.barrier.wait("s4ready", "park its await")
        tid = self.ids["a"]
        t0 = monotonic()
        rel = await self.release(tid)
        took = monotonic() - t0
        _expect(rel.released, f"release of {tid} refused: {rel.reason}")
        _expect(
            rel.promoted[:1] == [self.ids["b"]],
            f"release promoted {rel.promoted}, expected B's {self.ids['b']}",
        )
        sig = await self.barrier.wait("s4done", "see its grant")
        lat_ms, fence = sig.data.split("|")
        return StepResult(
            "4",
            True,
            f"released {tid} ({_ms(took)}), promoted {rel.promoted[0]} in the same step; "
            f"B's parked await answered {lat_ms} ms after the grant (fence {fence})",
            {"ticketId": tid, "promoted": rel.promoted, "releaseMs": took * 1000},
        )

    def receipt_payload(self) -> dict[str, Any]:
        return {"drill": DRILL_PROJECT, "run": self.run_id, "step": 5, "check": "receipt"}

    async def step5(self) -> StepResult:
        tid = self.ids["b"]
        payload = self.receipt_payload()
        if self.role == "b":
            t0 = monotonic()
            r1 = await self.client.receipt(self.lane, tid, "lease-acquired", payload)
            t1 = monotonic()
            _expect(
                r1.stored and r1.http_status == 201,
                f"first write: HTTP {r1.http_status} stored={r1.stored}",
            )
            _expect(r1.content_hash_verified is True, "the coordinator did not verify the hash")
            r2 = await self.client.receipt(self.lane, tid, "lease-acquired", payload)
            t2 = monotonic()
            _expect(
                r2.http_status == 200 and r2.replay and not r2.stored,
                f"replay: HTTP {r2.http_status} replay={r2.replay} stored={r2.stored}",
            )
            other = {**payload, "check": "conflict"}
            try:
                await self.client.receipt(
                    self.lane, tid, "lease-acquired", other, receipt_id=r1.receipt_id
                )
            except ReceiptConflictError as exc:
                _expect(exc.status == 409, f"conflict answered HTTP {exc.status}")
            else:
                raise DrillFailed("same receiptId with other content was accepted (expected 409)")
            t3 = monotonic()
            await self.barrier.signal("s5", r1.receipt_id)
            return StepResult(
                "5",
                True,
                f"{r1.receipt_id}: 201 stored, hash verified ({_ms(t1 - t0)}); replay 200 "
                f"replay=true ({_ms(t2 - t1)}); other content 409 receipt-conflict "
                f"({_ms(t3 - t2)})",
                {"receiptId": r1.receipt_id, "ticketId": tid},
            )
        rid = (await self.barrier.wait("s5", "record its receipt")).data
        st = await self.client.status(self.lane, include_receipts=True)
        rows = [r for r in (st.recent_receipts or []) if r.receipt_id == rid]
        _expect(len(rows) == 1, f"status shows {len(rows)} rows for receipt {rid}, expected 1")
        row = rows[0]
        _expect(
            row.machine_id == self.partner_machine and row.ticket_id == tid,
            f"receipt row by {row.machine_id} on {row.ticket_id}",
        )
        _expect(row.content_hash_verified is True, "receipt row not hash-verified")
        _expect(row.payload == payload, f"stored payload {row.payload} is not the first write")
        try:
            await self.client.receipt(self.lane, tid, "references-applied", payload)
        except LaneClientError as exc:
            inner = _unwrap(exc)
            if not isinstance(inner, NotHolderError):
                raise
            refused = f"HTTP {inner.status} not-holder"
        else:
            raise DrillFailed("a non-holder machine's receipt was stored (expected 403)")
        return StepResult(
            "5",
            True,
            f"status shows {rid} once, by B (holder), hash verified, first content kept; "
            f"A's own write on B's ticket: {refused}",
            {"receiptId": rid},
        )

    async def step3b(self) -> StepResult:
        race = self.ids["race"]
        if self.role == "b":
            rel = await self.release(self.ids["b"])
            _expect(rel.released, f"release of {self.ids['b']} refused: {rel.reason}")
            _expect(rel.promoted == [race], f"release promoted {rel.promoted}, expected [{race}]")
            await self.barrier.signal("s3b-open", race)
        else:
            await self.barrier.wait("s3b-open", "release its ticket")
        if self.numbers["race_owner_is_me"]:
            r = await self.client.await_ticket(self.lane, race, 30)
            _expect(
                r.granted and r.ticket.state == "held",
                f"owner's await: state={r.ticket.state} granted={r.granted}",
            )
            await self.barrier.signal("s3b", f"owner-granted|{r.ticket.fence}")
            sig = await self.barrier.wait("s3b", "re-acquire the race ticket")
            rel2 = await self.release(race)
            _expect(rel2.released, f"release of the race ticket refused: {rel2.reason}")
            await self.barrier.signal("s3b-done")
            return StepResult(
                "3b",
                True,
                f"{race} held: owner {self.client.machine_id} granted on await (fence "
                f"{r.ticket.fence}); partner's re-acquire: {sig.data}; released",
                {"ticketId": race},
            )
        r = await self.acquire("shared-queue-race", DRILL_LEASE_SECONDS)
        _expect(
            r.ticket_id == race and r.duplicate and not r.granted and r.ticket.state == "held",
            f"non-owner re-acquire: ticket {r.ticket_id} duplicate={r.duplicate} "
            f"granted={r.granted} state={r.ticket.state}",
        )
        _expect(
            r.owner.machine_id == self.partner_machine and r.owner.claim_id == self.partner_claim,
            f"owner named {r.owner.machine_id}/{r.owner.claim_id}, expected the partner",
        )
        await self.barrier.signal("s3b", "granted=false,owner=partner")
        sig = await self.barrier.wait("s3b", "be granted the race ticket")
        await self.barrier.wait("s3b-done", "release the race ticket")
        return StepResult(
            "3b",
            True,
            f"{race} held by {self.partner_machine}: this role's re-acquire → duplicate, "
            f"granted=false, owner {r.owner.machine_id}; owner's await: {sig.data.split('|')[0]}",
            {"ticketId": race},
        )

    async def step6(self) -> StepResult:
        if self.role == "a":
            r = await self.acquire("shared-queue-drill-short", SHORT_LEASE_SECONDS)
            _expect(
                r.granted and r.ticket.state == "held" and r.ticket.lease_expires_at is not None,
                f"short lease not granted: state={r.ticket.state} granted={r.granted}",
            )
            expiry = r.ticket.lease_expires_at or 0.0
            tid = r.ticket_id
            await self.barrier.signal("s6", f"{tid}|{expiry:.6f}")
            # From here on this role makes no call on the drill lane until B reports.
            await self.barrier.wait("s6parked", "park its waiter")
            wait_for = self.timeout + SHORT_LEASE_SECONDS
            sig = await self.barrier.wait("s6done", "be promoted", timeout=wait_for)
            w_tid, late_ms, parked_s = sig.data.split("|")
            e = await self.history_entry(tid)
            _expect(
                e is not None and e.outcome == "expired",
                f"history of {tid}: {e.outcome if e else 'missing'}, expected expired",
            )
            assert e is not None
            _expect(
                e.ended_at is not None and abs(e.ended_at - expiry) < 0.001,
                f"expired at {e.ended_at}, lease said {expiry}",
            )
            inc = await self.client.incidents(self.lane, 50)
            reaped = [i for i in inc.incidents if i.kind == "lease-expired" and i.ticket_id == tid]
            _expect(len(reaped) == 1, f"{len(reaped)} lease-expired incidents for {tid}")
            return StepResult(
                "6",
                True,
                f"{tid} (lease {SHORT_LEASE_SECONDS:g} s, never heartbeated) expired → history "
                f"outcome expired, incident lease-expired; the alarm promoted B's {w_tid} "
                f"{late_ms} ms after expiry (B parked {parked_s} s in one await)",
                {"ticketId": tid, "waiter": w_tid, "latenessMs": float(late_ms)},
            )
        sig = await self.barrier.wait("s6", "hold its short lease")
        s_tid, exp = sig.data.split("|")
        expiry = float(exp)
        r = await self.acquire("shared-queue-drill-waiter", DRILL_LEASE_SECONDS)
        self.keep.pop((self.lane, r.ticket_id), None)  # no other call on the lane until promoted
        _expect(
            not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
            f"waiter: state={r.ticket.state} position={r.ticket.position}",
        )
        parked_at = self.coord_now()
        _expect(
            parked_at < expiry - 1.0,
            f"the waiter was parked only {expiry - parked_at:.1f} s before the expiry; the "
            "machine is too slow for this check — rerun",
        )
        wait_s = 60.0
        t0 = monotonic()
        task = asyncio.create_task(self.client.await_ticket(self.lane, r.ticket_id, wait_s))
        await asyncio.sleep(0.2)
        await self.barrier.signal("s6parked", r.ticket_id)
        try:
            w = await task
        finally:
            task.cancel()
        parked = monotonic() - t0
        _expect(
            w.granted and w.ticket.state == "held",
            f"after {parked:.1f} s the waiter is {w.ticket.state} (granted={w.granted})",
        )
        _expect(
            parked < wait_s - 1.0,
            f"the await answered only at its {wait_s:g} s limit: not woken by the alarm",
        )
        late = (w.ticket.held_at or 0.0) - expiry
        _expect(
            0.0 <= late <= MAX_PROMOTION_LATENESS,
            f"promoted {late:+.3f} s relative to the expiry "
            f"(expected 0..{MAX_PROMOTION_LATENESS:g})",
        )
        await self.barrier.signal("s6done", f"{r.ticket_id}|{late * 1000:.0f}|{parked:.1f}")
        rel = await self.release(r.ticket_id)
        _expect(rel.released, f"release of the waiter refused: {rel.reason}")
        return StepResult(
            "6",
            True,
            f"waiter {r.ticket_id} parked in one await {parked:.1f} s; A's {s_tid} expired and "
            f"the alarm promoted it {late * 1000:.0f} ms after expiry (fence {w.ticket.fence})",
            {"ticketId": r.ticket_id, "expiredTicket": s_tid, "latenessMs": late * 1000},
        )

    async def step7(self) -> StepResult:
        if self.role == "b":
            return await self._step7_b()
        sig = await self.barrier.wait("s7held", "hold its short lease")
        b_tid = sig.data
        r = await self.acquire("shared-queue-drill-partition-waiter", DRILL_LEASE_SECONDS)
        self.keep.pop((self.lane, r.ticket_id), None)
        _expect(
            not r.granted and r.ticket.state == "queued" and r.ticket.position == 1,
            f"waiter: state={r.ticket.state} position={r.ticket.position}",
        )
        t0 = monotonic()
        task = asyncio.create_task(
            self.await_until_not_queued(r.ticket_id, self.timeout + SHORT_LEASE_SECONDS)
        )
        await asyncio.sleep(0.2)
        await self.barrier.signal("s7parked", r.ticket_id)
        try:
            w, calls = await task
        finally:
            task.cancel()
        parked = monotonic() - t0
        _expect(
            w.granted and w.ticket.state == "held",
            f"after {parked:.1f} s A's waiter is {w.ticket.state}: B's lease never expired "
            "(was B's network cut?)",
        )
        e = await self.history_entry(b_tid)
        _expect(
            e is not None and e.outcome == "expired" and e.ended_at is not None,
            f"history of B's {b_tid}: {e.outcome if e else 'missing'}, expected expired",
        )
        assert e is not None and e.ended_at is not None
        late = (w.ticket.held_at or 0.0) - e.ended_at
        _expect(
            0.0 <= late <= MAX_PROMOTION_LATENESS,
            f"promoted {late:+.3f} s relative to B's expiry",
        )
        self.emit(
            f"ACTION: restore-link-b — reconnect computer B ({self.partner_machine}) to the "
            "network now"
        )
        done = await self.barrier.wait("s7done", "come back and report lease-lost")
        e2 = await self.history_entry(b_tid)
        _expect(
            e2 is not None and e2.outcome == "expired" and e2.late_outcome == "lease-lost",
            f"history of {b_tid}: outcome {e2.outcome if e2 else None}, lateOutcome "
            f"{e2.late_outcome if e2 else None}; expected expired + lease-lost",
        )
        rel = await self.release(r.ticket_id)
        _expect(rel.released, f"release of A's waiter refused: {rel.reason}")
        return StepResult(
            "7",
            True,
            f"B's {b_tid} expired while B was cut off; the alarm promoted A's {r.ticket_id} "
            f"{late * 1000:.0f} ms after expiry (parked {parked:.1f} s, {calls} await call(s)); "
            f"B reported {done.data}; history: outcome expired, lateOutcome lease-lost",
            {"ticketId": r.ticket_id, "expiredTicket": b_tid, "latenessMs": late * 1000},
        )

    async def _step7_b(self) -> StepResult:
        r = await self.acquire("shared-queue-drill-partition", SHORT_LEASE_SECONDS)
        tid = r.ticket_id
        _expect(
            r.granted and r.ticket.state == "held",
            f"B's short lease not granted: state={r.ticket.state}",
        )
        hb_client = LaneClient(
            self.settings.url or "",
            self.settings.token or "",
            self.settings.machine_id or "",
            self.settings.claim_id,
            timeout=PARTITION_CALL_TIMEOUT,
            required=True,
        )
        counts = {"refreshed": 0, "no-answer": 0, "false": 0}
        lost = asyncio.Event()

        async def heartbeats() -> None:
            in_a_row = 0
            while in_a_row < LEASE_LOST_AFTER:
                try:
                    h = await hb_client.heartbeat(self.lane, tid, SHORT_LEASE_SECONDS)
                except LaneClientError as exc:
                    if not _transient(exc):
                        raise
                    counts["no-answer"] += 1
                else:
                    if h.refreshed:
                        counts["refreshed"] += 1
                        in_a_row = 0
                    else:
                        counts["false"] += 1
                        in_a_row += 1
                        self.note(
                            f"heartbeat of {tid}: refreshed=false ({h.reason}) "
                            f"{in_a_row}/{LEASE_LOST_AFTER}"
                        )
                        if in_a_row >= LEASE_LOST_AFTER:
                            break
                await asyncio.sleep(PARTITION_HEARTBEAT_INTERVAL)
            lost.set()

        beat = asyncio.create_task(heartbeats())
        try:
            await self.barrier.signal("s7held", tid)
            await self.barrier.wait("s7parked", "park its waiter")
            self.emit(
                f"ACTION: cut-link-b — disconnect computer B ({self.client.machine_id}) from the "
                f"network now; A will say when to reconnect (B holds {tid}, lease "
                f"{SHORT_LEASE_SECONDS:g} s)"
            )
            limit = self.timeout + SHORT_LEASE_SECONDS
            done, _ = await asyncio.wait({beat}, timeout=limit)
            _expect(
                beat in done,
                f"no lease-lost within {limit:g} s (heartbeats: {counts}); was the link cut "
                "and restored?",
            )
            beat.result()
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, LaneClientError):
                await beat
            await hb_client.close()
        _expect(
            counts["no-answer"] >= 1,
            f"every heartbeat was answered ({counts}): the link was never cut",
        )
        self.note(f"parked as lease-lost: {tid} (needs: rerender:lease-lost; nothing resubmitted)")
        # The link just came back: calls are retried through transient failures.
        rel = await self.barrier.retrying(
            lambda: self.client.release(self.lane, tid, "lease-lost", None, "lane drill")
        )
        _expect(
            not rel.released and rel.reason in ("expired", "already-done"),
            f"late release: released={rel.released} reason={rel.reason} outcome={rel.outcome}",
        )
        e = await self.barrier.retrying(lambda: self.history_entry(tid))
        _expect(
            e is not None and e.outcome == "expired" and e.late_outcome == "lease-lost",
            f"history of {tid}: outcome {e.outcome if e else None}, lateOutcome "
            f"{e.late_outcome if e else None}",
        )
        await self.barrier.signal(
            "s7done", f"{counts['no-answer']} unanswered, {counts['false']}x refreshed=false"
        )
        return StepResult(
            "7",
            True,
            f"held {tid}; cut off: {counts['no-answer']} heartbeats unanswered; back: "
            f"{counts['false']}x refreshed=false (expired) → parked lease-lost; late release → "
            "released=false reason=expired; history: outcome expired, lateOutcome lease-lost",
            {"ticketId": tid, "heartbeats": counts},
        )

    # ------------------------------------------------------------------ run and clean up

    async def run_steps(self) -> None:
        steps: list[tuple[str, Callable[[], Awaitable[StepResult]]]] = [
            ("1", self.step1),
            ("2", self.step2),
            ("3", self.step3),
            ("4", self.step4),
            ("5", self.step5),
            ("3b", self.step3b),
            ("6", self.step6),
        ]
        if self.partition:
            steps.append(("7", self.step7))
        for name, fn in steps:
            try:
                self.report(await fn())
            except (DrillFailed, LaneClientError) as exc:
                self.report(StepResult(name, False, str(exc)))
                raise

    async def finish(self, ok: bool) -> tuple[bool, str]:
        """Release every drill ticket, sync with the partner (on success), verify, release
        every barrier ticket. (cleanup ok, detail)"""
        problems: list[str] = []
        released = 0
        for tid in list(self.made):
            try:
                r = await self.release(tid)
            except LaneClientError as exc:
                problems.append(f"{tid}: {exc}")
                continue
            if r.released or r.reason in ("already-done", "expired"):
                released += 1
            else:
                problems.append(f"{tid}: {r.reason}")
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


async def run_drill(
    settings: Settings,
    lane: str,
    barrier_lane: str,
    role: str,
    *,
    timeout: float = DEFAULT_PARTNER_TIMEOUT,
    partition: bool = False,
    json_out: bool = False,
    emit: Callable[[str], None],
    warn: Callable[[str], None],
) -> int:
    """Run one role; the exit code (0 all passed, 1 a failure, 3 pre-provider, 130 interrupted)."""
    if role not in ("a", "b"):
        raise BadRequestError(message="--role: must be a or b")
    if not settings.url:
        raise PreProviderError(
            "the drill needs the shared coordinator: LANE_COORDINATOR_URL is unset"
        )
    human = warn if json_out else emit
    session = aiohttp.ClientSession()
    try:
        drill = DrillRole(
            settings,
            lane,
            barrier_lane,
            role,
            timeout=timeout,
            partition=partition,
            session=session,
            emit=human,
        )
    except LaneClientError:
        await session.close()
        raise
    failure: BaseException | None = None
    interrupted = False
    loop = asyncio.get_running_loop()
    keeper: asyncio.Task[None] | None = None
    main = asyncio.create_task(_role_main(drill))

    def on_signal() -> None:
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            warn(f"lane: drill interrupted — releasing every ticket of role {role.upper()}")
            main.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        keeper = asyncio.create_task(drill.keepalive())
        try:
            await main
        except asyncio.CancelledError:
            if not interrupted:
                raise
        except (DrillFailed, LaneClientError) as exc:
            failure = exc
        keeper.cancel()
        ok_steps = failure is None and not interrupted
        cleanup_ok, cleanup_detail = await drill.finish(ok_steps)
        drill.emit(f"{'PASS' if cleanup_ok else 'FAIL'}  cleanup  [{drill.me}] {cleanup_detail}")
    finally:
        if keeper is not None:
            keeper.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        await drill.client.close()
        await session.close()

    passed = [r for r in drill.results if r.ok]
    ok = ok_steps and cleanup_ok
    numbered = sorted({r.step for r in passed}, key=lambda s: (int(s.rstrip("b")), s))
    summary = (
        f"drill {'passed' if ok else 'FAILED'}: role {drill.me} on {lane}, run "
        f"{drill.run_id or '-'}: {len(passed)}/{len(drill.results)} checks passed "
        f"(steps {', '.join(numbered) or 'none'}), cleanup {'ok' if cleanup_ok else 'FAILED'}"
    )
    if interrupted:
        summary += " — interrupted"
    elif isinstance(failure, PartnerTimeout):
        summary += f" — {failure}"
    if json_out:
        emit(
            json.dumps(
                {
                    "lane": lane,
                    "barrierLane": barrier_lane,
                    "role": role,
                    "runId": drill.run_id or None,
                    "machineId": settings.machine_id,
                    "partner": drill.partner_machine,
                    "ok": ok,
                    "interrupted": interrupted,
                    "steps": [
                        {"step": r.step, "ok": r.ok, "detail": r.detail, "data": r.data}
                        for r in drill.results
                    ],
                    "cleanup": {"ok": cleanup_ok, "detail": cleanup_detail},
                    "tickets": sorted(drill.made),
                    "barrierTickets": list(drill.barrier.made),
                },
                indent=2,
            )
        )
    human(summary)
    if interrupted:
        return EXIT_INTERRUPTED
    if ok:
        return EXIT_OK
    if isinstance(failure, PreProviderError):
        return EXIT_PRE_PROVIDER
    return EXIT_FAIL


async def _role_main(drill: DrillRole) -> None:
    try:
        what = await drill.preflight()
        drill.note(
            f"role {drill.me} as machine {drill.client.machine_id} (claim "
            f"{drill.client.claim_id}); {what}; barrier lane {drill.barrier_lane}"
        )
        await drill.rendezvous()
    except (DrillFailed, LaneClientError) as exc:
        drill.report(StepResult("0", False, str(exc)))
        raise
    await drill.run_steps()


__all__ = [
    "DEFAULT_DRILL_LANE",
    "DEFAULT_PARTNER_TIMEOUT",
    "DrillRefusedError",
    "drill_lanes",
    "run_drill",
]
