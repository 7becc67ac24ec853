"""Process faults under load, judged by the recorded-history checker: (a) kill -9 of the
server, restarted on the same data dir; (b) the server frozen (SIGSTOP) for longer than a
lease; (c) a holding client frozen until its lease expires.

Eight clients (tests/faults/load.py) cycle on `solo:fa` (capacity 1, three clients),
`solo:fb` (capacity 1, two) and `duo:fa` (capacity 2, three) against one
`lane-coordinator serve`; afterwards the checker reads every lane's status and history and
checks the ledger against it: nothing acknowledged lost, fences strictly increasing, never
more holders than capacity, no ended ticket revived.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.kit import assert_clean, assert_no_traceback, pick, readyz, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import REPO, LineProcess, StartCoordinator, make_config
from tests.harness.history import Ledger
from tests.harness.load import Settings, Target

LEASE = 15.0  # the protocol's minimum lease
FREEZE = LEASE + 2.5  # a freeze longer than a lease


# ---------------------------------------------------------------- (a) kill -9


@pytest.mark.fault("(a) kill -9 of the server × N, restart on the same data dir")
async def test_kill9_under_load(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    kills = pick(2, 12)
    s = seed()
    rng = random.Random(s)
    data = tmp_path / "data"
    servers = [start_coordinator(data, config=make_config())]
    target = Target([servers[0].url], servers[0].token)
    load = base_load(target, seed=s)
    restarts: list[float] = []
    progress: list[int] = []
    try:
        mark = load.ledger.mark("start")
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.7, 2.5))
            progress.append(load.ledger.acknowledged_after(mark))
            await asyncio.to_thread(servers[-1].kill9)
            began = time.monotonic()
            mark = load.ledger.mark("kill")
            srv = await asyncio.to_thread(start_coordinator, data, config=make_config())
            restarts.append(time.monotonic() - began)
            servers.append(srv)
            target.urls = [srv.url]
        await asyncio.sleep(2.0)
        progress.append(load.ledger.acknowledged_after(mark))
    finally:
        await load.finish()
    report = await load.verify()
    row.report(report)
    row.note(
        f"{kills} kills, {load.cycles} cycles, {report.unacknowledged} attempts unanswered "
        f"or 503, restart {min(restarts):.1f}–{max(restarts):.1f} s, {load.jobs} provider "
        f"jobs, {report.in_flight} in-flight holds judged, seed {s}"
    )
    print(f"\n{report.summary('kill9')}; acks per incarnation {progress}")
    assert_clean(report, load, servers)
    assert all(n > 0 for n in progress), f"an incarnation acknowledged nothing: {progress}"
    assert report.in_flight > 0, "no in-flight hold to judge"
    assert_no_traceback(servers)


# ---------------------------------------------------------------- (b) SIGSTOP of the server


@pytest.mark.fault("(b) SIGSTOP of the server longer than a lease, then SIGCONT")
async def test_server_frozen_longer_than_a_lease(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    rounds = pick(1, 3)
    s = seed()
    rng = random.Random(s)
    srv = start_coordinator(tmp_path / "data", config=make_config())
    target = Target([srv.url], srv.token)
    load = base_load(target, Settings(lease_seconds=LEASE), seed=s)
    after: list[int] = []
    try:
        for _ in range(rounds):
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            srv.signal(signal.SIGSTOP)
            frozen = load.ledger.mark("frozen")
            try:
                await asyncio.sleep(FREEZE)
            finally:
                srv.signal(signal.SIGCONT)
            thawed = load.ledger.mark("thawed")
            await asyncio.sleep(3.0)
            assert load.ledger.acknowledged_after(frozen) > 0
            after.append(load.ledger.acknowledged_after(thawed))
        ready, _ = await readyz(srv.url)
    finally:
        await load.finish()
    report = await load.verify()
    reaped = load.outcomes()["expired"]
    told = sum(c.lease_lost for c in load.clients)
    row.report(report)
    row.note(
        f"{rounds} × {FREEZE:g} s frozen (lease {LEASE:g} s): {reaped} leases reaped on "
        f"resume ({told} holders told `expired`, the others' release retries "
        f"`already-done`), /readyz {ready} after; {load.jobs} provider jobs, "
        f"{report.in_flight} in-flight holds judged ({load.abandoned} leases left to expire "
        f"after the submit); {load.cycles} cycles, seed {s}"
    )
    print(f"\n{report.summary('sigstop-server')}; acks after each thaw {after}")
    assert_clean(report, load, [srv])
    assert load.abandoned >= 1 and report.in_flight >= load.abandoned, (
        load.abandoned, report.in_flight,
    )  # fmt: skip
    assert reaped >= rounds, "no holder lost its lease in a freeze longer than a lease"
    assert all(n > 0 for n in after), f"nothing acknowledged after a thaw: {after}"
    assert ready == 200, ready
    assert_no_traceback([srv])


# ---------------------------------------------------------------- (c) SIGSTOP of a holder


def replay(ledger: Ledger, client: str, lines: list[str]) -> list[dict[str, Any]]:
    """Put a worker's printed attempts into the ledger; returns its other events."""
    entries = {}
    events = []
    for ln in lines:
        if not ln.startswith("{"):
            continue
        rec = json.loads(ln)
        ev = rec.pop("ev")
        if ev == "sent":
            entries[rec["seq"]] = ledger.sent(
                client, rec["op"], rec["lane"], rec["body"], target=rec["url"], at=rec["t"]
            )
        elif ev == "replied":
            ledger.replied(entries[rec["seq"]], rec["status"], rec["reply"], at=rec["t"])
        elif ev == "failed":
            ledger.failed(entries[rec["seq"]], rec["error"], at=rec["t"])
        else:
            events.append({"ev": ev, **rec})
    return events


def _events(proc: LineProcess, name: str) -> list[dict[str, Any]]:
    out = []
    for ln in list(proc.lines):
        if ln.startswith("{"):
            rec = json.loads(ln)
            if rec.get("ev") == name:
                out.append(rec)
    return out


async def _wait_for(proc: LineProcess, name: str, count: int, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        got = _events(proc, name)
        if len(got) >= count:
            return got[count - 1]
        if proc.proc.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"worker: no {name} #{count}; output:\n{proc.text[-3000:]}")
        await asyncio.sleep(0.05)


@pytest.mark.fault("(c) SIGSTOP of a holding client until its lease expires")
async def test_frozen_holder_loses_its_lease(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    rounds = pick(1, 2)
    s = seed()
    srv = start_coordinator(tmp_path / "data", config=make_config())
    target = Target([srv.url], srv.token)
    load = base_load(target, seed=s)
    lane = "solo:fa"  # three load clients wait there while the victim holds
    worker = LineProcess(
        [sys.executable, "-m", "tests.faults.worker", srv.url, srv.token, lane, "victim",
         str(rounds), "3"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=REPO,
    )  # fmt: skip
    promoted_late: list[float] = []
    try:
        for n in range(1, rounds + 1):
            holding = await _wait_for(worker, "holding", n, 60)
            worker.signal(signal.SIGSTOP)
            try:
                # until the alarm reaped the victim's lease and promoted the next waiter
                end = time.monotonic() + LEASE + 20
                while True:
                    st = await asyncio.to_thread(srv.status, lane)
                    held = st["held"]
                    if held and held[0]["ticketId"] != holding["ticketId"]:
                        break
                    assert time.monotonic() < end, f"the victim's lease was never reaped: {st}"
                    await asyncio.sleep(0.25)
            finally:
                worker.signal(signal.SIGCONT)
            done = await _wait_for(worker, "round", n, 60)
            beat, rel = done["heartbeat"], done["release"]
            assert (beat["refreshed"], beat["reason"]) == (False, "expired"), beat
            assert (rel["released"], rel["reason"], rel["state"]) == (
                False,
                "expired",
                "done",
            ), rel
            hist = await asyncio.to_thread(srv.history, lane)
            [mine] = [e for e in hist["entries"] if e["ticketId"] == holding["ticketId"]]
            assert (mine["outcome"], mine["lateOutcome"]) == ("expired", "lease-lost"), mine
            next_grant = min(
                e["heldAt"]
                for e in [*hist["entries"], *st["held"]]
                if e["fence"] == holding["fence"] + 1
            )
            promoted_late.append(next_grant - mine["endedAt"])
        assert await asyncio.to_thread(worker.wait, 60) == 0, worker.text[-3000:]
        await asyncio.sleep(1.0)
    finally:
        worker.kill()
        await load.finish()
    replay(load.ledger, "victim", worker.lines)
    report = await load.verify()
    row.report(report)
    row.note(
        f"{rounds} holder(s) frozen past the {LEASE:g} s lease: reaped, the next waiter "
        f"promoted {max(promoted_late) * 1000:.0f} ms after expiry at most, late release "
        f"answered `released: false, reason: expired` (lateOutcome kept); seed {s}"
    )
    assert_clean(report, load, [srv])
    assert all(0 <= d < 1.0 for d in promoted_late), promoted_late
    assert_no_traceback([srv])
