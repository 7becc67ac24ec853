"""(i) The PostgreSQL store under faults: two `serve --store URL` replicas on one fresh
database (the session's throwaway cluster, tests/harness/postgres.py), eight clients
alternating between them (moving to the other replica on a refused or dropped connection, a
timeout or a 503). Under load: a kill -9 of one replica (then restarted), and PostgreSQL
stopped and started again (`fast`, and in the full run also `immediate` and a kill -9 of
the postmaster). Afterwards the recorded-history checker over both replicas' views.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

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
