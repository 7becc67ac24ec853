"""The live-job record: a restarted driver resumes (polls) instead of submitting again; a
submit that raised keeps its ticket until reconciled (docs/protocol.md#driver-rules)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client.api import LaneClient
from client.driver import (
    AlreadySubmitted,
    LeaseLost,
    ReconcileRequired,
    SyncTurn,
    Turn,
    TurnNotHeld,
)
from client.driver.example import SimulatedProvider
from client.driver.journal import (
    JOURNAL_FILE,
    NEEDS_LEASE_LOST,
    NEEDS_RECONCILE,
    Journal,
    Window,
)
from client.sync import SyncLaneClient
from tests.harness import ThreadedCoordinator

from .kit import LANE, PY, FakeProvider, Recording, wait_until

H = "sha256:" + "77" * 32  # crash_worker.py's window: (LANE, proj, scene-1, H)
WINDOW = Window(LANE, "proj", "scene-1", H)
WORKER = Path(__file__).with_name("crash_worker.py")
Clients = Callable[..., LaneClient]


class Counting:
    """The simulated provider behind counters: what did the restarted driver call?"""

    def __init__(self, directory: Path) -> None:
        self.sim = SimulatedProvider(directory, render_seconds=0.0)
        self.submits = 0
        self.polls: list[str] = []
        self.finds: list[str] = []

    async def submit(self) -> str:
        self.submits += 1
        return await self.sim.submit(H, "unused")

    async def poll(self, job_id: str) -> str:
        self.polls.append(job_id)
        return await self.sim.poll(job_id)

    def finder(self, key: str) -> Callable[[], asyncio.Future[str | None]]:
        async def find() -> str | None:
            self.finds.append(key)
            return await self.sim.find(key)

        return find  # type: ignore[return-value]


def crash_driver(
    coord: ThreadedCoordinator,
    env: dict[str, str],
    state_dir: Path,
    where: str,
    claim: str = "claim-crashed",
) -> str:
    """Run crash_worker.py to its crash; returns the ticket id it held."""
    run = subprocess.run(
        [PY, str(WORKER), coord.url, coord.token, str(state_dir / JOURNAL_FILE),
         str(state_dir / "provider"), claim, where],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 17, run.stderr[-2000:]
    return run.stdout.split()[0]


async def test_resume_after_a_crash_between_submit_and_terminal(
    coord: ThreadedCoordinator, clients: Clients, env: dict[str, str], state_dir: Path
) -> None:
    ticket = crash_driver(coord, env, state_dir, "after-submit")
    with Journal(state_dir / JOURNAL_FILE) as journal:
        rec = journal.get(WINDOW)
        assert rec is not None and rec.phase == "submitted" and rec.job_in_flight
        job = rec.provider_job_id
        assert job is not None

        provider = Counting(state_dir / "provider")
        restarted = clients("studio-a", "claim-restarted")  # a new process: a new claim
        async with Turn(restarted, LANE, "proj", "scene-1", H, journal=journal) as turn:
            # the crashed driver's ticket is still held: adopted, not queued behind
            assert turn.adopted and turn.ticket_id == ticket and turn.claim_id == "claim-crashed"
            assert turn.pending is not None and turn.resumable
            with pytest.raises(AlreadySubmitted):
                await turn.submit(provider.submit)
            status = await turn.run(
                submit=provider.submit, poll=provider.poll, reconcile=provider.finder("k")
            )
        assert status == "completed"
        assert provider.submits == 0 and provider.polls == [job] and provider.finds == []
        assert provider.sim.stats()["submitCalls"] == 1  # only the crashed run's submit
        rec = journal.get(WINDOW)
        assert rec is not None and (rec.phase, rec.outcome) == ("terminal", "completed")

    hist = await restarted.history(LANE)
    assert [(e.ticket_id, e.outcome, e.provider_job_id) for e in hist.entries] == [
        (ticket, "completed", job)
    ]
    st = await restarted.status(LANE, include_receipts=True)
    assert st.recent_receipts is not None
    phases = sorted({r.phase for r in st.recent_receipts if r.ticket_id == ticket})
    assert phases == ["lease-acquired", "provider-submitted", "provider-terminal"]


# Holds off (in_flight_hold_seconds = 0): the lane keeps no slot for the job, so the restarted
# driver acquires a new ticket and resumes (polls) the job on it. With holds on, the next test.
@pytest.mark.no_in_flight_holds
async def test_resume_on_a_new_ticket_when_the_old_lease_ran_out(
    coord: ThreadedCoordinator, clients: Clients, env: dict[str, str], state_dir: Path
) -> None:
    old = crash_driver(coord, env, state_dir, "after-submit")
    coord.advance(16)  # the crashed driver's 15 s lease runs out: the alarm reaps it
    provider = Counting(state_dir / "provider")
    with Journal(state_dir / JOURNAL_FILE) as journal:
        job = journal.get(WINDOW).provider_job_id  # type: ignore[union-attr]
        restarted = clients("studio-a", "claim-restarted")
        async with Turn(restarted, LANE, "proj", "scene-1", H, journal=journal) as turn:
            assert not turn.adopted and turn.ticket_id != old and turn.fence == 2
            assert turn.resumable
            status = await turn.run(submit=provider.submit, poll=provider.poll)
        assert status == "completed" and provider.submits == 0 and provider.polls == [job]
    hist = await restarted.history(LANE)
    got = {(e.ticket_id, e.outcome, e.provider_job_id) for e in hist.entries}
    assert got == {(old, "expired", None), (turn.ticket_id, "completed", job)}


class CountingAcquires(Recording):
    """The real backend, counting acquires."""

    acquires = 0

    async def acquire(self, *a: Any, **k: Any) -> Any:
        self.acquires += 1
        return await self.inner.acquire(*a, **k)


async def test_a_job_resumed_under_its_in_flight_hold_never_waits_for_its_own_slot(
    coord: ThreadedCoordinator, clients: Clients, env: dict[str, str], state_dir: Path
) -> None:
    old = crash_driver(coord, env, state_dir, "after-submit")
    coord.advance(16)  # the lease runs out: the alarm reaps it, the job keeps the slot (a hold)
    other = clients("studio-b", "claim-b")
    waiting = await other.acquire(LANE, "proj", "scene-9", H)
    st = await other.status(LANE)
    assert [h.ticket_id for h in st.in_flight] == [old] and st.held == []
    assert [t.ticket_id for t in st.queued] == [waiting.ticket_id]  # behind the hold

    provider = Counting(state_dir / "provider")
    with Journal(state_dir / JOURNAL_FILE) as journal:
        job = journal.get(WINDOW).provider_job_id  # type: ignore[union-attr]
        restarted = CountingAcquires(clients("studio-a", "claim-restarted"))
        # max_wait: a turn that queued behind its own job would fail here, not hang
        turn = Turn(restarted, LANE, "proj", "scene-1", H, journal=journal, max_wait=5)
        async with turn:
            assert turn.under_hold and not turn.granted and not turn.adopted
            assert turn.ticket_id == old and turn.claim_id == "claim-crashed"
            assert turn.hold is not None and turn.hold.ticket_id == old and turn.resumable
            status = await turn.run(submit=provider.submit, poll=provider.poll)
            with pytest.raises(TurnNotHeld):
                await turn.submit(provider.submit)  # no ticket to submit under
        assert status == "completed" and provider.submits == 0 and provider.polls == [job]
        assert restarted.acquires == 0  # finished without a new ticket
        rec = journal.get(WINDOW)
        assert rec is not None and (rec.phase, rec.outcome) == ("terminal", "completed")

    # the provider-terminal receipt on the old ticket ended the hold and promoted the waiter
    st = await other.status(LANE, include_receipts=True)
    assert st.in_flight == [] and [t.ticket_id for t in st.held] == [waiting.ticket_id]
    assert st.recent_receipts is not None
    assert "provider-terminal" in {r.phase for r in st.recent_receipts if r.ticket_id == old}
    hist = await other.history(LANE)
    assert [(e.ticket_id, e.outcome, e.in_flight_ended) for e in hist.entries] == [
        (old, "expired", "receipt")
    ]
    assert turn.released is False and turn.release_reply is None  # nothing to release


async def test_a_lease_lost_job_is_resumed_under_its_hold(
    coord: ThreadedCoordinator, clients: Clients, journal: Journal
) -> None:
    a = clients("studio-a", "claim-a")
    provider = FakeProvider()
    turn = Turn(a, LANE, "proj", "scene-1", H, journal=journal, lease_seconds=15,
                heartbeat_interval=0.05)  # fmt: skip
    with pytest.raises(LeaseLost):
        async with turn:
            job = await turn.submit(provider.submit)
            await wait_until(lambda: turn.heartbeats_sent >= 1, what="a first heartbeat")
            coord.advance(16)  # the alarm reaps the lease; the exit releases lease-lost
            await wait_until(lambda: turn.lease_lost, what="the lease to be lost")
    rec = journal.get(WINDOW)
    assert rec is not None and (rec.phase, rec.needs) == ("lease-lost", NEEDS_LEASE_LOST)
    assert [h.ticket_id for h in (await a.status(LANE)).in_flight] == [turn.ticket_id]

    async with Turn(a, LANE, "proj", "scene-1", H, journal=journal, max_wait=5) as again:
        assert again.under_hold and again.ticket_id == turn.ticket_id and not again.granted
        assert await again.run(submit=provider.submit, poll=provider.poll) == "completed"
    assert provider.submits == [job] and provider.polls == [job]
    rec = journal.get(WINDOW)
    assert rec is not None and (rec.phase, rec.outcome, rec.needs) == (
        "terminal",
        "completed",
        None,
    )
    assert (await a.status(LANE)).in_flight == []
    entries = (await a.history(LANE)).entries
    assert [(e.ticket_id, e.in_flight_ended) for e in entries] == [(turn.ticket_id, "receipt")]


def test_sync_turn_resumes_under_the_hold_and_reconciles_without_receipts(
    coord: ThreadedCoordinator, env: dict[str, str], state_dir: Path
) -> None:
    old = crash_driver(coord, env, state_dir, "after-submit")
    coord.advance(16)
    provider = FakeProvider()
    with (
        Journal(state_dir / JOURNAL_FILE) as journal,
        SyncLaneClient.wrap(coord.client("studio-a", "claim-restarted")) as lane,
    ):
        job = journal.get(WINDOW).provider_job_id  # type: ignore[union-attr]
        # receipts off: the turn ends the hold with reconcile instead of a receipt
        with SyncTurn(lane, LANE, "proj", "scene-1", H, journal=journal, receipts=False,
                      max_wait=5) as turn:  # fmt: skip
            assert turn.under_hold and turn.ticket_id == old
            assert turn.run(submit=provider.submit_sync, poll=provider.poll_sync) == "completed"
        assert provider.submits == [] and provider.polls == [job]
        assert lane.status(LANE).in_flight == []
        entries = lane.history(LANE).entries
        assert [(e.ticket_id, e.in_flight_ended) for e in entries] == [
            (old, "reconciled:completed")
        ]


async def test_a_crash_during_submit_is_reconciled_before_any_submit(
    coord: ThreadedCoordinator, clients: Clients, env: dict[str, str], state_dir: Path
) -> None:
    ticket = crash_driver(coord, env, state_dir, "during-submit")
    provider = Counting(state_dir / "provider")
    with Journal(state_dir / JOURNAL_FILE) as journal:
        rec = journal.get(WINDOW)
        assert rec is not None and rec.phase == "submitting" and rec.provider_job_id is None
        restarted = clients("studio-a", "claim-restarted")
        async with Turn(restarted, LANE, "proj", "scene-1", H, journal=journal) as turn:
            assert turn.adopted and turn.ticket_id == ticket and turn.needs_reconcile
            assert turn.attempt_id == rec.attempt_id  # the idempotency key survived the crash
            with pytest.raises(ReconcileRequired):
                await turn.submit(provider.submit)
            with pytest.raises(ReconcileRequired):
                await turn.run(submit=provider.submit, poll=provider.poll)
            status = await turn.run(
                submit=provider.submit,
                poll=provider.poll,
                reconcile=provider.finder(turn.attempt_id),
            )
        assert status == "completed" and provider.submits == 0
        assert provider.finds == [rec.attempt_id] and len(provider.polls) == 1
    assert (await restarted.history(LANE)).entries[0].provider_job_id == provider.polls[0]


async def test_a_driver_killed_while_queued_is_adopted_not_queued_behind(
    coord: ThreadedCoordinator, clients: Clients, env: dict[str, str], state_dir: Path
) -> None:
    other = clients("studio-b", "claim-b")
    async with Turn(other, LANE, "proj", "scene-0", H) as holder:
        worker = subprocess.Popen(
            [PY, str(WORKER), coord.url, coord.token, str(state_dir / JOURNAL_FILE),
             str(state_dir / "provider"), "claim-killed", "queued"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            with Journal(state_dir / JOURNAL_FILE) as journal:
                await wait_until(lambda: journal.get(WINDOW) is not None, 60, "a queued row")
        finally:
            worker.kill()  # SIGKILL: no release, no cleanup
            worker.wait(30)
        with Journal(state_dir / JOURNAL_FILE) as journal:
            rec = journal.get(WINDOW)
            assert rec is not None and rec.phase == "acquired" and rec.fence is None
            restarted = clients("studio-a", "claim-restarted")
            waiting = Turn(restarted, LANE, "proj", "scene-1", H, journal=journal)
            task = asyncio.create_task(waiting.__aenter__())
            await wait_until(lambda: waiting.ticket_id is not None, 30, "the adopted ticket")
            assert waiting.adopted and waiting.ticket_id == rec.ticket_id
            st = await restarted.status(LANE)
            assert [t.ticket_id for t in st.queued] == [rec.ticket_id]  # no second ticket
            assert not task.done()
            await holder.__aexit__(None, None, None)  # (the outer exit then does nothing)
            holder.released = True
            await asyncio.wait_for(task, 30)
            assert waiting.granted and waiting.fence == 2
            await waiting.__aexit__(None, None, None)
    hist = await restarted.history(LANE)
    assert (hist.entries[0].ticket_id, hist.entries[0].outcome) == (rec.ticket_id, "completed")
    assert hist.entries[0].claim_id == "claim-killed"


async def test_a_submit_that_raises_keeps_its_ticket_until_reconciled(
    clients: Clients, journal: Journal, capsys: pytest.CaptureFixture[str]
) -> None:
    a = clients("studio-a", "claim-a")
    provider = FakeProvider()

    async def flaky_submit() -> str:
        raise ConnectionResetError("provider closed the connection mid-submit")

    with pytest.raises(ConnectionResetError):
        async with Turn(a, LANE, "proj", "scene-1", H, journal=journal) as turn:
            await turn.submit(flaky_submit)
    assert turn.kept_ticket and not turn.released and turn.release_reply is None
    st = await a.status(LANE)
    assert [(t.ticket_id, t.claim_id) for t in st.held] == [(turn.ticket_id, "claim-a")]
    assert (await a.history(LANE)).entries == []  # not released as failed
    rec = journal.get(WINDOW)
    assert rec is not None and (rec.phase, rec.needs) == ("submit-unknown", NEEDS_RECONCILE)
    assert "kept (submit of unknown fate)" in capsys.readouterr().err

    # the next turn on the window (same process here) adopts the kept ticket and must
    # reconcile first; the provider says it never got the job, so a submit is allowed
    async with Turn(a, LANE, "proj", "scene-1", H, journal=journal) as again:
        assert again.ticket_id == turn.ticket_id and again.needs_reconcile
        with pytest.raises(ReconcileRequired):
            await again.submit(provider.submit)
        assert provider.submits == []

        async def nothing_there() -> str | None:
            return None

        assert await again.reconcile(nothing_there) is None
        rec = journal.get(WINDOW)
        assert rec is not None and (rec.phase, rec.needs) == ("acquired", None)
        job = await again.submit(provider.submit)
        await again.poll(provider.poll)
    assert provider.submits == [job]
    entry = (await a.history(LANE)).entries[0]
    assert (entry.ticket_id, entry.outcome, entry.provider_job_id) == (
        turn.ticket_id, "completed", job
    )  # fmt: skip


async def test_an_exception_while_polling_leaves_the_job_to_resume(
    clients: Clients, journal: Journal
) -> None:
    a = clients()
    provider = FakeProvider()

    async def broken_poll(job_id: str) -> str:
        raise TimeoutError("provider status API down")

    with pytest.raises(TimeoutError):
        async with Turn(a, LANE, "proj", "scene-1", H, journal=journal) as turn:
            job = await turn.submit(provider.submit)
            await turn.poll(broken_poll)
    assert (await a.history(LANE)).entries[0].outcome == "failed"
    rec = journal.get(WINDOW)
    assert rec is not None and rec.phase == "submitted" and rec.job_in_flight
    async with Turn(a, LANE, "proj", "scene-1", H, journal=journal) as again:
        assert again.resumable and not again.adopted  # the old ticket was released
        assert await again.run(submit=provider.submit, poll=provider.poll) == "completed"
    assert provider.submits == [job] and provider.polls == [job]


def test_journal_file_rows_and_phases(state_dir: Path) -> None:
    path = state_dir / JOURNAL_FILE
    with Journal(path) as j:
        w = Window(LANE, "p", "s", "h")
        assert j.get(w) is None
        r = j.start(w, ticket_id="t_1", machine_id="m", claim_id="c", fence=4)
        assert (r.phase, r.fence, r.ticket_id, r.needs) == ("acquired", 4, "t_1", None)
        first_attempt = r.attempt_id
        j.update(w, phase="submitted", provider_job_id="job-1")
        kept = j.start(w, ticket_id="t_2", machine_id="m", claim_id="c2", keep_job=True)
        assert (kept.phase, kept.provider_job_id, kept.attempt_id) == (
            "submitted", "job-1", first_attempt
        )  # fmt: skip
        assert [x.window for x in j.unfinished()] == [w]
        j.update(w, phase="terminal", outcome="completed")
        fresh = j.start(w, ticket_id="t_3", machine_id="m", claim_id="c3")
        assert fresh.provider_job_id is None and fresh.attempt_id != first_attempt
        with pytest.raises(ValueError, match="phase"):
            j.update(w, phase="exploded")  # type: ignore[arg-type]
        with pytest.raises(KeyError):
            j.update(Window(LANE, "p", "other", "h"), phase="terminal")
        assert j.forget(w) and j.get(w) is None
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(
                "INSERT INTO windows VALUES ('l','p','s','h','a',NULL,NULL,NULL,NULL,NULL,"
                "'bogus',NULL,NULL,0,0)"
            )
    finally:
        db.close()


def test_journal_refuses_a_synced_folder(tmp_path: Path) -> None:
    from client.errors import SyncedFolderError

    with pytest.raises(SyncedFolderError):
        Journal(tmp_path / "Dropbox" / "lane" / JOURNAL_FILE)
