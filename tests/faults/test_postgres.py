"""(i) The PostgreSQL store under faults: two `serve --store URL` replicas on one fresh
database (the session's throwaway cluster, tests/harness/postgres.py), eight clients
alternating between them (moving to the other replica on a refused or dropped connection, a
timeout or a 503). Under load: a kill -9 of one replica (then restarted), and PostgreSQL
stopped and started again (`fast`, and in the full run also `immediate` and a kill -9 of
the postmaster). Afterwards the recorded-history checker over both replicas' views. A second
row freezes one replica inside a lane transaction (a failpoint: SIGSTOP right after it
locked the lane) and checks the other serves that lane within `replica_stall_seconds` + 2 s.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.failpoints import ENV as FAILPOINTS_ENV
from tests.faults.kit import assert_clean, assert_no_traceback, pick, readyz, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import CoordinatorProcess, StartCoordinator, cli, make_config, write_token_file
from tests.harness.load import Settings, Target
from tests.harness.postgres import PostgresCluster


@pytest.mark.fault("(i) PostgreSQL: replica kill -9 and database restarts under load")
async def test_postgres_replicas_under_faults(
    row: Row,
    start_coordinator: StartCoordinator,
    postgres: PostgresCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    s = seed()
    rng = random.Random(s)
    done = cli("migrate", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "token"
    write_token_file(token_file)

    def start(name: str) -> CoordinatorProcess:
        return start_coordinator(tmp_path / name, token_file=token_file, config=make_config(),
                                 store=pg_dsn)  # fmt: skip

    replicas = {"r1": start("r1"), "r2": start("r2")}
    everyone = list(replicas.values())
    target = Target([r.url for r in replicas.values()], everyone[0].token)
    load = base_load(target, Settings(op_deadline=60.0), seed=s)
    outages: list[str] = []
    stops: list[tuple[str, Callable[[], object]]] = [("fast", lambda: postgres.stop("fast"))]
    harsher: list[tuple[str, Callable[[], object]]] = [
        ("immediate", lambda: postgres.stop("immediate")),
        ("kill -9", postgres.kill9),
    ]
    stops += pick([], harsher)
    try:
        for _ in range(pick(1, 2)):  # a replica killed and started again
            await asyncio.sleep(rng.uniform(1.5, 3.0))
            name = rng.choice(sorted(replicas))
            await asyncio.to_thread(replicas[name].kill9)
            killed = load.ledger.mark("replica-killed")
            await asyncio.sleep(2.0)
            assert load.ledger.acknowledged_after(killed) > 0, "the survivor served nothing"
            replicas[name] = await asyncio.to_thread(start, name)
            everyone.append(replicas[name])
            target.urls = [r.url for r in replicas.values()]
            outages.append(f"{name} kill -9")
        for label, stop in stops:  # the database down and back
            await asyncio.sleep(rng.uniform(1.5, 3.0))
            try:
                await asyncio.to_thread(stop)
                down = load.ledger.mark("pg-down")
                statuses = [(await readyz(r.url))[0] for r in replicas.values()]
                await asyncio.sleep(2.0)
            finally:
                await asyncio.to_thread(postgres.start)
            up = load.ledger.mark("pg-up")
            met = load.ledger.unavailable_between(down, up)
            assert met > 0, f"no call met the database outage ({label})"
            outages.append(f"pg {label} ({met} calls 503/dropped, /readyz {statuses})")
            await asyncio.sleep(3.0)
            assert load.ledger.acknowledged_after(up) > 0, f"nothing served after pg {label}"
    finally:
        if not postgres.running():
            postgres.start()
        await load.finish()
    urls = [r.url for r in replicas.values()]
    report = await load.verify(urls[0])
    other = await load.verify(urls[1])  # the other replica reads the same
    row.report(report)
    row.note(
        f"{'; '.join(outages)}; {load.cycles} cycles; second replica's view: lost "
        f"{other.lost}, violations {len(other.violations)}; seed {s}"
    )
    assert_clean(report, load, everyone)
    assert_clean(other, load, everyone)
    assert [(await readyz(u))[0] for u in urls] == [200, 200]
    assert_no_traceback(everyone)


STALL = 5.0  # replica_stall_seconds of the frozen-replica row


@pytest.mark.fault("(i) PostgreSQL: replica frozen mid-transaction")
async def test_a_replica_frozen_mid_transaction(
    row: Row,
    start_coordinator: StartCoordinator,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Replica r1 freezes (SIGSTOP, the failpoint `pg.lane_locked`, armed by a marker file at
    a random moment under load) right after it locked `solo:fa`; it stays frozen longer than
    the stall, then gets SIGCONT. The survivor must serve that lane within
    `replica_stall_seconds` + 2 s of the freeze; nothing acknowledged is lost."""
    s = seed()
    rng = random.Random(s)
    done = cli("migrate", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "token"
    write_token_file(token_file)
    marker = tmp_path / "freeze"
    config = make_config(replica_stall_seconds=STALL)
    armed = {FAILPOINTS_ENV: f"pg.lane_locked=1*stop@lane=solo:fa@file={marker}"}
    r1 = start_coordinator(
        tmp_path / "r1", token_file=token_file, config=config, store=pg_dsn, extra_env=armed
    )
    r2 = start_coordinator(tmp_path / "r2", token_file=token_file, config=config, store=pg_dsn)
    target = Target([r1.url, r2.url], r1.token)
    load = base_load(target, Settings(op_deadline=60.0), seed=s)
    freeze = pick(8.0, 20.0)
    try:
        await asyncio.sleep(rng.uniform(1.5, 3.0))
        marker.touch()
        deadline = asyncio.get_running_loop().time() + 30
        while not r1.stopped:
            assert asyncio.get_running_loop().time() < deadline, "r1 never froze"
            await asyncio.sleep(0.01)
        frozen = load.ledger.mark("frozen")
        await asyncio.sleep(freeze)
        r1.signal(signal.SIGCONT)
        resumed = load.ledger.mark("resumed")
        await asyncio.sleep(3.0)
    finally:
        if r1.proc.poll() is None:
            r1.signal(signal.SIGCONT)
        await load.finish()
    served = sorted(
        (e.replied_at or e.sent_at) - frozen
        for e in load.ledger.snapshot()
        if e.acknowledged and e.lane == "solo:fa" and e.target == r2.url and e.sent_at > frozen
    )
    report = await load.verify(r2.url)
    other = await load.verify(r1.url)
    row.report(report)
    blocked = f"{served[0]:.1f} s" if served else "never"
    woke = load.ledger.acknowledged_after(resumed)
    row.note(
        f"r1 frozen {freeze:g} s holding solo:fa's lock; r2 served it after {blocked} "
        f"(stall {STALL:g} s); acknowledged after the wake {woke}"
        f"; r1's view: lost {other.lost}, violations {len(other.violations)}; seed {s}"
    )
    assert_clean(report, load, [r1, r2])
    assert_clean(other, load, [r1, r2])
    assert served and served[0] <= STALL + 2, f"solo:fa on r2 after the freeze: {served[:3]}"
    assert load.ledger.acknowledged_after(resumed) > 0
    assert [(await readyz(u))[0] for u in (r1.url, r2.url)] == [200, 200]
    assert_no_traceback([r1, r2])
