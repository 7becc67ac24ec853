"""The backend contract: what every lane backend promises a driver, run against each backend.

A driver codes against one method set (`acquire`, `await_ticket`, `heartbeat`, `release`,
`cooldown`, `status`, `history`, `receipt`, `with_claim`, `close`) and must get the same
answers from the shared coordinator and from the local single-computer queue. The tests live
once, in `BackendContract`; each backend is one subclass that provides

- the `backend` fixture: the backend for the identity (machine "studio-a", claim "claim-a"),
  on a fresh, empty store whose `solo:*` lanes have capacity 1;
- `peer(machine, claim)`: another identity on the same store (closed by the subclass);
- `advance(seconds)`: move the backend's injected clock;
- class attributes for what differs by design (`kind`, `stores_receipts`,
  `status_has_receipt_keys`).

A new backend (PostgreSQL replicas) is one more subclass; no test changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pytest

from client.api import LaneClient
from client.errors import (
    BadRequestError,
    NotFoundError,
    NotInFlightError,
    NotOwnerError,
    TicketNotHeldError,
)
from client.local import LocalQueue
from client.models import (
    CooldownReply,
    HeartbeatReply,
    HistoryReply,
    LaneReply,
    ReceiptReply,
    ReconcileReply,
    ReleaseReply,
    StatusReply,
)
from coordinator.store.postgres_db import migrate
from tests.harness import FakeClock, Running, TestManualClock, make_config, start_running

LANE = "solo:contract"  # capacity 1 on every backend
H = "sha256:" + "c0" * 32  # the prompt hash of every ticket here
T0 = 1_764_450_000.0


class ContractTarget(Protocol):
    """A backend under test: the method set the contract holds every backend to."""

    @property
    def kind(self) -> str: ...

    @property
    def machine_id(self) -> str: ...

    @property
    def claim_id(self) -> str | None: ...

    def with_claim(self, claim_id: str | None) -> ContractTarget: ...

    async def acquire(
        self,
        lane: str,
        project: str,
        scene: str,
        prompt_hash: str,
        lease_seconds: float | None = None,
    ) -> LaneReply: ...

    async def await_ticket(
        self, lane: str, ticket_id: str, wait_seconds: float = 30
    ) -> LaneReply: ...

    async def heartbeat(
        self, lane: str, ticket_id: str, lease_seconds: float | None = None
    ) -> HeartbeatReply: ...

    async def release(
        self,
        lane: str,
        ticket_id: str,
        outcome: str | None = None,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReleaseReply: ...

    async def receipt(
        self,
        lane: str,
        ticket_id: str,
        phase: str,
        payload: dict[str, Any],
        content_hash: str | None = None,
        *,
        receipt_id: str | None = None,
    ) -> ReceiptReply: ...

    async def cooldown(
        self,
        lane: str,
        ticket_id: str,
        retry_after_seconds: float,
        reason_code: str = ...,
    ) -> CooldownReply: ...

    async def reconcile(
        self,
        lane: str,
        ticket_id: str,
        outcome: str,
        provider_job_id: str | None = None,
        note: str | None = None,
    ) -> ReconcileReply: ...

    async def status(self, lane: str, include_receipts: bool = False) -> StatusReply: ...

    async def history(
        self, lane: str, limit: int = 100, project: str | None = None
    ) -> HistoryReply: ...

    async def close(self) -> None: ...


async def take(b: ContractTarget, scene: str, project: str = "proj", **kw: Any) -> LaneReply:
    """acquire(LANE, project, scene, H)."""
    return await b.acquire(LANE, project, scene, H, **kw)


def queued_ids(st: StatusReply) -> list[str]:
    return [t.ticket_id for t in st.queued]


def held_ids(st: StatusReply) -> list[str]:
    return [t.ticket_id for t in st.held]


class BackendContract:
    """The shared promises (see the module docstring). Not collected itself: no `Test`."""

    #: the `coordinator` every reply names
    kind: ClassVar[str]
    #: a receipt on a held ticket is stored (and a repeat is a replay)
    stores_receipts: ClassVar[bool]
    #: status(include_receipts=True) carries the receipt keys
    status_has_receipt_keys: ClassVar[bool]
    #: a submitted job whose lease ended keeps its slot (docs/protocol.md#in-flight): the
    #: shared coordinators; the local queue keeps no receipts, so it holds none
    holds_in_flight: ClassVar[bool]

    # ---------------------------------------------------------------- what a backend provides

    @pytest.fixture
    def backend(self) -> ContractTarget:
        """The backend for ("studio-a", "claim-a") on a fresh store (abstract)."""
        raise NotImplementedError(f"{type(self).__name__} must provide the backend fixture")

    def peer(self, machine: str, claim: str | None) -> ContractTarget:
        """Another identity on the same store as `backend`."""
        raise NotImplementedError

    async def advance(self, seconds: float) -> None:
        """Move the backend's clock forward."""
        raise NotImplementedError

    @pytest.fixture
    def other(self, backend: ContractTarget) -> ContractTarget:
        return self.peer("studio-b", "claim-b")

    # ---------------------------------------------------------------- acquire

    async def test_kind_and_identity(self, backend: ContractTarget) -> None:
        await backend.status(LANE)  # a client knows which coordinator it has once it answered
        assert backend.kind == self.kind
        assert (backend.machine_id, backend.claim_id) == ("studio-a", "claim-a")

    async def test_acquire_grants_on_a_free_lane(self, backend: ContractTarget) -> None:
        r = await take(backend, "s1")
        assert r.coordinator == self.kind and r.lane == LANE and r.enforced
        assert r.granted and not r.duplicate and r.pause is None
        assert r.ticket.state == "held" and r.ticket.position == 0
        assert isinstance(r.ticket.fence, int) and r.ticket.fence >= 1
        assert (r.owner.machine_id, r.owner.claim_id) == ("studio-a", "claim-a")
        assert r.ticket.lease_expires_at is not None and r.ticket.held_at is not None

    async def test_a_second_identity_queues_at_position_1(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        held = await take(backend, "s1")
        r = await take(other, "s2")
        assert not r.granted and not r.duplicate
        assert r.ticket.state == "queued" and r.ticket.position == 1 and r.ticket.fence is None
        assert (r.owner.machine_id, r.owner.claim_id) == ("studio-b", "claim-b")
        st = await backend.status(LANE)
        assert held_ids(st) == [held.ticket_id] and queued_ids(st) == [r.ticket_id]

    async def test_a_duplicate_identity_converges_on_one_ticket(
        self, backend: ContractTarget
    ) -> None:
        first = await take(backend, "s1")
        again = await take(backend, "s1")  # the owner's repeat (a retried request)
        assert again.ticket_id == first.ticket_id and again.duplicate
        assert again.granted and again.ticket.fence == first.ticket.fence
        st = await backend.status(LANE)
        assert held_ids(st) == [first.ticket_id] and st.queued == []

    async def test_a_non_owners_duplicate_is_never_granted(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        first = await take(backend, "s1")
        dup = await take(other, "s1")
        assert dup.ticket_id == first.ticket_id and dup.duplicate and not dup.granted
        assert (dup.owner.machine_id, dup.owner.claim_id) == ("studio-a", "claim-a")
        # The same machine with another claim is another owner too.
        sibling = await take(backend.with_claim("claim-other"), "s1")
        assert sibling.ticket_id == first.ticket_id and sibling.duplicate and not sibling.granted
        st = await backend.status(LANE)
        assert held_ids(st) == [first.ticket_id] and st.queued == []

    async def test_fences_strictly_increase_across_grants(self, backend: ContractTarget) -> None:
        fences = []
        for i in range(4):
            r = await take(backend, f"s{i}")
            assert r.granted and r.ticket.fence is not None
            fences.append(r.ticket.fence)
            await backend.release(LANE, r.ticket_id, "completed")
        assert fences == sorted(set(fences)) and len(fences) == 4

    async def test_a_bad_lane_name_is_a_bad_request(self, backend: ContractTarget) -> None:
        with pytest.raises(BadRequestError):
            await backend.acquire("no-account-part", "proj", "s1", H)

    # ---------------------------------------------------------------- release and await

    async def test_release_promotes_the_waiter_and_await_returns_it_held(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        rel = await backend.release(LANE, a.ticket_id, "completed")
        assert rel.coordinator == self.kind
        assert rel.released and rel.state == "done" and rel.outcome == "completed"
        assert rel.promoted == [b.ticket_id] and rel.reason is None
        got = await other.await_ticket(LANE, b.ticket_id, 5)
        assert got.granted and got.ticket.state == "held" and got.ticket.position == 0
        assert a.ticket.fence is not None and got.ticket.fence is not None
        assert got.ticket.fence > a.ticket.fence

    async def test_a_parked_await_wakes_when_the_holder_releases(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        waiter = asyncio.create_task(other.await_ticket(LANE, b.ticket_id, 30))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await backend.release(LANE, a.ticket_id, "completed")
        got = await asyncio.wait_for(waiter, 20)
        assert got.granted and got.ticket.state == "held"

    async def test_await_is_for_the_owner_of_a_known_ticket(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        with pytest.raises(NotOwnerError):
            await other.await_ticket(LANE, a.ticket_id, 1)
        with pytest.raises(NotFoundError):
            await backend.await_ticket(LANE, "t_no-such-ticket", 1)

    async def test_a_waiter_may_leave_without_promoting_anyone(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        rel = await other.release(LANE, b.ticket_id, "not-submitted")
        assert rel.released and rel.state == "done" and rel.promoted == []
        st = await backend.status(LANE)
        assert held_ids(st) == [a.ticket_id] and st.queued == []

    async def test_release_by_a_non_owner_changes_nothing(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        rel = await other.release(LANE, a.ticket_id, "completed")
        assert not rel.released and rel.reason == "not-owner"
        assert held_ids(await backend.status(LANE)) == [a.ticket_id]

    async def test_release_of_a_done_ticket_is_already_done(self, backend: ContractTarget) -> None:
        a = await take(backend, "s1")
        assert (await backend.release(LANE, a.ticket_id, "completed")).released
        again = await backend.release(LANE, a.ticket_id, "failed")
        assert not again.released and again.reason == "already-done"
        assert again.state == "done" and again.outcome == "completed"

    async def test_ticket_calls_on_an_unknown_ticket_are_not_found(
        self, backend: ContractTarget
    ) -> None:
        with pytest.raises(NotFoundError):  # the lane was never used
            await backend.heartbeat(LANE, "t_no-such-ticket")
        await take(backend, "s1")
        with pytest.raises(NotFoundError):  # the lane exists, the ticket does not
            await backend.release(LANE, "t_no-such-ticket")

    # ---------------------------------------------------------------- heartbeat

    async def test_heartbeat_refreshes_the_lease(self, backend: ContractTarget) -> None:
        a = await take(backend, "s1", lease_seconds=60)
        assert a.ticket.lease_expires_at is not None
        await self.advance(10)
        hb = await backend.heartbeat(LANE, a.ticket_id)
        assert hb.coordinator == self.kind
        assert hb.refreshed and hb.state == "held" and hb.reason is None
        assert hb.fence == a.ticket.fence
        assert hb.lease_expires_at == pytest.approx(a.ticket.lease_expires_at + 10)
        longer = await backend.heartbeat(LANE, a.ticket_id, lease_seconds=120)
        assert longer.lease_expires_at == pytest.approx(a.ticket.lease_expires_at - 60 + 10 + 120)

    async def test_heartbeat_answers_not_held_not_owner_and_done(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        waiting = await other.heartbeat(LANE, b.ticket_id)
        assert not waiting.refreshed and waiting.reason == "not-held"
        assert waiting.state == "queued"
        foreign = await other.heartbeat(LANE, a.ticket_id)
        assert not foreign.refreshed and foreign.reason == "not-owner"
        assert foreign.lease_expires_at is None and foreign.fence is None
        await backend.release(LANE, a.ticket_id, "completed")
        done = await backend.heartbeat(LANE, a.ticket_id)
        assert not done.refreshed and done.reason == "done" and done.state == "done"

    async def test_lease_expiry_promotes_the_waiter(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1", lease_seconds=15)
        b = await take(other, "s2")
        await self.advance(16)  # no heartbeat: the lease ran out
        got = await other.await_ticket(LANE, b.ticket_id, 5)
        assert got.granted and got.ticket.state == "held"
        hb = await backend.heartbeat(LANE, a.ticket_id)
        assert not hb.refreshed and hb.reason == "expired" and hb.state == "expired"
        late = await backend.release(LANE, a.ticket_id, "completed")
        assert not late.released and late.reason == "expired" and late.outcome == "expired"
        h = await backend.history(LANE)
        assert {e.ticket_id: e.outcome for e in h.entries} == {a.ticket_id: "expired"}
        assert h.entries[0].late_outcome == "completed"

    # ---------------------------------------------------------------- fairness

    async def test_round_robin_across_projects(self, backend: ContractTarget) -> None:
        """Only A has been granted; queued A1, A2, B1, C1, B2 -> B1, C1, A1, B2, A2."""
        pb, pc = self.peer("studio-b", "claim-b"), self.peer("studio-c", "claim-c")
        a0 = await take(backend, "a0", "A")
        assert a0.granted
        owners: dict[str, ContractTarget] = {a0.ticket_id: backend}
        names: dict[str, str] = {}
        for who, project, scene in [
            (backend, "A", "a1"),
            (backend, "A", "a2"),
            (pb, "B", "b1"),
            (pc, "C", "c1"),
            (pb, "B", "b2"),
        ]:
            r = await take(who, scene, project)
            assert r.ticket.state == "queued"
            owners[r.ticket_id], names[r.ticket_id] = who, scene
        expected = ["b1", "c1", "a1", "b2", "a2"]
        st = await backend.status(LANE)
        assert [names[t] for t in queued_ids(st)] == expected
        assert [t.position for t in st.queued] == [1, 2, 3, 4, 5]
        granted, holder = [], a0.ticket_id
        for _ in expected:
            rel = await owners[holder].release(LANE, holder, "completed")
            [holder] = rel.promoted
            granted.append(names[holder])
        assert granted == expected

    # ---------------------------------------------------------------- cooldown

    async def test_cooldown_by_the_holder_pauses_the_lane(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        cd = await backend.cooldown(LANE, a.ticket_id, 60)
        assert cd.coordinator == self.kind and cd.paused and not cd.extended
        assert cd.pause is not None and cd.pause.machine_id == "studio-a"
        assert cd.pause.until == pytest.approx(cd.pause.started_at + 60)
        rel = await backend.release(LANE, a.ticket_id, "not-submitted")
        assert rel.released and rel.promoted == []  # paused: nobody is promoted
        late = await take(self.peer("studio-c", "claim-c"), "s3")
        assert late.ticket.state == "queued" and late.pause is not None
        st = await backend.status(LANE)
        assert st.held == [] and st.pause is not None
        await self.advance(61)  # the pause ends: the first waiter is promoted
        got = await other.await_ticket(LANE, b.ticket_id, 5)
        assert got.granted and got.pause is None

    async def test_cooldown_by_a_non_holder_is_refused(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        b = await take(other, "s2")
        with pytest.raises(TicketNotHeldError):
            await other.cooldown(LANE, b.ticket_id, 60)  # its owner, but it only waits
        with pytest.raises(NotOwnerError):
            await other.cooldown(LANE, a.ticket_id, 60)
        assert (await backend.status(LANE)).pause is None

    # ---------------------------------------------------------------- reads

    async def test_history_lists_the_released_ticket_with_outcome_and_counts(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        a = await take(backend, "s1", "film")
        b = await take(other, "s2", "ad")
        await backend.release(LANE, a.ticket_id, "completed", "job-1", "all good")
        await other.release(LANE, b.ticket_id, "failed")
        h = await backend.history(LANE)
        assert h.coordinator == self.kind and h.lane == LANE and h.enforced
        by_id = {e.ticket_id: e for e in h.entries}
        assert set(by_id) == {a.ticket_id, b.ticket_id}
        first = by_id[a.ticket_id]
        assert first.outcome == "completed"
        assert (first.provider_job_id, first.note) == ("job-1", "all good")
        assert (first.project, first.scene, first.machine_id) == ("film", "s1", "studio-a")
        assert first.fence == a.ticket.fence
        assert h.counts == {"completed": 1, "failed": 1} and h.retained == 2
        only = await backend.history(LANE, project="ad")
        assert [e.ticket_id for e in only.entries] == [b.ticket_id]

    async def test_status_for_an_unknown_lane_is_empty_and_enforced(
        self, backend: ContractTarget
    ) -> None:
        st = await backend.status("solo:never-used")
        assert st.coordinator == self.kind and st.lane == "solo:never-used"
        assert st.enforced and st.capacity == 1
        assert st.held == [] and st.queued == [] and st.pause is None
        assert (await backend.history("solo:never-used")).entries == []

    # ---------------------------------------------------------------- receipts, claims

    async def test_receipts_follow_the_backends_storage_rule(self, backend: ContractTarget) -> None:
        a = await take(backend, "s1")
        rec = await backend.receipt(LANE, a.ticket_id, "lease-acquired", {"fence": 1})
        assert rec.coordinator == self.kind
        assert rec.receipt_id.startswith(f"{a.ticket_id}:lease-acquired:")
        assert rec.content_hash.startswith("sha256:")
        assert rec.stored is self.stores_receipts and not rec.replay
        again = await backend.receipt(LANE, a.ticket_id, "lease-acquired", {"fence": 1})
        assert again.receipt_id == rec.receipt_id
        assert again.replay is self.stores_receipts and not again.stored
        st = await backend.status(LANE, include_receipts=True)
        assert (st.recent_receipts is not None) is self.status_has_receipt_keys
        if st.recent_receipts is not None:
            assert [r.receipt_id for r in st.recent_receipts] == [rec.receipt_id]

    # ---------------------------------------------------------------- in-flight jobs

    async def test_a_submitted_job_whose_lease_ran_out_keeps_its_slot_until_it_ends(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        """docs/protocol.md#in-flight: a lease that runs out after its provider-submitted
        receipt leaves the job's slot taken (the waiter stays queued) until the
        provider-terminal receipt on the ended ticket, which promotes the waiter; a backend
        with no receipts holds nothing."""
        a = await take(backend, "s1", lease_seconds=15)
        await backend.receipt(LANE, a.ticket.ticket_id, "provider-submitted", {"job": "j1"})
        b = await take(other, "s2")
        await self.advance(16)  # no heartbeat: the lease ran out while the job may still run
        st = await other.status(LANE)
        if not self.holds_in_flight:
            assert held_ids(st) == [b.ticket.ticket_id] and st.in_flight == []
            return
        assert held_ids(st) == [] and queued_ids(st) == [b.ticket.ticket_id]
        assert [j.ticket_id for j in st.in_flight] == [a.ticket.ticket_id]
        job = st.in_flight[0]
        assert job.hold_until == job.submitted_at + 1800  # the default in_flight_hold_seconds
        again = await other.acquire(LANE, "proj", "s2", H)  # the owner's retry: still queued
        assert not again.granted and again.ticket.state == "queued"
        await backend.receipt(LANE, a.ticket.ticket_id, "provider-terminal", {"job": "j1"})
        got = await other.await_ticket(LANE, b.ticket.ticket_id, 5)
        assert got.granted and got.ticket.state == "held"
        assert (await other.status(LANE)).in_flight == []
        row = {e.ticket_id: e for e in (await backend.history(LANE)).entries}[a.ticket.ticket_id]
        assert row.outcome == "expired" and row.in_flight_ended == "receipt"

    async def test_reconcile_ends_a_hold_and_nothing_else(
        self, backend: ContractTarget, other: ContractTarget
    ) -> None:
        """docs/protocol.md#reconcile: the ticket's machine ends its job's hold (the waiter is
        promoted in the same step); a ticket that holds no slot is 409 not-in-flight."""
        a = await take(backend, "s1")
        await backend.receipt(LANE, a.ticket.ticket_id, "provider-submitted", {"job": "j2"})
        b = await take(other, "s2")
        lost = await backend.release(LANE, a.ticket.ticket_id, "lease-lost")
        assert lost.released
        if not self.holds_in_flight:
            assert lost.promoted == [b.ticket.ticket_id]
            with pytest.raises(NotInFlightError):
                await backend.reconcile(LANE, a.ticket.ticket_id, "completed")
            return
        assert lost.promoted == []
        with pytest.raises(NotInFlightError):  # a live ticket holds no in-flight slot
            await other.reconcile(LANE, b.ticket.ticket_id, "completed")
        done = await backend.reconcile(LANE, a.ticket.ticket_id, "not-found")
        assert done.reconciled and done.promoted == [b.ticket.ticket_id]
        with pytest.raises(NotInFlightError):  # its hold already ended
            await backend.reconcile(LANE, a.ticket.ticket_id, "completed")

    async def test_with_claim_is_a_sibling_with_another_claim(
        self, backend: ContractTarget
    ) -> None:
        a = await take(backend, "s1")
        same = backend.with_claim("claim-a")
        assert (same.machine_id, same.claim_id) == ("studio-a", "claim-a")
        assert (await same.heartbeat(LANE, a.ticket_id)).refreshed
        stranger = backend.with_claim("claim-x")
        assert (await stranger.heartbeat(LANE, a.ticket_id)).reason == "not-owner"
        machine_only = backend.with_claim(None)  # the machine-only owner rule
        assert machine_only.claim_id is None
        assert (await machine_only.release(LANE, a.ticket_id, "completed")).released


# ==================================================================== the backends


class TestLaneClientOnServer(BackendContract):
    """`LaneClient` against the real coordinator in-process (SQLite, ManualClock)."""

    kind = "actor-sqlite"
    stores_receipts = True
    status_has_receipt_keys = True
    holds_in_flight = True

    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[ContractTarget]:
        self.clock = TestManualClock(T0)
        self.server: Running = await start_running(
            tmp_path / "data", config=make_config(), clock=self.clock
        )
        self.opened: list[LaneClient] = []
        try:
            yield self.peer("studio-a", "claim-a")
        finally:
            for c in self.opened:
                await c.close()
            await self.server.stop()

    def peer(self, machine: str, claim: str | None) -> ContractTarget:
        c = LaneClient(self.server.url, self.server.token, machine, claim)
        self.opened.append(c)
        return c

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)  # the next call's job catches the lane up with time
        await asyncio.sleep(0)


class TestLocalQueue(BackendContract):
    """`LocalQueue` on a temp state dir (its own LaneCore on SQLite, an injected clock)."""

    kind = "local-sqlite"
    stores_receipts = False  # the local queue keeps no receipts
    status_has_receipt_keys = False
    holds_in_flight = False  # ...so no submit is known to it

    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[ContractTarget]:
        self.clock = FakeClock(T0)
        self.state_dir = tmp_path / "state"
        self.opened: list[LocalQueue] = []
        try:
            yield self.peer("studio-a", "claim-a")
        finally:
            for q in self.opened:
                await q.close()

    def peer(self, machine: str, claim: str | None) -> ContractTarget:
        q = LocalQueue(self.state_dir, machine, claim, clock=self.clock, poll_interval=0.02)
        self.opened.append(q)
        return q

    async def advance(self, seconds: float) -> None:
        self.clock.now += seconds


class TestLaneClientOnPostgres(TestLaneClientOnServer):
    """`LaneClient` against one replica on PostgreSQL (a fresh database per test)."""

    kind = "actor-postgres"

    @pytest.fixture
    async def backend(self, tmp_path: Path, pg_dsn: str) -> AsyncIterator[ContractTarget]:
        migrate(pg_dsn)
        self.clock = TestManualClock(T0)
        self.server = await start_running(
            tmp_path / "data", config=make_config(), clock=self.clock, store=pg_dsn
        )
        self.opened = []
        try:
            yield self.peer("studio-a", "claim-a")
        finally:
            for c in self.opened:
                await c.close()
            await self.server.stop()


class Alternating:
    """One identity whose calls alternate between two replicas (every call, in turn)."""

    def __init__(self, clients: list[LaneClient]) -> None:
        self._clients = clients
        self._turn = 0
        self._last = clients[0]

    def _next(self) -> LaneClient:
        self._turn += 1
        self._last = self._clients[self._turn % len(self._clients)]
        return self._last

    @property
    def kind(self) -> str:
        return self._last.kind

    @property
    def machine_id(self) -> str:
        return self._clients[0].machine_id

    @property
    def claim_id(self) -> str | None:
        return self._clients[0].claim_id

    def with_claim(self, claim_id: str | None) -> Alternating:
        return Alternating([c.with_claim(claim_id) for c in self._clients])

    async def acquire(self, *a: Any, **kw: Any) -> LaneReply:
        return await self._next().acquire(*a, **kw)

    async def await_ticket(self, *a: Any, **kw: Any) -> LaneReply:
        return await self._next().await_ticket(*a, **kw)

    async def heartbeat(self, *a: Any, **kw: Any) -> HeartbeatReply:
        return await self._next().heartbeat(*a, **kw)

    async def release(self, *a: Any, **kw: Any) -> ReleaseReply:
        return await self._next().release(*a, **kw)

    async def receipt(self, *a: Any, **kw: Any) -> ReceiptReply:
        return await self._next().receipt(*a, **kw)

    async def cooldown(self, *a: Any, **kw: Any) -> CooldownReply:
        return await self._next().cooldown(*a, **kw)

    async def reconcile(self, *a: Any, **kw: Any) -> ReconcileReply:
        return await self._next().reconcile(*a, **kw)

    async def status(self, *a: Any, **kw: Any) -> StatusReply:
        return await self._next().status(*a, **kw)

    async def history(self, *a: Any, **kw: Any) -> HistoryReply:
        return await self._next().history(*a, **kw)

    async def close(self) -> None:
        for c in self._clients:
            await c.close()


class TestTwoReplicasAlternating(BackendContract):
    """Two replicas on one PostgreSQL database; every identity's calls alternate between
    them, so each call finds the lane last changed by the other replica."""

    kind = "actor-postgres"
    stores_receipts = True
    status_has_receipt_keys = True
    holds_in_flight = True

    @pytest.fixture
    async def backend(self, tmp_path: Path, pg_dsn: str) -> AsyncIterator[ContractTarget]:
        migrate(pg_dsn)
        self.clock = TestManualClock(T0)
        self.servers = [
            await start_running(
                tmp_path / f"data{i}", config=make_config(), clock=self.clock, store=pg_dsn
            )
            for i in range(2)
        ]
        self.opened: list[Alternating] = []
        try:
            yield self.peer("studio-a", "claim-a")
        finally:
            for c in self.opened:
                await c.close()
            for srv in self.servers:
                await srv.stop()

    def peer(self, machine: str, claim: str | None) -> ContractTarget:
        alt = Alternating([LaneClient(srv.url, srv.token, machine, claim) for srv in self.servers])
        self.opened.append(alt)
        return alt

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await asyncio.sleep(0)
