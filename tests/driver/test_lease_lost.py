"""Lease lost (docs/protocol.md#driver-rules): three refusals in a row, never a resubmit; transient
errors are not refusals; the optional cancellation of the block."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import client.driver.heartbeat as heartbeat_mod
from client.api import NO_RETRY, LaneClient
from client.clock import monotonic
from client.driver import LeaseLost, Turn
from client.driver.journal import NEEDS_LEASE_LOST, Journal
from tests.harness import ThreadedCoordinator

from .kit import LANE, FakeProvider, Recording, wait_until

H = "sha256:" + "cd" * 32
Clients = Callable[..., LaneClient]
FAST = {"lease_seconds": 15, "heartbeat_interval": 0.05}


async def test_expired_lease_is_lost_after_exactly_three_refusals(
    coord: ThreadedCoordinator,
    clients: Clients,
    journal: Journal,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a = Recording(clients("studio-a", "claim-a"))
    provider = FakeProvider()
    turn = Turn(a, LANE, "proj", "scene-1", H, journal=journal, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        async with turn:
            job = await turn.submit(provider.submit)
            await wait_until(lambda: turn.heartbeats_sent >= 1, what="a first heartbeat")
            coord.advance(16)  # past the 15 s lease: the alarm reaps it, no client call needed
            await wait_until(lambda: turn.lease_lost, what="the lease to be lost")
            calls = len(a.heartbeats)
            await asyncio.sleep(0.5)  # ten heartbeat intervals
            assert len(a.heartbeats) == calls  # heartbeats stopped
            assert a.refusals() == ["expired"] * 3
            assert a.heartbeats[-4].refreshed is True  # the streak is exactly the last three
            assert turn.needs == NEEDS_LEASE_LOST and turn.lost.is_set()
            with pytest.raises(LeaseLost):
                await turn.submit(provider.submit)  # never resubmitted
            turn.check()
    assert provider.submits == [job]
    assert turn.release_reply is not None and turn.release_reply.reason == "expired"
    entry = next(e for e in (await a.history(LANE)).entries if e.ticket_id == turn.ticket_id)
    assert (entry.outcome, entry.late_outcome) == ("expired", "lease-lost")
    rec = journal.get(turn.window)
    assert rec is not None
    assert (rec.phase, rec.needs, rec.provider_job_id) == ("lease-lost", NEEDS_LEASE_LOST, job)
    assert rec.job_in_flight  # a restart resumes this job, never submits again
    assert "lease lost on drill:example" in capsys.readouterr().err


async def test_hand_release_from_the_same_machine_loses_the_lease(
    clients: Clients, journal: Journal
) -> None:
    a = Recording(clients("studio-a", "claim-a"))
    hand = clients("studio-a", None)  # `lane release --ticket` by hand, no claim
    turn = Turn(a, LANE, "proj", "scene-1", H, journal=journal, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost, match="done"):
        async with turn:
            assert turn.ticket_id is not None
            r = await hand.release(LANE, turn.ticket_id)
            assert r.released
            await wait_until(lambda: turn.lease_lost, what="the lease to be lost")
            # the block ends normally: the exit still says the lease was lost
    assert a.refusals() == ["done"] * 3 and turn.lease_lost_reason == "done"
    assert turn.release_reply is not None and turn.release_reply.reason == "already-done"
    rec = journal.get(turn.window)
    assert rec is not None and (rec.phase, rec.needs) == ("lease-lost", NEEDS_LEASE_LOST)
    assert rec.provider_job_id is None and not rec.unfinished  # nothing was submitted


async def test_transient_heartbeat_errors_are_not_refusals(
    coord: ThreadedCoordinator, clients: Clients
) -> None:
    a = Recording(clients("studio-a", "claim-a", retry=NO_RETRY))
    async with Turn(a, LANE, "proj", "scene-1", H, **FAST) as turn:  # type: ignore[arg-type]
        for fault in ("503", "drop"):
            coord.faults["/v1/lanes/heartbeat"] = fault
            errors = turn.heartbeat_errors + 5
            await wait_until(lambda: turn.heartbeat_errors >= errors, what="errors")  # noqa: B023
            assert turn.refusals == 0 and not turn.lease_lost
            del coord.faults["/v1/lanes/heartbeat"]
            sent = turn.heartbeats_sent + 2
            await wait_until(lambda: turn.heartbeats_sent >= sent, what="heartbeats")  # noqa: B023
        turn.check()
        assert a.refusals() == []
    assert turn.release_reply is not None and turn.release_reply.outcome == "completed"


async def test_a_lease_unconfirmed_for_a_whole_lease_is_lost(
    coord: ThreadedCoordinator, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = clients(retry=NO_RETRY)
    turn = Turn(a, LANE, "proj", "scene-1", H, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost, match="unconfirmed"):
        async with turn:
            coord.faults["/v1/lanes/heartbeat"] = "503"
            errors = turn.heartbeat_errors
            await wait_until(lambda: turn.heartbeat_errors > errors, what="an error")
            assert not turn.lease_lost
            # this computer's clock moves past the lease while the coordinator is unreachable
            monkeypatch.setattr(heartbeat_mod, "monotonic", lambda: monotonic() + 16)
            await wait_until(lambda: turn.lease_lost, what="the lease to be lost")
            assert turn.refusals == 0 and turn.lease_lost_reason == "unconfirmed"
            turn.check()


async def test_cancel_on_lease_lost_cancels_the_block(clients: Clients) -> None:
    a = clients("studio-a", "claim-a")
    hand = clients("studio-a", None)
    provider_call_cancelled = asyncio.Event()

    async def long_provider_wait() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            provider_call_cancelled.set()
            raise

    turn = Turn(a, LANE, "proj", "scene-1", H, cancel_on_lease_lost=True, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        async with turn:
            assert turn.ticket_id is not None
            await hand.release(LANE, turn.ticket_id)
            await asyncio.wait_for(long_provider_wait(), 60)  # cancelled by the turn
    assert provider_call_cancelled.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the test's task is not left cancelled
    assert turn.release_reply is not None and turn.release_reply.reason == "already-done"


async def test_poll_is_cancelled_when_the_lease_is_lost(clients: Clients, journal: Journal) -> None:
    a = clients("studio-a", "claim-a")
    hand = clients("studio-a", None)
    provider = FakeProvider()
    poll_cancelled = asyncio.Event()

    async def slow_poll(job_id: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            poll_cancelled.set()
            raise
        return "completed"

    turn = Turn(a, LANE, "proj", "scene-1", H, journal=journal, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        async with turn:
            job = await turn.submit(provider.submit)
            assert turn.ticket_id is not None
            poll = asyncio.create_task(turn.poll(slow_poll))
            await asyncio.sleep(0.1)
            await hand.release(LANE, turn.ticket_id)
            await asyncio.wait_for(poll, 30)
    assert poll_cancelled.is_set()
    rec = journal.get(turn.window)
    assert rec is not None and rec.phase == "lease-lost" and rec.provider_job_id == job
    assert provider.submits == [job]


async def test_check_inside_the_block_raises_without_cancelling_it(
    coord: ThreadedCoordinator, clients: Clients, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = clients()
    turn = Turn(a, LANE, "proj", "scene-1", H, cancel_on_lease_lost=True, **FAST)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost, match="unconfirmed"):
        async with turn:
            coord.faults["/v1/lanes/heartbeat"] = "503"
            monkeypatch.setattr(heartbeat_mod, "monotonic", lambda: monotonic() + 16)
            turn.check()  # detects it first, in the block's own task
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    # the exit ran to the end: the release was sent (the lease had not really run out)
    assert turn.release_reply is not None and turn.release_reply.outcome == "lease-lost"
