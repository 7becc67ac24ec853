"""Turn against the real coordinator: grant, receipts, outcomes, waiting, busy windows."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from client.api import LaneClient
from client.driver import NotGranted, NotSubmitted, Turn, TurnNotHeld, WaitUpdate, WindowBusy
from client.driver.journal import Journal
from client.driver.receipts import PHASES, hash_bytes
from client.local import LocalQueue
from coordinator.clock import SystemClock
from tests.harness import ThreadedCoordinator, client_config

from .kit import FREE_LANE, LANE, FakeProvider, wait_until

H = "sha256:" + "ab" * 32
Clients = Callable[..., LaneClient]


def jcs_hash(payload: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


async def test_happy_path_completed_with_verified_receipts(
    clients: Clients, journal: Journal
) -> None:
    a = clients("studio-a", "claim-a")
    provider = FakeProvider()
    async with Turn(a, LANE, "proj", "scene-1", H, lease_seconds=60, journal=journal) as turn:
        assert turn.granted and turn.fence == 1 and turn.ticket_id is not None
        assert journal.get(turn.window).phase == "acquired"  # type: ignore[union-attr]
        await turn.references_applied([hash_bytes(b"ref-1"), hash_bytes(b"ref-2")])
        job = await turn.submit(provider.submit)
        assert journal.get(turn.window).phase == "submitted"  # type: ignore[union-attr]
        status = await turn.poll(provider.poll)
    assert status == "completed" and provider.submits == [job] and provider.polls == [job]
    assert turn.released and turn.release_reply is not None
    assert turn.release_reply.outcome == "completed"

    hist = await a.history(LANE)
    entry = next(e for e in hist.entries if e.ticket_id == turn.ticket_id)
    assert (entry.outcome, entry.provider_job_id) == ("completed", job)
    assert (entry.machine_id, entry.claim_id) == ("studio-a", "claim-a")

    st = await a.status(LANE, include_receipts=True)
    assert st.held == [] and st.recent_receipts is not None
    mine = [r for r in st.recent_receipts if r.ticket_id == turn.ticket_id]
    assert sorted(r.phase for r in mine) == sorted(PHASES)
    for r in mine:
        assert r.content_hash_verified is True
        assert r.content_hash == jcs_hash(r.payload)  # independent RFC 8785 + sha256
        assert r.receipt_id == f"{turn.ticket_id}:{r.phase}:{r.content_hash[7:23]}"
    by_phase = {r.phase: r.payload for r in mine}
    assert by_phase["provider-submitted"]["providerJobId"] == job
    assert by_phase["provider-terminal"] == {"providerJobId": job, "status": "completed"}
    assert by_phase["lease-acquired"]["fence"] == 1
    assert by_phase["references-applied"]["referenceCount"] == 2
    assert turn.receipts is not None and turn.receipts.dropped == []
    assert [w.phase for w in turn.receipts.written] == [
        "lease-acquired", "references-applied", "provider-submitted", "provider-terminal"
    ]  # fmt: skip
    rec = journal.get(turn.window)
    assert rec is not None and (rec.phase, rec.outcome, rec.needs) == (
        "terminal",
        "completed",
        None,
    )


async def test_exception_releases_failed_and_stops_heartbeats(clients: Clients) -> None:
    a = clients()
    with pytest.raises(RuntimeError, match="render crashed"):
        async with Turn(a, LANE, "proj", "scene-1", H, heartbeat_interval=0.05) as turn:
            await wait_until(lambda: turn.heartbeats_sent >= 2, what="two heartbeats")
            raise RuntimeError("render crashed")
    assert turn.release_reply is not None and turn.release_reply.outcome == "failed"
    sent = turn.heartbeats_sent
    await asyncio.sleep(0.3)
    assert turn.heartbeats_sent == sent  # no heartbeat after the exit
    hist = await a.history(LANE)
    assert hist.entries[0].ticket_id == turn.ticket_id and hist.entries[0].outcome == "failed"


async def test_caller_set_outcome_job_and_note_win(clients: Clients) -> None:
    a = clients()
    with pytest.raises(ValueError):
        async with Turn(a, LANE, "proj", "scene-1", H) as turn:
            turn.outcome, turn.provider_job_id, turn.note = "timeout", "job-77", "x" * 600
            raise ValueError("provider took too long")
    e = (await a.history(LANE)).entries[0]
    assert (e.outcome, e.provider_job_id, e.note) == ("timeout", "job-77", "x" * 500)


async def test_not_submitted_exception_releases_not_submitted(clients: Clients) -> None:
    a = clients()
    with pytest.raises(NotSubmitted):
        async with Turn(a, LANE, "proj", "scene-1", H) as turn:
            await turn.submit(_refuse)
    assert (await a.history(LANE)).entries[0].outcome == "not-submitted"
    assert turn.provider_job_id is None


async def _refuse() -> str:
    raise NotSubmitted("the provider said no before accepting anything")


async def test_waits_for_grant_and_reports_position(clients: Clients) -> None:
    a, b = clients("studio-a", "claim-a"), clients("studio-b", "claim-b")
    updates: list[WaitUpdate] = []
    holder = Turn(a, LANE, "proj", "scene-1", H)
    await holder.__aenter__()

    async def waiter() -> tuple[int | None, str | None]:
        async with Turn(b, LANE, "proj", "scene-2", H, on_wait=updates.append) as t:
            return t.fence, t.ticket_id

    task = asyncio.create_task(waiter())
    await wait_until(lambda: len(updates) >= 1, what="a queued update")
    assert updates[0].position == 1 and updates[0].pause is None
    assert not task.done()
    await holder.__aexit__(None, None, None)
    fence, ticket = await asyncio.wait_for(task, 30)
    assert fence == 2 and ticket == updates[0].ticket_id
    assert len(updates) == 1  # nothing changed while it waited: no repeated callbacks


async def test_live_window_of_another_driver_is_busy(clients: Clients) -> None:
    a, a2 = clients("studio-a", "claim-a"), clients("studio-a", "claim-other-process")
    b = clients("studio-b", "claim-b")
    async with Turn(a, LANE, "proj", "scene-1", H) as turn:
        for other in (a2, b):
            with pytest.raises(WindowBusy, match="owned by machine") as err:
                async with Turn(other, LANE, "proj", "scene-1", H):
                    raise AssertionError("never entered")
            assert err.value.reply is not None and err.value.reply.ticket_id == turn.ticket_id
        st = await a.status(LANE)
        assert [t.ticket_id for t in st.held] == [turn.ticket_id]
    assert turn.release_reply is not None and turn.release_reply.outcome == "completed"


async def test_same_window_twice_in_one_process_is_refused(clients: Clients) -> None:
    a = clients()
    async with Turn(a, LANE, "proj", "scene-1", H):
        with pytest.raises(WindowBusy, match="already has a turn open"):
            async with Turn(a, LANE, "proj", "scene-1", H):
                pass
    async with Turn(a, LANE, "proj", "scene-1", H) as again:  # closed: the window is free
        assert again.granted


def test_turn_needs_a_claim_and_a_short_enough_interval(coord: ThreadedCoordinator) -> None:
    with pytest.raises(ValueError, match="claim"):
        Turn(coord.client("m", None), LANE, "p", "s", H)
    with pytest.raises(ValueError, match="third of the lease"):
        Turn(coord.client(), LANE, "p", "s", H, lease_seconds=60, heartbeat_interval=21)
    t = Turn(coord.client(), LANE, "p", "s", H, lease_seconds=60)
    assert t.heartbeat_interval == 20


async def test_heartbeats_keep_the_lease_past_its_first_expiry(
    coord: ThreadedCoordinator, clients: Clients
) -> None:
    a = clients()
    async with Turn(a, LANE, "proj", "scene-1", H, lease_seconds=15, heartbeat_interval=0.05) as t:
        first = t.lease_expires_at
        assert first is not None
        coord.advance(10)
        await wait_until(lambda: (t.lease_expires_at or 0) >= first + 10, what="a refresh")
        coord.advance(10)  # 20 s after the grant: without heartbeats it would have expired
        sent = t.heartbeats_sent
        await wait_until(lambda: t.heartbeats_sent >= sent + 2, what="two more heartbeats")
        st = await a.status(LANE)
        assert [x.ticket_id for x in st.held] == [t.ticket_id]
        assert t.refusals == 0 and not t.lease_lost
        t.check()


async def test_max_wait_gives_the_queued_ticket_back(tmp_path: Path) -> None:
    real = ThreadedCoordinator(
        tmp_path / "real-clock-data", config=client_config(), clock=SystemClock()
    )
    a, b = real.client("studio-a", "claim-a"), real.client("studio-b", "claim-b")
    try:
        async with Turn(a, LANE, "proj", "scene-1", H):
            tb = Turn(b, LANE, "proj", "scene-2", H, max_wait=1.5)
            with pytest.raises(NotGranted, match="still queued"):
                async with tb:
                    raise AssertionError("never granted")
            assert tb.ticket_id is not None and not tb.granted
        hist = await a.history(LANE)
        mine = next(e for e in hist.entries if e.ticket_id == tb.ticket_id)
        assert mine.outcome == "abandoned" and mine.held_at is None
    finally:
        await a.close()
        await b.close()
        real.stop()


async def test_unenforced_lane_grants_at_once(clients: Clients) -> None:
    a = clients()
    provider = FakeProvider()
    async with Turn(a, FREE_LANE, "proj", "scene-1", H) as turn:
        assert turn.ticket_id is not None and turn.ticket_id.startswith("unlimited-")
        assert turn.reply is not None and turn.reply.enforced is False
        await turn.submit(provider.submit)
        await turn.poll(provider.poll)
    assert turn.released and turn.receipts is not None
    # docs/protocol.md#unenforced: never stored
    assert all(w.stored is False for w in turn.receipts.written)


async def test_turn_on_the_local_queue(state_dir: Path, journal: Journal) -> None:
    q = LocalQueue(state_dir / "queue", "studio-a", "claim-a")
    provider = FakeProvider()
    try:
        async with Turn(q, LANE, "proj", "scene-1", H, journal=journal) as turn:
            assert turn.receipts is not None and not turn.receipts.enabled
            await turn.references_applied([hash_bytes(b"ref")])
            await turn.submit(provider.submit)
            await turn.poll(provider.poll)
            with pytest.raises(ValueError):  # the checker still runs locally
                await turn.receipts.write("references-applied", {"prompt": "a cat"})
        assert turn.receipts.written == [] and turn.receipts.dropped == []
        e = (await q.history(LANE)).entries[0]
        assert (e.outcome, e.provider_job_id) == ("completed", "job-1")
    finally:
        await q.close()


async def test_check_after_release_says_not_held(clients: Clients) -> None:
    a = clients()
    async with Turn(a, LANE, "proj", "scene-1", H) as turn:
        turn.check()
    with pytest.raises(TurnNotHeld):
        turn.check()
