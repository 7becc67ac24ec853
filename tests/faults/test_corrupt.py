"""(g) Corrupt lane files (random bytes) next to healthy lanes, under load: one there at
startup, one dropped into the data dir while the server runs, then a kill -9 and a restart
with both. The healthy lanes keep working (the recorded-history checker judges them), the
broken ones answer 503 `unavailable` naming the cause and are listed in /v1/lanes with their
error, counted in /readyz and the `lanes_open_failures` gauge, and their files are never
modified.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.faults.kit import assert_clean, assert_no_traceback, pick, readyz, seed
from tests.faults.load import base_load
from tests.faults.table import Row
from tests.harness import StartCoordinator, make_config
from tests.harness.load import Target

BROKEN = {"solo:broken": "solo+broken.sqlite", "duo:junk": "duo+junk.sqlite"}


async def _hammer(target: Target, lanes: list[str], stop: asyncio.Event) -> list[Any]:
    """Status and acquire on the broken lanes until `stop`: every (status, body)."""
    seen: list[Any] = []
    headers = {"Authorization": f"Bearer {target.token}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        n = 0
        while not stop.is_set():
            n += 1
            for lane in list(lanes):
                for op, extra in (
                    ("status", {}),
                    ("acquire", {"machineId": "h", "project": "p", "scene": str(n),
                                 "promptHash": "h"}),
                ):  # fmt: skip
                    body = {"protocolVersion": 1, "lane": lane, **extra}
                    try:
                        async with s.post(
                            f"{target.urls[0]}/v1/lanes/{op}",
                            json=body,
                            timeout=aiohttp.ClientTimeout(total=10),
                        ) as r:
                            seen.append((lane, op, r.status, await r.json(content_type=None)))
                    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                        seen.append((lane, op, None, type(exc).__name__))  # a restart
            await asyncio.sleep(0.2)
    return seen


@pytest.mark.fault("(g) corrupt lane files next to healthy lanes, and a restart")
async def test_corrupt_lane_files(
    row: Row, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    s = seed()
    rng = random.Random(s)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    junk = {lane: os.urandom(8192) for lane in BROKEN}
    (data / BROKEN["solo:broken"]).write_bytes(junk["solo:broken"])
    servers = [start_coordinator(data, config=make_config())]
    target = Target([servers[0].url], servers[0].token)
    load = base_load(target, seed=s)
    hammered = ["solo:broken"]
    stop = asyncio.Event()
    hammer = asyncio.create_task(_hammer(target, hammered, stop))
    try:
        await asyncio.sleep(rng.uniform(2.0, pick(3.0, 6.0)))
        (data / BROKEN["duo:junk"]).write_bytes(junk["duo:junk"])  # appears while serving
        hammered.append("duo:junk")
        await asyncio.sleep(rng.uniform(2.0, pick(3.0, 6.0)))
        await asyncio.to_thread(servers[-1].kill9)
        srv = await asyncio.to_thread(start_coordinator, data, config=make_config())
        servers.append(srv)
        target.urls = [srv.url]
        restarted = load.ledger.mark("restarted")
        await asyncio.sleep(pick(3.0, 8.0))
    finally:
        stop.set()
        seen = await hammer
        await load.finish()
    srv = servers[-1]
    report = await load.verify()
    status, listing = srv.request("GET", "/v1/lanes")
    errors = {x["lane"]: x.get("error") for x in listing["lanes"]} if status == 200 else {}
    reads = {p: srv.request("GET", p)[0] for p in ("/v1/incidents", "/v1/overview")}
    ready = await readyz(srv.url)
    metrics = srv.request("GET", "/metrics")[1]
    gauge = [ln for ln in str(metrics).splitlines() if ln.startswith("lanes_open_failures ")]
    failed = {e["lane"]: e["reason"] for e in srv.events("lane.open_failed")}
    answers = Counter((op, st) for _, op, st, _ in seen)
    bad = [x for x in seen if x[2] is not None and not (x[2] == 503 and "corrupt" in str(x[3]))]
    row.report(report)
    row.note(
        f"broken lanes answered {dict(answers)}; /v1/lanes errors "
        f"{ {k: v for k, v in errors.items() if v} }; /readyz {ready}; {gauge}; restart logged "
        f"lane.open_failed for {sorted(failed)}; {load.ledger.acknowledged_after(restarted)} "
        f"acks after the restart; seed {s}"
    )
    assert_clean(report, load, servers)
    assert status == 200, listing
    for lane in BROKEN:
        assert str(errors.get(lane, "")).startswith("corrupt file"), (lane, errors)
        assert str(failed.get(lane, "")).startswith("corrupt file"), (lane, failed)
        assert (data / BROKEN[lane]).read_bytes() == junk[lane], f"{lane}'s file was modified"
    assert not any(errors.get(lane) for lane in load.lanes), errors
    assert reads == {"/v1/incidents": 200, "/v1/overview": 200}, reads
    assert ready == (200, {"ready": True, "brokenLanes": len(BROKEN)}), ready
    assert gauge == [f"lanes_open_failures {float(len(BROKEN))}"], gauge
    assert not bad, bad[:5]
    assert load.ledger.acknowledged_after(restarted) > 0
    assert_no_traceback(servers)
