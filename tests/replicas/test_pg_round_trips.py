"""The PostgreSQL lane transaction in few round trips: `begin_load` reads the lane under its
lock in the same round trip as BEGIN (and gives what `load` gives), `commit` pipelines the
writes, the version and COMMIT (and still keeps nothing when the version cannot be written),
and a replica's LISTEN session skips the notifications its own sessions sent."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import psycopg
import pytest

from coordinator.constants import STORE_BUSY_TIMEOUT_MS
from coordinator.engine.model import (
    Incident,
    IncidentKind,
    Pause,
    PutCounters,
    PutIncident,
    PutMachineSeen,
    PutPause,
    PutProjectServed,
    PutTicket,
    TicketState,
)
from coordinator.engine.store import Writes
from coordinator.errors import StoreError
from coordinator.store.pg_listen import listen_forever
from coordinator.store.postgres import PostgresLaneStore, migrate
from coordinator.store.postgres_db import ConnectionPool
from tests.store_pg.kit import ended, ticket, write
from tests.unit.kit import T0

LANE = "solo:round-trips"


@pytest.fixture
def dsn(pg_dsn: str) -> str:
    migrate(pg_dsn)
    return pg_dsn


def _populate(store: PostgresLaneStore) -> None:
    """A lane with something in every table a snapshot reads."""
    pause = Pause("rate-limit", T0 + 5, T0 + 500, "mA", "cA", "t1")
    write(
        store,
        [
            PutTicket(ticket("t1", 1, state=TicketState.HELD, lane=LANE)),
            PutTicket(ticket("t2", 2, machine="mB", claim="cB", lane=LANE)),
            PutTicket(ended("t0", 0, T0 + 3, held_at=T0 + 1)),
            PutCounters(7, 3),
            PutProjectServed("p", 7, T0 + 1),
            PutPause(pause),
            PutIncident(Incident(IncidentKind.LEASE_EXPIRED.value, T0 + 2, "t0", "mA", {})),
            PutIncident(
                Incident(IncidentKind.DUPLICATE_COLLISION.value, T0 + 4, "t2", "mB", {"n": 2})
            ),
            PutMachineSeen("mA", T0 + 6),
            PutMachineSeen("mB", T0 + 7),
        ],
        last_now=T0 + 8,
    )


def test_begin_load_reads_under_the_lock_what_load_reads(dsn: str) -> None:
    writer = PostgresLaneStore(dsn, LANE)
    writer.open()
    reader = PostgresLaneStore(dsn, LANE)
    reader.open()
    try:
        _populate(writer)
        expected = reader.load()
        assert expected.live and expected.pause is not None and expected.last_collision
        assert expected.machines_seen and expected.recent_holds and expected.history_count
        head, snap = reader.begin_load(load=True)
        reader.abort()
        assert snap == expected
        assert head.version == expected.version == 1
        head, snap = reader.begin_load(load=False)
        reader.abort()
        assert snap is None and head.version == 1
    finally:
        writer.close()
        reader.close()


def test_begin_load_of_a_new_lane_creates_its_row_and_reads_nothing(dsn: str) -> None:
    store = PostgresLaneStore(dsn, "solo:brand-new")
    store.open()
    try:
        head, snap = store.begin_load(load=True)
        assert head.version == 0 and snap is None  # read before the row existed: not used
        assert store.finish(None, T0) == 1
    finally:
        store.close()


def test_a_commit_that_cannot_write_the_version_keeps_none_of_its_changes(dsn: str) -> None:
    store = PostgresLaneStore(dsn, LANE)
    store.open()
    try:
        write(store, [PutTicket(ticket("t1", 1, lane=LANE)), PutCounters(1, 2)])
        store.begin()
        assert store._txn is not None
        # the lanes row (and with it the lane's tickets) gone inside the transaction: the
        # COMMIT pipelined after the version's statement must roll all of it back
        store._txn.execute("DELETE FROM lanes WHERE lane = %s", (LANE,))
        with pytest.raises(StoreError, match="lost its lanes row"):
            store.commit(Writes([PutCounters(5, 6)], None, T0, True))
        snap = store.load()
        assert (snap.version, snap.last_fence, snap.next_seq) == (1, 1, 2)
        assert [t.ticket_id for t in snap.live] == ["t1"]
    finally:
        store.close()


def test_a_failed_write_in_the_pipeline_rolls_the_whole_group_back(dsn: str) -> None:
    store = PostgresLaneStore(dsn, LANE)
    store.open()
    try:
        write(store, [PutCounters(1, 2)])
        store.begin()
        bad = ticket("t8", 8, lane=LANE)
        bad.lease_seconds = -1.0  # the table's CHECK refuses it, in the middle of the pipeline
        with pytest.raises(StoreError):
            store.commit(Writes([PutCounters(5, 6), PutTicket(bad)], None, T0, False))
        snap = store.load()
        assert (snap.version, snap.last_fence, snap.next_seq) == (1, 1, 2)
        assert write(store, [PutCounters(2, 3)]) == 2  # the session is usable again
    finally:
        store.close()


async def test_the_listen_session_skips_what_its_own_replica_sent(dsn: str) -> None:
    pool = ConnectionPool(dsn, 4, lock_timeout_ms=STORE_BUSY_TIMEOUT_MS)
    ours = PostgresLaneStore(dsn, LANE, source=pool)
    theirs = PostgresLaneStore(dsn, LANE)  # another replica: a session of its own
    ours.open()
    theirs.open()
    heard: list[str] = []
    connected = threading.Event()
    arrived = asyncio.Event()

    def on_lane(lane: str) -> None:
        heard.append(lane)
        arrived.set()

    listener = asyncio.create_task(
        listen_forever(dsn, on_lane, connected.set, ours=pool.sent_by_us)
    )

    def notify(store: PostgresLaneStore) -> None:
        store.begin()
        store.commit(Writes([], None, T0, True))

    try:
        await asyncio.to_thread(connected.wait, 10)
        await asyncio.to_thread(notify, ours)
        await asyncio.to_thread(notify, theirs)  # delivered after ours (commit order)
        await asyncio.wait_for(arrived.wait(), 10)
        await asyncio.sleep(0.1)
        assert heard == [LANE]  # theirs only
        assert ours._txn is None
        with ours._session() as db:  # a session of the pool is ours while it is open
            pid = db.info.backend_pid
            assert pool.sent_by_us(pid)
        pool.close()
        assert not pool.sent_by_us(pid)  # closed with the pool: no longer ours
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
            await listener
        ours.close()
        theirs.close()
        pool.close()
