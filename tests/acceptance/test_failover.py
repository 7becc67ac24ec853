"""Replicas under faults, judged by the recorded-history checker (tests/harness/history.py).

Two real `lane-coordinator serve --store URL` replicas share one fresh PostgreSQL database
(`pg_dsn`), one token file and the default test config. Eight client tasks
(tests/harness/load.py: raw aiohttp, so every attempt and every 2xx reply lands in the ledger
exactly as it happened) cycle on three lanes — `solo:fo-a` (capacity 1, three clients),
`solo:fo-b` (capacity 1, two), `duo:fo-a` (capacity 2, three): acquire, await until held,
heartbeat, release. Each call starts on the replica after the one the client's previous call
started on, and moves to the other replica on a refused or dropped connection, a timeout or
a 503, retrying the same body (every mutation is idempotent: acquire by identity and claim,
the rest by ticket). Any other answer, and a lease lost, is a client problem: the test fails.

- kill -9 of one replica at a random moment: the clients carry on with the survivor; then
  the checker, over the survivor's status and history of every lane: nothing acknowledged
  lost, no violation, and work acknowledged after the kill.
- PostgreSQL stopped (fast) under load and started again: while it is down the replicas
  answer 503 (or drop) and `/readyz` is 503; once it is back both replicas serve again;
  nothing acknowledged lost, no violation.
- An idle replica whose pool keeps sessions, PostgreSQL restarted: once /readyz says ready,
  its next mutations commit at the first attempt (dead pooled sessions are replaced at
  BEGIN, before anything of the lane was sent in them).

Each test prints one summary line (`-s` shows it); FAILOVER_SEED=<n> replays a run's random
choices (the kill's moment and victim, the hold times); FAILOVER_PG_STOP=immediate|kill9
makes the outage a harsher one (an immediate shutdown, a crash of the postmaster).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest

from tests.harness import CoordinatorProcess, cli, make_config
from tests.harness.config import write_token_file
from tests.harness.history import Ledger, Report
from tests.harness.load import Load, Settings, Target
from tests.harness.postgres import PostgresCluster

CLIENT_LANES = ["solo:fo-a"] * 3 + ["solo:fo-b"] * 2 + ["duo:fo-a"] * 3
# each call may keep retrying for 25 s (an outage lasts a few); 5 s an attempt, await's own
# wait added; 2 s awaits; a backoff up to 0.4 s; holds of 10 to 80 ms
SETTINGS = Settings(op_deadline=25.0)
RUN_AFTER_FAULT = 4.0  # seconds of load after the kill / after PostgreSQL is back


def _seed() -> int:
    return int(os.environ.get("FAILOVER_SEED", random.randrange(2**31)))


# ---------------------------------------------------------------- replicas


@pytest.fixture
def replicas(pg_dsn: str, tmp_path: Path) -> Iterator[list[CoordinatorProcess]]:
    """Two replicas on the migrated database, one token file, started side by side."""
    done = cli("migrate", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "token"
    write_token_file(token_file)
    config = make_config()

    def start(name: str) -> CoordinatorProcess:
        return CoordinatorProcess(tmp_path / name, token_file, config, store=pg_dsn)

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(start, name) for name in ("r1", "r2")]
        started = []
        for fut in futures:
            try:
                started.append(fut.result())
            except Exception:
                for r in started:
                    r.kill()
                raise
    yield started
    for r in started:
        r.stop()


# ---------------------------------------------------------------- clients


def _load(replicas: list[CoordinatorProcess], seed: int) -> Load:
    """The eight clients on both replicas (tests/harness/load.py), until `_finish`."""
    target = Target([r.url for r in replicas], replicas[0].token)
    return Load(target, [[lane] for lane in CLIENT_LANES], SETTINGS, seed=seed)


async def _finish(load: Load) -> None:
    late = await load.finish(timeout=2 * SETTINGS.op_deadline)
    assert not late, f"clients still running {2 * SETTINGS.op_deadline:g} s after the stop: {late}"
    assert not load.problems, load.problems


def _stop_postgres(postgres: PostgresCluster) -> None:
    """The outage: `pg_ctl stop -m fast`, or FAILOVER_PG_STOP=immediate|kill9 (not smart:
    it waits for the replicas' sessions to end, which they never do by themselves)."""
    mode = os.environ.get("FAILOVER_PG_STOP", "fast")
    stops: dict[str, Callable[[], object]] = {
        "fast": lambda: postgres.stop("fast"),
        "immediate": lambda: postgres.stop("immediate"),
        "kill9": postgres.kill9,
    }
    if mode not in stops:
        raise ValueError(f"FAILOVER_PG_STOP={mode!r}: one of {sorted(stops)}")
    stops[mode]()


async def _readyz(session: aiohttp.ClientSession, url: str) -> int | None:
    try:
        async with session.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=3)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


def _acks_via(ledger: Ledger, url: str, after: float) -> int:
    return sum(
        1 for e in ledger.snapshot() if e.acknowledged and e.target == url and e.sent_at > after
    )


def _assert_clean(report: Report, replicas: list[CoordinatorProcess]) -> None:
    if not report.ok:
        logs = "\n".join(
            f"--- {r.url} (exit {r.proc.poll()}) ---\n" + "\n".join(r.lines[-40:]) for r in replicas
        )
        raise AssertionError(f"{report.summary('failover')}\n{report.explain()}\n{logs}")


# ---------------------------------------------------------------- the tests


async def test_kill9_of_one_replica_loses_nothing(replicas: list[CoordinatorProcess]) -> None:
    seed = _seed()
    rng = random.Random(seed)
    load = _load(replicas, seed)
    started = load.ledger.mark("start")
    try:
        await asyncio.sleep(rng.uniform(1.5, 3.5))
        victim = rng.choice(replicas)
        survivor = next(r for r in replicas if r is not victim)
        before_kill = _acks_via(load.ledger, victim.url, started)
        await asyncio.to_thread(victim.kill9)
        killed = load.ledger.mark("kill")
        await asyncio.sleep(RUN_AFTER_FAULT)
    finally:
        await _finish(load)
    report = await load.verify(survivor.url)
    after = load.ledger.acknowledged_after(killed)
    cycles = load.cycles
    survivor_503 = sum(
        1 for e in load.ledger.snapshot() if e.target == survivor.url and e.status == 503
    )
    print(
        f"\n{report.summary('kill9-replica')}; acknowledged after the kill {after}, "
        f"cycles {cycles}, victim acks before the kill {before_kill}, 503 from the survivor "
        f"{survivor_503}, seed {seed}"
    )
    _assert_clean(report, replicas)
    assert before_kill > 0, "the victim served nothing before its kill"
    assert after > 0, "nothing was acknowledged after the kill"
    released_after = sum(
        1
        for e in load.ledger.acknowledged()
        if e.op == "release" and e.sent_at > killed and e.reply and e.reply.get("released")
    )
    assert released_after > 0, "no cycle completed after the kill"


async def test_postgres_restart_under_load(
    replicas: list[CoordinatorProcess], postgres: PostgresCluster
) -> None:
    seed = _seed()
    rng = random.Random(seed)
    urls = [r.url for r in replicas]
    load = _load(replicas, seed)
    ready_503: dict[str, int] = {}
    try:
        await asyncio.sleep(rng.uniform(1.5, 2.5))
        try:
            await asyncio.to_thread(_stop_postgres, postgres)
            down = load.ledger.mark("pg-down")
            # /readyz probes the database at most once a second: give it a few probes
            async with aiohttp.ClientSession() as probe:
                end = time.monotonic() + 6
                while time.monotonic() < end and len(ready_503) < len(urls):
                    for url in urls:
                        if await _readyz(probe, url) == 503:
                            ready_503[url] = ready_503.get(url, 0) + 1
                    await asyncio.sleep(0.2)
            await asyncio.sleep(max(0.0, down + 2.0 - time.monotonic()))  # down >= 2 s
        finally:
            await asyncio.to_thread(postgres.start)
        up = load.ledger.mark("pg-up")
        await asyncio.sleep(RUN_AFTER_FAULT)
    finally:
        if not postgres.running():
            postgres.start()
        await _finish(load)
    report = await load.verify(urls[0])
    refused = load.ledger.unavailable_between(down, up)
    after = load.ledger.acknowledged_after(up)
    per_replica = {url: _acks_via(load.ledger, url, up) for url in urls}
    async with aiohttp.ClientSession() as probe:
        ready_after = {url: await _readyz(probe, url) for url in urls}
    print(
        f"\n{report.summary('postgres-restart')}; outage {up - down:.1f} s, 503/dropped "
        f"during it {refused}, /readyz 503 seen {ready_503}, acknowledged after it {after} "
        f"{list(per_replica.values())}, seed {seed}"
    )
    _assert_clean(report, replicas)
    assert refused > 0, "no call met the outage (503 or a dropped connection)"
    assert set(ready_503) == set(urls), f"/readyz never said 503 on some replica: {ready_503}"
    assert all(n > 0 for n in per_replica.values()), f"a replica did not recover: {per_replica}"
    assert ready_after == dict.fromkeys(urls, 200), ready_after


def test_a_ready_replica_commits_at_once_after_postgres_restarts(
    replicas: list[CoordinatorProcess], postgres: PostgresCluster
) -> None:
    """A replica that had served (so its pool keeps idle sessions) sits idle while
    PostgreSQL restarts; once its /readyz says ready again, its next mutations commit at the
    first attempt: no 503 from a session the restart closed."""
    r = replicas[0]

    def acquire(lane: str, scene: str) -> int:
        body = {"lane": lane, "machineId": "m", "project": "p", "scene": scene}
        status, _ = r.request(
            "POST", "/v1/lanes/acquire", body={"protocolVersion": 1, **body, "promptHash": "h"}
        )
        return status

    with ThreadPoolExecutor(8) as pool:  # several lane transactions at once: several sessions
        before = list(pool.map(lambda i: acquire(f"duo:idle-{i}", "a"), range(8)))
    assert before == [200] * 8
    mark = len(r.lines)
    postgres.restart("fast")
    deadline = time.monotonic() + 30
    while r.request("GET", "/readyz", None)[0] != 200:
        assert time.monotonic() < deadline, "/readyz never said ready again"
        time.sleep(0.2)
    after = [acquire(f"duo:idle-{i}", "b") for i in range(8)]
    failed = [e.get("lane") for e in r.events("lane.begin_failed", mark)]
    print(f"\nready-after-restart: statuses {after}, lane.begin_failed on {failed}")
    assert after == [200] * 8, f"503s from a ready replica: {after}; begin_failed: {failed}"
