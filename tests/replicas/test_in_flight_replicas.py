"""In-flight provider jobs on two replicas of one PostgreSQL database
(docs/protocol.md#in-flight): a hold made through replica 1 blocks promotion on replica 2, and
the alarm that ends it at holdUntil fires from whichever replica is alive — also when the
replica that made the hold was killed with SIGKILL (replicas as real processes)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

from coordinator.constants import ALARM_POLL_SECONDS, PARKED_RECHECK_SECONDS
from coordinator.store.postgres_db import migrate
from tests.harness import (
    CoordinatorProcess,
    StartCoordinator,
    TestManualClock,
    cli,
    make_config,
    start_running,
    write_token_file,
)
from tests.integration.kit import receipt_body, ticket_body
from tests.replicas.test_cross_replica import LANE, acquire_body

HOLD = 100.0
LONG, SHORT = "solo:kill-long", "solo:kill-short"  # holds 1800 s (the default) and KILL_HOLD
KILL_HOLD = 8.0


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


def test_holds_survive_kill_9_of_the_replica_that_made_them(
    start_coordinator: StartCoordinator, pg_dsn: str, tmp_path: Path
) -> None:
    """Two `serve --store` replicas (real processes). Through replica 1: a ticket with a
    provider-submitted receipt released `lease-lost` — a hold — on two lanes (holds 1800 s
    and 8 s), a waiter behind each through replica 2; then replica 1 is killed with SIGKILL
    right after its last reply. Replica 2 has both holds with their exact holdUntil and
    promotes nobody; its alarm ends the short one at holdUntil (the parked waiter granted),
    a provider-terminal receipt through it ends the long one; a restarted replica 1 agrees."""
    done = cli("migrate", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "token"
    write_token_file(token_file)
    config = make_config(lane_holds={SHORT: KILL_HOLD})

    def start(name: str) -> CoordinatorProcess:
        return start_coordinator(tmp_path / name, token_file=token_file, config=config,
                                 store=pg_dsn)  # fmt: skip

    r1, r2 = start("r1"), start("r2")
    jobs: dict[str, str] = {}
    waiters: dict[str, str] = {}
    for lane in (LONG, SHORT):
        body = {**acquire_body("studio-a", "s1"), "lane": lane, "claimId": "cA"}
        jobs[lane] = r1.op("acquire", body)["ticket"]["ticketId"]
        body = {**acquire_body("studio-b", "s2"), "lane": lane, "claimId": "cB", "project": "p2"}
        waiters[lane] = r2.op("acquire", body)["ticket"]["ticketId"]
        r1.op("receipt", receipt_body(lane, jobs[lane], "provider-submitted", {"job": lane},
                                      machine="studio-a", claim="cA"))  # fmt: skip
        rel = r1.op(
            "release", ticket_body(lane, jobs[lane], "studio-a", "cA", outcome="lease-lost")
        )
        assert rel["released"] is True and rel["promoted"] == [], rel
    before = {lane: r1.op("status", {"lane": lane}) for lane in (LONG, SHORT)}
    assert r1.kill9() == -signal.SIGKILL  # the replica that made both holds is gone

    for lane in (LONG, SHORT):
        st = r2.op("status", {"lane": lane})
        assert st["inFlight"] == before[lane]["inFlight"] != [], (lane, st)  # exact holdUntil
        assert st["held"] == [] and [t["ticketId"] for t in st["queued"]] == [waiters[lane]]
    [short] = before[SHORT]["inFlight"]
    assert short["holdUntil"] == short["submittedAt"] + KILL_HOLD
    [long] = before[LONG]["inFlight"]
    assert long["holdUntil"] == long["submittedAt"] + 1800
    assert time.time() < short["holdUntil"], "too slow: the short hold ran out already; rerun"

    # the short hold: the survivor's alarm ends it at holdUntil; the parked waiter is granted
    deadline = time.monotonic() + KILL_HOLD + 30
    woke: dict[str, Any] = {}
    while not woke.get("granted"):
        assert time.monotonic() < deadline, woke
        woke = r2.op("await", ticket_body(SHORT, waiters[SHORT], "studio-b", "cB",
                                          waitSeconds=30))  # fmt: skip
    held_at = woke["ticket"]["heldAt"]
    assert short["holdUntil"] <= held_at < short["holdUntil"] + ALARM_POLL_SECONDS + 2
    [row] = [e for e in r2.op("history", {"lane": SHORT})["entries"]
             if e["ticketId"] == jobs[SHORT]]  # fmt: skip
    assert (row["inFlightUntil"], row["inFlightEnded"]) == (short["holdUntil"], "expired")

    # the long one: still there; the provider-terminal receipt through the survivor ends it
    assert r2.op("status", {"lane": LONG})["inFlight"] == [long]
    r2.op("receipt", receipt_body(LONG, jobs[LONG], "provider-terminal", {"job": LONG},
                                  machine="studio-a", claim="cA"))  # fmt: skip
    st = r2.op("status", {"lane": LONG})
    assert st["inFlight"] == [] and [t["ticketId"] for t in st["held"]] == [waiters[LONG]]

    again = start("r1-again")  # the killed replica back: the same story from the database
    for lane in (LONG, SHORT):
        st = again.op("status", {"lane": lane})
        assert st["inFlight"] == [] and [t["ticketId"] for t in st["held"]] == [waiters[lane]]
