"""In-flight provider jobs on two replicas of one PostgreSQL database
(docs/protocol.md#in-flight): a hold made through replica 1 blocks promotion on replica 2, and
the alarm that ends it at holdUntil fires from whichever replica is alive."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from coordinator.constants import ALARM_POLL_SECONDS, PARKED_RECHECK_SECONDS
from coordinator.store.postgres_db import migrate
from tests.harness import TestManualClock, make_config, start_running
from tests.integration.kit import receipt_body, ticket_body
from tests.replicas.test_cross_replica import LANE, acquire_body

HOLD = 100.0


async def test_a_hold_made_on_one_replica_blocks_the_other_until_the_alarm_on_the_survivor(
    tmp_path: Path, pg_dsn: str
) -> None:
    migrate(pg_dsn)
    clock = TestManualClock()
    config = make_config(lane_holds={LANE: HOLD})
    r1 = await start_running(tmp_path / "r1", config=config, clock=clock, store=pg_dsn)
    r2 = await start_running(tmp_path / "r2", config=config, clock=clock, store=pg_dsn)
    running = [r1, r2]
    try:
        a = (await r1.ok("acquire", acquire_body("studio-a", "s1", leaseSeconds=30)))["ticket"]
        b = (await r2.ok("acquire", acquire_body("studio-b", "s2")))["ticket"]
        submitted = clock.now()
        body = receipt_body(LANE, a["ticketId"], "provider-submitted", machine="studio-a")
        await r1.ok("receipt", {**body, "claimId": None}, 201)
        clock.advance(31)  # A's lease ends on replica 1: its job may still run
        st1 = await r1.ok("status", {"lane": LANE})
        assert [j["ticketId"] for j in st1["inFlight"]] == [a["ticketId"]]
        st2 = await r2.ok("status", {"lane": LANE})  # replica 2 loads the hold: no grant
        assert st2["held"] == [] and [t["ticketId"] for t in st2["queued"]] == [b["ticketId"]]
        assert [j["holdUntil"] for j in st2["inFlight"]] == [submitted + HOLD]
        running.remove(r1)
        await r1.stop()  # the replica that made the hold is gone
        waiting = asyncio.ensure_future(
            r2.ok("await", ticket_body(LANE, b["ticketId"], "studio-b", None, waitSeconds=60))
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()
        clock.advance(submitted + HOLD - clock.now())  # nobody calls the lane
        started = time.monotonic()
        woke = await asyncio.wait_for(waiting, 10)
        assert woke["granted"] is True and woke["ticket"]["fence"] == a["fence"] + 1
        assert time.monotonic() - started < ALARM_POLL_SECONDS + PARKED_RECHECK_SECONDS / 2
        hist = await r2.ok("history", {"lane": LANE})
        [row] = [e for e in hist["entries"] if e["ticketId"] == a["ticketId"]]
        assert (row["inFlightUntil"], row["inFlightEnded"]) == (submitted + HOLD, "expired")
    finally:
        for srv in running:
            await srv.stop()


async def test_a_terminal_receipt_through_the_other_replica_ends_the_hold(
    tmp_path: Path, pg_dsn: str
) -> None:
    migrate(pg_dsn)
    clock = TestManualClock()
    r1 = await start_running(tmp_path / "r1", config=make_config(), clock=clock, store=pg_dsn)
    r2 = await start_running(tmp_path / "r2", config=make_config(), clock=clock, store=pg_dsn)
    try:
        a = (await r1.ok("acquire", acquire_body("studio-a", "s1")))["ticket"]["ticketId"]
        b = (await r2.ok("acquire", acquire_body("studio-b", "s2")))["ticket"]["ticketId"]
        body = receipt_body(LANE, a, "provider-submitted", machine="studio-a", claim=None)
        await r1.ok("receipt", body, 201)
        rel = ticket_body(LANE, a, "studio-a", None, outcome="lease-lost")
        assert (await r1.ok("release", rel))["promoted"] == []
        assert (await r2.ok("status", {"lane": LANE}))["held"] == []
        body = receipt_body(LANE, a, "provider-terminal", machine="studio-a", claim=None)
        await r2.ok("receipt", body, 201)
        st = await r1.ok("status", {"lane": LANE})
        assert [t["ticketId"] for t in st["held"]] == [b] and st["inFlight"] == []
    finally:
        await r1.stop()
        await r2.stop()
