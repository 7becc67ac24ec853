"""PipelinedLaneActor (coordinator/actor/pipelined.py): its pipelined group commit, on a real
SQLite file.

A store whose commits can be held open or made to fail shows: replies leave only after
their own group's COMMIT; jobs that arrive while a commit is in flight are executed into
the next group and committed together; a failed commit answers 503 to every job that
built on it and the lane is rebuilt from its file, which still holds every acknowledged
change and nothing else. A commit that finds the lane's version moved on (another writer)
fails the same way and reloads; the lane's clock never runs back, across a restart too.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coordinator.actor.pipelined import PipelinedLaneActor
from coordinator.clock import ManualClock
from coordinator.engine.commands import Acquire, Release, TicketCall
from coordinator.engine.model import Change, LaneSettings
from coordinator.engine.operations import AcquireOp, ReleaseOp, StatusOp
from coordinator.engine.store import Group
from coordinator.errors import StoreError
from coordinator.protocol.constants import STATUS_QUEUED_LIMIT
from coordinator.protocol.errors import Unavailable
from coordinator.store.sqlite import SqliteLaneStore

LANE = "solo:main"


class GatedStore(SqliteLaneStore):
    """A real SQLite store whose next commit can be held open, or made to fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, LANE)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_next = False
        self.commits: list[int] = []  # number of changes in each successful commit
        self._applied = 0

    def apply(self, changes: Sequence[Change]) -> None:
        super().apply(changes)
        self._applied = len(changes)

    def commit_prepared(self, group: Group) -> int:
        """The COMMIT, on the store thread (the group was written on the event loop)."""
        self.entered.set()
        self.gate.wait(10)
        if self.fail_next:
            self.fail_next = False
            self.abort()
            raise StoreError("disk on fire")
        done = super().commit_prepared(group)
        self.commits.append(self._applied)
        return done


def settings(capacity: int = 1) -> LaneSettings:
    return LaneSettings(
        capacity=capacity,
        default_lease_seconds=300,
        waiter_timeout_seconds=600,
        default_hold_seconds=300,
        history_retained=5000,
        incidents_retained=2000,
    )


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[tuple[PipelinedLaneActor, GatedStore]]:
    store = GatedStore(tmp_path / "solo+main.sqlite")
    executor = ThreadPoolExecutor(2)
    a = PipelinedLaneActor(LANE, settings(capacity=100), store, executor, ManualClock())
    await a.start()
    try:
        yield a, store
    finally:
        store.gate.set()
        await a.stop()
        executor.shutdown()


def wire(reply: msgspec.Struct) -> dict[str, Any]:
    """A core reply as the JSON object it is on the wire."""
    out: dict[str, Any] = msgspec.to_builtins(reply)
    return out


class WireOp:
    """An engine operation whose reply is the JSON object it is on the wire."""

    def __init__(self, op: AcquireOp | ReleaseOp) -> None:
        self.op = op
        self.creates = op.creates

    def needs(self, core: Any) -> Any:
        return self.op.needs(core)

    def run(self, core: Any, now: float, reads: Any) -> Any:
        result = self.op.run(core, now, reads)
        result.reply = wire(result.reply)  # type: ignore[assignment]
        return result


def acquire(n: int, machine: str = "m") -> Any:
    return WireOp(AcquireOp(Acquire(machine, None, "p", "s", f"h{n}", None, f"t_{n:04d}")))


def release(ticket_id: str) -> Any:
    """A release: once the ticket has ended, it is read from the store first."""
    return WireOp(ReleaseOp(Release(TicketCall("m", None, ticket_id), "completed", None, None)))


def on_disk(path: Path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT ticket_id, state FROM tickets").fetchall())
    finally:
        db.close()


async def wait_entered(store: GatedStore) -> None:
    assert await asyncio.to_thread(store.entered.wait, 10)


async def test_reply_leaves_only_after_its_commit(
    actor: tuple[PipelinedLaneActor, GatedStore],
) -> None:
    a, store = actor
    store.gate.clear()
    store.entered.clear()
    first = asyncio.ensure_future(a.submit(acquire(1)))
    await wait_entered(store)
    await asyncio.sleep(0.05)
    assert not first.done()  # held inside COMMIT: no reply yet
    assert "t_0001" not in on_disk(store.path)
    store.gate.set()
    reply = await first
    assert reply["ticket"]["ticketId"] == "t_0001"
    assert on_disk(store.path)["t_0001"] == "held"


async def test_jobs_arriving_during_a_commit_join_the_next_group(
    actor: tuple[PipelinedLaneActor, GatedStore],
) -> None:
    a, store = actor
    before = len(store.commits)
    store.gate.clear()
    store.entered.clear()
    first = asyncio.ensure_future(a.submit(acquire(1)))
    await wait_entered(store)
    rest = [asyncio.ensure_future(a.submit(acquire(n))) for n in range(2, 12)]
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in [first, *rest])
    # Pipelined: the ten were already run in memory while the first group committed.
    assert a.core is not None and "t_0011" in a.core.live
    assert "t_0011" not in on_disk(store.path)
    store.gate.set()
    replies = await asyncio.gather(first, *rest)
    assert [r["ticket"]["ticketId"] for r in replies] == [f"t_{n:04d}" for n in range(1, 12)]
    # One commit for the first job, one for the ten that queued up behind it.
    assert len(store.commits) - before == 2
    assert len(on_disk(store.path)) == 11


async def test_a_lane_locked_by_another_process_commits_on_a_store_thread(
    actor: tuple[PipelinedLaneActor, GatedStore],
) -> None:
    """A group is written on the event loop only when the lane's write lock is free at once:
    while another connection holds it, the loop never waits for it; the group is committed on
    a store thread, which waits (busy_timeout), and the reply leaves after that COMMIT."""
    a, store = actor
    await a.submit(acquire(1))  # the connection is warm (its groups are prepared on the loop)
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the lane's write lock
        pending = asyncio.ensure_future(a.submit(acquire(2)))
        started = time.monotonic()
        for _ in range(10):  # the event loop keeps running meanwhile (busy_timeout is 5 s)
            await asyncio.sleep(0.01)
        assert time.monotonic() - started < 1.0
        assert not pending.done()  # its commit waits for the lock, on a store thread
        other.execute("ROLLBACK")
    finally:
        other.close()
    reply = await asyncio.wait_for(pending, 10)
    assert reply["ticket"]["state"] == "held"
    assert on_disk(store.path)["t_0002"] == "held"
    again = await a.submit(acquire(3))  # and the next group is prepared on the loop again
    assert on_disk(store.path)["t_0003"] == again["ticket"]["state"] == "held"


async def test_failed_commit_fails_every_job_built_on_it(
    actor: tuple[PipelinedLaneActor, GatedStore],
) -> None:
    a, store = actor
    kept = await a.submit(acquire(1))
    assert kept["ticket"]["state"] == "held"
    store.gate.clear()
    store.entered.clear()
    store.fail_next = True
    doomed = asyncio.ensure_future(a.submit(acquire(2)))
    await wait_entered(store)
    # Executed in memory on top of the doomed group while its commit is in flight.
    behind = asyncio.ensure_future(a.submit(acquire(3)))
    await asyncio.sleep(0.05)
    store.gate.set()
    for fut in (doomed, behind):
        with pytest.raises(Unavailable):
            await fut
    assert on_disk(store.path) == {"t_0001": "held"}
    # The lane was rebuilt from its file: the same identities start over cleanly.
    again = await a.submit(acquire(2))
    assert again["ticket"]["ticketId"] == "t_0002" and again["duplicate"] is False
    assert again["ticket"]["position"] == 0
    assert a.core is not None and set(a.core.live) == {"t_0001", "t_0002"}
    assert on_disk(store.path) == {"t_0001": "held", "t_0002": "held"}


async def test_read_commits_pending_first(actor: tuple[PipelinedLaneActor, GatedStore]) -> None:
    a, store = actor
    r = await a.submit(acquire(1))
    tid = r["ticket"]["ticketId"]
    out = await asyncio.gather(a.submit(release(tid)), a.submit(release(tid)))
    assert out[0]["released"] is True
    # The second release read the ended ticket from the file: it saw the first's commit.
    assert out[1]["released"] is False and out[1]["reason"] == "already-done"
    assert on_disk(store.path)[tid] == "done"


class RewindableClock(ManualClock):
    """A ManualClock that can also step back (an NTP step, another replica's clock)."""

    def rewind(self, seconds: float) -> None:
        self._now -= seconds


async def test_stale_version_fails_the_group_and_reloads(
    actor: tuple[PipelinedLaneActor, GatedStore],
) -> None:
    a, store = actor
    kept = await a.submit(acquire(1))
    assert kept["ticket"]["state"] == "held"
    # Another writer commits behind the actor's back: the file is now a version ahead.
    db = sqlite3.connect(store.path)
    try:
        db.execute("UPDATE lane_head SET version = version + 1")
        db.execute("UPDATE tickets SET state = 'done', outcome = 'completed', ended_at = 1")
        db.commit()
    finally:
        db.close()
    with pytest.raises(Unavailable):
        await a.submit(acquire(2))  # its group's commit finds the version moved: 503
    assert on_disk(store.path) == {"t_0001": "done"}
    # Reloaded from the file: the other writer's change is seen, and commits work again.
    again = await a.submit(acquire(2))
    assert again["ticket"]["state"] == "held" and again["duplicate"] is False
    assert a.core is not None and set(a.core.live) == {"t_0002"}
    assert on_disk(store.path) == {"t_0001": "done", "t_0002": "held"}


async def test_lane_clock_never_runs_back(tmp_path: Path) -> None:
    clock = RewindableClock()
    t0 = clock.now()
    executor = ThreadPoolExecutor(2)
    path = tmp_path / "solo+main.sqlite"
    status = StatusOp(STATUS_QUEUED_LIMIT)
    try:
        a = PipelinedLaneActor(LANE, settings(), SqliteLaneStore(path, LANE), executor, clock)
        await a.start()
        await a.submit(acquire(1))
        clock.rewind(100)
        assert (await a.submit(status)).now == t0
        second = await a.submit(acquire(2))
        assert second["ticket"]["enqueuedAt"] == t0  # not 100 s before the first
        await a.stop()
        # A restart (or a replica) whose clock is behind starts from the lane's last `now`.
        b = PipelinedLaneActor(LANE, settings(), SqliteLaneStore(path, LANE), executor, clock)
        await b.start()
        try:
            assert (await b.submit(status)).now == t0
            clock.set(t0 + 5)
            assert (await b.submit(status)).now == t0 + 5
        finally:
            await b.stop()
    finally:
        executor.shutdown()
