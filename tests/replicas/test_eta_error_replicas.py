"""The ETA error on two replicas of one PostgreSQL database (docs/protocol.md#eta-error): the
scenario of tests/integration/test_eta_error.py with its calls taking turns over the two
replicas; each replica reports the same `etaError`, computed from what the test did, and a
replica started afterwards rebuilds it from the stored tickets."""

from __future__ import annotations

from pathlib import Path

from coordinator.store.postgres_db import migrate
from tests.harness import TestManualClock, make_config, start_running
from tests.integration.test_eta_error import assert_reported, by_rank, run_scenario

LANE = "solo:eta"


async def test_both_replicas_report_the_eta_error_that_happened(
    tmp_path: Path, pg_dsn: str
) -> None:
    migrate(pg_dsn)
    clock = TestManualClock()
    running = [
        await start_running(tmp_path / f"r{i}", config=make_config(), clock=clock, store=pg_dsn)
        for i in (1, 2)
    ]
    try:
        known = await run_scenario(running, clock, LANE)
        assert known.errors() == [0.0, 180.0, 280.0, 140.0, 1695.0, 100.0]
        want = by_rank(known.errors())
        for srv in running:
            assert await assert_reported(srv, known) == want
        third = await start_running(
            tmp_path / "r3", config=make_config(), clock=clock, store=pg_dsn
        )
        running.append(third)
        assert (await third.ok("status", {"lane": LANE}))["etaError"] == want
    finally:
        for srv in running:
            await srv.stop()
