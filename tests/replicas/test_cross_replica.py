"""Two replicas on one PostgreSQL database, in this process: what one replica commits,
the other acts on — a parked await is woken by a NOTIFY, an alarm armed by a replica that is
gone is fired by the other's poller, lanes and clocks agree."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.actor.locking import LockingLaneActor
from coordinator.constants import ALARM_POLL_SECONDS, PARKED_RECHECK_SECONDS
from coordinator.engine.model import LaneSnapshot
from coordinator.engine.store import LaneHead
from coordinator.http.middleware import REGISTRY_KEY
from coordinator.store.postgres import PostgresLaneStore
from coordinator.store.postgres_db import migrate
from tests.harness import Running, TestManualClock, TestSystemClock, make_config, start_running

LANE = "solo:replicas"
H = "sha256:" + "ab" * 32


def acquire_body(machine: str, scene: str, **kw: object) -> dict[str, object]:
    return {
        "lane": LANE,
        "machineId": machine,
        "project": "proj",
        "scene": scene,
        "promptHash": H,
        **kw,
    }


@pytest.fixture
async def replicas(tmp_path: Path, pg_dsn: str) -> AsyncIterator[list[Running]]:
    migrate(pg_dsn)
    clock = TestSystemClock()
    started = [
        await start_running(tmp_path / f"r{i}", config=make_config(), clock=clock, store=pg_dsn)
        for i in range(2)
    ]
    yield started
    for srv in started:
        await srv.stop()


async def test_a_release_on_one_replica_wakes_an_await_parked_on_the_other(
    replicas: list[Running],
) -> None:
    r1, r2 = replicas
    a = await r1.ok("acquire", acquire_body("studio-a", "s1"))
    assert a["ticket"]["state"] == "held"
    b = await r2.ok("acquire", acquire_body("studio-b", "s2"))
    assert b["ticket"]["state"] == "queued"
    tid = b["ticket"]["ticketId"]
    waiting = asyncio.ensure_future(
        r2.ok("await", {"lane": LANE, "machineId": "studio-b", "ticketId": tid, "waitSeconds": 30})
    )
    await asyncio.sleep(0.3)  # parked on replica 2
    assert not waiting.done()
    released_at = time.monotonic()
    await r1.ok(
        "release",
        {
            "lane": LANE,
            "machineId": "studio-a",
            "ticketId": a["ticket"]["ticketId"],
            "outcome": "completed",
        },
    )
    woke = await asyncio.wait_for(waiting, 10)
    latency = time.monotonic() - released_at
    assert woke["ticket"]["state"] == "held"
    assert woke["ticket"]["fence"] == a["ticket"]["fence"] + 1
    # the NOTIFY, not the safety re-check on a timer, woke it
    assert latency < PARKED_RECHECK_SECONDS / 2, latency


async def test_both_replicas_list_the_same_lanes_and_state(replicas: list[Running]) -> None:
    r1, r2 = replicas
    await r1.ok("acquire", acquire_body("studio-a", "s1"))
    await r2.ok("acquire", acquire_body("studio-b", "s2"))
    for srv in replicas:
        lanes = (await srv.get("/v1/lanes")).body["lanes"]
        row = next(x for x in lanes if x["lane"] == LANE)
        assert (row["held"], row["queued"]) == (1, 1)
        st = await srv.ok("status", {"lane": LANE})
        assert st["coordinator"] == "actor-postgres"
        assert (len(st["held"]), len(st["queued"])) == (1, 1)


async def test_an_alarm_armed_on_a_replica_that_is_gone_fires_on_the_other(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Replica 1 grants a lease and arms its expiry, then stops; replica 2 never touched the
    lane's holder. When the lease runs out, replica 2's alarm poller expires it and promotes
    the ticket parked on replica 2 (within a poll, far sooner than the re-check timer)."""
    migrate(pg_dsn)
    clock = TestManualClock()
    r1 = await start_running(tmp_path / "r1", config=make_config(), clock=clock, store=pg_dsn)
    r2 = await start_running(tmp_path / "r2", config=make_config(), clock=clock, store=pg_dsn)
    try:
        a = await r1.ok("acquire", acquire_body("studio-a", "s1", leaseSeconds=30))
        b = await r2.ok("acquire", acquire_body("studio-b", "s2"))
        tid = b["ticket"]["ticketId"]
        await r1.stop()
        waiting = asyncio.ensure_future(
            r2.ok(
                "await",
                {"lane": LANE, "machineId": "studio-b", "ticketId": tid, "waitSeconds": 60},
            )
        )
        await asyncio.sleep(0.2)
        clock.advance(31)  # the lease is over; nobody calls the lane
        started = time.monotonic()
        woke = await asyncio.wait_for(waiting, 10)
        assert woke["ticket"]["state"] == "held"
        assert woke["ticket"]["fence"] == a["ticket"]["fence"] + 1
        assert time.monotonic() - started < ALARM_POLL_SECONDS + PARKED_RECHECK_SECONDS / 2
        hist = await r2.ok("history", {"lane": LANE})
        assert [e["outcome"] for e in hist["entries"]] == ["expired"]
    finally:
        await r2.stop()


async def test_presence_seen_through_one_replica_is_listed_by_the_other(
    replicas: list[Running],
) -> None:
    r1, r2 = replicas
    await r1.ok("acquire", acquire_body("studio-seen-on-r1", "s1"))
    deadline = time.monotonic() + 10
    while True:
        machines = (await r2.get("/v1/machines")).body["machines"]
        ids = [m["machineId"] for m in machines]
        if "studio-seen-on-r1" in ids or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert "studio-seen-on-r1" in ids
    row = next(m for m in machines if m["machineId"] == "studio-seen-on-r1")
    assert row["lanes"] == [LANE] and row["online"] is True
    # evidence: the lane's machines seen, read through the other replica
    ev = (await r2.get("/v1/evidence", params={"lane": LANE})).body
    seen = ev["coordinatorEvidence"]["machinesSeen"]
    assert [m["machineId"] for m in seen] == ["studio-seen-on-r1"]


async def test_a_parked_await_woken_by_another_change_keeps_waiting(
    replicas: list[Running],
) -> None:
    """A wake-up is a reason to look again, not to answer: another replica's change to the
    lane that leaves the ticket queued (here a third, queued ticket withdrawn: a NOTIFY) does
    not end a parked await; the grant does."""
    r1, r2 = replicas
    a = await r1.ok("acquire", acquire_body("studio-a", "s1"))
    b = await r2.ok("acquire", acquire_body("studio-b", "s2"))
    waiting = asyncio.ensure_future(
        r2.ok(
            "await",
            {
                "lane": LANE,
                "machineId": "studio-b",
                "ticketId": b["ticket"]["ticketId"],
                "waitSeconds": 30,
            },
        )
    )
    await asyncio.sleep(0.3)
    c = await r1.ok("acquire", acquire_body("studio-c", "s3"))
    assert c["ticket"]["state"] == "queued"
    withdrawn = await r1.ok(  # a ticket changed state: NOTIFY, every parked await wakes
        "release",
        {
            "lane": LANE,
            "machineId": "studio-c",
            "ticketId": c["ticket"]["ticketId"],
            "outcome": "not-submitted",
        },
    )
    assert withdrawn["released"] is True
    await asyncio.sleep(1.0)
    assert not waiting.done(), waiting.result()
    await r1.ok(
        "release",
        {
            "lane": LANE,
            "machineId": "studio-a",
            "ticketId": a["ticket"]["ticketId"],
            "outcome": "completed",
        },
    )
    woke = await asyncio.wait_for(waiting, 10)
    assert woke["ticket"]["state"] == "held"


async def test_a_woken_await_reads_the_lane_in_the_round_trip_of_its_lock(
    replicas: list[Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notification tells the replica the lane moved on: the woken await's transaction
    reads the lane with BEGIN and the lock (one round trip), not in a second one."""
    r1, r2 = replicas
    a = await r1.ok("acquire", acquire_body("studio-a", "s1"))
    b = await r2.ok("acquire", acquire_body("studio-b", "s2"))
    tid = b["ticket"]["ticketId"]
    waiting = asyncio.ensure_future(
        r2.ok("await", {"lane": LANE, "machineId": "studio-b", "ticketId": tid, "waitSeconds": 30})
    )
    await asyncio.sleep(0.3)  # parked on replica 2
    actor = await r2.app[REGISTRY_KEY].get(LANE, create=False)
    assert isinstance(actor, LockingLaneActor) and isinstance(actor.store, PostgresLaneStore)
    store = actor.store
    calls: list[str] = []
    begin_load, load = store.begin_load, store.load

    def spy_begin_load(*, load: bool) -> tuple[LaneHead, LaneSnapshot | None]:
        calls.append(f"begin_load(load={load})")
        return begin_load(load=load)

    def spy_load() -> LaneSnapshot:
        calls.append("load")
        return load()

    monkeypatch.setattr(store, "begin_load", spy_begin_load)
    monkeypatch.setattr(store, "load", spy_load)
    await r1.ok(
        "release",
        {
            "lane": LANE,
            "machineId": "studio-a",
            "ticketId": a["ticket"]["ticketId"],
            "outcome": "completed",
        },
    )
    woke = await asyncio.wait_for(waiting, 10)
    assert woke["ticket"]["state"] == "held"
    assert "begin_load(load=True)" in calls and "load" not in calls, calls
