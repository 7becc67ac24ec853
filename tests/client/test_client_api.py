"""LaneClient against the real coordinator on loopback: every endpoint, typed replies."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import sqlite3
import time
from typing import Any

import pytest
import rfc8785

from client.api import LaneClient
from client.errors import (
    BadRequestError,
    NotFoundError,
    NotHolderError,
    NotOwnerError,
    ReceiptConflictError,
    TicketNotHeldError,
)
from client.models import LaneReply, StatusReply
from client.sync import SyncLaneClient
from coordinator.protocol.names import lane_file_name
from tests.client.kit import UNENFORCED_LANE
from tests.harness import ThreadedCoordinator

LANE = "render:main"


def mk(
    s: ThreadedCoordinator, machine: str = "studio-a", claim: str | None = "claim-a"
) -> LaneClient:
    return LaneClient(s.url, s.token, machine, claim, timeout=10)


async def test_acquire_queue_dedupe_and_owner_retry(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "proj", "s1", "h1")
        assert isinstance(ra, LaneReply)
        assert ra.coordinator == "actor-sqlite" and ra.enforced
        assert ra.granted and ra.state == "held" and ra.ticket.fence == 1
        assert ra.ticket_id.startswith("t_") and ra.ticket.position == 0
        assert ra.owner.machine_id == "studio-a" and ra.owner.claim_id == "claim-a"

        rb = await b.acquire(LANE, "proj", "s2", "h2", lease_seconds=60)
        assert not rb.granted and rb.state == "queued" and rb.ticket.position == 1
        assert rb.ticket.eta_seconds is not None and rb.ticket.eta_seconds > 0

        dup = await b.acquire(LANE, "proj", "s1", "h1")  # A's request, from B
        assert dup.duplicate and dup.ticket_id == ra.ticket_id and not dup.granted
        assert dup.owner.machine_id == "studio-a" and dup.owner.claim_id == "claim-a"

        again = await a.acquire(LANE, "proj", "s1", "h1")  # the owner's retry
        assert again.duplicate and again.granted and again.ticket_id == ra.ticket_id


async def test_racing_identical_acquires_converge(coordinator: ThreadedCoordinator) -> None:
    clients = [mk(coordinator, f"m{i}", f"c{i}") for i in range(6)]
    try:
        replies = await asyncio.gather(*(c.acquire(LANE, "p", "race", "x") for c in clients))
        assert len({r.ticket_id for r in replies}) == 1
        assert sum(r.granted for r in replies) == 1
        assert sum(not r.duplicate for r in replies) == 1
    finally:
        for c in clients:
            await c.close()


async def test_await_learns_grant_on_release(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        rb = await b.acquire(LANE, "p", "2", "b")
        waiter = asyncio.create_task(b.await_ticket(LANE, rb.ticket_id, wait_seconds=30))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        started = time.monotonic()
        rel = await a.release(LANE, ra.ticket_id, "completed", "job-1", "fine")
        got = await asyncio.wait_for(waiter, 30)
        assert rel.released and rel.promoted == [rb.ticket_id] and rel.state == "done"
        assert got.granted and got.state == "held" and not got.duplicate
        assert time.monotonic() - started < 20  # answered by the grant, not the 30 s wait


async def test_await_times_out_still_queued(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        await a.acquire(LANE, "p", "1", "a")
        rb = await b.acquire(LANE, "p", "2", "b")
        started = time.monotonic()
        r = await b.await_ticket(LANE, rb.ticket_id, wait_seconds=1)
        assert r.state == "queued" and not r.granted
        assert time.monotonic() - started >= 0.9


async def test_await_not_owner_and_unknown(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        with pytest.raises(NotOwnerError) as ei:
            await b.await_ticket(LANE, ra.ticket_id, 1)
        assert ei.value.status == 403 and ei.value.code == "not-owner"
        with pytest.raises(NotFoundError) as nf:
            await a.heartbeat(LANE, "t_nope")
        assert nf.value.status == 404


async def test_heartbeat_answers(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-a", "claim-other") as other:
        ra = await a.acquire(LANE, "p", "1", "a", lease_seconds=30)
        rb = await a.acquire(LANE, "p", "2", "b")
        h = await a.heartbeat(LANE, ra.ticket_id, lease_seconds=120)
        assert h.refreshed and h.state == "held" and h.reason is None and h.fence == 1
        assert h.lease_expires_at is not None
        assert h.lease_expires_at > (ra.ticket.lease_expires_at or 0)
        q = await a.heartbeat(LANE, rb.ticket_id)
        assert not q.refreshed and q.reason == "not-held" and q.state == "queued"
        x = await other.heartbeat(LANE, ra.ticket_id)
        assert not x.refreshed and x.reason == "not-owner"


async def test_release_answers(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        no = await b.release(LANE, ra.ticket_id, "completed")
        assert not no.released and no.reason == "not-owner"
        ok = await a.release(LANE, ra.ticket_id, "failed", provider_job_id="j", note="n")
        assert ok.released and ok.outcome == "failed" and ok.reason is None
        again = await a.release(LANE, ra.ticket_id, "completed")
        assert not again.released and again.reason == "already-done"
        # A hand release naming no claim, from the same machine, unwedges a driver's ticket.
        rb = await a.acquire(LANE, "p", "2", "b")
        async with LaneClient(coordinator.url, coordinator.token, "studio-a") as hand:
            r = await hand.release(LANE, rb.ticket_id)
        assert r.released and r.outcome is None


async def test_receipt_store_replay_conflict_and_hash(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        payload: dict[str, Any] = {"b": [1, 2.5, "x"], "a": {"é": True}, "n": 10}
        r1 = await a.receipt(LANE, ra.ticket_id, "lease-acquired", payload)
        expected = "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
        assert r1.content_hash == expected
        assert r1.receipt_id == f"{ra.ticket_id}:lease-acquired:{expected[7:23]}"
        assert r1.stored and not r1.replay and r1.content_hash_verified is True
        assert r1.http_status == 201

        r2 = await a.receipt(LANE, ra.ticket_id, "lease-acquired", dict(reversed(payload.items())))
        assert not r2.stored and r2.replay and r2.http_status == 200

        with pytest.raises(ReceiptConflictError) as ei:
            await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"other": 1},
                            receipt_id=r1.receipt_id)  # fmt: skip
        assert ei.value.status == 409

        wrong = "sha256:" + "0" * 64
        r3 = await a.receipt(LANE, ra.ticket_id, "provider-submitted", {"job": "j"}, wrong)
        assert r3.stored and r3.content_hash_verified is False and r3.content_hash == wrong

        with pytest.raises(NotHolderError):
            await b.receipt(LANE, ra.ticket_id, "provider-terminal", {"x": 1})
        with pytest.raises(BadRequestError):
            await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"n": float("nan")})


async def test_cooldown_pause_and_refusals(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        rb = await b.acquire(LANE, "p", "2", "b")
        with pytest.raises(TicketNotHeldError) as tnh:
            await b.cooldown(LANE, rb.ticket_id, 60)
        assert tnh.value.status == 409
        with pytest.raises(NotOwnerError):
            await b.cooldown(LANE, ra.ticket_id, 60)
        cd = await a.cooldown(LANE, ra.ticket_id, 120)
        assert cd.paused and cd.pause is not None and not cd.extended
        assert cd.pause.reason_code == "provider-human-check" and cd.pause.machine_id == "studio-a"
        shorter = await a.cooldown(LANE, ra.ticket_id, 30)
        assert shorter.pause is not None and shorter.pause.until == cd.pause.until
        await a.release(LANE, ra.ticket_id, "not-submitted")
        st = await b.status(LANE)
        assert st.pause is not None and [t.ticket_id for t in st.queued] == [rb.ticket_id]
        assert st.held == []  # paused: nothing promoted
        w = await b.await_ticket(LANE, rb.ticket_id, 1)
        assert w.state == "queued" and w.pause is not None
        assert (w.ticket.eta_seconds or 0) >= 60  # the ETA includes the pause


async def test_status_receipts_keys(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a:
        ra = await a.acquire(LANE, "p", "1", "a")
        await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"k": 1})
        plain = await a.status(LANE)
        assert isinstance(plain, StatusReply)
        assert plain.recent_receipts is None and plain.unreadable_receipts is None
        assert "recentReceipts" not in plain.to_wire()
        assert "unreadableReceipts" not in plain.to_wire()
        verbose = await a.status(LANE, include_receipts=True)
        assert verbose.unreadable_receipts == 0 and verbose.recent_receipts is not None
        [row] = verbose.recent_receipts
        assert row.ticket_id == ra.ticket_id and row.phase == "lease-acquired"
        assert row.payload == {"k": 1} and row.content_hash_verified is True
        assert verbose.to_wire()["unreadableReceipts"] == 0
        assert [t.ticket_id for t in verbose.held] == [ra.ticket_id]
        assert verbose.capacity == 1 and verbose.enforced


async def test_unreadable_receipt_row_is_counted_not_fatal(
    coordinator: ThreadedCoordinator,
) -> None:
    async with mk(coordinator) as a:
        ra = await a.acquire(LANE, "p", "1", "a")
        await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"k": 1})
        await a.receipt(LANE, ra.ticket_id, "references-applied", {"k": 2})
        # A row this client cannot read (as a newer writer might leave): createdAt not a number.
        assert coordinator.data_dir is not None
        db = sqlite3.connect(coordinator.data_dir / lane_file_name(LANE))
        with db:
            db.execute(
                "INSERT INTO receipts (receipt_id, ticket_id, phase, machine_id, payload, "
                "content_hash, created_at, content_hash_verified) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (f"{ra.ticket_id}:provider-submitted:{'a' * 16}", ra.ticket_id,
                 "provider-submitted", "studio-a", '{"j":1}', "sha256:" + "a" * 64,
                 "yesterday", 1),
            )  # fmt: skip
        db.close()
        st = await a.status(LANE, include_receipts=True)
        assert st.unreadable_receipts == 1
        assert st.recent_receipts is not None
        assert sorted(r.phase for r in st.recent_receipts) == [
            "lease-acquired", "references-applied",
        ]  # fmt: skip


async def test_history_counts_and_filter(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a:
        for i, outcome in enumerate(["completed", "failed", "completed", None]):
            r = await a.acquire(LANE, "pa" if i < 3 else "pb", str(i), "h")
            await a.release(LANE, r.ticket_id, outcome)
        h = await a.history(LANE)
        assert [e.outcome for e in h.entries] == [None, "completed", "failed", "completed"]
        assert h.counts == {"completed": 2, "failed": 1, "null": 1} and h.retained == 4
        e = h.entries[1]
        assert e.project == "pa" and e.machine_id == "studio-a" and e.claim_id == "claim-a"
        assert e.hold_seconds is not None and e.wait_seconds is not None
        only = await a.history(LANE, limit=1, project="pa")
        assert len(only.entries) == 1 and only.entries[0].project == "pa"
        with pytest.raises(BadRequestError) as ei:
            await a.history(LANE, limit=0)
        assert "limit" in ei.value.message


async def test_unenforced_lane(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a:
        r = await a.acquire(UNENFORCED_LANE, "p", "1", "h")
        assert r.granted and not r.enforced and r.ticket_id.startswith("unlimited-")
        assert (await a.heartbeat(UNENFORCED_LANE, r.ticket_id)).refreshed
        rec = await a.receipt(UNENFORCED_LANE, r.ticket_id, "lease-acquired", {"x": 1})
        assert not rec.stored
        st = await a.status(UNENFORCED_LANE, include_receipts=True)
        assert not st.enforced and st.recent_receipts is None and st.unreadable_receipts is None
        assert (await a.release(UNENFORCED_LANE, r.ticket_id, "completed")).released


async def test_bad_lane_is_bad_request(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a:
        with pytest.raises(BadRequestError) as ei:
            await a.status("Not A Lane")
        assert ei.value.status == 400 and "lane" in ei.value.message


async def test_control_room_reads(coordinator: ThreadedCoordinator) -> None:
    async with mk(coordinator) as a, mk(coordinator, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a")
        await b.acquire(LANE, "p", "1", "a")  # a collision: two owners converge on one ticket
        await a.receipt(LANE, ra.ticket_id, "lease-acquired", {"k": 1})
        lanes = await a.lanes()
        row = next(x for x in lanes.lanes if x.lane == LANE)
        assert row.held == 1 and row.capacity == 1 and row.enforced
        inc = await a.incidents(LANE, limit=10)
        assert "duplicate-collision" in {i.kind for i in inc.incidents}
        m = await a.machines()
        assert {"studio-a", "studio-b"} <= {x.machine_id for x in m.machines}
        ev = await a.evidence(LANE, ra.ticket_id)
        assert ev.job_evidence is not None and ev.job_evidence.found is True
        assert ev.job_evidence.receipts["provider-submitted"] == "unknown"
        collision = ev.coordinator_evidence.collision
        assert collision is not None and collision.ticket_id == ra.ticket_id
        assert await a.healthz()


async def test_alarm_promotes_after_expiry_manual_clock(
    manual_coordinator: ThreadedCoordinator,
) -> None:
    s = manual_coordinator
    async with mk(s) as a, mk(s, "studio-b", "claim-b") as b:
        ra = await a.acquire(LANE, "p", "1", "a", lease_seconds=15)
        rb = await b.acquire(LANE, "p", "2", "b")
        await asyncio.to_thread(s.advance, 16)
        st = await b.status(LANE)
        assert [t.ticket_id for t in st.held] == [rb.ticket_id]
        h = await a.heartbeat(LANE, ra.ticket_id)
        assert not h.refreshed and h.reason == "expired"
        late = await a.release(LANE, ra.ticket_id, "completed")
        assert not late.released and late.reason == "expired"
        hist = await a.history(LANE)
        assert hist.entries[0].outcome == "expired" and hist.entries[0].late_outcome == "completed"


def test_sync_facade(coordinator: ThreadedCoordinator) -> None:
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-a", "c1") as a:
        assert a.kind == "actor-sqlite" and a.machine_id == "studio-a" and a.claim_id == "c1"
        r = a.acquire(LANE, "p", "1", "h")
        assert r.granted
        assert a.await_ticket(LANE, r.ticket_id, 1).granted
        assert a.heartbeat(LANE, r.ticket_id).refreshed
        assert a.receipt(LANE, r.ticket_id, "lease-acquired", {"x": 1}).stored
        assert a.cooldown(LANE, r.ticket_id, 30).paused
        assert a.status(LANE, True).recent_receipts is not None
        assert a.release(LANE, r.ticket_id, "completed").released
        assert a.history(LANE).entries[0].ticket_id == r.ticket_id
        assert a.lanes().lanes and a.machines().machines
        assert a.incidents().incidents
        assert a.evidence(LANE).lane == LANE
        with pytest.raises(NotFoundError):
            a.release(LANE, "t_missing")
    with pytest.raises(RuntimeError):
        a.status(LANE)


def _public_methods(cls: type) -> dict[str, Any]:
    return {
        name: fn
        for name, fn in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_sync_facade_mirrors_lane_client() -> None:
    """Every public method of LaneClient has its blocking twin on SyncLaneClient with the same
    parameters (names, kinds, defaults, annotations) and the awaited return type; a method
    added to LaneClient without its twin fails here. `run` is the one sync-only extra."""
    amethods, smethods = _public_methods(LaneClient), _public_methods(SyncLaneClient)
    assert set(amethods) - set(smethods) == set(), "LaneClient methods without a sync twin"
    assert set(smethods) - set(amethods) == {"run"}, "sync-only methods (document them)"
    assert {"healthz", "with_claim"} <= set(smethods)
    for name, afn in amethods.items():
        sfn = smethods[name]
        asig, ssig = inspect.signature(afn), inspect.signature(sfn)
        shape = [(p.name, p.kind, p.default, p.annotation) for p in asig.parameters.values()]
        sshape = [(p.name, p.kind, p.default, p.annotation) for p in ssig.parameters.values()]
        assert shape == sshape, f"{name}: {asig} != {ssig}"
        assert not inspect.iscoroutinefunction(sfn), f"SyncLaneClient.{name} must block"
        if name == "with_claim":
            assert (asig.return_annotation, ssig.return_annotation) == (
                "LaneClient",
                "SyncLaneClient",
            )
        else:
            assert inspect.iscoroutinefunction(afn), name
            assert asig.return_annotation == ssig.return_annotation, name


def test_sync_healthz_and_with_claim(coordinator: ThreadedCoordinator, refused_port: int) -> None:
    with SyncLaneClient(coordinator.url, coordinator.token, "studio-a", "c1") as a:
        assert a.healthz() is True
        r = a.acquire(LANE, "p", "wc", "h")
        assert r.granted and r.owner.claim_id == "c1"
        other = a.with_claim("c2")
        assert isinstance(other, SyncLaneClient)
        assert (other.kind, other.machine_id, other.claim_id) == ("actor-sqlite", "studio-a", "c2")
        assert a.claim_id == "c1"
        hb = other.heartbeat(LANE, r.ticket_id)
        assert not hb.refreshed and hb.reason == "not-owner"
        # None: the machine-only owner rule — how a restarted driver finishes
        # the ticket its crashed predecessor held.
        machine = a.with_claim(None)
        assert machine.claim_id is None
        assert machine.release(LANE, r.ticket_id, "not-submitted").released
        other.close()  # a sibling's close leaves the parent's loop and session alone
        with pytest.raises(RuntimeError):
            other.status(LANE)
        assert a.status(LANE).coordinator == "actor-sqlite"
    with pytest.raises(RuntimeError):  # the parent closed: its siblings refuse too
        machine.status(LANE)
    with SyncLaneClient(f"http://127.0.0.1:{refused_port}", "t" * 40, "studio-a") as down:
        assert down.healthz() is False


def test_repr_hides_token(coordinator: ThreadedCoordinator) -> None:
    c = LaneClient(coordinator.url, coordinator.token, "studio-a")
    assert coordinator.token not in repr(c)
