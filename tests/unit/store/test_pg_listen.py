"""The LISTEN session of one replica (coordinator/store/pg_listen.py): it hears the lanes
other sessions name on the channel, skips what this replica sent itself, and says when it
(re)connected — on a fresh database of the session's cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from coordinator.store import postgres_db as db
from coordinator.store.pg_listen import listen_forever
from tests.unit.kit import LANE


@dataclass
class Heard:
    lanes: list[str] = field(default_factory=list)
    connects: int = 0
    ours: set[int] = field(default_factory=set)

    async def until(self, check: Callable[[], bool], timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.02)


@pytest.fixture
async def heard(pg_dsn: str) -> AsyncIterator[Heard]:
    h = Heard()

    def on_connected() -> None:
        h.connects += 1

    task = asyncio.create_task(
        listen_forever(
            pg_dsn,
            h.lanes.append,
            on_connected,
            health_seconds=0.2,
            retry_seconds=0.1,
            ours=lambda pid: pid in h.ours,
        )
    )
    await h.until(lambda: h.connects == 1)
    yield h
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _notify(dsn: str, lane: str, *, ours: set[int] | None = None) -> None:
    conn = db.connect(dsn)
    try:
        if ours is not None:
            ours.add(conn.info.backend_pid)
        conn.execute("SELECT pg_notify(%s, %s)", (db.NOTIFY_CHANNEL, lane))
    finally:
        conn.close()


async def test_a_lane_named_by_another_session_is_heard(heard: Heard, pg_dsn: str) -> None:
    await asyncio.to_thread(_notify, pg_dsn, LANE)
    await heard.until(lambda: heard.lanes == [LANE])


async def test_a_notification_this_replica_sent_is_skipped(heard: Heard, pg_dsn: str) -> None:
    await asyncio.to_thread(_notify, pg_dsn, "mine:main", ours=heard.ours)
    await asyncio.to_thread(_notify, pg_dsn, LANE)  # heard after the skipped one, if ever
    await heard.until(lambda: LANE in heard.lanes)
    assert heard.lanes == [LANE]


async def test_a_lost_session_is_opened_again_and_says_so(heard: Heard, pg_dsn: str) -> None:
    def kill_listener() -> int:
        conn = db.connect(pg_dsn)
        try:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity "
                "WHERE application_name = 'lane-coordinator-listen' "
                "AND datname = current_database()"
            ).fetchall()
            return len(rows)
        finally:
            conn.close()

    assert await asyncio.to_thread(kill_listener) == 1
    await heard.until(lambda: heard.connects == 2)  # parked awaits re-check: notes were lost
    await asyncio.to_thread(_notify, pg_dsn, LANE)
    await heard.until(lambda: heard.lanes == [LANE])
