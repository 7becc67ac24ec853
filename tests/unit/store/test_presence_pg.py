"""What used to live in a server's memory, in the store so every replica tells the same story:
the evidence's machines seen (rows written through the lane transaction, on both stores) and
machine presence in PostgreSQL (the `presence` table, pg migration 0002)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from coordinator.engine.commands import Acquire, Heartbeat, TicketCall
from coordinator.engine.lane import LaneCore
from coordinator.engine.model import PruneMachinesSeen, PutCounters, PutMachineSeen
from coordinator.engine.operations import AcquireOp, EvidenceOp, HeartbeatOp, Operation
from coordinator.engine.store import Reads, lane_now
from coordinator.errors import StoreError
from coordinator.http.presence import Presence
from coordinator.store.postgres import migrate
from coordinator.store.presence import Sighting
from coordinator.store.presence_pg import PostgresPresenceStore
from tests.store_pg.kit import AnyStore, Stores, write
from tests.unit.kit import LANE, T0, make_settings

SETTINGS = make_settings(1, lease=600.0, waiter=100_000.0)
OTHER = "duo:main"


@pytest.fixture
def migrated(pg_dsn: str) -> str:
    migrate(pg_dsn)
    return pg_dsn


@pytest.fixture
def conn(migrated: str) -> Iterator[psycopg.Connection[DictRow]]:
    c = psycopg.connect(migrated, autocommit=True, row_factory=dict_row)
    yield c
    c.close()


# ---------------------------------------------------------------- machines seen, both stores


def test_machines_seen_round_trip(stores: Stores, store: AnyStore) -> None:
    assert store.load().machines_seen == {}
    write(store, [PutMachineSeen("mA", T0), PutMachineSeen("mB", T0 + 5)], last_now=T0 + 5)
    write(store, [PutMachineSeen("mA", T0 + 40), PutMachineSeen("mB", T0 + 1)], last_now=T0 + 40)
    store = stores.reopen(store)
    assert store.load().machines_seen == {"mA": T0 + 40, "mB": T0 + 5}  # the later time stays
    other = stores.new(OTHER)  # lanes never see each other's machines
    write(other, [PutMachineSeen("mC", T0 + 2)], last_now=T0 + 40)
    assert other.load().machines_seen == {"mC": T0 + 2}
    assert store.load().machines_seen == {"mA": T0 + 40, "mB": T0 + 5}
    write(store, [PruneMachinesSeen(T0 + 10)], last_now=T0 + 41)
    assert store.load().machines_seen == {"mA": T0 + 40}
    assert other.load().machines_seen == {"mC": T0 + 2}


def test_a_snapshot_loads_the_rows_of_the_last_hour_only(store: AnyStore) -> None:
    write(store, [PutMachineSeen("old", T0), PutMachineSeen("new", T0 + 100)], last_now=T0)
    assert store.load().machines_seen == {"old": T0, "new": T0 + 100}
    write(store, [PutCounters(0, 1)], last_now=T0 + 3650)  # the lane's clock moved on
    assert store.load().machines_seen == {"new": T0 + 100}


class Replicas:
    """Lane transactions through several stores of one lane, each keeping its own core and
    reloading it when another store moved the lane on (as replicas do)."""

    def __init__(self, stores: list[AnyStore]) -> None:
        self.stores = stores
        self.kept: dict[int, tuple[LaneCore, int]] = {}

    def run(self, i: int, op: Operation[Any], clock: float) -> Any:
        store = self.stores[i]
        head = store.begin()
        try:
            kept = self.kept.get(i)
            if kept is None or kept[1] != head.version:
                snap = store.load()
                kept = (LaneCore(LANE, SETTINGS, snap, 0.0), snap.version)
            core = kept[0]
            now = lane_now(clock, head.last_now)
            changes = list(core.advance(now).changes)
            result = op.run(core, now, Reads.perform(store, op.needs(core)))
            store.apply(changes + result.fx.changes)
            self.kept[i] = (core, store.finish(core.next_deadline(), now))
        except BaseException:
            store.abort()
            raise
        return result.reply

    def seen(self, i: int, clock: float) -> dict[str, float]:
        ev = self.run(i, EvidenceOp(None), clock).coordinator_evidence
        return {m.machine_id: m.last_seen_at for m in ev.machines_seen}


def test_every_replica_lists_the_machines_seen_through_the_others(pg_stores: Stores) -> None:
    r = Replicas([pg_stores.new(), pg_stores.new()])
    r.run(0, AcquireOp(Acquire("mA", "cA", "p", "s1", "h", None, "t_a")), T0)
    r.run(1, AcquireOp(Acquire("mB", "cB", "p", "s2", "h", None, "t_b")), T0 + 1)
    assert r.seen(0, T0 + 2) == {"mA": T0, "mB": T0 + 1}
    assert r.seen(1, T0 + 2) == {"mA": T0, "mB": T0 + 1}
    # a heartbeat within the throttle interval is seen at once by its own replica only; the
    # other lists the stored time (at most SEEN_WRITE_SECONDS behind)
    r.run(0, HeartbeatOp(Heartbeat(TicketCall("mA", "cA", "t_a"), None)), T0 + 10)
    assert r.seen(0, T0 + 11)["mA"] == T0 + 10
    assert r.seen(1, T0 + 11)["mA"] == T0
    r.run(1, HeartbeatOp(Heartbeat(TicketCall("mA", "cA", "t_a"), None)), T0 + 31)
    assert r.seen(0, T0 + 32)["mA"] == T0 + 31


# ---------------------------------------------------------------- presence in PostgreSQL


def test_the_migration_keys_every_row_by_its_lane(conn: psycopg.Connection[DictRow]) -> None:
    keys = conn.execute(
        "SELECT tc.table_name, array_agg(kcu.column_name::text ORDER BY kcu.ordinal_position) "
        "AS cols FROM information_schema.table_constraints tc JOIN "
        "information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_name IN "
        "('machines_seen', 'presence') GROUP BY tc.table_name ORDER BY tc.table_name"
    ).fetchall()
    assert [(k["table_name"], k["cols"]) for k in keys] == [
        ("machines_seen", ["lane", "machine_id"]),
        ("presence", ["machine_id", "lane"]),
    ]


def test_presence_rows_round_trip_between_replicas(migrated: str) -> None:
    one, two = PostgresPresenceStore(migrated), PostgresPresenceStore(migrated)
    try:
        one.record([Sighting("mA", LANE, T0 + 10), Sighting("mA", OTHER, T0)], T0 - 3600)
        two.record([Sighting("mA", LANE, T0 + 5), Sighting("mB", "", T0 + 1)], T0 - 3600)
        want = [
            Sighting("mA", OTHER, T0),
            Sighting("mA", LANE, T0 + 10),  # the later time stays
            Sighting("mB", "", T0 + 1),
        ]
        assert one.recent(T0 - 3600, 10) == two.recent(T0 - 3600, 10) == want
        assert {s.machine_id for s in two.recent(0.0, 1)} == {"mA"}  # the most recent machine
        two.record([Sighting("mC", LANE, T0 + 7200)], T0 + 3600)  # a write prunes older rows
        assert one.recent(0.0, 10) == [Sighting("mC", LANE, T0 + 7200)]
        assert one.writes == 2 and two.writes == 3
    finally:
        one.close()
        two.close()


def test_presence_reconnects_after_a_lost_session(
    migrated: str, conn: psycopg.Connection[DictRow]
) -> None:
    s = PostgresPresenceStore(migrated)
    try:
        s.record([Sighting("mA", LANE, T0)], 0.0)
        others = "application_name = 'lane-coordinator' AND pid <> pg_backend_pid()"
        conn.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {others}")
        for _ in range(500):  # until the session is gone (terminating is asynchronous)
            if conn.execute(f"SELECT 1 FROM pg_stat_activity WHERE {others}").fetchone() is None:
                break
            time.sleep(0.01)
        with pytest.raises(StoreError):
            s.recent(0.0, 10)
        assert s.recent(0.0, 10) == [Sighting("mA", LANE, T0)]  # a new session
    finally:
        s.close()


async def test_a_sighting_through_one_replica_is_listed_by_another(migrated: str) -> None:
    one = Presence(PostgresPresenceStore(migrated), None)
    two = Presence(PostgresPresenceStore(migrated), None)
    try:
        one.saw("mA", T0, LANE)  # a first sighting: written at once
        await one.flushed()
        [m] = await two.view(T0 + 1)
        assert (m.machine_id, m.last_seen_at, m.lanes, m.online) == ("mA", T0, [LANE], True)
        two.saw("mB", T0 + 2, OTHER)
        await two.flushed()
        assert [x.machine_id for x in await one.view(T0 + 3)] == ["mB", "mA"]
    finally:
        await one.close()
        await two.close()
