"""A replica frozen inside a lane transaction blocks that lane on the other replicas for at
most `replica_stall_seconds` (docs/protocol.md#replica-stall).

Two real `serve --store URL` replicas on one fresh database, `replica_stall_seconds = 5`.
Replica 1 runs with the failpoint `pg.lane_locked=1*stop@lane=solo:frozen@file=<marker>`
(coordinator/failpoints.py): once the test has created the marker file (replica 1 has served
the lane before: its actor is open), the lane's next transaction there — the frozen call, an
acquire — sends the process SIGSTOP right after the lane's row is locked: a real freeze of
the whole replica, holding the lock, exactly where the test wants it. The test sends SIGCONT
25 s later. Meanwhile, replica 2 must serve the lane — an acquire, a second acquire that
queues and parks an await, the release that wakes it — each answered within
`replica_stall_seconds` + 2 s of the freeze.
After SIGCONT, replica 1 answers the frozen call 503 (its transaction was ended by the
database: nothing of it committed) and then serves the lane again. Every attempt is in a
`Ledger`, judged at the end by the recorded-history checker (tests/harness/history.py)
through both replicas: nothing acknowledged lost, no violation.

Before this was built the lane was blocked on replica 2 for the whole freeze (its lock waits
gave up after 5 s, answered 503 and were retried, until the frozen replica woke and
committed).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp

from coordinator.failpoints import ENV as FAILPOINTS_ENV
from tests.harness import CoordinatorProcess, cli, make_config, write_token_file
from tests.harness.history import Ledger, check, read_views
from tests.harness.load import Client, Settings, Target, decode

STALL = 5.0  # replica_stall_seconds
FREEZE = 25.0  # seconds replica 1 stays frozen
LANE = "solo:frozen"


async def _wait_stopped(proc: CoordinatorProcess, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not proc.stopped:
        assert proc.proc.poll() is None, f"replica 1 exited:\n{proc.text[-3000:]}"
        assert loop.time() < deadline, f"replica 1 never froze:\n{proc.text[-3000:]}"
        await asyncio.sleep(0.01)


async def _readyz(session: aiohttp.ClientSession, url: str) -> int | None:
    try:
        async with session.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=3)) as r:
            return r.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def test_a_frozen_replica_blocks_a_lane_for_at_most_the_stall_budget(
    pg_dsn: str, tmp_path: Path
) -> None:
    done = cli("migrate", "--store", pg_dsn)
    assert done.returncode == 0, done.stderr
    token_file = tmp_path / "token"
    token = write_token_file(token_file)
    config = make_config(replica_stall_seconds=STALL)
    marker = tmp_path / "freeze"
    armed = {FAILPOINTS_ENV: f"pg.lane_locked=1*stop@lane={LANE}@file={marker}"}
    r1 = CoordinatorProcess(tmp_path / "r1", token_file, config, store=pg_dsn, extra_env=armed)
    try:
        r2 = CoordinatorProcess(tmp_path / "r2", token_file, config, store=pg_dsn)
    except BaseException:
        r1.kill()
        raise
    ledger = Ledger()
    numbers: dict[str, float] = {}
    resume: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as session:

            def client(n: int, url: str, deadline: float = 60.0) -> Client:
                settings = Settings(op_deadline=deadline, call_timeout=FREEZE + 30)
                target = Target([url], token)
                return Client(n, [LANE], target, ledger, session, settings, n, lease_loss=False)

            def acquire(scene: str) -> dict[str, Any]:
                return {"project": "p", "scene": scene, "promptHash": "h"}

            def release(reply: dict[str, Any]) -> dict[str, Any]:
                return {"ticketId": reply["ticket"]["ticketId"], "outcome": "completed"}

            # Replica 1 has served the lane (its actor is open, its pool keeps sessions).
            warm = client(9, r1.url, deadline=5.0)
            held = await warm.call(LANE, "acquire", acquire("warm"))
            await warm.call(LANE, "release", release(held))
            marker.touch()  # armed: the lane's next transaction on replica 1 freezes

            # The frozen call: an acquire on replica 1, sent once, waited for at length.
            f_body = {
                "protocolVersion": 1,
                "lane": LANE,
                "machineId": "m0",
                "claimId": "claim-0",
                **acquire("f"),
            }

            async def frozen_call() -> tuple[int | None, Any]:
                entry = ledger.sent("c0", "acquire", LANE, f_body, target=r1.url)
                try:
                    async with session.post(
                        f"{r1.url}/v1/lanes/acquire",
                        json=f_body,
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=aiohttp.ClientTimeout(total=FREEZE + 30),
                    ) as resp:
                        data = decode(await resp.read())
                        ledger.replied(entry, resp.status, data)
                        return resp.status, data
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    ledger.failed(entry, type(exc).__name__)
                    return None, type(exc).__name__

            in_flight = asyncio.create_task(frozen_call())
            await _wait_stopped(r1)
            frozen = ledger.mark("frozen")

            async def sigcont_later() -> None:
                await asyncio.sleep(max(0.0, frozen + FREEZE - ledger.clock()))
                r1.signal(signal.SIGCONT)
                ledger.mark("resumed")

            resume = asyncio.create_task(sigcont_later())

            # Replica 2 serves the lane: acquire, a second acquire parks an await, the
            # release wakes it.
            a, b = client(1, r2.url), client(2, r2.url)
            a_held = await a.call(LANE, "acquire", acquire("a"))
            numbers["acquire"] = ledger.clock() - frozen
            assert numbers["acquire"] <= STALL + 2, f"acquire on replica 2 took {numbers}"
            assert a_held["ticket"]["state"] == "held", a_held
            assert r1.stopped, "replica 1 woke early"
            ready = await _readyz(session, r2.url)
            b_queued = await b.call(LANE, "acquire", acquire("b"))
            assert b_queued["ticket"]["state"] == "queued", b_queued
            wait = {"ticketId": b_queued["ticket"]["ticketId"], "waitSeconds": 30}
            parked = asyncio.create_task(b.call(LANE, "await", wait, wait=30))
            await asyncio.sleep(0.3)  # parked on replica 2
            assert not parked.done(), parked
            await a.call(LANE, "release", release(a_held))
            numbers["release"] = ledger.clock() - frozen
            b_held = await asyncio.wait_for(parked, 10)
            numbers["await woken"] = ledger.clock() - frozen
            assert b_held["ticket"]["state"] == "held", b_held
            assert numbers["await woken"] <= STALL + 2, f"replica 2 on the lane: {numbers}"
            assert r1.stopped, "replica 1 woke early"
            await b.call(LANE, "release", release(b_held))
            assert ready == 200, f"replica 2's /readyz during the freeze: {ready}"

            # Replica 1 wakes: its frozen call is answered 503 (or not at all), never 2xx.
            await resume
            status, reply = await asyncio.wait_for(in_flight, 30)
            numbers["frozen call answered"] = ledger.clock() - frozen
            assert status is None or status == 503, (status, reply)
            # ... and it serves the lane again at once: the same acquire, retried there.
            f = client(0, r1.url, deadline=0.0)  # one attempt
            f_held = await f.call(LANE, "acquire", acquire("f"))
            numbers["replica 1 serves again"] = ledger.clock() - frozen
            assert f_held["ticket"]["state"] == "held", f_held
            await f.call(LANE, "release", release(f_held))
            failed = r1.events("lane.commit_failed")
            assert [e.get("lane") for e in failed] == [LANE], failed

        views = await read_views(r2.url, token, {LANE})
        report = check(ledger, views)
        other = check(ledger, await read_views(r1.url, token, {LANE}))
        print(
            "\nstalled-replica: lane answered on replica 2 after "
            + ", ".join(f"{k} {v:.2f} s" for k, v in numbers.items())
            + f" (from the freeze); frozen call {status}; {report.summary('stalled-replica')}"
        )
        assert report.ok, f"{report.summary('stalled')}\n{report.explain()}"
        assert other.ok, f"{other.summary('stalled, replica 1')}\n{other.explain()}"
        assert report.acknowledged >= 8
    finally:
        if resume is not None:
            resume.cancel()
        if r1.proc.poll() is None:
            r1.signal(signal.SIGCONT)  # a stopped process would not handle SIGTERM
        r1.stop()
        r2.stop()
